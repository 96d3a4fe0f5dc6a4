"""The PostgreSQL backend: where production deployments keep their agent state.

Tables live in one schema (``?schema=`` in the URL, default ``ownstate``), so several
applications can share a database. Every tenant-scoped table enforces tenant isolation
with row-level security; see ``docs/postgres.md`` for the runtime role to use, and
``roles.py`` for how a role that it would not bind is found out.

It may touch psycopg (through ``ownstate._extras``), the interface (``base``), the migration
rule (``backends._migrations``), its own parts and errors.
"""

from __future__ import annotations

from typing import ClassVar

from ..._extras import requires
from ...errors import BackendUnavailable, SchemaVersion
from .._migrations import LOG, needs_migration
from ..base import Backend, Capability
from ._core import Cursor
from .access import AccessInPostgres
from .assets import AssetsInPostgres
from .bulk import BulkInPostgres
from .bulk_reads import BulkReadsInPostgres
from .checkpoints import CheckpointsInPostgres
from .facts import FactsInPostgres
from .items_search import SearchInPostgres
from .roles import RolesInPostgres
from .runs import RunsInPostgres
from .schema import MIGRATIONS, SCHEMA_VERSION
from .search import backfill
from .sessions import SessionsInPostgres
from .transfer import TransferInPostgres
from .vectors import VectorsInPostgres

with requires("postgres", "the PostgreSQL backend"):
    from psycopg import errors, sql

__all__ = ["PostgresBackend"]

#: The migration whose data half (indexing earlier rows) runs in Python.
_SEARCH_MIGRATION = 5


class PostgresBackend(SearchInPostgres, SessionsInPostgres, FactsInPostgres,
                      VectorsInPostgres, RunsInPostgres, CheckpointsInPostgres,
                      AssetsInPostgres, AccessInPostgres, RolesInPostgres, TransferInPostgres,
                      BulkInPostgres, BulkReadsInPostgres, Backend):
    """Every kind of state in PostgreSQL (psycopg 3 and its async pool)."""

    capabilities: ClassVar[frozenset[str]] = frozenset(
        {Capability.OPERATOR, Capability.MULTIPROCESS, Capability.PERSISTENT, Capability.MIGRATIONS,
         Capability.TEXT_SEARCH, Capability.VECTORS, Capability.TRANSFER,
         Capability.BULK_SESSIONS, Capability.BULK_READS, Capability.CHECKPOINT_ITEMS,
         Capability.CHECKPOINT_ENDS_RUN, Capability.CHECKPOINT_OPENS_RUN}
    )

    async def _found_version(self, cur: Cursor) -> int:
        await cur.execute(
            "SELECT 1 FROM information_schema.tables "
            "WHERE table_schema = %s AND table_name = 'ownstate_schema'", (self.schema,))
        if await cur.fetchone() is None:
            return 0
        await cur.execute(sql.SQL("SELECT max(version) FROM {}.ownstate_schema").format(
            sql.Identifier(self.schema)))
        row = await cur.fetchone()
        return int(row[0] or 0) if row else 0

    async def schema_status(self) -> tuple[int, int]:
        found = await self._read(None, self._found_version)
        return found, SCHEMA_VERSION

    async def setup(self, *, migrate: bool) -> None:
        found = await self._read(None, self._found_version)
        if not needs_migration(found, SCHEMA_VERSION, migrate=migrate,
                               schema=f"the database schema {self.schema!r}"):
            return
        schema = sql.Identifier(self.schema)

        async def run(cur: Cursor) -> None:
            await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                              (f"ownstate-migrate:{self.schema}",))
            # a schema created beforehand (by a DBA, for the owner role) is used as it is:
            # creating one needs CREATE on the database, even with IF NOT EXISTS
            await cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,))
            if await cur.fetchone() is None:
                await cur.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
            await cur.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.ownstate_schema (version integer PRIMARY KEY, "
                "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(schema))
            await cur.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(schema))
            current = await self._found_version(cur)
            for migration in MIGRATIONS:
                if migration.version <= current:
                    continue  # another process applied it first
                LOG.info("migration %d of %d: %s", migration.version, SCHEMA_VERSION,
                         migration.description)
                # one round trip per migration: its statements run as one script
                await cur.execute(";\n".join(migration.statements))
                if migration.version == _SEARCH_MIGRATION:
                    await backfill(cur)
                await cur.execute(
                    "INSERT INTO ownstate_schema (version, description) VALUES (%s, %s)",
                    (migration.version, migration.description))

        try:
            await self._write(None, run)
        except BackendUnavailable as exc:
            if isinstance(exc.__cause__, errors.InsufficientPrivilege):
                raise SchemaVersion(
                    f"the database schema {self.schema!r} is version {found}, expected "
                    f"{SCHEMA_VERSION}, and this role may not change it; run `ownstate "
                    f"migrate` as the schema's owner ({exc.__cause__})",
                    found=found, expected=SCHEMA_VERSION) from exc
            raise
