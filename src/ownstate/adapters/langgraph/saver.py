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

It may touch the public API through the adapters' bridge and kernel, the modules of this
package, neutral and LangChain messages (``ownstate.formats``), the error tree and the
model, and LangGraph's checkpointer and serializers and ``langchain_core``; never a backend.
"""

from __future__ import annotations

import contextlib
import json
import random
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
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

from ...api import AsyncClient, AsyncSession, AsyncSessionStore, Client
from ...errors import (
    AlreadyExists,
    CheckpointNotFound,
    InvalidInput,
    RunNotFound,
    SeqConflict,
    StoreNotFound,
)
from ...formats.langchain import FORMAT as HISTORY_FORMAT
from ...formats.langchain import to_messages
from ...formats.neutral import FORMAT as MESSAGE_FORMAT
from ...formats.neutral import to_neutral
from ...model import (
    CheckpointRecord,
    CheckpointScope,
    Item,
    PendingWrite,
)
from .._bridge import Bridge, BridgedAdapter
from .._kernel import (
    async_twin,
    ensure_session,
    ensure_store,
    find_session,
    find_store,
    lease_owner,
    sync_twin,
)
from ._history import History, Staged, is_history
from ._runs import ThreadRuns
from ._threads import (
    _PACK_BYTES,
    _SHARED_BYTES,
    _THREAD_LABEL,
    _ZLIB,
    FRAMEWORK,
    TYPE_TAG,
    _Arrivals,
    _finished,
    _holder_id,
    _key,
    _namespace,
    _pack,
    _session_id,
    _Thread,
    _thread_id,
    _unpack,
    _wait_event,
)

__all__ = ["TYPE_TAG", "OwnstateSaver"]


class OwnstateSaver(BridgedAdapter, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps threads in ownstate (see the module docstring).

    ``OwnstateSaver(client)`` takes a connected :class:`~ownstate.Client` or
    :class:`~ownstate.AsyncClient`; ``OwnstateSaver.from_url(url)`` opens one (and
    :meth:`close` closes it). Works on every backend, sync and async.

    Options: ``store`` (the session store for threads), ``actor_id`` (the actor of new
    threads' sessions, unless ``config["configurable"][actor_key]`` names one),
    ``history_channels`` (channels kept as session items), ``owner`` (this replica's name
    for run leases), ``serde`` (LangGraph's serializer; pickle is never used),
    ``items_with_checkpoints`` (store a step's new messages in the transaction of its
    checkpoint, where the backend can: one write instead of two; ``False`` appends them
    first, in a call of their own, as on backends that cannot).
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
        items_with_checkpoints: bool = True,
        _bridge: Bridge | None = None,
    ) -> None:
        super().__init__(serde=serde or JsonPlusSerializer(pickle_fallback=False))
        self._bridge = _bridge or Bridge(client)
        self._store_name = store
        self._actor_id = actor_id
        self._actor_key = actor_key
        self._history_channels = frozenset(history_channels)
        self._store: AsyncSessionStore | None = None
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._max_threads = max_cached_threads
        self._runs = ThreadRuns(self._bridge.client, owner or lease_owner(FRAMEWORK), lease_ttl)
        # Checkpoints stored, read or being stored here, so their writes can wait for them.
        self._arrivals = _Arrivals()
        self._writes_wait = writes_wait
        self._puts_items = items_with_checkpoints and self.client.checkpoints.puts_items
        # an invocation's last checkpoint ends its run in the same write, where it can
        self._ends_runs = self.client.checkpoints.ends_runs

    @classmethod
    def from_url(cls, url: str | None = None, **options: Any) -> OwnstateSaver:
        """A saver over a client it opens on ``url`` (the default database when ``None``);
        :meth:`close` closes that client."""
        bridge = Bridge.from_url(url)
        return cls(bridge.given, _bridge=bridge, **options)

    @property
    def owner(self) -> str:
        """Who this saver's leases name: the owner its invocations claim runs for."""
        return self._runs.owner

    @property
    def client(self) -> AsyncClient:
        """The async client this saver works through."""
        return self._bridge.client

    # -- the threads ------------------------------------------------------------------------

    async def _session_store(self, *, create: bool = True) -> AsyncSessionStore | None:
        """The store of threads; made on first write (reads never create it)."""
        if self._store is None:
            stores = self.client.session_stores
            self._store = await (ensure_store(stores, self._store_name) if create
                                 else find_store(stores, self._store_name))
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
        if create is None:
            session = await find_session(store, session_id)
            if session is None:
                return None
        else:
            actor = (create.get("configurable") or {}).get(self._actor_key) or self._actor_id
            session = await ensure_session(store, session_id, actor_id=str(actor),
                                           metadata={_THREAD_LABEL: thread_id[:256]})
        return self._remember(thread_id, session, store.name)

    def _drop(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

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
        opening = None
        if namespace == "":
            opening = await self._runs.begin(thread, stored_metadata, parent_id)
        else:
            if not thread.held:  # let the root graph's first checkpoint open the run
                for event in self._arrivals.storing(thread_id, ""):
                    await _wait_event(event, self._writes_wait)
            await self._runs.ensure_holder(thread)
        references: dict[tuple[str, str, Any], list[Any]] = {}
        stage_at = thread.history.next_seq if self._puts_items else None
        payload, staged = await self._encode(thread, namespace, checkpoint, new_versions,
                                             stage_at=stage_at, references=references)
        try:
            metadata_json = json.loads(json.dumps(stored_metadata, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"checkpoint metadata is not JSON: {exc}",
                               field="metadata") from exc
        end: dict[str, Any] | None = None  # the graph has finished: its run ends
        if namespace == "" and stored_metadata.get("source") == "loop" and _finished(
                checkpoint):
            step = stored_metadata.get("step")
            first = thread.first_step
            end = {"step_count": step - first if isinstance(step, int) and first is not None
                   and step >= first else None}
        stored_config: RunnableConfig = {"configurable": {
            "thread_id": thread_id, "checkpoint_ns": namespace,
            "checkpoint_id": checkpoint["id"]}}
        if opening is not None:
            # the invocation's run, which begin() left to this checkpoint: opened with it
            # in one write (unless it is written with items or ends the run too)
            if staged is None and end is None and await self._runs.open_with(
                    thread, opening, lambda **run: self.client.checkpoints.put_opening_run(
                        thread.scope, checkpoint["id"], type_tag=TYPE_TAG, payload=payload,
                        namespace=namespace, parent_checkpoint_id=parent_id,
                        metadata=metadata_json, **run)):
                return stored_config
            if staged is not None or end is not None:
                await self._runs.open_apart(thread, opening)
        ended = False
        if staged is not None:
            stored = await self._put_with_items(thread, checkpoint["id"], staged, payload,
                                                namespace, parent_id, metadata_json, end)
            if stored is None:
                # Another writer appended meanwhile: the step's messages go after theirs,
                # appended first, and the checkpoint refers to them where they went.
                thread.history.next_seq = None
                payload, _ = await self._encode(thread, namespace, checkpoint, new_versions)
                staged = None
            else:
                thread.references.update(references)
                ended = stored
        if staged is None:
            ended = await self._put_fenced(thread, lambda **fence: self.client.checkpoints.put(
                thread.scope, checkpoint["id"], type_tag=TYPE_TAG, payload=payload,
                namespace=namespace, parent_checkpoint_id=parent_id, metadata=metadata_json,
                **fence), end)
        if end is not None and not ended:
            await self._runs.close(thread, "done", **end)
        return stored_config

    async def _put_fenced(self, thread: _Thread, write: Callable[..., Awaitable[Any]],
                          end: dict[str, Any] | None) -> bool:
        """``write(**fence)`` under this saver's lease; with ``end``, where the backend
        can, the write also ends the run (``done``). Returns whether it ended it."""
        if end is not None and self._ends_runs and await self._runs.ending(
                thread, write, "done", **end):
            return True
        await self._runs.fenced(thread, write)
        return False

    async def _put_with_items(self, thread: _Thread, checkpoint_id: str, staged: list[Staged],
                              payload: bytes, namespace: str, parent_id: str | None,
                              metadata: dict[str, Any], end: dict[str, Any] | None
                              ) -> bool | None:
        """Store the checkpoint with its staged messages in one write (ending the run with
        ``end``, as :meth:`_put_fenced`; returns whether it did); None (nothing stored)
        when the session's next seq is no longer the one they were staged at."""
        items = [item for step in staged for item in step.items]
        try:
            ended = await self._put_fenced(thread, lambda **fence: self.client.checkpoints.
                                      put_with_items(
                thread.scope, checkpoint_id, items, first_seq=staged[0].first_seq,
                format=HISTORY_FORMAT, type_tag=TYPE_TAG, payload=payload,
                namespace=namespace, parent_checkpoint_id=parent_id, metadata=metadata,
                **fence), end)
        except SeqConflict:
            return None
        for step in staged:
            step.commit()
        return ended

    async def _encode(self, thread: _Thread, namespace: str, checkpoint: Checkpoint,
                      new_versions: ChannelVersions, *, stage_at: int | None = None,
                      references: dict[tuple[str, str, Any], list[Any]] | None = None,
                      ) -> tuple[bytes, list[Staged] | None]:
        """The checkpoint's payload. History channels' new messages are appended to the
        session now, or with ``stage_at`` (the session's next seq) staged to be appended
        from that seq on by the put: then they are returned, and the references made for
        them go into ``references``, not the thread's, until the put has stored them."""
        values: dict[str, Any] = {}
        versions = checkpoint["channel_versions"]
        staged: list[Staged] = []
        for channel, value in checkpoint["channel_values"].items():
            version = versions.get(channel)
            key = (namespace, channel, version)
            changed = channel in new_versions
            if channel in self._history_channels and is_history(value):
                reference = None if changed else thread.references.get(key)
                if reference is None and stage_at is not None and references is not None:
                    first = staged[-1].first_seq + len(staged[-1].items) if staged else stage_at
                    reference, step = thread.history.stage(value, first)
                    if step.items:
                        staged.append(step)
                        references[key] = reference
                    else:  # nothing new to store: it holds already
                        step.commit()
                        thread.references[key] = reference
                elif reference is None:
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
        payload = _pack(self.serde.dumps_typed({"checkpoint": body, "values": values})[1])
        return payload, staged or None

    def _pending(self, writes: Sequence[tuple[str, Any]], task_id: str,
                 task_path: str = "") -> list[PendingWrite]:
        """A task's writes as stored: serialized, compressed when that makes them smaller."""
        pending = []
        for index, (channel, value) in enumerate(writes):
            type_tag, data = self.serde.dumps_typed(value)
            if len(data) >= _PACK_BYTES:
                packed = zlib.compress(data, 1)
                if len(packed) < len(data):
                    type_tag, data = type_tag + _ZLIB, packed
            pending.append(PendingWrite(task_id, WRITES_IDX_MAP.get(channel, index), channel,
                                        type_tag, data, task_path))
        return pending

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
        pending = self._pending(writes, task_id, task_path)
        await self._runs.fenced(thread, lambda **fence: self.client.checkpoints.put_writes(
            thread.scope, checkpoint_id, pending, namespace=namespace, **fence))
        if namespace == "":
            await self._runs.after_writes(thread, writes, config)

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
        """Delete the thread's checkpoints and pending writes. Its session (the
        conversation), its runs and its memory stay: the system of record keeps them, and
        :func:`~ownstate.adapters.langgraph.rebuild` can continue from them."""
        thread_id = str(thread_id)
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
        """Delete every checkpoint (in every thread of the store) written by these
        LangGraph runs (their ``run_id`` metadata)."""
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

    async def _aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
                      ) -> None:
        """``keep_latest`` keeps the newest checkpoint of each namespace; ``delete`` deletes
        them all. Values kept once per version move into the checkpoints that keep them."""
        thread_ids = [str(t) for t in thread_ids]
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
        """Copy a thread: its session is forked (the conversation's items with it) and its
        checkpoints copied. Raises :class:`~ownstate.errors.AlreadyExists` when the target
        thread exists; a source without checkpoints copies nothing."""
        source_thread_id, target_thread_id = str(source_thread_id), str(target_thread_id)
        source = await self._thread(source_thread_id)
        if source is None:
            return
        if not await self._runs.has_holder(source):
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
        await self._runs.ensure_holder(target)
        await self.client.checkpoints.copy(source.scope, target.scope)

    # -- rebuilding from the session ------------------------------------------------------

    async def _ahistory(self, config: RunnableConfig) -> list[BaseMessage]:
        """The thread's conversation as LangChain messages, read from its session (every
        item that is a message, whichever framework appended it), oldest first."""
        thread = await self._thread(_thread_id(config))
        if thread is None:
            return []
        thread.references.clear()
        return await thread.history.load_all(thread.session)

    async def _anews(self, config: RunnableConfig, *, channel: str = "messages"
                     ) -> list[BaseMessage]:
        """The messages other frameworks added to the thread's session since its latest
        checkpoint, as LangChain messages (converted from their formats), oldest first."""
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

    # -- LangGraph's interface, and the public twins ----------------------------------------

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

    @contextlib.contextmanager
    def _storing(self, config: RunnableConfig, checkpoint: Checkpoint) -> Iterator[None]:
        """While a put stores its checkpoint: writes for it wait (see :meth:`put_writes`)."""
        key = _key(config, checkpoint.get("id"))
        stored = self._arrivals.expect(key)
        try:
            yield
        finally:
            self._arrivals.arrived(key, stored)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        with self._storing(config, checkpoint):
            return self._bridge.call(self._aput(config, checkpoint, metadata, new_versions))

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions
                   ) -> RunnableConfig:
        with self._storing(config, checkpoint):
            return await self._bridge.acall(
                self._aput(config, checkpoint, metadata, new_versions))

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

    get_tuple = sync_twin(_aget_tuple)
    aget_tuple = async_twin(_aget_tuple)
    news = sync_twin(_anews)
    anews = async_twin(_anews)
    history = sync_twin(_ahistory)
    ahistory = async_twin(_ahistory)
    delete_thread = sync_twin(_adelete_thread)
    adelete_thread = async_twin(_adelete_thread)
    delete_for_runs = sync_twin(_adelete_for_runs)
    adelete_for_runs = async_twin(_adelete_for_runs)
    copy_thread = sync_twin(_acopy_thread)
    acopy_thread = async_twin(_acopy_thread)
    prune = sync_twin(_aprune)
    aprune = async_twin(_aprune)

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

