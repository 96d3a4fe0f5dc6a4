"""Assets, in memory."""

from __future__ import annotations

from typing import Any

from ._data import MemoryBase

__all__ = ["AssetsInMemory"]


class AssetsInMemory(MemoryBase):
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
