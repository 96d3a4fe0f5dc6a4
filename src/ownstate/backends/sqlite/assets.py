"""Assets in SQLite."""

from __future__ import annotations

from typing import Any

from ._core import SqliteCore

__all__ = ["SCHEMA", "AssetsInSqlite"]

#: This part's tables and indexes, applied by migration 2 (see schema.py).
SCHEMA: tuple[str, ...] = ()


class AssetsInSqlite(SqliteCore):
    """Assets: not yet implemented."""

    async def put_asset(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_asset(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_asset_ref(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_assets(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_asset(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
