r"""Runs, leases and effects in PostgreSQL.

The invariants are the database's, each enforced by a single statement:

- the partial unique index ``runs_one_active_per_session`` refuses a second running or
  awaiting run for a session, so ``open_run`` is one ``INSERT ... SELECT ... ON CONFLICT
  DO NOTHING`` (a concurrent opener waits on the index entry, then does nothing);
- every lease change or fenced write is one conditional ``UPDATE ... RETURNING`` whose
  ``WHERE`` clause is the check. Under READ COMMITTED a second claimer waits for the first
  to commit and then re-checks the ``WHERE`` clause against the row the first one wrote,
  so of N concurrent claimers exactly one wins.

Each of these statements commits in the round trip that sends it. When one changes no row,
a read right after says why (not found, stale token, closed, lease held); under READ
COMMITTED, a read in the same transaction would see no more than that. Runs reference their
session, and effects their run, ``ON DELETE CASCADE``: deleting a session or a store
deletes its runs and their effects.

A decision is one conditional ``UPDATE`` too, and the same statement calls ``pg_notify``
on the schema's channel (``ownstate_decided_`` and a digest of the schema name), which
PostgreSQL delivers when the write commits: every process waiting for a decision holds one
connection that ``LISTEN``\ s on it and wakes its waiters at once.

It may touch PostgreSQL through ``_core`` (``LISTEN`` on a connection of its own, which
``_core`` makes; always an async one, on an event loop); also decision waiting
(``backends._decisions``), the shared SQL (``backends._sql``), the run port, the time format
(``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ... import errors
from ..._extras import requires
from ..._ids import format_time
from ...model import Decision, Effect, Lease, Run
from .. import _sql
from .._decisions import Listener, Signalled
from ..ports.runs import RunState, decision_refusal, opening_lease, run_refusal
from ._core import Cursor
from ._statistics import Analyzing

with requires("postgres", "the PostgreSQL backend"):
    from psycopg import sql

__all__ = ["RunsInPostgres", "open_refusal", "opened_run", "opening_args", "opening_insert"]


def _run(row: Sequence[Any]) -> Run:
    return Run(
        run_id=row[0], store=row[1], session_id=row[2], actor_id=row[3], framework=row[4],
        thread_key=row[5], status=row[6], awaiting=row[7], step_count=int(row[8]),
        usd_cost=float(row[9]), started_at=row[10], ended_at=row[11], lease_owner=row[12],
        lease_expires_at=row[13], fencing_token=int(row[14]),
        decision=Decision.from_json(row[15]) if row[15] is not None else None,
        decisions=tuple(Decision.from_json(d) for d in row[16] or ()),
    )


def decision_channel(schema: str) -> str:
    """The ``NOTIFY`` channel on which decisions on runs in ``schema`` are announced."""
    return "ownstate_decided_" + hashlib.sha256(schema.encode()).hexdigest()[:16]


async def _refusal(cur: Cursor, tenant: str, run_id: str, fencing_token: int | None, *,
                   lease_needed: bool = False, claimant: str | None = None,
                   now: datetime | None = None) -> errors.OwnstateError:
    """Why a conditional write on the run changed nothing, read right after it."""
    await cur.execute(_sql.RUN_STATE.format(p="%s"), (tenant, run_id))
    row = await cur.fetchone()
    state = None if row is None else RunState(row[0], int(row[1]), row[2], row[3])
    refusal = run_refusal(run_id, state, fencing_token, lease_needed=lease_needed,
                          claimant=claimant, now=now)
    return refusal or errors.BackendUnavailable(
        f"run {run_id!r} changed in an unexpected way; retry")


def opening_insert(gate: str = "", returning: str = "actor_id") -> str:
    """The ``INSERT`` that opens run ``%(new_run)s`` in session ``%(session)s`` (of
    ``%(tenant)s`` and ``%(store)s``), running, leased as ``%(owner)s``, ``%(expires)s``
    and ``%(new_token)s`` say (``opening_lease``); when ``gate`` (``AND ...``) holds too.
    It stores nothing for a session that is not there, a run id that is taken or a session
    with an active run, and returns ``returning`` of the run it stored."""
    return (
        "INSERT INTO runs (sid, tenant, run_id, store, session_id, actor_id, framework, "
        "thread_key, status, status_since, started_at, lease_owner, lease_expires_at, "
        "fencing_token) SELECT sid, tenant, %(new_run)s, store, session_id, actor_id, "
        "%(framework)s, %(thread_key)s, 'running', %(now)s, %(now)s, %(owner)s, "
        "%(expires)s, %(new_token)s FROM sessions WHERE tenant = %(tenant)s "
        f"AND store = %(store)s AND session_id = %(session)s {gate}"
        f"ON CONFLICT DO NOTHING RETURNING {returning}")


def opening_args(tenant: str, store: str, session_id: str, run_id: str, framework: str,
                 thread_key: str | None, owner: str | None, ttl_seconds: float,
                 now: datetime) -> dict[str, Any]:
    """The parameters of :func:`opening_insert`."""
    expires, token = opening_lease(owner, ttl_seconds, now)
    return {"tenant": tenant, "store": store, "session": session_id, "new_run": run_id,
            "framework": framework, "thread_key": thread_key, "owner": owner,
            "expires": expires, "new_token": token, "now": now}


def opened_run(args: dict[str, Any], actor_id: str) -> Run:
    """The run :func:`opening_insert` stored with ``args``."""
    return Run(
        run_id=args["new_run"], store=args["store"], session_id=args["session"],
        actor_id=actor_id, framework=args["framework"], thread_key=args["thread_key"],
        status="running", awaiting=None, step_count=0, usd_cost=0.0, started_at=args["now"],
        ended_at=None, lease_owner=args["owner"], lease_expires_at=args["expires"],
        fencing_token=args["new_token"],
    )


async def open_refusal(cur: Cursor, tenant: str, store: str, session_id: str,
                       run_id: str) -> errors.OwnstateError | None:
    """Why :func:`opening_insert` stored nothing: no session, the run id is taken, or the
    session already has an active run; None when none of these holds (its gate did not)."""
    await cur.execute(
        "SELECT s.sid, "
        " EXISTS (SELECT 1 FROM runs WHERE tenant = %s AND run_id = %s), "
        f" (SELECT run_id FROM runs r WHERE r.sid = s.sid AND {_sql.ACTIVE}) "
        "FROM sessions s WHERE s.tenant = %s AND s.store = %s AND s.session_id = %s",
        (tenant, run_id, tenant, store, session_id))
    row = await cur.fetchone()
    if row is None:
        return errors.SessionNotFound(store=store, session_id=session_id)
    if row[1]:
        return errors.AlreadyExists(run_id=run_id)
    if row[2] is not None:
        return errors.ActiveRunExists(store=store, session_id=session_id, run_id=row[2])
    return None


_OPEN = opening_insert(returning="actor_id, rid")
_CLOSE = _sql.close_run_set("%s", "%s", "%s::double precision", "%s::bigint")


class RunsInPostgres(Analyzing, Signalled):
    """The runs port on PostgreSQL."""

    # runs ------------------------------------------------------------------------------

    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        args = opening_args(tenant, store, session_id, run_id, framework, thread_key, owner,
                            ttl_seconds, now)

        async def run(cur: Cursor) -> tuple[Run, int]:
            await cur.execute(_OPEN, args, last=True)
            row = await cur.fetchone()
            if row is None:
                raise (await open_refusal(cur, tenant, store, session_id, run_id)
                       or errors.BackendUnavailable("the run could not be stored; retry"))
            return opened_run(args, row[0]), int(row[1])

        opened, rid = await self._write(tenant, run)
        await self._run_opened(rid)
        return opened

    async def get_run(self, tenant: str, run_id: str) -> Run:
        async def run(cur: Cursor) -> Run:
            await cur.execute(
                f"SELECT {_sql.RUN_COLUMNS} FROM runs WHERE tenant = %s AND run_id = %s",
                (tenant, run_id))
            row = await cur.fetchone()
            if row is None:
                raise errors.RunNotFound(run_id=run_id)
            return _run(row)

        return await self._read(tenant, run)

    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        where, params = _sql.runs_filter("%s", tenant, store, session_id, status, framework,
                                    after)
        query = f"SELECT {_sql.RUN_COLUMNS}, rid FROM runs WHERE {where} ORDER BY rid DESC LIMIT %s"
        params.append(limit + 1)

        async def run(cur: Cursor) -> tuple[list[Run], list[Any] | None]:
            await cur.execute(query, params)
            rows = await cur.fetchall()
            page = rows[:limit]
            cursor = [page[-1][_sql.RUN_ROWID]] if len(rows) > limit else None
            return [_run(r) for r in page], cursor

        return await self._read(tenant, run)

    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        async def run(cur: Cursor) -> Run:
            await cur.execute(
                "UPDATE runs SET status = 'awaiting_human', awaiting = %s::json, "
                "status_since = %s, lease_owner = NULL, lease_expires_at = NULL, decision = NULL "
                f"WHERE tenant = %s AND run_id = %s AND {_sql.ACTIVE} "
                "AND (%s::bigint IS NULL OR fencing_token = %s) "
                f"RETURNING {_sql.RUN_COLUMNS}",
                (awaiting_json, now, tenant, run_id, fencing_token, fencing_token), last=True)
            row = await cur.fetchone()
            if row is None:
                raise await _refusal(cur, tenant, run_id, fencing_token)
            return _run(row)

        return await self._write(tenant, run)

    async def resume(self, tenant: str, run_id: str, owner: str, ttl_seconds: float,
                     now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)

        async def run(cur: Cursor) -> Lease:
            await cur.execute(
                "UPDATE runs SET status = 'running', awaiting = NULL, status_since = %s, "
                "lease_owner = %s, lease_expires_at = %s, fencing_token = fencing_token + 1 "
                f"WHERE tenant = %s AND run_id = %s AND {_sql.ACTIVE} "
                "AND (lease_owner IS NULL OR lease_expires_at <= %s OR lease_owner = %s) "
                "RETURNING fencing_token",
                (now, owner, expires, tenant, run_id, now, owner), last=True)
            row = await cur.fetchone()
            if row is None:
                raise await _refusal(cur, tenant, run_id, None, claimant=owner, now=now)
            return Lease(run_id, owner, int(row[0]), expires)

        return await self._write(tenant, run)

    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)

        async def run(cur: Cursor) -> Lease:
            await cur.execute(
                "UPDATE runs SET lease_expires_at = %s "
                f"WHERE tenant = %s AND run_id = %s AND {_sql.ACTIVE} AND fencing_token = %s "
                "AND lease_owner IS NOT NULL RETURNING lease_owner",
                (expires, tenant, run_id, fencing_token), last=True)
            row = await cur.fetchone()
            if row is None:
                raise await _refusal(cur, tenant, run_id, fencing_token, lease_needed=True)
            return Lease(run_id, row[0], fencing_token, expires)

        return await self._write(tenant, run)

    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        async def run(cur: Cursor) -> Run:
            await cur.execute(
                f"UPDATE runs SET {_CLOSE} WHERE tenant = %s AND run_id = %s AND {_sql.ACTIVE} "
                "AND (%s::bigint IS NULL OR fencing_token = %s) "
                f"RETURNING {_sql.RUN_COLUMNS}",
                (status, now, now, usd_cost or 0.0, step_count, tenant, run_id,
                 fencing_token, fencing_token), last=True)
            row = await cur.fetchone()
            if row is None:
                raise await _refusal(cur, tenant, run_id, fencing_token)
            return _run(row)

        return await self._write(tenant, run)

    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        where, params = _sql.outstanding_filter("%s", tenant, status, framework, entered_before)
        query = (f"SELECT {_sql.RUN_COLUMNS} FROM runs WHERE {where} "
                 "ORDER BY status_since, rid LIMIT %s")
        params.append(limit)

        async def run(cur: Cursor) -> list[Run]:
            await cur.execute(query, params)
            return [_run(r) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    # decisions -------------------------------------------------------------------------

    async def decide(self, tenant: str, run_id: str, decision: Decision) -> Run:
        text = json.dumps(decision.to_json(), separators=(",", ":"))

        async def run(cur: Cursor) -> Run:
            await cur.execute(
                "WITH decided AS (UPDATE runs SET decision = %s::jsonb, "
                "decisions = coalesce(decisions, '[]'::jsonb) || jsonb_build_array(%s::jsonb) "
                "WHERE tenant = %s AND run_id = %s AND status = 'awaiting_human' "
                f"AND decision IS NULL RETURNING {_sql.RUN_COLUMNS}) "
                "SELECT *, pg_notify(%s, '') FROM decided",
                (text, text, tenant, run_id, decision_channel(self.schema)), last=True)
            row = await cur.fetchone()
            if row is None:
                await cur.execute("SELECT status, decision ->> 'outcome' FROM runs "
                                  "WHERE tenant = %s AND run_id = %s", (tenant, run_id))
                found = await cur.fetchone()
                raise decision_refusal(run_id, found[0] if found else None,
                                       found[1] if found else None)
            return _run(row)

        decided = await self._write(tenant, run)
        self.decision_signal.fire()
        return decided

    async def list_awaiting(self, tenant: str, *, decided: bool, framework: str | None,
                            stores: frozenset[str] | None, limit: int,
                            after: Sequence[Any] | None
                            ) -> tuple[list[Run], list[Any] | None]:
        where, params = _sql.awaiting_filter("%s", tenant, decided, framework, stores, after,
                                        time_p="%s::timestamptz")
        query = (f"SELECT {_sql.RUN_COLUMNS}, rid, status_since FROM runs WHERE {where} "
                 "ORDER BY status_since, rid LIMIT %s")
        params.append(limit + 1)

        async def run(cur: Cursor) -> tuple[list[Run], list[Any] | None]:
            await cur.execute(query, params)
            rows = await cur.fetchall()
            page = rows[:limit]
            cursor = ([format_time(page[-1][_sql.RUN_ROWID + 1]), page[-1][_sql.RUN_ROWID]]
                      if len(rows) > limit else None)
            return [_run(r) for r in page], cursor

        return await self._read(tenant, run)

    def _decision_wait_bound(self) -> float:
        return 5.0  # announced; the bound only covers a listener that lost its connection

    def _decision_listener(self) -> Listener:
        return self.announced_by(self._listen_for_decisions)

    async def _listen_for_decisions(self, ready: Callable[[], None],
                                    fire: Callable[[], None]) -> None:
        # on an event loop, even for an inline backend (whose listener has a loop thread)
        conn = await self._connect(inline=False)
        if conn is None:
            return  # a pool that makes its settings on demand: waiters poll
        async with conn:
            await conn.execute(sql.SQL("LISTEN {}").format(
                sql.Identifier(decision_channel(self.schema))))
            ready()
            async for _ in conn.notifies():
                fire()

    # effects ---------------------------------------------------------------------------

    async def record_effect(self, tenant: str, run_id: str, tool_call_id: str,
                            result_json: str, fencing_token: int | None,
                            now: datetime) -> Effect:
        async def run(cur: Cursor) -> Effect:
            # The row lock orders this write after any claim in flight, so the token
            # checked here is still current when the effect commits.
            await cur.execute(
                "SELECT r.rid, r.status, r.fencing_token, e.result, e.recorded_at "
                "FROM runs r LEFT JOIN run_effects e "
                "ON e.rid = r.rid AND e.tool_call_id = %s "
                "WHERE r.tenant = %s AND r.run_id = %s FOR NO KEY UPDATE OF r",
                (tool_call_id, tenant, run_id))
            row = await cur.fetchone()
            state = None if row is None else RunState(row[1], int(row[2]))
            refusal = run_refusal(run_id, state, fencing_token, ended_ok=True)
            if refusal is not None:
                raise refusal
            assert row is not None  # a missing run is refused
            rid, _, _, earlier, recorded_at = row
            if recorded_at is not None:
                return Effect(run_id, tool_call_id, earlier, recorded_at, False)
            refusal = run_refusal(run_id, state, None)
            if refusal is not None:
                raise refusal
            await cur.execute(
                "INSERT INTO run_effects (rid, tool_call_id, tenant, result, recorded_at) "
                "VALUES (%s, %s, %s, %s::json, %s) RETURNING result",
                (rid, tool_call_id, tenant, result_json, now))
            stored = await cur.fetchone()
            assert stored is not None
            return Effect(run_id, tool_call_id, stored[0], now, True)

        return await self._write(tenant, run)

    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        async def run(cur: Cursor) -> Effect | None:
            await cur.execute(
                "SELECT r.rid, e.result, e.recorded_at FROM runs r LEFT JOIN run_effects e "
                "ON e.rid = r.rid AND e.tool_call_id = %s "
                "WHERE r.tenant = %s AND r.run_id = %s",
                (tool_call_id, tenant, run_id))
            found = await cur.fetchone()
            if found is None:
                raise errors.RunNotFound(run_id=run_id)
            if found[2] is None:
                return None
            return Effect(run_id, tool_call_id, found[1], found[2], False)

        return await self._read(tenant, run)
