"""Checkpoints and pending writes in PostgreSQL.

``cid`` orders a run's checkpoints by when each was first stored (an upsert keeps it);
``wid`` does the same for pending writes. ``size`` is the payload's length. Payloads are
``bytea``, sent in binary. Metadata is ``json`` (its text kept as given: compact and
key-sorted), so a filter compares the stored text of a key's value, and ``1``, ``1.0``
and ``true`` stay different values.

A put is one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` whose ``SELECT`` checks the
whole scope; a retention pass is one statement. A fenced write reads its fence run
``FOR SHARE`` in the same statement, and inserts only if the fence holds: a claim or a
close (an ``UPDATE`` of that row) waits until the write has committed, and a write that
waited reads the row as the claim left it (PostgreSQL re-reads a row it waited to lock).

The operations a LangGraph step makes (a put, a task's writes, a read of the latest
checkpoint) are each one statement, so one round trip, committed with it: the statement
returns what was found besides what was written (the scope's run, the fence run's state,
the checkpoint), and a refusal is worded from that after the fact, when nothing was
written. A put and a task's writes commit without waiting for their WAL flush (``_core``
says what that gives up, and ``synchronous_checkpoints`` turns it off).

A put with items (a step's new messages) is one statement too: the append's statement
(``sessions.append_ctes``) gated on the scope's run, the fence and the seq the items must
start at, and the put gated on the append, so a refusal of any of them stores nothing. It
commits as an append does, waiting for its WAL flush: its items are not checkpoints. Its
items are queued for search indexing as an append's are (``items_search``).

A fenced put (with items or without) that ends its fence's run is that put's statement
with one more entry, the run's ``UPDATE`` gated on the put; a put that opens a run is one
statement too, the open (``runs.opening_insert``) gated on the scope and the put on the
open. Both commit waiting for their WAL flush, as ``open_run`` and ``close_run`` do.

It may touch PostgreSQL through ``_core``, the shared SQL (``backends._sql``), the
checkpoint, run and session ports, the append statement and item vectors of ``sessions``
and ``_vector_rows``, the queued span of ``items_search``, the run opening of ``runs``, the
model and errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, cast

from ... import model
from ...errors import CheckpointNotFound, RunNotFound, SeqConflict, SessionNotFound
from ...model import JSON, CheckpointRecord, CheckpointScope, Item, PendingWrite, RunUsage
from .. import _sql
from ..ports.checkpoints import Fence, NewCheckpoint, page_cut
from ..ports.runs import RunState, run_refusal
from ..ports.sessions import NewItem
from ._arrays import bigints, byteas, texts
from ._core import Cursor
from ._statistics import Analyzing
from ._vector_rows import store_item_vectors
from .items_search import QUEUED_SPAN
from .runs import open_refusal, opened_run, opening_args, opening_insert
from .sessions import IndexingChanged, append_ctes, appended

__all__ = ["CheckpointsInPostgres"]

_SCOPED_RUN = _sql.SCOPED_RUN.format(p="%s")
_RUN_IN_SCOPE = ("SELECT rid FROM runs WHERE tenant = %(tenant)s AND run_id = %(run)s "
                 "AND store = %(store)s AND session_id = %(session)s AND actor_id = %(actor)s")
# The fence run (a run of the scope's session), locked against claims until commit, and
# the condition a fenced write is made under: that run holds the token and is active.
_FENCE = ("fence AS (SELECT status, fencing_token FROM runs WHERE tenant = %(tenant)s "
          "AND run_id = %(fence_run)s AND store = %(store)s AND session_id = %(session)s "
          "AND actor_id = %(actor)s FOR SHARE)")
_FENCE_HOLDS = ("EXISTS (SELECT 1 FROM fence WHERE fencing_token = %(token)s "
                f"AND {_sql.ACTIVE})")
# A checkpoint's pending writes, in the order first stored, as one row of arrays.
_WRITES_OF = ("SELECT array_agg(task_id ORDER BY wid), array_agg(idx ORDER BY wid), "
              "array_agg(channel ORDER BY wid), array_agg(type_tag ORDER BY wid), "
              "array_agg(payload ORDER BY wid), array_agg(task_path ORDER BY wid) "
              "FROM checkpoint_writes w WHERE w.cid = {cid}")


class _Appender(Protocol):
    def _append_params(self, tenant: str, store: str, session_id: str,
                       items: Sequence[NewItem], now: datetime) -> dict[str, Any]: ...

    def _remember_indexing(self, tenant: str, store: str, indexed: bool) -> None: ...

    async def _index_if_due(self, tenant: str, params: dict[str, Any], span: int
                            ) -> None: ...


class _Fencing(NamedTuple):
    """What a write statement adds when it is fenced, or the stand-ins when it is not: the
    fence run (``_FENCE``) among its ``WITH`` entries, the condition its insert is made
    under (``_FENCE_HOLDS``), the fence run's status and token among the columns it
    returns, and the join that brings them."""

    cte: str
    gate: str
    columns: str
    join: str


def _fencing(fenced: bool) -> _Fencing:
    if fenced:
        return _Fencing(f"{_FENCE}, ", f"WHERE {_FENCE_HOLDS} ", "f.status, f.fencing_token, ",
                        "LEFT JOIN fence f ON true ")
    return _Fencing("", "", "NULL, NULL, ", "")


def _upsert(gate: str) -> str:
    """The CTE ``put`` of a checkpoint statement: the checkpoint inserted for the scope's
    run (``holder``) when ``gate`` (a ``WHERE`` clause, or nothing) lets it, or replacing
    the stored one of the same id in place; it returns the row's id, time and whether it
    is new."""
    return (
        "put AS (INSERT INTO checkpoints (rid, tenant, namespace, checkpoint_id, "
        "parent_checkpoint_id, type_tag, metadata, create_time, size, payload) "
        "SELECT rid, %(tenant)s, %(namespace)s, %(checkpoint_id)s, %(parent)s, %(type_tag)s, "
        f"%(metadata)s::json, %(now)s, %(size)s, %(payload)b FROM holder {gate}"
        "ON CONFLICT (rid, namespace, checkpoint_id) DO UPDATE SET "
        "parent_checkpoint_id = excluded.parent_checkpoint_id, "
        "type_tag = excluded.type_tag, metadata = excluded.metadata, "
        "size = excluded.size, payload = excluded.payload "
        "RETURNING cid, create_time, xmax = 0 AS inserted) ")


#: The ``WITH`` entry of a fenced write that ends its fence's run, once the checkpoint is
#: stored (which the fence gated), as ``close_run`` with the fence's token ends it.
_ENDED = (
    ", ended AS (UPDATE runs SET "
    + _sql.close_run_set("%(end_status)s", "%(now)s", "0", "%(step_count)s::bigint")
    + " WHERE tenant = %(tenant)s AND run_id = %(fence_run)s AND fencing_token = %(token)s "
    "AND EXISTS (SELECT 1 FROM put) RETURNING 1) ")


def _put_query(fenced: bool, ending: bool = False) -> str:
    """One statement that stores a checkpoint (when the fence, if any, holds; ``ending``
    that fence's run too) and returns the scope's run, the fence run's state, the stored
    row and, when it replaced one, the pending writes it keeps."""
    fencing = _fencing(fenced)
    return (
        f"WITH holder AS ({_RUN_IN_SCOPE} FOR KEY SHARE), {fencing.cte}"
        + _upsert(fencing.gate) + (_ENDED if ending else "")
        + f"SELECT (SELECT rid FROM holder), {fencing.columns}"
        f"p.cid, p.create_time, p.inserted, w.* FROM (SELECT 1) one {fencing.join}"
        "LEFT JOIN put p ON true LEFT JOIN LATERAL ("
        + _WRITES_OF.format(cid="p.cid AND NOT p.inserted") + ") w ON true")


def _writes_query(fenced: bool) -> str:
    """One statement that stores a task's writes against a checkpoint (when the fence, if
    any, holds) and returns the scope's run, the fence run's state and the checkpoint."""
    fencing = _fencing(fenced)
    return (
        f"WITH holder AS ({_RUN_IN_SCOPE}), {fencing.cte}"
        "target AS (SELECT cid FROM checkpoints WHERE rid = (SELECT rid FROM holder) "
        "AND namespace = %(namespace)s AND checkpoint_id = %(checkpoint_id)s "
        "AND tenant = %(tenant)s FOR KEY SHARE), "
        "put AS (INSERT INTO checkpoint_writes (cid, tenant, task_id, idx, channel, "
        "type_tag, task_path, size, payload) "
        "SELECT t.cid, %(tenant)s, w.task_id, w.idx, w.channel, w.type_tag, w.task_path, "
        "octet_length(w.payload), w.payload FROM target t, unnest(%(task_ids)b::text[], "
        "%(idxs)b::bigint[], %(channels)b::text[], %(type_tags)b::text[], "
        "%(task_paths)b::text[], %(payloads)b::bytea[]) WITH ORDINALITY "
        f"AS w (task_id, idx, channel, type_tag, task_path, payload, n) {fencing.gate}"
        "ORDER BY w.n "
        "ON CONFLICT (cid, task_id, idx) DO UPDATE SET channel = excluded.channel, "
        "type_tag = excluded.type_tag, task_path = excluded.task_path, "
        "size = excluded.size, payload = excluded.payload RETURNING 1) "
        f"SELECT (SELECT rid FROM holder), {fencing.columns}"
        "(SELECT cid FROM target), (SELECT count(*) FROM put) FROM (SELECT 1) one "
        + fencing.join)


def _put_items_query(fenced: bool, ending: bool = False) -> str:
    """One statement that appends items to the scope's session (when the run is in scope,
    the fence, if any, holds and the session's next seq is ``first_seq``) and stores a
    checkpoint when they were appended (``ending`` the fence's run too); it returns what
    :func:`_put_query` does, then the seq the items were numbered from, whether the store
    indexes its items and the span of the ids its tenant has queued for indexing."""
    fencing = _fencing(fenced)
    gate = ("AND item_count = %(first_seq)s - 1 AND EXISTS (SELECT 1 FROM holder) "
            + (f"AND {_FENCE_HOLDS} " if fenced else ""))
    return (
        f"WITH holder AS ({_RUN_IN_SCOPE} FOR KEY SHARE), {fencing.cte}"
        + append_ctes(gate) + ", "
        + _upsert("WHERE EXISTS (SELECT 1 FROM s) ") + (_ENDED if ending else "")
        + f"SELECT (SELECT rid FROM holder), {fencing.columns}"
        "p.cid, p.create_time, p.inserted, w.*, (SELECT base FROM s), "
        "(SELECT index_items FROM session_stores WHERE tenant = %(tenant)s "
        f"AND name = %(store)s), {QUEUED_SPAN} FROM (SELECT 1) one {fencing.join}"
        "LEFT JOIN put p ON true LEFT JOIN LATERAL ("
        + _WRITES_OF.format(cid="p.cid AND NOT p.inserted") + ") w ON true")


#: by (fenced, ending the fence's run)
_PUT = {(False, False): _put_query(False), (True, False): _put_query(True),
        (True, True): _put_query(True, True)}
_PUT_ITEMS = {(False, False): _put_items_query(False), (True, False): _put_items_query(True),
              (True, True): _put_items_query(True, True)}
#: A run opened in the scope's session, leased (``runs.opening_insert``), and a checkpoint
#: of the scope's run stored under that lease, in one statement, both or neither: the open
#: is gated on the scope (the scope's run is the new one, of the session's actor, or one
#: already there), and the put on the open. The new run holds its lease and is active, so
#: the fence holds by itself; a scope naming the new run finds it among ``opened``, which
#: the statement's snapshot does not show in ``runs``.
_OPEN_AND_PUT = (
    "WITH opened AS (" + opening_insert(
        "AND ((%(run)s = %(new_run)s AND actor_id = %(actor)s) "
        f"OR EXISTS ({_RUN_IN_SCOPE})) ", "rid, actor_id") + "), "
    f"holder AS (SELECT rid FROM ({_RUN_IN_SCOPE} FOR KEY SHARE) h "
    "UNION ALL SELECT rid FROM opened WHERE %(run)s = %(new_run)s), "
    + _upsert("WHERE EXISTS (SELECT 1 FROM opened) ")
    + "SELECT (SELECT actor_id FROM opened), p.cid, p.create_time, p.inserted, w.*, "
    "(SELECT rid FROM opened) "
    "FROM (SELECT 1) one LEFT JOIN put p ON true LEFT JOIN LATERAL ("
    + _WRITES_OF.format(cid="p.cid AND NOT p.inserted") + ") w ON true")
_PUT_WRITES = {fenced: _writes_query(fenced) for fenced in (False, True)}
# The run in scope, and the checkpoint asked for (the newest when no id is given) with its
# pending writes: one statement, so one snapshot.
_GET = ("SELECT r.rid, c.cid, c.namespace, c.checkpoint_id, c.parent_checkpoint_id, "
        "c.type_tag, c.metadata, c.create_time, c.payload, w.* "
        f"FROM ({_RUN_IN_SCOPE}) r LEFT JOIN LATERAL (SELECT * FROM checkpoints c "
        "WHERE c.rid = r.rid AND c.namespace = %(namespace)s AND c.tenant = %(tenant)s "
        "{where} ORDER BY c.cid DESC LIMIT 1) c ON true LEFT JOIN LATERAL ("
        + _WRITES_OF.format(cid="c.cid") + ") w ON true")
_GET_LATEST = _GET.format(where="")
_GET_ONE = _GET.format(where="AND c.checkpoint_id = %(checkpoint_id)s")



def _write(row: Sequence[Any]) -> PendingWrite:
    return PendingWrite(row[0], int(row[1]), row[2], row[3], bytes(row[4]), row[5])


def _writes(columns: Sequence[Any]) -> list[PendingWrite]:
    """Pending writes from their columns as arrays (``_WRITES_OF``; all ``NULL``: none)."""
    task_ids, idxs, channels, type_tags, payloads, task_paths = columns
    if task_ids is None:
        return []
    return [PendingWrite(t, int(i), ch, tag, bytes(data), path) for t, i, ch, tag, data, path
            in zip(task_ids, idxs, channels, type_tags, payloads, task_paths, strict=True)]


def _scope_args(tenant: str, scope: CheckpointScope, fence: Fence | None) -> dict[str, Any]:
    """The parameters naming the scope (``_RUN_IN_SCOPE``) and the fence (``_FENCE``)."""
    return {"tenant": tenant, "run": scope.run_id, "store": scope.store,
            "session": scope.session_id, "actor": scope.actor_id,
            "fence_run": fence.run_id if fence else None,
            "token": fence.fencing_token if fence else None}


def _put_args(tenant: str, scope: CheckpointScope, c: NewCheckpoint, fence: Fence | None,
              now: datetime) -> dict[str, Any]:
    """The parameters of a put's statement (``_PUT`` or ``_PUT_ITEMS``), bar the items."""
    return {**_scope_args(tenant, scope, fence), "namespace": c.namespace,
            "checkpoint_id": c.checkpoint_id, "parent": c.parent_checkpoint_id,
            "type_tag": c.type_tag, "metadata": c.metadata_json, "now": now,
            "size": len(c.payload), "payload": c.payload}


def _stored(scope: CheckpointScope, c: NewCheckpoint, created: datetime, inserted: bool,
            writes: Sequence[Any]) -> CheckpointRecord:
    """The checkpoint as a put stored it: a replaced one keeps its time and the pending
    writes its statement returned (``writes``, the columns of ``_WRITES_OF``)."""
    return CheckpointRecord(
        run_id=scope.run_id, namespace=c.namespace, checkpoint_id=c.checkpoint_id,
        parent_checkpoint_id=c.parent_checkpoint_id, type_tag=c.type_tag,
        payload=c.payload, metadata=json.loads(c.metadata_json), create_time=created,
        pending_writes=() if inserted else tuple(_writes(writes)))


def _refuse(scope: CheckpointScope, fence: Fence | None, row: Sequence[Any]) -> None:
    """Raise why a write stored nothing, from the row its statement returned (the scope's
    run, then the fence run's status and token): the run must lie in the scope, then the
    fence hold (see :func:`~..ports.runs.run_refusal`)."""
    if row[0] is None:
        raise RunNotFound(run_id=scope.run_id)
    if fence is not None:
        state = None if row[1] is None else RunState(row[1], int(row[2]))
        refusal = run_refusal(fence.run_id, state, fence.fencing_token)
        if refusal is not None:
            raise refusal


def _canonical(value: JSON) -> str:
    """Compact, key-sorted JSON text: how stored metadata values are written."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


class CheckpointsInPostgres(Analyzing):
    """The checkpoints port on PostgreSQL."""

    # helpers ---------------------------------------------------------------------------

    @staticmethod
    async def _rid(cur: Cursor, tenant: str, scope: CheckpointScope, lock: str = "") -> int:
        """The run's row id, when the run exists and lies inside every part of ``scope``."""
        await cur.execute(
            "SELECT rid FROM runs WHERE tenant = %s AND run_id = %s AND store = %s "
            "AND session_id = %s AND actor_id = %s " + lock, _sql.scope_params(tenant, scope))
        row = await cur.fetchone()
        if row is None:
            raise RunNotFound(run_id=scope.run_id)
        return int(row[0])

    @classmethod
    async def _check_fence(cls, cur: Cursor, tenant: str, scope: CheckpointScope,
                           fence: Fence | None) -> None:
        """Pass when there is no fence, or its run lies in the scope's session, holds its
        token and is active; the run row stays locked against claims until commit."""
        if fence is None:
            return
        if fence.run_id != scope.run_id:
            await cls._rid(cur, tenant, scope)
        await cur.execute(
            "SELECT status, fencing_token FROM runs WHERE tenant = %s AND run_id = %s "
            "AND store = %s AND session_id = %s AND actor_id = %s FOR SHARE",
            (tenant, fence.run_id, scope.store, scope.session_id, scope.actor_id))
        row = await cur.fetchone()
        state = None if row is None else RunState(row[0], int(row[1]))
        refusal = run_refusal(fence.run_id, state, fence.fencing_token)
        if refusal is not None:
            raise refusal

    @staticmethod
    async def _records(cur: Cursor, rows: list[Any], run_id: str) -> list[CheckpointRecord]:
        """Checkpoint records of ``rows`` (selected as ``CHECKPOINT_COLUMNS``), with pending
        writes."""
        writes: dict[int, list[PendingWrite]] = {}
        holders = [r[0] for r in rows if r[8]]
        if holders:
            await cur.execute(
                f"SELECT {_sql.WRITE_COLUMNS}, cid FROM checkpoint_writes WHERE cid = ANY(%s) "
                "ORDER BY wid", (holders,))
            for w in await cur.fetchall():
                writes.setdefault(w[6], []).append(_write(w))
        return [
            CheckpointRecord(
                run_id=run_id, namespace=r[1], checkpoint_id=r[2], parent_checkpoint_id=r[3],
                type_tag=r[4], payload=bytes(r[7]), metadata=r[5], create_time=r[6],
                pending_writes=tuple(writes.get(r[0], ())),
            )
            for r in rows
        ]

    # writes ----------------------------------------------------------------------------

    async def put_checkpoint(self, tenant: str, scope: CheckpointScope,
                             checkpoint: NewCheckpoint, fence: Fence | None,
                             now: datetime) -> CheckpointRecord:
        params = _put_args(tenant, scope, checkpoint, fence, now)

        async def run(cur: Cursor) -> CheckpointRecord:
            # A replaced checkpoint keeps its cid (its place), create_time and writes.
            await cur.execute(_PUT[fence is not None, False], params, last=True, binary=True)
            row = await cur.fetchone()
            assert row is not None  # the statement always returns its one row
            _refuse(scope, fence, row)
            cid, created, inserted = row[3:6]
            if cid is None:  # pragma: no cover - the fence read and its gate agree
                raise RunNotFound(run_id=scope.run_id)
            return _stored(scope, checkpoint, created, inserted, row[6:])

        return await self._write_checkpoint(tenant, run)

    async def put_checkpoint_with_items(self, tenant: str, scope: CheckpointScope,
                                        checkpoint: NewCheckpoint, fence: Fence | None,
                                        items: Sequence[NewItem], first_seq: int,
                                        now: datetime) -> tuple[CheckpointRecord, list[Item]]:
        return await self._put_with_items(tenant, scope, checkpoint, fence, items, first_seq,
                                          now, None)

    async def put_checkpoint_ending_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint,
            fence: Fence, status: str, step_count: int | None, items: Sequence[NewItem],
            first_seq: int | None, now: datetime) -> tuple[CheckpointRecord, list[Item]]:
        ending = {"end_status": status, "step_count": step_count}
        if first_seq is not None:
            return await self._put_with_items(tenant, scope, checkpoint, fence, items,
                                              first_seq, now, ending)
        params = {**_put_args(tenant, scope, checkpoint, fence, now), **ending}

        async def run(cur: Cursor) -> tuple[CheckpointRecord, list[Item]]:
            await cur.execute(_PUT[True, True], params, last=True, binary=True)
            row = await cur.fetchone()
            assert row is not None  # the statement always returns its one row
            _refuse(scope, fence, row)
            return _stored(scope, checkpoint, row[4], row[5], row[6:12]), []

        # synchronous, as close_run: a run's end is not a checkpoint
        return await self._write(tenant, run, generic=True)

    async def put_checkpoint_opening_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint, run_id: str,
            framework: str, thread_key: str | None, owner: str, ttl_seconds: float,
            now: datetime) -> tuple[model.Run, CheckpointRecord]:
        args = opening_args(tenant, scope.store, scope.session_id, run_id, framework,
                            thread_key, owner, ttl_seconds, now)
        params = {**_put_args(tenant, scope, checkpoint, None, now), **args}

        async def run(cur: Cursor) -> tuple[model.Run, CheckpointRecord, int]:
            await cur.execute(_OPEN_AND_PUT, params, last=True, binary=True)
            row = await cur.fetchone()
            assert row is not None  # the statement always returns its one row
            if row[0] is None:  # nothing was stored: the open's refusal, else the scope's
                raise (await open_refusal(cur, tenant, scope.store, scope.session_id, run_id)
                       or RunNotFound(run_id=scope.run_id))
            return (opened_run(args, row[0]),
                    _stored(scope, checkpoint, row[2], row[3], row[4:10]), int(row[10]))

        # synchronous, as open_run: a run is not a checkpoint
        opened, stored, rid = await self._write(tenant, run, generic=True)
        await self._run_opened(rid)
        return opened, stored

    async def _put_with_items(self, tenant: str, scope: CheckpointScope,
                              checkpoint: NewCheckpoint, fence: Fence | None,
                              items: Sequence[NewItem], first_seq: int, now: datetime,
                              ending: dict[str, Any] | None
                              ) -> tuple[CheckpointRecord, list[Item]]:
        """A put with items, ``ending`` (the parameters of ``_ENDED``) the fence's run or
        not."""
        sessions = cast(_Appender, self)
        params = {**sessions._append_params(tenant, scope.store, scope.session_id, items, now),
                  **_put_args(tenant, scope, checkpoint, fence, now), "first_seq": first_seq,
                  **(ending or {})}
        embedded = any(it.embedding is not None for it in items)
        span = 0  # of the ids queued with this put's
        query = _PUT_ITEMS[fence is not None, ending is not None]

        async def run(cur: Cursor) -> tuple[CheckpointRecord, list[Item]]:
            nonlocal span
            # with vectors to write, the transaction stays open for them
            await cur.execute(query, params, last=not embedded, binary=True)
            row = await cur.fetchone()
            assert row is not None  # the statement always returns its one row
            _refuse(scope, fence, row)
            base, indexed = row[12], row[13]
            if base is None:  # nothing was written
                if indexed is not None and bool(indexed) != params["indexed"]:
                    raise IndexingChanged(bool(indexed))
                raise SeqConflict(store=scope.store, session_id=scope.session_id,
                                  first_seq=first_seq)
            span = int(row[14] or 0)
            if embedded:
                await store_item_vectors(cur, tenant, scope.store, items)
            record = _stored(scope, checkpoint, row[4], row[5], row[6:12])
            return record, appended(items, scope.session_id, int(base), now)

        while True:
            try:  # synchronous, as an append: its items are not checkpoints
                made = await self._write(tenant, run, generic=True)
            except IndexingChanged as changed:
                sessions._remember_indexing(tenant, scope.store, changed.args[0])
                params["indexed"] = changed.args[0]
                continue
            await sessions._index_if_due(tenant, params, span)
            return made

    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         fence: Fence | None, now: datetime) -> None:
        # A (task_id, index) given twice is stored once, where it first came, with the
        # value that came last: as if each write replaced the one before in turn.
        unique: dict[tuple[str, int], PendingWrite] = {}
        for w in writes:
            unique[(w.task_id, w.index)] = w
        rows = list(unique.values())
        params = {**_scope_args(tenant, scope, fence), "namespace": namespace,
                  "checkpoint_id": checkpoint_id,
                  "task_ids": texts([w.task_id for w in rows]),
                  "idxs": bigints([w.index for w in rows]),
                  "channels": texts([w.channel for w in rows]),
                  "type_tags": texts([w.type_tag for w in rows]),
                  "task_paths": texts([w.task_path for w in rows]),
                  "payloads": byteas([w.payload for w in rows])}

        async def run(cur: Cursor) -> None:
            await cur.execute(_PUT_WRITES[fence is not None], params, last=True)
            row = await cur.fetchone()
            assert row is not None  # the statement always returns its one row
            _refuse(scope, fence, row)
            if row[3] is None:
                raise CheckpointNotFound(
                    run_id=scope.run_id, checkpoint_id=checkpoint_id,
                    namespace=namespace)

        await self._write_checkpoint(tenant, run)

    # reads -----------------------------------------------------------------------------

    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        params = {**_scope_args(tenant, scope, None), "namespace": namespace,
                  "checkpoint_id": checkpoint_id}

        async def run(cur: Cursor) -> CheckpointRecord | None:
            await cur.execute(_GET_LATEST if checkpoint_id is None else _GET_ONE, params,
                              binary=True)
            row = await cur.fetchone()
            if row is None:  # out of scope is RunNotFound, not None
                raise RunNotFound(run_id=scope.run_id)
            if row[1] is None:
                return None
            return CheckpointRecord(
                run_id=scope.run_id, namespace=row[2], checkpoint_id=row[3],
                parent_checkpoint_id=row[4], type_tag=row[5], payload=bytes(row[8]),
                metadata=row[6], create_time=row[7], pending_writes=tuple(_writes(row[9:])))

        return await self._read(tenant, run, generic=True)

    @classmethod
    async def _listing(cls, cur: Cursor, tenant: str, scope: CheckpointScope,
                       namespace: str | None, metadata: Mapping[str, JSON],
                       before: str | None) -> tuple[list[str], list[Any]]:
        """The conditions (over checkpoints ``c``) and their parameters of a listing."""
        rid = await cls._rid(cur, tenant, scope)
        mark = None
        if before is not None:
            await cur.execute(*_sql.before_mark("%s", rid, before, namespace))
            found = await cur.fetchone()
            mark = found[0] if found else None
        conditions, values = _sql.listing_conditions("%s", rid, tenant, namespace, scope,
                                                     before, mark)
        for key, value in metadata.items():
            conditions.append("(c.metadata -> %s)::text = %s")
            values.extend((key, _canonical(value)))
        return conditions, values

    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        async def run(cur: Cursor) -> list[CheckpointRecord]:
            conditions, values = await self._listing(cur, tenant, scope, namespace, metadata,
                                                     before)
            await cur.execute(
                f"SELECT {_sql.CHECKPOINT_COLUMNS} FROM checkpoints c "
                f"WHERE {' AND '.join(conditions)} ORDER BY c.cid DESC LIMIT %s",
                [*values, limit])
            return await self._records(cur, await cur.fetchall(), scope.run_id)

        return await self._read(tenant, run, snapshot=True)

    async def page_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, after: int | None, limit: int,
                               max_bytes: int) -> tuple[list[CheckpointRecord], int | None]:
        async def run(cur: Cursor) -> tuple[list[CheckpointRecord], int | None]:
            conditions, values = await self._listing(cur, tenant, scope, namespace, metadata,
                                                     before)
            if after is not None:
                conditions.append("c.cid < %s")
                values.append(after)
            # the sizes first, then only the payloads that fit the page
            await cur.execute(
                "SELECT c.cid, c.size + coalesce((SELECT sum(w.size) FROM "
                "checkpoint_writes w WHERE w.cid = c.cid), 0) FROM checkpoints c "
                f"WHERE {' AND '.join(conditions)} ORDER BY c.cid DESC LIMIT %s",
                [*values, limit + 1])
            sizes = await cur.fetchall()
            taken, more = page_cut([int(r[1]) for r in sizes], limit, max_bytes)
            chosen = [int(r[0]) for r in sizes[:taken]]
            await cur.execute(f"SELECT {_sql.CHECKPOINT_COLUMNS} FROM checkpoints c "
                              "WHERE c.cid = ANY(%s) ORDER BY c.cid DESC", (chosen,))
            records = await self._records(cur, await cur.fetchall(), scope.run_id)
            return records, chosen[-1] if more else None

        return await self._read(tenant, run, snapshot=True)

    # deletes and copies ----------------------------------------------------------------

    async def delete_checkpoints(self, tenant: str, scope: CheckpointScope,
                                 namespace: str | None, checkpoint_ids: Sequence[str],
                                 fence: Fence | None) -> int:
        # one statement, the scope in its predicate; pending writes go by cascade
        query = (f"DELETE FROM checkpoints WHERE rid = {_SCOPED_RUN} AND tenant = %s "
                 "AND checkpoint_id = ANY(%s::text[])")
        params: list[Any] = [*_sql.scope_params(tenant, scope), tenant, list(checkpoint_ids)]
        if namespace is not None:
            query += " AND namespace = %s"
            params.append(namespace)

        async def run(cur: Cursor) -> int:
            await self._check_fence(cur, tenant, scope, fence)
            await cur.execute(query, params)
            deleted = int(cur.rowcount)
            if deleted == 0:
                await self._rid(cur, tenant, scope)  # out of scope is RunNotFound, not 0
            return deleted

        return await self._write(tenant, run)

    async def delete_run_checkpoints(self, tenant: str, scope: CheckpointScope) -> int:
        async def run(cur: Cursor) -> int:
            rid = await self._rid(cur, tenant, scope)
            await cur.execute("DELETE FROM checkpoints WHERE rid = %s AND tenant = %s",
                              (rid, tenant))
            return int(cur.rowcount)

        return await self._write(tenant, run)

    async def delete_session_checkpoints(self, tenant: str, actor_id: str, store: str,
                                         session_id: str) -> int:
        async def run(cur: Cursor) -> int:
            await cur.execute(
                "SELECT sid FROM sessions WHERE tenant = %s AND store = %s "
                "AND session_id = %s AND actor_id = %s",
                (tenant, store, session_id, actor_id))
            row = await cur.fetchone()
            if row is None:
                raise SessionNotFound(store=store, session_id=session_id)
            await cur.execute(
                "DELETE FROM checkpoints WHERE tenant = %s AND rid IN "
                "(SELECT rid FROM runs WHERE tenant = %s AND sid = %s)",
                (tenant, tenant, row[0]))
            return int(cur.rowcount)

        return await self._write(tenant, run)

    async def copy_checkpoints(self, tenant: str, source: CheckpointScope,
                               target: CheckpointScope) -> int:
        async def run(cur: Cursor) -> int:
            origin = await self._rid(cur, tenant, source, "FOR KEY SHARE")
            destination = await self._rid(cur, tenant, target, "FOR KEY SHARE")
            if origin == destination:
                await cur.execute("SELECT count(*) FROM checkpoints WHERE rid = %s",
                                  (origin,))
                found = await cur.fetchone()
                return int(found[0]) if found else 0
            await cur.execute("DELETE FROM checkpoints WHERE rid = %s AND tenant = %s",
                              (destination, tenant))
            await cur.execute(
                _sql.COPY_CHECKPOINTS.format(p="%s"),
                (destination, origin, tenant))
            copied = int(cur.rowcount)
            await cur.execute(
                _sql.COPY_WRITES.format(p="%s"),
                (destination, origin, tenant))
            return copied

        return await self._write(tenant, run)

    # housekeeping ----------------------------------------------------------------------

    async def apply_retention(self, tenant: str, policy: model.RetentionPolicy,
                              now: datetime) -> model.RetentionReport:
        cutoff = (None if policy.max_age_seconds is None
                  else now - timedelta(seconds=policy.max_age_seconds))
        reasons, params = _sql.retention_reasons("%s", policy, cutoff)
        params.insert(0, tenant)
        if not reasons:
            return model.RetentionReport(checkpoints_deleted=0, bytes_freed=0)
        params.append(tenant)
        # Every part of one statement reads the same snapshot: the writes are counted
        # before the delete removes them.
        query = (
            "WITH doomed AS (SELECT cid, size FROM (SELECT c.cid, c.size, c.create_time, "
            "r.status, row_number() OVER (PARTITION BY c.rid, c.namespace "
            "ORDER BY c.cid DESC) - 1 AS newer FROM runs r JOIN checkpoints c "
            f"ON c.rid = r.rid WHERE r.tenant = %s) ranked WHERE {' OR '.join(reasons)}), "
            "deleted AS (DELETE FROM checkpoints WHERE tenant = %s "
            "AND cid IN (SELECT cid FROM doomed) RETURNING size) "
            "SELECT (SELECT count(*) FROM deleted), "
            "(SELECT coalesce(sum(size), 0) FROM deleted) + "
            "(SELECT coalesce(sum(w.size), 0) FROM checkpoint_writes w "
            " WHERE w.cid IN (SELECT cid FROM doomed))")

        async def run(cur: Cursor) -> model.RetentionReport:
            await cur.execute(query, params)
            row = await cur.fetchone()
            assert row is not None
            return model.RetentionReport(checkpoints_deleted=int(row[0]), bytes_freed=int(row[1]))

        return await self._write(tenant, run)

    async def checkpoint_usage(self, tenant: str, run_id: str | None) -> list[RunUsage]:
        query, params = _sql.usage_query("%s", tenant, run_id, ' COLLATE "C"')

        async def run(cur: Cursor) -> list[RunUsage]:
            await cur.execute(query, params)
            return _sql.usage_records(await cur.fetchall())

        return await self._read(tenant, run)
