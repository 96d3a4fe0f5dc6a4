"""The SQLite schema, as a literal, append-only list of migrations.

Each migration is applied once, in its own ``BEGIN IMMEDIATE`` transaction, and recorded in
``ownstate_schema``. A released migration is never edited, reordered or removed: a change
to the schema is a new migration at the end (``tests/test_schema_migrations.py`` pins every
released one). The SQL is written out here, not assembled from the modules that use the
tables, so that changing those modules cannot change what a migration does.
``docs/schema.md`` describes the tables for people who query them directly.

It may touch the migration record (``backends._migrations``) alone, and no connection: the
backend runs the migrations.
"""

from __future__ import annotations

from .._migrations import Migration


def _term_counts(kind: str, key: str) -> tuple[str, ...]:
    """Migration 8 for ``{kind}_search``: per prefixed term, the documents holding it; per
    scope (the bare 10-character prefix), its documents and their total size in terms
    (search.py). A document's index text is its prefix, a space, and its terms joined by
    spaces, none of which holds a quote or a backslash: it splits as a JSON array."""
    split = "json_each('[\"' || replace({}, ' ', '\",\"') || '\"]')"
    old_terms = f"(SELECT terms FROM {kind}_search WHERE rowid = old.{key})"
    return (
        f"""
        CREATE TABLE {kind}_term_counts (
            term TEXT PRIMARY KEY,
            docs INTEGER NOT NULL,
            size INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        f"""
        INSERT INTO {kind}_term_counts (term, docs, size)
               SELECT substr(terms, 1, 10), count(*),
                      sum(length(terms) - length(replace(terms, ' ', '')))
               FROM {kind}_search GROUP BY 1
        """,
        f"""
        INSERT INTO {kind}_term_counts (term, docs, size)
               SELECT term, count(*), 0 FROM (
                   SELECT DISTINCT x.rowid, j.value AS term FROM {kind}_search x,
                          {split.format("x.terms")} j
                   WHERE length(j.value) > 10)
               GROUP BY term
        """,
        f"DROP TRIGGER {kind}s_deleted_leave_search",
        f"""
        CREATE TRIGGER {kind}s_deleted_leave_search AFTER DELETE ON {kind}s
        BEGIN
            UPDATE {kind}_term_counts SET docs = docs - 1, size = size - CASE
                   WHEN length(term) = 10 THEN (SELECT length(terms) -
                        length(replace(terms, ' ', '')) FROM {kind}_search
                        WHERE rowid = old.{key}) ELSE 0 END
            WHERE term IN (SELECT value FROM {split.format(old_terms)});
            DELETE FROM {kind}_search WHERE rowid = old.{key};
        END
        """,
    )


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration"]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "session stores, sessions, items and idempotency keys", (
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
        """
        CREATE INDEX sessions_by_activity
                       ON sessions (tenant, store, last_activity_time, sid)
        """,
        """
        CREATE INDEX sessions_by_parent ON sessions (tenant, store, parent_session_id)
                       WHERE parent_session_id IS NOT NULL
        """,
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
    )),
    Migration(2, "memory facts, runs, checkpoints and assets", (
        # memory facts (facts.py)
        """
        CREATE TABLE memory_stores (
            tenant      TEXT NOT NULL,
            name        TEXT NOT NULL,
            create_time TEXT NOT NULL,
            PRIMARY KEY (tenant, name)
        )
        """,
        """
        CREATE TABLE facts (
            fid               INTEGER PRIMARY KEY,
            tenant            TEXT NOT NULL,
            memory_store      TEXT NOT NULL,
            fact_id           TEXT NOT NULL,
            subject           TEXT NOT NULL,
            key               TEXT NOT NULL,
            value             TEXT NOT NULL,
            confidence        REAL CHECK (confidence BETWEEN 0 AND 1),
            source_type       TEXT NOT NULL
                              CHECK (source_type IN ('agent', 'pipeline', 'user', 'import')),
            source_store      TEXT,
            source_session_id TEXT,
            source_item_id    TEXT,
            valid_from        TEXT NOT NULL,
            valid_to          TEXT,
            recorded_at       TEXT NOT NULL,
            superseded_at     TEXT,
            supersedes        TEXT,
            closed_reason     TEXT,
            CHECK ((superseded_at IS NULL) = (valid_to IS NULL)
                   AND (superseded_at IS NULL) = (closed_reason IS NULL)),
            FOREIGN KEY (tenant, memory_store) REFERENCES memory_stores (tenant, name)
        )
        """,
        "CREATE UNIQUE INDEX facts_by_id ON facts (tenant, fact_id)",
        """
        CREATE UNIQUE INDEX facts_current ON facts (tenant, memory_store, subject, key)
               WHERE superseded_at IS NULL
        """,
        "CREATE INDEX facts_by_subject ON facts (tenant, subject, memory_store, key)",
        """
        CREATE VIRTUAL TABLE fact_search USING fts5 (
                   words, tokenize = 'ascii', detail = none, columnsize = 0)
        """,
        """
        CREATE TRIGGER facts_closed_leave_search AFTER UPDATE OF superseded_at ON facts
        WHEN old.superseded_at IS NULL AND new.superseded_at IS NOT NULL
        BEGIN
            DELETE FROM fact_search WHERE rowid = old.fid;
        END
        """,
        """
        CREATE TRIGGER facts_deleted_leave_search AFTER DELETE ON facts
        WHEN old.superseded_at IS NULL
        BEGIN
            DELETE FROM fact_search WHERE rowid = old.fid;
        END
        """,
        # runs and effects (runs.py)
        """
        CREATE TABLE runs (
            rid              INTEGER PRIMARY KEY,
            sid              INTEGER NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
            tenant           TEXT NOT NULL,
            run_id           TEXT NOT NULL,
            store            TEXT NOT NULL,
            session_id       TEXT NOT NULL,
            actor_id         TEXT NOT NULL,
            framework        TEXT NOT NULL,
            thread_key       TEXT,
            status           TEXT NOT NULL CHECK (status IN
                                 ('running', 'awaiting_human', 'done', 'failed', 'cancelled')),
            status_since     TEXT NOT NULL,
            awaiting         TEXT,
            step_count       INTEGER NOT NULL DEFAULT 0,
            usd_cost         REAL NOT NULL DEFAULT 0,
            started_at       TEXT NOT NULL,
            ended_at         TEXT,
            lease_owner      TEXT,
            lease_expires_at TEXT,
            fencing_token    INTEGER NOT NULL DEFAULT 0,
            UNIQUE (tenant, run_id)
        )
        """,
        """
        CREATE UNIQUE INDEX runs_one_active_per_session ON runs (sid)
               WHERE status IN ('running', 'awaiting_human')
        """,
        "CREATE INDEX runs_by_session ON runs (sid)",
        "CREATE INDEX runs_by_tenant ON runs (tenant)",
        "CREATE INDEX runs_by_status ON runs (tenant, status, status_since)",
        """
        CREATE TABLE run_effects (
            rid          INTEGER NOT NULL REFERENCES runs (rid) ON DELETE CASCADE,
            tool_call_id TEXT NOT NULL,
            tenant       TEXT NOT NULL,
            result       TEXT NOT NULL,
            recorded_at  TEXT NOT NULL,
            PRIMARY KEY (rid, tool_call_id)
        ) WITHOUT ROWID
        """,
        # checkpoints (checkpoints.py)
        """
        CREATE TABLE checkpoints (
            cid                  INTEGER PRIMARY KEY,
            rid                  INTEGER NOT NULL REFERENCES runs (rid) ON DELETE CASCADE,
            tenant               TEXT NOT NULL,
            namespace            TEXT NOT NULL,
            checkpoint_id        TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            type_tag             TEXT NOT NULL,
            metadata             TEXT NOT NULL DEFAULT '{}',
            create_time          TEXT NOT NULL,
            size                 INTEGER NOT NULL,
            payload              BLOB NOT NULL,
            UNIQUE (rid, namespace, checkpoint_id)
        )
        """,
        "CREATE INDEX checkpoints_by_run ON checkpoints (rid, namespace, cid, create_time, size)",
        """
        CREATE TABLE checkpoint_writes (
            wid       INTEGER PRIMARY KEY,
            cid       INTEGER NOT NULL REFERENCES checkpoints (cid) ON DELETE CASCADE,
            tenant    TEXT NOT NULL,
            task_id   TEXT NOT NULL,
            idx       INTEGER NOT NULL,
            channel   TEXT NOT NULL,
            type_tag  TEXT NOT NULL,
            task_path TEXT NOT NULL DEFAULT '',
            size      INTEGER NOT NULL,
            payload   BLOB NOT NULL,
            UNIQUE (cid, task_id, idx)
        )
        """,
        # assets (assets.py)
        """
        CREATE TABLE asset_blobs (
            bid         INTEGER PRIMARY KEY,
            tenant      TEXT NOT NULL,
            sha256      TEXT NOT NULL,
            size        INTEGER NOT NULL,
            create_time TEXT NOT NULL,
            data        BLOB NOT NULL,
            UNIQUE (tenant, sha256)
        )
        """,
        """
        CREATE TABLE assets (
            aid         INTEGER PRIMARY KEY,
            tenant      TEXT NOT NULL,
            asset_id    TEXT NOT NULL,
            sid         INTEGER REFERENCES sessions (sid) ON DELETE CASCADE,
            sha256      TEXT NOT NULL,
            size        INTEGER NOT NULL,
            media_type  TEXT NOT NULL,
            metadata    TEXT NOT NULL DEFAULT '{}',
            create_time TEXT NOT NULL,
            FOREIGN KEY (tenant, sha256) REFERENCES asset_blobs (tenant, sha256)
        )
        """,
        "CREATE UNIQUE INDEX assets_by_id ON assets (tenant, asset_id)",
        "CREATE UNIQUE INDEX assets_by_owner ON assets (tenant, ifnull(sid, 0), sha256)",
        "CREATE INDEX assets_by_session ON assets (sid, aid)",
        "CREATE INDEX assets_by_content ON assets (tenant, sha256)",
        """
        CREATE TRIGGER assets_free_content AFTER DELETE ON assets
        WHEN NOT EXISTS (SELECT 1 FROM assets WHERE tenant = OLD.tenant AND sha256 = OLD.sha256)
        BEGIN
            DELETE FROM asset_blobs WHERE tenant = OLD.tenant AND sha256 = OLD.sha256;
        END
        """,
    )),
    Migration(3, "API keys and store grants", (
        """
        CREATE TABLE api_keys (
            key_id      TEXT PRIMARY KEY,
            tenant      TEXT NOT NULL,
            principal   TEXT NOT NULL,
            admin       INTEGER NOT NULL CHECK (admin IN (0, 1)),
            create_time TEXT NOT NULL,
            revoked_at  TEXT,
            secret_hash TEXT NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX api_keys_by_tenant ON api_keys (tenant, create_time, key_id)",
        """
        CREATE TABLE store_grants (
            tenant    TEXT NOT NULL,
            kind      TEXT NOT NULL,
            store     TEXT NOT NULL,
            principal TEXT NOT NULL,
            level     TEXT NOT NULL,
            PRIMARY KEY (tenant, kind, store, principal)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX store_grants_by_principal ON store_grants (tenant, principal, kind, store)",
    )),
    Migration(4, "ranked search over facts and items", (
        # Facts are indexed again, with the terms and scope of ranked search, closed ones
        # included; ownstate_fact_terms and ownstate_item_terms are the functions the
        # backend defines on the connection that migrates (search.py).
        "DROP TRIGGER facts_closed_leave_search",
        "DROP TRIGGER facts_deleted_leave_search",
        "DROP TABLE fact_search",
        "CREATE VIRTUAL TABLE fact_search USING fts5 (terms, tokenize = 'ascii')",
        "CREATE VIRTUAL TABLE fact_vocabulary USING fts5vocab (fact_search, 'row')",
        """
        INSERT INTO fact_search (rowid, terms)
               SELECT fid, ownstate_fact_terms(tenant, memory_store, key, value) FROM facts
        """,
        """
        CREATE TRIGGER facts_deleted_leave_search AFTER DELETE ON facts
        BEGIN
            DELETE FROM fact_search WHERE rowid = old.fid;
        END
        """,
        "ALTER TABLE session_stores ADD COLUMN index_items INTEGER NOT NULL DEFAULT 1",
        "CREATE VIRTUAL TABLE item_search USING fts5 (terms, tokenize = 'ascii')",
        "CREATE VIRTUAL TABLE item_vocabulary USING fts5vocab (item_search, 'row')",
        """
        INSERT INTO item_search (rowid, terms)
               SELECT id, ownstate_item_terms(tenant, data) FROM items
        """,
        """
        CREATE TRIGGER items_deleted_leave_search AFTER DELETE ON items
        BEGIN
            DELETE FROM item_search WHERE rowid = old.id;
        END
        """,
    )),
    Migration(5, "human decisions on awaiting runs", (
        # the decision on the current request, and every decision the run received
        "ALTER TABLE runs ADD COLUMN decision TEXT",
        "ALTER TABLE runs ADD COLUMN decisions TEXT",
        # the inbox (undecided) and the resume queue (decided), each oldest first
        """
        CREATE INDEX runs_awaiting_undecided ON runs (tenant, status_since, rid)
               WHERE status = 'awaiting_human' AND decision IS NULL
        """,
        """
        CREATE INDEX runs_awaiting_decided ON runs (tenant, status_since, rid)
               WHERE status = 'awaiting_human' AND decision IS NOT NULL
        """,
    )),
    Migration(6, "fact and item vectors for semantic search", (
        """
        CREATE TABLE fact_vectors (
            fid          INTEGER PRIMARY KEY REFERENCES facts (fid) ON DELETE CASCADE,
            tenant       TEXT NOT NULL,
            memory_store TEXT NOT NULL,
            model        TEXT NOT NULL,
            vector       BLOB NOT NULL
        )
        """,
        "CREATE INDEX fact_vectors_by_store ON fact_vectors (tenant, memory_store, model)",
        """
        CREATE TABLE item_vectors (
            id     INTEGER PRIMARY KEY REFERENCES items (id) ON DELETE CASCADE,
            tenant TEXT NOT NULL,
            store  TEXT NOT NULL,
            model  TEXT NOT NULL,
            vector BLOB NOT NULL
        )
        """,
        "CREATE INDEX item_vectors_by_store ON item_vectors (tenant, store, model)",
    )),
    Migration(7, "a memory store's subjects in order", (
        "CREATE INDEX facts_by_store_subject ON facts (tenant, memory_store, subject)",
    )),
    Migration(8, "term statistics for ranked search", (
        *_term_counts("fact", "fid"), *_term_counts("item", "id"),
    )),
    Migration(9, "search indexing deferred to the next search", (
        # ranges of fact fids and item ids written but not yet indexed (search.py)
        """
        CREATE TABLE fact_index_queue (
            first INTEGER PRIMARY KEY,
            last  INTEGER NOT NULL
        )
        """,
        """
        CREATE TABLE item_index_queue (
            first INTEGER PRIMARY KEY,
            last  INTEGER NOT NULL
        )
        """,
    )),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
