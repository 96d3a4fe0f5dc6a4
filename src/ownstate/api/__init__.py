"""The public client objects and the functions that open them.

It gathers names from the modules of ``ownstate.api`` and opens the sync client
(:func:`connect`, the async client driven through a portal). It may touch those modules
and, for :func:`connect`'s arguments, the types of the backend, the embedder and the limits;
never a backend directly.
"""

from __future__ import annotations

from ..backends import Backend
from ..embeddings import Embedder
from ..limits import Limits
from ._paging import AsyncPager, keyset_page, page_by_name
from ._portal import InlinePortal, Portal, ThreadPortal
from .access import AsyncApiKeys
from .aio import (
    AsyncClient,
    AsyncSession,
    AsyncSessionStore,
    AsyncSessionStores,
    choose_backend,
    connect_async,
    start_client,
)
from .assets import AsyncAssets
from .checkpoints import AsyncCheckpoints
from .memory import AsyncMemoryStore, AsyncMemoryStores
from .runs import AsyncRuns
from .sync import (
    ApiKeys,
    Assets,
    Checkpoints,
    Client,
    MemoryStore,
    MemoryStores,
    Runs,
    Session,
    SessionStore,
    SessionStores,
)

__all__ = [
    "ApiKeys",
    "Assets",
    "AsyncApiKeys",
    "AsyncAssets",
    "AsyncCheckpoints",
    "AsyncClient",
    "AsyncMemoryStore",
    "AsyncMemoryStores",
    "AsyncPager",
    "AsyncRuns",
    "AsyncSession",
    "AsyncSessionStore",
    "AsyncSessionStores",
    "Checkpoints",
    "Client",
    "MemoryStore",
    "MemoryStores",
    "Runs",
    "Session",
    "SessionStore",
    "SessionStores",
    "connect",
    "connect_async",
    "keyset_page",
    "page_by_name",
]


def connect(
    url: str | None = None,
    *,
    backend: Backend | None = None,
    tenant: str | None = None,
    token: str | None = None,
    limits: Limits | None = None,
    migrate: bool = True,
    embedder: Embedder | None = None,
) -> Client:
    """Open a sync client on ``url``.

    The URL is the argument, else ``OWNSTATE_URL``, else ``sqlite:///ownstate.db``:
    ``memory://``, ``sqlite:///path.db``, ``postgresql://...``, ``redis://...``, or
    ``http(s)://host:port`` for an ownstate server, with its API key as ``token`` (else the
    URL's password, else ``OWNSTATE_TOKEN``). ``tenant`` scopes everything the client
    reads and writes (default ``"default"``; on a server, the key's tenant). With
    ``migrate=False`` the schema is only verified, never changed. ``backend=`` (instead of a
    URL) opens the client over a backend instance that is not yet set up, such as one
    written outside ownstate; the client sets it up and closes it.

    ``embedder`` (an :class:`~ownstate.embeddings.Embedder`, such as
    :class:`~ownstate.embeddings.MiniLM`) makes every fact written through the client
    carry a vector, and ``memory.search`` rank semantically and by fusion; a store keeps
    vectors of one model only (see ``docs/memory.md``).

    Raises :class:`~ownstate.errors.InvalidInput` (unknown scheme, bad tenant, both a URL
    and ``backend=``, ``token=`` with ``backend=``, ``backend=`` not a Backend, an
    ``embedder`` that is not one, or one given to a backend that stores no vectors),
    :class:`~ownstate.errors.Unauthenticated` (a server refused the key),
    :class:`~ownstate.errors.PermissionDenied` (``tenant`` is not the key's),
    :class:`~ownstate.errors.SchemaVersion`, :class:`~ownstate.errors.BackendUnavailable`.
    """
    chosen = choose_backend(url, backend, token=token, inline=True)
    portal: Portal = InlinePortal() if chosen.runs_inline else ThreadPortal()
    try:
        impl = portal.call(start_client(chosen, tenant=tenant, limits=limits, migrate=migrate,
                                        embedder=embedder))
    except BaseException:
        portal.close()
        raise
    return Client(portal, impl)
