"""Assets: content-addressed bytes owned by sessions: the async public API (``client.assets``)."""

from __future__ import annotations

from ._scope import Scope

__all__ = ["AsyncAssets"]


class AsyncAssets:
    """Not yet implemented."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
