"""Runs, leases and effects in PostgreSQL.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ...errors import (
    ActiveRunExists,
    AlreadyExists,
    BackendUnavailable,
    LeaseHeld,
    OwnstateError,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StaleLease,
)
from ...model import Effect, Lease, Run
from ._core import Cursor, PostgresCore

__all__ = ["RUN_COLUMNS", "SCHEMA", "TENANT_TABLES", "RunsInPostgres"]

#: This part's tables and indexes, applied by migration 2 (see schema.py).
SCHEMA: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        rid              bigserial PRIMARY KEY,
        sid              bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
        tenant           text NOT NULL,
        run_id           text NOT NULL,
        store            text NOT NULL,
        session_id       text NOT NULL,
        actor_id         text NOT NULL,
        framework        text NOT NULL,
        thread_key       text,
        status           text NOT NULL CHECK (status IN
                             ('running', 'awaiting_human', 'done', 'failed', 'cancelled')),
        status_since     timestamptz NOT NULL,
        awaiting         json,
        step_count       bigint NOT NULL DEFAULT 0,
        usd_cost         double precision NOT NULL DEFAULT 0,
        started_at       timestamptz NOT NULL,
        ended_at         timestamptz,
        lease_owner      text,
        lease_expires_at timestamptz,
        fencing_token    bigint NOT NULL DEFAULT 0,
        UNIQUE (tenant, run_id)
    )
    """,
    """CREATE UNIQUE INDEX runs_one_active_per_session ON runs (sid)
       WHERE status IN ('running', 'awaiting_human')""",
    "CREATE INDEX runs_by_session ON runs (sid)",
    "CREATE INDEX runs_by_tenant ON runs (tenant, rid)",
    "CREATE INDEX runs_by_status ON runs (tenant, status, status_since, rid)",
    """
    CREATE TABLE run_effects (
        rid          bigint NOT NULL REFERENCES runs (rid) ON DELETE CASCADE,
        tool_call_id text NOT NULL,
        tenant       text NOT NULL,
        result       json NOT NULL,
        recorded_at  timestamptz NOT NULL,
        PRIMARY KEY (rid, tool_call_id)
    )
    """,
)

#: Tables whose rows carry a tenant and get the row-level security policy.
TENANT_TABLES = ("runs", "run_effects")

RUN_COLUMNS = (
    "run_id, store, session_id, actor_id, framework, thread_key, status, awaiting, "
    "step_count, usd_cost, started_at, ended_at, lease_owner, lease_expires_at, fencing_token"
)
_ACTIVE = "status IN ('running', 'awaiting_human')"


def _run(row: Sequence[Any]) -> Run:
    return Run(
        run_id=row[0], store=row[1], session_id=row[2], actor_id=row[3], framework=row[4],
        thread_key=row[5], status=row[6], awaiting=row[7], step_count=int(row[8]),
        usd_cost=float(row[9]), started_at=row[10], ended_at=row[11], lease_owner=row[12],
        lease_expires_at=row[13], fencing_token=int(row[14]),
    )


def _stale(run_id: str, fencing_token: int | None, current: int) -> StaleLease:
    return StaleLease(
        run_id=run_id, fencing_token=fencing_token, current=current)


async def _refusal(cur: Cursor, tenant: str, run_id: str, fencing_token: int | None, *,
                   lease_needed: bool = False, claim: bool = False) -> OwnstateError:
    """Why a conditional write on the run changed nothing, read in the same transaction.

    Checked in the documented order: the run exists, the token is current, the run is
    open; then, for a heartbeat, that it holds a lease, and for a claim, who holds it.
    """
    await cur.execute(
        "SELECT status, fencing_token, lease_owner, lease_expires_at FROM runs "
        "WHERE tenant = %s AND run_id = %s", (tenant, run_id))
    row = await cur.fetchone()
    if row is None:
        return RunNotFound(run_id=run_id)
    status, current, owner, expires = row
    if fencing_token is not None and fencing_token != current:
        return _stale(run_id, fencing_token, current)
    if status not in ("running", "awaiting_human"):
        return RunClosed(run_id=run_id, status=status)
    if lease_needed and owner is None:
        return StaleLease(run_id=run_id,
                          fencing_token=fencing_token, current=current)
    if claim and owner is not None:
        return LeaseHeld(run_id=run_id, owner=owner, expires_at=expires)
    return BackendUnavailable(f"run {run_id!r} changed in an unexpected way; retry")


class RunsInPostgres(PostgresCore):
    """The runs port on PostgreSQL."""

    # runs ------------------------------------------------------------------------------

    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        expires = now + timedelta(seconds=ttl_seconds) if owner is not None else None
        token = 1 if owner is not None else 0

        async def run(cur: Cursor) -> Run:
            await cur.execute(
                "INSERT INTO runs (sid, tenant, run_id, store, session_id, actor_id, "
                "framework, thread_key, status, status_since, started_at, lease_owner, "
                "lease_expires_at, fencing_token) "
                "SELECT sid, tenant, %s, store, session_id, actor_id, %s, %s, 'running', "
                "%s, %s, %s, %s, %s FROM sessions "
                "WHERE tenant = %s AND store = %s AND session_id = %s "
                "ON CONFLICT DO NOTHING RETURNING actor_id",
                (run_id, framework, thread_key, now, now, owner, expires, token,
                 tenant, store, session_id), last=True)
            row = await cur.fetchone()
            if row is None:
                raise await self._open_refusal(cur, tenant, store, session_id, run_id)
            return Run(
                run_id=run_id, store=store, session_id=session_id, actor_id=row[0],
                framework=framework, thread_key=thread_key, status="running", awaiting=None,
                step_count=0, usd_cost=0.0, started_at=now, ended_at=None, lease_owner=owner,
                lease_expires_at=expires, fencing_token=token,
            )

        return await self._write(tenant, run)

    @staticmethod
    async def _open_refusal(cur: Cursor, tenant: str, store: str, session_id: str,
                            run_id: str) -> OwnstateError:
        """Why the insert stored nothing: no session, the run id is taken, or the session
        already has an active run."""
        await cur.execute(
            "SELECT s.sid, "
            " EXISTS (SELECT 1 FROM runs WHERE tenant = %s AND run_id = %s), "
            f" (SELECT run_id FROM runs r WHERE r.sid = s.sid AND {_ACTIVE}) "
            "FROM sessions s WHERE s.tenant = %s AND s.store = %s AND s.session_id = %s",
            (tenant, run_id, tenant, store, session_id))
        row = await cur.fetchone()
        if row is None:
            return SessionNotFound(store=store, session_id=session_id)
        if row[1]:
            return AlreadyExists(run_id=run_id)
        if row[2] is not None:
            return ActiveRunExists(
                store=store, session_id=session_id, run_id=row[2])
        return BackendUnavailable("the run could not be stored; retry")

    async def get_run(self, tenant: str, run_id: str) -> Run:
        async def run(cur: Cursor) -> Run:
            await cur.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE tenant = %s AND run_id = %s",
                              (tenant, run_id))
            row = await cur.fetchone()
            if row is None:
                raise RunNotFound(run_id=run_id)
            return _run(row)

        return await self._read(tenant, run)

    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        where = ["tenant = %s"]
        params: list[Any] = [tenant]
        if store is not None and session_id is not None:
            where.append("sid = (SELECT sid FROM sessions "
                         "WHERE tenant = %s AND store = %s AND session_id = %s)")
            params.extend((tenant, store, session_id))
        elif store is not None:
            where.append("store = %s")
            params.append(store)
        elif session_id is not None:
            where.append("session_id = %s")
            params.append(session_id)
        if status is not None:
            where.append("status = %s")
            params.append(status)
        if framework is not None:
            where.append("framework = %s")
            params.append(framework)
        if after is not None:
            where.append("rid < %s")
            params.append(int(after[0]))
        query = (f"SELECT {RUN_COLUMNS}, rid FROM runs WHERE {' AND '.join(where)} "
                 "ORDER BY rid DESC LIMIT %s")
        params.append(limit + 1)

        async def run(cur: Cursor) -> tuple[list[Run], list[Any] | None]:
            await cur.execute(query, params)
            rows = await cur.fetchall()
            page = rows[:limit]
            cursor = [page[-1][15]] if len(rows) > limit else None
            return [_run(r) for r in page], cursor

        return await self._read(tenant, run)

    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        async def run(cur: Cursor) -> Run:
            await cur.execute(
                "UPDATE runs SET status = 'awaiting_human', awaiting = %s::json, "
                "status_since = %s, lease_owner = NULL, lease_expires_at = NULL "
                f"WHERE tenant = %s AND run_id = %s AND {_ACTIVE} "
                "AND (%s::bigint IS NULL OR fencing_token = %s) "
                f"RETURNING {RUN_COLUMNS}",
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
                f"WHERE tenant = %s AND run_id = %s AND {_ACTIVE} "
                "AND (lease_owner IS NULL OR lease_expires_at <= %s OR lease_owner = %s) "
                "RETURNING fencing_token",
                (now, owner, expires, tenant, run_id, now, owner), last=True)
            row = await cur.fetchone()
            if row is None:
                raise await _refusal(cur, tenant, run_id, None, claim=True)
            return Lease(run_id, owner, int(row[0]), expires)

        return await self._write(tenant, run)

    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)

        async def run(cur: Cursor) -> Lease:
            await cur.execute(
                "UPDATE runs SET lease_expires_at = %s "
                f"WHERE tenant = %s AND run_id = %s AND {_ACTIVE} AND fencing_token = %s "
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
                "UPDATE runs SET status = %s, status_since = %s, ended_at = %s, "
                "lease_owner = NULL, lease_expires_at = NULL, "
                "usd_cost = usd_cost + %s::double precision, "
                "step_count = coalesce(%s::bigint, step_count) "
                f"WHERE tenant = %s AND run_id = %s AND {_ACTIVE} "
                "AND (%s::bigint IS NULL OR fencing_token = %s) "
                f"RETURNING {RUN_COLUMNS}",
                (status, now, now, usd_cost or 0.0, step_count, tenant, run_id,
                 fencing_token, fencing_token), last=True)
            row = await cur.fetchone()
            if row is None:
                raise await _refusal(cur, tenant, run_id, fencing_token)
            return _run(row)

        return await self._write(tenant, run)

    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        where = ["tenant = %s", "status = %s"]
        params: list[Any] = [tenant, status]
        if framework is not None:
            where.append("framework = %s")
            params.append(framework)
        if entered_before is not None:
            where.append("status_since < %s")
            params.append(entered_before)
        query = (f"SELECT {RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)} "
                 "ORDER BY status_since, rid LIMIT %s")
        params.append(limit)

        async def run(cur: Cursor) -> list[Run]:
            await cur.execute(query, params)
            return [_run(r) for r in await cur.fetchall()]

        return await self._read(tenant, run)

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
            if row is None:
                raise RunNotFound(run_id=run_id)
            rid, status, current, earlier, recorded_at = row
            if fencing_token is not None and fencing_token != current:
                raise _stale(run_id, fencing_token, current)
            if recorded_at is not None:
                return Effect(run_id, tool_call_id, earlier, recorded_at, False)
            if status not in ("running", "awaiting_human"):
                raise RunClosed(run_id=run_id,
                                status=status)
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
                raise RunNotFound(run_id=run_id)
            if found[2] is None:
                return None
            return Effect(run_id, tool_call_id, found[1], found[2], False)

        return await self._read(tenant, run)
