"""Memory stores and facts in SQLite."""

from __future__ import annotations

from typing import Any

from ._core import SqliteCore

__all__ = ["SCHEMA", "FactsInSqlite"]

#: This part's tables and indexes, applied by migration 2 (see schema.py).
SCHEMA: tuple[str, ...] = ()


class FactsInSqlite(SqliteCore):
    """Memory stores and facts: not yet implemented."""

    async def create_memory_store(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_memory_store(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_memory_stores(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_memory_store(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def remember(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def recall(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def history(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def explain(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def forget(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def subject_facts(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def erase_subject(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
