"""API keys and store grants in PostgreSQL.

``store_grants`` gets the usual row-level security. ``api_keys`` cannot have only that:
authenticating a request finds its key by ``key_id`` before anything says which tenant
it belongs to. Its one policy therefore also shows a row whose ``key_id`` equals the
setting ``ownstate.api_key``, and the function ``find_api_key`` sets that setting to
the id it was asked for, reads that one row, and clears it again. It takes one key id and
compares it for equality (no pattern, no range: it cannot list keys), and returns the
columns authentication needs, named one by one, so a column added to ``api_keys`` later
is not returned by it (migration 4; migration 3 returned the table's whole row). A query
that forgets its tenant predicate still sees only the current tenant's keys; writes are
checked against the tenant alone. No role is needed that bypasses row-level security, and
nothing runs with the owner's rights (``SECURITY DEFINER`` would not help anyway: the
policies are forced for the owner too).

It may touch PostgreSQL through ``_core``, the model and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...errors import AlreadyExists, KeyNotFound
from ...model import ApiKey, Grant
from ._core import Cursor, PostgresCore

__all__ = ["AccessInPostgres", "drop_grants", "start_grants"]

_KEY_COLUMNS = "key_id, tenant, principal, admin, create_time, revoked_at"


def _key(row: Sequence[Any]) -> ApiKey:
    return ApiKey(key_id=row[0], tenant=row[1], principal=row[2], admin=bool(row[3]),
                  create_time=row[4], revoked_at=row[5])


async def start_grants(cur: Cursor, tenant: str, kind: str, store: str,
                       owner: str | None) -> None:
    """Within the transaction creating a store (its last statements): drop grants left over
    from an earlier store of its name, then give ``owner`` ownership when one is named."""
    await cur.execute("DELETE FROM store_grants WHERE tenant = %s AND kind = %s "
                      "AND store = %s", (tenant, kind, store), last=owner is None)
    if owner is not None:
        await cur.execute("INSERT INTO store_grants (tenant, kind, store, principal, level) "
                          "VALUES (%s, %s, %s, %s, 'OWNER')", (tenant, kind, store, owner),
                          last=True)


async def drop_grants(cur: Cursor, tenant: str, kind: str, store: str, *,
                      last: bool) -> int:
    """Within a transaction: remove every grant on the store; returns how many."""
    await cur.execute("DELETE FROM store_grants WHERE tenant = %s AND kind = %s "
                      "AND store = %s", (tenant, kind, store), last=last)
    return int(cur.rowcount)


#: a store kind's table, and the table and column of what the store holds
_STORE_TABLES = {"session_store": ("session_stores", "sessions", "store"),
                 "memory_store": ("memory_stores", "facts", "memory_store")}


async def drop_store(cur: Cursor, tenant: str, kind: str, store: str) -> int:
    """Within a transaction: delete a store, what it holds (sessions or facts) and the
    grants on it; returns how many sessions or facts went."""
    table, held, column = _STORE_TABLES[kind]
    await cur.execute(f"DELETE FROM {held} WHERE tenant = %s AND {column} = %s",
                      (tenant, store))
    deleted = int(cur.rowcount)
    await cur.execute(f"DELETE FROM {table} WHERE tenant = %s AND name = %s", (tenant, store))
    await drop_grants(cur, tenant, kind, store, last=True)
    return deleted


class AccessInPostgres(PostgresCore):
    """The access port on PostgreSQL."""

    # API keys --------------------------------------------------------------------------

    async def create_api_key(self, key: ApiKey, secret_hash: str) -> ApiKey:
        async def run(cur: Cursor) -> None:
            # ON CONFLICT sees the key ids of every tenant, whatever the policy shows
            await cur.execute(
                f"INSERT INTO api_keys ({_KEY_COLUMNS}, secret_hash) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (key.key_id, key.tenant, key.principal, key.admin, key.create_time,
                 key.revoked_at, secret_hash), last=True)
            if cur.rowcount == 0:
                raise AlreadyExists(key_id=key.key_id)

        await self._write(key.tenant, run)
        return key

    async def find_api_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        async def run(cur: Cursor) -> tuple[ApiKey, str] | None:
            await cur.execute(f"SELECT {_KEY_COLUMNS}, secret_hash FROM find_api_key(%s)",
                              (key_id,))
            row = await cur.fetchone()
            return (_key(row), row[6]) if row is not None else None

        # no tenant: the function shows the one row asked for (see the module docstring)
        return await self._read(None, run)

    async def list_api_keys(self, tenant: str) -> list[ApiKey]:
        async def run(cur: Cursor) -> list[ApiKey]:
            await cur.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant = %s "
                              "ORDER BY create_time, key_id", (tenant,))
            return [_key(r) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> ApiKey:
        async def run(cur: Cursor) -> ApiKey:
            await cur.execute(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, %s) "
                f"WHERE tenant = %s AND key_id = %s RETURNING {_KEY_COLUMNS}",
                (now, tenant, key_id), last=True)
            row = await cur.fetchone()
            if row is None:
                raise KeyNotFound(key_id=key_id)
            return _key(row)

        return await self._write(tenant, run)

    # grants ----------------------------------------------------------------------------

    async def set_grant(self, tenant: str, kind: str, store: str, principal: str,
                        level: str | None) -> str | None:
        key = (tenant, kind, store, principal)

        async def run(cur: Cursor) -> str | None:
            if level is None:
                # The CTE's delete is not visible to its SELECT: that reads the row as it
                # was, so an owner (whom the delete spares) is found and anyone else not.
                await cur.execute(
                    "WITH gone AS (DELETE FROM store_grants WHERE tenant = %s AND kind = %s "
                    "AND store = %s AND principal = %s AND level <> 'OWNER') "
                    "SELECT level FROM store_grants WHERE tenant = %s AND kind = %s "
                    "AND store = %s AND principal = %s AND level = 'OWNER'",
                    (*key, *key), last=True)
                row = await cur.fetchone()
                return str(row[0]) if row is not None else None
            await cur.execute(
                "INSERT INTO store_grants (tenant, kind, store, principal, level) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant, kind, store, principal) "
                "DO UPDATE SET level = excluded.level WHERE store_grants.level <> 'OWNER' "
                "RETURNING level", (*key, level), last=True)
            row = await cur.fetchone()
            return str(row[0]) if row is not None else "OWNER"

        return await self._write(tenant, run)

    async def get_grant(self, tenant: str, kind: str, store: str,
                        principal: str) -> str | None:
        async def run(cur: Cursor) -> str | None:
            await cur.execute(
                "SELECT level FROM store_grants WHERE tenant = %s AND kind = %s AND store = %s "
                "AND principal = %s", (tenant, kind, store, principal))
            row = await cur.fetchone()
            return str(row[0]) if row is not None else None

        return await self._read(tenant, run)

    async def list_grants(self, tenant: str, kind: str, store: str) -> list[Grant]:
        async def run(cur: Cursor) -> list[Grant]:
            await cur.execute(
                "SELECT principal, level FROM store_grants WHERE tenant = %s AND kind = %s "
                "AND store = %s ORDER BY principal", (tenant, kind, store))
            return [Grant(kind, store, r[0], r[1]) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def list_principal_grants(self, tenant: str, principal: str) -> list[Grant]:
        async def run(cur: Cursor) -> list[Grant]:
            await cur.execute(
                "SELECT kind, store, level FROM store_grants WHERE tenant = %s "
                "AND principal = %s ORDER BY kind, store", (tenant, principal))
            return [Grant(r[0], r[1], principal, r[2]) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def drop_grants(self, tenant: str, kind: str, store: str) -> int:
        return await self._write(
            tenant, lambda cur: drop_grants(cur, tenant, kind, store, last=True))
