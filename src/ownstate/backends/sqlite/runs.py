"""Runs, leases and effects in SQLite.

The invariants are the database's: the partial unique index ``runs_one_active_per_session``
refuses a second running-or-awaiting run for a session, and every lease change or fenced
write is one conditional ``UPDATE`` whose ``WHERE`` clause is the check. When it changes no
row, a read in the same transaction says why (not found, stale token, closed, lease held).
Runs reference their session, and effects their run, ``ON DELETE CASCADE``: deleting a
session or a store deletes its runs and their effects.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..._ids import format_time, parse_time
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
from ._core import SqliteCore, write

__all__ = ["RUN_COLUMNS", "SCHEMA", "RunsInSqlite"]

#: This part's tables and indexes, applied by migration 2 (see schema.py).
SCHEMA: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        rid              INTEGER PRIMARY KEY,
        sid              INTEGER NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
        tenant           TEXT NOT NULL,
        run_id           TEXT NOT NULL,
        store            TEXT NOT NULL,
        session_id       TEXT NOT NULL,
        actor_id         TEXT NOT NULL,
        framework        TEXT NOT NULL,
        thread_key       TEXT,
        status           TEXT NOT NULL CHECK (status IN
                             ('running', 'awaiting_human', 'done', 'failed', 'cancelled')),
        status_since     TEXT NOT NULL,
        awaiting         TEXT,
        step_count       INTEGER NOT NULL DEFAULT 0,
        usd_cost         REAL NOT NULL DEFAULT 0,
        started_at       TEXT NOT NULL,
        ended_at         TEXT,
        lease_owner      TEXT,
        lease_expires_at TEXT,
        fencing_token    INTEGER NOT NULL DEFAULT 0,
        UNIQUE (tenant, run_id)
    )
    """,
    """CREATE UNIQUE INDEX runs_one_active_per_session ON runs (sid)
       WHERE status IN ('running', 'awaiting_human')""",
    "CREATE INDEX runs_by_session ON runs (sid)",
    "CREATE INDEX runs_by_tenant ON runs (tenant)",
    "CREATE INDEX runs_by_status ON runs (tenant, status, status_since)",
    """
    CREATE TABLE run_effects (
        rid          INTEGER NOT NULL REFERENCES runs (rid) ON DELETE CASCADE,
        tool_call_id TEXT NOT NULL,
        tenant       TEXT NOT NULL,
        result       TEXT NOT NULL,
        recorded_at  TEXT NOT NULL,
        PRIMARY KEY (rid, tool_call_id)
    ) WITHOUT ROWID
    """,
)

RUN_COLUMNS = (
    "run_id, store, session_id, actor_id, framework, thread_key, status, awaiting, "
    "step_count, usd_cost, started_at, ended_at, lease_owner, lease_expires_at, fencing_token"
)
_ACTIVE = "status IN ('running', 'awaiting_human')"


def _time(text: str | None) -> datetime | None:
    return parse_time(text) if text is not None else None


def _run(row: Sequence[Any]) -> Run:
    return Run(
        run_id=row[0], store=row[1], session_id=row[2], actor_id=row[3], framework=row[4],
        thread_key=row[5], status=row[6],
        awaiting=json.loads(row[7]) if row[7] is not None else None,
        step_count=int(row[8]), usd_cost=float(row[9]), started_at=parse_time(row[10]),
        ended_at=_time(row[11]), lease_owner=row[12], lease_expires_at=_time(row[13]),
        fencing_token=int(row[14]),
    )


def _refusal(conn: sqlite3.Connection, tenant: str, run_id: str, fencing_token: int | None,
             *, lease_needed: bool = False, claim: bool = False) -> OwnstateError:
    """Why a conditional write on the run changed nothing, read in the same transaction.

    Checked in the documented order: the run exists, the token is current, the run is
    open; then, for a heartbeat, that it holds a lease, and for a claim, who holds it.
    """
    row = conn.execute(
        "SELECT status, fencing_token, lease_owner, lease_expires_at FROM runs "
        "WHERE tenant = ? AND run_id = ?", (tenant, run_id)).fetchone()
    if row is None:
        return RunNotFound(run_id=run_id)
    status, current, owner, expires = row
    if fencing_token is not None and fencing_token != current:
        return StaleLease(
            run_id=run_id, fencing_token=fencing_token, current=current)
    if status not in ("running", "awaiting_human"):
        return RunClosed(run_id=run_id, status=status)
    if lease_needed and owner is None:
        return StaleLease(run_id=run_id,
                          fencing_token=fencing_token, current=current)
    if claim and owner is not None:
        until = parse_time(expires)
        return LeaseHeld(run_id=run_id, owner=owner, expires_at=until)
    return BackendUnavailable(f"run {run_id!r} changed in an unexpected way; retry")


class RunsInSqlite(SqliteCore):
    # runs ------------------------------------------------------------------------------

    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        expires = now + timedelta(seconds=ttl_seconds) if owner is not None else None
        token = 1 if owner is not None else 0
        stamp = format_time(now)

        def run(conn: sqlite3.Connection) -> Run:
            with write(conn):
                found = conn.execute(
                    "SELECT sid, actor_id FROM sessions "
                    "WHERE tenant = ? AND store = ? AND session_id = ?",
                    (tenant, store, session_id)).fetchone()
                if found is None:
                    raise SessionNotFound(store=store, session_id=session_id)
                sid, actor_id = found
                inserted = conn.execute(
                    "INSERT INTO runs (sid, tenant, run_id, store, session_id, actor_id, "
                    "framework, thread_key, status, status_since, started_at, lease_owner, "
                    "lease_expires_at, fencing_token) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (sid, tenant, run_id, store, session_id, actor_id, framework, thread_key,
                     stamp, stamp, owner, format_time(expires) if expires else None, token))
                if inserted.rowcount == 0:
                    raise self._open_refusal(conn, tenant, store, session_id, run_id, sid)
            return Run(
                run_id=run_id, store=store, session_id=session_id, actor_id=actor_id,
                framework=framework, thread_key=thread_key, status="running", awaiting=None,
                step_count=0, usd_cost=0.0, started_at=now, ended_at=None, lease_owner=owner,
                lease_expires_at=expires, fencing_token=token,
            )

        return await self._run(run)

    @staticmethod
    def _open_refusal(conn: sqlite3.Connection, tenant: str, store: str, session_id: str,
                      run_id: str, sid: int) -> OwnstateError:
        """Which uniqueness rule refused the insert: the run id, or the active run."""
        if conn.execute("SELECT 1 FROM runs WHERE tenant = ? AND run_id = ?",
                        (tenant, run_id)).fetchone() is not None:
            return AlreadyExists(run_id=run_id)
        active = conn.execute(f"SELECT run_id FROM runs WHERE sid = ? AND {_ACTIVE}",
                              (sid,)).fetchone()
        if active is not None:
            return ActiveRunExists(
                store=store, session_id=session_id, run_id=active[0])
        return BackendUnavailable("the run could not be stored; retry")

    async def get_run(self, tenant: str, run_id: str) -> Run:
        def run(conn: sqlite3.Connection) -> Run:
            row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE tenant = ? AND run_id = ?",
                               (tenant, run_id)).fetchone()
            if row is None:
                raise RunNotFound(run_id=run_id)
            return _run(row)

        return await self._run(run)

    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        where = ["tenant = ?"]
        params: list[Any] = [tenant]
        if store is not None and session_id is not None:
            where.append("sid = (SELECT sid FROM sessions "
                         "WHERE tenant = ? AND store = ? AND session_id = ?)")
            params.extend((tenant, store, session_id))
        elif store is not None:
            where.append("store = ?")
            params.append(store)
        elif session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if framework is not None:
            where.append("framework = ?")
            params.append(framework)
        if after is not None:
            where.append("rid < ?")
            params.append(after[0])
        sql = (f"SELECT {RUN_COLUMNS}, rid FROM runs WHERE {' AND '.join(where)} "
               "ORDER BY rid DESC LIMIT ?")
        params.append(limit + 1)

        def run(conn: sqlite3.Connection) -> tuple[list[Run], list[Any] | None]:
            rows = conn.execute(sql, params).fetchall()
            page = rows[:limit]
            cursor = [page[-1][15]] if len(rows) > limit else None
            return [_run(r) for r in page], cursor

        return await self._run(run)

    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        def run(conn: sqlite3.Connection) -> Run:
            with write(conn):
                row = conn.execute(
                    "UPDATE runs SET status = 'awaiting_human', awaiting = ?, status_since = ?, "
                    "lease_owner = NULL, lease_expires_at = NULL "
                    f"WHERE tenant = ? AND run_id = ? AND {_ACTIVE} "
                    "AND (? IS NULL OR fencing_token = ?) "
                    f"RETURNING {RUN_COLUMNS}",
                    (awaiting_json, format_time(now), tenant, run_id, fencing_token,
                     fencing_token)).fetchone()
                if row is None:
                    raise _refusal(conn, tenant, run_id, fencing_token)
                return _run(row)

        return await self._run(run)

    async def resume(self, tenant: str, run_id: str, owner: str, ttl_seconds: float,
                     now: datetime) -> Lease:
        stamp = format_time(now)
        expires = now + timedelta(seconds=ttl_seconds)

        def run(conn: sqlite3.Connection) -> Lease:
            with write(conn):
                row = conn.execute(
                    "UPDATE runs SET status = 'running', awaiting = NULL, status_since = ?, "
                    "lease_owner = ?, lease_expires_at = ?, fencing_token = fencing_token + 1 "
                    f"WHERE tenant = ? AND run_id = ? AND {_ACTIVE} "
                    "AND (lease_owner IS NULL OR lease_expires_at <= ? OR lease_owner = ?) "
                    "RETURNING fencing_token",
                    (stamp, owner, format_time(expires), tenant, run_id, stamp, owner),
                ).fetchone()
                if row is None:
                    raise _refusal(conn, tenant, run_id, None, claim=True)
                return Lease(run_id, owner, int(row[0]), expires)

        return await self._run(run)

    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)

        def run(conn: sqlite3.Connection) -> Lease:
            with write(conn):
                row = conn.execute(
                    "UPDATE runs SET lease_expires_at = ? "
                    f"WHERE tenant = ? AND run_id = ? AND {_ACTIVE} AND fencing_token = ? "
                    "AND lease_owner IS NOT NULL RETURNING lease_owner",
                    (format_time(expires), tenant, run_id, fencing_token)).fetchone()
                if row is None:
                    raise _refusal(conn, tenant, run_id, fencing_token, lease_needed=True)
                return Lease(run_id, row[0], fencing_token, expires)

        return await self._run(run)

    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        stamp = format_time(now)

        def run(conn: sqlite3.Connection) -> Run:
            with write(conn):
                row = conn.execute(
                    "UPDATE runs SET status = ?, status_since = ?, ended_at = ?, "
                    "lease_owner = NULL, lease_expires_at = NULL, usd_cost = usd_cost + ?, "
                    "step_count = coalesce(?, step_count) "
                    f"WHERE tenant = ? AND run_id = ? AND {_ACTIVE} "
                    "AND (? IS NULL OR fencing_token = ?) "
                    f"RETURNING {RUN_COLUMNS}",
                    (status, stamp, stamp, usd_cost or 0.0, step_count, tenant, run_id,
                     fencing_token, fencing_token)).fetchone()
                if row is None:
                    raise _refusal(conn, tenant, run_id, fencing_token)
                return _run(row)

        return await self._run(run)

    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        where = ["tenant = ?", "status = ?"]
        params: list[Any] = [tenant, status]
        if framework is not None:
            where.append("framework = ?")
            params.append(framework)
        if entered_before is not None:
            where.append("status_since < ?")
            params.append(format_time(entered_before))
        sql = (f"SELECT {RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)} "
               "ORDER BY status_since, rid LIMIT ?")
        params.append(limit)
        return await self._run(lambda conn: [_run(r) for r in conn.execute(sql, params)])

    # effects ---------------------------------------------------------------------------

    async def record_effect(self, tenant: str, run_id: str, tool_call_id: str,
                            result_json: str, fencing_token: int | None,
                            now: datetime) -> Effect:
        stamp = format_time(now)

        def run(conn: sqlite3.Connection) -> Effect:
            with write(conn):
                row = conn.execute(
                    "SELECT rid, status, fencing_token FROM runs WHERE tenant = ? AND run_id = ?",
                    (tenant, run_id)).fetchone()
                if row is None:
                    raise RunNotFound(run_id=run_id)
                rid, status, current = row
                if fencing_token is not None and fencing_token != current:
                    raise StaleLease(
                        run_id=run_id, fencing_token=fencing_token, current=current)
                earlier = conn.execute(
                    "SELECT result, recorded_at FROM run_effects "
                    "WHERE rid = ? AND tool_call_id = ?",
                    (rid, tool_call_id)).fetchone()
                if earlier is not None:
                    return Effect(run_id, tool_call_id, json.loads(earlier[0]),
                                  parse_time(earlier[1]), False)
                if status not in ("running", "awaiting_human"):
                    raise RunClosed(run_id=run_id,
                                    status=status)
                conn.execute(
                    "INSERT INTO run_effects (rid, tool_call_id, tenant, result, recorded_at) "
                    "VALUES (?, ?, ?, ?, ?)", (rid, tool_call_id, tenant, result_json, stamp))
            return Effect(run_id, tool_call_id, json.loads(result_json), now, True)

        return await self._run(run)

    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        def run(conn: sqlite3.Connection) -> Effect | None:
            found = conn.execute(
                "SELECT r.rid, e.result, e.recorded_at FROM runs r LEFT JOIN run_effects e "
                "ON e.rid = r.rid AND e.tool_call_id = ? WHERE r.tenant = ? AND r.run_id = ?",
                (tool_call_id, tenant, run_id)).fetchone()
            if found is None:
                raise RunNotFound(run_id=run_id)
            if found[1] is None:
                return None
            return Effect(run_id, tool_call_id, json.loads(found[1]), parse_time(found[2]),
                          False)

        return await self._run(run)
