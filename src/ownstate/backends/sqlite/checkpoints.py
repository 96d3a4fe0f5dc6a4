"""Checkpoints and pending writes in SQLite."""

from __future__ import annotations

from typing import Any

from ._core import SqliteCore

__all__ = ["SCHEMA", "CheckpointsInSqlite"]

#: This part's tables and indexes, applied by migration 2 (see schema.py).
SCHEMA: tuple[str, ...] = ()


class CheckpointsInSqlite(SqliteCore):
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
