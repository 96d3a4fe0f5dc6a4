"""The public client objects and the functions that open them."""

from __future__ import annotations

from ..limits import Limits
from ._paging import AsyncPager
from ._portal import Portal
from .aio import (
    AsyncClient,
    AsyncSession,
    AsyncSessionStore,
    AsyncSessionStores,
    connect_async,
    open_client,
)
from .sync import Client, Session, SessionStore, SessionStores

__all__ = [
    "AsyncClient",
    "AsyncPager",
    "AsyncSession",
    "AsyncSessionStore",
    "AsyncSessionStores",
    "Client",
    "Session",
    "SessionStore",
    "SessionStores",
    "connect",
    "connect_async",
]


def connect(
    url: str | None = None,
    *,
    tenant: str = "default",
    limits: Limits | None = None,
    migrate: bool = True,
) -> Client:
    """Open a sync client on ``url``.

    The URL is the argument, else ``OWNSTATE_URL``, else ``sqlite:///ownstate.db``:
    ``memory://``, ``sqlite:///path.db``. ``tenant`` scopes everything the client reads and
    writes. With ``migrate=False`` the schema is only verified, never changed.

    Raises :class:`~ownstate.errors.InvalidInput` (unknown scheme, bad tenant),
    :class:`~ownstate.errors.SchemaVersion`, :class:`~ownstate.errors.BackendUnavailable`.
    """
    portal = Portal()
    try:
        impl = portal.call(
            open_client(url, tenant=tenant, limits=limits, migrate=migrate, inline=True))
    except BaseException:
        portal.close()
        raise
    return Client(portal, impl)
