"""Runs, leases and effects in SQLite.

The invariants are the database's: the partial unique index ``runs_one_active_per_session``
refuses a second running-or-awaiting run for a session, and every lease change or fenced
write is one conditional ``UPDATE`` whose ``WHERE`` clause is the check. When it changes no
row, a read in the same transaction says why (not found, stale token, closed, lease held).
Runs reference their session, and effects their run, ``ON DELETE CASCADE``: deleting a
session or a store deletes its runs and their effects.

It may touch the SQLite connections of ``_core``, decision waiting
(``backends._decisions``), the shared SQL (``backends._sql``), the run port, the time format
(``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ... import errors
from ..._ids import format_time, parse_time
from ...model import Decision, Effect, Lease, Run
from .. import _sql
from .._decisions import Signalled
from ..ports.runs import RunState, decision_refusal, opening_lease, run_refusal
from ._core import SqliteCore, write

__all__ = ["RunsInSqlite"]


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
        decision=Decision.from_json(json.loads(row[15])) if row[15] is not None else None,
        decisions=tuple(Decision.from_json(d) for d in json.loads(row[16] or "[]")),
    )


def _state(conn: sqlite3.Connection, tenant: str, run_id: str) -> RunState | None:
    row = conn.execute(_sql.RUN_STATE.format(p="?"), (tenant, run_id)).fetchone()
    return None if row is None else RunState(row[0], int(row[1]), row[2], _time(row[3]))


def _refusal(conn: sqlite3.Connection, tenant: str, run_id: str, fencing_token: int | None,
             *, lease_needed: bool = False, claimant: str | None = None,
             now: datetime | None = None) -> errors.OwnstateError:
    """Why a conditional write on the run changed nothing, read in the same transaction."""
    refusal = run_refusal(run_id, _state(conn, tenant, run_id), fencing_token,
                          lease_needed=lease_needed, claimant=claimant, now=now)
    return refusal or errors.BackendUnavailable(
        f"run {run_id!r} changed in an unexpected way; retry")


def _fenced_update(conn: sqlite3.Connection, tenant: str, run_id: str,
                   fencing_token: int | None, assignments: str,
                   values: Sequence[Any]) -> Run:
    """Set ``assignments`` (with ``values``) on the run while it is active and, when
    ``fencing_token`` is given, still held with it; the run as written, or the refusal."""
    with write(conn):
        row = conn.execute(
            f"UPDATE runs SET {assignments} WHERE tenant = ? AND run_id = ? AND {_sql.ACTIVE} "
            f"AND (? IS NULL OR fencing_token = ?) RETURNING {_sql.RUN_COLUMNS}",
            (*values, tenant, run_id, fencing_token, fencing_token)).fetchone()
        if row is None:
            raise _refusal(conn, tenant, run_id, fencing_token)
        return _run(row)


_CLOSE = _sql.close_run_set("?", "?", "?", "?")


class RunsInSqlite(SqliteCore, Signalled):
    # runs ------------------------------------------------------------------------------

    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        def run(conn: sqlite3.Connection) -> Run:
            with write(conn):
                return self._insert_run(conn, tenant, store, session_id, run_id, framework,
                                        thread_key, owner, ttl_seconds, now)

        return await self._run_write(run)

    @classmethod
    def _insert_run(cls, conn: sqlite3.Connection, tenant: str, store: str, session_id: str,
                    run_id: str, framework: str, thread_key: str | None, owner: str | None,
                    ttl_seconds: float, now: datetime) -> Run:
        """Open the run inside the caller's write transaction."""
        expires, token = opening_lease(owner, ttl_seconds, now)
        stamp = format_time(now)
        found = conn.execute(
            "SELECT sid, actor_id FROM sessions "
            "WHERE tenant = ? AND store = ? AND session_id = ?",
            (tenant, store, session_id)).fetchone()
        if found is None:
            raise errors.SessionNotFound(store=store, session_id=session_id)
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
            raise cls._open_refusal(conn, tenant, store, session_id, run_id, sid)
        return Run(
            run_id=run_id, store=store, session_id=session_id, actor_id=actor_id,
            framework=framework, thread_key=thread_key, status="running", awaiting=None,
            step_count=0, usd_cost=0.0, started_at=now, ended_at=None, lease_owner=owner,
            lease_expires_at=expires, fencing_token=token,
        )

    @staticmethod
    def _open_refusal(conn: sqlite3.Connection, tenant: str, store: str, session_id: str,
                      run_id: str, sid: int) -> errors.OwnstateError:
        """Which uniqueness rule refused the insert: the run id, or the active run."""
        if conn.execute("SELECT 1 FROM runs WHERE tenant = ? AND run_id = ?",
                        (tenant, run_id)).fetchone() is not None:
            return errors.AlreadyExists(run_id=run_id)
        active = conn.execute(f"SELECT run_id FROM runs WHERE sid = ? AND {_sql.ACTIVE}",
                              (sid,)).fetchone()
        if active is not None:
            return errors.ActiveRunExists(
                store=store, session_id=session_id, run_id=active[0])
        return errors.BackendUnavailable("the run could not be stored; retry")

    async def get_run(self, tenant: str, run_id: str) -> Run:
        def run(conn: sqlite3.Connection) -> Run:
            row = conn.execute(
                f"SELECT {_sql.RUN_COLUMNS} FROM runs WHERE tenant = ? AND run_id = ?",
                (tenant, run_id)).fetchone()
            if row is None:
                raise errors.RunNotFound(run_id=run_id)
            return _run(row)

        return await self._run(run)

    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        where, params = _sql.runs_filter("?", tenant, store, session_id, status, framework, after)
        sql = f"SELECT {_sql.RUN_COLUMNS}, rid FROM runs WHERE {where} ORDER BY rid DESC LIMIT ?"
        params.append(limit + 1)

        def run(conn: sqlite3.Connection) -> tuple[list[Run], list[Any] | None]:
            rows = conn.execute(sql, params).fetchall()
            page = rows[:limit]
            cursor = [page[-1][_sql.RUN_ROWID]] if len(rows) > limit else None
            return [_run(r) for r in page], cursor

        return await self._run(run)

    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        return await self._run(lambda conn: _fenced_update(
            conn, tenant, run_id, fencing_token,
            "status = 'awaiting_human', awaiting = ?, status_since = ?, lease_owner = NULL, "
            "lease_expires_at = NULL, decision = NULL", (awaiting_json, format_time(now))))

    async def resume(self, tenant: str, run_id: str, owner: str, ttl_seconds: float,
                     now: datetime) -> Lease:
        stamp = format_time(now)
        expires = now + timedelta(seconds=ttl_seconds)

        def run(conn: sqlite3.Connection) -> Lease:
            with write(conn):
                row = conn.execute(
                    "UPDATE runs SET status = 'running', awaiting = NULL, status_since = ?, "
                    "lease_owner = ?, lease_expires_at = ?, fencing_token = fencing_token + 1 "
                    f"WHERE tenant = ? AND run_id = ? AND {_sql.ACTIVE} "
                    "AND (lease_owner IS NULL OR lease_expires_at <= ? OR lease_owner = ?) "
                    "RETURNING fencing_token",
                    (stamp, owner, format_time(expires), tenant, run_id, stamp, owner),
                ).fetchone()
                if row is None:
                    raise _refusal(conn, tenant, run_id, None, claimant=owner, now=now)
                return Lease(run_id, owner, int(row[0]), expires)

        return await self._run_write(run)

    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)

        def run(conn: sqlite3.Connection) -> Lease:
            with write(conn):
                row = conn.execute(
                    "UPDATE runs SET lease_expires_at = ? "
                    f"WHERE tenant = ? AND run_id = ? AND {_sql.ACTIVE} AND fencing_token = ? "
                    "AND lease_owner IS NOT NULL RETURNING lease_owner",
                    (format_time(expires), tenant, run_id, fencing_token)).fetchone()
                if row is None:
                    raise _refusal(conn, tenant, run_id, fencing_token, lease_needed=True)
                return Lease(run_id, row[0], fencing_token, expires)

        return await self._run_write(run)

    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        stamp = format_time(now)

        return await self._run(lambda conn: _fenced_update(
            conn, tenant, run_id, fencing_token, _CLOSE,
            (status, stamp, stamp, usd_cost or 0.0, step_count)))

    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        where, params = _sql.outstanding_filter(
            "?", tenant, status, framework,
            None if entered_before is None else format_time(entered_before))
        sql = (f"SELECT {_sql.RUN_COLUMNS} FROM runs WHERE {where} "
               "ORDER BY status_since, rid LIMIT ?")
        params.append(limit)
        return await self._run(lambda conn: [_run(r) for r in conn.execute(sql, params)])

    # decisions -------------------------------------------------------------------------

    async def decide(self, tenant: str, run_id: str, decision: Decision) -> Run:
        text = json.dumps(decision.to_json(), separators=(",", ":"))

        def run(conn: sqlite3.Connection) -> Run:
            with write(conn):
                row = conn.execute(
                    "UPDATE runs SET decision = ?, "
                    "decisions = json_insert(coalesce(decisions, '[]'), '$[#]', json(?)) "
                    "WHERE tenant = ? AND run_id = ? AND status = 'awaiting_human' "
                    f"AND decision IS NULL RETURNING {_sql.RUN_COLUMNS}",
                    (text, text, tenant, run_id)).fetchone()
                if row is None:
                    found = conn.execute(
                        "SELECT status, json_extract(decision, '$.outcome') FROM runs "
                        "WHERE tenant = ? AND run_id = ?", (tenant, run_id)).fetchone()
                    raise decision_refusal(run_id, found[0] if found else None,
                                           found[1] if found else None)
                return _run(row)

        decided = await self._run_write(run)
        self.decision_signal.fire()
        return decided

    async def list_awaiting(self, tenant: str, *, decided: bool, framework: str | None,
                            stores: frozenset[str] | None, limit: int,
                            after: Sequence[Any] | None
                            ) -> tuple[list[Run], list[Any] | None]:
        where, params = _sql.awaiting_filter("?", tenant, decided, framework, stores, after)
        sql = (f"SELECT {_sql.RUN_COLUMNS}, rid, status_since FROM runs WHERE {where} "
               "ORDER BY status_since, rid LIMIT ?")
        params.append(limit + 1)

        def run(conn: sqlite3.Connection) -> tuple[list[Run], list[Any] | None]:
            rows = conn.execute(sql, params).fetchall()
            page = rows[:limit]
            cursor = ([page[-1][_sql.RUN_ROWID + 1], page[-1][_sql.RUN_ROWID]] if len(rows) > limit
                      else None)
            return [_run(r) for r in page], cursor

        return await self._run(run)

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
                state = None if row is None else RunState(row[1], int(row[2]))
                refusal = run_refusal(run_id, state, fencing_token, ended_ok=True)
                if refusal is not None:
                    raise refusal
                rid = row[0]
                earlier = conn.execute(
                    "SELECT result, recorded_at FROM run_effects "
                    "WHERE rid = ? AND tool_call_id = ?",
                    (rid, tool_call_id)).fetchone()
                if earlier is not None:
                    return Effect(run_id, tool_call_id, json.loads(earlier[0]),
                                  parse_time(earlier[1]), False)
                refusal = run_refusal(run_id, state, None)
                if refusal is not None:
                    raise refusal
                conn.execute(
                    "INSERT INTO run_effects (rid, tool_call_id, tenant, result, recorded_at) "
                    "VALUES (?, ?, ?, ?, ?)", (rid, tool_call_id, tenant, result_json, stamp))
            return Effect(run_id, tool_call_id, json.loads(result_json), now, True)

        return await self._run_write(run)

    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        def run(conn: sqlite3.Connection) -> Effect | None:
            found = conn.execute(
                "SELECT r.rid, e.result, e.recorded_at FROM runs r LEFT JOIN run_effects e "
                "ON e.rid = r.rid AND e.tool_call_id = ? WHERE r.tenant = ? AND r.run_id = ?",
                (tool_call_id, tenant, run_id)).fetchone()
            if found is None:
                raise errors.RunNotFound(run_id=run_id)
            if found[1] is None:
                return None
            return Effect(run_id, tool_call_id, json.loads(found[1]), parse_time(found[2]),
                          False)

        return await self._run(run)
