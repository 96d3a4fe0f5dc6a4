"""``langgraph``: the threads of LangGraph's PostgresSaver or SqliteSaver into ownstate.

``--from`` is a PostgreSQL URL (the tables of ``PostgresSaver``/``AsyncPostgresSaver``) or
a SQLite file (``sqlite:///path`` or a path; the tables of ``SqliteSaver``). The source
is opened read-only (a read-only transaction mode, a ``mode=ro`` SQLite URI) and read
through LangGraph's own savers (``AsyncPostgresSaver``/``AsyncSqliteSaver``), which decode
its serialization; threads are listed with one query on its ``checkpoints`` table.

Each thread is one unit, written through
:class:`~ownstate.adapters.langgraph.OwnstateSaver` exactly as a graph compiled with it
would have written it: the thread's session in the store ``langgraph`` (its messages as
items in the neutral message format, referred to by the checkpoints), its checkpoints in
the thread's run, pending writes with them. A thread paused at an ``interrupt()`` comes
out as a run ``awaiting_human`` holding the interrupt values, which a graph compiled with
``OwnstateSaver`` resumes with ``Command(resume=...)``. Subgraph namespaces are kept. The
string values of the thread's checkpoint metadata (what the application passed in
``config["metadata"]`` or ``configurable``, e.g. ``user_id``) become labels of the
session; ``user_id`` is its actor, as with the saver.

``--checkpoints``: ``latest`` (default) the newest checkpoint of each namespace, with its
pending writes; ``all`` every checkpoint, replayed in order (each invocation becomes its
run, as it would have); ``none`` the session and its messages only.

A thread already stored is recognised by its checkpoint ids: complete, it is skipped; cut
short by a killed import, what was stored of it is deleted and it is written again; gone
on in ownstate since (checkpoints the source does not have), it is left as it is.

It may touch the public API, the importer loop, :mod:`._sql`, the error tree and the limits,
and, imported when used, the public bulk writes (``ownstate.api.bulk``), the LangGraph
adapter's saver and its modules, LangChain messages (``ownstate.formats.langchain``), the
model and LangGraph's own savers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...api import AsyncClient
from ...errors import (
    AlreadyExists,
    BackendUnavailable,
    Conflict,
    OwnstateError,
    RunNotFound,
    SessionNotFound,
)
from ...limits import LABEL_KEY_RE, Limits
from ..base import DecodeError, ImportOption, Unit, Written, canonical_digest
from ._sql import DatabaseImporter

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

    from ...adapters.langgraph import OwnstateSaver

__all__ = ["IMPORTER", "LangGraphImporter"]

# Checkpoint metadata LangGraph itself writes: never a label.
_OWN_METADATA = frozenset({"source", "step", "parents", "writes", "run_id", "thread_id",
                           "checkpoint_ns", "checkpoint_id", "checkpoint_map", "thread_ts"})
_INTERRUPT = "__interrupt__"
_LIMITS = Limits()


@dataclass(slots=True)
class _Thread:
    thread_id: str
    tuples: list[CheckpointTuple]  # in the order they are written
    messages: list[BaseMessage]  # the messages channel of the newest root checkpoint
    labels: dict[str, str] = field(default_factory=dict)
    actor: str | None = None

    @property
    def paused(self) -> bool:
        latest = self.root_latest
        return latest is not None and any(w[1] == _INTERRUPT for w in latest.pending_writes
                                          or ())

    @property
    def root_latest(self) -> CheckpointTuple | None:
        roots = [t for t in self.tuples if _ns(t) == ""]
        return max(roots, key=_id) if roots else None


def _ns(t: CheckpointTuple) -> str:
    return str(t.config["configurable"].get("checkpoint_ns") or "")


def _id(t: CheckpointTuple) -> str:
    return str(t.config["configurable"]["checkpoint_id"])


def _hex(typed: tuple[str, bytes]) -> str:
    return typed[0] + ":" + hashlib.sha256(typed[1]).hexdigest()


def _labels(metadata: dict[str, Any], room: int, max_chars: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in sorted(metadata.items()):
        if key in _OWN_METADATA or key.startswith(("langgraph_", "__")):
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            continue
        text = str(value)
        if LABEL_KEY_RE.fullmatch(key) and 0 < len(text) <= max_chars and len(labels) < room:
            labels[key] = text
    return labels


class _OldFormat(Exception):
    """A checkpoint of LangGraph's format before version 4: read by ``aget_tuple``."""


class LangGraphImporter(DatabaseImporter[_Thread]):
    """LangGraph threads (PostgresSaver or SqliteSaver tables) into OwnstateSaver's store."""

    name = "langgraph"
    default_store = "langgraph"
    concurrency = 16  # waits on two databases per thread: more in flight hides them
    batch = 100  # threads per batch, into a backend that stores sessions in bulk
    options = (ImportOption("checkpoints", "Which checkpoints of each thread to import.",
                            "latest", ("latest", "all", "none")),)
    count_sql = "SELECT count(DISTINCT thread_id) AS n FROM checkpoints"

    async def open(self) -> None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self._serde = JsonPlusSerializer(pickle_fallback=False)
        await super().open()
        if self._db.pool is not None:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            self._reader: BaseCheckpointSaver[Any] = AsyncPostgresSaver(self._db.pool)
        else:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            reader = AsyncSqliteSaver(self._db.sqlite)
            reader.is_setup = True  # its setup() writes (WAL mode, CREATE TABLE): not here
            self._reader = reader

    async def units(self) -> AsyncIterator[Unit]:
        rows = await self._db.query("SELECT thread_id, checkpoint_ns FROM checkpoints "
                                 "GROUP BY thread_id, checkpoint_ns "
                                 "ORDER BY thread_id, checkpoint_ns")
        current: str | None = None
        namespaces: list[str] = []
        for thread_id, namespace in [*((r["thread_id"], r["checkpoint_ns"]) for r in rows),
                                     (None, None)]:
            if thread_id != current and current is not None:
                yield Unit(current, {"thread_id": current, "namespaces": tuple(namespaces)})
                namespaces = []
            current = thread_id
            namespaces.append(namespace)

    # decoding ---------------------------------------------------------------------------

    async def decode(self, unit: Unit) -> _Thread:
        mode = self.settings["checkpoints"]
        thread_id = unit.ids["thread_id"]
        tuples: list[CheckpointTuple] = []
        for namespace in unit.ids["namespaces"]:
            if mode != "latest" and not (mode == "none" and namespace == ""):
                if mode == "all":
                    tuples += await self._read_all(thread_id, namespace)
                continue
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace}}
            try:
                latest = await self._reader.aget_tuple(config)  # type: ignore[arg-type]
            except Exception as exc:  # the framework's decoder refused the row
                raise DecodeError(f"LangGraph cannot decode its newest checkpoint: {exc!r}",
                                  checkpoint_ns=namespace) from exc
            if latest is not None:
                tuples.append(latest)
        return self._thread(thread_id, tuples)

    def _thread(self, thread_id: str, tuples: list[CheckpointTuple]) -> _Thread:
        mode = self.settings["checkpoints"]
        if mode == "all":
            tuples.sort(key=_id)
        else:  # the root first: its first checkpoint opens the thread's run
            tuples.sort(key=lambda t: (_ns(t) != "", _id(t)))
        thread = _Thread(thread_id, [], [])
        latest = next((t for t in reversed(tuples) if _ns(t) == ""), None)
        if latest is not None:
            messages = latest.checkpoint["channel_values"].get("messages")
            from ...adapters.langgraph._history import is_history

            thread.messages = list(messages) if is_history(messages) else []
            metadata = dict(latest.metadata or {})
            thread.labels = _labels(metadata, _LIMITS.max_metadata_labels - 1,
                                    _LIMITS.max_label_value_chars)
            actor = metadata.get("user_id")
            thread.actor = str(actor) if actor not in (None, "") else None
        thread.tuples = [] if mode == "none" else tuples
        return thread

    async def decode_many(self, units: list[Unit]) -> list[_Thread | DecodeError]:
        """Each thread's newest checkpoint of every namespace, read for the whole batch
        with one query (LangGraph's own, over many threads) and decoded by LangGraph's
        saver, row by row: a row it cannot decode fails its thread only."""
        query = self._latest_query()
        if query is None:
            return await super().decode_many(units)
        keys = [(u.ids["thread_id"], ns) for u in units for ns in u.ids["namespaces"]]
        async with self._db.pool.connection() as conn:
            cur = await conn.execute(query, ([k[0] for k in keys], [k[1] for k in keys]),
                                     binary=True)
            rows = await cur.fetchall()
        found: dict[str, list[Any]] = {}
        for row in rows:
            found.setdefault(row["thread_id"], []).append(row)
        out: list[_Thread | DecodeError] = []
        for unit in units:
            thread_id = unit.ids["thread_id"]
            tuples: list[CheckpointTuple] = []
            try:
                for row in found.get(thread_id, []):
                    if row["checkpoint"].get("v", 0) < 4 and row["parent_checkpoint_id"]:
                        raise _OldFormat  # its pending sends need LangGraph's migration
                    try:
                        tuples.append(self._tuple_of(row))
                    except Exception as exc:  # the framework's decoder refused the row
                        raise DecodeError(f"LangGraph cannot decode its newest checkpoint: "
                                          f"{exc!r}", checkpoint_ns=row["checkpoint_ns"]
                                          ) from exc
                out.append(self._thread(thread_id, tuples))
            except _OldFormat:
                try:
                    out.append(await self.decode(unit))
                except DecodeError as exc:
                    out.append(exc)
            except DecodeError as exc:
                out.append(exc)
        return out

    def _latest_query(self) -> str | None:
        """LangGraph's query of a checkpoint with its blobs and writes, for the newest
        checkpoint of each (thread, namespace) given as two arrays; ``None`` unless the
        source is PostgreSQL (and LangGraph's query has the shape this expects)."""
        if self._db.pool is None or self.settings["checkpoints"] != "latest":
            return None
        select = str(getattr(self._reader, "SELECT_SQL", "")).rstrip()
        if not select.endswith("from checkpoints"):
            return None
        return (select.removesuffix("checkpoints")
                + "unnest(%s::text[], %s::text[]) AS k (wanted_thread, wanted_ns) "
                "CROSS JOIN LATERAL (SELECT * FROM checkpoints c WHERE c.thread_id = "
                "k.wanted_thread AND c.checkpoint_ns = k.wanted_ns "
                "ORDER BY c.checkpoint_id DESC LIMIT 1) AS checkpoints")

    def _tuple_of(self, row: dict[str, Any]) -> CheckpointTuple:
        """A row of LangGraph's query decoded as its ``aget_tuple`` decodes it."""
        from langgraph.checkpoint.base import CheckpointTuple

        reader: Any = self._reader
        thread_id, namespace = row["thread_id"], row["checkpoint_ns"]
        parent = row["parent_checkpoint_id"]
        checkpoint: Any = {**row["checkpoint"], "channel_values": {
            **(row["checkpoint"].get("channel_values") or {}),
            **reader._load_blobs(row["channel_values"])}}
        return CheckpointTuple(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace,
                              "checkpoint_id": row["checkpoint_id"]}},
            checkpoint, row["metadata"],
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace,
                              "checkpoint_id": parent}} if parent else None,
            reader._load_writes(row["pending_writes"]))

    async def _read_all(self, thread_id: str, namespace: str) -> list[CheckpointTuple]:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace}}
        try:
            return [t async for t in self._reader.alist(config)]  # type: ignore[arg-type]
        except Exception as exc:
            raise DecodeError(f"LangGraph cannot decode a checkpoint: {exc!r}",
                              checkpoint_ns=namespace) from exc

    # writing ----------------------------------------------------------------------------

    def _saver(self, client: AsyncClient) -> OwnstateSaver:
        from ...adapters.langgraph import OwnstateSaver

        return self.adapter(client, lambda c: OwnstateSaver(
            c, store=self.store, owner="ownstate-import", max_cached_threads=64))

    async def write(self, client: AsyncClient, unit: Unit, decoded: _Thread, *,
                    dry_run: bool) -> Written:
        from ...adapters.langgraph._threads import _THREAD_LABEL, _session_id

        written = Written()
        counts = self._counts(decoded)
        labels = {**decoded.labels, _THREAD_LABEL: decoded.thread_id[:256]}
        session_id = _session_id(decoded.thread_id)
        actor = decoded.actor or "langgraph"
        if dry_run:
            if await self._stored(client, decoded) == "complete":
                written.already = True
            else:
                written.counts.update(counts)
            return written
        store = await self._saver(client)._session_store()
        assert store is not None
        try:
            # Most threads of an import are new: making the session is the first check.
            session = await store.add(actor_id=actor, session_id=session_id, metadata=labels)
        except AlreadyExists:
            if await self._stored(client, decoded) == "complete":
                written.already = True
                return written
            # Cut short by an earlier run: what it stored goes, the thread is written anew.
            with contextlib.suppress(SessionNotFound):
                await (await store.get(session_id)).delete(force=True)
            session = await store.add(actor_id=actor, session_id=session_id, metadata=labels)
        written.counts.update(counts)
        if decoded.tuples:
            # The saver starts from the session just made, as if it had made it itself.
            saver = self._saver(client)
            saver._drop(decoded.thread_id)
            saver._remember(decoded.thread_id, session, store.name)
            await self._replay(client, decoded)
        elif decoded.messages:
            from ...formats.langchain import FORMAT, message_to_item

            items = []
            for message in decoded.messages:
                try:
                    items.append(message_to_item(message))
                except OwnstateError:
                    continue
            await session.append_items(items, format=FORMAT)
        return written

    def batch_size(self, client: AsyncClient, *, dry_run: bool) -> int:
        from ...api.bulk import supports_bulk

        if dry_run or self.settings["checkpoints"] != "latest" or not supports_bulk(client):
            return 1
        return self.batch

    async def write_many(self, client: AsyncClient, units: list[Unit],
                         decoded: list[_Thread], *, dry_run: bool
                         ) -> list[Written | OwnstateError]:
        """New threads of the usual shape (see :mod:`ownstate.adapters.langgraph._bulk`)
        in one transaction; any other thread, and one already stored, through the saver
        as :meth:`write` does."""
        from ...adapters.langgraph._bulk import prepare
        from ...adapters.langgraph._threads import _session_id
        from ...api.bulk import add_sessions

        saver = self._saver(client)
        store = await saver._session_store()
        assert store is not None
        out: list[Written | OwnstateError | None] = [None] * len(units)
        bundles = []
        placed = []
        for n, thread in enumerate(decoded):
            if len(thread.tuples) != 1:
                continue
            try:
                bundle = await prepare(saver, store.name, thread.thread_id,
                                       _session_id(thread.thread_id), thread.actor,
                                       thread.labels, thread.tuples[0])
            except OwnstateError as exc:
                out[n] = exc
                continue
            if bundle is not None:
                bundles.append(bundle)
                placed.append(n)
        stored = await add_sessions(store, bundles) if bundles else []
        for n, made in zip(placed, stored, strict=True):
            if made is True:
                out[n] = Written(self._counts(decoded[n]))
            elif made is not False:
                out[n] = made
        for n, thread in enumerate(decoded):
            if out[n] is None:  # not of the usual shape, or stored already: one at a time
                try:
                    out[n] = await self.write(client, units[n], thread, dry_run=dry_run)
                except BackendUnavailable:
                    raise
                except OwnstateError as exc:
                    out[n] = exc
        return [o for o in out if o is not None]

    @staticmethod
    def _counts(thread: _Thread) -> Counter[str]:
        return Counter(sessions=1, items=len(thread.messages), checkpoints=len(thread.tuples),
                       writes=sum(len(t.pending_writes or ()) for t in thread.tuples))

    async def _replay(self, client: AsyncClient, thread: _Thread) -> None:
        saver = self._saver(client)
        mode = self.settings["checkpoints"]
        previous: dict[tuple[str, str], dict[str, Any]] = {}
        for t in thread.tuples:
            namespace = _ns(t)
            parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config \
                else None
            versions = t.checkpoint["channel_versions"]
            before = previous.get((namespace, parent or ""), {}) if mode == "all" else {}
            new_versions = {c: v for c, v in versions.items() if before.get(c) != v}
            configurable: dict[str, Any] = {"thread_id": thread.thread_id,
                                            "checkpoint_ns": namespace}
            if parent is not None:
                configurable["checkpoint_id"] = parent
            if thread.actor is not None:
                configurable["user_id"] = thread.actor
            await saver.aput({"configurable": configurable}, t.checkpoint, t.metadata,
                             new_versions)
            previous[(namespace, _id(t))] = dict(versions)
            if mode == "all" or namespace != "":
                await self._writes(saver, thread, t)
        if mode != "all":
            for t in thread.tuples:
                if _ns(t) == "":
                    await self._writes(saver, thread, t)

    async def _writes(self, saver: OwnstateSaver, thread: _Thread, t: CheckpointTuple) -> None:
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in t.pending_writes or ():
            by_task.setdefault(task_id, []).append((channel, value))
        config = {"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": _ns(t),
                                   "checkpoint_id": _id(t)}}
        # The interrupt last: it marks the run awaiting once everything else is stored.
        for task_id, writes in sorted(by_task.items(), key=lambda kv: any(
                c == _INTERRUPT for c, _ in kv[1])):
            await saver.aput_writes(config, writes, task_id)  # type: ignore[arg-type]

    async def _stored(self, client: AsyncClient, thread: _Thread) -> str:
        """``absent``, ``complete``, or ``partial`` (an import cut short) for a thread;
        raises :class:`Conflict` for one that has gone on in ownstate since."""
        from ...adapters.langgraph._threads import _holder_id, _session_id

        store = await self._saver(client)._session_store(create=False)
        if store is None:
            return "absent"
        session_id = _session_id(thread.thread_id)
        try:
            session = await store.get(session_id)
        except SessionNotFound:
            return "absent"
        if not thread.tuples:
            page = await session.list_items_page(page_size=1)
            return "complete" if page.items or not thread.messages else "partial"
        from ...model import CheckpointScope

        scope = CheckpointScope(session.actor_id, store.name, session_id,
                                _holder_id(store.name, session_id))
        try:
            records = await client.checkpoints.list(scope)
        except RunNotFound:
            return "partial"
        stored = {(r.namespace, r.checkpoint_id): len(r.pending_writes) for r in records}
        wanted = {(_ns(t), _id(t)): len(t.pending_writes or ()) for t in thread.tuples}
        if set(stored) <= set(wanted):
            if stored != wanted:
                return "partial"
            if thread.paused:
                runs = await client.runs.list_page(session=session, page_size=1)
                if not runs.items or runs.items[0].status != "awaiting_human":
                    return "partial"
            return "complete"
        latest = thread.root_latest
        if latest is not None and ("", _id(latest)) in stored:
            return "complete"  # continued in ownstate since: the source is in it
        raise Conflict(f"thread {thread.thread_id!r} is stored with checkpoints the source "
                       "does not have; it was left as it is")

    # verifying --------------------------------------------------------------------------

    @staticmethod
    def _items(messages: list[BaseMessage]) -> list[Any]:
        from ...formats.langchain import message_to_item

        out: list[Any] = []
        for m in messages:
            try:
                out.append(message_to_item(m))
            except OwnstateError:
                out.append(repr(m))
        return out

    def _plain(self, value: Any) -> Any:
        from ...adapters.langgraph._history import is_history

        if is_history(value) and value:
            return self._items(value)
        tag, data = self._serde.dumps_typed(value)
        return [tag, base64.b64encode(data).decode()]

    def _view(self, t: CheckpointTuple | None) -> Any:
        if t is None:
            return None
        values = t.checkpoint["channel_values"]
        return [_ns(t), _id(t), dict(t.metadata or {}),
                {c: self._plain(v) for c, v in sorted(values.items())},
                sorted([w[0], w[1], self._plain(w[2])] for w in t.pending_writes or ())]

    def _quick_view(self, t: CheckpointTuple | None) -> Any:
        """:meth:`_view` with every value as LangGraph's serializer writes it: the same
        values give the same bytes, so equal views need no conversion to compare."""
        if t is None:
            return None
        dumps = self._serde.dumps_typed
        values = t.checkpoint["channel_values"]
        return [_ns(t), _id(t), dict(t.metadata or {}),
                {c: _hex(dumps(v)) for c, v in sorted(values.items())},
                sorted([w[0], w[1], _hex(dumps(w[2]))] for w in t.pending_writes or ())]

    async def digest_many(self, client: AsyncClient, units: list[Unit], decoded: list[_Thread]
                          ) -> list[tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]
                                    | OwnstateError]:
        """The batch read back at once (:func:`ownstate.api.bulk.read_sessions`: its
        sessions, items, newest runs and checkpoints), decoded as the saver's
        ``aget_tuple`` decodes them and compared as LangGraph serializes both sides; a
        thread whose bytes differ, or that could not be read so, is compared again by
        :meth:`digest` (read back through the saver, message by message, as items),
        which decides."""
        quick = await self._quick_many(client, decoded)

        async def one(unit: Unit, thread: _Thread, found: _Digests | None
                      ) -> _Digests | OwnstateError:
            if found is not None and found[0][0] == found[1][0] and found[0][1] == found[1][1]:
                return found
            try:
                return await self.digest(client, unit, thread)
            except BackendUnavailable:
                raise
            except OwnstateError as exc:
                return exc

        return list(await asyncio.gather(*(one(u, d, q) for u, d, q in
                                           zip(units, decoded, quick, strict=True))))

    async def _quick_many(self, client: AsyncClient, decoded: list[_Thread]
                          ) -> list[_Digests | None]:
        """Per thread, both sides' quick digests and counts from one bulk read of the
        batch; ``None`` for every thread when the batch cannot be read so."""
        from ...adapters.langgraph._bulk import read_back
        from ...adapters.langgraph._threads import _holder_id, _session_id
        from ...api.bulk import CheckpointKey, read_sessions

        saver = self._saver(client)
        store = await saver._session_store(create=False)
        if store is None:
            return [None] * len(decoded)
        wanted = []
        for thread in decoded:
            session_id = _session_id(thread.thread_id)
            holder = _holder_id(store.name, session_id)
            wanted.append((session_id, [CheckpointKey(holder, _ns(t), _id(t))
                                        for t in thread.tuples]))
        try:
            stored = await read_sessions(store, wanted)
        except BackendUnavailable:
            raise
        except OwnstateError:
            return [None] * len(decoded)
        out: list[_Digests | None] = []
        for thread, found in zip(decoded, stored, strict=True):
            if found is None:
                out.append(self._digests(thread, self._quick_view, None))
                continue
            try:
                got = await read_back(saver, store.name, thread.thread_id, found)
            except Exception:  # LangGraph's decoder refused a value: the thread's own read decides
                out.append(None)
                continue
            run = found.newest_run
            out.append(self._digests(thread, self._quick_view, _Stored(
                got, run is not None and run.status == "awaiting_human",
                [i.data for i in found.items] if not thread.tuples else [])))
        return out

    async def digest(self, client: AsyncClient, unit: Unit, decoded: _Thread) -> _Digests:
        return await self._read_back(client, decoded, quick=False)

    async def _read_back(self, client: AsyncClient, decoded: _Thread, *, quick: bool
                         ) -> _Digests:
        from ...adapters.langgraph._threads import _session_id

        saver = self._saver(client)
        view = self._quick_view if quick else self._view
        store = await saver._session_store(create=False)
        if store is None:
            return self._digests(decoded, view, None)
        try:
            session = await store.get(_session_id(decoded.thread_id))
        except SessionNotFound:
            return self._digests(decoded, view, None)
        # Read what is stored, not what the saver remembers of writing it.
        saver._drop(decoded.thread_id)
        saver._remember(decoded.thread_id, session, store.name)
        got: list[CheckpointTuple | OwnstateError | None] = []
        for t in decoded.tuples:
            try:
                got.append(await saver.aget_tuple(t.config))
            except OwnstateError as exc:
                got.append(exc)
        page = await client.runs.list_page(session=session, page_size=1)
        awaiting = bool(page.items) and page.items[0].status == "awaiting_human"
        items = ([i.data async for i in session.list_items(order_by="create_time asc")]
                 if not decoded.tuples else [])
        return self._digests(decoded, view, _Stored(got, awaiting, items))

    def _digests(self, decoded: _Thread, view: Any, stored: _Stored | None) -> _Digests:
        """Both sides' digests and counts: the source thread, and what is stored of it
        (``None``: no session)."""
        source_counts = Counter(sessions=1, checkpoints=len(decoded.tuples),
                                writes=sum(len(t.pending_writes or ()) for t in decoded.tuples),
                                awaiting=int(decoded.paused))
        stored_counts: Counter[str] = Counter()
        only_messages = not decoded.tuples  # (--checkpoints none) the messages are all there is
        source_view = (self._items(decoded.messages) if only_messages
                       else [view(t) for t in decoded.tuples])
        stored_view: list[Any] = []
        if stored is not None:
            stored_counts["sessions"] = 1
            for got in stored.tuples:
                if isinstance(got, OwnstateError):
                    stored_view.append(f"unreadable: {got.code}")
                    continue
                stored_view.append(view(got))
                if got is not None:
                    stored_counts["checkpoints"] += 1
                    stored_counts["writes"] += len(got.pending_writes or ())
            stored_counts["awaiting"] = int(stored.awaiting)
            if only_messages:
                stored_view = list(stored.items)
        return ((canonical_digest([source_view]), +source_counts),
                (canonical_digest([stored_view]), +stored_counts))


_Digests = tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]


@dataclass(slots=True)
class _Stored:
    """What is stored of a thread, as verification compares it."""

    tuples: list[CheckpointTuple | OwnstateError | None]  # per source checkpoint
    awaiting: bool  # its newest run awaits a human
    items: list[Any]  # every item's data (only when no checkpoints were imported)


IMPORTER = LangGraphImporter
