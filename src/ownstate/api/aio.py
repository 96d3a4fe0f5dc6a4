"""The async client: the source of truth for every public operation.

Here live :class:`AsyncClient`, the session stores (:class:`AsyncSessionStores`,
:class:`AsyncSessionStore`) and :func:`connect_async`; each kind of state has its own module
(``session``, ``memory``, ``runs``, ``checkpoints``, ``assets``, ``access``), which this one
composes and none of which imports it back. It may touch the backend through the scope.

The sync client in :mod:`ownstate.api.sync` is generated from this module and calls these
methods through a portal; change behaviour here, then run ``python scripts/generate_sync.py``.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar

from .. import limits as _validate
from .._ids import new_id, now
from .._tokens import decode_token, encode_token
from ..backends import Backend, open_backend, resolve_url
from ..backends.base import SessionOrder
from ..backends.ports.search import TextQuery, text_query
from ..embeddings import Embedder
from ..errors import InvalidInput, PermissionDenied
from ..limits import TENANT_RE, Limits
from ..model import ItemHit, Page
from . import _semantic
from . import access as _access
from ._paging import AsyncPager, StoreListing, order_key, token_position
from ._scope import Scope as _Scope
from ._semantic import Mode
from .assets import AsyncAssets
from .checkpoints import AsyncCheckpoints
from .memory import AsyncMemoryStores
from .runs import AsyncRuns
from .session import AsyncSession

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AsyncSessionStore",
    "AsyncSessionStores",
    "connect_async",
]

_SESSION_ORDERS: dict[str, tuple[SessionOrder, bool]] = {
    "create_time desc": ("create_time", True),
    "create_time asc": ("create_time", False),
    "last_activity_time desc": ("last_activity_time", True),
    "last_activity_time asc": ("last_activity_time", False),
}


class AsyncSessionStore(_access.StoreHandle):
    """A named container of sessions."""

    _kind = "session_store"

    def __repr__(self) -> str:
        return f"<SessionStore {self.name}>"

    async def add(
        self,
        *,
        actor_id: str,
        session_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> AsyncSession:
        """Create a session for ``actor_id`` (required; it groups sessions and grants
        nothing). ``session_id`` is generated unless given.

        Raises :class:`~ownstate.errors.AlreadyExists` for a taken ``session_id``,
        :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        actor = s.limits.actor_id(actor_id)
        sid = _validate.session_id(session_id) if session_id is not None else new_id("ses")
        labels = s.limits.metadata(metadata)
        record = await s.backend.create_session(s.tenant, self.name, sid, actor, labels, now())
        return AsyncSession(s, record)

    async def get(self, session_id: str) -> AsyncSession:
        """The session with this id. Raises :class:`~ownstate.errors.SessionNotFound`."""
        s = self._scope
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput("session_id must be a non-empty string", field="session_id")
        record = await s.backend.get_session(s.tenant, self.name, session_id)
        return AsyncSession(s, record)

    async def list_sessions_page(
        self,
        *,
        actor_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "create_time desc",
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> Page[AsyncSession]:
        """One page of sessions, filtered by actor and by metadata labels (all must match).

        ``order_by`` is ``create_time`` or ``last_activity_time``, ``desc`` (default) or
        ``asc``. Tokens never repeat or skip a session while others are being added.
        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.LimitExceeded`,
        :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        order = order_key(order_by, _SESSION_ORDERS)
        column, descending = _SESSION_ORDERS[order]
        size = s.limits.page_size(page_size)
        labels = s.limits.metadata(metadata)
        actor = s.limits.actor_id(actor_id) if actor_id is not None else None
        scope = "\x00".join(["sessions", s.tenant, self.name, order, actor or "",
                             repr(sorted(labels.items()))])
        after = None
        if page_token is not None:
            after = token_position(decode_token(page_token, scope),
                              1 if column == "create_time" else 2)
            # A token's checksum is no secret, so its position is checked like input:
            # (ordinal) for creation order, (time text, ordinal) for activity order.
            if not isinstance(after[-1], int) or (len(after) == 2
                                                  and not isinstance(after[0], str)):
                raise InvalidInput("page_token is malformed", field="page_token")
        records, cursor = await s.backend.list_sessions(
            s.tenant, self.name, actor_id=actor, metadata=labels, order=column,
            descending=descending, limit=size, after=after)
        token = encode_token(scope, cursor) if cursor is not None else None
        return Page([AsyncSession(s, r) for r in records], token)

    async def list_sessions_after(
        self,
        *,
        actor_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "create_time desc",
        after: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[AsyncSession], str | None]:
        """Up to ``limit`` matching sessions after the cursor ``after``, and the cursor
        after the last of them (``None`` when no more remain): the keyset listing behind
        :meth:`list_sessions_page`, whose cursor is the storage position itself (JSON
        text) rather than a token bound to this listing. ``limit`` is as in
        :meth:`AsyncSession.list_items_after`.

        Raises :class:`~ownstate.errors.InvalidInput` (bad filter or order, ``after``
        not a cursor of this order), :class:`~ownstate.errors.LimitExceeded`,
        :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        order = order_key(order_by, _SESSION_ORDERS)
        column, descending = _SESSION_ORDERS[order]
        size = s.limits.keyset_size(limit)
        labels = s.limits.metadata(metadata)
        actor = s.limits.actor_id(actor_id) if actor_id is not None else None
        start = _session_cursor(after, column) if after is not None else None
        records, cursor = await s.backend.list_sessions(
            s.tenant, self.name, actor_id=actor, metadata=labels, order=column,
            descending=descending, limit=size, after=start)
        return ([AsyncSession(s, r) for r in records],
                json.dumps(cursor) if cursor is not None else None)

    def list_sessions(
        self,
        *,
        actor_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "create_time desc",
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> AsyncPager[AsyncSession]:
        """Every matching session from ``page_token`` on, fetched a page at a time.

        Raises as :meth:`list_sessions_page`, when iteration starts.
        """
        return AsyncPager(
            lambda token: self.list_sessions_page(
                actor_id=actor_id, metadata=metadata, order_by=order_by, page_size=page_size,
                page_token=token),
            page_token,
        )


class AsyncSessionStores(StoreListing[AsyncSessionStore]):
    """The tenant's session stores: ``client.session_stores``."""

    _listing = "stores"

    async def create(self, name: str, *, owner: str | None = None,
                     index_items: bool = True) -> AsyncSessionStore:
        """Create a store named with 3-55 chars of ``[a-z0-9_-]``, owned by ``owner`` (a
        principal) when one is given. With ``index_items=False`` its items are not indexed
        for :meth:`search_items` (nor ever found by it): appends skip the index's cost.

        Raises :class:`~ownstate.errors.AlreadyExists`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        valid = _validate.store_name(name)
        if owner is not None:
            owner = _access.principal_name(owner)
        if not isinstance(index_items, bool):
            raise InvalidInput("index_items must be True or False", field="index_items")
        if index_items:
            record = await s.backend.create_store(s.tenant, valid, now(), owner)
        else:
            record = await s.backend.create_store(s.tenant, valid, now(), owner,
                                                  index_items=False)
        return AsyncSessionStore(s, record)

    async def get(self, name: str) -> AsyncSessionStore:
        """The store with this name. Raises :class:`~ownstate.errors.StoreNotFound`."""
        s = self._scope
        record = await s.backend.get_store(s.tenant, _validate.store_name(name))
        return AsyncSessionStore(s, record)

    async def session(self, store: str, session_id: str) -> AsyncSession:
        """A handle on session ``session_id`` of ``store``, made without reading either, so
        that a write costs one round trip. Its operations act on what is stored and raise
        :class:`~ownstate.errors.SessionNotFound` when there is no such session; its
        attributes other than ``store`` and ``session_id`` need ``refresh()`` first.

        Raises :class:`~ownstate.errors.InvalidInput` for a malformed store name or an
        empty ``session_id``.
        """
        valid = _validate.store_name(store)
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput("session_id must be a non-empty string", field="session_id")
        return AsyncSession(self._scope, None, store=valid, session_id=session_id)

    async def _named_after(self, limit: int, after: str | None) -> list[AsyncSessionStore]:
        s = self._scope
        return [AsyncSessionStore(s, r)
                for r in await s.backend.list_stores(s.tenant, limit, after)]

    async def reindex(self, store: str, *, batch_size: int = 256,
                      replace: bool = False) -> int:
        """Give every item of ``store`` that has none a vector from the client's embedder
        (items appended before the embedder was configured, by a client without one, or
        restored from an archive, which carries no vectors), so that semantic and hybrid
        :meth:`search_items` find them; returns how many were embedded. Works in batches of
        ``batch_size`` by session id and seq, each committed on its own, so an interrupted
        reindex resumes where it stopped. ``replace=True`` first drops every item vector
        of the store, to switch models. Items with no text get none, as on append, and a
        store created with ``index_items=False`` takes none (the count is 0).

        Raises :class:`~ownstate.errors.InvalidInput` (no embedder; a bad batch_size),
        :class:`~ownstate.errors.EmbedderMismatch` (the store holds another model's item
        vectors and ``replace`` is false), :class:`~ownstate.errors.StoreNotFound`.
        """
        return await _semantic.reindex_items(self._scope, _validate.store_name(store),
                                             batch_size=batch_size, replace=replace)

    async def search_items(
        self,
        query: str,
        *,
        store: str | None = None,
        stores: Sequence[str] | None = None,
        actor_id: str | None = None,
        session_id: str | None = None,
        limit: int = 10,
        mode: Mode | None = None,
    ) -> builtins.list[ItemHit]:
        """The conversation items that best match ``query``, best first, across the
        tenant's session stores: each an :class:`ItemHit` with the item, its store, its
        session's actor and its BM25 score.

        An item is found by what a person reads in it (message text, tool output), the
        names of the tools it calls and their arguments, compared without case or
        accents; scripts written without spaces are found by substring, as in
        ``memory.search`` (``docs/memory.md`` explains the ranking). Equal scores are
        ordered by store, session id and seq. ``store`` limits the search to one store
        (which must exist), ``stores`` to several (unknown names find nothing), and
        ``actor_id`` and ``session_id`` to those sessions. Items of a store created with
        ``index_items=False`` are never found. ``mode`` is ``lexical`` (BM25, the score),
        ``semantic`` (cosine similarity of the items' vectors to the query's) or
        ``hybrid`` (their reciprocal-rank fusion), as for ``memory.search``; hybrid by
        default for a client with an embedder, else lexical.

        Raises :class:`~ownstate.errors.InvalidInput` (a query with no word, a malformed
        filter, an unknown mode, a semantic or hybrid mode without an embedder),
        :class:`~ownstate.errors.LimitExceeded` (a query over 2,000 characters or 64
        distinct terms, or ``limit`` outside 1 to ``Limits.max_page_size``),
        :class:`~ownstate.errors.StoreNotFound` (``store`` does not exist).
        """
        s = self._scope
        parsed = text_query(query)
        chosen = _semantic.choose_mode(s, mode)
        size = s.limits.page_size(limit, "limit")
        if store is not None and stores is not None:
            raise InvalidInput("give store or stores, not both", field="stores")
        names: list[str] | None = None
        if store is not None:
            names = [_validate.store_name(store)]
            await s.backend.get_store(s.tenant, names[0])
        elif stores is not None:
            names = _validate.name_list(stores, _validate.store_name, s.limits.max_page_size,
                                        field="stores", what="store names")
            if not names:
                return []
        for value, field in ((actor_id, "actor_id"), (session_id, "session_id")):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidInput(f"{field} must be a non-empty string", field=field)

        async def lexical(n: int, terms: TextQuery = parsed) -> builtins.list[ItemHit]:
            return await s.backend.search_items(s.tenant, terms, stores=names,
                                                actor_id=actor_id, session_id=session_id,
                                                limit=n)

        async def semantic(n: int) -> builtins.list[ItemHit]:
            return await _semantic.nearest_items(s, query, stores=names, actor_id=actor_id,
                                                 session_id=session_id, limit=n)

        if _semantic.server_ranked(s):
            return await s.backend.ranked_items(s.tenant, parsed, stores=names,
                                                actor_id=actor_id, session_id=session_id,
                                                limit=size, mode=chosen)
        if chosen == "lexical":
            return await lexical(size)
        if chosen == "semantic":
            return await semantic(size)
        question = _semantic.content_terms(parsed)
        return await _semantic.fused(
            lambda n: lexical(n, question), semantic,
            lambda h: f"{h.store}\x00{h.item.item_id}",
            lambda h, score: ItemHit(h.store, h.actor_id, h.item, score), size)

    async def delete(self, name: str, *, force: bool = False) -> int:
        """Delete a store; returns how many sessions went with it.

        Refused with :class:`~ownstate.errors.StoreNotEmpty` while it holds sessions, unless
        ``force=True``, which deletes its sessions and their items. Memory is never touched.
        Raises :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        valid = _validate.store_name(name)
        return await s.backend.delete_store(s.tenant, valid, force)


_TIME_CURSOR_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")


def _session_cursor(text: object, order: str) -> list[Any]:
    """A keyset cursor from its JSON text, checked to be of the shape the storage made:
    ``[ordinal]`` in creation order, ``[time text, ordinal]`` in activity order."""
    try:
        cursor = _validate.decode_json(text, field="after") if isinstance(text, str) else None
    except InvalidInput:
        cursor = None
    size = 1 if order == "create_time" else 2
    refused = InvalidInput("after is not a cursor of this listing", field="after")
    if not isinstance(cursor, list) or len(cursor) != size:
        raise refused
    position = cursor[-1]
    if isinstance(position, bool) or not isinstance(position, int) \
            or not 0 <= position <= _validate.MAX_INT64:
        raise refused
    if size == 2:
        moment = cursor[0]
        if not isinstance(moment, str) or _TIME_CURSOR_RE.fullmatch(moment) is None:
            raise refused
        try:
            datetime.fromisoformat(moment)
        except ValueError:
            raise refused from None
    return cursor


def _tenant_name(tenant: str) -> str:
    if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
        raise InvalidInput("tenant must be 1-64 chars of [A-Za-z0-9_.:-]", field="tenant")
    return tenant


class AsyncClient:
    """Everything ownstate stores for one tenant, over one backend.

    Use :func:`connect_async` rather than building one directly. Close it when done
    (``await client.close()`` or ``async with``).
    """

    __twin_attributes__: ClassVar[dict[str, str]] = {
        "session_stores": "AsyncSessionStores",
        "memory_stores": "AsyncMemoryStores",
        "runs": "AsyncRuns",
        "checkpoints": "AsyncCheckpoints",
        "assets": "AsyncAssets",
        "api_keys": "AsyncApiKeys",
    }

    def __init__(
        self,
        backend: Backend,
        *,
        tenant: str = "default",
        limits: Limits | None = None,
        owns_backend: bool = True,
        embedder: Embedder | None = None,
    ) -> None:
        self._scope = _Scope(backend, _tenant_name(tenant), limits or Limits(),
                             _semantic.check_embedder(backend, embedder))
        self._owns_backend = owns_backend
        self.session_stores = AsyncSessionStores(self._scope)
        self.memory_stores = AsyncMemoryStores(self._scope)
        self.runs = AsyncRuns(self._scope)
        self.checkpoints = AsyncCheckpoints(self._scope)
        self.assets = AsyncAssets(self._scope)
        self.api_keys = _access.AsyncApiKeys(self._scope)

    def __repr__(self) -> str:
        return f"<AsyncClient tenant={self.tenant!r} backend={type(self.backend).__name__}>"

    @property
    def tenant(self) -> str:
        return self._scope.tenant

    @property
    def backend(self) -> Backend:
        return self._scope.backend

    @property
    def limits(self) -> Limits:
        return self._scope.limits

    @property
    def capabilities(self) -> frozenset[str]:
        """What the backend can do: names from ``ownstate.backends.Capability``."""
        return frozenset(type(self._scope.backend).capabilities)

    @property
    def runs_inline(self) -> bool:
        """True when no operation of the backend ever waits on an event loop, so an
        adapter may drive its coroutines one after another on the caller's thread
        rather than gathering them."""
        return self._scope.backend.runs_inline

    @property
    def embedder(self) -> Embedder | None:
        """What turns text into vectors for semantic and hybrid search, if anything."""
        return self._scope.embedder

    async def migrate(self) -> tuple[int, int]:
        """Bring the schema to the current version; returns ``(found, now)`` versions."""
        found, expected = await self.backend.schema_status()
        await self.backend.setup(migrate=True)
        return found, expected

    async def check(self) -> tuple[int, int]:
        """Verify the schema without changing it; returns ``(found, expected)``.

        Raises :class:`~ownstate.errors.SchemaVersion` when they differ.
        """
        await self.backend.setup(migrate=False)
        return await self.backend.schema_status()

    async def isolation_bypass(self) -> str | None:
        """Why the database does not itself confine this connection to a tenant's rows
        although it is meant to, or None when it does.

        On PostgreSQL, row-level security does not apply to a superuser, a role with
        ``BYPASSRLS``, or the tables' owner unless they ``FORCE ROW LEVEL SECURITY``: every
        query still names its tenant, but nothing stands behind one that forgets to. The
        answer is one line saying which. None on backends whose isolation is ownstate's
        own predicates alone (memory, SQLite, Redis) and on a server's clients.
        """
        return await self.backend.isolation_bypass()

    async def grant_app_role(self, role: str) -> bool:
        """Make ``role`` the application's database role: created (``NOLOGIN``) when it
        is missing, and granted what the application needs to read and write rows, under
        row-level security, owning nothing. True when the role was created. Run it as the
        schema's owner, after migrating; running it again is harmless.

        Raises :class:`~ownstate.errors.InvalidInput` for a role that row-level security
        would not bind (a superuser, ``BYPASSRLS``, an owner of the tables) and on
        backends without roles; :class:`~ownstate.errors.PermissionDenied` when this
        connection may not create the role or grant access. See docs/postgres.md.
        """
        return await self.backend.grant_app_role(role)

    async def close(self) -> None:
        """Close the backend if this client opened it."""
        if self._owns_backend:
            await self.backend.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def choose_backend(url: str | None, backend: Backend | None, *, token: str | None,
                   inline: bool = False) -> Backend:
    """The backend ``connect``/``connect_async`` open: ``backend`` when given, else the one
    the URL names (see :func:`~ownstate.backends.open_backend`)."""
    if backend is None:
        return open_backend(resolve_url(url), inline=inline, token=token)
    if url is not None:
        raise InvalidInput("give a URL or backend=, not both", field="backend")
    if token is not None:
        raise InvalidInput("token= is for http:// and https:// URLs", field="token")
    if not isinstance(backend, Backend):
        raise InvalidInput(f"backend= takes an ownstate.backends.Backend, not "
                           f"{type(backend).__name__}", field="backend")
    return backend


async def start_client(
    backend: Backend, *, tenant: str | None, limits: Limits | None, migrate: bool,
    embedder: Embedder | None = None,
) -> AsyncClient:
    """Set up ``backend`` and wrap it in a client that owns it (closing it on failure).

    ``tenant`` defaults to the backend's own (a server's key decides it) or ``"default"``;
    a tenant other than the one the key belongs to is refused with
    :class:`~ownstate.errors.PermissionDenied`.
    """
    try:
        _semantic.check_embedder(backend, embedder)  # before setup, which may reach a server
        if tenant is not None:
            _tenant_name(tenant)
        await backend.setup(migrate=migrate)
        bound = backend.bound_tenant
        if bound is not None and tenant is not None and tenant != bound:
            raise PermissionDenied(f"this API key acts for tenant {bound!r}, not {tenant!r}",
                                   tenant=tenant)
        return AsyncClient(backend, tenant=bound or tenant or "default", limits=limits,
                           embedder=embedder)
    except BaseException:
        await backend.close()
        raise


async def connect_async(
    url: str | None = None,
    *,
    backend: Backend | None = None,
    tenant: str | None = None,
    token: str | None = None,
    limits: Limits | None = None,
    migrate: bool = True,
    embedder: Embedder | None = None,
) -> AsyncClient:
    """Open an async client on ``url``; the same surface as :func:`ownstate.connect`.

    The URL is the argument, else ``OWNSTATE_URL``, else ``sqlite:///ownstate.db``; an
    ``http(s)://`` URL reaches an ownstate server with the API key ``token``. With
    ``migrate=False`` the schema is only verified (for processes that may not run DDL).
    ``backend=`` (instead of a URL) opens the client over a backend instance that is not
    yet set up, such as one written outside ownstate; the client sets it up and closes it.
    Raises :class:`~ownstate.errors.InvalidInput` (unknown scheme; both a URL and
    ``backend=``; ``token=`` with ``backend=``; ``backend=`` not a Backend),
    :class:`~ownstate.errors.Unauthenticated` (a server refused the key),
    :class:`~ownstate.errors.PermissionDenied` (``tenant`` is not the key's),
    :class:`~ownstate.errors.SchemaVersion`, :class:`~ownstate.errors.BackendUnavailable`.
    """
    chosen = choose_backend(url, backend, token=token)
    return await start_client(chosen, tenant=tenant, limits=limits, migrate=migrate,
                              embedder=embedder)
