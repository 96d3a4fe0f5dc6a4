"""Portals: how the sync client runs the async implementation.

The sync client is the async client, driven from sync code, so the two cannot drift. A
portal is how a coroutine gets run:

- :class:`InlinePortal` drives it to completion on the calling thread. It serves backends
  whose operations never suspend (memory, and SQLite, PostgreSQL and a plain ``http://``
  server as the sync client opens them), so a call costs no thread hop and concurrent
  threads really run concurrently.
- :class:`ThreadPortal` hands it to an event loop on a daemon thread and waits. It serves
  backends bound to one event loop (a Redis connection pool, a remote server's client, a
  PostgreSQL backend made over an async pool).

It runs the coroutines it is given, on a thread and an event loop of its own making. It may
touch only the async pager (:mod:`._paging`), the model and the inline flag
(``ownstate._inline``), never a backend.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from .._inline import drive
from ..model import Page
from ._paging import AsyncPager

__all__ = ["InlinePortal", "Portal", "ThreadPortal"]

T = TypeVar("T")
U = TypeVar("U")


class Portal:
    """Runs coroutines for a sync client; see the module docstring for the two kinds."""

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion and return its result (or raise its error)."""
        raise NotImplementedError

    def iterate(self, pager: AsyncPager[T], convert: Callable[[T], U]) -> Iterator[U]:
        """Walk ``pager`` one page per call, converting each element."""
        token = pager.start
        while True:
            page: Page[T] = self.call(pager.fetch(token))  # type: ignore[arg-type]
            for element in page.items:
                yield convert(element)
            if page.next_page_token is None:
                return
            token = page.next_page_token

    async def relay(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` for a caller on some other event loop, without blocking that loop
        longer than the coroutine itself would."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the portal holds."""


class InlinePortal(Portal):
    """Drives each coroutine on the calling thread, with no event loop.

    Only for coroutines that never wait on the loop: a bare ``yield`` (``asyncio.sleep(0)``)
    is stepped over; anything that needs a running loop fails loudly. While it drives one,
    :data:`ownstate._inline.driven_inline` is set: the backend may block this thread. A
    coroutine relayed for async code runs on that code's loop, without it.
    """

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return drive(coro)

    async def relay(self, coro: Coroutine[Any, Any, T]) -> T:
        return await coro


class ThreadPortal(Portal):
    """An event loop on its own thread, and a way to run coroutines on it and wait."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ownstate-portal",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.get_ident() == self._thread.ident:
            coro.close()
            raise RuntimeError("a sync ownstate client cannot be called from its own loop")
        if self._closed:
            coro.close()
            raise RuntimeError("this ownstate client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def relay(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("this ownstate client is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
