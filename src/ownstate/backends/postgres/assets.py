"""Assets in PostgreSQL: content stored once per tenant and hash, references per owner.

``asset_blobs`` holds each content once per tenant; ``assets`` holds the references, one
per owner (``sid``, NULL for none) and content. A reference goes with its session
(foreign-key cascade); the trigger ``assets_free_content`` then removes content that no
reference holds, in the same transaction, however the reference was deleted.

Adding a reference and freeing content agree through the content's row lock: a put
upserts the content row (``ON CONFLICT ... DO UPDATE`` locks it) before adding its
reference, and the trigger locks the content row before checking, in a fresh snapshot,
that no reference is left. Whichever comes second sees what the first one committed.

It may touch PostgreSQL through ``_core``, the model and errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...errors import AssetNotFound, SessionNotFound
from ...model import AssetRef
from ._core import Cursor, PostgresCore

__all__ = ["AssetsInPostgres"]

_REF_COLUMNS = ("a.asset_id, a.sha256, a.size, a.media_type, s.store, s.session_id, "
                "a.metadata, a.create_time")
_FROM = "FROM assets a LEFT JOIN sessions s ON s.sid = a.sid"


def _ref(row: Sequence[Any]) -> AssetRef:
    return AssetRef(asset_id=row[0], sha256=row[1], size=int(row[2]), media_type=row[3],
                    store=row[4], session_id=row[5], metadata=dict(row[6]),
                    create_time=row[7])


def _not_found(asset_id: str) -> AssetNotFound:
    return AssetNotFound(asset_id=asset_id)


class AssetsInPostgres(PostgresCore):
    """The assets port on PostgreSQL."""

    async def put_asset(self, tenant: str, store: str | None, session_id: str | None,
                        asset_id: str, sha256: str, data: bytes, media_type: str,
                        metadata: Mapping[str, str], now: datetime) -> AssetRef:
        labels = json.dumps(dict(metadata), ensure_ascii=False)

        async def run(cur: Cursor) -> AssetRef:
            sid = None
            if store is not None and session_id is not None:
                await cur.execute(
                    "SELECT sid FROM sessions WHERE tenant = %s AND store = %s "
                    "AND session_id = %s FOR KEY SHARE", (tenant, store, session_id))
                found = await cur.fetchone()
                if found is None:
                    raise SessionNotFound(store=store, session_id=session_id)
                sid = int(found[0])
            await cur.execute(
                f"SELECT {_REF_COLUMNS} {_FROM} WHERE a.tenant = %s "
                "AND coalesce(a.sid, 0) = %s AND a.sha256 = %s", (tenant, sid or 0, sha256))
            existing = await cur.fetchone()
            if existing is not None:
                return _ref(existing)
            await cur.execute(
                "INSERT INTO asset_blobs (tenant, sha256, size, create_time, data) "
                "VALUES (%s, %s, %s, %s, %b) ON CONFLICT (tenant, sha256) "
                "DO UPDATE SET size = excluded.size",
                (tenant, sha256, len(data), now, data))
            await cur.execute(
                "INSERT INTO assets (tenant, asset_id, sid, sha256, size, media_type, "
                "metadata, create_time) VALUES (%s, %s, %s, %s, %s, %s, %s::json, %s) "
                "ON CONFLICT (tenant, coalesce(sid, 0), sha256) DO NOTHING",
                (tenant, asset_id, sid, sha256, len(data), media_type, labels, now))
            if cur.rowcount == 0:  # the same put, committed by another caller meanwhile
                await cur.execute(
                    f"SELECT {_REF_COLUMNS} {_FROM} WHERE a.tenant = %s "
                    "AND coalesce(a.sid, 0) = %s AND a.sha256 = %s",
                    (tenant, sid or 0, sha256))
                raced = await cur.fetchone()
                assert raced is not None
                return _ref(raced)
            return AssetRef(asset_id=asset_id, sha256=sha256, size=len(data),
                            media_type=media_type, store=store, session_id=session_id,
                            metadata=dict(metadata), create_time=now)

        return await self._write(tenant, run)

    async def get_asset(self, tenant: str, asset_id: str) -> tuple[AssetRef, bytes]:
        async def run(cur: Cursor) -> tuple[AssetRef, bytes]:
            await cur.execute(
                f"SELECT {_REF_COLUMNS}, b.data {_FROM} JOIN asset_blobs b "
                "ON b.tenant = a.tenant AND b.sha256 = a.sha256 "
                "WHERE a.tenant = %s AND a.asset_id = %s", (tenant, asset_id))
            row = await cur.fetchone()
            if row is None:
                raise _not_found(asset_id)
            return _ref(row), bytes(row[8])

        return await self._read(tenant, run)

    async def get_asset_ref(self, tenant: str, asset_id: str) -> AssetRef:
        async def run(cur: Cursor) -> AssetRef:
            await cur.execute(f"SELECT {_REF_COLUMNS} {_FROM} "
                              "WHERE a.tenant = %s AND a.asset_id = %s", (tenant, asset_id))
            row = await cur.fetchone()
            if row is None:
                raise _not_found(asset_id)
            return _ref(row)

        return await self._read(tenant, run)

    async def list_assets(self, tenant: str, store: str, session_id: str) -> list[AssetRef]:
        async def run(cur: Cursor) -> list[AssetRef]:
            await cur.execute(
                "SELECT sid FROM sessions WHERE tenant = %s AND store = %s AND session_id = %s",
                (tenant, store, session_id))
            found = await cur.fetchone()
            if found is None:
                raise SessionNotFound(store=store, session_id=session_id)
            await cur.execute(f"SELECT {_REF_COLUMNS} {_FROM} WHERE a.sid = %s "
                              "AND a.tenant = %s ORDER BY a.aid", (found[0], tenant))
            return [_ref(r) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def delete_asset(self, tenant: str, asset_id: str) -> None:
        async def run(cur: Cursor) -> None:
            await cur.execute("DELETE FROM assets WHERE tenant = %s AND asset_id = %s",
                              (tenant, asset_id))
            if cur.rowcount == 0:
                raise _not_found(asset_id)

        await self._write(tenant, run)
