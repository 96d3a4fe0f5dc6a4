"""Memory stores and facts: the async public API (``client.memory_stores``)."""

from __future__ import annotations

from ._scope import Scope

__all__ = ["AsyncMemoryStore", "AsyncMemoryStores"]


class AsyncMemoryStores:
    """Not yet implemented."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

class AsyncMemoryStore:
    """Not yet implemented."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
