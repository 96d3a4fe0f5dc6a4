"""Checkpoints and pending writes in SQLite.

``cid`` orders a run's checkpoints by when each was first stored (an upsert keeps it);
``wid`` does the same for pending writes. ``size`` is the payload's length. Besides the
unique key, one index serves the newest-first reads, and it covers what usage and every
retention rule need, so neither reads a checkpoint row. A put writes three b-trees.
The tables are created by the migrations in ``schema.py``.

It may touch the SQLite connections of ``_core``, the shared SQL (``backends._sql``), the
checkpoint, run and session ports (a checkpoint's items are appended by the sessions' own
code, in the put's transaction), the time format (``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from ... import model
from ..._ids import format_time, parse_time
from ...errors import CheckpointNotFound, RunNotFound, SessionNotFound
from ...model import (
    JSON,
    CheckpointRecord,
    CheckpointScope,
    Item,
    PendingWrite,
    Run,
    RunUsage,
)
from .. import _sql
from ..ports.checkpoints import Fence, NewCheckpoint, page_cut
from ..ports.runs import RunState, run_refusal
from ..ports.sessions import NewItem
from ._core import SqliteCore, write

__all__ = ["CheckpointsInSqlite"]

_SCOPED_RUN = _sql.SCOPED_RUN.format(p="?")
#: how a checkpoint write ends its fencing run: as ``close_run``, adding no cost
_ENDING = _sql.close_run_set("?", "?", "0", "?")
_FENCE_WHERE = "tenant = ? AND run_id = ? AND store = ? AND session_id = ? AND actor_id = ?"
#: the state of a fence's run, when it is the scope's run
_FENCE_ALONE = f"SELECT status, fencing_token FROM runs WHERE {_FENCE_WHERE}"
#: the scope's run's row id and the state of a fence's run in the same session, one row
#: whether or not either exists
_FENCE = (f"SELECT {_SCOPED_RUN}, f.status, f.fencing_token FROM (SELECT 1) "
          f"LEFT JOIN runs f ON f.{_FENCE_WHERE.replace(' AND ', ' AND f.')}")


class _Opener(Protocol):
    def _insert_run(self, conn: sqlite3.Connection, tenant: str, store: str, session_id: str,
                    run_id: str, framework: str, thread_key: str | None, owner: str | None,
                    ttl_seconds: float, now: datetime) -> Run: ...


class _Appender(Protocol):
    def _append(self, conn: sqlite3.Connection, tenant: str, store: str, session_id: str,
                items: Sequence[NewItem], idempotency: tuple[str, str] | None,
                now: datetime, first_seq: int | None = None) -> list[Item]: ...



def _write(row: Sequence[Any]) -> PendingWrite:
    return PendingWrite(row[0], row[1], row[2], row[3], bytes(row[4]), row[5])


def _metadata_condition(key: str, value: JSON) -> tuple[str, list[Any]]:
    """SQL (over a top-level ``json_each`` row ``e``) true when ``e`` is ``key`` holding a
    value equal to ``value`` as compact, key-sorted JSON text."""
    if value is None:
        return "e.key = ? AND e.type = 'null'", [key]
    if isinstance(value, bool):
        return "e.key = ? AND e.type = ?", [key, "true" if value else "false"]
    if isinstance(value, int):
        return "e.key = ? AND e.type = 'integer' AND e.atom = ?", [key, value]
    if isinstance(value, float):
        return "e.key = ? AND e.type = 'real' AND e.atom = ?", [key, value]
    if isinstance(value, str):
        return "e.key = ? AND e.type = 'text' AND e.atom = ?", [key, value]
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    kind = "object" if isinstance(value, Mapping) else "array"
    return "e.key = ? AND e.type = ? AND json(e.value) = json(?)", [key, kind, text]


class CheckpointsInSqlite(SqliteCore):
    # helpers ---------------------------------------------------------------------------

    @staticmethod
    def _rid(conn: sqlite3.Connection, tenant: str, scope: CheckpointScope) -> int:
        """The run's row id, when the run exists and lies inside every part of ``scope``."""
        row = conn.execute(f"SELECT {_SCOPED_RUN}", _sql.scope_params(tenant, scope)).fetchone()
        if row[0] is None:
            raise RunNotFound(run_id=scope.run_id)
        return int(row[0])

    @staticmethod
    def _check_fence(conn: sqlite3.Connection, tenant: str, scope: CheckpointScope,
                     fence: Fence | None) -> int | None:
        """Pass when there is no fence, or its run lies in the scope's session, holds its
        token and is active; read inside the write's own transaction, in one statement
        with the scope's run when the fence names another run (whose row id it returns;
        ``None`` when it did not read it)."""
        if fence is None:
            return None
        if fence.run_id == scope.run_id:
            row = conn.execute(_FENCE_ALONE, (tenant, fence.run_id, scope.store,
                                              scope.session_id, scope.actor_id)).fetchone()
            rid, state = None, row
        else:
            row = conn.execute(_FENCE, (*_sql.scope_params(tenant, scope), tenant,
                                        fence.run_id, scope.store, scope.session_id,
                                        scope.actor_id)).fetchone()
            if row[0] is None:
                raise RunNotFound(run_id=scope.run_id)
            rid, state = int(row[0]), (row[1:] if row[1] is not None else None)
        refusal = run_refusal(fence.run_id, None if state is None else RunState(
            state[0], int(state[1])), fence.fencing_token)
        if refusal is not None:
            raise refusal
        return rid

    @staticmethod
    def _records(conn: sqlite3.Connection, rows: list[Any], run_id: str) -> list[CheckpointRecord]:
        """Checkpoint records of ``rows`` (selected as ``CHECKPOINT_COLUMNS``), with pending
        writes."""
        writes: dict[int, list[PendingWrite]] = {}
        holders = [r[0] for r in rows if r[8]]
        if len(holders) == 1:
            writes[holders[0]] = [_write(w) for w in conn.execute(
                f"SELECT {_sql.WRITE_COLUMNS} FROM checkpoint_writes WHERE cid = ? ORDER BY wid",
                (holders[0],))]
        elif holders:
            for w in conn.execute(
                    f"SELECT {_sql.WRITE_COLUMNS}, cid FROM checkpoint_writes "
                    "WHERE cid IN (SELECT value FROM json_each(?)) ORDER BY wid",
                    (json.dumps(holders),)):
                writes.setdefault(w[6], []).append(_write(w))
        return [
            CheckpointRecord(
                run_id=run_id, namespace=r[1], checkpoint_id=r[2], parent_checkpoint_id=r[3],
                type_tag=r[4], payload=bytes(r[7]), metadata=json.loads(r[5]),
                create_time=parse_time(r[6]), pending_writes=tuple(writes.get(r[0], ())),
            )
            for r in rows
        ]

    # writes ----------------------------------------------------------------------------

    async def put_checkpoint(self, tenant: str, scope: CheckpointScope,
                             checkpoint: NewCheckpoint, fence: Fence | None,
                             now: datetime) -> CheckpointRecord:
        def run(conn: sqlite3.Connection) -> CheckpointRecord:
            with write(conn):
                self._check_fence(conn, tenant, scope, fence)
                return self._store_checkpoint(conn, tenant, scope, checkpoint, now)

        return await self._run_write(run)

    async def put_checkpoint_with_items(self, tenant: str, scope: CheckpointScope,
                                        checkpoint: NewCheckpoint, fence: Fence | None,
                                        items: Sequence[NewItem], first_seq: int,
                                        now: datetime) -> tuple[CheckpointRecord, list[Item]]:
        append = cast(_Appender, self)._append

        def run(conn: sqlite3.Connection) -> tuple[CheckpointRecord, list[Item]]:
            with write(conn):  # one transaction: a refusal anywhere rolls all of it back
                if fence is None:
                    self._rid(conn, tenant, scope)
                self._check_fence(conn, tenant, scope, fence)
                appended = append(conn, tenant, scope.store, scope.session_id, items, None,
                                  now, first_seq)
                return self._store_checkpoint(conn, tenant, scope, checkpoint, now), appended

        return await self._run_write(run)

    async def put_checkpoint_opening_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint, run_id: str,
            framework: str, thread_key: str | None, owner: str, ttl_seconds: float,
            now: datetime) -> tuple[Run, CheckpointRecord]:
        open_run = cast(_Opener, self)._insert_run

        def run(conn: sqlite3.Connection) -> tuple[Run, CheckpointRecord]:
            with write(conn):  # one transaction: a refusal anywhere rolls all of it back
                # the new run holds its lease and is active: the fence holds by itself
                opened = open_run(conn, tenant, scope.store, scope.session_id, run_id,
                                  framework, thread_key, owner, ttl_seconds, now)
                return opened, self._store_checkpoint(conn, tenant, scope, checkpoint, now)

        return await self._run_write(run)

    async def put_checkpoint_ending_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint,
            fence: Fence, status: str, step_count: int | None, items: Sequence[NewItem],
            first_seq: int | None, now: datetime) -> tuple[CheckpointRecord, list[Item]]:
        append = cast(_Appender, self)._append
        stamp = format_time(now)

        def run(conn: sqlite3.Connection) -> tuple[CheckpointRecord, list[Item]]:
            with write(conn):  # one transaction: a refusal anywhere rolls all of it back
                self._check_fence(conn, tenant, scope, fence)
                appended = append(conn, tenant, scope.store, scope.session_id, items, None,
                                  now, first_seq) if first_seq is not None else []
                record = self._store_checkpoint(conn, tenant, scope, checkpoint, now)
                # the fence held in this transaction: the run is active with its token
                conn.execute(
                    f"UPDATE runs SET {_ENDING} "
                    "WHERE tenant = ? AND run_id = ? AND fencing_token = ?",
                    (status, stamp, stamp, step_count, tenant, fence.run_id,
                     fence.fencing_token))
                return record, appended

        return await self._run_write(run)

    def _store_checkpoint(self, conn: sqlite3.Connection, tenant: str, scope: CheckpointScope,
                          checkpoint: NewCheckpoint, now: datetime) -> CheckpointRecord:
        """Store ``checkpoint`` inside the caller's write transaction, fence checked."""
        c = checkpoint
        # the common case, a new checkpoint, is one statement that also checks the scope
        insert = ("INSERT INTO checkpoints (rid, tenant, namespace, checkpoint_id, "
                  "parent_checkpoint_id, type_tag, metadata, create_time, size, payload) "
                  "SELECT rid, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM runs WHERE tenant = ? "
                  "AND run_id = ? AND store = ? AND session_id = ? AND actor_id = ? "
                  "ON CONFLICT (rid, namespace, checkpoint_id) DO NOTHING")
        values = (tenant, c.namespace, c.checkpoint_id, c.parent_checkpoint_id, c.type_tag,
                  c.metadata_json, format_time(now), len(c.payload), c.payload,
                  *_sql.scope_params(tenant, scope))
        created = now
        pending: tuple[PendingWrite, ...] = ()
        if conn.execute(insert, values).rowcount == 0:
            rid = self._rid(conn, tenant, scope)
            # a replaced checkpoint keeps its place, create_time and pending writes
            cid, kept = conn.execute(
                "UPDATE checkpoints SET parent_checkpoint_id = ?, type_tag = ?, "
                "metadata = ?, size = ?, payload = ? WHERE rid = ? AND namespace = ? "
                "AND checkpoint_id = ? AND tenant = ? RETURNING cid, create_time",
                (c.parent_checkpoint_id, c.type_tag, c.metadata_json, len(c.payload),
                 c.payload, rid, c.namespace, c.checkpoint_id, tenant)).fetchone()
            created = parse_time(kept)
            pending = tuple(_write(w) for w in conn.execute(
                f"SELECT {_sql.WRITE_COLUMNS} FROM checkpoint_writes WHERE cid = ? "
                "ORDER BY wid", (cid,)))
        return CheckpointRecord(
            run_id=scope.run_id, namespace=c.namespace, checkpoint_id=c.checkpoint_id,
            parent_checkpoint_id=c.parent_checkpoint_id, type_tag=c.type_tag,
            payload=c.payload, metadata=json.loads(c.metadata_json), create_time=created,
            pending_writes=pending,
        )

    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         fence: Fence | None, now: datetime) -> None:
        def run(conn: sqlite3.Connection) -> None:
            with write(conn):
                rid = self._check_fence(conn, tenant, scope, fence)
                if rid is None:
                    row = conn.execute(
                        f"SELECT cid FROM checkpoints WHERE rid = {_SCOPED_RUN} "
                        "AND namespace = ? AND checkpoint_id = ? AND tenant = ?",
                        (*_sql.scope_params(tenant, scope), namespace, checkpoint_id,
                         tenant)).fetchone()
                else:
                    row = conn.execute(
                        "SELECT cid FROM checkpoints WHERE rid = ? AND namespace = ? "
                        "AND checkpoint_id = ? AND tenant = ?",
                        (rid, namespace, checkpoint_id, tenant)).fetchone()
                if row is None:
                    self._rid(conn, tenant, scope)
                    raise CheckpointNotFound(
                        run_id=scope.run_id, checkpoint_id=checkpoint_id,
                        namespace=namespace)
                conn.executemany(
                    "INSERT INTO checkpoint_writes (cid, tenant, task_id, idx, channel, "
                    "type_tag, task_path, size, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (cid, task_id, idx) DO UPDATE SET channel = excluded.channel, "
                    "type_tag = excluded.type_tag, task_path = excluded.task_path, "
                    "size = excluded.size, payload = excluded.payload",
                    [(row[0], tenant, w.task_id, w.index, w.channel, w.type_tag, w.task_path,
                      len(w.payload), w.payload) for w in writes])

        await self._run_write(run)

    # reads -----------------------------------------------------------------------------

    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        sql = (f"SELECT {_sql.CHECKPOINT_COLUMNS} FROM checkpoints c WHERE c.rid = {_SCOPED_RUN} "
               "AND c.namespace = ? AND c.tenant = ?")
        params: tuple[Any, ...] = (*_sql.scope_params(tenant, scope), namespace, tenant)
        if checkpoint_id is None:
            sql += " ORDER BY c.cid DESC LIMIT 1"
        else:
            sql += " AND c.checkpoint_id = ?"
            params += (checkpoint_id,)

        def run(conn: sqlite3.Connection) -> CheckpointRecord | None:
            rows = conn.execute(sql, params).fetchall()
            if not rows:
                self._rid(conn, tenant, scope)  # out of scope is RunNotFound, not None
                return None
            return self._records(conn, rows, scope.run_id)[0]

        return await self._run(run)

    @classmethod
    def _listing(cls, conn: sqlite3.Connection, tenant: str, scope: CheckpointScope,
                 namespace: str | None, metadata: Mapping[str, JSON],
                 before: str | None) -> tuple[list[str], list[Any]]:
        """The conditions (over checkpoints ``c``) and their parameters of a listing."""
        rid = cls._rid(conn, tenant, scope)
        mark = None
        if before is not None:
            (mark,) = conn.execute(*_sql.before_mark("?", rid, before, namespace)).fetchone()
        conditions, values = _sql.listing_conditions("?", rid, tenant, namespace, scope,
                                                     before, mark)
        for key, value in metadata.items():
            condition, wanted = _metadata_condition(key, value)
            conditions.append(
                f"EXISTS (SELECT 1 FROM json_each(c.metadata) e WHERE {condition})")
            values.extend(wanted)
        return conditions, values

    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        def run(conn: sqlite3.Connection) -> list[CheckpointRecord]:
            conditions, values = self._listing(conn, tenant, scope, namespace, metadata,
                                               before)
            sql = (f"SELECT {_sql.CHECKPOINT_COLUMNS} FROM checkpoints c "
                   f"WHERE {' AND '.join(conditions)} ORDER BY c.cid DESC LIMIT ?")
            rows = conn.execute(sql, [*values, -1 if limit is None else limit]).fetchall()
            return self._records(conn, rows, scope.run_id)

        return await self._run(run)

    async def page_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, after: int | None, limit: int,
                               max_bytes: int) -> tuple[list[CheckpointRecord], int | None]:
        def run(conn: sqlite3.Connection) -> tuple[list[CheckpointRecord], int | None]:
            # one read transaction: the sizes, then only the payloads that fit the page
            conn.execute("BEGIN")
            try:
                conditions, values = self._listing(conn, tenant, scope, namespace,
                                                   metadata, before)
                if after is not None:
                    conditions.append("c.cid < ?")
                    values.append(after)
                sizes = conn.execute(
                    "SELECT c.cid, c.size + coalesce((SELECT sum(w.size) FROM "
                    "checkpoint_writes w WHERE w.cid = c.cid), 0) FROM checkpoints c "
                    f"WHERE {' AND '.join(conditions)} ORDER BY c.cid DESC LIMIT ?",
                    [*values, limit + 1]).fetchall()
                taken, more = page_cut([r[1] for r in sizes], limit, max_bytes)
                chosen = [r[0] for r in sizes[:taken]]
                rows = conn.execute(
                    f"SELECT {_sql.CHECKPOINT_COLUMNS} FROM checkpoints c WHERE c.cid IN "
                    "(SELECT value FROM json_each(?)) ORDER BY c.cid DESC",
                    (json.dumps(chosen),)).fetchall()
                records = self._records(conn, rows, scope.run_id)
            finally:
                conn.execute("COMMIT")
            return records, chosen[-1] if more else None

        return await self._run(run)

    # deletes and copies ----------------------------------------------------------------

    async def delete_checkpoints(self, tenant: str, scope: CheckpointScope,
                                 namespace: str | None, checkpoint_ids: Sequence[str],
                                 fence: Fence | None) -> int:
        # one statement, the scope in its predicate; pending writes go by cascade
        sql = (f"DELETE FROM checkpoints WHERE rid = {_SCOPED_RUN} AND tenant = ? "
               "AND checkpoint_id IN (SELECT value FROM json_each(?))")
        params: list[Any] = [*_sql.scope_params(tenant, scope), tenant, json.dumps(checkpoint_ids)]
        if namespace is not None:
            sql += " AND namespace = ?"
            params.append(namespace)

        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                self._check_fence(conn, tenant, scope, fence)
                deleted = int(conn.execute(sql, params).rowcount)
                if deleted == 0:
                    self._rid(conn, tenant, scope)  # out of scope is RunNotFound, not 0
                return deleted

        return await self._run_write(run)

    async def delete_run_checkpoints(self, tenant: str, scope: CheckpointScope) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                rid = self._rid(conn, tenant, scope)
                return int(conn.execute("DELETE FROM checkpoints WHERE rid = ? AND tenant = ?",
                                        (rid, tenant)).rowcount)

        return await self._run_write(run)

    async def delete_session_checkpoints(self, tenant: str, actor_id: str, store: str,
                                         session_id: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                row = conn.execute(
                    "SELECT sid FROM sessions WHERE tenant = ? AND store = ? "
                    "AND session_id = ? AND actor_id = ?",
                    (tenant, store, session_id, actor_id)).fetchone()
                if row is None:
                    raise SessionNotFound(store=store, session_id=session_id)
                return int(conn.execute(
                    "DELETE FROM checkpoints WHERE tenant = ? AND rid IN "
                    "(SELECT rid FROM runs WHERE tenant = ? AND sid = ?)",
                    (tenant, tenant, row[0])).rowcount)

        return await self._run_write(run)

    async def copy_checkpoints(self, tenant: str, source: CheckpointScope,
                               target: CheckpointScope) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                origin = self._rid(conn, tenant, source)
                destination = self._rid(conn, tenant, target)
                if origin == destination:
                    (count,) = conn.execute("SELECT count(*) FROM checkpoints WHERE rid = ?",
                                            (origin,)).fetchone()
                    return int(count)
                conn.execute("DELETE FROM checkpoints WHERE rid = ? AND tenant = ?",
                             (destination, tenant))
                copied = conn.execute(
                    _sql.COPY_CHECKPOINTS.format(p="?"),
                    (destination, origin, tenant)).rowcount
                conn.execute(
                    _sql.COPY_WRITES.format(p="?"),
                    (destination, origin, tenant))
                return int(copied)

        return await self._run_write(run)

    # housekeeping ----------------------------------------------------------------------

    async def apply_retention(self, tenant: str, policy: model.RetentionPolicy,
                              now: datetime) -> model.RetentionReport:
        cutoff = (None if policy.max_age_seconds is None
                  else format_time(now - timedelta(seconds=policy.max_age_seconds)))
        reasons, params = _sql.retention_reasons("?", policy, cutoff)
        params.insert(0, tenant)
        if not reasons:
            return model.RetentionReport(checkpoints_deleted=0, bytes_freed=0)
        doomed_sql = (
            "SELECT cid, size FROM (SELECT c.cid, c.size, c.create_time, r.status, "
            "row_number() OVER (PARTITION BY c.rid, c.namespace ORDER BY c.cid DESC) - 1 "
            "AS newer FROM runs r JOIN checkpoints c ON c.rid = r.rid WHERE r.tenant = ?) "
            f"WHERE {' OR '.join(reasons)}")

        def run(conn: sqlite3.Connection) -> model.RetentionReport:
            with write(conn):
                doomed = conn.execute(doomed_sql, params).fetchall()
                if not doomed:
                    return model.RetentionReport(checkpoints_deleted=0, bytes_freed=0)
                cids = json.dumps([d[0] for d in doomed])
                (writes,) = conn.execute(
                    "SELECT coalesce(sum(size), 0) FROM checkpoint_writes "
                    "WHERE cid IN (SELECT value FROM json_each(?))", (cids,)).fetchone()
                deleted = conn.execute(
                    "DELETE FROM checkpoints WHERE tenant = ? "
                    "AND cid IN (SELECT value FROM json_each(?))", (tenant, cids)).rowcount
                return model.RetentionReport(checkpoints_deleted=int(deleted),
                                       bytes_freed=sum(d[1] for d in doomed) + int(writes))

        return await self._run_write(run)

    async def checkpoint_usage(self, tenant: str, run_id: str | None) -> list[RunUsage]:
        sql, params = _sql.usage_query("?", tenant, run_id)

        def run(conn: sqlite3.Connection) -> list[RunUsage]:
            return _sql.usage_records(conn.execute(sql, params))

        return await self._run(run)
