"""Auto-paging shared by the async API and its sync twin."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from ..model import Page

__all__ = ["AsyncPager"]

T = TypeVar("T")


class AsyncPager(Generic[T]):
    """Every element of a listing from a starting token on, fetched a page at a time.

    Iterate it with ``async for``. The sync twin fetches the same pages through its portal,
    one round trip per page rather than per element.
    """

    def __init__(self, fetch: Callable[[str | None], Awaitable[Page[T]]], start: str | None):
        self.fetch = fetch
        self.start = start

    async def _iterate(self) -> AsyncIterator[T]:
        token = self.start
        while True:
            page = await self.fetch(token)
            for element in page.items:
                yield element
            if page.next_page_token is None:
                return
            token = page.next_page_token

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()
