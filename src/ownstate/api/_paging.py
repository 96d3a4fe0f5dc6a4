"""Paging shared by the async API and its sync twin: the auto-pager, token positions,
listing orders, pages by token over keyset listings (:func:`keyset_page`,
:func:`page_by_name`, public as ``ownstate.api.keyset_page`` and ``page_by_name`` for
listings composed outside the API, such as the server's per-principal ones), and the
listing by name that the session stores and the memory stores share
(:class:`StoreListing`).

It may touch page tokens (``ownstate._tokens``) and the limits, never a backend: a
listing's records come from a function (or, for :class:`StoreListing`, a method) that
its caller supplies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from .._tokens import decode_token, encode_token
from ..errors import InvalidInput
from ..limits import Limits, int64
from ..model import Page
from ._scope import Scope

__all__ = ["AsyncPager", "StoreListing", "keyset_limit", "keyset_page", "name_cursor",
           "order_key", "page_by_name", "token_position"]

T = TypeVar("T")
C = TypeVar("C", int, str)


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


def order_key(order_by: str, choices: Mapping[str, Any]) -> str:
    """The key of ``choices`` that ``order_by`` names (``"create_time"`` alone is ascending).

    Raises :class:`~ownstate.errors.InvalidInput`.
    """
    normal = " ".join(order_by.lower().split()) if isinstance(order_by, str) else ""
    if normal in choices:
        return normal
    if normal in {name.split()[0] for name in choices}:
        return f"{normal} asc"
    raise InvalidInput(f"order_by must be one of {sorted(choices)}", field="order_by")


def token_position(position: list[Any], size: int) -> list[Any]:
    """A decoded token's position when it holds ``size`` ints or strings.

    Raises :class:`~ownstate.errors.InvalidInput` (the token is malformed).
    """
    if len(position) != size or not all(
        isinstance(p, (int, str)) and not isinstance(p, bool) for p in position
    ):
        raise InvalidInput("page_token is malformed", field="page_token")
    return position


def keyset_limit(limit: object, limits: Limits) -> int:
    """A store listing's ``limit``: a positive integer. It is not held to the page bound,
    so a reader with larger pages than this client's still lists every store."""
    if limit is None:
        return limits.default_page_size
    return int64(limit, field="limit", minimum=1)


def name_cursor(after: object) -> str | None:
    """A store listing's ``after``: a name (any text; stores are listed after it)."""
    if after is not None and not isinstance(after, str):
        raise InvalidInput("after must be a store name", field="after")
    return after


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


async def keyset_page(
    limits: Limits,
    listing: str,
    page_size: int | None,
    page_token: str | None,
    fetch: Callable[[int, C | None], Awaitable[tuple[list[T], C | None]]],
    *,
    cursor: type[C],
) -> tuple[list[T], str | None]:
    """One page of a keyset listing, and the token of the next page: paging by tokens
    over a listing that is read by cursor (``list_after``), such as one a caller composes
    from what a principal may read.

    ``listing`` names what is listed (and for whom), so a token from another listing is
    refused. ``fetch(limit, after)`` returns up to ``limit`` records after the cursor
    ``after`` (``None``: from the start) and the cursor of the next page (``None``: no
    more); cursors are of type ``cursor`` (``int`` or ``str``). Raises
    :class:`~ownstate.errors.InvalidInput` (a malformed token, or one of another listing)
    and :class:`~ownstate.errors.LimitExceeded` (page size out of range).
    """
    size = limits.page_size(page_size)
    after = None
    if page_token is not None:
        position = decode_token(page_token, listing)
        if (len(position) != 1 or isinstance(position[0], bool)
                or not isinstance(position[0], cursor)):
            raise InvalidInput("page_token is malformed", field="page_token")
        after = position[0]
    records, following = await fetch(size, after)
    return records, encode_token(listing, [following]) if following is not None else None


async def page_by_name(
    limits: Limits,
    listing: str,
    page_size: int | None,
    page_token: str | None,
    fetch: Callable[[int, str | None], Awaitable[list[N]]],
) -> tuple[list[N], str | None]:
    """One page of named records in name order, and the token of the next page.

    ``listing`` names what is listed (and for whom), so a token from another listing is
    refused. ``fetch(limit, after)`` returns up to ``limit`` records named after ``after``.
    Raises :class:`~ownstate.errors.InvalidInput` (bad token) and
    :class:`~ownstate.errors.LimitExceeded` (page size out of range).
    """

    async def named(size: int, after: str | None) -> tuple[list[N], str | None]:
        records = await fetch(size + 1, after)
        more = len(records) > size
        del records[size:]
        return records, records[-1].name if more else None

    return await keyset_page(limits, listing, page_size, page_token, named, cursor=str)


H = TypeVar("H", bound=_Named)


class StoreListing(Generic[H]):
    """The listing by name of a tenant's stores of one kind, shared by
    ``client.session_stores`` and ``client.memory_stores``: a page by token
    (:meth:`list_page`), the keyset listing behind it (:meth:`list_after`) and every
    store a page at a time (:meth:`list`). A subclass names its listing in ``_listing``
    (page tokens are bound to it and to the tenant) and reads up to ``limit`` handles
    named after ``after`` in :meth:`_named_after`. The sync generator writes these
    methods into each subclass's twin, ``H`` read as that subclass's handle."""

    _listing: ClassVar[str]

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    async def _named_after(self, limit: int, after: str | None) -> list[H]:
        raise NotImplementedError

    async def list_page(
        self, *, page_size: int | None = None, page_token: str | None = None
    ) -> Page[H]:
        """One page of stores, by name.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.LimitExceeded`.
        """
        s = self._scope
        handles, token = await page_by_name(s.limits, f"{self._listing}\x00{s.tenant}",
                                            page_size, page_token, self._named_after)
        return Page(handles, token)

    async def list_after(
        self, *, after: str | None = None, limit: int | None = None
    ) -> list[H]:
        """Up to ``limit`` stores (``Limits.default_page_size`` by default) named after
        ``after``, by name: the keyset listing behind :meth:`list_page`.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        return await self._named_after(keyset_limit(limit, self._scope.limits),
                                       name_cursor(after))

    def list(
        self, *, page_size: int | None = None, page_token: str | None = None
    ) -> AsyncPager[H]:
        """Every store, by name, fetched a page at a time.

        Raises as :meth:`list_page`, when iteration starts.
        """
        return AsyncPager(
            lambda token: self.list_page(page_size=page_size, page_token=token), page_token)
