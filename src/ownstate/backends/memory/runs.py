"""Runs, leases and effects, in memory.

``_data.runs`` maps ``(tenant, run_id)`` to a :class:`_StoredRun` (the current
:class:`~ownstate.model.Run` record, its creation order and when it entered its status);
``_data.effects`` maps ``(tenant, run_id, tool_call_id)`` to ``(result_json, recorded_at)``.
Every method works under the data lock, so each check and the write it guards are one
atomic step.

It may touch the in-memory data (``_data``), the run port, decision waiting
(``backends._decisions``), the time format (``ownstate._ids``), the model and errors,
nothing else.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ..._ids import format_time
from ...errors import ActiveRunExists, AlreadyExists, RunNotFound, SessionNotFound
from ...model import ACTIVE_RUN_STATUSES, Decision, Effect, Lease, Run
from .._decisions import Signalled
from ..ports.runs import RunState, decision_refusal, opening_lease, run_refusal
from ._data import MemoryBase

__all__ = ["RunsInMemory"]


@dataclass(slots=True)
class _StoredRun:
    record: Run
    ordinal: int
    since: datetime


def _out(run: Run) -> Run:
    """The record as returned: a caller changing its ``awaiting`` or a decision's payload
    cannot reach the store."""
    if run.awaiting is None and not run.decisions:
        return run
    return replace(run, awaiting=copy.deepcopy(run.awaiting),
                   decision=copy.deepcopy(run.decision), decisions=copy.deepcopy(run.decisions))


def _undecided(run: Run) -> bool:
    return run.status != "awaiting_human" or run.decision is None


class RunsInMemory(MemoryBase, Signalled):
    # helpers ---------------------------------------------------------------------------

    def _stored_run(self, tenant: str, run_id: str) -> _StoredRun:
        stored: _StoredRun | None = self._data.runs.get((tenant, run_id))
        if stored is None:
            raise RunNotFound(run_id=run_id)
        return stored

    def _writable(self, tenant: str, run_id: str, fencing_token: int | None, *,
                  ended_ok: bool = False, lease_needed: bool = False,
                  claimant: str | None = None, now: datetime | None = None) -> _StoredRun:
        """The stored run, once :func:`run_refusal` lets a write on it through."""
        stored: _StoredRun | None = self._data.runs.get((tenant, run_id))
        run = stored.record if stored is not None else None
        state = None if run is None else RunState(run.status, run.fencing_token,
                                                  run.lease_owner, run.lease_expires_at)
        refusal = run_refusal(run_id, state, fencing_token, ended_ok=ended_ok,
                              lease_needed=lease_needed, claimant=claimant, now=now)
        if refusal is not None:
            raise refusal
        assert stored is not None  # a missing run is refused
        return stored

    def _drop_runs_of_sessions(self, tenant: str, store: str,
                               session_ids: Sequence[str]) -> None:
        doomed = set(session_ids)
        run_ids = [run_id for (t, run_id), stored in self._data.runs.items()
                   if t == tenant and stored.record.store == store
                   and stored.record.session_id in doomed]
        gone = set(run_ids)
        for run_id in run_ids:
            del self._data.runs[(tenant, run_id)]
        for key in [k for k in self._data.effects if k[0] == tenant and k[1] in gone]:
            del self._data.effects[key]
        self._drop_checkpoints_of_runs(tenant, run_ids)

    # runs ------------------------------------------------------------------------------

    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        with self._data.lock:
            session = self._data.sessions.get((tenant, store, session_id))
            if session is None:
                raise SessionNotFound(store=store, session_id=session_id)
            if (tenant, run_id) in self._data.runs:
                raise AlreadyExists(run_id=run_id)
            for (t, _), other in self._data.runs.items():
                r = other.record
                if (t == tenant and r.store == store and r.session_id == session_id
                        and r.status in ACTIVE_RUN_STATUSES):
                    raise ActiveRunExists(
                        store=store, session_id=session_id, run_id=r.run_id)
            expires, token = opening_lease(owner, ttl_seconds, now)
            run = Run(
                run_id=run_id, store=store, session_id=session_id,
                actor_id=session.record.actor_id, framework=framework, thread_key=thread_key,
                status="running", awaiting=None, step_count=0, usd_cost=0.0, started_at=now,
                ended_at=None, lease_owner=owner,
                lease_expires_at=expires, fencing_token=token,
            )
            self._data.runs[(tenant, run_id)] = _StoredRun(run, self._data.next("runs"), now)
            return run

    async def get_run(self, tenant: str, run_id: str) -> Run:
        with self._data.lock:
            return _out(self._stored_run(tenant, run_id).record)

    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        with self._data.lock:
            chosen = sorted(
                (s for (t, _), s in self._data.runs.items()
                 if t == tenant
                 and (store is None or s.record.store == store)
                 and (session_id is None or s.record.session_id == session_id)
                 and (status is None or s.record.status == status)
                 and (framework is None or s.record.framework == framework)
                 and (after is None or s.ordinal < after[0])),
                key=lambda s: s.ordinal, reverse=True)
            page = chosen[:limit]
            cursor = [page[-1].ordinal] if len(chosen) > limit else None
            return [_out(s.record) for s in page], cursor

    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        with self._data.lock:
            stored = self._writable(tenant, run_id, fencing_token)
            stored.record = replace(stored.record, status="awaiting_human",
                                    awaiting=json.loads(awaiting_json), lease_owner=None,
                                    lease_expires_at=None, decision=None)
            stored.since = now
            return _out(stored.record)

    async def resume(self, tenant: str, run_id: str, owner: str, ttl_seconds: float,
                     now: datetime) -> Lease:
        with self._data.lock:
            stored = self._writable(tenant, run_id, None, claimant=owner, now=now)
            run = stored.record
            expires = now + timedelta(seconds=ttl_seconds)
            stored.record = replace(run, status="running", awaiting=None, lease_owner=owner,
                                    lease_expires_at=expires,
                                    fencing_token=run.fencing_token + 1)
            stored.since = now
            return Lease(run_id, owner, run.fencing_token + 1, expires)

    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        with self._data.lock:
            stored = self._writable(tenant, run_id, fencing_token, lease_needed=True)
            run = stored.record
            assert run.lease_owner is not None
            expires = now + timedelta(seconds=ttl_seconds)
            stored.record = replace(run, lease_expires_at=expires)
            return Lease(run_id, run.lease_owner, run.fencing_token, expires)

    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        with self._data.lock:
            stored = self._writable(tenant, run_id, fencing_token)
            run = stored.record
            stored.record = replace(
                run, status=status, ended_at=now, lease_owner=None, lease_expires_at=None,
                usd_cost=run.usd_cost + (usd_cost or 0.0),
                step_count=run.step_count if step_count is None else step_count,
            )
            stored.since = now
            return _out(stored.record)

    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        with self._data.lock:
            chosen = sorted(
                (s for (t, _), s in self._data.runs.items()
                 if t == tenant and s.record.status == status and _undecided(s.record)
                 and (framework is None or s.record.framework == framework)
                 and (entered_before is None or s.since < entered_before)),
                key=lambda s: (s.since, s.ordinal))
            return [_out(s.record) for s in chosen[:limit]]

    # decisions -------------------------------------------------------------------------

    async def decide(self, tenant: str, run_id: str, decision: Decision) -> Run:
        with self._data.lock:
            stored = self._data.runs.get((tenant, run_id))
            run = stored.record if stored is not None else None
            if run is None or run.status != "awaiting_human" or run.decision is not None:
                raise decision_refusal(run_id, run.status if run else None,
                                       run.decision.outcome if run and run.decision else None)
            assert stored is not None
            kept = copy.deepcopy(decision)
            stored.record = replace(run, decision=kept, decisions=(*run.decisions, kept))
            out = _out(stored.record)
        self.decision_signal.fire()
        return out

    async def list_awaiting(self, tenant: str, *, decided: bool, framework: str | None,
                            stores: frozenset[str] | None, limit: int,
                            after: Sequence[Any] | None
                            ) -> tuple[list[Run], list[Any] | None]:
        start = (str(after[0]), int(after[1])) if after is not None else None
        with self._data.lock:
            chosen = sorted(
                ((format_time(s.since), s.ordinal, s.record)
                 for (t, _), s in self._data.runs.items()
                 if t == tenant and s.record.status == "awaiting_human"
                 and (s.record.decision is not None) == decided
                 and (framework is None or s.record.framework == framework)
                 and (stores is None or s.record.store in stores)),
                key=lambda entry: (entry[0], entry[1]))
            if start is not None:
                chosen = [e for e in chosen if (e[0], e[1]) > start]
            page = chosen[:limit]
            cursor = [page[-1][0], page[-1][1]] if len(chosen) > limit else None
            return [_out(run) for _, _, run in page], cursor

    # effects ---------------------------------------------------------------------------

    async def record_effect(self, tenant: str, run_id: str, tool_call_id: str,
                            result_json: str, fencing_token: int | None,
                            now: datetime) -> Effect:
        with self._data.lock:
            self._writable(tenant, run_id, fencing_token, ended_ok=True)
            key = (tenant, run_id, tool_call_id)
            earlier = self._data.effects.get(key)
            if earlier is not None:
                return Effect(run_id, tool_call_id, json.loads(earlier[0]), earlier[1], False)
            self._writable(tenant, run_id, None)
            self._data.effects[key] = (result_json, now)
            return Effect(run_id, tool_call_id, json.loads(result_json), now, True)

    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        with self._data.lock:
            self._stored_run(tenant, run_id)
            earlier = self._data.effects.get((tenant, run_id, tool_call_id))
            if earlier is None:
                return None
            return Effect(run_id, tool_call_id, json.loads(earlier[0]), earlier[1], False)
