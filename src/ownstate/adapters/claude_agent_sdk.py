"""Claude Agent SDK session transcripts kept in ownstate: :class:`OwnstateSessionStore`.

The SDK mirrors every transcript line its CLI writes to a ``SessionStore`` and reads it
back to resume, list, fork or inspect sessions. This adapter implements that protocol
over ownstate sessions:

- one ownstate session store (``"claude-agent-sdk"`` unless named) holds every transcript;
- each Claude transcript, the main one of a session and each ``subpath`` under it
  (subagent transcripts), is one ownstate session. Its id is derived from the key, so a
  key always finds its session in one lookup; its ``actor_id`` is the ``project_key``;
  labels ``claude.project_key``, ``claude.session_id``, ``claude.subpath`` and
  ``claude.kind`` (``main`` or ``subpath``) say which transcript it holds;
- each transcript entry is one item of format ``claude.transcript``, stored exactly as
  given, in append order.

See ``docs/claude-agent-sdk.md``.

It may touch the public API through the adapters' bridge and kernel, the error tree, the
limits and the model, and the Claude Agent SDK (``claude_agent_sdk``, the ``claude`` extra);
never a backend.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from .. import limits as _limits
from .._extras import requires
from ..api import AsyncClient, AsyncSession, AsyncSessionStore, Client
from ..errors import AlreadyExists, InvalidInput, LimitExceeded, SessionNotFound, StoreNotFound
from ..limits import Limits
from ..model import Item
from ._bridge import Bridge, BridgedAdapter
from ._kernel import ensure_store, find_session, find_store

with requires("claude", "the Claude Agent SDK adapter"):
    from claude_agent_sdk import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStore,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
        fold_session_summary,
    )

__all__ = ["DEFAULT_STORE", "FORMAT", "OwnstateSessionStore"]

#: The ``format`` of the items that hold transcript entries.
FORMAT = "claude.transcript"
#: The session store used unless another is named.
DEFAULT_STORE = "claude-agent-sdk"

LABEL_PROJECT = "claude.project_key"
LABEL_SESSION = "claude.session_id"
LABEL_SUBPATH = "claude.subpath"
LABEL_KIND = "claude.kind"
KIND_MAIN = "main"
KIND_SUBPATH = "subpath"

# A Claude session id this plain (UUIDs are) is kept readable in the ownstate session id;
# any other is hashed. The ownstate id then never contains "." except as our separator.
_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_ASC = "create_time asc"
# The actor and label a project key maps to follow the default bounds, not the client's,
# so that every client finds the same sessions for the same key.
_DEFAULT_LIMITS = Limits()
# An append that keeps losing a race (its session deleted or created under it) gives up
# after this many rounds rather than spin.
_APPEND_ROUNDS = 4


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def _text(value: object, field: str, max_chars: int | None) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be a non-empty string", field=field)
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} must be valid Unicode text", field=field) from exc
    if max_chars is not None and len(value) > max_chars:
        raise LimitExceeded(f"{field} is longer than {max_chars} chars", field=field,
                            limit=max_chars, actual=len(value))
    return value


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class _Key:
    """A Claude transcript key, validated, with where it lives in ownstate."""

    project_key: str
    session_id: str
    subpath: str | None
    ownstate_id: str
    actor_id: str
    project_label: str

    @property
    def main(self) -> bool:
        return self.subpath is None

    @property
    def labels(self) -> dict[str, str]:
        labels = {LABEL_PROJECT: self.project_label, LABEL_SESSION: self.session_id,
                  LABEL_KIND: KIND_MAIN if self.subpath is None else KIND_SUBPATH}
        if self.subpath is not None:
            labels[LABEL_SUBPATH] = self.subpath
        return labels

    @property
    def sdk_key(self) -> SessionKey:
        key: SessionKey = {"project_key": self.project_key, "session_id": self.session_id}
        if self.subpath is not None:
            key["subpath"] = self.subpath
        return key


@dataclass(slots=True)
class _Tail:
    """What this process knows of one transcript's stored items.

    When ``synced``, ``seq`` and ``item_id`` name the last item read and ``summary`` (main
    transcripts) and ``uuids`` (when tracked) cover every item up to it. The knowledge is
    only ever a hint: each use re-reads from ``seq`` on and checks that ``item_id`` is
    still there, so items appended, popped or cleared by anyone else are noticed.
    """

    session: AsyncSession | None = None
    synced: bool = False
    seq: int = 0
    item_id: str | None = None
    uuids: set[str] | None = None
    summary: SessionSummaryEntry | None = None
    activity: datetime | None = None  # the session's last_activity_time summary matches


class OwnstateSessionStore(BridgedAdapter, SessionStore):
    """The Claude Agent SDK's ``SessionStore`` over ownstate sessions.

    Pass it as ``ClaudeAgentOptions(session_store=...)`` or to the SDK's ``*_from_store``
    and ``*_via_store`` helpers. Build it from a connected :class:`~ownstate.Client` or
    :class:`~ownstate.AsyncClient` (which it never closes), or with :meth:`from_url`.

    ``store`` names the ownstate session store that holds the transcripts (created on the
    first append). ``cache_sessions`` bounds how many transcripts' positions, entry uuids
    and summaries are remembered between calls; the cache only saves reads, it never
    decides what is stored.

    Every method raises :class:`~ownstate.errors.InvalidInput` for a malformed key (a
    ``project_key`` or ``session_id`` that is not a non-empty string; an empty
    ``subpath``), :class:`~ownstate.errors.LimitExceeded` for a ``session_id`` or
    ``subpath`` longer than ``Limits.max_label_value_chars``, and
    :class:`~ownstate.errors.BackendUnavailable` when the database fails.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        store: str = DEFAULT_STORE,
        cache_sessions: int = 1024,
    ) -> None:
        self._setup(Bridge(client), store, cache_sessions)

    def _setup(self, bridge: Bridge, store: str, cache_sessions: int) -> None:
        self._bridge = bridge
        self._name = _limits.store_name(store)
        if isinstance(cache_sessions, bool) or not isinstance(cache_sessions, int) \
                or cache_sessions < 1:
            raise InvalidInput("cache_sessions must be an integer >= 1", field="cache_sessions")
        self._cache_size = cache_sessions
        self._handle: AsyncSessionStore | None = None
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        # Guards the cache only, never across an await: with an inline backend, calls from
        # several threads run their coroutines at once.
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        store: str = DEFAULT_STORE,
        cache_sessions: int = 1024,
        **connect_args: Any,
    ) -> OwnstateSessionStore:
        """A store over a client it opens on ``url`` (and closes with :meth:`close`).

        ``connect_args`` go to :func:`ownstate.connect` (``tenant=``, ``limits=``, ...).
        Raises as :func:`ownstate.connect` does, and
        :class:`~ownstate.errors.InvalidInput` for a bad ``store`` name.
        """
        bridge = Bridge.from_url(url, **connect_args)
        self = cls.__new__(cls)
        try:
            self._setup(bridge, store, cache_sessions)
        except BaseException:
            bridge.close()
            raise
        return self

    @property
    def store_name(self) -> str:
        """The name of the ownstate session store that holds the transcripts."""
        return self._name

    def session_id_for(self, key: SessionKey) -> str:
        """The id of the ownstate session that holds ``key``'s transcript (whether or not it
        exists yet). Raises :class:`~ownstate.errors.InvalidInput` for a malformed key."""
        return self._key(key).ownstate_id

    # the SessionStore protocol ---------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append ``entries`` to the end of the transcript, in the order given.

        An entry whose string ``uuid`` the transcript already holds (or that repeats one
        earlier in the batch) is skipped, so a retried batch or a re-imported session
        adds nothing twice; entries without a ``uuid`` are always appended. The first
        append to a key creates its ownstate session. An empty list does nothing. A batch
        larger than one ownstate append takes (``Limits.max_batch_items`` or
        ``max_batch_bytes``) is written in several appends, each all or none.

        Every entry is checked before anything is stored: raises
        :class:`~ownstate.errors.InvalidInput` (``entries`` not a list of JSON objects, an
        entry JSON cannot represent, with ``index``) and
        :class:`~ownstate.errors.LimitExceeded` (an entry over ``Limits.max_item_bytes``).
        Raises :class:`~ownstate.errors.AlreadyExists` if the derived ownstate session id
        is taken by a session that is not this transcript.
        """
        parsed = self._key(key)
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
            raise InvalidInput("entries must be a list of JSON objects", field="entries")
        if not entries:
            return
        sized = list(zip(entries, _sizes(entries, self._bridge.client.limits), strict=True))
        await self._bridge.acall(self._append(parsed, sized))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry of the transcript, in append order, exactly as appended; ``None`` if
        the key was never written (or was deleted). Raises as the class docstring says."""
        parsed = self._key(key)
        return await self._bridge.acall(self._load(parsed))

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The main transcripts of ``project_key``: their session ids and ``mtime`` (the
        ownstate session's ``last_activity_time`` in epoch milliseconds), in no set order.
        Raises :class:`~ownstate.errors.InvalidInput` for an empty ``project_key``."""
        project = _text(project_key, "project_key", None)
        return await self._bridge.acall(self._list_sessions(project))

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's incremental summary of each main transcript of ``project_key``.

        Each summary is ``fold_session_summary`` over the transcript's entries, with the
        same ``mtime`` :meth:`list_sessions` reports. Folds are remembered per process and
        brought up to date from the entries appended since, so a listing reads only what
        changed. Raises :class:`~ownstate.errors.InvalidInput` for an empty ``project_key``.
        """
        project = _text(project_key, "project_key", None)
        return await self._bridge.acall(self._list_summaries(project))

    async def delete(self, key: SessionKey) -> None:
        """Delete the transcript. A main key takes every ``subpath`` transcript under it
        with it; a key with a ``subpath`` deletes only that one. Deleting a key that was
        never written does nothing.

        Raises :class:`~ownstate.errors.HasChildren` when the ownstate session has forks
        (made with ``Session.fork``), which are not deleted silently.
        """
        parsed = self._key(key)
        await self._bridge.acall(self._delete(parsed))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The ``subpath`` of every transcript under the session, oldest first; never the
        main transcript. Raises as the class docstring says."""
        parsed = self._key(key, main=True)
        return await self._bridge.acall(self._list_subkeys(parsed))

    # keys ------------------------------------------------------------------------------

    def _key(self, key: Mapping[str, Any], *, main: bool = False) -> _Key:
        """``key`` checked and placed; with ``main``, its ``subpath`` is ignored."""
        if not isinstance(key, Mapping):
            raise InvalidInput("key must be a mapping with project_key and session_id",
                               field="key")
        limits = self._bridge.client.limits
        project = _text(key.get("project_key"), "project_key", None)
        session = _text(key.get("session_id"), "session_id", limits.max_label_value_chars)
        raw_subpath = None if main else key.get("subpath")
        subpath = (None if raw_subpath is None
                   else _text(raw_subpath, "subpath", limits.max_label_value_chars))
        return _Key(project, session, subpath, _ownstate_id(project, session, subpath),
                    self._actor(project), self._project_label(project))

    def _actor(self, project_key: str) -> str:
        try:
            return _DEFAULT_LIMITS.actor_id(project_key)
        except InvalidInput:  # too long, or not printable: group by its digest instead
            return "sha256:" + _digest(project_key, 64)

    def _project_label(self, project_key: str) -> str:
        if len(project_key) <= _DEFAULT_LIMITS.max_label_value_chars:
            return project_key
        return "sha256:" + _digest(project_key, 64)

    # the store and the cache -----------------------------------------------------------

    async def _store(self, *, create: bool) -> AsyncSessionStore | None:
        if self._handle is not None:
            return self._handle
        stores = self._bridge.client.session_stores
        handle = await (ensure_store(stores, self._name) if create
                        else find_store(stores, self._name))
        self._handle = handle
        return handle

    def _forget_store(self) -> None:
        with self._lock:
            self._handle = None
            self._tails.clear()

    def _tail(self, ownstate_id: str) -> _Tail:
        with self._lock:
            tail = self._tails.get(ownstate_id)
            if tail is None:
                tail = self._tails[ownstate_id] = _Tail()
            self._tails.move_to_end(ownstate_id)
            while len(self._tails) > max(self._cache_size, 1):
                self._tails.popitem(last=False)
            return tail

    def _drop_tail(self, ownstate_id: str) -> None:
        with self._lock:
            self._tails.pop(ownstate_id, None)

    # reading ---------------------------------------------------------------------------

    async def _read(self, session: AsyncSession, after_seq: int | None) -> list[Item]:
        size = self._bridge.client.limits.max_page_size
        page = await session.list_items_page(order_by=_ASC, page_size=size, after_seq=after_seq)
        items = list(page.items)
        while page.next_page_token is not None:
            page = await session.list_items_page(order_by=_ASC, page_size=size,
                                                 page_token=page.next_page_token)
            items.extend(page.items)
        return items

    async def _open(self, store: AsyncSessionStore, key: _Key) -> AsyncSession | None:
        session = await find_session(store, key.ownstate_id)
        if session is not None:
            _check_owner(session, key, self._name)
        return session

    async def _catch_up(self, store: AsyncSessionStore, key: _Key, tail: _Tail, *,
                        uuids: bool) -> None:
        """Bring ``tail`` up to the stored items, reading only those it has not seen.

        Afterwards ``tail.session`` is ``None`` exactly when the session does not exist.
        """
        session = tail.session or await self._open(store, key)
        if session is None:
            with self._lock:
                _reset(tail, None)
            return
        with self._lock:
            tail.session = session
            if not tail.synced or (uuids and tail.uuids is None):
                _reset(tail, session)
            start_seq, start_id = tail.seq, tail.item_id
        try:
            items = await self._read(session, start_seq - 1 if start_seq else None)
        except SessionNotFound:
            with self._lock:
                _reset(tail, None)
            return
        if start_seq:
            if not items or items[0].seq != start_seq or items[0].item_id != start_id:
                # Popped, cleared or recreated since we last looked: start again from seq 1.
                with self._lock:
                    _reset(tail, session)
                await self._catch_up(store, key, tail, uuids=uuids)
                return
            items = items[1:]
        with self._lock:
            if tail.synced and (tail.seq, tail.item_id) == (start_seq, start_id):
                _extend(tail, key, items, track_uuids=uuids)
            elif not tail.synced and start_seq == 0:
                _reset(tail, session)
                _extend(tail, key, items, track_uuids=uuids)
            # else: another call moved the tail on meanwhile; what it knows is as good.

    async def _load(self, key: _Key) -> list[SessionStoreEntry] | None:
        store = await self._store(create=False)
        if store is None:
            return None
        tail = self._tail(key.ownstate_id)
        try:
            session = await self._open(store, key)
            if session is None:
                self._drop_tail(key.ownstate_id)
                return None
            items = await self._read(session, None)
        except SessionNotFound:
            self._drop_tail(key.ownstate_id)
            return None
        except StoreNotFound:
            self._forget_store()
            return None
        with self._lock:
            # A full read is the cheapest moment to learn the uuids an append will check
            # (the SDK loads a session right before resuming it).
            _reset(tail, session)
            _extend(tail, key, items, track_uuids=True)
            tail.activity = session.last_activity_time if items else None
        return [cast(SessionStoreEntry, item.data) for item in items if item.format == FORMAT]

    async def _listed(self, store: AsyncSessionStore, project_key: str,
                      labels: dict[str, str]) -> list[tuple[_Key, AsyncSession]]:
        """The sessions of ``project_key`` carrying ``labels`` that really are transcripts
        (a fork copies the labels of its parent but not its id)."""
        found: list[tuple[_Key, AsyncSession]] = []
        pager = store.list_sessions(actor_id=self._actor(project_key),
                                    metadata={LABEL_PROJECT: self._project_label(project_key),
                                              **labels},
                                    order_by=_ASC,
                                    page_size=self._bridge.client.limits.max_page_size)
        async for session in pager:
            meta = session.metadata
            sid, subpath = meta.get(LABEL_SESSION), meta.get(LABEL_SUBPATH)
            try:
                key = self._key({"project_key": project_key, "session_id": sid,
                                 "subpath": subpath})
            except InvalidInput:  # labels set by hand, not by this adapter
                continue
            if key.ownstate_id == session.session_id:
                found.append((key, session))
        return found

    async def _list_main(self, project_key: str
                         ) -> tuple[AsyncSessionStore | None, list[tuple[_Key, AsyncSession]]]:
        store = await self._store(create=False)
        if store is None:
            return None, []
        try:
            return store, await self._listed(store, project_key, {LABEL_KIND: KIND_MAIN})
        except StoreNotFound:
            self._forget_store()
            return None, []

    async def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        _, listed = await self._list_main(project_key)
        return [{"session_id": key.session_id, "mtime": _ms(session.last_activity_time)}
                for key, session in listed]

    async def _list_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        store, listed = await self._list_main(project_key)
        summaries: list[SessionSummaryEntry] = []
        for key, session in listed:
            assert store is not None
            # The summary is stamped with the listing's time, read before any item: the
            # fold is never older than that, so the SDK never takes it for fresher than
            # it is.
            activity = session.last_activity_time
            tail = self._tail(key.ownstate_id)
            with self._lock:
                fresh = tail.synced and tail.summary is not None and tail.activity == activity
                if not fresh:
                    tail.session = session
            if not fresh:
                await self._catch_up(store, key, tail, uuids=False)
            with self._lock:
                if tail.session is None:  # deleted since the listing
                    continue
                if not fresh:
                    tail.activity = activity
                summary = tail.summary or fold_session_summary(None, key.sdk_key, [])
                summaries.append({"session_id": key.session_id, "mtime": _ms(activity),
                                  "data": dict(summary["data"])})
        return summaries

    async def _list_subkeys(self, key: _Key) -> list[str]:
        store = await self._store(create=False)
        if store is None:
            return []
        try:
            listed = await self._listed(store, key.project_key,
                                        {LABEL_SESSION: key.session_id, LABEL_KIND: KIND_SUBPATH})
        except StoreNotFound:
            self._forget_store()
            return []
        return [sub.subpath for sub, _ in listed if sub.subpath is not None]

    # writing ---------------------------------------------------------------------------

    async def _append(self, key: _Key, entries: list[tuple[Any, int]]) -> None:
        limits = self._bridge.client.limits
        for _ in range(_APPEND_ROUNDS):
            store = await self._store(create=True)
            assert store is not None
            tail = self._tail(key.ownstate_id)
            try:
                await self._catch_up(store, key, tail, uuids=True)
            except StoreNotFound:
                self._forget_store()
                continue
            with self._lock:
                session = tail.session
                fresh = _unseen(entries, tail.uuids or set())
            if not fresh:
                return
            if session is None:
                try:
                    session = await store.add(actor_id=key.actor_id, session_id=key.ownstate_id,
                                              metadata=key.labels)
                except AlreadyExists:
                    continue  # created meanwhile by someone else: catch up with it first
                except StoreNotFound:
                    self._forget_store()
                    continue
                with self._lock:
                    _reset(tail, session)
                    tail.uuids = set()
            try:
                for batch in _batches(fresh, limits):
                    items = await session.append_items(batch, format=FORMAT)
                    with self._lock:
                        if tail.synced and tail.seq + 1 == items[0].seq:
                            _extend(tail, key, items, track_uuids=True)
                            tail.activity = items[-1].create_time
                        else:
                            # Someone appended in between: what the tail knows is still a
                            # true prefix, and the next read folds the rest in order.
                            tail.activity = None
            except SessionNotFound:  # deleted meanwhile: create it again
                with self._lock:
                    _reset(tail, None)
                continue
            return
        raise AlreadyExists(
            f"could not append to {key.ownstate_id!r}: its session kept being created or "
            "deleted by another writer", store=self._name, session_id=key.ownstate_id)

    async def _delete(self, key: _Key) -> None:
        store = await self._store(create=False)
        if store is None:
            return
        try:
            doomed = [key]
            if key.main:
                # The main transcript goes first: if it is refused (it has forks) nothing
                # is deleted, and a delete cut short is finished by calling it again.
                doomed += [sub for sub, _ in await self._listed(
                    store, key.project_key,
                    {LABEL_SESSION: key.session_id, LABEL_KIND: KIND_SUBPATH})]
            for victim in doomed:
                self._drop_tail(victim.ownstate_id)
                session = await self._open(store, victim)
                if session is None:
                    continue
                with suppress(SessionNotFound):  # deleted meanwhile: just as good
                    await session.delete()
                self._drop_tail(victim.ownstate_id)
        except StoreNotFound:
            self._forget_store()


def _ownstate_id(project_key: str, session_id: str, subpath: str | None) -> str:
    """``<session id>.p<project digest>[.s<subpath digest>]``; see the module docstring.

    The Claude session id stays readable when it is plain (a UUID is); otherwise it is
    replaced by ``h:<digest>``, which no plain id can equal.
    """
    head = session_id if _PLAIN_ID.fullmatch(session_id) else "h:" + _digest(session_id, 32)
    ident = f"{head}.p{_digest(project_key, 20)}"
    if subpath is not None:
        ident += f".s{_digest(subpath, 20)}"
    return ident


def _check_owner(session: AsyncSession, key: _Key, store: str) -> None:
    meta = session.metadata
    if (meta.get(LABEL_PROJECT), meta.get(LABEL_SESSION), meta.get(LABEL_SUBPATH)) != (
            key.project_label, key.session_id, key.subpath):
        raise AlreadyExists(
            f"ownstate session {key.ownstate_id!r} in store {store!r} exists but does not "
            "hold this Claude transcript", store=store, session_id=key.ownstate_id)


def _reset(tail: _Tail, session: AsyncSession | None) -> None:
    tail.session = session
    tail.synced = True
    tail.seq = 0
    tail.item_id = None
    tail.uuids = None
    tail.summary = None
    tail.activity = None


def _extend(tail: _Tail, key: _Key, items: Sequence[Item], *, track_uuids: bool) -> None:
    """Fold ``items`` (the ones right after ``tail.seq``) into ``tail``."""
    entries = [item.data for item in items if item.format == FORMAT]
    if track_uuids and tail.uuids is None and tail.seq == 0:
        tail.uuids = set()
    if tail.uuids is not None:
        tail.uuids.update(u for e in entries if isinstance(u := e.get("uuid"), str))
    if key.main and (entries or tail.summary is None):
        tail.summary = fold_session_summary(tail.summary, key.sdk_key, entries)
    if items:
        tail.seq, tail.item_id = items[-1].seq, items[-1].item_id
    tail.activity = None


def _sizes(entries: Sequence[Any], limits: Limits) -> list[int]:
    """The encoded size of each entry, after checking each is a JSON object within
    ``max_item_bytes``; the batch bounds do not apply, as :func:`_batches` splits."""
    unbounded = replace(limits, max_batch_items=max(len(entries), limits.max_batch_items),
                        max_batch_bytes=max(limits.max_batch_bytes,
                                            limits.max_item_bytes * len(entries)))
    texts = unbounded.encode_items(entries)
    return [len(text) if text.isascii() else len(text.encode()) for text in texts]


def _batches(entries: list[tuple[Any, int]], limits: Limits) -> list[list[Any]]:
    """``entries`` in order, cut into batches one ownstate append takes."""
    batches: list[list[Any]] = [[]]
    total = 0
    for entry, size in entries:
        if batches[-1] and (len(batches[-1]) >= limits.max_batch_items
                            or total + size > limits.max_batch_bytes):
            batches.append([])
            total = 0
        batches[-1].append(entry)
        total += size
    return batches


def _unseen(entries: Sequence[tuple[Any, int]], seen: set[str]) -> list[tuple[Any, int]]:
    """``entries`` less those whose ``uuid`` is in ``seen`` or earlier in the batch."""
    fresh: list[tuple[Any, int]] = []
    batch: set[str] = set()
    for entry, size in entries:
        uuid = entry.get("uuid")
        if isinstance(uuid, str):
            if uuid in seen or uuid in batch:
                continue
            batch.add(uuid)
        fresh.append((entry, size))
    return fresh
