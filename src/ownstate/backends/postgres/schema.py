"""The PostgreSQL schema, as an ordered list of migrations.

Each migration runs in one transaction, under an advisory lock so that concurrent
migrators wait for each other, inside the configured schema. Nothing in the default path
uses ``CREATE INDEX CONCURRENTLY`` (it cannot run in a transaction). Every tenant-scoped
table gets row-level security, forced even for the table owner::

    ALTER TABLE t ENABLE ROW LEVEL SECURITY;
    ALTER TABLE t FORCE ROW LEVEL SECURITY;
    CREATE POLICY tenant_isolation ON t
        USING (tenant = current_setting('ownstate.tenant', true))
        WITH CHECK (tenant = current_setting('ownstate.tenant', true));

The one exception is ``api_keys``, whose policy also shows the row that ``find_api_key``
is looking up, before the tenant is known (see ``access.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import access, assets, checkpoints, facts, runs, sessions

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "row_level_security"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


def row_level_security(*tables: str) -> tuple[str, ...]:
    """The statements that confine each table's rows to the transaction's tenant."""
    statements: list[str] = []
    for table in tables:
        statements += [
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
            f"CREATE POLICY tenant_isolation ON {table} "
            "USING (tenant = current_setting('ownstate.tenant', true)) "
            "WITH CHECK (tenant = current_setting('ownstate.tenant', true))",
        ]
    return tuple(statements)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "session stores, sessions, items and idempotency keys",
        sessions.SCHEMA + row_level_security(*sessions.TENANT_TABLES),
    ),
    Migration(
        2,
        "memory facts, runs, checkpoints and assets",
        facts.SCHEMA + runs.SCHEMA + checkpoints.SCHEMA + assets.SCHEMA
        + row_level_security(*facts.TENANT_TABLES, *runs.TENANT_TABLES,
                             *checkpoints.TENANT_TABLES, *assets.TENANT_TABLES),
    ),
    Migration(
        3,
        "API keys and store grants",
        access.SCHEMA + row_level_security(*access.TENANT_TABLES) + access.API_KEY_SECURITY,
    ),
    Migration(4, "the API key lookup returns named columns", access.EXPLICIT_KEY_LOOKUP),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
