"""The SQLite backend: the embedded default.

The database runs in WAL mode, so readers never block the writer. Every write is one
``BEGIN IMMEDIATE`` transaction, which takes the write lock up front and waits for it up to
the busy timeout; that makes the file safe under many threads and several processes.

Calls made through an async client run in a small thread pool, one connection per thread,
so the event loop never blocks on disk. The sync client runs them inline on its own
private event-loop thread, which saves a thread hop per call.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .._ids import format_time, parse_time
from ..errors import (
    AlreadyExists,
    BackendUnavailable,
    Conflict,
    HasChildren,
    IdempotencyKeyReused,
    InvalidInput,
    ItemNotFound,
    LimitExceeded,
    OwnstateError,
    SchemaVersion,
    SessionNotFound,
    StoreNotEmpty,
    StoreNotFound,
)
from ..model import Item, SessionRecord, SessionStoreRecord
from .base import Backend, Capability, NewItem, SessionOrder
from .sqlite_schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["SqliteBackend"]

T = TypeVar("T")

_SESSION_COLUMNS = (
    "session_id, actor_id, parent_session_id, root_session_id, metadata, create_time, "
    "last_activity_time, sid, store, tenant"
)
_ITEM_COLUMNS = (
    "item_id, seq, create_time, data, format, role, type, tool_name, model, in_tokens, "
    "out_tokens"
)
_SYNCHRONOUS = {"off", "normal", "full", "extra"}


def _session_record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        tenant=row[9], store=row[8], session_id=row[0], actor_id=row[1],
        parent_session_id=row[2], root_session_id=row[3], metadata=json.loads(row[4]),
        create_time=parse_time(row[5]), last_activity_time=parse_time(row[6]),
    )


def _items(rows: Iterator[Sequence[Any]] | list[Any], session_id: str) -> list[Item]:
    loads = json.loads
    return [
        Item(r[0], session_id, r[1], parse_time(r[2]), loads(r[3]), r[4], r[5], r[6], r[7],
             r[8], r[9], r[10])
        for r in rows
    ]


def _translate(exc: sqlite3.Error) -> OwnstateError:
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        return Conflict(f"the database refused the write: {text}")
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return BackendUnavailable(f"the SQLite database stayed locked: {text}")
    return BackendUnavailable(f"SQLite failed: {text}")


@contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction that takes the write lock before it reads anything."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SqliteBackend(Backend):
    """Sessions in one SQLite file.

    Give it a path, or a ready ``sqlite3.Connection`` (which it then uses inline and never
    closes). ``busy_timeout`` is how long a write waits for another writer, in seconds.
    ``synchronous`` is SQLite's durability setting: ``normal`` (the default) survives any
    crash of the process; ``full`` also survives power loss.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset(
        {Capability.MULTIPROCESS, Capability.PERSISTENT, Capability.MIGRATIONS}
    )

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        connection: sqlite3.Connection | None = None,
        busy_timeout: float = 10.0,
        synchronous: str = "normal",
        inline: bool = False,
        threads: int = 4,
    ) -> None:
        if (path is None) == (connection is None):
            raise InvalidInput("give SqliteBackend a path or a connection, not both")
        if synchronous.lower() not in _SYNCHRONOUS:
            raise InvalidInput(f"synchronous must be one of {sorted(_SYNCHRONOUS)}",
                               field="synchronous")
        self._path = str(path) if path is not None else None
        self._given = connection
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous.upper()
        self._inline = inline or connection is not None
        self._threads = threads
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        if connection is not None:
            self._configure(connection)

    # connections -----------------------------------------------------------------------

    def _configure(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")

    def _conn(self) -> sqlite3.Connection:
        if self._given is not None:
            return self._given
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise BackendUnavailable("this SQLite backend is closed")
            assert self._path is not None
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False,
                                   timeout=self._busy_timeout)
            self._configure(conn)
            self._local.conn = conn
            with self._opened_lock:
                self._opened.append(conn)
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._conn())
        except sqlite3.Error as exc:
            raise _translate(exc) from exc

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._inline:
            return self._call(fn)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="ownstate-sqlite")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn)

    async def close(self) -> None:
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._opened_lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()

    # schema ----------------------------------------------------------------------------

    @staticmethod
    def _found_version(conn: sqlite3.Connection) -> int:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ownstate_schema'"
        ).fetchone()
        if exists is None:
            return 0
        row = conn.execute("SELECT max(version) FROM ownstate_schema").fetchone()
        return int(row[0] or 0)

    async def schema_status(self) -> tuple[int, int]:
        return await self._run(lambda conn: (self._found_version(conn), SCHEMA_VERSION))

    async def setup(self, *, migrate: bool) -> None:
        def run(conn: sqlite3.Connection) -> None:
            found = self._found_version(conn)
            if found > SCHEMA_VERSION:
                raise SchemaVersion(
                    f"the database schema is version {found}, newer than this ownstate "
                    f"({SCHEMA_VERSION}); upgrade ownstate", found=found, expected=SCHEMA_VERSION)
            if found == SCHEMA_VERSION:
                return
            if not migrate:
                raise SchemaVersion(
                    f"the database schema is version {found}, expected {SCHEMA_VERSION}; "
                    "run `ownstate migrate`", found=found, expected=SCHEMA_VERSION)
            for migration in MIGRATIONS:
                with _write(conn):
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS ownstate_schema (version INTEGER PRIMARY "
                        "KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)")
                    if self._found_version(conn) >= migration.version:
                        continue  # another process applied it first
                    for statement in migration.statements:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO ownstate_schema VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ'))",
                        (migration.version, migration.description))

        await self._run(run)

    # lookups shared by several operations -----------------------------------------------

    @staticmethod
    def _session_row(conn: sqlite3.Connection, tenant: str, store: str,
                     session_id: str) -> tuple[Any, ...]:
        row = conn.execute(
            f"SELECT {_SESSION_COLUMNS}, item_count FROM sessions "
            "WHERE tenant = ? AND store = ? AND session_id = ?",
            (tenant, store, session_id),
        ).fetchone()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} in store {store!r}",
                                  store=store, session_id=session_id)
        return tuple(row)

    @staticmethod
    def _sid(conn: sqlite3.Connection, tenant: str, store: str, session_id: str) -> int:
        row = conn.execute(
            "SELECT sid FROM sessions WHERE tenant = ? AND store = ? AND session_id = ?",
            (tenant, store, session_id),
        ).fetchone()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} in store {store!r}",
                                  store=store, session_id=session_id)
        return int(row[0])

    @staticmethod
    def _require_store(conn: sqlite3.Connection, tenant: str, name: str) -> SessionStoreRecord:
        row = conn.execute(
            "SELECT create_time FROM session_stores WHERE tenant = ? AND name = ?",
            (tenant, name),
        ).fetchone()
        if row is None:
            raise StoreNotFound(f"no session store {name!r}", store=name)
        return SessionStoreRecord(tenant=tenant, name=name, create_time=parse_time(row[0]))

    # session stores --------------------------------------------------------------------

    async def create_store(self, tenant: str, name: str, now: datetime) -> SessionStoreRecord:
        def run(conn: sqlite3.Connection) -> SessionStoreRecord:
            with _write(conn):
                inserted = conn.execute(
                    "INSERT INTO session_stores (tenant, name, create_time) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING", (tenant, name, format_time(now)))
                if inserted.rowcount == 0:
                    raise AlreadyExists(f"session store {name!r} already exists", store=name)
            return SessionStoreRecord(tenant=tenant, name=name, create_time=now)

        return await self._run(run)

    async def get_store(self, tenant: str, name: str) -> SessionStoreRecord:
        return await self._run(lambda conn: self._require_store(conn, tenant, name))

    async def list_stores(
        self, tenant: str, limit: int, after: str | None
    ) -> list[SessionStoreRecord]:
        def run(conn: sqlite3.Connection) -> list[SessionStoreRecord]:
            rows = conn.execute(
                "SELECT name, create_time FROM session_stores WHERE tenant = ? AND name > ? "
                "ORDER BY name LIMIT ?", (tenant, after or "", limit))
            return [SessionStoreRecord(tenant=tenant, name=r[0], create_time=parse_time(r[1]))
                    for r in rows]

        return await self._run(run)

    async def delete_store(self, tenant: str, name: str, force: bool) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with _write(conn):
                self._require_store(conn, tenant, name)
                (count,) = conn.execute(
                    "SELECT count(*) FROM sessions WHERE tenant = ? AND store = ?",
                    (tenant, name)).fetchone()
                if count and not force:
                    raise StoreNotEmpty(f"session store {name!r} holds {count} sessions",
                                        store=name, sessions=count)
                conn.execute("DELETE FROM sessions WHERE tenant = ? AND store = ?", (tenant, name))
                conn.execute("DELETE FROM session_stores WHERE tenant = ? AND name = ?",
                             (tenant, name))
                return int(count)

        return await self._run(run)

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
            raise AlreadyExists(f"session {session_id!r} already exists in store {store!r}",
                                store=store, session_id=session_id)
        return int(cursor.lastrowid or 0)

    async def create_session(
        self, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], now: datetime,
    ) -> SessionRecord:
        def run(conn: sqlite3.Connection) -> SessionRecord:
            with _write(conn):
                self._require_store(conn, tenant, store)
                self._insert_session(conn, tenant, store, session_id, actor_id, metadata,
                                     None, session_id, now)
            return SessionRecord(
                tenant=tenant, store=store, session_id=session_id, actor_id=actor_id,
                parent_session_id=None, root_session_id=session_id, metadata=dict(metadata),
                create_time=now, last_activity_time=now,
            )

        return await self._run(run)

    async def get_session(self, tenant: str, store: str, session_id: str) -> SessionRecord:
        return await self._run(
            lambda conn: _session_record(self._session_row(conn, tenant, store, session_id)))

    async def list_sessions(
        self, tenant: str, store: str, *, actor_id: str | None, metadata: Mapping[str, str],
        order: SessionOrder, descending: bool, limit: int, after: Sequence[Any] | None,
    ) -> tuple[list[SessionRecord], list[Any] | None]:
        where = ["tenant = ?", "store = ?"]
        params: list[Any] = [tenant, store]
        if actor_id is not None:
            where.append("actor_id = ?")
            params.append(actor_id)
        for key, value in metadata.items():
            where.append("json_extract(metadata, ?) = ?")
            params.extend((f'$."{key}"', value))
        compare = "<" if descending else ">"
        direction = "DESC" if descending else "ASC"
        if order == "create_time":
            if after is not None:
                where.append(f"sid {compare} ?")
                params.append(after[0])
            order_sql = f"sid {direction}"
        else:
            if after is not None:
                where.append(f"(last_activity_time, sid) {compare} (?, ?)")
                params.extend(after[:2])
            order_sql = f"last_activity_time {direction}, sid {direction}"
        sql = (f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE {' AND '.join(where)} "
               f"ORDER BY {order_sql} LIMIT ?")
        params.append(limit + 1)

        def run(conn: sqlite3.Connection) -> tuple[list[SessionRecord], list[Any] | None]:
            self._require_store(conn, tenant, store)
            rows = conn.execute(sql, params).fetchall()
            page = rows[:limit]
            cursor: list[Any] | None = None
            if len(rows) > limit:
                last = page[-1]
                cursor = [last[7]] if order == "create_time" else [last[6], last[7]]
            return [_session_record(r) for r in page], cursor

        return await self._run(run)

    async def update_metadata(
        self, tenant: str, store: str, session_id: str, changes: Mapping[str, str | None],
        max_labels: int,
    ) -> SessionRecord:
        def run(conn: sqlite3.Connection) -> SessionRecord:
            with _write(conn):
                row = list(self._session_row(conn, tenant, store, session_id))
                labels: dict[str, str] = json.loads(row[4])
                for key, value in changes.items():
                    if value is None:
                        labels.pop(key, None)
                    else:
                        labels[key] = value
                if len(labels) > max_labels:
                    raise LimitExceeded(f"at most {max_labels} metadata labels",
                                        field="metadata", limit=max_labels, actual=len(labels))
                row[4] = json.dumps(labels, ensure_ascii=False)
                conn.execute("UPDATE sessions SET metadata = ? WHERE sid = ?", (row[4], row[7]))
            return _session_record(row)

        return await self._run(run)

    async def delete_session(self, tenant: str, store: str, session_id: str, force: bool) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with _write(conn):
                self._sid(conn, tenant, store, session_id)
                children = [r[0] for r in conn.execute(
                    "SELECT session_id FROM sessions WHERE tenant = ? AND store = ? "
                    "AND parent_session_id = ? ORDER BY sid", (tenant, store, session_id))]
                if children and not force:
                    raise HasChildren(
                        f"session {session_id!r} has forks; delete with force=True",
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

        return await self._run(run)

    async def fork_session(
        self, tenant: str, store: str, session_id: str, new_session_id: str,
        up_to_item_id: str | None, now: datetime,
    ) -> SessionRecord:
        def run(conn: sqlite3.Connection) -> SessionRecord:
            with _write(conn):
                parent_row = self._session_row(conn, tenant, store, session_id)
                parent, parent_sid = _session_record(parent_row), parent_row[7]
                last_seq = None
                if up_to_item_id is not None:
                    row = conn.execute(
                        "SELECT seq FROM items WHERE tenant = ? AND item_id = ? AND sid = ?",
                        (tenant, up_to_item_id, parent_sid)).fetchone()
                    if row is None:
                        raise ItemNotFound(
                            f"no item {up_to_item_id!r} in session {session_id!r}",
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
            return SessionRecord(
                tenant=tenant, store=store, session_id=new_session_id,
                actor_id=parent.actor_id, parent_session_id=session_id,
                root_session_id=parent.root_session_id, metadata=parent.metadata,
                create_time=now, last_activity_time=now,
            )

        return await self._run(run)

    # items -----------------------------------------------------------------------------

    async def append_items(
        self, tenant: str, store: str, session_id: str, items: Sequence[NewItem],
        idempotency: tuple[str, str] | None, now: datetime,
    ) -> list[Item]:
        stamp = format_time(now)

        def run(conn: sqlite3.Connection) -> list[Item]:
            with _write(conn):
                row = conn.execute(
                    "SELECT sid, item_count FROM sessions "
                    "WHERE tenant = ? AND store = ? AND session_id = ?",
                    (tenant, store, session_id)).fetchone()
                if row is None:
                    raise SessionNotFound(f"no session {session_id!r} in store {store!r}",
                                          store=store, session_id=session_id)
                sid, count = row
                if idempotency is not None:
                    earlier = self._replayed(conn, tenant, sid, session_id, idempotency)
                    if earlier is not None:
                        return earlier
                conn.executemany(
                    "INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data, "
                    "role, type, tool_name, model, in_tokens, out_tokens) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(sid, count + n, tenant, it.item_id, stamp, it.format, it.data_json,
                      it.role, it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
                     for n, it in enumerate(items, start=1)],
                )
                conn.execute(
                    "UPDATE sessions SET item_count = ?, last_activity_time = ? WHERE sid = ?",
                    (count + len(items), stamp, sid))
                if idempotency is not None:
                    conn.execute(
                        "INSERT INTO idempotency_keys (sid, key, tenant, request_hash, item_ids, "
                        "create_time) VALUES (?, ?, ?, ?, ?, ?)",
                        (sid, idempotency[0], tenant, idempotency[1],
                         json.dumps([it.item_id for it in items]), stamp))
            loads = json.loads
            return [
                Item(it.item_id, session_id, count + n, now, loads(it.data_json), it.format,
                     it.role, it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
                for n, it in enumerate(items, start=1)
            ]

        return await self._run(run)

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
            raise IdempotencyKeyReused(
                f"idempotency key {key!r} was used with a different request",
                session_id=session_id, idempotency_key=key)
        rows = conn.execute(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = ? AND item_id IN "
            "(SELECT value FROM json_each(?)) ORDER BY seq", (sid, seen[1]))
        return _items(rows, session_id)

    async def list_items(
        self, tenant: str, store: str, session_id: str, *, descending: bool, limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        if descending:
            sql = (f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = ? AND seq < ? "
                   "ORDER BY seq DESC LIMIT ?")
            bound = after_seq if after_seq is not None else 2**62
        else:
            sql = (f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = ? AND seq > ? "
                   "ORDER BY seq LIMIT ?")
            bound = after_seq if after_seq is not None else 0

        def run(conn: sqlite3.Connection) -> list[Item]:
            sid = self._sid(conn, tenant, store, session_id)
            return _items(conn.execute(sql, (sid, bound, limit)), session_id)

        return await self._run(run)

    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        def run(conn: sqlite3.Connection) -> Item:
            sid = self._sid(conn, tenant, store, session_id)
            found = _items(conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE tenant = ? AND item_id = ? AND sid = ?",
                (tenant, item_id, sid)), session_id)
            if not found:
                raise ItemNotFound(f"no item {item_id!r} in session {session_id!r}",
                                   session_id=session_id, item_id=item_id)
            return found[0]

        return await self._run(run)

    async def pop_item(self, tenant: str, store: str, session_id: str,
                       now: datetime) -> Item | None:
        def run(conn: sqlite3.Connection) -> Item | None:
            with _write(conn):
                row = self._session_row(conn, tenant, store, session_id)
                sid, count = row[7], row[10]
                if count == 0:
                    return None
                found = _items(conn.execute(
                    f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = ? AND seq = ?",
                    (sid, count)), session_id)
                conn.execute("DELETE FROM items WHERE sid = ? AND seq = ?", (sid, count))
                conn.execute(
                    "UPDATE sessions SET item_count = ?, last_activity_time = ? WHERE sid = ?",
                    (count - 1, format_time(now), sid))
                return found[0]

        return await self._run(run)

    async def clear_items(self, tenant: str, store: str, session_id: str, now: datetime) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with _write(conn):
                sid = self._sid(conn, tenant, store, session_id)
                deleted = conn.execute("DELETE FROM items WHERE sid = ?", (sid,))
                conn.execute(
                    "UPDATE sessions SET item_count = 0, last_activity_time = ? WHERE sid = ?",
                    (format_time(now), sid))
                return int(deleted.rowcount)

        return await self._run(run)
