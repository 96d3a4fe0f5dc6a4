"""Assets in SQLite.

``asset_blobs`` holds each content once per tenant; ``assets`` holds the references,
one per owner (``sid``, NULL for none) and content. A reference goes with its session
(foreign-key cascade); the trigger then removes content no reference holds, in the same
transaction, however the reference was deleted. The tables are created by
the migrations in ``schema.py``.

It may touch the SQLite connections of ``_core``, the time format (``ownstate._ids``), the
model and errors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..._ids import format_time, parse_time
from ...errors import AssetNotFound
from ...model import AssetRef
from ._core import SqliteCore, write

__all__ = ["AssetsInSqlite"]

_REF_COLUMNS = ("a.asset_id, a.sha256, a.size, a.media_type, s.store, s.session_id, "
                "a.metadata, a.create_time")
_FROM = "FROM assets a LEFT JOIN sessions s ON s.sid = a.sid"


def _ref(row: Sequence[Any]) -> AssetRef:
    return AssetRef(asset_id=row[0], sha256=row[1], size=row[2], media_type=row[3],
                    store=row[4], session_id=row[5], metadata=json.loads(row[6]),
                    create_time=parse_time(row[7]))


class AssetsInSqlite(SqliteCore):
    @staticmethod
    def _asset_row(conn: sqlite3.Connection, tenant: str, asset_id: str) -> Sequence[Any]:
        row = conn.execute(f"SELECT {_REF_COLUMNS} {_FROM} "
                           "WHERE a.tenant = ? AND a.asset_id = ?", (tenant, asset_id)).fetchone()
        if row is None:
            raise AssetNotFound(asset_id=asset_id)
        return tuple(row)

    async def put_asset(self, tenant: str, store: str | None, session_id: str | None,
                        asset_id: str, sha256: str, data: bytes, media_type: str,
                        metadata: Mapping[str, str], now: datetime) -> AssetRef:
        stamp = format_time(now)
        labels = json.dumps(dict(metadata), ensure_ascii=False)

        def run(conn: sqlite3.Connection) -> AssetRef:
            with write(conn):
                sid = None
                if store is not None and session_id is not None:
                    sid = self._sid(conn, tenant, store, session_id)
                existing = conn.execute(
                    f"SELECT {_REF_COLUMNS} {_FROM} WHERE a.tenant = ? "
                    "AND ifnull(a.sid, 0) = ? AND a.sha256 = ?",
                    (tenant, sid or 0, sha256)).fetchone()
                if existing is not None:
                    return _ref(existing)
                conn.execute(
                    "INSERT INTO asset_blobs (tenant, sha256, size, create_time, data) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, sha256) DO NOTHING",
                    (tenant, sha256, len(data), stamp, data))
                conn.execute(
                    "INSERT INTO assets (tenant, asset_id, sid, sha256, size, media_type, "
                    "metadata, create_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (tenant, asset_id, sid, sha256, len(data), media_type, labels, stamp))
            return AssetRef(asset_id=asset_id, sha256=sha256, size=len(data),
                            media_type=media_type, store=store, session_id=session_id,
                            metadata=dict(metadata), create_time=now)

        return await self._run_write(run)

    async def get_asset(self, tenant: str, asset_id: str) -> tuple[AssetRef, bytes]:
        def run(conn: sqlite3.Connection) -> tuple[AssetRef, bytes]:
            row = self._asset_row(conn, tenant, asset_id)
            (data,) = conn.execute(
                "SELECT data FROM asset_blobs WHERE tenant = ? AND sha256 = ?",
                (tenant, row[1])).fetchone()
            return _ref(row), bytes(data)

        return await self._run(run)

    async def get_asset_ref(self, tenant: str, asset_id: str) -> AssetRef:
        return await self._run(lambda conn: _ref(self._asset_row(conn, tenant, asset_id)))

    async def list_assets(self, tenant: str, store: str, session_id: str) -> list[AssetRef]:
        def run(conn: sqlite3.Connection) -> list[AssetRef]:
            sid = self._sid(conn, tenant, store, session_id)
            rows = conn.execute(f"SELECT {_REF_COLUMNS} {_FROM} WHERE a.sid = ? "
                                "AND a.tenant = ? ORDER BY a.aid", (sid, tenant))
            return [_ref(r) for r in rows]

        return await self._run(run)

    async def delete_asset(self, tenant: str, asset_id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            with write(conn):
                deleted = conn.execute("DELETE FROM assets WHERE tenant = ? AND asset_id = ?",
                                       (tenant, asset_id))
                if deleted.rowcount == 0:
                    raise AssetNotFound(asset_id=asset_id)

        await self._run_write(run)
