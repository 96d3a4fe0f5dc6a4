"""Runs, leases and effects, in memory."""

from __future__ import annotations

from typing import Any

from ._data import MemoryBase

__all__ = ["RunsInMemory"]


class RunsInMemory(MemoryBase):
    """Runs, leases and effects: not yet implemented."""

    async def open_run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_runs(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def mark_awaiting(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def resume(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def close_run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def outstanding(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def record_effect(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_effect(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
