"""The async client: the source of truth for every public operation.

The sync client in :mod:`ownstate.api.sync` is generated from this module and calls these
methods through a portal; change behaviour here, then run ``python scripts/generate_sync.py``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar

from .. import limits as _validate
from .._ids import new_id, now
from .._tokens import decode_token, encode_token
from ..backends import Backend, NewItem, open_backend, resolve_url
from ..backends.base import SessionOrder
from ..errors import InvalidInput, PermissionDenied
from ..formats.derive import derive_columns, infer_format
from ..formats.neutral import check_format, convert
from ..limits import Limits
from ..model import JSON, Grant, Item, Page, SessionRecord, SessionStoreRecord
from . import access as _access
from ._paging import AsyncPager, page_by_name
from ._scope import Scope as _Scope
from .assets import AsyncAssets
from .checkpoints import AsyncCheckpoints
from .memory import AsyncMemoryStores
from .runs import AsyncRuns

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AsyncSessionStore",
    "AsyncSessionStores",
    "connect_async",
]

_TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_ITEM_ORDERS = {"create_time desc": True, "create_time asc": False}
_SESSION_ORDERS: dict[str, tuple[SessionOrder, bool]] = {
    "create_time desc": ("create_time", True),
    "create_time asc": ("create_time", False),
    "last_activity_time desc": ("last_activity_time", True),
    "last_activity_time asc": ("last_activity_time", False),
}


def _order(order_by: str, choices: Mapping[str, Any]) -> str:
    normal = " ".join(order_by.lower().split()) if isinstance(order_by, str) else ""
    if normal in choices:
        return normal
    if normal in {name.split()[0] for name in choices}:
        return f"{normal} asc"
    raise InvalidInput(f"order_by must be one of {sorted(choices)}", field="order_by")


def _position(position: list[Any], size: int) -> list[Any]:
    if len(position) != size or not all(
        isinstance(p, (int, str)) and not isinstance(p, bool) for p in position
    ):
        raise InvalidInput("page_token is malformed", field="page_token")
    return position


class AsyncSession:
    """One session: its record as last read, and every operation on its history.

    Attribute values are a snapshot from when the handle was made or last refreshed;
    operations always act on what is stored now. A handle from ``session_stores.session()``
    has read nothing yet: only ``store`` and ``session_id`` are known until ``refresh()``.
    """

    def __init__(self, scope: _Scope, record: SessionRecord | None, *,
                 store: str | None = None, session_id: str | None = None) -> None:
        self._scope = scope
        self._record = record
        self._store = record.store if record is not None else str(store)
        self._session_id = record.session_id if record is not None else str(session_id)

    def __repr__(self) -> str:
        return f"<Session {self._store}/{self._session_id}>"

    def _read(self) -> SessionRecord:
        if self._record is None:
            raise InvalidInput("this session handle has not read the session yet; "
                               "call refresh() first", field="session",
                               store=self._store, session_id=self._session_id)
        return self._record

    @property
    def record(self) -> SessionRecord:
        """The stored record as last read.

        Raises :class:`~ownstate.errors.InvalidInput` on a handle that has read nothing yet
        (as do the attributes below other than ``store`` and ``session_id``).
        """
        return self._read()

    @property
    def store(self) -> str:
        """The name of the session store this session lives in."""
        return self._store

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def actor_id(self) -> str:
        return self._read().actor_id

    @property
    def parent_session_id(self) -> str | None:
        return self._read().parent_session_id

    @property
    def root_session_id(self) -> str:
        return self._read().root_session_id

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._read().metadata)

    @property
    def create_time(self) -> datetime:
        return self._read().create_time

    @property
    def last_activity_time(self) -> datetime:
        return self._read().last_activity_time

    async def refresh(self) -> AsyncSession:
        """Re-read the stored record into this handle and return it.

        Raises :class:`~ownstate.errors.SessionNotFound` if the session was deleted.
        """
        s = self._scope
        self._record = await s.backend.get_session(s.tenant, self.store, self.session_id)
        return self

    async def update_metadata(self, labels: Mapping[str, str | None]) -> AsyncSession:
        """Set metadata labels; a value of ``None`` removes that label. Returns this handle.

        Raises :class:`~ownstate.errors.InvalidInput` for a label that is not a string,
        :class:`~ownstate.errors.LimitExceeded` past ``Limits.max_metadata_labels``,
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        if not isinstance(labels, Mapping):
            raise InvalidInput("labels must be a mapping", field="metadata")
        to_set = s.limits.metadata({k: v for k, v in labels.items() if v is not None})
        to_remove = [k for k, v in labels.items() if v is None]
        for key in to_remove:  # a key named for removal obeys the same naming rules
            if not isinstance(key, str) or not _validate.LABEL_KEY_RE.fullmatch(key):
                raise InvalidInput(f"metadata label {key!r} must be 1-64 chars of "
                                   "[A-Za-z0-9_.:/-]", field="metadata")
        changes: dict[str, str | None] = dict.fromkeys(to_remove)
        changes.update(to_set)
        self._record = await s.backend.update_metadata(
            s.tenant, self.store, self.session_id, changes, s.limits.max_metadata_labels)
        return self

    async def append_items(
        self,
        items: Sequence[dict[str, JSON]],
        *,
        idempotency_key: str | None = None,
        format: str | None = None,
    ) -> list[Item]:
        """Append ``items`` to the end of the history, all or none, in the order given.

        Each item is a JSON object stored exactly as given. ``format`` names its shape
        (``openai.responses``, ``langchain``, ...); by default it is inferred per item.
        With ``idempotency_key``, a retry of the same call writes nothing and returns the
        first call's items (those of them still stored: items popped or cleared since then
        are not returned).

        Raises :class:`~ownstate.errors.InvalidInput` (not a list of JSON objects, not
        JSON-serialisable), :class:`~ownstate.errors.LimitExceeded` (item or batch too
        large), :class:`~ownstate.errors.IdempotencyKeyReused`,
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        encoded = s.limits.encode_items(items)
        key = s.limits.idempotency_key(idempotency_key)
        fixed_format = _validate.item_format(format)
        rows = []
        for data, text in zip(items, encoded, strict=True):
            columns = derive_columns(data)
            rows.append(NewItem(new_id("itm"), text, fixed_format or infer_format(data),
                                *columns))
        idempotency = None
        if key is not None:
            digest = hashlib.sha256()
            for row in rows:
                digest.update(row.format.encode())
                digest.update(b"\x00")
                digest.update(row.data_json.encode())
                digest.update(b"\x01")
            idempotency = (key, digest.hexdigest())
        return await s.backend.append_items(s.tenant, self.store, self.session_id, rows,
                                            idempotency, now())

    async def list_items_page(
        self,
        *,
        order_by: str = "create_time desc",
        page_size: int | None = None,
        page_token: str | None = None,
        after_seq: int | None = None,
    ) -> Page[Item]:
        """One page of items, newest first by default (``order_by="create_time asc"`` for
        replay order).

        ``after_seq`` starts the page after the item with that ``seq`` (items with a larger
        one in ascending order, a smaller one in descending order), as a page token would;
        give one or the other.

        Raises :class:`~ownstate.errors.InvalidInput` (bad order, malformed or foreign
        page token, both ``page_token`` and ``after_seq``, ``after_seq`` not an integer
        >= 0), :class:`~ownstate.errors.LimitExceeded` (page_size out of range),
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        order = _order(order_by, _ITEM_ORDERS)
        size = s.limits.page_size(page_size)
        scope = f"items\x00{s.tenant}\x00{self.store}\x00{self.session_id}\x00{order}"
        after = None
        if after_seq is not None:
            if page_token is not None:
                raise InvalidInput("give page_token or after_seq, not both", field="after_seq")
            if (not isinstance(after_seq, int) or isinstance(after_seq, bool)
                    or after_seq < 0):
                raise InvalidInput("after_seq must be an integer >= 0", field="after_seq")
            after = after_seq
        if page_token is not None:
            (after,) = _position(decode_token(page_token, scope), 1)
            if not isinstance(after, int):
                raise InvalidInput("page_token is malformed", field="page_token")
        found = await s.backend.list_items(
            s.tenant, self.store, self.session_id, descending=_ITEM_ORDERS[order],
            limit=size + 1, after_seq=after)
        more = len(found) > size
        del found[size:]
        token = encode_token(scope, [found[-1].seq]) if more else None
        return Page(found, token)

    def list_items(
        self,
        *,
        order_by: str = "create_time desc",
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> AsyncPager[Item]:
        """Every item from ``page_token`` on, fetched a page at a time (``page_size`` per
        fetch; by default the largest page allowed). Newest first unless
        ``order_by="create_time asc"``.

        Raises as :meth:`list_items_page`, when iteration starts.
        """
        size = page_size if page_size is not None else self._scope.limits.max_page_size
        return AsyncPager(
            lambda token: self.list_items_page(order_by=order_by, page_size=size,
                                               page_token=token),
            page_token,
        )

    async def history(self, as_format: str = "ownstate.message") -> list[dict[str, JSON]]:
        """The whole history, oldest first, in the shape of ``as_format``, whichever
        frameworks wrote it: ``"openai.responses"`` (Responses input items),
        ``"langchain"`` (``message_to_dict`` objects), ``"adk.event"`` (ADK event JSON),
        ``"claude.transcript"`` (transcript entries) or ``"ownstate.message"`` (neutral
        messages, the default). Items already in that shape come back as stored; others are
        converted through the neutral message (see :mod:`ownstate.formats.neutral`), and
        items that are not messages (a framework's own bookkeeping) are left out.

        Raises :class:`~ownstate.errors.InvalidInput` (unknown format, or an item its
        format's converter cannot read), :class:`~ownstate.errors.SessionNotFound`.
        """
        check_format(as_format)  # before anything is read
        items: list[Item] = []
        token = None
        while True:
            page = await self.list_items_page(order_by="create_time asc", page_token=token,
                                              page_size=self._scope.limits.max_page_size)
            items.extend(page.items)
            token = page.next_page_token
            if token is None:
                return convert(items, as_format)

    async def get_item(self, item_id: str) -> Item:
        """One item by id. Raises :class:`~ownstate.errors.ItemNotFound`,
        :class:`~ownstate.errors.SessionNotFound`."""
        s = self._scope
        if not isinstance(item_id, str) or not item_id:
            raise InvalidInput("item_id must be a non-empty string", field="item_id")
        return await s.backend.get_item(s.tenant, self.store, self.session_id, item_id)

    async def pop_item(self) -> Item | None:
        """Remove and return the newest item; ``None`` when the session is empty.

        Raises :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        return await s.backend.pop_item(s.tenant, self.store, self.session_id, now())

    async def clear(self) -> int:
        """Remove every item (the session itself stays); returns how many were removed.

        Raises :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        return await s.backend.clear_items(s.tenant, self.store, self.session_id, now())

    async def fork(
        self, *, up_to_item_id: str | None = None, session_id: str | None = None
    ) -> AsyncSession:
        """A new session holding a copy of this one's items, up to and including
        ``up_to_item_id`` (all of them by default).

        The child has the same actor and metadata, ``parent_session_id`` set to this session
        and the same ``root_session_id``. Raises :class:`~ownstate.errors.ItemNotFound`,
        :class:`~ownstate.errors.AlreadyExists`, :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        child_id = _validate.session_id(session_id) if session_id is not None else new_id("ses")
        if up_to_item_id is not None and (not isinstance(up_to_item_id, str) or not up_to_item_id):
            raise InvalidInput("up_to_item_id must be a non-empty string", field="up_to_item_id")
        record = await s.backend.fork_session(s.tenant, self.store, self.session_id, child_id,
                                              up_to_item_id, now())
        return AsyncSession(s, record)

    async def delete(self, *, force: bool = False) -> int:
        """Delete this session and its items; returns how many sessions were deleted.

        Refused with :class:`~ownstate.errors.HasChildren` while forks of it exist, unless
        ``force=True``, which deletes every descendant too. Memory facts are never touched.
        Raises :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        return await s.backend.delete_session(s.tenant, self.store, self.session_id, force)


class AsyncSessionStore:
    """A named container of sessions."""

    def __init__(self, scope: _Scope, record: SessionStoreRecord) -> None:
        self._scope = scope
        self._record = record

    def __repr__(self) -> str:
        return f"<SessionStore {self._record.name}>"

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def create_time(self) -> datetime:
        return self._record.create_time

    async def grant_permission(self, principal: str, permission: str) -> Grant:
        """Give ``principal`` ``permission`` (READ, WRITE or MANAGE) on this store, replacing
        what it had. The HTTP server enforces grants; the library records them.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        return await _access.grant_permission(self._scope, "session_store", self.name, principal,
                                              permission)

    async def revoke_permission(self, principal: str) -> None:
        """Take away ``principal``'s grant on this store (its ownership stays).

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        await _access.revoke_permission(self._scope, "session_store", self.name, principal)

    async def permissions(self) -> list[Grant]:
        """Every grant on this store, the owner's included, by principal."""
        return await _access.permissions(self._scope, "session_store", self.name)

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
        order = _order(order_by, _SESSION_ORDERS)
        column, descending = _SESSION_ORDERS[order]
        size = s.limits.page_size(page_size)
        labels = s.limits.metadata(metadata)
        actor = s.limits.actor_id(actor_id) if actor_id is not None else None
        scope = "\x00".join(["sessions", s.tenant, self.name, order, actor or "",
                             repr(sorted(labels.items()))])
        after = None
        if page_token is not None:
            after = _position(decode_token(page_token, scope),
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


class AsyncSessionStores:
    """The tenant's session stores: ``client.session_stores``."""

    def __init__(self, scope: _Scope) -> None:
        self._scope = scope

    async def create(self, name: str, *, owner: str | None = None) -> AsyncSessionStore:
        """Create a store named with 3-55 chars of ``[a-z0-9_-]``, owned by ``owner`` (a
        principal) when one is given.

        Raises :class:`~ownstate.errors.AlreadyExists`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        valid = _validate.store_name(name)
        if owner is not None:
            _access.principal_name(owner)
        record = await s.backend.create_store(s.tenant, valid, now())
        await _access.start_grants(s, "session_store", valid, owner)
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

    async def list_page(
        self, *, page_size: int | None = None, page_token: str | None = None
    ) -> Page[AsyncSessionStore]:
        """One page of stores, by name. Raises :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.LimitExceeded`."""
        s = self._scope
        records, token = await page_by_name(
            s.limits, f"stores\x00{s.tenant}", page_size, page_token,
            lambda limit, after: s.backend.list_stores(s.tenant, limit, after))
        return Page([AsyncSessionStore(s, r) for r in records], token)

    def list(
        self, *, page_size: int | None = None, page_token: str | None = None
    ) -> AsyncPager[AsyncSessionStore]:
        """Every store, by name, fetched a page at a time."""
        return AsyncPager(
            lambda token: self.list_page(page_size=page_size, page_token=token), page_token)

    async def delete(self, name: str, *, force: bool = False) -> int:
        """Delete a store; returns how many sessions went with it.

        Refused with :class:`~ownstate.errors.StoreNotEmpty` while it holds sessions, unless
        ``force=True``, which deletes its sessions and their items. Memory is never touched.
        Raises :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        valid = _validate.store_name(name)
        deleted = await s.backend.delete_store(s.tenant, valid, force)
        await s.backend.drop_grants(s.tenant, "session_store", valid)
        return deleted


def _tenant_name(tenant: str) -> str:
    if not isinstance(tenant, str) or not _TENANT_RE.fullmatch(tenant):
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
    ) -> None:
        self._scope = _Scope(backend, _tenant_name(tenant), limits or Limits())
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
    backend: Backend, *, tenant: str | None, limits: Limits | None, migrate: bool
) -> AsyncClient:
    """Set up ``backend`` and wrap it in a client that owns it (closing it on failure).

    ``tenant`` defaults to the backend's own (a server's key decides it) or ``"default"``;
    a tenant other than the one the key belongs to is refused with
    :class:`~ownstate.errors.PermissionDenied`.
    """
    try:
        if tenant is not None:
            _tenant_name(tenant)  # before setup, which may reach a server
        await backend.setup(migrate=migrate)
        bound = backend.bound_tenant
        if bound is not None and tenant is not None and tenant != bound:
            raise PermissionDenied(f"this API key acts for tenant {bound!r}, not {tenant!r}",
                                   tenant=tenant)
        return AsyncClient(backend, tenant=bound or tenant or "default", limits=limits)
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
    return await start_client(chosen, tenant=tenant, limits=limits, migrate=migrate)
