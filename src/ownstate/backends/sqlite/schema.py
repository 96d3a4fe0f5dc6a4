"""The SQLite schema, as an ordered list of migrations.

Each migration is applied once, in its own ``BEGIN IMMEDIATE`` transaction, and recorded in
``ownstate_schema``. Never edit a released migration: add a new one. ``docs/schema.md``
describes the tables for people who query them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import access, assets, checkpoints, facts, runs

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "session stores, sessions, items and idempotency keys",
        (
            """
            CREATE TABLE session_stores (
                tenant      TEXT NOT NULL,
                name        TEXT NOT NULL,
                create_time TEXT NOT NULL,
                PRIMARY KEY (tenant, name)
            )
            """,
            """
            CREATE TABLE sessions (
                sid                INTEGER PRIMARY KEY,
                tenant             TEXT NOT NULL,
                store              TEXT NOT NULL,
                session_id         TEXT NOT NULL,
                actor_id           TEXT NOT NULL,
                parent_session_id  TEXT,
                root_session_id    TEXT NOT NULL,
                metadata           TEXT NOT NULL DEFAULT '{}',
                create_time        TEXT NOT NULL,
                last_activity_time TEXT NOT NULL,
                item_count         INTEGER NOT NULL DEFAULT 0,
                UNIQUE (tenant, store, session_id),
                FOREIGN KEY (tenant, store) REFERENCES session_stores (tenant, name)
            )
            """,
            "CREATE INDEX sessions_by_store ON sessions (tenant, store, sid)",
            "CREATE INDEX sessions_by_actor ON sessions (tenant, store, actor_id, sid)",
            """CREATE INDEX sessions_by_activity
               ON sessions (tenant, store, last_activity_time, sid)""",
            """CREATE INDEX sessions_by_parent ON sessions (tenant, store, parent_session_id)
               WHERE parent_session_id IS NOT NULL""",
            """
            CREATE TABLE items (
                id          INTEGER PRIMARY KEY,
                sid         INTEGER NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
                seq         INTEGER NOT NULL,
                tenant      TEXT NOT NULL,
                item_id     TEXT NOT NULL,
                create_time TEXT NOT NULL,
                format      TEXT NOT NULL,
                data        TEXT NOT NULL,
                role        TEXT,
                type        TEXT,
                tool_name   TEXT,
                model       TEXT,
                in_tokens   INTEGER,
                out_tokens  INTEGER,
                UNIQUE (sid, seq)
            )
            """,
            "CREATE UNIQUE INDEX items_by_item_id ON items (tenant, item_id)",
            """
            CREATE TABLE idempotency_keys (
                sid          INTEGER NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
                key          TEXT NOT NULL,
                tenant       TEXT NOT NULL,
                request_hash TEXT NOT NULL,
                item_ids     TEXT NOT NULL,
                create_time  TEXT NOT NULL,
                PRIMARY KEY (sid, key)
            ) WITHOUT ROWID
            """,
            """
            CREATE VIEW session_items AS
            SELECT s.tenant, s.store, s.session_id, s.actor_id, i.seq, i.item_id,
                   i.create_time, i.format, i.role, i.type, i.tool_name, i.model,
                   i.in_tokens, i.out_tokens, i.data
            FROM items i JOIN sessions s ON s.sid = i.sid
            """,
        ),
    ),
)

_SECOND = facts.SCHEMA + runs.SCHEMA + checkpoints.SCHEMA + assets.SCHEMA
if _SECOND:
    MIGRATIONS += (Migration(2, "memory facts, runs, checkpoints and assets", _SECOND),)
MIGRATIONS += (Migration(3, "API keys and store grants", access.SCHEMA),)

SCHEMA_VERSION = MIGRATIONS[-1].version
