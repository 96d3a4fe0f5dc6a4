"""What every part of the SQLite backend shares: connections, transactions, lookups.

The SQLite backend is the embedded default.

Every connection has ``vec_distance_cosine`` for the vector search of ``vectors.py``.

The database runs in WAL mode, so readers never block the writer. Every write is one
``BEGIN IMMEDIATE`` transaction, which takes the write lock up front and waits for it up to
the busy timeout; that makes the file safe under many threads and several processes. The
writers of one process queue on a lock of their own per file before they begin
(:func:`write`), so a writer waiting for another is woken when it commits rather than at
SQLite's next poll.

Calls made through an async client run on a few threads of their own (``_workers``), so
the event loop never blocks on disk. The sync client runs them inline on the calling
thread, which saves a thread hop per call. Either way a call takes an idle connection for
as long as it runs and gives it back, so there are as many connections as calls ever ran
at once, not one per thread: a caller that makes short-lived threads (LangGraph runs each
step's writes on threads of its own) neither opens a connection per thread, with a cold
page cache and the schema read afresh, nor leaves them open until the backend closes.

One of them is the backend's writing connection: a write made through
:meth:`SqliteCore._run_write` queues on its process's lock of the file first and then
takes that connection (unless it is busy), and a call that finds it idle takes it before
any other. Each connection has a page cache of its own, which SQLite empties whenever
another connection has committed since its last transaction, so writes that alternated
between connections read every page they touched again (about 28 reads a LangGraph turn);
the connection that wrote last still holds them.

It may touch sqlite3 and, where extensions load and it is installed, sqlite-vec (imported
only then), the replay cache (``backends._replay``), the dot product of the embeddings,
the time format (``ownstate._ids``), JSON decoding (``ownstate._jsontext``), the model and
errors, and its worker threads (``_workers``), never the API above it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from ..._ids import parse_time
from ..._jsontext import decode_json
from ...embeddings._protocol import dot
from ...errors import (
    BackendUnavailable,
    Conflict,
    InvalidInput,
    OwnstateError,
    SessionNotFound,
    StoreNotFound,
)
from ...model import Item, SessionRecord, SessionStoreRecord, build_item
from .._replay import ReplayCache
from ._workers import Workers

__all__ = [
    "ITEM_COLUMNS", "SESSION_COLUMNS", "SqliteCore", "session_record", "to_items", "write",
]

T = TypeVar("T")
R = TypeVar("R")

SESSION_COLUMNS = (
    "session_id, actor_id, parent_session_id, root_session_id, metadata, create_time, "
    "last_activity_time, sid, store, tenant"
)
ITEM_COLUMNS = (
    "item_id, seq, create_time, data, format, role, type, tool_name, model, in_tokens, "
    "out_tokens"
)
_SYNCHRONOUS = {"off", "normal", "full", "extra"}


def session_record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        tenant=row[9], store=row[8], session_id=row[0], actor_id=row[1],
        parent_session_id=row[2], root_session_id=row[3], metadata=json.loads(row[4]),
        create_time=parse_time(row[5]), last_activity_time=parse_time(row[6]),
    )


def to_items(rows: Iterator[Sequence[Any]] | list[Any], session_id: str) -> list[Item]:
    decode, make = decode_json, build_item
    stamp, moment = "", datetime.min  # items appended together share a stamp, side by side
    items = []
    for r in rows:
        if r[2] != stamp:
            stamp = r[2]
            moment = parse_time(stamp)
        items.append(make(r[0], session_id, r[1], moment, decode(r[3]), r[4], r[5], r[6],
                          r[7], r[8], r[9], r[10]))
    return items


def _translate(exc: sqlite3.Error) -> OwnstateError:
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        return Conflict(f"the database refused the write: {text}")
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return BackendUnavailable(f"the SQLite database stayed locked: {text}")
    return BackendUnavailable(f"SQLite failed: {text}")


def _cosine_distance(a: bytes, b: bytes) -> float:
    return 1.0 - dot(a, b)


def _vector_functions(conn: sqlite3.Connection) -> None:
    """Give the connection ``vec_distance_cosine``: sqlite-vec's, in C, where this Python's
    ``sqlite3`` may load extensions and that package (``embed`` extra) is installed, else
    the same function in Python (for the unit vectors ownstate stores, ``1 - dot``).
    sqlite-vec is not even imported where extensions cannot load."""
    if hasattr(conn, "enable_load_extension"):
        try:
            import sqlite_vec  # type: ignore[import-untyped,unused-ignore]

            conn.enable_load_extension(True)
            try:
                sqlite_vec.load(conn)
            finally:
                conn.enable_load_extension(False)
            return
        except (ImportError, AttributeError, sqlite3.Error):
            pass
    conn.create_function("vec_distance_cosine", 2, _cosine_distance, deterministic=True)


class _Connection(sqlite3.Connection):
    """A connection of a backend that opens its own: it carries the lock its process's
    writers to the same file take before ``BEGIN IMMEDIATE`` (see :func:`write`)."""

    writers: threading.RLock | None = None
    wait: float = 0.0
    wrote: bool = False  # committed a write since the pool last took it back


def _wrote_last(conn: sqlite3.Connection) -> bool:
    """Whether ``conn``, given back to the pool, committed a write while it was out."""
    wrote = getattr(conn, "wrote", False)
    if wrote:
        conn.wrote = False  # type: ignore[attr-defined]
    return bool(wrote)


#: one lock per database file, shared by every backend of this process that opens it
_WRITERS: dict[str, threading.RLock] = {}
_WRITERS_LOCK = threading.Lock()


def _writers(path: str) -> threading.RLock:
    key = path if path.startswith("file:") or path == ":memory:" else str(Path(path).resolve())
    with _WRITERS_LOCK:
        lock = _WRITERS.get(key)
        if lock is None:
            lock = _WRITERS[key] = threading.RLock()
        return lock


@contextmanager
def write(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction that takes the write lock before it reads anything.

    Writers of one process to one file first queue on a lock of their own, so that a
    writer waiting for another is woken the moment it commits: SQLite's busy handler,
    which still decides between processes, polls by sleeping 1 ms, then 2, then 5, which
    a LangGraph step's two threads (its checkpoint and its writes) paid on about one
    write in twenty. The lock is reentrant, so a thread that nests a write on a second
    connection waits on SQLite's busy timeout as it did without it; a writer that waits
    longer than that timeout for the lock fails as SQLite would ("database is locked").
    """
    writers = getattr(conn, "writers", None)
    if writers is not None and not writers.acquire(timeout=getattr(conn, "wait", -1)):
        raise sqlite3.OperationalError("database is locked (by a writer of this process)")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        if writers is not None:
            conn.wrote = True  # type: ignore[attr-defined]
    finally:
        if writers is not None:
            writers.release()


class SqliteCore:
    """One SQLite file: its connections (one per call running) and how work reaches them.

    Give it a path, or a ready ``sqlite3.Connection`` (which it then uses inline and never
    closes). ``busy_timeout`` is how long a write waits for another writer, in seconds.
    ``synchronous`` is SQLite's durability setting: ``normal`` (the default) survives any
    crash of the process; ``full`` also survives power loss. ``replay_cache`` is how many
    items the replay cache may hold (see ``backends/_replay.py``; 0 turns it off).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        connection: sqlite3.Connection | None = None,
        busy_timeout: float = 10.0,
        synchronous: str = "normal",
        inline: bool = False,
        threads: int = 4,
        replay_cache: int = 20_000,
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
        self._idle: list[sqlite3.Connection] = []
        # the connection the last write went through, while idle (see the module docstring)
        self._writer: sqlite3.Connection | None = None
        self._writers = _writers(self._path) if self._path is not None else None
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()
        self._workers: Workers | None = None
        self._closed = False
        # calls run on several threads at once (the async client's pool, or the threads
        # of a sync client's caller): the cache has a lock of its own
        self._replay = ReplayCache(replay_cache)
        if connection is not None:
            self._configure(connection)

    # connections -----------------------------------------------------------------------

    def _exists(self) -> bool:
        return self._path is not None and (
            self._path.startswith("file:") or Path(self._path).exists())

    def require_directory(self) -> None:
        """Refuse a database path whose directory does not exist: SQLite cannot create the
        file there, so no migration could ever help.

        Raises :class:`~ownstate.errors.InvalidInput` (``field="url"``).
        """
        if self._path is None or self._path.startswith("file:") or self._path == ":memory:":
            return
        directory = Path(self._path).absolute().parent
        if not directory.is_dir():
            what = "is not a directory" if directory.exists() else "does not exist"
            raise InvalidInput(f"cannot open the SQLite database {self._path}: the directory "
                               f"{directory} {what}", field="url")

    def _configure(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        _vector_functions(conn)

    def _open(self) -> sqlite3.Connection:
        if self._closed:
            raise BackendUnavailable("this SQLite backend is closed")
        assert self._path is not None
        self.require_directory()
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False,
                               timeout=self._busy_timeout, factory=_Connection)
        conn.writers = _writers(self._path)
        conn.wait = self._busy_timeout
        self._configure(conn)
        with self._opened_lock:
            self._opened.append(conn)
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None
        if self._given is not None:
            conn = self._given
        elif self._closed:
            raise BackendUnavailable("this SQLite backend is closed")
        else:
            conn = self._take()
        try:
            if conn is None:
                conn = self._open()
            return fn(conn)
        except sqlite3.Error as exc:
            raise _translate(exc) from exc
        finally:
            if conn is not None and conn is not self._given:
                self._give_back(conn)

    def _call_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """:meth:`_call` for a write: its process's writers of the file queue first, so the
        write takes the writing connection, whose page cache the last write left current."""
        writers = self._writers
        if self._given is not None or writers is None:
            return self._call(fn)
        if not writers.acquire(timeout=self._busy_timeout):
            raise _translate(sqlite3.OperationalError(
                "database is locked (by a writer of this process)"))
        try:
            return self._call(fn)
        finally:
            writers.release()

    def _take(self) -> sqlite3.Connection | None:
        """An idle connection, the writing one first; None when there is none."""
        with self._opened_lock:
            conn, self._writer = self._writer, None
            if conn is None and self._idle:
                conn = self._idle.pop()
            return conn

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._opened_lock:
            if self._closed:  # close() closed it, or will
                return
            if conn.in_transaction:  # a call cut short: never hand on its transaction
                conn.rollback()
            # one that wrote while it was out takes the writing connection's place
            if _wrote_last(conn) or self._writer is None:
                if self._writer is not None:
                    self._idle.append(self._writer)
                self._writer = conn
            else:
                self._idle.append(conn)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._inline:
            return self._call(fn)
        return await self._threads_for_calls().run(self._call, fn)

    async def _run_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """:meth:`_run` for ``fn`` that writes (its transaction opened by :func:`write`)."""
        if self._inline:
            return self._call_write(fn)
        return await self._threads_for_calls().run(self._call_write, fn)

    def _threads_for_calls(self) -> Workers:
        if self._closed:  # refused here, without starting threads again
            raise BackendUnavailable("this SQLite backend is closed")
        workers = self._workers
        if workers is None:
            workers = self._workers = Workers(self._threads, "ownstate-sqlite")
        return workers

    async def close(self) -> None:
        self._closed = True
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        with self._opened_lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
            self._idle.clear()
            self._writer = None

    # lookups shared by several operations -----------------------------------------------

    @staticmethod
    def _session_row(conn: sqlite3.Connection, tenant: str, store: str,
                     session_id: str) -> tuple[Any, ...]:
        row = conn.execute(
            f"SELECT {SESSION_COLUMNS}, item_count FROM sessions "
            "WHERE tenant = ? AND store = ? AND session_id = ?",
            (tenant, store, session_id),
        ).fetchone()
        if row is None:
            raise SessionNotFound(store=store, session_id=session_id)
        return tuple(row)

    @staticmethod
    def _sid(conn: sqlite3.Connection, tenant: str, store: str, session_id: str) -> int:
        row = conn.execute(
            "SELECT sid FROM sessions WHERE tenant = ? AND store = ? AND session_id = ?",
            (tenant, store, session_id),
        ).fetchone()
        if row is None:
            raise SessionNotFound(store=store, session_id=session_id)
        return int(row[0])

    async def _list_named(self, table: str, record: Callable[[str, str, datetime], R],
                          tenant: str, limit: int, after: str | None) -> list[R]:
        """A page of the tenant's session stores or memory stores (``table``), by name
        after ``after``, each made by ``record(tenant, name, create_time)``."""
        def run(conn: sqlite3.Connection) -> list[R]:
            rows = conn.execute(
                f"SELECT name, create_time FROM {table} WHERE tenant = ? AND name > ? "
                "ORDER BY name LIMIT ?", (tenant, after or "", limit))
            return [record(tenant, r[0], parse_time(r[1])) for r in rows]

        return await self._run(run)

    @staticmethod
    def _require_store(conn: sqlite3.Connection, tenant: str, name: str) -> SessionStoreRecord:
        row = conn.execute(
            "SELECT create_time FROM session_stores WHERE tenant = ? AND name = ?",
            (tenant, name),
        ).fetchone()
        if row is None:
            raise StoreNotFound(store=name)
        return SessionStoreRecord(tenant=tenant, name=name, create_time=parse_time(row[0]))

