"""``OwnstateSessionService``: ADK's ``BaseSessionService`` over ownstate sessions and
memory facts (see the package docstring for where each part of a session goes). Reads and
writes through the service's bridge; the history cache lives in :mod:`._history`. It may
touch the public API through the adapters' bridge and kernel, this package's :mod:`._state`
and :mod:`._history`, the error tree, the limits and the model, and ADK's session service,
events and errors; never a backend."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import BaseSessionService, Session, State, _session_util
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse

from ... import limits as _limits
from ...api import AsyncClient, Client
from ...api.aio import AsyncSession, AsyncSessionStore
from ...api.memory import AsyncMemoryStore
from ...errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    SessionNotFound,
)
from ...model import JSON, Item, SessionRecord
from .._bridge import Bridge, BridgedAdapter
from .._kernel import ensure_store, find_session, items_after
from ._history import (
    _Cached,
    _Revision,
    _Snapshot,
    _Stale,
)
from ._state import (
    _LABEL_APP,
    _LABEL_SESSION,
    _LABEL_STATE,
    _MAX_CACHED_SESSIONS,
    _MAX_POPPED_RETRIES,
    _STALE_MESSAGE,
    EVENT_FORMAT,
    STATE_FORMAT,
    _all_adk,
    _app_subject,
    _carries_session_state,
    _fold_state,
    _foreign_events,
    _given_session_id,
    _merge_state,
    _name,
    _run_all,
    _scoped_values,
    _state_facts,
    _state_prefix,
    _timestamp,
    ownstate_session_id,
)


class OwnstateSessionService(BridgedAdapter, BaseSessionService):
    """ADK's ``BaseSessionService`` over ownstate; behaves as ADK's
    ``DatabaseSessionService`` does (see ``docs/adk.md`` for the few differences).

    Build it from a connected client (``ownstate.connect(...)`` or
    ``await ownstate.connect_async(...)``), or with :meth:`from_url`. ``store`` names the
    session store and ``state_store`` the memory store of ``app:`` and ``user:`` state;
    both are created when first needed. The service keeps the history of the sessions it
    read last, so that the next read fetches only the items appended since;
    ``event_cache_size`` bounds the events kept in all (0 turns the cache off; see
    ``docs/adk.md``).

    Errors: ADK's own where ADK defines one (``AlreadyExistsError``,
    ``SessionNotFoundError``, ``StaleSessionError``); otherwise ownstate's:
    :class:`~ownstate.errors.InvalidInput` (and :class:`~ownstate.errors.LimitExceeded`)
    for names, state or events ownstate cannot store, refused before anything is written;
    :class:`~ownstate.errors.BackendUnavailable` when the datastore fails.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        store: str = "adk",
        state_store: str = "adk-state",
        event_cache_size: int = 10_000,
        session_ids: Callable[[str, str, str], str] | None = None,
    ) -> None:
        self._setup(Bridge(client), store, state_store, event_cache_size, session_ids)

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        store: str = "adk",
        state_store: str = "adk-state",
        event_cache_size: int = 10_000,
        session_ids: Callable[[str, str, str], str] | None = None,
    ) -> OwnstateSessionService:
        """A service over a client it opens on ``url`` (``OWNSTATE_URL``, else
        ``sqlite:///ownstate.db``) and closes with :meth:`close`.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.SchemaVersion`,
        :class:`~ownstate.errors.BackendUnavailable`.
        """
        service = cls.__new__(cls)
        bridge = Bridge.from_url(url)
        try:
            service._setup(bridge, store, state_store, event_cache_size, session_ids)
        except BaseException:
            bridge.close()
            raise
        return service

    def _setup(self, bridge: Bridge, store: str, state_store: str,
               event_cache_size: int,
               session_ids: Callable[[str, str, str], str] | None = None) -> None:
        if (isinstance(event_cache_size, bool) or not isinstance(event_cache_size, int)
                or event_cache_size < 0):
            raise InvalidInput("event_cache_size must be an integer >= 0",
                               field="event_cache_size")
        self._bridge = bridge
        self._session_ids = session_ids or ownstate_session_id
        self._store_name = _limits.store_name(store)
        self._state_name = _limits.store_name(state_store)
        self._stores: tuple[AsyncSessionStore, AsyncMemoryStore] | None = None
        self._events: OrderedDict[str, Event] = OrderedDict()
        self._event_cache_size = event_cache_size
        self._handles: OrderedDict[str, AsyncSession] = OrderedDict()
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary())
        # The histories last read, by ownstate session id, least recently used first; at
        # most event_cache_size events in all (see _Cached).
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cached_events = 0
        self._cache_lock = threading.Lock()  # sync callers may share the service

    def _key(self, app_name: str, user_id: str, session_id: str) -> str:
        """The ownstate session id of an ADK session (see ``session_ids``)."""
        key = self._session_ids(_name(app_name, "app_name"), _name(user_id, "user_id"),
                                _name(session_id, "session_id"))
        return _limits.session_id(key)

    def _stored_key(self, app_name: str, user_id: str, session_id: object
                    ) -> tuple[str, str] | None:
        """The ADK session id a read or delete means (stripped, as ADK strips it) and its
        ownstate id; ``None`` when no session can have it (blank, too long, control
        characters), which ADK answers as a session that does not exist."""
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        stripped = session_id.strip() if isinstance(session_id, str) else None
        try:
            return stripped or "", self._key(app_name, user_id, _name(stripped, "session_id"))
        except InvalidInput:
            return None

    # plumbing ----------------------------------------------------------------------------

    @property
    def _client(self) -> AsyncClient:
        return self._bridge.client

    async def _ready(self) -> tuple[AsyncSessionStore, AsyncMemoryStore]:
        if self._stores is None:
            client = self._client
            self._stores = (await ensure_store(client.session_stores, self._store_name),
                            await ensure_store(client.memory_stores, self._state_name))
        return self._stores

    def _remember_handle(self, handle: AsyncSession) -> None:
        self._handles[handle.session_id] = handle
        self._handles.move_to_end(handle.session_id)
        if len(self._handles) > 1024:
            self._handles.popitem(last=False)

    def _cached(self, key: str) -> _Cached | None:
        with self._cache_lock:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
            return entry

    def _keep(self, key: str, entry: _Cached | None) -> None:
        """Keep ``entry`` as the history of ``key`` (``None``: forget it), evicting the
        least recently read histories past ``event_cache_size`` events."""
        with self._cache_lock:
            old = self._cache.pop(key, None)
            if old is not None:
                self._cached_events -= len(old.events)
            if entry is None or len(entry.events) > self._event_cache_size:
                return
            self._cache[key] = entry
            self._cached_events += len(entry.events)
            while (self._cached_events > self._event_cache_size
                   or len(self._cache) > _MAX_CACHED_SESSIONS):
                _, evicted = self._cache.popitem(last=False)
                self._cached_events -= len(evicted.events)

    def _appended(self, key: str, revision: _Revision, item: Item, event_id: str) -> None:
        """Note an event appended at ``revision`` (see _maybe_held). The read anchor stays
        where it was: nothing proves the item lies right after it, so the next read reads
        it like any other new item."""
        with self._cache_lock:
            entry = self._cache.get(key)
            if (entry is None or entry.tip != (revision.seq, revision.item_id)
                    or item.seq != revision.seq + 1):
                return
            entry.ids.add(event_id)
            self._cache[key] = replace(entry, tip=(item.seq, item.item_id),
                                       count=entry.count + 1, last_id=event_id)

    def _maybe_held(self, key: str, session: Session, event: Event) -> bool:
        """Whether ``session.events`` may hold an event with ``event``'s id; ``False``
        only when that is certain. For a Session object as this service left it (at the
        revision of a cached history, with as many events, the same last one) the
        history's id set answers at once; otherwise look."""
        with self._cache_lock:
            entry = self._cache.get(key)
        revision = _Revision.parse(session._storage_update_marker)
        events = session.events
        if (entry is None or revision is None
                or (revision.seq, revision.item_id) != entry.tip
                or len(events) != entry.count
                or (events[-1].id if events else None) != entry.last_id):
            return True
        return event.id in entry.ids

    def _event(self, item: Item) -> Event:
        """The event an ``adk.event`` item holds. Items never change once appended, so an
        event parsed once is kept by item id and shared by later reads."""
        if self._event_cache_size == 0:
            return Event.model_validate(item.data)
        event = self._events.get(item.item_id)
        if event is None:
            event = Event.model_validate(item.data)
            self._events[item.item_id] = event
            if len(self._events) > self._event_cache_size:
                self._events.popitem(last=False)
        else:
            self._events.move_to_end(item.item_id)
        return event

    async def _state_of(self, app_name: str, user_id: str
                        ) -> tuple[dict[str, Any], dict[str, Any]]:
        _, facts = await self._ready()
        app_facts, user_facts = await _run_all(
            self._client.runs_inline,
            facts.recall(_app_subject(app_name)), facts.recall(user_id))
        return (_scoped_values(app_facts, _state_prefix(app_name, "app")),
                _scoped_values(user_facts, _state_prefix(app_name, "user")))

    @staticmethod
    def _session(app_name: str, user_id: str, session_id: str, updated: datetime,
                 state: dict[str, Any], events: list[Event], revision: _Revision | None
                 ) -> Session:
        session = Session(id=session_id, app_name=app_name, user_id=user_id, state=state,
                          events=events, last_update_time=updated.timestamp())
        session._storage_update_marker = revision.marker() if revision else None
        return session

    # create ------------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session; ``state`` may hold ``app:``, ``user:`` and session keys
        (``temp:`` keys are dropped). Surrounding whitespace is stripped from
        ``session_id``; without one (or a blank one) a UUID is generated.

        Raises ADK's ``AlreadyExistsError`` for a taken id,
        :class:`~ownstate.errors.InvalidInput` for bad names or state that cannot be stored
        (nothing is created then).
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        session_id = _name(_given_session_id(session_id) or platform_uuid.new_uuid(),
                           "session_id")
        if state is not None and not isinstance(state, Mapping):
            raise InvalidInput("state must be a mapping", field="state")
        key = self._key(app_name, user_id, session_id)
        deltas = _session_util.extract_json_safe_state_delta(dict(state or {}))
        specs = _state_facts(self._client, app_name, user_id, deltas)
        initial = deltas["session"]
        if initial:
            self._client.limits.encode_items([{"state": initial}])  # refuse before creating
        labels = {_LABEL_APP: app_name, _LABEL_SESSION: session_id}
        if initial:
            labels[_LABEL_STATE] = "1"
        try:
            handle, last, app_state, user_state = await self._bridge.acall(
                self._create(key, app_name, user_id, labels, initial, specs))
        except AlreadyExists as exc:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from exc
        self._remember_handle(handle)
        self._keep(key, None)  # a history cached under this id was another session's
        merged = _merge_state(app_state, user_state, initial)
        updated = last.create_time if last else handle.record.last_activity_time
        return self._session(app_name, user_id, session_id, updated, merged, [],
                             _Revision.of(last, bool(initial)))

    async def _create(
        self, key: str, app_name: str, user_id: str, labels: dict[str, str],
        initial: dict[str, Any], specs: list[dict[str, Any]],
    ) -> tuple[AsyncSession, Item | None, dict[str, Any], dict[str, Any]]:
        store, facts = await self._ready()
        handle = await store.add(actor_id=user_id, session_id=key, metadata=labels)
        try:
            last = None
            if initial:
                (last,) = await handle.append_items([{"state": initial}], format=STATE_FORMAT)
            if specs:
                await facts.remember_many(specs)
        except BaseException:
            # Nothing else can know the session yet: undo it so a failed call leaves nothing.
            with contextlib.suppress(Exception):  # the original error matters more
                await handle.delete(force=True)
            raise
        app_state, user_state = await self._state_of(app_name, user_id)
        return handle, last, app_state, user_state

    # get ---------------------------------------------------------------------------------

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its events and merged state, or ``None`` when there is none.
        ``session_id`` is stripped of surrounding whitespace, as ADK strips it.

        ``config.num_recent_events`` keeps only the newest events (0: none);
        ``config.after_timestamp`` only events at or after that time. The state always
        reflects the whole history. Raises :class:`~ownstate.errors.InvalidInput` for bad
        names.
        """
        found = self._stored_key(app_name, user_id, session_id)
        if found is None:
            return None
        session_id, key = found
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        snapshot = await self._bridge.acall(
            self._read(key, app_name, user_id, recent, bool(after)))
        if snapshot is None:
            self._handles.pop(key, None)
            self._keep(key, None)
            return None
        self._remember_handle(snapshot.handle)
        record = snapshot.handle.record
        has_state = _LABEL_STATE in record.metadata
        entry = self._cache_from(key, snapshot)
        if entry is not None:
            if after:
                events = [e for e, t in zip(entry.events, entry.stamps, strict=True)
                          if t >= after]
            else:
                events = list(entry.events)
            if recent is not None:
                events = events[-recent:] if recent else []
            merged = _merge_state(snapshot.app_state, snapshot.user_state, entry.state)
            return self._session(app_name, user_id, session_id, record.last_activity_time,
                                 merged, events, _Revision(entry.seq, entry.item_id, has_state))
        if snapshot.base is not None:
            # Another framework's items follow what was cached: read everything again.
            snapshot = await self._bridge.acall(
                self._read(key, app_name, user_id, None, False)) or snapshot
        if not _all_adk(snapshot.items):
            if not snapshot.complete:
                snapshot = await self._bridge.acall(
                    self._read(key, app_name, user_id, None, False)) or snapshot
            events = _foreign_events(snapshot.items)
            if after:
                events = [e for e in events if e.timestamp >= after]
            if recent is not None:
                events = events[-recent:] if recent else []
        else:
            # Filter before parsing: an item's data holds its event's timestamp.
            kept = [i for i in snapshot.items if i.format == EVENT_FORMAT]
            if after:
                kept = [i for i in kept if _timestamp(i) >= after]
            if recent is not None:
                kept = kept[-recent:] if recent else []
            events = [self._event(i) for i in kept]
        session_state = _fold_state(snapshot.items) if snapshot.complete else {}
        merged = _merge_state(snapshot.app_state, snapshot.user_state, session_state)
        return self._session(app_name, user_id, session_id, record.last_activity_time, merged,
                             events, _Revision.of(snapshot.last, has_state))

    def _cache_from(self, key: str, snapshot: _Snapshot) -> _Cached | None:
        """The history a read amounts to, kept for the next read; ``None`` when it cannot
        be cached (the cache is off, the read was partial, another framework wrote part of
        the session, or it holds more than ``event_cache_size`` events)."""
        items = snapshot.items
        if not snapshot.complete or self._event_cache_size == 0 or not _all_adk(items):
            self._keep(key, None)
            return None
        base = snapshot.base
        if base is not None:
            entry = base.extended(items, [self._event(i) for i in items
                                          if i.format == EVENT_FORMAT])
        else:
            kept = [i for i in items if i.format == EVENT_FORMAT]
            if len(kept) > self._event_cache_size:
                self._keep(key, None)
                return None
            events = [self._event(i) for i in kept]
            last = (items[-1].seq, items[-1].item_id) if items else (0, "")
            entry = _Cached.read(snapshot.handle.record.create_time, last, events,
                                 [_timestamp(i) for i in kept], _fold_state(items),
                                 {e.id for e in events})
        self._keep(key, entry)
        return entry

    async def _read(self, key: str, app_name: str, user_id: str, recent: int | None,
                    filtered_by_time: bool) -> _Snapshot | None:
        store, facts = await self._ready()
        inline = self._client.runs_inline
        base = self._cached(key)
        known = self._handles.get(key)
        if base is not None:
            # Only what follows the cached history, read with the record and the state.
            if known is not None:
                found, after, app_facts, user_facts = await _run_all(
                    inline, find_session(store, key), self._after(known, base),
                    facts.recall(_app_subject(app_name)), facts.recall(user_id))
                app_state = _scoped_values(app_facts, _state_prefix(app_name, "app"))
                user_state = _scoped_values(user_facts, _state_prefix(app_name, "user"))
            else:
                found, (app_state, user_state) = await _run_all(
                    inline, find_session(store, key), self._state_of(app_name, user_id))
                after = await self._after(found, base) if found is not None else None
            if found is None:
                return None
            if after is not None and found.record.create_time == base.created:
                return _Snapshot(found, after, True, after[-1] if after else None,
                                 app_state, user_state, base)
            try:  # the cached history is gone (popped, cleared, made again): read it all
                items = [i async for i in found.list_items(order_by="create_time asc")]
            except SessionNotFound:
                return None
            return _Snapshot(found, items, True, items[-1] if items else None,
                             app_state, user_state)

        async def history() -> tuple[AsyncSession, list[Item], bool] | None:
            try:
                handle = await store.get(key)
                if (recent is None or filtered_by_time
                        or _LABEL_STATE in handle.record.metadata):
                    return handle, [i async for i in handle.list_items(
                        order_by="create_time asc")], True
                newest = await self._newest(handle, recent)
                if newest is None:  # state appeared after the record was read
                    return handle, [i async for i in handle.list_items(
                        order_by="create_time asc")], True
                return handle, newest, False
            except SessionNotFound:
                return None

        found_history, (app_state, user_state) = await _run_all(
            inline, history(), self._state_of(app_name, user_id))
        if found_history is None:
            return None
        handle, items, complete = found_history
        return _Snapshot(handle, items, complete, items[-1] if items else None,
                         app_state, user_state)

    async def _after(self, handle: AsyncSession, base: _Cached) -> list[Item] | None:
        """The items after those ``base`` holds; ``None`` if its last one is gone (or the
        session is). The page starts at that last item, which proves it is still there."""
        try:
            return await items_after(handle, base.seq, base.item_id,
                                     page_size=self._client.limits.max_page_size)
        except SessionNotFound:
            return None

    async def _newest(self, handle: AsyncSession, recent: int) -> list[Item] | None:
        """The newest items holding ``recent`` events (and at least the newest item), in
        order; ``None`` if one of them carries session state (read everything then)."""
        found: list[Item] = []
        events = 0
        page_size = min(max(recent, 1) + 1, self._client.limits.max_page_size)
        async for item in handle.list_items(page_size=page_size):
            if _carries_session_state(item):
                return None
            found.append(item)
            events += item.format == EVENT_FORMAT
            if events >= recent:
                break
        found.reverse()
        return found

    # list --------------------------------------------------------------------------------

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Every session of ``app_name`` (of one user when ``user_id`` is given), without
        events, with merged state, oldest update first (as ADK orders them).

        Raises :class:`~ownstate.errors.InvalidInput` for bad names.
        """
        app_name = _name(app_name, "app_name")
        if user_id is not None:
            user_id = _name(user_id, "user_id")
        found = await self._bridge.acall(self._list(app_name, user_id))
        # A listed session carries no events and no revision: appending to it checks the
        # stored history first (see _probe).
        sessions = [
            self._session(app_name, record.actor_id, record.metadata[_LABEL_SESSION],
                          record.last_activity_time,
                          _merge_state(app_state, user_state, session_state), [], None)
            for record, session_state, user_state, app_state in found]
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def _list(self, app_name: str, user_id: str | None
                    ) -> list[tuple[SessionRecord, dict[str, Any], dict[str, Any],
                                    dict[str, Any]]]:
        store, facts = await self._ready()
        inline = self._client.runs_inline
        handles = [s async for s in store.list_sessions(
            actor_id=user_id, metadata={_LABEL_APP: app_name},
            page_size=self._client.limits.max_page_size)]
        users = sorted({h.actor_id for h in handles})

        async def folded(handle: AsyncSession) -> dict[str, Any]:
            if _LABEL_STATE not in handle.record.metadata:
                return {}
            try:
                return _fold_state([i async for i in handle.list_items(
                    order_by="create_time asc")])
            except SessionNotFound:  # deleted while listing
                return {}

        app_facts, *rest = await _run_all(
            inline, facts.recall(_app_subject(app_name)),
            *(facts.recall(u) for u in users), *(folded(h) for h in handles))
        user_prefix = _state_prefix(app_name, "user")
        user_states = {u: _scoped_values(f, user_prefix)
                       for u, f in zip(users, rest[:len(users)], strict=True)}
        app_state = _scoped_values(app_facts, _state_prefix(app_name, "app"))
        return [(h.record, state, user_states[h.actor_id], app_state)
                for h, state in zip(handles, rest[len(users):], strict=True)]

    # delete ------------------------------------------------------------------------------

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events; nothing happens when there is none.
        ``session_id`` is stripped of surrounding whitespace, as ADK strips it. App and
        user state stay.

        Raises :class:`~ownstate.errors.HasChildren` when the session was forked in
        ownstate (delete the forks first), :class:`~ownstate.errors.InvalidInput`.
        """
        found = self._stored_key(app_name, user_id, session_id)
        if found is None:
            return
        key = found[1]
        self._handles.pop(key, None)
        self._keep(key, None)
        await self._bridge.acall(self._delete(key))

    async def _delete(self, key: str) -> None:
        store, _ = await self._ready()
        try:
            await (await store.get(key)).delete()
        except SessionNotFound:
            return

    # user state --------------------------------------------------------------------------

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The ``user:`` state of ``user_id`` in ``app_name``, keys without the prefix.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        _, user_state = await self._bridge.acall(self._state_of(app_name, user_id))
        return copy.deepcopy(user_state)

    # append ------------------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` at the end of the session and apply its state delta: session
        keys with the event (one atomic append), ``app:`` and ``user:`` keys as facts,
        ``temp:`` keys only to the ``session`` object. Partial events are not stored.

        Raises ADK's ``StaleSessionError`` when the session was appended to since
        ``session`` was read (reload it), ``SessionNotFoundError`` when it does not
        exist, :class:`~ownstate.errors.InvalidInput` for an event or state that cannot be
        stored. A refused event changes nothing, in storage or in ``session``.
        """
        if event.partial:
            return event
        try:
            known_key: str | None = self._key(session.app_name, session.user_id, session.id)
        except InvalidInput:
            known_key = None  # refused below, unless the event is already held
        # An equal re-delivery of an event the session already holds is a no-op, as in
        # ADK's InMemorySessionService.
        if (known_key is None or self._maybe_held(known_key, session, event)) and any(
                e is event or e == event for e in session.events if e.id == event.id):
            return event
        app_name = _name(session.app_name, "app_name")
        user_id = _name(session.user_id, "user_id")
        if known_key is None or session.id != session.id.strip():
            # No session is stored under such an id (ADK looks it up as given, unstripped).
            raise SessionNotFoundError(f"Session {session.id} not found.")
        key = known_key
        # temp: keys are never stored; the event object keeps them until the write is done,
        # so that a refused event leaves it (and the session) as they were.
        given = (event.actions.state_delta if event.actions else None) or {}
        delta = {k: v for k, v in given.items() if not k.startswith(State.TEMP_PREFIX)}
        deltas = _session_util.extract_json_safe_state_delta(delta)
        data: dict[str, JSON] = event.model_dump(exclude_none=True, mode="json")
        actions = data.get("actions")
        if isinstance(actions, dict) and isinstance(actions.get("state_delta"), dict):
            actions["state_delta"] = {k: v for k, v in actions["state_delta"].items()
                                      if not k.startswith(State.TEMP_PREFIX)}
        specs = _state_facts(self._client, app_name, user_id, deltas)
        self._client.limits.encode_items([data])  # refuse a bad event before any write

        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            marked = _Revision.parse(session._storage_update_marker)
            last_event_id = session.events[-1].id if session.events else None
            try:
                handle, item, revision = await self._bridge.acall(self._append(
                    key, self._handles.get(key), marked, last_event_id, data,
                    bool(deltas["session"]), specs))
            except _Stale:
                raise StaleSessionError(_STALE_MESSAGE) from None
            except SessionNotFound:
                self._handles.pop(key, None)
                self._keep(key, None)
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            self._remember_handle(handle)
            self._appended(key, revision, item, event.id)
            self._apply_temp_state(session, event)
            event = self._trim_temp_delta_state(event)
            session.last_update_time = item.create_time.timestamp()
            session._storage_update_marker = _Revision(item.seq, item.item_id,
                                                       revision.has_state).marker()
            return self._commit_event_to_session(session, event)

    async def _append(
        self, key: str, handle: AsyncSession | None, revision: _Revision | None,
        last_event_id: str | None, data: dict[str, JSON], session_state: bool,
        specs: list[dict[str, Any]],
    ) -> tuple[AsyncSession, Item, _Revision]:
        """Append at ``revision`` (found by _probe when ``None``); returns the handle, the
        item, and the revision the item was appended at (``has_state`` as it is now)."""
        store, facts = await self._ready()
        if handle is None:
            handle = await store.get(key)
        if revision is None:
            revision = await self._probe(handle, last_event_id)
        if session_state and not revision.has_state:
            # Before the append, so that a reader never misses state it should fold.
            await handle.update_metadata({_LABEL_STATE: "1"})
            revision = replace(revision, has_state=True)
        item = await self._append_at(handle, revision, data)
        if specs:
            await facts.remember_many([{**spec, "source": item} for spec in specs])
        return handle, item, revision

    async def _append_at(self, handle: AsyncSession, revision: _Revision,
                         data: dict[str, JSON]) -> Item:
        """Append ``data`` if the history still ends where ``revision`` says; else _Stale."""
        for attempt in range(_MAX_POPPED_RETRIES):
            try:
                appended = await handle.append_items(
                    [data], format=EVENT_FORMAT, idempotency_key=revision.append_key(attempt))
                if appended:
                    return appended[0]
            except Conflict:
                # IdempotencyKeyReused, or (PostgreSQL) the unique key refusing a
                # concurrent append with the same key: either way another append used it.
                pass
            # Another append used this revision's key. If the history still ends at this
            # revision, the items it appended were popped since: try the next key.
            page = await handle.list_items_page(page_size=1)
            newest = page.items[0] if page.items else None
            if (newest.seq if newest else 0, newest.item_id if newest else "") != (
                    revision.seq, revision.item_id):
                raise _Stale
        raise _Stale

    async def _probe(self, handle: AsyncSession, last_event_id: str | None) -> _Revision:
        """The revision of a session object this service did not read (or a listed one):
        it is current if the stored history ends with the same event it ends with."""
        record = (await handle.refresh()).record
        page = await handle.list_items_page(page_size=1)
        newest = page.items[0] if page.items else None
        if last_event_id is None:
            current = newest is None or newest.format == STATE_FORMAT
        else:
            current = (newest is not None and newest.format == EVENT_FORMAT
                       and newest.data.get("id") == last_event_id)
        if not current:
            raise _Stale
        return _Revision.of(newest, _LABEL_STATE in record.metadata)
