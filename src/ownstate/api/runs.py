"""Runs, leases and the effects ledger: the async public API (``client.runs``)."""

from __future__ import annotations

from ._scope import Scope

__all__ = ["AsyncRuns"]


class AsyncRuns:
    """Not yet implemented."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
