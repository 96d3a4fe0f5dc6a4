"""The SQLite backend: the embedded default.

The database runs in WAL mode, so readers never block the writer. Every write is one
``BEGIN IMMEDIATE`` transaction, which takes the write lock up front and waits for it up to
the busy timeout; that makes the file safe under many threads and several processes.

Calls made through an async client run in a small thread pool, so the event loop never
blocks on disk. The sync client runs them on the calling thread: no thread hop, and
threads write concurrently. Either way a call borrows an idle connection and gives it
back, so a backend holds as many connections as calls ever ran at once.

It may touch sqlite3, the interface (``base``), the migration rule
(``backends._migrations``), its own parts and errors.
"""

from __future__ import annotations

import sqlite3
from typing import ClassVar

from ...errors import SchemaVersion
from .._migrations import LOG, needs_migration
from ..base import Backend, Capability
from ._core import write
from .access import AccessInSqlite
from .assets import AssetsInSqlite
from .checkpoints import CheckpointsInSqlite
from .facts import FactsInSqlite
from .runs import RunsInSqlite
from .schema import MIGRATIONS, SCHEMA_VERSION
from .search import SearchInSqlite, register_functions
from .sessions import SessionsInSqlite
from .transfer import TransferInSqlite
from .vectors import VectorsInSqlite

__all__ = ["SqliteBackend"]


class SqliteBackend(SearchInSqlite, SessionsInSqlite, FactsInSqlite, VectorsInSqlite,
                    RunsInSqlite, CheckpointsInSqlite, AssetsInSqlite, AccessInSqlite,
                    TransferInSqlite, Backend):
    """Every kind of state in one SQLite file.

    Give it a path, or a ready ``sqlite3.Connection`` (which it then uses inline and never
    closes). ``busy_timeout`` is how long a write waits for another writer, in seconds.
    ``synchronous`` is SQLite's durability setting: ``normal`` (the default) survives any
    crash of the process; ``full`` also survives power loss.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset(
        {Capability.OPERATOR, Capability.MULTIPROCESS, Capability.PERSISTENT, Capability.MIGRATIONS,
         Capability.TEXT_SEARCH, Capability.VECTORS, Capability.TRANSFER,
         Capability.CHECKPOINT_ITEMS, Capability.CHECKPOINT_ENDS_RUN,
         Capability.CHECKPOINT_OPENS_RUN}
    )

    # schema ----------------------------------------------------------------------------

    @staticmethod
    def _found_version(conn: sqlite3.Connection) -> int:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ownstate_schema'"
        ).fetchone()
        if exists is None:
            return 0
        row = conn.execute("SELECT max(version) FROM ownstate_schema").fetchone()
        return int(row[0] or 0)

    async def schema_status(self) -> tuple[int, int]:
        return await self._run(lambda conn: (self._found_version(conn), SCHEMA_VERSION))

    @property
    def runs_inline(self) -> bool:
        return self._inline

    async def setup(self, *, migrate: bool) -> None:
        self.require_directory()
        if not migrate and self._path is not None and not self._exists():
            # verifying must not create the database file
            raise SchemaVersion(
                f"the database schema is version 0, expected {SCHEMA_VERSION} (there is no "
                f"database at {self._path}); run `ownstate migrate`",
                found=0, expected=SCHEMA_VERSION)

        def run(conn: sqlite3.Connection) -> None:
            if not needs_migration(self._found_version(conn), SCHEMA_VERSION,
                                   migrate=migrate):
                return
            register_functions(conn)
            for migration in MIGRATIONS:
                with write(conn):
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS ownstate_schema (version INTEGER PRIMARY "
                        "KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)")
                    if self._found_version(conn) >= migration.version:
                        continue  # another process applied it first
                    LOG.info("migration %d of %d: %s", migration.version, SCHEMA_VERSION,
                             migration.description)
                    for statement in migration.statements:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO ownstate_schema VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ'))",
                        (migration.version, migration.description))

        await self._run(run)

