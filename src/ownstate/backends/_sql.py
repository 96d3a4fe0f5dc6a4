"""SQL text that the SQLite and PostgreSQL backends share, written once for both.

Each builder takes the driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg) and
returns SQL conditions with their parameters in order; values whose type differs between
the drivers (times) arrive already converted. Only statements that read the same in both
dialects live here: what one database does faster its own way stays in its backend.
It may touch the model and the errors alone: no driver, no connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import CheckpointNotFound
from ..model import CLOSED_RUN_STATUSES, CheckpointScope, RetentionPolicy, RunUsage

__all__ = ["ACTIVE", "CHECKPOINT_COLUMNS", "COPY_CHECKPOINTS", "COPY_WRITES", "FACT_COLUMNS",
           "FORK_VECTORS", "F_FACT_COLUMNS", "RUN_COLUMNS", "RUN_ROWID", "RUN_STATE", "SCOPED_RUN",
           "WRITE_COLUMNS", "awaiting_filter", "before_mark", "believed_at", "close_run_set",
           "item_page",
           "listing_conditions", "outstanding_filter", "retention_reasons", "runs_filter",
           "scope_params", "session_listing"]

#: a run's columns in the order both backends' ``_run`` read them
RUN_COLUMNS = (
    "run_id, store, session_id, actor_id, framework, thread_key, status, awaiting, "
    "step_count, usd_cost, started_at, ended_at, lease_owner, lease_expires_at, fencing_token, "
    "decision, decisions"
)
#: where the row id follows :data:`RUN_COLUMNS` in a listing's rows
RUN_ROWID = 17
#: a fact's columns in the order both backends' ``_fact`` read them
FACT_COLUMNS = (
    "fact_id, memory_store, subject, key, value, confidence, source_type, source_session_id, "
    "source_item_id, valid_from, valid_to, recorded_at, superseded_at, supersedes, "
    "closed_reason, source_store"
)
#: the same, as columns of the alias ``f`` (a query that joins facts to another table)
F_FACT_COLUMNS = ", ".join("f." + c for c in FACT_COLUMNS.split(", "))
#: a run that may still change
ACTIVE = "status IN ('running', 'awaiting_human')"
#: what a refused run write is checked against (``run_refusal``), by tenant and run id
def close_run_set(status: str, now: str, cost: str, steps: str) -> str:
    """The ``SET`` list of ending a run (``close_run``, and a checkpoint write that ends
    its fencing run): the status ``status`` since ``now``, the lease gone, ``cost`` added to
    its cost and its step count replaced by ``steps`` unless that is NULL. Each argument is
    a placeholder or SQL text (``now`` appears twice)."""
    return (f"status = {status}, status_since = {now}, ended_at = {now}, "
            f"lease_owner = NULL, lease_expires_at = NULL, usd_cost = usd_cost + {cost}, "
            f"step_count = coalesce({steps}, step_count)")


RUN_STATE = ("SELECT status, fencing_token, lease_owner, lease_expires_at FROM runs "
             "WHERE tenant = {p} AND run_id = {p}")


class _Where:
    """Conditions joined by ``AND`` and their parameters in the same order, for the
    driver's placeholder ``p``; ``column=value`` pairs given by name are ``column = p``
    conditions, left out where the value is ``None``."""

    def __init__(self, p: str, **equal: object) -> None:
        self.p = p
        self.conditions: list[str] = []
        self.params: list[Any] = []
        self.equal(**equal)

    def add(self, condition: str, *params: object) -> None:
        self.conditions.append(condition)
        self.params.extend(params)

    def equal(self, **columns: object) -> None:
        for column, value in columns.items():
            if value is not None:
                self.add(f"{column} = {self.p}", value)

    def sql(self) -> tuple[str, list[Any]]:
        return " AND ".join(self.conditions), self.params


def runs_filter(p: str, tenant: str, store: str | None, session_id: str | None,
                status: str | None, framework: str | None,
                after: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause of a run listing (newest first by ``rid``, after a cursor)."""
    where = _Where(p, tenant=tenant)
    if store is not None and session_id is not None:
        where.add(f"sid = (SELECT sid FROM sessions "
                  f"WHERE tenant = {p} AND store = {p} AND session_id = {p})",
                  tenant, store, session_id)
    else:
        where.equal(store=store, session_id=session_id)
    where.equal(status=status, framework=framework)
    if after is not None:
        where.add(f"rid < {p}", int(after[0]))
    return where.sql()


def outstanding_filter(p: str, tenant: str, status: str, framework: str | None,
                       entered_before: object | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause of ``outstanding``; ``entered_before`` as the driver stores
    times."""
    where = _Where(p, tenant=tenant, status=status)
    if status == "awaiting_human":
        where.add("decision IS NULL")  # a decided run waits on a worker, not a human
    where.equal(framework=framework)
    if entered_before is not None:
        where.add(f"status_since < {p}", entered_before)
    return where.sql()


def awaiting_filter(p: str, tenant: str, decided: bool, framework: str | None,
                    stores: frozenset[str] | None, after: Sequence[Any] | None,
                    time_p: str | None = None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause of ``list_awaiting`` (oldest first by ``status_since, rid``,
    strictly after a cursor ``[entered, rid]``); ``time_p`` is the placeholder for the
    cursor's time (``p`` unless the dialect needs a cast). The literal conditions on
    status and decision are those of the partial indexes that serve the listing."""
    where = _Where(p, tenant=tenant)
    where.add("status = 'awaiting_human'")
    where.add("decision IS NOT NULL" if decided else "decision IS NULL")
    where.equal(framework=framework)
    if stores is not None and not stores:
        where.add("1 = 0")
    elif stores is not None:
        where.add(f"store IN ({', '.join([p] * len(stores))})", *sorted(stores))
    if after is not None:
        where.add(f"(status_since, rid) > ({time_p or p}, {p})", after[0], int(after[1]))
    return where.sql()


# checkpoints --------------------------------------------------------------------------

#: a checkpoint ``c`` and whether it has pending writes
CHECKPOINT_COLUMNS = (
    "c.cid, c.namespace, c.checkpoint_id, c.parent_checkpoint_id, c.type_tag, "
    "c.metadata, c.create_time, c.payload, "
    "EXISTS (SELECT 1 FROM checkpoint_writes w WHERE w.cid = c.cid)")
#: a pending write, in the order both backends' ``_write`` read it
WRITE_COLUMNS = "task_id, idx, channel, type_tag, payload, task_path"
#: the row id of the run named by a whole scope (NULL when there is none); takes
#: :func:`scope_params`
SCOPED_RUN = ("(SELECT rid FROM runs WHERE tenant = {p} AND run_id = {p} AND store = {p} "
              "AND session_id = {p} AND actor_id = {p})")
#: copies a run's checkpoints onto another run (target rid, source rid, tenant), keeping
#: their order and create times; then :data:`COPY_WRITES` copies their pending writes
COPY_CHECKPOINTS = (
    "INSERT INTO checkpoints (rid, tenant, namespace, checkpoint_id, "
    "parent_checkpoint_id, type_tag, metadata, create_time, size, payload) "
    "SELECT {p}, tenant, namespace, checkpoint_id, parent_checkpoint_id, "
    "type_tag, metadata, create_time, size, payload FROM checkpoints "
    "WHERE rid = {p} AND tenant = {p} ORDER BY cid")
COPY_WRITES = (
    "INSERT INTO checkpoint_writes (cid, tenant, task_id, idx, channel, "
    "type_tag, task_path, size, payload) "
    "SELECT t.cid, w.tenant, w.task_id, w.idx, w.channel, w.type_tag, "
    "w.task_path, w.size, w.payload FROM checkpoint_writes w "
    "JOIN checkpoints s ON s.cid = w.cid "
    "JOIN checkpoints t ON t.rid = {p} AND t.namespace = s.namespace "
    "AND t.checkpoint_id = s.checkpoint_id "
    "WHERE s.rid = {p} AND w.tenant = {p} ORDER BY w.wid")


def scope_params(tenant: str, scope: CheckpointScope) -> tuple[str, ...]:
    """The parameters of :data:`SCOPED_RUN`."""
    return (tenant, scope.run_id, scope.store, scope.session_id, scope.actor_id)


def listing_conditions(p: str, rid: int, tenant: str, namespace: str | None,
                       scope: CheckpointScope, before: str | None,
                       mark: int | None) -> tuple[list[str], list[Any]]:
    """The conditions (over checkpoints ``c``) and parameters of a listing of run ``rid``
    (of ``scope``), in ``namespace`` when one is named, and when ``before`` is named going
    on after its place ``mark`` that :func:`before_mark` found; the backend adds its
    metadata conditions. Raises CheckpointNotFound when ``before`` has no place."""
    conditions, values = [f"c.rid = {p}", f"c.tenant = {p}"], [rid, tenant]
    if namespace is not None:
        conditions.append(f"c.namespace = {p}")
        values.append(namespace)
    if before is not None:
        if mark is None:
            raise CheckpointNotFound(run_id=scope.run_id, checkpoint_id=before)
        conditions.append(f"c.cid < {p}")
        values.append(mark)
    return conditions, values


def before_mark(p: str, rid: int, before: str,
                namespace: str | None) -> tuple[str, list[Any]]:
    """The query of the place (``cid``, ``NULL`` when there is none) of checkpoint
    ``before`` of run ``rid``, after which a listing goes on, and its parameters."""
    sql = f"SELECT max(cid) FROM checkpoints WHERE rid = {p} AND checkpoint_id = {p}"
    params: list[Any] = [rid, before]
    if namespace is not None:
        sql += f" AND namespace = {p}"
        params.append(namespace)
    return sql, params


def usage_query(p: str, tenant: str, run_id: str | None,
                code_point: str = "") -> tuple[str, list[Any]]:
    """The query of each run's checkpoints and their stored bytes (pending writes
    included), of one run or every run of ``tenant``, largest first, then by run id
    (``code_point``: the collation that orders by code point, where it is not the
    default), and its parameters; :func:`usage_records` reads its rows."""
    sql = ("SELECT r.run_id, count(*), sum(c.size) + coalesce(sum("
           "(SELECT sum(w.size) FROM checkpoint_writes w WHERE w.cid = c.cid)), 0) "
           f"FROM runs r JOIN checkpoints c ON c.rid = r.rid WHERE r.tenant = {p}")
    params: list[Any] = [tenant]
    if run_id is not None:
        sql += f" AND r.run_id = {p}"
        params.append(run_id)
    return sql + f" GROUP BY r.rid, r.run_id ORDER BY 3 DESC, r.run_id{code_point}", params


def usage_records(rows: Iterable[Sequence[Any]]) -> list[RunUsage]:
    """The rows of :func:`usage_query` as records."""
    return [RunUsage(run_id=r[0], checkpoints=int(r[1]), stored_bytes=int(r[2])) for r in rows]


def retention_reasons(p: str, policy: RetentionPolicy,
                      cutoff: object | None) -> tuple[list[str], list[Any]]:
    """Why a ranked checkpoint (columns ``status``, ``create_time`` and ``newer``, how many
    newer ones its run and namespace hold) goes under ``policy``: conditions to join with
    ``OR``, and their parameters; ``cutoff`` is ``now - max_age`` as the driver stores
    times. No conditions: nothing goes."""
    reasons: list[str] = []
    params: list[Any] = []
    if policy.drop_when_run_ends:
        ended = ", ".join(f"'{status}'" for status in CLOSED_RUN_STATUSES)
        reasons.append(f"status IN ({ended})")
    if policy.max_age_seconds is not None:
        reasons.append(f"create_time < {p}")
        params.append(cutoff)
    if policy.keep_last is not None:
        reasons.append(f"newer >= {p}")
        params.append(policy.keep_last)
    return reasons, params


# sessions -----------------------------------------------------------------------------

#: a fork's item vectors: each copied item (of the child ``sid``, bound second) takes the
#: vector of the parent's item (``sid`` bound first) at the same seq
FORK_VECTORS = ("INSERT INTO item_vectors (id, tenant, store, model, vector) "
                "SELECT c.id, v.tenant, v.store, v.model, v.vector FROM items c "
                "JOIN items p ON p.sid = {p} AND p.seq = c.seq "
                "JOIN item_vectors v ON v.id = p.id WHERE c.sid = {p}")


def believed_at(at: str) -> str:
    """The facts ``f`` that recall returns for the moment ``at`` (a placeholder, bound four
    times), as believed now: those covering the moment, of which a closed one is also not
    overridden by a later-recorded one covering it (the rule of ``ports.facts.covers``)."""
    return (f"f.valid_from <= {at} AND (f.superseded_at IS NULL OR (f.valid_to > {at} "
            "AND NOT EXISTS (SELECT 1 FROM facts g WHERE g.tenant = f.tenant "
            "AND g.subject = f.subject AND g.memory_store = f.memory_store AND g.key = f.key "
            f"AND g.fid > f.fid AND g.valid_from <= {at} "
            f"AND (g.superseded_at IS NULL OR g.valid_to > {at}))))")


def item_page(p: str, columns: str, sid: str, descending: bool,
              after_seq: int | None) -> tuple[str, int]:
    """A page of one session's items past ``after_seq``, newest or oldest first: the query
    of ``columns`` of the session ``sid`` (a placeholder, or a subquery finding it), its
    seq bound and limit left to bind, and that bound."""
    if descending:
        return (f"SELECT {columns} FROM items WHERE sid = {sid} AND seq < {p} "
                f"ORDER BY seq DESC LIMIT {p}", after_seq if after_seq is not None else 2**62)
    return (f"SELECT {columns} FROM items WHERE sid = {sid} AND seq > {p} "
            f"ORDER BY seq LIMIT {p}", after_seq if after_seq is not None else 0)


def session_listing(p: str, columns: str, tenant: str, store: str, actor_id: str | None,
                    matches: Iterable[tuple[str, Sequence[Any]]], order: str,
                    descending: bool, after: Sequence[Any] | None, limit: int,
                    time_p: str | None = None) -> tuple[str, list[Any]]:
    """The query of one page of a session listing, and its parameters: ``columns`` of the
    sessions of ``store`` (of ``actor_id`` when one is named) that meet each of the
    backend's metadata ``matches`` (a condition and its parameters), strictly past the
    cursor ``after`` (``[sid]`` by create time, ``[last_activity_time, sid]`` by activity),
    in ``order``, at most ``limit + 1`` rows (one more tells that another page follows).
    ``time_p`` is the placeholder for the cursor's time (``p`` unless the dialect needs a
    cast)."""
    where = _Where(p, tenant=tenant, store=store)
    where.equal(actor_id=actor_id)
    for condition, params in matches:
        where.add(condition, *params)
    compare = "<" if descending else ">"
    direction = "DESC" if descending else "ASC"
    if order == "create_time":
        order_sql = f"sid {direction}"
        if after is not None:
            where.add(f"sid {compare} {p}", after[0])
    else:
        order_sql = f"last_activity_time {direction}, sid {direction}"
        if after is not None:
            where.add(f"(last_activity_time, sid) {compare} ({time_p or p}, {p})", *after[:2])
    conditions, params = where.sql()
    return (f"SELECT {columns} FROM sessions WHERE {conditions} "
            f"ORDER BY {order_sql} LIMIT {p}", [*params, limit + 1])
