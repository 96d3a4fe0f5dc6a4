"""Exact export and restore of every row, in SQLite (the transfer port).

Pages are keyset queries of :mod:`ownstate.backends._transfer_sql`; items are read a
session at a time (SQLite's per-query cost is small) along the sessions' unique index.
A restore batch is one ``BEGIN IMMEDIATE`` transaction of ``executemany`` inserts that
do nothing for a stored key; it keeps the derived state in step: a session's item count,
the search indexes (every fact, and the items of a store that indexes them, wait for the
next search as a normal write's do: ``search.py``, "Indexing later").

It may touch the SQLite connections of ``_core``, the search part beside it, the shared
transfer SQL (``backends._transfer_sql``), the transfer port, the clock (``ownstate._ids``)
and errors.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from ..._ids import format_time, now, parse_time
from ...errors import SessionNotFound
from .. import _transfer_sql as shared
from ..ports.transfer import Cursor, Row, missing_parent
from ._core import SqliteCore, write
from .search import defer

__all__ = ["TransferInSqlite"]

DIALECT = shared.Dialect(p="?", collate="", json_out="{}", json_in="?", bytes_in="?",
                  time_out=parse_time, time_in=format_time)
_ITEM_COLUMNS = ("seq, item_id, create_time, format, data, role, type, tool_name, model, "
                 "in_tokens, out_tokens")
_SESSION_CHUNK = 256
T = TypeVar("T")
#: the backend whose export reads one snapshot here, its connection and that
#: connection's lock (pages run on the executor's threads, one at a time)
_SNAPSHOT: ContextVar[tuple[object, sqlite3.Connection, threading.Lock] | None] = ContextVar(
    "ownstate_sqlite_export_snapshot", default=None)


class TransferInSqlite(SqliteCore):
    """The transfer port over the SQLite tables."""

    @asynccontextmanager
    async def export_snapshot(self) -> AsyncIterator[None]:
        """One read transaction, on a connection of its own, for the whole export: in
        WAL mode writers go on committing and the export sees none of it. (A backend on
        a connection it was given, or an in-memory database, has no second connection:
        its pages read as of themselves.)"""
        if self._given is not None or self._path is None or self._path == ":memory:":
            yield
            return

        def begin(_: sqlite3.Connection) -> sqlite3.Connection:
            assert self._path is not None
            conn = sqlite3.connect(self._path, isolation_level=None,
                                   check_same_thread=False, timeout=self._busy_timeout)
            self._configure(conn)
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot
            return conn

        conn = await self._run(begin)
        token = _SNAPSHOT.set((self, conn, threading.Lock()))
        try:
            yield
        finally:
            _SNAPSHOT.reset(token)

            def end(_: sqlite3.Connection) -> None:
                conn.execute("ROLLBACK")
                conn.close()

            await self._run(end)

    async def _export_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        held = _SNAPSHOT.get()
        if held is None or held[0] is not self:
            return await self._run(fn)
        _, conn, lock = held

        def call(_: sqlite3.Connection) -> T:
            with lock:
                return fn(conn)

        return await self._run(call)

    async def transfer_tenants(self) -> list[str]:
        return await self._export_read(lambda conn: [r[0] for r in conn.execute(shared.TENANTS)])

    async def export_rows(self, tenant: str, part: str, after: Cursor | None,
                          limit: int) -> tuple[list[Row], Cursor | None]:
        limit = min(limit, shared.LARGE_ROWS.get(part, limit))
        if part == "items":
            return await self._export_read(lambda conn: _item_page(conn, tenant, after, limit))
        if part == "checkpoints":
            return await self._export_read(lambda conn: _checkpoint_page(conn, tenant, after,
                                                                         limit))

        def run(conn: sqlite3.Connection) -> tuple[list[Row], Cursor | None]:
            sql, params = shared.export_query(DIALECT, part, after, limit + 1)
            found = conn.execute(sql, [tenant, *params]).fetchall()
            width = len(found[0]) - len(_cursor_width(part)) if found else 0
            rows = [shared.make_row(DIALECT, part, r[:width]) for r in found[:limit]]
            more = len(found) > limit
            return rows, (tuple(found[limit - 1][width:]) if more else None)

        return await self._export_read(run)

    async def restore_rows(self, tenant: str, part: str, rows: Sequence[Row]) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                before = conn.total_changes
                if part == "items":
                    return _restore_items(conn, tenant, rows)
                if part == "facts":
                    return _restore_facts(conn, tenant, rows)
                if part == "checkpoints":
                    return _restore_checkpoints(conn, tenant, rows)
                _check_refs(conn, tenant, part, rows)
                stamp = format_time(now())
                conn.executemany(shared.restore_sql(DIALECT, part), [
                    _params(part, tenant, {**shared.stored_row(DIALECT, part, r), "_now": stamp})
                    for r in rows])
                return conn.total_changes - before

        return await self._run_write(run)


def _cursor_width(part: str) -> tuple[Any, ...]:
    return shared.EXPORTS[part].cursor


def _params(part: str, tenant: str, row: Row) -> tuple[Any, ...]:
    return shared.RESTORES[part][1](tenant, row)


def _sid(conn: sqlite3.Connection, tenant: str, store: str, session_id: str) -> int:
    found = conn.execute("SELECT sid FROM sessions WHERE tenant = ? AND store = ? AND "
                         "session_id = ?", (tenant, store, session_id)).fetchone()
    if found is None:
        raise SessionNotFound(store=store, session_id=session_id)
    return int(found[0])


def _check_refs(conn: sqlite3.Connection, tenant: str, part: str, rows: Sequence[Row]) -> None:
    """Refuse rows that name a session or run that is not stored (the INSERT ... SELECT
    would store nothing for them, silently)."""
    if part in ("runs", "assets", "idempotency_keys"):
        for key in {(r["store"], r["session_id"]) for r in rows if r["store"] is not None}:
            _sid(conn, tenant, *key)
    if part == "effects":
        for run_id in {r["run_id"] for r in rows}:
            if conn.execute("SELECT 1 FROM runs WHERE tenant = ? AND run_id = ?",
                            (tenant, run_id)).fetchone() is None:
                raise missing_parent("effects", "run", run_id)


def _item_page(conn: sqlite3.Connection, tenant: str, after: Cursor | None,
               limit: int) -> tuple[list[Row], Cursor | None]:
    store, session_id = (after[0], after[1]) if after is not None else ("", "")
    last_seq = int(after[2]) if after is not None else 0
    rows: list[Row] = []
    decode = _as_text
    while True:
        sessions = conn.execute(
            "SELECT sid, store, session_id FROM sessions WHERE tenant = ? AND "
            "(store, session_id) >= (?, ?) ORDER BY store, session_id LIMIT ?",
            (tenant, store, session_id, _SESSION_CHUNK)).fetchall()
        for sid, st, sess in sessions:
            first = last_seq if (st, sess) == (store, session_id) else 0
            found = conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = ? AND seq > ? "
                "ORDER BY seq LIMIT ?", (sid, first, limit - len(rows) + 1)).fetchall()
            times: dict[str, Any] = {}
            for r in found:
                if len(rows) == limit:
                    tail = rows[-1]
                    return rows, (tail["store"], tail["session_id"], tail["seq"])
                moment = times.get(r[2])
                if moment is None:
                    moment = times[r[2]] = parse_time(r[2])
                rows.append({"store": st, "session_id": sess, "seq": r[0], "item_id": r[1],
                             "create_time": moment, "format": r[3], "data": decode(r[4]),
                             "role": r[5], "type": r[6], "tool_name": r[7], "model": r[8],
                             "in_tokens": r[9], "out_tokens": r[10]})
        if len(sessions) < _SESSION_CHUNK:
            return rows, None
        # continue after the chunk's last session, with none of its items left to read
        store, session_id = sessions[-1][1], sessions[-1][2] + "\x00"
        last_seq = 0


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else bytes(value).decode()


def _restore_items(conn: sqlite3.Connection, tenant: str, rows: Sequence[Row]) -> int:
    sids = {key: _sid(conn, tenant, *key)
            for key in {(r["store"], r["session_id"]) for r in rows}}
    before = conn.total_changes
    conn.executemany(
        "INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data, role, "
        "type, tool_name, model, in_tokens, out_tokens) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [(sids[(r["store"], r["session_id"])], r["seq"], tenant, r["item_id"],
          format_time(r["create_time"]), r["format"], r["data"], r["role"], r["type"],
          r["tool_name"], r["model"], r["in_tokens"], r["out_tokens"]) for r in rows])
    stored = conn.total_changes - before
    # the search index as an append writes it: items of stores that index theirs, each
    # once (a row stored before keeps its entry)
    indexed = {key for key in sids if conn.execute(
        "SELECT index_items FROM session_stores WHERE tenant = ? AND name = ?",
        (tenant, key[0])).fetchone()[0]}
    ids = [[sids[(r["store"], r["session_id"])], r["seq"]] for r in rows
           if (r["store"], r["session_id"]) in indexed]
    defer(conn, "item", "SELECT i.id AS id FROM json_each(?) j CROSS JOIN items i "
          "ON i.sid = j.value ->> 0 AND i.seq = j.value ->> 1", (json.dumps(ids),))
    highest: dict[int, int] = {}
    for r in rows:
        sid = sids[(r["store"], r["session_id"])]
        highest[sid] = max(highest.get(sid, 0), r["seq"])
    conn.executemany("UPDATE sessions SET item_count = max(item_count, ?) WHERE sid = ?",
                     [(seq, sid) for sid, seq in highest.items()])
    return stored


def _restore_facts(conn: sqlite3.Connection, tenant: str, rows: Sequence[Row]) -> int:
    stored = 0
    fids: list[int] = []
    for store in {r["memory_store"] for r in rows}:
        if conn.execute("SELECT 1 FROM memory_stores WHERE tenant = ? AND name = ?",
                        (tenant, store)).fetchone() is None:
            raise missing_parent("facts", "memory store", store)
    for r in rows:
        t = shared.stored_row(DIALECT, "facts", r)
        cur = conn.execute(
            "INSERT INTO facts (tenant, memory_store, fact_id, subject, key, value, "
            "confidence, source_type, source_store, source_session_id, source_item_id, "
            "valid_from, valid_to, recorded_at, superseded_at, supersedes, closed_reason) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (tenant, t["memory_store"], t["fact_id"], t["subject"], t["key"], t["value"],
             t["confidence"], t["source_type"], t["source_store"], t["source_session_id"],
             t["source_item_id"], t["valid_from"], t["valid_to"], t["recorded_at"],
             t["superseded_at"], t["supersedes"], t["closed_reason"]))
        if cur.rowcount != 1:
            continue
        stored += 1
        # every fact is indexed, closed ones too, as a remember writes it
        fids.append(int(cur.lastrowid or 0))
    defer(conn, "fact", "SELECT value AS id FROM json_each(?)", (json.dumps(fids),))
    return stored


def _checkpoint_page(conn: sqlite3.Connection, tenant: str, after: Cursor | None,
                     limit: int) -> tuple[list[Row], Cursor | None]:
    sql, params = shared.export_query(DIALECT, "checkpoints", after, limit + 1)
    found = conn.execute(sql, [tenant, *params]).fetchall()
    writes: list[Any] = []
    cids = [r[9] for r in found[:limit]]
    for start in range(0, len(cids), 500):
        chunk = cids[start:start + 500]
        marks = ", ".join("?" * len(chunk))
        writes += conn.execute(f"{shared.CHECKPOINT_WRITES} WHERE cid IN ({marks}) ORDER BY wid",
                               chunk)
    return shared.checkpoint_page(DIALECT, found, limit, writes)


def _restore_checkpoints(conn: sqlite3.Connection, tenant: str, rows: Sequence[Row]) -> int:
    stored = 0
    for r in rows:
        run = conn.execute("SELECT rid FROM runs WHERE tenant = ? AND run_id = ?",
                           (tenant, r["run_id"])).fetchone()
        if run is None:
            raise missing_parent("checkpoints", "run", r["run_id"])
        cur = conn.execute(
            "INSERT INTO checkpoints (rid, tenant, namespace, checkpoint_id, "
            "parent_checkpoint_id, type_tag, metadata, create_time, size, payload) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (run[0], tenant, r["namespace"], r["checkpoint_id"], r["parent_checkpoint_id"],
             r["type_tag"], r["metadata"], format_time(r["create_time"]), len(r["payload"]),
             r["payload"]))
        if cur.rowcount != 1:
            continue
        stored += 1
        conn.executemany(
            "INSERT INTO checkpoint_writes (cid, tenant, task_id, idx, channel, type_tag, "
            "task_path, size, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(cur.lastrowid, tenant, w["task_id"], w["index"], w["channel"], w["type_tag"],
              w["task_path"], len(w["payload"]), w["payload"]) for w in r["writes"]])
    return stored
