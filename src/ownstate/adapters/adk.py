"""Google ADK on ownstate: a session service and a memory service.

:class:`OwnstateSessionService` implements ADK's ``BaseSessionService`` and
:class:`OwnstateMemoryService` its ``BaseMemoryService``. Where ADK's state goes:

- An ADK session is an ownstate session in one session store (``"adk"`` by default). Its
  ownstate ``session_id`` is derived from ADK's ``(app_name, user_id, session_id)``
  (:func:`ownstate_session_id`), its ``actor_id`` is the ADK ``user_id``, and the labels
  ``adk.app_name`` and ``adk.session_id`` hold the rest.
- Each event is one item of format ``adk.event`` whose data is the event's JSON, as
  ADK's ``DatabaseSessionService`` stores it; it loads back into an equal ``Event``.
- Session-scoped state lives in the history itself: the state given to
  ``create_session`` is an item of format ``adk.state``, and every event carries its own
  ``state_delta``. Reading a session folds them, so a session's state is written in the
  same atomic append as the event that changes it and goes wherever the session goes.
- ``app:`` and ``user:`` state are memory facts (store ``"adk-state"``): app state under
  the subject ``app:<app_name>``, user state under the subject ``<user_id>``, with keys
  ``<app>:app:<key>`` and ``<app>:user:<key>``. Each fact names the event item that set
  it as its source. ``temp:`` state is never stored.
- The memory service keeps one fact per remembered event (store ``"adk-memory"``),
  subject ``<user_id>``, key ``<app>:<session id>:<event id>``.

Because the user's sessions carry their ``actor_id`` and the user's facts their subject,
``client.memory_stores.erase_subject(user_id, include_sessions=True)`` removes everything
these services stored about a user. See ``docs/adk.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import itertools
import json
import re
import threading
import unicodedata
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from .. import limits as _limits
from .._extras import requires
from ..api import AsyncClient, Client
from ..api.aio import AsyncSession, AsyncSessionStore
from ..api.memory import AsyncMemoryStore
from ..errors import (
    ActiveRunExists,
    AlreadyExists,
    Conflict,
    InvalidInput,
    LimitExceeded,
    RunClosed,
    SessionNotFound,
    StaleLease,
    StoreNotFound,
)
from ..limits import CONTROL_RE
from ..model import JSON, Fact, Item, SessionRecord
from ._bridge import Bridge

with requires("adk", "the Google ADK adapter"):
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.memory import BaseMemoryService
    from google.adk.memory.base_memory_service import SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.platform import uuid as platform_uuid
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.sessions import BaseSessionService, Session, State, _session_util
    from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
    from google.genai import types

__all__ = [
    "EVENT_FORMAT",
    "STATE_FORMAT",
    "OwnstateMemoryService",
    "OwnstateRunPlugin",
    "OwnstateSessionService",
    "ownstate_session_id",
]

#: The item format of an ADK event: its JSON as ``Event.model_dump(mode="json",
#: exclude_none=True)`` writes it.
EVENT_FORMAT = "adk.event"
#: The item format of the session-scoped state a session was created with:
#: ``{"state": {...}}``.
STATE_FORMAT = "adk.state"

_LABEL_APP = "adk.app_name"
_LABEL_SESSION = "adk.session_id"
#: Set on a session once any of its items may carry session-scoped state; a session
#: without it is read without folding its whole history.
_LABEL_STATE = "adk.session_state"

#: ADK's DatabaseSessionService keeps app names, user ids and session ids in 128-char
#: columns; the same bound keeps every derived subject, key and label within ownstate's.
_MAX_NAME_CHARS = 128
_MAX_FACT_KEY_CHARS = 256
_STALE_MESSAGE = ("The session has been modified in storage since it was loaded. "
                  "Please reload the session before appending more events.")
_NOT_SCOPED = (State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)
#: How many times an append retries after finding that items appended at the same
#: revision were popped since (each pop at one revision costs one retry).
_MAX_POPPED_RETRIES = 64
#: The most sessions whose histories are kept between reads (see _Cached).
_MAX_CACHED_SESSIONS = 1024
_ADK_FORMATS = (EVENT_FORMAT, STATE_FORMAT)

T = TypeVar("T")


# names and keys ------------------------------------------------------------------------


def _name(value: object, field: str) -> str:
    """An app name, user id or session id: non-blank printable text, at most 128 chars."""
    if (not isinstance(value, str) or not value.strip() or len(value) > _MAX_NAME_CHARS
            or CONTROL_RE.search(value)):
        raise InvalidInput(f"{field} must be a non-blank string of at most {_MAX_NAME_CHARS} "
                           "printable characters", field=field)
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} must be valid UTF-8 text", field=field) from exc
    return value


def _given_session_id(value: object) -> str | None:
    """A session id as ADK's in-memory and SQLite services take it: without surrounding
    whitespace (``"order-42\n"`` is ``"order-42"``); ``None`` when that leaves nothing."""
    if isinstance(value, str):
        return value.strip() or None
    return None if value is None else _name(value, "session_id")  # refused: not text


def ownstate_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The ownstate ``session_id`` of the ADK session ``(app_name, user_id, session_id)``.

    ADK names a session by all three, so the same ADK id may belong to several users;
    ownstate's id is a digest of the three (``adk-`` and 32 hex digits). Raises
    :class:`~ownstate.errors.InvalidInput` for a name that ADK's database service could not
    store either (blank, longer than 128 characters, or with control characters).
    """
    parts = [_name(app_name, "app_name"), _name(user_id, "user_id"),
             _name(session_id, "session_id")]
    digest = hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()
    return f"adk-{digest[:32]}"


def _escape(app_name: str) -> str:
    """The app name as a fact-key prefix: ``:`` (the separator) and ``%`` escaped."""
    return app_name.replace("%", "%25").replace(":", "%3A")


def _app_subject(app_name: str) -> str:
    return f"app:{app_name}"


def _state_prefix(app_name: str, scope: str) -> str:
    return f"{_escape(app_name)}:{scope}:"


def _scoped_values(facts: Iterable[Fact], prefix: str) -> dict[str, Any]:
    return {f.key[len(prefix):]: f.value for f in facts if f.key.startswith(prefix)}


def _merge_state(app_state: Mapping[str, Any], user_state: Mapping[str, Any],
                 session_state: Mapping[str, Any]) -> dict[str, Any]:
    """The state a session shows: its own, then ``app:`` and ``user:`` keys, as ADK merges
    them (a copy, so that changing it changes nothing stored or cached)."""
    merged = copy.deepcopy(dict(session_state))
    for key, value in app_state.items():
        merged[State.APP_PREFIX + key] = copy.deepcopy(value)
    for key, value in user_state.items():
        merged[State.USER_PREFIX + key] = copy.deepcopy(value)
    return merged


def _session_delta(delta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in delta.items() if not k.startswith(_NOT_SCOPED)}


def _fold_into(state: dict[str, Any], item: Item) -> None:
    data = item.data
    if item.format == EVENT_FORMAT:
        actions = data.get("actions")
        delta = actions.get("state_delta") if isinstance(actions, dict) else None
        if isinstance(delta, dict):
            state.update(_session_delta(delta))
    elif item.format == STATE_FORMAT and isinstance(data.get("state"), dict):
        state.update(data["state"])


def _fold_state(items: Iterable[Item]) -> dict[str, Any]:
    """The session-scoped state a history amounts to, in order."""
    state: dict[str, Any] = {}
    for item in items:
        _fold_into(state, item)
    return state


def _all_adk(items: Iterable[Item]) -> bool:
    return all(i.format in _ADK_FORMATS for i in items)


def _foreign_events(items: Sequence[Item]) -> list[Event]:
    """The events of a session part of which another framework wrote: every message
    item converted to ADK's shape (ADK's own events come back as stored)."""
    from ..formats.neutral import convert

    return [Event.model_validate(data) for data in convert(items, EVENT_FORMAT)]


def _timestamp(item: Item) -> float:
    value = item.data.get("timestamp")
    return float(value) if isinstance(value, (int, float)) else 0.0


def _carries_session_state(item: Item) -> bool:
    if item.format == STATE_FORMAT:
        return True
    if item.format != EVENT_FORMAT:
        return False
    actions = item.data.get("actions")
    delta = actions.get("state_delta") if isinstance(actions, dict) else None
    return isinstance(delta, dict) and bool(_session_delta(delta))


@dataclass(frozen=True, slots=True)
class _Revision:
    """What a Session object last saw of its stored history: the last item (its seq and
    id; 0 and "" when empty), and whether the session carries session-scoped state.

    It travels in ``Session._storage_update_marker``, the attribute ADK reserves for a
    service's revision marker."""

    seq: int
    item_id: str
    has_state: bool

    _PREFIX = "ownstate:"

    @classmethod
    def of(cls, last: Item | None, has_state: bool) -> _Revision:
        return cls(last.seq, last.item_id, has_state) if last else cls(0, "", has_state)

    @classmethod
    def parse(cls, marker: str | None) -> _Revision | None:
        if not marker or not marker.startswith(cls._PREFIX):
            return None
        parts = marker[len(cls._PREFIX):].split(":")
        if len(parts) != 3 or not parts[0].isdigit():
            return None
        return cls(int(parts[0]), parts[1] if parts[1] != "-" else "", parts[2] == "s")

    def marker(self) -> str:
        return (f"{self._PREFIX}{self.seq}:{self.item_id or '-'}:"
                f"{'s' if self.has_state else '-'}")

    def append_key(self, attempt: int) -> str:
        """The idempotency key of an append made at this revision.

        Every append through this service at one revision uses the same key, so the
        datastore lets exactly one of them through: a second writer at a revision that
        has moved on is refused (IdempotencyKeyReused), which is the stale-session check,
        done in the same round trip as the append."""
        base = f"adk:{self.seq}:{self.item_id or '-'}"
        return base if attempt == 0 else f"{base}:{attempt}"


class _Stale(Exception):
    """Raised inside a coroutine; turned into ADK's StaleSessionError by the caller."""


@dataclass(frozen=True, slots=True)
class _Cached:
    """What this service last read of one session's history, kept so that the next read
    fetches only the items that follow it.

    The cache trusts nothing it cannot check: the next read asks for the items from
    ``seq`` on, and uses the cache only if the first of them is still the item
    ``item_id`` in a session created at ``created``. Items are immutable and leave a
    session only from its end (``pop_item``) or all at once (``clear``, deleting the
    session), and item ids are never reused, so then the items up to ``seq`` are the ones
    cached. Anything else (a pop, a clear, the session made again, another framework's
    items) sends the read down the full path. Sessions holding other frameworks' items are
    never cached. Apart from ``ids``, which only grows, an entry is never changed once
    made (a later read or append makes a new one), so a reader holding one always sees a
    consistent history.
    """

    created: datetime
    seq: int  # the last item read (0 and "" when the history was empty)
    item_id: str
    events: list[Event]
    stamps: list[float]  # each event's stored timestamp, what after_timestamp compares
    state: dict[str, Any]  # the session-scoped state the history folds to; never handed out
    #: The ids of the events, and of events appended through this service since: only
    #: ever grows, and may be shared with later entries (a superset is all _maybe_held
    #: needs).
    ids: set[str]
    #: The newest item appended through this service on top of this read, and how many
    #: events the Session object it was appended to then holds (see _maybe_held).
    tip: tuple[int, str]
    count: int
    last_id: str | None

    @classmethod
    def read(cls, created: datetime, last: tuple[int, str], events: list[Event],
             stamps: list[float], state: dict[str, Any], ids: set[str]) -> _Cached:
        return cls(created, last[0], last[1], events, stamps, state, ids, last, len(events),
                   events[-1].id if events else None)

    def extended(self, items: Sequence[Item], events: list[Event]) -> _Cached:
        """This history followed by ``items`` (read after it; all ADK's) and their
        ``events``."""
        if not items:
            return _Cached.read(self.created, (self.seq, self.item_id), self.events,
                                self.stamps, self.state, self.ids)
        state = dict(self.state)
        for item in items:
            _fold_into(state, item)
        ids = self.ids
        ids.update(e.id for e in events)
        last = items[-1]
        return _Cached.read(self.created, (last.seq, last.item_id), self.events + events,
                            self.stamps + [_timestamp(i) for i in items
                                           if i.format == EVENT_FORMAT],
                            state, ids)


async def _run_all(inline: bool, *coros: Awaitable[Any]) -> list[Any]:
    """Await ``coros``: one after another on a backend that never waits (nothing to
    overlap, and tasks would only add cost), concurrently otherwise."""
    if inline:
        return [await c for c in coros]
    return list(await asyncio.gather(*coros))


async def _session_store(client: AsyncClient, name: str) -> AsyncSessionStore:
    try:
        return await client.session_stores.get(name)
    except StoreNotFound:
        try:
            return await client.session_stores.create(name)
        except AlreadyExists:  # made by a concurrent first call
            return await client.session_stores.get(name)


async def _memory_store(client: AsyncClient, name: str) -> AsyncMemoryStore:
    try:
        return await client.memory_stores.get(name)
    except StoreNotFound:
        try:
            return await client.memory_stores.create(name)
        except AlreadyExists:
            return await client.memory_stores.get(name)


def _check_fact(client: AsyncClient, key: str, value: Any, field: str) -> None:
    """Refuse, before anything is written, a state entry a fact could not hold."""
    if len(key) > _MAX_FACT_KEY_CHARS or CONTROL_RE.search(key):
        raise InvalidInput(f"{field} key {key!r} is too long or holds control characters "
                           f"(stored as a fact key of at most {_MAX_FACT_KEY_CHARS} "
                           "printable chars)", field=field)
    size = len(_limits.encode_json(value, field=field).encode())
    limit = client.limits.max_item_bytes
    if size > limit:
        raise LimitExceeded(f"{field} value of {key!r} is {size} bytes; the limit is {limit}",
                            field=field, limit=limit, actual=size)


def _state_facts(client: AsyncClient, app_name: str, user_id: str,
                 deltas: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The facts that record the ``app`` and ``user`` parts of ``deltas``, checked."""
    specs: list[dict[str, Any]] = []
    for scope, subject in (("app", _app_subject(app_name)), ("user", user_id)):
        prefix = _state_prefix(app_name, scope)
        for key, value in deltas[scope].items():
            fact_key = prefix + key
            _check_fact(client, fact_key, value, "state")
            specs.append({"subject": subject, "key": fact_key, "value": value})
    return specs


@dataclass(slots=True)
class _Snapshot:
    """What a read of one session found."""

    handle: AsyncSession
    #: The whole history; or its newest part (not complete); or, with ``base``, the items
    #: that follow what ``base`` holds.
    items: list[Item]
    complete: bool  # items is the whole history, or all that follows base
    last: Item | None
    app_state: dict[str, Any]
    user_state: dict[str, Any]
    base: _Cached | None = None


class OwnstateSessionService(BaseSessionService):
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

    def close(self) -> None:
        """Close the client if :meth:`from_url` opened it; a client passed in stays open."""
        self._bridge.close()

    # plumbing ----------------------------------------------------------------------------

    @property
    def _client(self) -> AsyncClient:
        return self._bridge.client

    async def _ready(self) -> tuple[AsyncSessionStore, AsyncMemoryStore]:
        if self._stores is None:
            client = self._client
            self._stores = (await _session_store(client, self._store_name),
                            await _memory_store(client, self._state_name))
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
            self._client.backend.runs_inline,
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
        inline = self._client.backend.runs_inline
        base = self._cached(key)
        known = self._handles.get(key)
        if base is not None:
            # Only what follows the cached history, read with the record and the state.
            if known is not None:
                found, after, app_facts, user_facts = await _run_all(
                    inline, self._record(store, key), self._after(known, base),
                    facts.recall(_app_subject(app_name)), facts.recall(user_id))
                app_state = _scoped_values(app_facts, _state_prefix(app_name, "app"))
                user_state = _scoped_values(user_facts, _state_prefix(app_name, "user"))
            else:
                found, (app_state, user_state) = await _run_all(
                    inline, self._record(store, key), self._state_of(app_name, user_id))
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

    @staticmethod
    async def _record(store: AsyncSessionStore, key: str) -> AsyncSession | None:
        try:
            return await store.get(key)
        except SessionNotFound:
            return None

    async def _after(self, handle: AsyncSession, base: _Cached) -> list[Item] | None:
        """The items after those ``base`` holds; ``None`` if its last one is gone (or the
        session is). The page starts at that last item, which proves it is still there."""
        page_size = self._client.limits.max_page_size
        try:
            page = await handle.list_items_page(order_by="create_time asc",
                                                page_size=page_size,
                                                after_seq=max(base.seq - 1, 0))
            items = page.items
            while page.next_page_token is not None:
                page = await handle.list_items_page(order_by="create_time asc",
                                                    page_size=page_size,
                                                    page_token=page.next_page_token)
                items.extend(page.items)
        except SessionNotFound:
            return None
        if base.seq == 0:
            return items
        if not items or (items[0].seq, items[0].item_id) != (base.seq, base.item_id):
            return None
        return items[1:]

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
        inline = self._client.backend.runs_inline
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


# memory --------------------------------------------------------------------------------

_WORD_RE = re.compile(r"\w+")


def _is_latin(char: str) -> bool:
    if char.isascii():
        return char.isalnum() or char == "_"
    return unicodedata.name(char, "").startswith("LATIN")


def _query_words(text: str) -> set[str]:
    """The words of a query as ADK's InMemoryMemoryService reads them: ``\\w+`` runs of the
    NFC-normalized text (so a decomposed accent is the composed one), lowercased."""
    return {w.lower() for w in _WORD_RE.findall(unicodedata.normalize("NFC", text))}


def _event_words(text: str) -> set[str]:
    """The words an event can be found by, as InMemoryMemoryService finds them: the query
    words of its text, plus each single-script run of a word mixing Latin and other
    scripts (``私はPythonで`` gives ``python``)."""
    words = _query_words(text)
    for word in list(words):
        if not word.isascii():
            words.update("".join(run) for _, run in itertools.groupby(word, _is_latin))
    return words


def _memory_score(query: set[str], text: str) -> int:
    """How many query words the event text holds: whole words, and for a word that is
    not ASCII (scripts written without spaces) anywhere in the text."""
    words = _event_words(text)
    if not words:
        return 0
    lowered = unicodedata.normalize("NFC", text).lower()
    return sum(1 for w in query if w in words or (not w.isascii() and w in lowered))


def _memory_prefix(app_name: str, session_id: str | None) -> str:
    """The fact-key prefix of an app's memories from one session (``""``: no session)."""
    return f"{_escape(app_name)}:{_escape(session_id or '')}:"


def _text(content: Mapping[str, Any] | None) -> str:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    if not isinstance(parts, list):
        return ""
    return " ".join(p["text"] for p in parts
                    if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"])


class OwnstateRunPlugin(BasePlugin):
    """Records each ADK invocation as an ownstate run:
    ``Runner(..., session_service=service, plugins=[OwnstateRunPlugin(service)])``.

    Before the invocation runs, a run (framework ``adk``, thread key the ADK session id) is
    opened in the invocation's session; when it has run, the run is closed ``done``. A
    session that already has an active run (another framework's) is left as it is and
    nothing is recorded for that invocation.
    """

    def __init__(self, service: OwnstateSessionService, *, name: str = "ownstate_runs"
                 ) -> None:
        super().__init__(name=name)
        self._service = service
        self._open: dict[str, tuple[str, int]] = {}  # invocation id -> (run id, token)

    async def before_run_callback(self, *, invocation_context: Any) -> types.Content | None:
        session = invocation_context.session
        key = self._service._key(session.app_name, session.user_id, session.id)
        opened = await self._service._bridge.acall(self._start(key, session.id))
        if opened is not None:
            self._open[invocation_context.invocation_id] = opened
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        opened = self._open.pop(invocation_context.invocation_id, None)
        if opened is not None:
            await self._service._bridge.acall(self._finish(*opened))

    async def _start(self, key: str, thread_key: str) -> tuple[str, int] | None:
        store, _ = await self._service._ready()
        try:
            handle = await store.get(key)
            run = await self._service._client.runs.open_run(
                handle, "adk", thread_key[:256], owner=f"adk-{uuid.uuid4().hex[:12]}")
        except (ActiveRunExists, SessionNotFound):
            return None
        return run.run_id, run.fencing_token

    async def _finish(self, run_id: str, token: int) -> None:
        with contextlib.suppress(RunClosed, StaleLease):
            await self._service._client.runs.close_run(run_id, "done", fencing_token=token)


class OwnstateMemoryService(BaseMemoryService):
    """ADK's ``BaseMemoryService`` over an ownstate memory store.

    Each event with text becomes one fact: subject the ADK ``user_id``, key
    ``<app>:<session id>:<event id>`` (the session id empty for events given without
    one), value ``{"author", "content", "timestamp"}``, valid from the event's time, and,
    when the session is stored by :class:`OwnstateSessionService` in ``session_store``,
    the event's item as its source. As in ADK, memories are kept per session: an event id
    remembered from two sessions is two memories. Adding a session again adds only its
    new events. :meth:`search_memory` finds the events that share the most words with the
    query, matched and ranked as ADK's ``InMemoryMemoryService`` does, at most
    ``max_results``.

    Raises :class:`~ownstate.errors.InvalidInput` for bad names or values ownstate cannot
    store (nothing is stored then), :class:`~ownstate.errors.BackendUnavailable`.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        memory_store: str = "adk-memory",
        session_store: str | None = "adk",
        max_results: int = 10,
    ) -> None:
        self._setup(Bridge(client), memory_store, session_store, max_results)

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        memory_store: str = "adk-memory",
        session_store: str | None = "adk",
        max_results: int = 10,
    ) -> OwnstateMemoryService:
        """A service over a client it opens on ``url`` and closes with :meth:`close`.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.SchemaVersion`,
        :class:`~ownstate.errors.BackendUnavailable`.
        """
        service = cls.__new__(cls)
        bridge = Bridge.from_url(url)
        try:
            service._setup(bridge, memory_store, session_store, max_results)
        except BaseException:
            bridge.close()
            raise
        return service

    def _setup(self, bridge: Bridge, memory_store: str, session_store: str | None,
               max_results: int) -> None:
        if (isinstance(max_results, bool) or not isinstance(max_results, int)
                or not 1 <= max_results <= bridge.client.limits.max_page_size):
            raise InvalidInput("max_results must be an integer from 1 to "
                               f"{bridge.client.limits.max_page_size}", field="max_results")
        self._bridge = bridge
        self._memory_name = _limits.store_name(memory_store)
        self._session_name = (_limits.store_name(session_store) if session_store is not None
                              else None)
        self._max_results = max_results
        self._store: AsyncMemoryStore | None = None

    def close(self) -> None:
        """Close the client if :meth:`from_url` opened it; a client passed in stays open."""
        self._bridge.close()

    async def _ready(self) -> AsyncMemoryStore:
        if self._store is None:
            self._store = await _memory_store(self._bridge.client, self._memory_name)
        return self._store

    async def add_session_to_memory(self, session: Session) -> None:
        """Remember the session's events that hold text; events already remembered are
        skipped. Raises :class:`~ownstate.errors.InvalidInput`."""
        await self.add_events_to_memory(app_name=session.app_name, user_id=session.user_id,
                                        events=session.events, session_id=session.id)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Remember ``events`` (those holding text), skipping any already remembered.
        ``custom_metadata`` is not used. Raises :class:`~ownstate.errors.InvalidInput`."""
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        source_session = (ownstate_session_id(app_name, user_id, session_id)
                          if session_id is not None and self._session_name else None)
        client = self._bridge.client
        # Memories are kept per session, as ADK keeps them: the same event id remembered
        # from two sessions is two memories.
        prefix = _memory_prefix(app_name, session_id)
        specs: dict[str, dict[str, Any]] = {}
        now = datetime.now(UTC)
        for event in events:
            if not isinstance(event, Event):
                raise InvalidInput("events must be ADK Event objects", field="events")
            content = (event.content.model_dump(mode="json", exclude_none=True)
                       if event.content is not None else None)
            if not _text(content) or not event.id:
                continue
            key = prefix + event.id
            value = {"author": event.author, "content": content, "timestamp": event.timestamp}
            _check_fact(client, key, value, "events")
            # Valid from when it was said; never in the future, where recall would not
            # see it yet.
            valid_from = min(datetime.fromtimestamp(event.timestamp, UTC), now)
            specs.setdefault(key, {"subject": user_id, "key": key, "value": value,
                                   "valid_from": valid_from, "event_id": event.id})
        if specs:
            await self._bridge.acall(self._add(user_id, list(specs.values()), source_session))

    async def _add(self, user_id: str, specs: list[dict[str, Any]],
                   source_session: str | None) -> None:
        store = await self._ready()
        limits = self._bridge.client.limits
        known: set[str] = set()
        for start in range(0, len(specs), limits.max_page_size):
            keys = [s["key"] for s in specs[start:start + limits.max_page_size]]
            known.update(f.key for f in await store.recall(user_id, keys))
        new = [s for s in specs if s["key"] not in known]
        if not new:
            return
        sources: dict[str, Item] = {}
        if source_session is not None and self._session_name is not None:
            sources = await self._event_items(source_session)
        facts = []
        for spec in new:
            fact = {k: v for k, v in spec.items() if k != "event_id"}
            item = sources.get(spec["event_id"])
            if item is not None:
                fact["source"] = item
            facts.append(fact)
        for start in range(0, len(facts), limits.max_batch_items):
            await store.remember_many(facts[start:start + limits.max_batch_items])

    async def _event_items(self, key: str) -> dict[str, Item]:
        """The items of a session stored by OwnstateSessionService, by event id."""
        assert self._session_name is not None
        client = self._bridge.client
        try:
            session = await (await client.session_stores.get(self._session_name)).get(key)
            return {i.data["id"]: i async for i in session.list_items(
                order_by="create_time asc")
                if i.format == EVENT_FORMAT and isinstance(i.data.get("id"), str)}
        except (StoreNotFound, SessionNotFound):
            return {}

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """The remembered events of this app and user sharing the most words with
        ``query``, best first, at most ``max_results``: the matching and ranking of ADK's
        ``InMemoryMemoryService``. Among equals the oldest memory comes first: in the
        order they were remembered, and by event time within one call.

        Words are ``\\w+`` runs of the NFC-normalized text, compared lowercased; an event
        is also found by each single-script run of a word mixing Latin and other scripts,
        and a query word that is not ASCII (Japanese, Chinese: scripts written without
        spaces) anywhere in its text. Every memory of the user is read and scored. Raises
        :class:`~ownstate.errors.InvalidInput`.
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        if not isinstance(query, str):
            raise InvalidInput("query must be a string", field="query")
        words = _query_words(query)
        if not words:
            return SearchMemoryResponse()
        found = await self._bridge.acall(self._memories(user_id))
        prefix = _escape(app_name) + ":"
        scored: list[tuple[int, float, datetime, MemoryEntry]] = []  # score, time, recorded
        for fact in found:
            value = fact.value
            if not fact.key.startswith(prefix) or not isinstance(value, dict):
                continue
            matched = _memory_score(words, _text(value.get("content")))
            if not matched:
                continue
            timestamp = value.get("timestamp")
            when = float(timestamp) if isinstance(timestamp, (int, float)) else 0.0
            try:
                content = types.Content.model_validate(value["content"])
            except (KeyError, ValueError):  # not written by this service
                continue
            author = value.get("author")
            scored.append((matched, when, fact.recorded_at, MemoryEntry(
                id=fact.key[len(prefix):].partition(":")[2], content=content,
                author=author if isinstance(author, str) else None,
                timestamp=datetime.fromtimestamp(when).isoformat())))
        # Equal scores in the order remembered, as InMemoryMemoryService keeps its
        # insertion order: by record time, and by event time within one call.
        scored.sort(key=lambda s: (-s[0], s[2], s[1]))
        return SearchMemoryResponse(memories=[m for *_, m in scored[:self._max_results]])

    async def _memories(self, user_id: str) -> list[Fact]:
        """Every current memory of the user."""
        return await (await self._ready()).recall(user_id)
