"""The portal that lets the sync client run the async implementation.

A portal owns one event loop on one daemon thread. Sync calls hand a coroutine to that
loop and wait for its result, so the sync client is the async client, driven from another
thread, and cannot drift from it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from ..model import Page
from ._paging import AsyncPager

__all__ = ["Portal"]

T = TypeVar("T")
U = TypeVar("U")


class Portal:
    """An event loop on its own thread, and a way to run coroutines on it and wait."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ownstate-portal",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and return its result (or raise its error)."""
        if threading.get_ident() == self._thread.ident:
            coro.close()
            raise RuntimeError("a sync ownstate client cannot be called from its own loop")
        if self._closed:
            coro.close()
            raise RuntimeError("this ownstate client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def iterate(self, pager: AsyncPager[T], convert: Callable[[T], U]) -> Iterator[U]:
        """Walk ``pager`` one page per round trip, converting each element."""
        token = pager.start
        while True:
            page: Page[T] = self.call(pager.fetch(token))  # type: ignore[arg-type]
            for element in page.items:
                yield convert(element)
            if page.next_page_token is None:
                return
            token = page.next_page_token

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
