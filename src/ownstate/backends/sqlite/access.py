"""API keys and store grants in SQLite.

``api_keys`` is keyed by ``key_id`` alone: authentication finds a key before it knows
the tenant. ``store_grants`` names its store by kind and name, with no foreign key:
session and memory stores live in different tables, and a store's grants are dropped
by ownstate when the store is deleted. The tables are created by
the migrations in ``schema.py``.

It may touch the SQLite connections of ``_core``, the time format (``ownstate._ids``), the
model and errors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._ids import format_time, parse_time
from ...errors import AlreadyExists, KeyNotFound
from ...model import ApiKey, Grant
from ._core import SqliteCore, write

__all__ = ["AccessInSqlite", "drop_grants", "start_grants"]

_KEY_COLUMNS = "key_id, tenant, principal, admin, create_time, revoked_at"


def _key(row: Sequence[Any]) -> ApiKey:
    return ApiKey(key_id=row[0], tenant=row[1], principal=row[2], admin=bool(row[3]),
                  create_time=parse_time(row[4]),
                  revoked_at=parse_time(row[5]) if row[5] is not None else None)


def start_grants(conn: sqlite3.Connection, tenant: str, kind: str, store: str,
                 owner: str | None) -> None:
    """Within the transaction creating a store: drop grants left over from an earlier store
    of its name, then give ``owner`` ownership when one is named."""
    drop_grants(conn, tenant, kind, store)
    if owner is not None:
        conn.execute("INSERT INTO store_grants (tenant, kind, store, principal, level) "
                     "VALUES (?, ?, ?, ?, 'OWNER')", (tenant, kind, store, owner))


def drop_grants(conn: sqlite3.Connection, tenant: str, kind: str, store: str) -> int:
    """Within a transaction: remove every grant on the store; returns how many."""
    deleted = conn.execute("DELETE FROM store_grants WHERE tenant = ? AND kind = ? "
                           "AND store = ?", (tenant, kind, store))
    return int(deleted.rowcount)


class AccessInSqlite(SqliteCore):
    """The access port on SQLite."""

    # API keys --------------------------------------------------------------------------

    async def create_api_key(self, key: ApiKey, secret_hash: str) -> ApiKey:
        revoked = format_time(key.revoked_at) if key.revoked_at is not None else None

        def run(conn: sqlite3.Connection) -> None:
            with write(conn):
                inserted = conn.execute(
                    f"INSERT INTO api_keys ({_KEY_COLUMNS}, secret_hash) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (key.key_id, key.tenant, key.principal, int(key.admin),
                     format_time(key.create_time), revoked, secret_hash))
                if inserted.rowcount == 0:
                    raise AlreadyExists(key_id=key.key_id)

        await self._run_write(run)
        return key

    async def find_api_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        def run(conn: sqlite3.Connection) -> tuple[ApiKey, str] | None:
            row = conn.execute(f"SELECT {_KEY_COLUMNS}, secret_hash FROM api_keys "
                               "WHERE key_id = ?", (key_id,)).fetchone()
            return (_key(row), row[6]) if row is not None else None

        return await self._run(run)

    async def list_api_keys(self, tenant: str) -> list[ApiKey]:
        def run(conn: sqlite3.Connection) -> list[ApiKey]:
            rows = conn.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant = ? "
                                "ORDER BY create_time, key_id", (tenant,))
            return [_key(r) for r in rows]

        return await self._run(run)

    async def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> ApiKey:
        def run(conn: sqlite3.Connection) -> ApiKey:
            with write(conn):
                row = conn.execute(
                    "UPDATE api_keys SET revoked_at = ifnull(revoked_at, ?) "
                    f"WHERE tenant = ? AND key_id = ? RETURNING {_KEY_COLUMNS}",
                    (format_time(now), tenant, key_id)).fetchone()
                if row is None:
                    raise KeyNotFound(key_id=key_id)
            return _key(row)

        return await self._run_write(run)

    # grants ----------------------------------------------------------------------------

    async def set_grant(self, tenant: str, kind: str, store: str, principal: str,
                        level: str | None) -> str | None:
        key = (tenant, kind, store, principal)

        def run(conn: sqlite3.Connection) -> str | None:
            with write(conn):
                if level is not None:
                    conn.execute(
                        "INSERT INTO store_grants (tenant, kind, store, principal, level) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, kind, store, principal) "
                        "DO UPDATE SET level = excluded.level WHERE level <> 'OWNER'",
                        (*key, level))
                else:
                    conn.execute("DELETE FROM store_grants WHERE tenant = ? AND kind = ? "
                                 "AND store = ? AND principal = ? AND level <> 'OWNER'", key)
                row = conn.execute("SELECT level FROM store_grants WHERE tenant = ? "
                                   "AND kind = ? AND store = ? AND principal = ?",
                                   key).fetchone()
            return str(row[0]) if row is not None else None

        return await self._run_write(run)

    async def get_grant(self, tenant: str, kind: str, store: str,
                        principal: str) -> str | None:
        def run(conn: sqlite3.Connection) -> str | None:
            row = conn.execute("SELECT level FROM store_grants WHERE tenant = ? AND kind = ? "
                               "AND store = ? AND principal = ?",
                               (tenant, kind, store, principal)).fetchone()
            return str(row[0]) if row is not None else None

        return await self._run(run)

    async def list_grants(self, tenant: str, kind: str, store: str) -> list[Grant]:
        def run(conn: sqlite3.Connection) -> list[Grant]:
            rows = conn.execute("SELECT principal, level FROM store_grants WHERE tenant = ? "
                                "AND kind = ? AND store = ? ORDER BY principal",
                                (tenant, kind, store))
            return [Grant(kind, store, r[0], r[1]) for r in rows]

        return await self._run(run)

    async def list_principal_grants(self, tenant: str, principal: str) -> list[Grant]:
        def run(conn: sqlite3.Connection) -> list[Grant]:
            rows = conn.execute("SELECT kind, store, level FROM store_grants WHERE tenant = ? "
                                "AND principal = ? ORDER BY kind, store", (tenant, principal))
            return [Grant(r[0], r[1], principal, r[2]) for r in rows]

        return await self._run(run)

    async def drop_grants(self, tenant: str, kind: str, store: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                return drop_grants(conn, tenant, kind, store)

        return await self._run_write(run)
