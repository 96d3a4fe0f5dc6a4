"""Session stores, sessions and items in SQLite.

It may touch the SQLite connections of ``_core``, the access, search and vector-row parts
beside it, the replay cache (``backends._replay``), the shared SQL (``backends._sql``), the
session port, the time format (``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from itertools import compress
from typing import Any

from ... import errors
from ..._ids import format_time
from ...model import Item, SessionRecord, SessionStoreRecord, build_item, build_items
from .._replay import Meta, Replay
from .._sql import FORK_VECTORS, item_page, session_listing
from ..ports.sessions import NewItem, SessionOrder, changed_labels, forked_record
from ._core import (
    ITEM_COLUMNS,
    SESSION_COLUMNS,
    SqliteCore,
    session_record,
    to_items,
    write,
)
from ._vector_rows import store_item_vectors
from .access import drop_grants, start_grants
from .search import defer

__all__ = ["SessionsInSqlite"]


def _meta(item: Item) -> Meta:
    """What the replay cache keeps of an item besides its data."""
    return (item.item_id, item.seq, item.create_time, item.format, item.role, item.type,
            item.tool_name, item.model, item.in_tokens, item.out_tokens)


def _insert_items(conn: sqlite3.Connection, sid: int, first_seq: int, tenant: str, stamp: str,
                  items: Sequence[NewItem]) -> None:
    """Insert ``items`` as seqs ``first_seq`` on, in order.

    The derived columns an item leaves empty are written as ``NULL`` in the statement
    rather than bound: the sqlite3 module binds ``None`` through its adapter lookup, about
    0.25 µs a value, and most items leave four or more of the six empty. Each run of
    items that leave the same columns empty is one ``executemany``.
    """
    run: list[tuple[Any, ...]] = []
    shape: tuple[bool, ...] = ()
    for seq, it in enumerate(items, first_seq):
        derived = (it.role, it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
        present = (derived[0] is not None, derived[1] is not None, derived[2] is not None,
                   derived[3] is not None, derived[4] is not None, derived[5] is not None)
        if present != shape:
            if run:
                conn.executemany(_insert_sql(shape), run)
                run = []
            shape = present
        run.append((sid, seq, tenant, it.item_id, stamp, it.format, it.data_json,
                    *compress(derived, present)))
    if run:
        conn.executemany(_insert_sql(shape), run)


@cache
def _insert_sql(present: tuple[bool, ...]) -> str:
    """The item ``INSERT`` that binds the derived columns ``present`` names and writes
    ``NULL`` for the others."""
    derived = ", ".join("?" if p else "NULL" for p in present)
    return ("INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data, "
            f"role, type, tool_name, model, in_tokens, out_tokens) VALUES "
            f"(?, ?, ?, ?, ?, ?, ?, {derived})")


class SessionsInSqlite(SqliteCore):
    # session stores --------------------------------------------------------------------

    async def create_store(self, tenant: str, name: str, now: datetime,
                           owner: str | None = None, index_items: bool = True,
                           ) -> SessionStoreRecord:
        def run(conn: sqlite3.Connection) -> SessionStoreRecord:
            with write(conn):
                inserted = conn.execute(
                    "INSERT INTO session_stores (tenant, name, create_time, index_items) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (tenant, name, format_time(now), int(index_items)))
                if inserted.rowcount == 0:
                    raise errors.AlreadyExists(store=name)
                start_grants(conn, tenant, "session_store", name, owner)
            return SessionStoreRecord(tenant=tenant, name=name, create_time=now)

        return await self._run_write(run)

    async def get_store(self, tenant: str, name: str) -> SessionStoreRecord:
        return await self._run(lambda conn: self._require_store(conn, tenant, name))

    async def list_stores(
        self, tenant: str, limit: int, after: str | None
    ) -> list[SessionStoreRecord]:
        return await self._list_named("session_stores", SessionStoreRecord, tenant, limit, after)

    async def delete_store(self, tenant: str, name: str, force: bool) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                self._require_store(conn, tenant, name)
                (count,) = conn.execute(
                    "SELECT count(*) FROM sessions WHERE tenant = ? AND store = ?",
                    (tenant, name)).fetchone()
                if count and not force:
                    raise errors.StoreNotEmpty(store=name, sessions=count)
                conn.execute("DELETE FROM sessions WHERE tenant = ? AND store = ?", (tenant, name))
                conn.execute("DELETE FROM session_stores WHERE tenant = ? AND name = ?",
                             (tenant, name))
                drop_grants(conn, tenant, "session_store", name)
                return int(count)

        return await self._run_write(run)

    # sessions --------------------------------------------------------------------------

    @staticmethod
    def _insert_session(
        conn: sqlite3.Connection, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], parent: str | None, root: str, now: datetime,
    ) -> int:
        stamp = format_time(now)
        cursor = conn.execute(
            "INSERT INTO sessions (tenant, store, session_id, actor_id, parent_session_id, "
            "root_session_id, metadata, create_time, last_activity_time) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (tenant, store, session_id, actor_id, parent, root,
             json.dumps(dict(metadata), ensure_ascii=False), stamp, stamp),
        )
        if cursor.rowcount == 0:
            raise errors.AlreadyExists(store=store, session_id=session_id)
        return int(cursor.lastrowid or 0)

    async def create_session(
        self, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], now: datetime,
    ) -> SessionRecord:
        def run(conn: sqlite3.Connection) -> SessionRecord:
            with write(conn):
                self._require_store(conn, tenant, store)
                self._insert_session(conn, tenant, store, session_id, actor_id, metadata,
                                     None, session_id, now)
            return SessionRecord(
                tenant=tenant, store=store, session_id=session_id, actor_id=actor_id,
                parent_session_id=None, root_session_id=session_id, metadata=dict(metadata),
                create_time=now, last_activity_time=now,
            )

        return await self._run_write(run)

    async def get_session(self, tenant: str, store: str, session_id: str) -> SessionRecord:
        return await self._run(
            lambda conn: session_record(self._session_row(conn, tenant, store, session_id)))

    async def list_sessions(
        self, tenant: str, store: str, *, actor_id: str | None, metadata: Mapping[str, str],
        order: SessionOrder, descending: bool, limit: int, after: Sequence[Any] | None,
    ) -> tuple[list[SessionRecord], list[Any] | None]:
        sql, params = session_listing(
            "?", SESSION_COLUMNS, tenant, store, actor_id,
            [("json_extract(metadata, ?) = ?", [f'$."{key}"', value])
             for key, value in metadata.items()],
            order, descending, after, limit)

        def run(conn: sqlite3.Connection) -> tuple[list[SessionRecord], list[Any] | None]:
            self._require_store(conn, tenant, store)
            rows = conn.execute(sql, params).fetchall()
            page = rows[:limit]
            cursor: list[Any] | None = None
            if len(rows) > limit:
                last = page[-1]
                cursor = [last[7]] if order == "create_time" else [last[6], last[7]]
            return [session_record(r) for r in page], cursor

        return await self._run(run)

    async def update_metadata(
        self, tenant: str, store: str, session_id: str, changes: Mapping[str, str | None],
        max_labels: int,
    ) -> SessionRecord:
        def run(conn: sqlite3.Connection) -> SessionRecord:
            with write(conn):
                row = list(self._session_row(conn, tenant, store, session_id))
                labels = changed_labels(json.loads(row[4]), changes, max_labels)
                row[4] = json.dumps(labels, ensure_ascii=False)
                conn.execute("UPDATE sessions SET metadata = ? WHERE sid = ?", (row[4], row[7]))
            return session_record(row)

        return await self._run_write(run)

    async def delete_session(self, tenant: str, store: str, session_id: str, force: bool) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                self._sid(conn, tenant, store, session_id)
                children = [r[0] for r in conn.execute(
                    "SELECT session_id FROM sessions WHERE tenant = ? AND store = ? "
                    "AND parent_session_id = ? ORDER BY sid", (tenant, store, session_id))]
                if children and not force:
                    raise errors.HasChildren(
                        store=store, session_id=session_id, children=children)
                conn.execute(
                    "WITH RECURSIVE tree (session_id) AS ("
                    " SELECT ? UNION"
                    " SELECT s.session_id FROM sessions s JOIN tree t"
                    " ON s.parent_session_id = t.session_id"
                    " WHERE s.tenant = ? AND s.store = ?)"
                    " DELETE FROM sessions WHERE tenant = ? AND store = ?"
                    " AND session_id IN (SELECT session_id FROM tree)",
                    (session_id, tenant, store, tenant, store))
                # rowcount is unreliable for a statement that begins with WITH
                return int(conn.execute("SELECT changes()").fetchone()[0])

        return await self._run_write(run)

    async def fork_session(
        self, tenant: str, store: str, session_id: str, new_session_id: str,
        up_to_item_id: str | None, now: datetime,
    ) -> SessionRecord:
        def run(conn: sqlite3.Connection) -> SessionRecord:
            with write(conn):
                parent_row = self._session_row(conn, tenant, store, session_id)
                parent, parent_sid = session_record(parent_row), parent_row[7]
                last_seq = None
                if up_to_item_id is not None:
                    row = conn.execute(
                        "SELECT seq FROM items WHERE tenant = ? AND item_id = ? AND sid = ?",
                        (tenant, up_to_item_id, parent_sid)).fetchone()
                    if row is None:
                        raise errors.ItemNotFound(
                            session_id=session_id, item_id=up_to_item_id)
                    last_seq = int(row[0])
                child_sid = self._insert_session(
                    conn, tenant, store, new_session_id, parent.actor_id, parent.metadata,
                    session_id, parent.root_session_id, now)
                copied = conn.execute(
                    "INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data, "
                    "role, type, tool_name, model, in_tokens, out_tokens) "
                    "SELECT ?, seq, tenant, 'itm_' || lower(hex(randomblob(16))), create_time, "
                    "format, data, role, type, tool_name, model, in_tokens, out_tokens "
                    "FROM items WHERE sid = ? AND seq <= ? ORDER BY seq",
                    (child_sid, parent_sid, last_seq if last_seq is not None else 2**62))
                conn.execute("UPDATE sessions SET item_count = ? WHERE sid = ?",
                             (copied.rowcount, child_sid))
                if conn.execute(
                        "SELECT index_items FROM session_stores WHERE tenant = ? AND name = ?",
                        (tenant, store)).fetchone()[0]:
                    defer(conn, "item", "SELECT id FROM items WHERE sid = ?", (child_sid,))
                conn.execute(FORK_VECTORS.format(p="?"), (parent_sid, child_sid))
            return forked_record(parent, new_session_id, now)

        return await self._run_write(run)

    # items -----------------------------------------------------------------------------

    async def append_items(
        self, tenant: str, store: str, session_id: str, items: Sequence[NewItem],
        idempotency: tuple[str, str] | None, now: datetime,
    ) -> list[Item]:
        def run(conn: sqlite3.Connection) -> list[Item]:
            with write(conn):
                return self._append(conn, tenant, store, session_id, items, idempotency, now)

        return await self._run_write(run)

    def _append(self, conn: sqlite3.Connection, tenant: str, store: str, session_id: str,
                items: Sequence[NewItem], idempotency: tuple[str, str] | None,
                now: datetime, first_seq: int | None = None) -> list[Item]:
        """Append ``items`` inside the caller's write transaction; with ``first_seq``, only
        when that is the session's next seq (else SeqConflict, nothing written)."""
        stamp = format_time(now)
        row = conn.execute(
            "SELECT s.sid, s.item_count, t.index_items FROM sessions s "
            "JOIN session_stores t ON t.tenant = s.tenant AND t.name = s.store "
            "WHERE s.tenant = ? AND s.store = ? AND s.session_id = ?",
            (tenant, store, session_id)).fetchone()
        if row is None:
            raise errors.SessionNotFound(store=store, session_id=session_id)
        sid, count, indexed = row
        if first_seq is not None and count + 1 != first_seq:
            raise errors.SeqConflict(store=store, session_id=session_id, first_seq=first_seq)
        if idempotency is not None:
            earlier = self._replayed(conn, tenant, sid, session_id, idempotency)
            if earlier is not None:
                return earlier
        _insert_items(conn, sid, count + 1, tenant, stamp, items)
        if indexed:
            defer(conn, "item", "SELECT id FROM items WHERE sid = ? AND seq > ?",
                  (sid, count))
            store_item_vectors(conn, tenant, store, sid, count + 1, items)
        conn.execute(
            "UPDATE sessions SET item_count = ?, last_activity_time = ? WHERE sid = ?",
            (count + len(items), stamp, sid))
        if idempotency is not None:
            conn.execute(
                "INSERT INTO idempotency_keys (sid, key, tenant, request_hash, item_ids, "
                "create_time) VALUES (?, ?, ?, ?, ?, ?)",
                (sid, idempotency[0], tenant, idempotency[1],
                 json.dumps([it.item_id for it in items]), stamp))
        return [
            build_item(it.item_id, session_id, count + n, now, it.data, it.format, it.role,
                       it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
            for n, it in enumerate(items, start=1)
        ]

    @staticmethod
    def _replayed(conn: sqlite3.Connection, tenant: str, sid: int, session_id: str,
                  idempotency: tuple[str, str]) -> list[Item] | None:
        key, request_hash = idempotency
        seen = conn.execute(
            "SELECT request_hash, item_ids FROM idempotency_keys WHERE sid = ? AND key = ?",
            (sid, key)).fetchone()
        if seen is None:
            return None
        if seen[0] != request_hash:
            raise errors.IdempotencyKeyReused(
                session_id=session_id, idempotency_key=key)
        rows = conn.execute(
            f"SELECT {ITEM_COLUMNS} FROM items WHERE sid = ? AND item_id IN "
            "(SELECT value FROM json_each(?)) ORDER BY seq", (sid, seen[1]))
        return to_items(rows, session_id)

    async def list_items(
        self, tenant: str, store: str, session_id: str, *, descending: bool, limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        if not descending and self._replay.max_items > 0:
            return await self._run(lambda conn: self._replay_items(
                conn, tenant, store, session_id, limit, after_seq or 0))
        sql, bound = item_page("?", ITEM_COLUMNS, "?", descending, after_seq)

        def run(conn: sqlite3.Connection) -> list[Item]:
            sid = self._sid(conn, tenant, store, session_id)
            return to_items(conn.execute(sql, (sid, bound, limit)), session_id)

        return await self._run(run)

    def _replay_items(self, conn: sqlite3.Connection, tenant: str, store: str, session_id: str,
                      limit: int, after: int) -> list[Item]:
        """Items in replay order after seq ``after``, served from the replay cache as far as
        it holds them and is still right (see ``backends/_replay.py``): one statement reads
        the items appended since and checks, in the same snapshot, that the last item
        served from the cache is still in place in the same session."""
        key = (tenant, store, session_id)
        held = self._replay.held(key, after, after + limit)
        if held is not None:
            entry, columns, data = held
            anchor = after + len(data)  # the last seq served, checked to be unchanged
            rows = conn.execute(
                f"SELECT {ITEM_COLUMNS} FROM items WHERE sid = ? AND sid = (SELECT sid FROM "
                "sessions WHERE tenant = ? AND store = ? AND session_id = ?) AND seq >= ? "
                "ORDER BY seq LIMIT ?",
                (entry.sid, tenant, store, session_id, anchor, limit - len(data) + 1),
            ).fetchall()
            if rows and rows[0][1] == anchor and rows[0][0] == entry.item_id(anchor):
                found = build_items(session_id, data, *columns)
                if len(rows) > 1:
                    added = to_items(rows[1:], session_id)
                    self._replay.extend(key, entry, [_meta(i) for i in added],
                                        [i.data for i in added])
                    found += added
                return found
            self._replay.drop(key)
        sid = self._sid(conn, tenant, store, session_id)
        found = to_items(conn.execute(
            f"SELECT {ITEM_COLUMNS} FROM items WHERE sid = ? AND seq > ? ORDER BY seq LIMIT ?",
            (sid, after, limit)), session_id)
        if after == 0 and found:
            self._replay.put(key, Replay(sid, [_meta(i) for i in found],
                                         [i.data for i in found]))
        return found

    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        def run(conn: sqlite3.Connection) -> Item:
            sid = self._sid(conn, tenant, store, session_id)
            found = to_items(conn.execute(
                f"SELECT {ITEM_COLUMNS} FROM items WHERE tenant = ? AND item_id = ? AND sid = ?",
                (tenant, item_id, sid)), session_id)
            if not found:
                raise errors.ItemNotFound(session_id=session_id, item_id=item_id)
            return found[0]

        return await self._run(run)

    async def pop_item(self, tenant: str, store: str, session_id: str,
                       now: datetime) -> Item | None:
        def run(conn: sqlite3.Connection) -> Item | None:
            with write(conn):
                row = self._session_row(conn, tenant, store, session_id)
                sid, count = row[7], row[10]
                if count == 0:
                    return None
                found = to_items(conn.execute(
                    f"SELECT {ITEM_COLUMNS} FROM items WHERE sid = ? AND seq = ?",
                    (sid, count)), session_id)
                conn.execute("DELETE FROM items WHERE sid = ? AND seq = ?", (sid, count))
                conn.execute(
                    "UPDATE sessions SET item_count = ?, last_activity_time = ? WHERE sid = ?",
                    (count - 1, format_time(now), sid))
                return found[0]

        return await self._run_write(run)

    async def clear_items(self, tenant: str, store: str, session_id: str, now: datetime) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                sid = self._sid(conn, tenant, store, session_id)
                deleted = conn.execute("DELETE FROM items WHERE sid = ?", (sid,))
                conn.execute(
                    "UPDATE sessions SET item_count = 0, last_activity_time = ? WHERE sid = ?",
                    (format_time(now), sid))
                return int(deleted.rowcount)

        return await self._run_write(run)
