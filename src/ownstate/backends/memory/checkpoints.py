"""Checkpoints and pending writes, in memory.

It may touch the in-memory data (``_data``), the checkpoint, run and session ports (a
checkpoint's items are appended through the sessions' own ``append_items``), the model and
errors, nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol, cast

from ... import model
from ...errors import CheckpointNotFound, RunNotFound, SeqConflict, SessionNotFound
from ...model import (
    CLOSED_RUN_STATUSES,
    JSON,
    CheckpointRecord,
    CheckpointScope,
    PendingWrite,
    Run,
    RunUsage,
)
from ..ports.checkpoints import Fence, NewCheckpoint, page_cut
from ..ports.runs import RunState, run_refusal
from ..ports.sessions import NewItem
from ._data import MemoryBase

__all__ = ["CheckpointsInMemory"]


class _RunLookup(Protocol):
    async def get_run(self, tenant: str, run_id: str) -> Run: ...


class _Opener(Protocol):
    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run: ...


class _Closer(Protocol):
    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run: ...


class _Appender(Protocol):
    def _item_count(self, tenant: str, store: str, session_id: str) -> int: ...

    async def append_items(self, tenant: str, store: str, session_id: str,
                           items: Sequence[NewItem], idempotency: tuple[str, str] | None,
                           now: datetime) -> list[model.Item]: ...


@dataclass(slots=True)
class _StoredCheckpoint:
    ordinal: int
    # metadata is kept as its JSON text so no caller can change what is stored
    record: CheckpointRecord
    metadata_json: str
    # (task_id, index) -> write, in the order first stored
    writes: dict[tuple[str, int], PendingWrite] = field(default_factory=dict)

    def stored_bytes(self) -> int:
        return len(self.record.payload) + sum(len(w.payload) for w in self.writes.values())

    def with_writes(self) -> CheckpointRecord:
        return replace(self.record, metadata=json.loads(self.metadata_json),
                       pending_writes=tuple(self.writes.values()))


@dataclass(slots=True)
class _RunCheckpoints:
    """One run's checkpoints, and the scope they were stored under (a run's session and
    actor never change)."""

    store: str
    session_id: str
    actor_id: str
    # (namespace, checkpoint_id) -> checkpoint
    entries: dict[tuple[str, str], _StoredCheckpoint] = field(default_factory=dict)


def canonical_json(value: JSON) -> str:
    """The text two JSON values are compared by: compact, with sorted keys."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))



class CheckpointsInMemory(MemoryBase):
    """Checkpoints live per (tenant, run_id) in ``_data.checkpoints``; their scope is checked
    against the run record on every call."""

    # helpers ---------------------------------------------------------------------------

    async def _scoped(self, tenant: str, scope: CheckpointScope) -> _RunCheckpoints:
        """The run's checkpoints (made empty on first use), or RunNotFound when the run is
        missing or lies outside ``scope``."""
        try:
            run = await cast(_RunLookup, self).get_run(tenant, scope.run_id)
        except RunNotFound:
            raise RunNotFound(run_id=scope.run_id) from None
        if (run.store, run.session_id, run.actor_id) != (
                scope.store, scope.session_id, scope.actor_id):
            raise RunNotFound(run_id=scope.run_id)
        held = self._data.checkpoints.get((tenant, scope.run_id))
        if held is None:
            held = _RunCheckpoints(run.store, run.session_id, run.actor_id)
            self._data.checkpoints[(tenant, scope.run_id)] = held
        return cast(_RunCheckpoints, held)

    async def _fenced(self, tenant: str, scope: CheckpointScope,
                      fence: Fence | None) -> _RunCheckpoints:
        """:meth:`_scoped`, once the fence (if any) is a run of the scope's session that
        holds the fence's token and is active; called under the data lock, so the check
        and the write that follows are one atomic step."""
        held = await self._scoped(tenant, scope)
        if fence is not None:
            try:
                run = await cast(_RunLookup, self).get_run(tenant, fence.run_id)
            except RunNotFound:
                raise RunNotFound(run_id=fence.run_id) from None
            if (run.store, run.session_id, run.actor_id) != (held.store, held.session_id,
                                                             held.actor_id):
                raise RunNotFound(run_id=fence.run_id)
            refusal = run_refusal(fence.run_id, RunState(run.status, run.fencing_token),
                                  fence.fencing_token)
            if refusal is not None:
                raise refusal
        return held

    def _held(self, tenant: str) -> list[tuple[str, _RunCheckpoints]]:
        return [(run_id, held) for (t, run_id), held in self._data.checkpoints.items()
                if t == tenant]

    def _drop_checkpoints_of_runs(self, tenant: str, run_ids: Sequence[str]) -> None:
        for run_id in run_ids:
            self._data.checkpoints.pop((tenant, run_id), None)

    # writes ----------------------------------------------------------------------------

    async def put_checkpoint(self, tenant: str, scope: CheckpointScope,
                             checkpoint: NewCheckpoint, fence: Fence | None,
                             now: datetime) -> CheckpointRecord:
        with self._data.lock:
            held = await self._fenced(tenant, scope, fence)
            key = (checkpoint.namespace, checkpoint.checkpoint_id)
            existing = held.entries.get(key)
            record = CheckpointRecord(
                run_id=scope.run_id, namespace=checkpoint.namespace,
                checkpoint_id=checkpoint.checkpoint_id,
                parent_checkpoint_id=checkpoint.parent_checkpoint_id,
                type_tag=checkpoint.type_tag, payload=checkpoint.payload,
                metadata={},
                create_time=existing.record.create_time if existing is not None else now,
            )
            if existing is None:
                held.entries[key] = _StoredCheckpoint(self._data.next("checkpoint"), record,
                                                      checkpoint.metadata_json)
            else:
                existing.record, existing.metadata_json = record, checkpoint.metadata_json
            return held.entries[key].with_writes()

    async def put_checkpoint_with_items(self, tenant: str, scope: CheckpointScope,
                                        checkpoint: NewCheckpoint, fence: Fence | None,
                                        items: Sequence[NewItem], first_seq: int,
                                        now: datetime) -> tuple[CheckpointRecord, list[model.Item]]:
        sessions = cast(_Appender, self)
        with self._data.lock:  # re-entered by the two writes below: one atomic step
            await self._fenced(tenant, scope, fence)
            if sessions._item_count(tenant, scope.store, scope.session_id) + 1 != first_seq:
                raise SeqConflict(store=scope.store, session_id=scope.session_id,
                                  first_seq=first_seq)
            # the append checks what it refuses (the store's embedder) before it changes
            # anything, and the put cannot fail once the fence has held
            appended = await sessions.append_items(tenant, scope.store, scope.session_id,
                                                   items, None, now)
            record = await self.put_checkpoint(tenant, scope, checkpoint, fence, now)
            return record, appended

    async def put_checkpoint_opening_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint, run_id: str,
            framework: str, thread_key: str | None, owner: str, ttl_seconds: float,
            now: datetime) -> tuple[Run, CheckpointRecord]:
        with self._data.lock:  # re-entered by the writes below: one atomic step
            # the open refuses before it changes anything; a put refused after it (a scope
            # outside the session) takes the new run away again
            run = await cast(_Opener, self).open_run(tenant, scope.store, scope.session_id,
                                                     run_id, framework, thread_key, owner,
                                                     ttl_seconds, now)
            try:
                record = await self.put_checkpoint(tenant, scope, checkpoint,
                                                   Fence(run.run_id, run.fencing_token), now)
            except BaseException:
                del self._data.runs[(tenant, run.run_id)]
                raise
            return run, record

    async def put_checkpoint_ending_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint,
            fence: Fence, status: str, step_count: int | None, items: Sequence[NewItem],
            first_seq: int | None, now: datetime) -> tuple[CheckpointRecord, list[model.Item]]:
        with self._data.lock:  # re-entered by the writes below: one atomic step
            if first_seq is not None:
                record, appended = await self.put_checkpoint_with_items(
                    tenant, scope, checkpoint, fence, items, first_seq, now)
            else:
                record, appended = await self.put_checkpoint(
                    tenant, scope, checkpoint, fence, now), []
            # the fence held just now, under the same lock: the close cannot be refused
            await cast(_Closer, self).close_run(tenant, fence.run_id, status, None,
                                                step_count, fence.fencing_token, now)
            return record, appended

    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         fence: Fence | None, now: datetime) -> None:
        with self._data.lock:
            held = await self._fenced(tenant, scope, fence)
            stored = held.entries.get((namespace, checkpoint_id))
            if stored is None:
                raise CheckpointNotFound(
                    run_id=scope.run_id, checkpoint_id=checkpoint_id,
                    namespace=namespace)
            for write in writes:
                stored.writes[(write.task_id, write.index)] = write

    # reads -----------------------------------------------------------------------------

    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        with self._data.lock:
            held = await self._scoped(tenant, scope)
            if checkpoint_id is not None:
                stored = held.entries.get((namespace, checkpoint_id))
                return stored.with_writes() if stored is not None else None
            in_namespace = [s for (ns, _), s in held.entries.items() if ns == namespace]
            if not in_namespace:
                return None
            return max(in_namespace, key=lambda s: s.ordinal).with_writes()

    async def _listed(self, tenant: str, scope: CheckpointScope, namespace: str | None,
                      metadata: Mapping[str, JSON], before: str | None,
                      after: int | None) -> list[_StoredCheckpoint]:
        """The checkpoints a listing holds, newest first (called under the data lock)."""
        wanted = {key: canonical_json(value) for key, value in metadata.items()}

        def matches(stored: _StoredCheckpoint) -> bool:
            if not wanted:
                return True
            held = json.loads(stored.metadata_json)
            return all(key in held and canonical_json(held[key]) == text
                       for key, text in wanted.items())

        held = await self._scoped(tenant, scope)
        chosen = [s for (ns, _), s in held.entries.items()
                  if namespace is None or ns == namespace]
        if before is not None:
            marks = [s.ordinal for s in chosen if s.record.checkpoint_id == before]
            if not marks:
                raise CheckpointNotFound(
                    run_id=scope.run_id, checkpoint_id=before)
            chosen = [s for s in chosen if s.ordinal < max(marks)]
        chosen = [s for s in chosen if matches(s) and (after is None or s.ordinal < after)]
        chosen.sort(key=lambda s: s.ordinal, reverse=True)
        return chosen

    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        with self._data.lock:
            chosen = await self._listed(tenant, scope, namespace, metadata, before, None)
            if limit is not None:
                chosen = chosen[:limit]
            return [s.with_writes() for s in chosen]

    async def page_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, after: int | None, limit: int,
                               max_bytes: int) -> tuple[list[CheckpointRecord], int | None]:
        with self._data.lock:
            chosen = await self._listed(tenant, scope, namespace, metadata, before, after)
            taken, more = page_cut([s.stored_bytes() for s in chosen[:limit + 1]], limit,
                                   max_bytes)
            page = chosen[:taken]
            return [s.with_writes() for s in page], page[-1].ordinal if more else None

    # deletes and copies ----------------------------------------------------------------

    async def delete_checkpoints(self, tenant: str, scope: CheckpointScope,
                                 namespace: str | None, checkpoint_ids: Sequence[str],
                                 fence: Fence | None) -> int:
        wanted = set(checkpoint_ids)
        with self._data.lock:
            held = await self._fenced(tenant, scope, fence)
            doomed = [key for key in held.entries
                      if key[1] in wanted and (namespace is None or key[0] == namespace)]
            for key in doomed:
                # a later put under this key draws a new ordinal: it is a new checkpoint
                del held.entries[key]
            return len(doomed)

    async def delete_run_checkpoints(self, tenant: str, scope: CheckpointScope) -> int:
        with self._data.lock:
            held = await self._scoped(tenant, scope)
            count = len(held.entries)
            held.entries.clear()
            return count

    async def delete_session_checkpoints(self, tenant: str, actor_id: str, store: str,
                                         session_id: str) -> int:
        with self._data.lock:
            session = self._data.sessions.get((tenant, store, session_id))
            if session is None or session.record.actor_id != actor_id:
                raise SessionNotFound(store=store, session_id=session_id)
            count = 0
            for _, held in self._held(tenant):
                if (held.store, held.session_id) == (store, session_id):
                    count += len(held.entries)
                    held.entries.clear()
            return count

    async def copy_checkpoints(self, tenant: str, source: CheckpointScope,
                               target: CheckpointScope) -> int:
        with self._data.lock:
            origin = await self._scoped(tenant, source)
            destination = await self._scoped(tenant, target)
            if origin is destination:
                return len(origin.entries)
            destination.entries.clear()
            for stored in sorted(origin.entries.values(), key=lambda s: s.ordinal):
                record = replace(stored.record, run_id=target.run_id)
                destination.entries[(record.namespace, record.checkpoint_id)] = (
                    _StoredCheckpoint(self._data.next("checkpoint"), record,
                                      stored.metadata_json, dict(stored.writes)))
            return len(destination.entries)

    # housekeeping ----------------------------------------------------------------------

    async def apply_retention(self, tenant: str, policy: model.RetentionPolicy,
                              now: datetime) -> model.RetentionReport:
        deleted = freed = 0
        with self._data.lock:
            cutoff = (now - timedelta(seconds=policy.max_age_seconds)
                      if policy.max_age_seconds is not None else None)
            for run_id, held in self._held(tenant):
                ended = False
                if policy.drop_when_run_ends:
                    try:
                        run = await cast(_RunLookup, self).get_run(tenant, run_id)
                        ended = run.status in CLOSED_RUN_STATUSES
                    except RunNotFound:
                        ended = True
                doomed: set[tuple[str, str]] = set()
                newest_first = sorted(held.entries.items(), key=lambda kv: -kv[1].ordinal)
                kept: dict[str, int] = {}
                for key, stored in newest_first:
                    kept[key[0]] = kept.get(key[0], 0) + 1
                    if (ended
                            or (policy.keep_last is not None and kept[key[0]] > policy.keep_last)
                            or (cutoff is not None and stored.record.create_time < cutoff)):
                        doomed.add(key)
                for key in doomed:
                    freed += held.entries.pop(key).stored_bytes()
                deleted += len(doomed)
        return model.RetentionReport(checkpoints_deleted=deleted, bytes_freed=freed)

    async def checkpoint_usage(self, tenant: str, run_id: str | None) -> list[RunUsage]:
        with self._data.lock:
            usage = [
                RunUsage(run_id=rid, checkpoints=len(held.entries),
                         stored_bytes=sum(s.stored_bytes() for s in held.entries.values()))
                for rid, held in self._held(tenant)
                if held.entries and (run_id is None or rid == run_id)
            ]
        usage.sort(key=lambda u: (-u.stored_bytes, u.run_id))
        return usage
