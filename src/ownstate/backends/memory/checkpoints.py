"""Checkpoints and pending writes, in memory."""

from __future__ import annotations

from typing import Any

from ._data import MemoryBase

__all__ = ["CheckpointsInMemory"]


class CheckpointsInMemory(MemoryBase):
    """Checkpoints and pending writes: not yet implemented."""

    async def put_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def put_writes(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_run_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_session_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def copy_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def apply_retention(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def checkpoint_usage(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
