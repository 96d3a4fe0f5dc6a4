"""SQL text that the SQLite and PostgreSQL backends share, written once for both.

Each builder takes the driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg) and
returns SQL conditions with their parameters in order; values whose type differs between
the drivers (times) arrive already converted. Only statements that read the same in both
dialects live here: what one database does faster its own way stays in its backend.
Imports nothing but the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ACTIVE", "RUN_COLUMNS", "RUN_STATE", "outstanding_filter", "runs_filter"]

#: a run's columns in the order both backends' ``_run`` read them
RUN_COLUMNS = (
    "run_id, store, session_id, actor_id, framework, thread_key, status, awaiting, "
    "step_count, usd_cost, started_at, ended_at, lease_owner, lease_expires_at, fencing_token"
)
#: a run that may still change
ACTIVE = "status IN ('running', 'awaiting_human')"
#: what a refused run write is checked against (``run_refusal``), by tenant and run id
RUN_STATE = ("SELECT status, fencing_token, lease_owner, lease_expires_at FROM runs "
             "WHERE tenant = {p} AND run_id = {p}")


def runs_filter(p: str, tenant: str, store: str | None, session_id: str | None,
                status: str | None, framework: str | None,
                after: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause of a run listing (newest first by ``rid``, after a cursor)."""
    where = [f"tenant = {p}"]
    params: list[Any] = [tenant]
    if store is not None and session_id is not None:
        where.append(f"sid = (SELECT sid FROM sessions "
                     f"WHERE tenant = {p} AND store = {p} AND session_id = {p})")
        params.extend((tenant, store, session_id))
    elif store is not None:
        where.append(f"store = {p}")
        params.append(store)
    elif session_id is not None:
        where.append(f"session_id = {p}")
        params.append(session_id)
    for column, value in (("status", status), ("framework", framework)):
        if value is not None:
            where.append(f"{column} = {p}")
            params.append(value)
    if after is not None:
        where.append(f"rid < {p}")
        params.append(int(after[0]))
    return " AND ".join(where), params


def outstanding_filter(p: str, tenant: str, status: str, framework: str | None,
                       entered_before: object | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause of ``outstanding``; ``entered_before`` as the driver stores
    times."""
    where = [f"tenant = {p}", f"status = {p}"]
    params: list[Any] = [tenant, status]
    if framework is not None:
        where.append(f"framework = {p}")
        params.append(framework)
    if entered_before is not None:
        where.append(f"status_since < {p}")
        params.append(entered_before)
    return " AND ".join(where), params
