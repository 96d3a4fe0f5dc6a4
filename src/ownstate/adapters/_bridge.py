"""How an adapter reaches ownstate from a framework's sync and async code alike.

Frameworks call their storage both ways: LangGraph's ``get_tuple`` and ``aget_tuple``,
ADK's async services from sync runners. An adapter writes its logic once, as coroutines
over an :class:`~ownstate.AsyncClient`, and runs them through a :class:`Bridge`:

- built from a sync :class:`~ownstate.Client` (or a URL), sync calls run as the client's
  own do (:meth:`~ownstate.Client.run_coroutine`) and async calls are relayed to it without
  blocking the caller's loop (:meth:`~ownstate.Client.relay_coroutine`);
- built from an :class:`~ownstate.AsyncClient`, async calls run on the caller's loop, and
  sync calls are allowed only from another thread while that loop runs.

The bridge closes the client only when it opened it (``from_url``); an adapter built over
one takes its ``close`` and its use as a context manager from :class:`BridgedAdapter`. It
may touch only the public API (``ownstate.api``), never a backend.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, Self, TypeVar

from ..api import AsyncClient, Client, connect

__all__ = ["Bridge", "BridgedAdapter"]

T = TypeVar("T")


class Bridge:
    """Runs an adapter's coroutines for sync and async callers; see the module docstring."""

    def __init__(self, client: Client | AsyncClient, *, owned: bool = False) -> None:
        self._sync: Client | None
        if isinstance(client, Client):
            self.client: AsyncClient = client.aio
            self._sync = client
        elif isinstance(client, AsyncClient):
            self.client = client
            self._sync = None
        else:
            raise TypeError(f"expected an ownstate Client or AsyncClient, got {type(client)!r}")
        self._owned = owned
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def given(self) -> Client | AsyncClient:
        """The client this bridge was built from (the sync one when it was sync)."""
        return self._sync or self.client

    @classmethod
    def from_url(cls, url: str | None = None, **connect_args: Any) -> Bridge:
        """A bridge over a client it opens (and closes with :meth:`close`)."""
        return cls(connect(url, **connect_args), owned=True)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` for sync code and return its result."""
        if self._sync is not None:
            return self._sync.run_coroutine(coro)
        loop = self._loop
        if loop is None or not loop.is_running():
            coro.close()
            raise RuntimeError("an adapter built on an AsyncClient takes sync calls only from "
                               "another thread while its event loop runs; build it from a "
                               "sync Client (or from_url) to call it from sync code")
        if getattr(loop, "_thread_id", None) == threading.get_ident():
            coro.close()
            raise RuntimeError("sync call on the event loop that drives this adapter's "
                               "AsyncClient; use the async method instead")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def acall(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` for async code and return its result."""
        if self._sync is not None:
            return await self._sync.relay_coroutine(coro)
        self._loop = asyncio.get_running_loop()
        return await coro

    def close(self) -> None:
        """Close the client if this bridge opened it."""
        if self._owned and self._sync is not None:
            self._owned = False
            self._sync.close()


class BridgedAdapter:
    """What an adapter working through a :class:`Bridge` (its ``_bridge``) closes the same
    way: :meth:`close`, and ``with adapter:``, which closes it on the way out."""

    _bridge: Bridge

    def close(self) -> None:
        """Close the client if :meth:`from_url` opened it; a client passed in stays open."""
        self._bridge.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
