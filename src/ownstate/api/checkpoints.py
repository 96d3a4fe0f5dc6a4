"""Checkpoints, scoped to actor, session and run: the async public API (``client.checkpoints``)."""

from __future__ import annotations

from ._scope import Scope

__all__ = ["AsyncCheckpoints"]


class AsyncCheckpoints:
    """Not yet implemented."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
