"""``OwnstateSaver``: LangGraph's checkpointer over ownstate sessions, runs and checkpoints.

How a LangGraph thread is kept:

- **The thread is a session** in one session store (``"langgraph"`` by default). Its id is
  the ``thread_id`` when that is a valid session id, else ``lg-`` and a digest of it; the
  thread id is kept in the session's ``langgraph.thread_id`` label.
- **Checkpoints live with the thread's first run**, whose id is derived from the session
  (``lgt_`` and a digest), so every replica finds them with no lookup; they are opaque
  payloads in LangGraph's own serializer (never pickle).
- **Messages are items of the session**, stored once; checkpoints hold references to them
  (see :mod:`._history`). Other channels are stored in the checkpoint that gave them their
  version, and later checkpoints refer to it while the version is unchanged.
- **Each invocation is an ownstate run** (framework ``langgraph``, ``thread_key`` the
  thread id): opened by the invocation's first checkpoint, marked ``awaiting_human`` with
  the interrupt when ``interrupt()`` pauses the graph, claimed again by the replica that
  resumes it with ``Command(resume=...)`` (of two replicas resuming at once, one wins and
  the other's invocation fails with :class:`~ownstate.errors.LeaseHeld`), and closed
  ``done`` when the graph finishes (``failed`` when a node fails).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import os
import random
import socket
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, TASKS

from ..._ids import now
from ...api import AsyncClient, AsyncSession, AsyncSessionStore, Client
from ...errors import (
    ActiveRunExists,
    AlreadyExists,
    CheckpointNotFound,
    Conflict,
    InvalidInput,
    LeaseHeld,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StoreNotFound,
)
from ...formats.langchain import to_messages
from ...formats.neutral import FORMAT as MESSAGE_FORMAT
from ...formats.neutral import to_neutral
from ...limits import SESSION_ID_RE
from ...model import (
    ACTIVE_RUN_STATUSES,
    CheckpointRecord,
    CheckpointScope,
    Item,
    PendingWrite,
    Run,
)
from .._bridge import Bridge
from ._history import History, is_history

__all__ = ["OwnstateSaver", "acatch_up", "arebuild", "catch_up", "rebuild"]

FRAMEWORK = "langgraph"
#: The type tag of the checkpoints this saver stores.
TYPE_TAG = "langgraph.v1"
_THREAD_LABEL = "langgraph.thread_id"
# Channel values at least this large (serialized) are stored once per version.
_SHARED_BYTES = 256
# Channels whose update means another step is due: the graph has not finished.
_TRIGGER_PREFIX = "branch:to:"
_TRIGGERS = frozenset({"__start__", TASKS})


# Payloads and writes at least this large are compressed when that makes them smaller.
_PACK_BYTES = 128
_ZLIB = "+zlib"


def _pack(payload: bytes) -> bytes:
    """A checkpoint payload as stored: a marker byte, then msgpack, compressed or not."""
    if len(payload) >= _PACK_BYTES:
        packed = zlib.compress(payload, 1)
        if len(packed) < len(payload):
            return b"z" + packed
    return b"m" + payload


def _unpack(stored: bytes) -> bytes:
    marker, body = stored[:1], stored[1:]
    if marker == b"z":
        return zlib.decompress(body)
    if marker == b"m":
        return body
    raise InvalidInput("checkpoint payload is malformed", field="payload")


async def _wait(future: concurrent.futures.Future[Any]) -> Any:
    """The result of a future another call of this saver is completing: awaited on an
    event loop, waited for on a thread that drives coroutines without one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return future.result()
    return await asyncio.wrap_future(future)


async def _wait_event(event: threading.Event, timeout: float) -> bool:
    """Wait for an event another call of this saver sets, as :func:`_wait` does."""
    if event.is_set():
        return True
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return event.wait(timeout)
    return await loop.run_in_executor(None, event.wait, timeout)


def _session_id(thread_id: str) -> str:
    if SESSION_ID_RE.fullmatch(thread_id):
        return thread_id
    return "lg-" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


def _holder_id(store: str, session_id: str) -> str:
    digest = hashlib.sha256(f"{store}\x00{session_id}".encode()).hexdigest()
    return f"lgt_{digest[:32]}"


def _thread_id(config: RunnableConfig) -> str:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise InvalidInput("config['configurable']['thread_id'] is required", field="thread_id")
    return str(thread_id)


def _namespace(config: RunnableConfig) -> str:
    return str((config.get("configurable") or {}).get("checkpoint_ns") or "")


def _finished(checkpoint: Checkpoint) -> bool:
    """Whether the graph that wrote this checkpoint has no step left to run."""
    updated = checkpoint.get("updated_channels")
    if updated is None:
        return False
    return not any(c in _TRIGGERS or c.startswith(_TRIGGER_PREFIX) for c in updated)


def _json_value(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


_HOLDER = "\x00holder"  # the key of the holder's creation among a thread's claims


def _key(config: RunnableConfig, checkpoint_id: str | None) -> tuple[str, str, str | None]:
    configurable = config.get("configurable") or {}
    return (str(configurable.get("thread_id")), _namespace(config), checkpoint_id)


class _Arrivals:
    """Which checkpoints this saver has stored or read, and which it is storing, so that
    writes can wait for a checkpoint that is on its way instead of failing."""

    def __init__(self, remember: int = 4096) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._waiting: dict[tuple[Any, ...], threading.Event] = {}
        self._remember = remember

    def expect(self, key: tuple[Any, ...]) -> threading.Event:
        with self._lock:
            return self._waiting.setdefault(key, threading.Event())

    def arrived(self, key: tuple[Any, ...], event: threading.Event | None = None) -> None:
        with self._lock:
            self._known[key] = None
            self._known.move_to_end(key)
            while len(self._known) > self._remember:
                self._known.popitem(last=False)
            self._waiting.pop(key, None)
        if event is not None:
            event.set()

    def storing(self, thread_id: str, namespace: str) -> list[threading.Event]:
        """The puts of a thread's namespace this saver has under way."""
        with self._lock:
            return [event for (thread, ns, _), event in self._waiting.items()
                    if thread == thread_id and ns == namespace and not event.is_set()]

    def give_up(self, key: tuple[Any, ...], event: threading.Event) -> None:
        """Stop waiting for a checkpoint no put of this saver announced in time."""
        with self._lock:
            if not event.is_set() and self._waiting.get(key) is event:
                del self._waiting[key]

    def pending(self, key: tuple[Any, ...]) -> threading.Event | None:
        """``None`` when the checkpoint is known here; else the event its put will set."""
        with self._lock:
            if key in self._known:
                return None
            return self._waiting.setdefault(key, threading.Event())


@dataclass
class _Thread:
    """What this process knows about one thread; the database is always the authority."""

    thread_id: str
    session: AsyncSession
    scope: CheckpointScope
    history: History
    held: bool = False  # the thread's first run (the checkpoints' holder) is known to exist
    active: str | None = None  # the invocation run this process last saw active
    token: int | None = None  # the fencing token of this process's lease on it
    renew_at: float = 0.0  # when to extend that lease (time.monotonic())
    ended: tuple[str, int] | None = None  # the run this process closed last, and its token
    first_step: int | None = None  # the LangGraph step that run began at
    resumed_from: str | None = None  # the checkpoint this saver last resumed the run from
    # run id -> the claim of its lease in progress (or made) by this saver
    claims: dict[str, concurrent.futures.Future[None]] = field(default_factory=dict)
    # (namespace, channel, version) -> id of the checkpoint holding that value
    origins: dict[tuple[str, str, Any], str] = field(default_factory=dict)
    # (namespace, channel, version) -> the stored form of a history channel
    references: dict[tuple[str, str, Any], list[Any]] = field(default_factory=dict)


class OwnstateSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps threads in ownstate (see the module docstring).

    ``OwnstateSaver(client)`` takes a connected :class:`~ownstate.Client` or
    :class:`~ownstate.AsyncClient`; ``OwnstateSaver.from_url(url)`` opens one (and
    :meth:`close` closes it). Works on every backend, sync and async.

    Options: ``store`` (the session store for threads), ``actor_id`` (the actor of new
    threads' sessions, unless ``config["configurable"][actor_key]`` names one),
    ``history_channels`` (channels kept as session items), ``owner`` (this replica's name
    for run leases), ``serde`` (LangGraph's serializer; pickle is never used).
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        store: str = "langgraph",
        actor_id: str = "langgraph",
        actor_key: str = "user_id",
        history_channels: Sequence[str] = ("messages",),
        owner: str | None = None,
        serde: SerializerProtocol | None = None,
        max_cached_threads: int = 256,
        lease_ttl: float = 60.0,
        writes_wait: float = 5.0,
        _bridge: Bridge | None = None,
    ) -> None:
        super().__init__(serde=serde or JsonPlusSerializer(pickle_fallback=False))
        self._bridge = _bridge or Bridge(client)
        self._store_name = store
        self._actor_id = actor_id
        self._actor_key = actor_key
        self._history_channels = frozenset(history_channels)
        self._owner = owner or f"langgraph@{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._store: AsyncSessionStore | None = None
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._max_threads = max_cached_threads
        self._lease_ttl = lease_ttl
        # Checkpoints stored, read or being stored here, so their writes can wait for them.
        self._arrivals = _Arrivals()
        self._writes_wait = writes_wait
        self._claims_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str | None = None, **options: Any) -> OwnstateSaver:
        """A saver over a client it opens on ``url`` (the default database when ``None``);
        :meth:`close` closes that client."""
        bridge = Bridge.from_url(url)
        return cls(bridge._sync or bridge.client, _bridge=bridge, **options)

    def close(self) -> None:
        """Close the client if this saver opened it (:meth:`from_url`)."""
        self._bridge.close()

    def __enter__(self) -> OwnstateSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> AsyncClient:
        """The async client this saver works through."""
        return self._bridge.client

    # -- the threads ------------------------------------------------------------------------

    async def _session_store(self, *, create: bool = True) -> AsyncSessionStore | None:
        """The store of threads; made on first write (reads never create it)."""
        if self._store is None:
            stores = self.client.session_stores
            try:
                self._store = await stores.get(self._store_name)
            except StoreNotFound:
                if not create:
                    return None
                try:
                    self._store = await stores.create(self._store_name)
                except AlreadyExists:
                    self._store = await stores.get(self._store_name)
        return self._store

    def _remember(self, thread_id: str, session: AsyncSession, store: str) -> _Thread:
        known = self._threads.get(thread_id)
        if known is not None and known.session.session_id == session.session_id:
            return known  # loaded meanwhile by a concurrent call: one object per thread
        thread = _Thread(thread_id, session,
                         CheckpointScope(session.actor_id, store, session.session_id,
                                         _holder_id(store, session.session_id)),
                         History(self.serde, self.client.limits.max_page_size))
        self._threads[thread_id] = thread
        while len(self._threads) > self._max_threads:
            self._threads.popitem(last=False)
        return thread

    async def _thread(self, thread_id: str, *, create: RunnableConfig | None = None
                      ) -> _Thread | None:
        """The thread, with its session and checkpoint scope; ``None`` when it has no
        session (and ``create`` is not given, else a session is made from that config)."""
        thread = self._threads.get(thread_id)
        if thread is not None:
            self._threads.move_to_end(thread_id)
            return thread
        store = await self._session_store(create=create is not None)
        if store is None:
            return None
        session_id = _session_id(thread_id)
        try:
            session = await store.get(session_id)
        except SessionNotFound:
            if create is None:
                return None
            configurable = create.get("configurable") or {}
            actor = configurable.get(self._actor_key) or self._actor_id
            try:
                session = await store.add(actor_id=str(actor), session_id=session_id,
                                          metadata={_THREAD_LABEL: thread_id[:256]})
            except AlreadyExists:
                session = await store.get(session_id)
        return self._remember(thread_id, session, store.name)

    def _drop(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

    async def _has_holder(self, thread: _Thread) -> bool:
        """Whether the thread's first run, which holds its checkpoints, exists."""
        if not thread.held:
            try:
                await self.client.runs.get(thread.scope.run_id)
            except RunNotFound:
                return False
            thread.held = True
        return True

    async def _once(self, thread: _Thread, key: str,
                    work: Callable[[], Awaitable[None]]) -> bool:
        """Run ``work`` once among this saver's concurrent calls for one thread: the first
        call for ``key`` runs it, the others wait for its outcome (its error too). Returns
        whether this call ran it. A failed run is forgotten, so a later call tries again;
        :meth:`_release` forgets a run's claim once the run is paused or closed."""
        with self._claims_lock:
            pending = thread.claims.get(key)
            mine = pending is None
            if pending is None:
                pending = thread.claims[key] = concurrent.futures.Future()
        if not mine:
            await _wait(pending)
            return False
        try:
            await work()
        except BaseException as exc:
            with self._claims_lock:
                thread.claims.pop(key, None)
            pending.set_exception(exc)
            raise
        pending.set_result(None)
        return True

    async def _make_holder(self, thread: _Thread, *, invocation: bool) -> bool:
        """Make sure the thread's first run exists; returns whether this call opened it,
        as the invocation's run when ``invocation`` (else closed at once: it only holds
        checkpoints, as for ``update_state`` on a new thread or a subgraph's own).

        A thread's root graph and its subgraphs store checkpoints concurrently, so the
        first of them makes the run and the others wait for it."""
        if thread.held:
            return False
        opened = False

        async def make() -> None:
            nonlocal opened
            if not await self._has_holder(thread):
                if invocation:
                    await self._open(thread, thread.scope.run_id)
                    opened = True
                else:
                    try:
                        run = await self.client.runs.open_run(
                            thread.session, FRAMEWORK, thread.thread_id[:256],
                            run_id=thread.scope.run_id)
                    except AlreadyExists:
                        pass  # another replica made it meanwhile
                    else:
                        await self._finish(run.run_id, "done")
            thread.held = True

        await self._once(thread, _HOLDER, make)
        return opened

    async def _ensure_holder(self, thread: _Thread) -> None:
        """Open the thread's first run, which holds its checkpoints, if it has none."""
        await self._make_holder(thread, invocation=False)

    # -- runs -------------------------------------------------------------------------------
    #
    # The invocation's run is leased to this saver's owner while it runs, and every run
    # write carries the lease's fencing token: a replica that lost the run (another one
    # resumed it) learns it at its next write (StaleLease) instead of overwriting.

    def _held(self, thread: _Thread, run_id: str, token: int) -> None:
        if thread.active == run_id and thread.token is not None and token < thread.token:
            return  # two calls of this saver claimed it at once: the later claim stands
        thread.active = run_id
        thread.token = token
        thread.renew_at = time.monotonic() + self._lease_ttl / 2

    async def _fenced(self, thread: _Thread, write: Callable[..., Awaitable[Any]]) -> None:
        """``write(**fence)`` under this saver's lease (see :meth:`_fence`). LangGraph
        stores a step's writes in the background, so they may arrive after this saver
        closed the run with the next checkpoint: a run it closed itself with that very
        token was not taken over, and its late writes are stored unfenced."""
        fence = self._fence(thread)
        try:
            await write(**fence)
        except RunClosed:
            if not fence or thread.ended != (fence["fencing_run_id"], fence["fencing_token"]):
                raise
            await write()

    @staticmethod
    def _fence(thread: _Thread) -> dict[str, Any]:
        """The lease this saver drives the thread's run with, for its checkpoint writes
        (kept on the thread's first run, fenced by the invocation's): a replica that lost
        the run is refused (StaleLease, RunClosed) instead of overwriting its successor's
        checkpoints. Nothing while no run is driven here (a resume's writes come before
        its claim; pruning and copying are housekeeping)."""
        if thread.active is None or thread.token is None:
            return {}
        return {"fencing_token": thread.token, "fencing_run_id": thread.active}

    async def _open(self, thread: _Thread, run_id: str | None) -> None:
        runs = self.client.runs
        for _ in range(3):
            try:
                run = await runs.open_run(thread.session, FRAMEWORK, thread.thread_id[:256],
                                          run_id=run_id, owner=self._owner,
                                          ttl=self._lease_ttl)
            except ActiveRunExists as exc:
                active = await runs.get(str(exc.run_id))
                if active.framework != FRAMEWORK:
                    raise Conflict(
                        f"thread {thread.thread_id!r} has an active {active.framework} run "
                        f"({active.run_id}); finish or cancel it before LangGraph continues",
                        run_id=active.run_id) from exc
                if active.status == "running" and active.lease_owner not in (
                        None, self._owner) and active.lease_expires_at is not None and (
                        active.lease_expires_at > now()):
                    raise LeaseHeld(
                        f"thread {thread.thread_id!r} is running on {active.lease_owner!r}",
                        run_id=active.run_id, owner=active.lease_owner,
                        expires_at=active.lease_expires_at) from exc
                # A new input supersedes what the thread was doing or waiting for.
                await self._finish(active.run_id, "cancelled" if active.status ==
                                   "awaiting_human" else "done")
                continue
            except AlreadyExists:
                run_id = None  # that id is taken (by another thread's run): make one up
                continue
            self._held(thread, run.run_id, run.fencing_token)
            return
        raise Conflict(f"could not open a run for thread {thread.thread_id!r}")

    async def _claim(self, thread: _Thread, run_id: str) -> None:
        """Take the run's lease (raises LeaseHeld while another replica holds it). A run
        this saver already drives, or one that has ended meanwhile, is left as it is.

        LangGraph stores a resume's writes and its next checkpoint concurrently, and both
        want the run: the first call claims it and any other waits for that claim, so the
        saver never holds two fencing tokens for one run."""
        if thread.active == run_id:
            return

        async def claim() -> None:
            try:
                lease = await self.client.runs.resume(run_id, self._owner,
                                                      ttl=self._lease_ttl)
            except RunClosed:
                return
            self._held(thread, run_id, lease.fencing_token)

        await self._once(thread, run_id, claim)

    def _release(self, thread: _Thread) -> tuple[str | None, int | None]:
        """Stop driving the thread's run (paused or closed); returns its id and token."""
        run_id, token = thread.active, thread.token
        thread.active, thread.token = None, None
        if run_id is not None:
            with self._claims_lock:
                thread.claims.pop(run_id, None)
        return run_id, token

    async def _keep(self, thread: _Thread) -> None:
        """Extend the lease of the run being driven once half of it has passed."""
        if thread.active is not None and thread.token and time.monotonic() >= thread.renew_at:
            await self.client.runs.heartbeat(thread.active, thread.token, ttl=self._lease_ttl)
            thread.renew_at = time.monotonic() + self._lease_ttl / 2

    async def _finish(self, run_id: str, status: str, token: int | None = None,
                      **extra: Any) -> None:
        # Closed already, or gone: another replica got there first.
        with contextlib.suppress(RunClosed, RunNotFound):
            await self.client.runs.close_run(run_id, status, fencing_token=token, **extra)

    async def _close(self, thread: _Thread, status: str, **extra: Any) -> None:
        run_id, token = self._release(thread)
        if run_id is not None and token is not None:
            thread.ended = (run_id, token)
        if run_id is not None:
            await self._finish(run_id, status, token, **extra)

    async def _active(self, thread: _Thread) -> Run | None:
        """The thread's active LangGraph run, read from the database.

        One query: a session has at most one active run, and it is its newest, so the
        newest LangGraph run is read and kept if active. (Two queries, one per status,
        could both miss a run that moves from waiting to running between them.)"""
        page = await self.client.runs.list_page(session=thread.session, framework=FRAMEWORK,
                                                page_size=1)
        if page.items and page.items[0].status in ACTIVE_RUN_STATUSES:
            return page.items[0]
        return None

    async def _begin(self, thread: _Thread, metadata: CheckpointMetadata,
                     parent_id: str | None) -> None:
        """Track the run a root checkpoint belongs to, before it is stored."""
        source = metadata.get("source")
        if source not in ("input", "loop"):
            if thread.active is None:
                await self._ensure_holder(thread)
            return
        if source == "loop" and thread.active is not None:
            await self._keep(thread)
            return
        if source == "input" and thread.active is not None:
            await self._close(thread, "done")
        # The thread's first invocation opens the run that holds its checkpoints.
        if not await self._make_holder(thread, invocation=True):
            if source == "loop":
                run = await self._active(thread)
                if run is not None:  # resumed, or continued after a stop: claim it
                    thread.resumed_from = parent_id
                    await self._claim(thread, run.run_id)
                    thread.first_step = None  # begun elsewhere: first step not known
                    return
            wanted = metadata.get("run_id")
            valid = isinstance(wanted, str) and SESSION_ID_RE.fullmatch(wanted)
            await self._open(thread, wanted if valid else None)
        step = metadata.get("step")
        thread.first_step = (step if source == "input" else step - 1) if isinstance(
            step, int) else None

    async def _after_writes(self, thread: _Thread, writes: Sequence[tuple[str, Any]],
                            config: RunnableConfig) -> None:
        channels = {channel for channel, _ in writes}
        if INTERRUPT in channels:
            interrupts = []
            for channel, value in writes:
                if channel != INTERRUPT:
                    continue
                for one in value if isinstance(value, (list, tuple)) else [value]:
                    interrupts.append({"id": getattr(one, "id", None),
                                       "value": _json_value(getattr(one, "value", one))})
            if thread.active is None:
                run = await self._active(thread)
                if run is None:
                    return
                await self._claim(thread, run.run_id)
            configurable = config.get("configurable") or {}
            awaiting = {"kind": "interrupt", "interrupts": interrupts,
                        "thread_id": thread.thread_id,
                        "checkpoint_id": configurable.get("checkpoint_id")}
            run_id, token = self._release(thread)  # paused: nobody drives it now
            assert run_id is not None
            await self.client.runs.mark_awaiting(run_id, awaiting, requested_by=FRAMEWORK,
                                                 fencing_token=token)
        elif RESUME in channels:
            # The resume's writes may be stored after the graph has gone on (they are
            # written in the background): once this saver has claimed the run for a
            # resume from this checkpoint, a late write must not claim it again.
            resumed = (config.get("configurable") or {}).get("checkpoint_id")
            if thread.resumed_from != resumed or resumed is None:
                thread.resumed_from = resumed
                run = await self._active(thread)
                if run is not None:
                    await self._claim(thread, run.run_id)
        elif ERROR in channels:
            if thread.active is None:
                run = await self._active(thread)
                if run is not None:
                    await self._claim(thread, run.run_id)
            await self._close(thread, "failed")

    # -- storing ----------------------------------------------------------------------------

    async def _aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                    metadata: CheckpointMetadata, new_versions: ChannelVersions
                    ) -> RunnableConfig:
        thread_id = _thread_id(config)
        namespace = _namespace(config)
        thread = await self._thread(thread_id, create=config)
        if thread is None:  # made just now, unless the config cannot make one
            raise InvalidInput("config['configurable']['thread_id'] is required",
                               field="thread_id")
        stored_metadata = get_serializable_checkpoint_metadata(config, metadata)
        parent_id = get_checkpoint_id(config)
        if namespace == "":
            await self._begin(thread, stored_metadata, parent_id)
        else:
            if not thread.held:  # let the root graph's first checkpoint open the run
                for event in self._arrivals.storing(thread_id, ""):
                    await _wait_event(event, self._writes_wait)
            await self._ensure_holder(thread)
        payload = await self._encode(thread, namespace, checkpoint, new_versions)
        try:
            metadata_json = json.loads(json.dumps(stored_metadata, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"checkpoint metadata is not JSON: {exc}",
                               field="metadata") from exc
        await self._fenced(thread, lambda **fence: self.client.checkpoints.put(
            thread.scope, checkpoint["id"], type_tag=TYPE_TAG, payload=payload,
            namespace=namespace, parent_checkpoint_id=parent_id, metadata=metadata_json,
            **fence))
        if namespace == "" and stored_metadata.get("source") == "loop" and _finished(
                checkpoint):
            step = stored_metadata.get("step")
            first = thread.first_step
            await self._close(thread, "done", step_count=step - first if isinstance(
                step, int) and first is not None and step >= first else None)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace,
                                 "checkpoint_id": checkpoint["id"]}}

    async def _encode(self, thread: _Thread, namespace: str, checkpoint: Checkpoint,
                      new_versions: ChannelVersions) -> bytes:
        values: dict[str, Any] = {}
        versions = checkpoint["channel_versions"]
        for channel, value in checkpoint["channel_values"].items():
            version = versions.get(channel)
            key = (namespace, channel, version)
            changed = channel in new_versions
            if channel in self._history_channels and is_history(value):
                reference = None if changed else thread.references.get(key)
                if reference is None:
                    reference = await thread.history.encode(thread.session, value)
                    thread.references[key] = reference
                values[channel] = ["h", reference]
                continue
            origin = None if changed else thread.origins.get(key)
            if origin is not None:
                values[channel] = ["d", origin]
                continue
            type_tag, data = self.serde.dumps_typed(value)
            values[channel] = ["v", type_tag, data]
            if len(data) >= _SHARED_BYTES and version is not None:
                thread.origins[key] = checkpoint["id"]
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        return _pack(self.serde.dumps_typed({"checkpoint": body, "values": values})[1])

    async def _aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                           task_id: str, task_path: str = "") -> None:
        thread_id = _thread_id(config)
        namespace = _namespace(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise InvalidInput("config['configurable']['checkpoint_id'] is required",
                               field="checkpoint_id")
        thread = await self._thread(thread_id)
        if thread is None:
            raise CheckpointNotFound(
                f"no checkpoint {checkpoint_id!r} in thread {thread_id!r}",
                checkpoint_id=checkpoint_id)
        pending = []
        for index, (channel, value) in enumerate(writes):
            type_tag, data = self.serde.dumps_typed(value)
            if len(data) >= _PACK_BYTES:
                packed = zlib.compress(data, 1)
                if len(packed) < len(data):
                    type_tag, data = type_tag + _ZLIB, packed
            pending.append(PendingWrite(task_id, WRITES_IDX_MAP.get(channel, index), channel,
                                        type_tag, data, task_path))
        await self._fenced(thread, lambda **fence: self.client.checkpoints.put_writes(
            thread.scope, checkpoint_id, pending, namespace=namespace, **fence))
        if namespace == "":
            await self._after_writes(thread, writes, config)

    # -- reading ----------------------------------------------------------------------------

    def _load(self, record: CheckpointRecord) -> dict[str, Any]:
        if record.type_tag != TYPE_TAG:
            raise InvalidInput(f"checkpoint {record.checkpoint_id} was not stored by "
                               f"OwnstateSaver (type {record.type_tag!r})", field="type_tag")
        envelope = self.serde.loads_typed(("msgpack", _unpack(record.payload)))
        if not isinstance(envelope, dict):
            raise InvalidInput("checkpoint payload is malformed", field="payload")
        return envelope

    def _value(self, type_tag: str, data: bytes) -> Any:
        if type_tag.endswith(_ZLIB):
            type_tag, data = type_tag[:-len(_ZLIB)], zlib.decompress(data)
        if type_tag == "pickle":
            raise InvalidInput("refusing to unpickle a checkpoint value", field="payload")
        return self.serde.loads_typed((type_tag, data))

    async def _tuple(self, thread: _Thread, record: CheckpointRecord) -> CheckpointTuple:
        envelope = self._load(record)
        checkpoint = dict(envelope["checkpoint"])
        versions = checkpoint.get("channel_versions", {})
        values: dict[str, Any] = {}
        for channel, entry in envelope["values"].items():
            kind = entry[0]
            if kind == "v":
                values[channel] = self._value(entry[1], entry[2])
                if len(entry[2]) >= _SHARED_BYTES and channel in versions:
                    thread.origins.setdefault(
                        (record.namespace, channel, versions[channel]), record.checkpoint_id)
            elif kind == "d":
                values[channel] = await self._shared(thread, record.namespace, entry[1],
                                                     channel)
            else:
                messages = await thread.history.decode(thread.session, entry[1])
                values[channel] = messages
                if channel in versions:
                    thread.references[(record.namespace, channel, versions[channel])] = entry[1]
        checkpoint["channel_values"] = values
        self._arrivals.arrived((thread.thread_id, record.namespace, record.checkpoint_id))
        config: RunnableConfig = {"configurable": {
            "thread_id": thread.thread_id, "checkpoint_ns": record.namespace,
            "checkpoint_id": record.checkpoint_id}}
        parent: RunnableConfig | None = None
        if record.parent_checkpoint_id is not None:
            parent = {"configurable": {
                "thread_id": thread.thread_id, "checkpoint_ns": record.namespace,
                "checkpoint_id": record.parent_checkpoint_id}}
        writes = [(w.task_id, w.channel, self._value(w.type_tag, w.payload))
                  for w in record.pending_writes]
        return CheckpointTuple(config, checkpoint,  # type: ignore[arg-type]
                               record.metadata, parent, writes)  # type: ignore[arg-type]

    async def _shared(self, thread: _Thread, namespace: str, origin_id: str,
                      channel: str) -> Any:
        origin = await self.client.checkpoints.get(thread.scope, origin_id, namespace=namespace)
        if origin is None:
            raise InvalidInput(f"checkpoint {origin_id} that holds channel {channel!r} is "
                               "gone", field="payload")
        entry = self._load(origin)["values"][channel]
        return self._value(entry[1], entry[2])

    async def _aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread = await self._thread(_thread_id(config))
        if thread is None:
            return None
        try:
            record = await self.client.checkpoints.get(
                thread.scope, get_checkpoint_id(config), namespace=_namespace(config))
        except RunNotFound:
            return None
        if record is None:
            return None
        return await self._tuple(thread, record)

    async def _threads_for(self, config: RunnableConfig | None) -> list[_Thread]:
        if config is not None and (config.get("configurable") or {}).get("thread_id"):
            thread = await self._thread(_thread_id(config))
            return [thread] if thread is not None else []
        store = await self._session_store(create=False)
        if store is None:
            return []
        found = []
        async for session in store.list_sessions(order_by="create_time desc"):
            thread_id = session.metadata.get(_THREAD_LABEL, session.session_id)
            thread = await self._thread(thread_id)
            if thread is not None:
                found.append(thread)
        return found

    async def _alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None,
                     before: RunnableConfig | None, limit: int | None
                     ) -> list[CheckpointTuple]:
        namespace = None
        if config is not None and "checkpoint_ns" in (config.get("configurable") or {}):
            namespace = _namespace(config)
        wanted_id = get_checkpoint_id(config) if config is not None else None
        before_id = get_checkpoint_id(before) if before is not None else None
        out: list[CheckpointTuple] = []
        for thread in await self._threads_for(config):
            try:
                records = await self.client.checkpoints.list(
                    thread.scope, namespace=namespace, metadata=filter or {})
            except RunNotFound:
                continue
            for record in records:
                if wanted_id is not None and record.checkpoint_id != wanted_id:
                    continue
                if before_id is not None and record.checkpoint_id >= before_id:
                    continue
                if limit is not None and len(out) >= limit:
                    return out
                out.append(await self._tuple(thread, record))
        return out

    # -- deleting and copying ---------------------------------------------------------------

    async def _adelete_thread(self, thread_id: str) -> None:
        thread = await self._thread(thread_id)
        self._drop(thread_id)
        if thread is None:
            return
        with contextlib.suppress(RunNotFound):
            await self.client.checkpoints.delete_run(thread.scope)

    async def _rewrite_then_delete(self, thread: _Thread, doomed: list[CheckpointRecord]
                                   ) -> None:
        """Delete ``doomed`` checkpoints, first copying any channel value a surviving
        checkpoint still reads from one of them into that survivor."""
        if not doomed:
            return
        by_key = {(r.namespace, r.checkpoint_id): r for r in doomed}
        for record in await self.client.checkpoints.list(thread.scope):
            if (record.namespace, record.checkpoint_id) in by_key:
                continue
            envelope = self._load(record)
            changed = False
            for channel, entry in envelope["values"].items():
                origin = by_key.get((record.namespace, entry[1])) if entry[0] == "d" else None
                if origin is not None:
                    envelope["values"][channel] = self._load(origin)["values"][channel]
                    changed = True
            if changed:
                await self.client.checkpoints.put(
                    thread.scope, record.checkpoint_id, type_tag=TYPE_TAG,
                    payload=_pack(self.serde.dumps_typed(envelope)[1]),
                    namespace=record.namespace,
                    parent_checkpoint_id=record.parent_checkpoint_id,
                    metadata=record.metadata)
        for namespace in {r.namespace for r in doomed}:
            await self.client.checkpoints.delete(
                thread.scope, [r.checkpoint_id for r in doomed if r.namespace == namespace],
                namespace=namespace)
        thread.origins.clear()

    async def _adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for thread in await self._threads_for(None):
            doomed = []
            for run_id in wanted:
                try:
                    doomed += await self.client.checkpoints.list(
                        thread.scope, metadata={"run_id": run_id})
                except RunNotFound:
                    break
            await self._rewrite_then_delete(thread, doomed)

    async def _aprune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"unknown prune strategy {strategy!r}", field="strategy")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self._adelete_thread(thread_id)
                continue
            thread = await self._thread(thread_id)
            if thread is None:
                continue
            try:
                records = await self.client.checkpoints.list(thread.scope)
            except RunNotFound:
                continue
            seen: set[str] = set()
            doomed = []
            for record in records:  # newest first
                if record.namespace in seen:
                    doomed.append(record)
                seen.add(record.namespace)
            await self._rewrite_then_delete(thread, doomed)

    async def _acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source = await self._thread(source_thread_id)
        if source is None:
            return
        if not await self._has_holder(source):
            return
        store = await self._session_store()
        if store is None:  # the source exists, so its store does
            raise StoreNotFound(f"no session store {self._store_name!r}",
                                store=self._store_name)
        try:
            session = await source.session.fork(session_id=_session_id(target_thread_id))
        except AlreadyExists as exc:
            raise AlreadyExists(f"thread {target_thread_id!r} already exists",
                                session_id=_session_id(target_thread_id)) from exc
        await session.update_metadata({_THREAD_LABEL: target_thread_id[:256]})
        target = self._remember(target_thread_id, session, store.name)
        await self._ensure_holder(target)
        await self.client.checkpoints.copy(source.scope, target.scope)

    # -- rebuilding from the session ------------------------------------------------------

    async def _ahistory(self, config: RunnableConfig) -> list[BaseMessage]:
        thread = await self._thread(_thread_id(config))
        if thread is None:
            return []
        thread.references.clear()
        return await thread.history.load_all(thread.session)

    async def _anews(self, config: RunnableConfig, channel: str) -> list[BaseMessage]:
        thread = await self._thread(_thread_id(config))
        if thread is None:
            return []
        try:
            record = await self.client.checkpoints.get(thread.scope, None, namespace="")
        except RunNotFound:
            record = None
        last_seq, calls = 0, set[str]()
        if record is not None:
            entry = self._load(record)["values"].get(channel)
            if entry is not None and entry[0] == "h":
                last_seq = max((s[2] for s in entry[1] if s[0] == "r"), default=0)
                for message in await thread.history.decode(thread.session, entry[1]):
                    calls.update(c["id"] for c in getattr(message, "tool_calls", None) or []
                                 if c.get("id"))
        items: list[Item] = []
        while True:
            page = await thread.session.list_items_page(
                order_by="create_time asc", after_seq=last_seq,
                page_size=self.client.limits.max_page_size)
            items += [i for i in page.items if i.format != MESSAGE_FORMAT]
            if page.next_page_token is None:
                break
            last_seq = page.items[-1].seq
        messages = to_messages(to_neutral(items), calls=calls)
        thread.history.adopt(messages)
        return messages

    def news(self, config: RunnableConfig, *, channel: str = "messages") -> list[BaseMessage]:
        """The messages other frameworks added to the thread's session since its latest
        checkpoint, as LangChain messages (converted from their formats), oldest first."""
        return self._bridge.call(self._anews(config, channel))

    async def anews(self, config: RunnableConfig, *, channel: str = "messages"
                    ) -> list[BaseMessage]:
        """Async :meth:`news`."""
        return await self._bridge.acall(self._anews(config, channel))

    def history(self, config: RunnableConfig) -> list[BaseMessage]:
        """The thread's conversation as LangChain messages, read from its session (every
        item that is a message, whichever framework appended it), oldest first."""
        return self._bridge.call(self._ahistory(config))

    async def ahistory(self, config: RunnableConfig) -> list[BaseMessage]:
        """Async :meth:`history`."""
        return await self._bridge.acall(self._ahistory(config))

    # -- LangGraph's interface --------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._bridge.call(self._aget_tuple(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._bridge.acall(self._aget_tuple(config))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        yield from self._bridge.call(self._alist(config, filter=filter, before=before,
                                                 limit=limit))

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None, before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await self._bridge.acall(self._alist(config, filter=filter, before=before,
                                                     limit=limit))
        for one in found:
            yield one

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        key = _key(config, checkpoint.get("id"))
        stored = self._arrivals.expect(key)
        try:
            return self._bridge.call(self._aput(config, checkpoint, metadata, new_versions))
        finally:
            self._arrivals.arrived(key, stored)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions
                   ) -> RunnableConfig:
        key = _key(config, checkpoint.get("id"))
        stored = self._arrivals.expect(key)
        try:
            return await self._bridge.acall(
                self._aput(config, checkpoint, metadata, new_versions))
        finally:
            self._arrivals.arrived(key, stored)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Store a task's writes against a checkpoint.

        LangGraph hands writes over in the background, possibly before the ``put`` of
        their checkpoint has begun (puts are queued one after another). Writes for a
        checkpoint this saver has not stored or read yet wait for it to be stored (up to
        ``writes_wait`` seconds) before :class:`~ownstate.errors.CheckpointNotFound`."""
        key = _key(config, get_checkpoint_id(config))
        stored = self._arrivals.pending(key)
        if stored is not None and not stored.wait(self._writes_wait):
            self._arrivals.give_up(key, stored)
        self._bridge.call(self._aput_writes(config, writes, task_id, task_path))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        """Async :meth:`put_writes`."""
        key = _key(config, get_checkpoint_id(config))
        stored = self._arrivals.pending(key)
        if stored is not None and not await _wait_event(stored, self._writes_wait):
            self._arrivals.give_up(key, stored)
        await self._bridge.acall(self._aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and pending writes. Its session (the
        conversation), its runs and its memory stay: the system of record keeps them, and
        :func:`~ownstate.adapters.langgraph.rebuild` can continue from them."""
        self._bridge.call(self._adelete_thread(str(thread_id)))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await self._bridge.acall(self._adelete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (in every thread of the store) written by these
        LangGraph runs (their ``run_id`` metadata)."""
        self._bridge.call(self._adelete_for_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        await self._bridge.acall(self._adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread: its session is forked (the conversation's items with it) and its
        checkpoints copied. Raises :class:`~ownstate.errors.AlreadyExists` when the target
        thread exists; a source without checkpoints copies nothing."""
        self._bridge.call(self._acopy_thread(str(source_thread_id), str(target_thread_id)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await self._bridge.acall(self._acopy_thread(str(source_thread_id),
                                                    str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest`` keeps the newest checkpoint of each namespace; ``delete`` deletes
        them all. Values kept once per version move into the checkpoints that keep them."""
        self._bridge.call(self._aprune([str(t) for t in thread_ids], strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
                     ) -> None:
        """Async :meth:`prune`."""
        await self._bridge.acall(self._aprune([str(t) for t in thread_ids], strategy))

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """Versions are strings that sort in order: a zero-padded counter and a random
        tail, so forks of one checkpoint never share a version. (Versions written by other
        savers, integers or LangGraph's longer strings, are continued from their counter.)"""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:012d}.{random.getrandbits(32):08x}"


def _checked_saver(graph: Any, config: RunnableConfig) -> OwnstateSaver:
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, OwnstateSaver):
        raise InvalidInput("the graph must be compiled with an OwnstateSaver", field="graph")
    _thread_id(config)
    return saver


def rebuild(graph: Any, config: RunnableConfig, *, channel: str = "messages",
            as_node: str | None = None) -> RunnableConfig:
    """Give a thread whose checkpoints were all dropped its conversation back.

    Reads the thread's session (see :meth:`OwnstateSaver.history`) and writes it into
    ``channel`` as a new first checkpoint (``graph.update_state(config, ..., as_node)``),
    referring to the stored items rather than copying them. The graph continues from there
    with the whole conversation; what is lost is only where a run was in flight (its
    pending tasks and interrupts). Returns the new checkpoint's config.

    Raises :class:`~ownstate.errors.InvalidInput` when the graph does not use an
    :class:`OwnstateSaver`, :class:`~ownstate.errors.Conflict` when the thread still has
    a checkpoint (nothing to rebuild).
    """
    saver = _checked_saver(graph, config)
    if saver.get_tuple(_latest(config)) is not None:
        raise Conflict(f"thread {_thread_id(config)!r} still has checkpoints")
    messages = saver.history(config)
    result: RunnableConfig = graph.update_state(_latest(config), {channel: messages},
                                                as_node=as_node)
    return result


async def arebuild(graph: Any, config: RunnableConfig, *, channel: str = "messages",
                   as_node: str | None = None) -> RunnableConfig:
    """Async :func:`rebuild`."""
    saver = _checked_saver(graph, config)
    if await saver.aget_tuple(_latest(config)) is not None:
        raise Conflict(f"thread {_thread_id(config)!r} still has checkpoints")
    messages = await saver.ahistory(config)
    result: RunnableConfig = await graph.aupdate_state(_latest(config), {channel: messages},
                                                       as_node=as_node)
    return result


def _latest(config: RunnableConfig) -> RunnableConfig:
    configurable = {k: v for k, v in (config.get("configurable") or {}).items()
                    if k != "checkpoint_id"}
    return {**config, "configurable": configurable}


def catch_up(graph: Any, config: RunnableConfig, *, channel: str = "messages",
             as_node: str | None = None) -> RunnableConfig | None:
    """Bring a thread up to date with what other frameworks added to its session.

    When a conversation continued in another framework (the OpenAI Agents SDK, ADK, ...)
    and comes back to LangGraph, its latest checkpoint ends where LangGraph left it. This
    adds the messages written since (:meth:`OwnstateSaver.news`) to ``channel`` with
    ``graph.update_state(config, ..., as_node=as_node)`` and returns the new checkpoint's
    config, or ``None`` when there was nothing new. A thread without checkpoints is
    rebuilt from its whole session (:func:`rebuild`).

    Raises :class:`~ownstate.errors.InvalidInput` when the graph does not use an
    :class:`OwnstateSaver`.
    """
    saver = _checked_saver(graph, config)
    if saver.get_tuple(_latest(config)) is None:
        return rebuild(graph, config, channel=channel, as_node=as_node)
    messages = saver.news(config, channel=channel)
    if not messages:
        return None
    result: RunnableConfig = graph.update_state(_latest(config), {channel: messages},
                                                as_node=as_node)
    return result


async def acatch_up(graph: Any, config: RunnableConfig, *, channel: str = "messages",
                    as_node: str | None = None) -> RunnableConfig | None:
    """Async :func:`catch_up`."""
    saver = _checked_saver(graph, config)
    if await saver.aget_tuple(_latest(config)) is None:
        return await arebuild(graph, config, channel=channel, as_node=as_node)
    messages = await saver.anews(config, channel=channel)
    if not messages:
        return None
    result: RunnableConfig = await graph.aupdate_state(_latest(config), {channel: messages},
                                                       as_node=as_node)
    return result
