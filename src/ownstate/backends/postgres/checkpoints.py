"""Checkpoints and pending writes in PostgreSQL.

``cid`` orders a run's checkpoints by when each was first stored (an upsert keeps it);
``wid`` does the same for pending writes. ``size`` is the payload's length. Payloads are
``bytea``, sent in binary. Metadata is ``json`` (its text kept as given: compact and
key-sorted), so a filter compares the stored text of a key's value, and ``1``, ``1.0``
and ``true`` stay different values.

A put is one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` whose ``SELECT`` checks the
whole scope; a retention pass is one statement. A fenced write first reads its fence run
``FOR SHARE`` in the same transaction: a claim or a close (an ``UPDATE`` of that row)
waits until the write has committed, and a write that waited reads the row as the claim
left it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ... import model
from ...errors import CheckpointNotFound, RunNotFound, SessionNotFound
from ...model import JSON, CheckpointRecord, CheckpointScope, PendingWrite, RunUsage
from .._sql import (
    CHECKPOINT_COLUMNS,
    COPY_CHECKPOINTS,
    COPY_WRITES,
    SCOPED_RUN,
    WRITE_COLUMNS,
    before_mark,
    listing_conditions,
    retention_reasons,
    scope_params,
)
from ..ports.checkpoints import Fence, NewCheckpoint, page_cut
from ..ports.runs import RunState, run_refusal
from ._core import Cursor, PostgresCore

__all__ = ["CheckpointsInPostgres"]

_SCOPED_RUN = SCOPED_RUN.format(p="%s")



def _write(row: Sequence[Any]) -> PendingWrite:
    return PendingWrite(row[0], int(row[1]), row[2], row[3], bytes(row[4]), row[5])


def _canonical(value: JSON) -> str:
    """Compact, key-sorted JSON text: how stored metadata values are written."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


class CheckpointsInPostgres(PostgresCore):
    """The checkpoints port on PostgreSQL."""

    # helpers ---------------------------------------------------------------------------

    @staticmethod
    async def _rid(cur: Cursor, tenant: str, scope: CheckpointScope, lock: str = "") -> int:
        """The run's row id, when the run exists and lies inside every part of ``scope``."""
        await cur.execute(
            "SELECT rid FROM runs WHERE tenant = %s AND run_id = %s AND store = %s "
            "AND session_id = %s AND actor_id = %s " + lock, scope_params(tenant, scope))
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
                f"SELECT {WRITE_COLUMNS}, cid FROM checkpoint_writes WHERE cid = ANY(%s) "
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
        c = checkpoint

        async def run(cur: Cursor) -> CheckpointRecord:
            await self._check_fence(cur, tenant, scope, fence)
            # A replaced checkpoint keeps its cid (its place), create_time and writes.
            await cur.execute(
                "INSERT INTO checkpoints (rid, tenant, namespace, checkpoint_id, "
                "parent_checkpoint_id, type_tag, metadata, create_time, size, payload) "
                "SELECT rid, tenant, %s, %s, %s, %s, %s::json, %s, %s, %b FROM runs "
                "WHERE tenant = %s AND run_id = %s AND store = %s AND session_id = %s "
                "AND actor_id = %s FOR KEY SHARE "
                "ON CONFLICT (rid, namespace, checkpoint_id) DO UPDATE SET "
                "parent_checkpoint_id = excluded.parent_checkpoint_id, "
                "type_tag = excluded.type_tag, metadata = excluded.metadata, "
                "size = excluded.size, payload = excluded.payload "
                "RETURNING cid, create_time, xmax = 0",
                (c.namespace, c.checkpoint_id, c.parent_checkpoint_id, c.type_tag,
                 c.metadata_json, now, len(c.payload), c.payload,
                 *scope_params(tenant, scope)))
            row = await cur.fetchone()
            if row is None:
                raise RunNotFound(run_id=scope.run_id)
            cid, created, inserted = row
            pending: tuple[PendingWrite, ...] = ()
            if not inserted:
                await cur.execute(f"SELECT {WRITE_COLUMNS} FROM checkpoint_writes "
                                  "WHERE cid = %s ORDER BY wid", (cid,))
                pending = tuple(_write(w) for w in await cur.fetchall())
            return CheckpointRecord(
                run_id=scope.run_id, namespace=c.namespace, checkpoint_id=c.checkpoint_id,
                parent_checkpoint_id=c.parent_checkpoint_id, type_tag=c.type_tag,
                payload=c.payload, metadata=json.loads(c.metadata_json), create_time=created,
                pending_writes=pending,
            )

        return await self._write(tenant, run)

    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         fence: Fence | None, now: datetime) -> None:
        async def run(cur: Cursor) -> None:
            await self._check_fence(cur, tenant, scope, fence)
            await cur.execute(
                f"SELECT cid FROM checkpoints WHERE rid = {_SCOPED_RUN} AND namespace = %s "
                "AND checkpoint_id = %s AND tenant = %s FOR KEY SHARE",
                (*scope_params(tenant, scope), namespace, checkpoint_id, tenant))
            row = await cur.fetchone()
            if row is None:
                await self._rid(cur, tenant, scope)
                raise CheckpointNotFound(
                    run_id=scope.run_id, checkpoint_id=checkpoint_id,
                    namespace=namespace)
            await cur.executemany(
                "INSERT INTO checkpoint_writes (cid, tenant, task_id, idx, channel, "
                "type_tag, task_path, size, payload) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %b) "
                "ON CONFLICT (cid, task_id, idx) DO UPDATE SET channel = excluded.channel, "
                "type_tag = excluded.type_tag, task_path = excluded.task_path, "
                "size = excluded.size, payload = excluded.payload",
                [(row[0], tenant, w.task_id, w.index, w.channel, w.type_tag, w.task_path,
                  len(w.payload), w.payload) for w in writes])

        await self._write(tenant, run)

    # reads -----------------------------------------------------------------------------

    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        query = (f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints c WHERE c.rid = {_SCOPED_RUN} "
                 "AND c.namespace = %s AND c.tenant = %s")
        params: tuple[Any, ...] = (*scope_params(tenant, scope), namespace, tenant)
        if checkpoint_id is None:
            query += " ORDER BY c.cid DESC LIMIT 1"
        else:
            query += " AND c.checkpoint_id = %s"
            params += (checkpoint_id,)

        async def run(cur: Cursor) -> CheckpointRecord | None:
            await cur.execute(query, params)
            rows = await cur.fetchall()
            if not rows:
                await self._rid(cur, tenant, scope)  # out of scope is RunNotFound, not None
                return None
            return (await self._records(cur, rows, scope.run_id))[0]

        # one snapshot for the checkpoint and its pending writes
        return await self._read(tenant, run, snapshot=True)

    @classmethod
    async def _listing(cls, cur: Cursor, tenant: str, scope: CheckpointScope,
                       namespace: str | None, metadata: Mapping[str, JSON],
                       before: str | None) -> tuple[list[str], list[Any]]:
        """The conditions (over checkpoints ``c``) and their parameters of a listing."""
        rid = await cls._rid(cur, tenant, scope)
        conditions, values = listing_conditions("%s", rid, tenant, namespace)
        for key, value in metadata.items():
            conditions.append("(c.metadata -> %s)::text = %s")
            values.extend((key, _canonical(value)))
        if before is not None:
            await cur.execute(*before_mark("%s", rid, before, namespace))
            found = await cur.fetchone()
            mark = found[0] if found else None
            if mark is None:
                raise CheckpointNotFound(
                    run_id=scope.run_id, checkpoint_id=before)
            conditions.append("c.cid < %s")
            values.append(mark)
        return conditions, values

    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        async def run(cur: Cursor) -> list[CheckpointRecord]:
            conditions, values = await self._listing(cur, tenant, scope, namespace, metadata,
                                                     before)
            await cur.execute(
                f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints c WHERE {' AND '.join(conditions)} "
                "ORDER BY c.cid DESC LIMIT %s", [*values, limit])
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
            await cur.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints c "
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
        params: list[Any] = [*scope_params(tenant, scope), tenant, list(checkpoint_ids)]
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
                COPY_CHECKPOINTS.format(p="%s"),
                (destination, origin, tenant))
            copied = int(cur.rowcount)
            await cur.execute(
                COPY_WRITES.format(p="%s"),
                (destination, origin, tenant))
            return copied

        return await self._write(tenant, run)

    # housekeeping ----------------------------------------------------------------------

    async def apply_retention(self, tenant: str, policy: model.RetentionPolicy,
                              now: datetime) -> model.RetentionReport:
        cutoff = (None if policy.max_age_seconds is None
                  else now - timedelta(seconds=policy.max_age_seconds))
        reasons, params = retention_reasons("%s", policy, cutoff)
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
        query = ("SELECT r.run_id, count(*), sum(c.size) + coalesce(sum("
                 "(SELECT sum(w.size) FROM checkpoint_writes w WHERE w.cid = c.cid)), 0) "
                 "FROM runs r JOIN checkpoints c ON c.rid = r.rid WHERE r.tenant = %s")
        params: list[Any] = [tenant]
        if run_id is not None:
            query += " AND r.run_id = %s"
            params.append(run_id)
        query += ' GROUP BY r.rid, r.run_id ORDER BY 3 DESC, r.run_id COLLATE "C"'

        async def run(cur: Cursor) -> list[RunUsage]:
            await cur.execute(query, params)
            return [RunUsage(run_id=r[0], checkpoints=int(r[1]), stored_bytes=int(r[2]))
                    for r in await cur.fetchall()]

        return await self._read(tenant, run)
