"""What every part of the PostgreSQL backend shares: the pool, transactions, error mapping.

Every operation is one transaction on a pooled connection (a read of one statement is a
transaction of its own). A transaction opens with its first statement, in the same round
trip, pipelined: ``BEGIN``, then ``set_config(..., true)`` (the ``SET LOCAL`` form, which
lasts until the transaction ends) of the schema search path, the time zone and
``ownstate.tenant``, then the statement. The row-level security policies on every
tenant-scoped table compare rows against ``ownstate.tenant``: a query that forgot its
tenant predicate still sees only the caller's tenant, and a connection back in the pool
carries no tenant. A transaction of one statement (a read of one statement, or a write
whose single statement is its last, ``execute(..., last=True)``) needs neither ``BEGIN``
nor ``COMMIT``: what a pipeline sends before its Sync runs as one implicit transaction,
committed at the Sync. So the common operations cost one round trip. Those pipelines
are sent below psycopg's cursor and pipeline objects, with psycopg's own parts
(``_trip``): the same messages for less of the client's CPU.

A connection found dead before use (the server restarted, a proxy dropped it) is replaced
without a word. A connection lost during an operation is retried on a fresh one whenever
that is safe: always for reads, and for writes whose commit had not been sent (PostgreSQL
applies nothing of a transaction it never saw committed). A write whose connection was
lost once its commit was on the wire raises :class:`~ownstate.errors.BackendUnavailable`
saying it may or may not have been applied.

**Checkpoint writes commit without waiting for the disk** (``synchronous_commit`` off for
their transaction only), unless the backend is made with ``synchronous_checkpoints=True``.
Checkpoints are the framework's disposable scratch (rebuildable from sessions and runs),
and a commit that waits for its WAL flush costs a few milliseconds where the statement
costs a fraction of one. What that gives up is narrow: the commit is still atomic, ordered
and visible at once, fencing is unchanged (run rows, which hold the lease, always commit
synchronously), and a crash of the client loses nothing. Only a crash of the server or
its machine can lose checkpoint writes committed in the last moments (PostgreSQL flushes
them within three ``wal_writer_delay``, 0.6 s by default) and never anything committed
before a synchronous commit, because the WAL is flushed in order: a framework step that
ends by appending items or closing its run has made all of its checkpoints durable.

**A sync client runs the backend inline** when the backend is made with ``inline=True``
(``open_backend(..., inline=True)``, as the sync client opens a URL) or given a
synchronous ``psycopg_pool.ConnectionPool``: the same operations then await psycopg's
synchronous connections through ``_inline``, never suspend, and run on the calling
thread; see :attr:`PostgresCore.runs_inline`. A call relayed for async code (an adapter's
async method on a sync client) runs on a worker thread instead, so that code's event loop
is never blocked (``ownstate._inline``).

It may touch psycopg and psycopg_pool (through ``ownstate._extras``), its synchronous
wrappers (``_inline``), the round trip below its cursors (``_trip``), the arrays built in
binary (``_arrays``), whether a call is driven inline (``ownstate._inline``), the replay
cache (``backends._replay``) and errors, never the API above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from ..._extras import requires
from ..._inline import drive, relayed
from ...errors import BackendUnavailable, Conflict, InvalidInput, OwnstateError
from .._replay import ReplayCache
from . import _trip
from ._arrays import BinaryBigints, BinaryByteas, BinaryInts, BinaryTexts, BinaryVectors
from ._inline import InlineConnection, InlinePool
from ._trip import Statement, Trip

with requires("postgres", "the PostgreSQL backend"):
    import psycopg
    from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline, sql
    from psycopg.abc import Params
    from psycopg.adapt import Dumper
    from psycopg.postgres import types
    from psycopg.pq import Format, TransactionStatus
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

__all__ = ["EXPORT_SNAPSHOT", "Cursor", "PostgresCore", "translate"]

T = TypeVar("T")
Row = tuple[Any, ...]
Query = str | bytes | sql.SQL | sql.Composed

#: How many times an operation is retried after losing its connection midway. A connection
#: lost on its first round trip (left in the pool by a server restart, say) is replaced,
#: up to the pool's size, without counting against this.
_RETRIES_AFTER_LOSS = 2
#: How many times a transaction the server rolled back (deadlock, serialisation) is rerun.
_RETRIES_AFTER_ROLLBACK = 3
_PIPELINES = AsyncPipeline.is_supported()
#: A pool this backend opens prepares a statement the second time it runs on a connection
#: (psycopg's default is the sixth): the server then parses it once per connection, which
#: on the few connections of a pool is most of its runs. A statement run once is not
#: prepared. (Behind a transaction pooler that cannot track prepared statements, give the
#: backend a pool whose connections have ``prepare_threshold=None``.)
_PREPARE_THRESHOLD = 1
#: The backend whose export reads one snapshot, and the snapshot's id: its reads with
#: ``snapshot`` (REPEATABLE READ) adopt it (``SET TRANSACTION SNAPSHOT``), so every page of
#: an export sees the database as of one moment (see ``TransferPort.export_snapshot``).
EXPORT_SNAPSHOT: ContextVar[tuple[object, str] | None] = ContextVar(
    "ownstate_postgres_export_snapshot", default=None)
_SETTINGS = ("SELECT set_config('search_path', %s, true), set_config('TimeZone', 'UTC', true)")
_SETTINGS_FOR_TENANT = _SETTINGS + ", set_config('ownstate.tenant', %s, true)"
#: Added to a transaction's settings by a write that may commit without its WAL flush.
_ASYNC_COMMIT = ", set_config('synchronous_commit', 'off', true)"
#: Added to a transaction's settings by the checkpoint operations (a framework step's),
#: whose statements look rows up by key: the server then binds their prepared statements
#: to the generic plan instead of planning each execution for its parameters, which for
#: those statements (a put with items has 36) took longer than running them.
_GENERIC_PLAN = ", set_config('plan_cache_mode', 'force_generic_plan', true)"


def _sent_as_it_is(cls: type[bytes], type_name: str) -> type[Dumper]:
    """A binary dumper of ``cls`` (bytes in the wire form of ``type_name``'s array)."""

    class Sent(Dumper):
        format = Format.BINARY
        oid = types[type_name].array_oid

        def dump(self, obj: bytes) -> bytes:
            return obj

    Sent.__name__ = f"_{cls.__name__}Dumper"
    return Sent


#: The arrays this backend builds in their binary form (``_arrays``, ``_tsvector``), which
#: its connections send as they are: psycopg would dump each element in Python.
_ARRAY_DUMPERS = [(cls, _sent_as_it_is(cls, name)) for cls, name in (
    (BinaryVectors, "tsvector"), (BinaryInts, "int4"), (BinaryTexts, "text"),
    (BinaryBigints, "int8"), (BinaryByteas, "bytea"))]


#: The connections that know how to send those arrays: every connection the backend
#: uses, its own pool's or one given to it, is taught once. (This and ``_BYPASS`` hold
#: psycopg's connections: see ``_raw``.)
_TAUGHT: weakref.WeakSet[Any] = weakref.WeakSet()


#: Whether row-level security leaves a connection's role alone, by (search path, table):
#: see ``Cursor.load_rows``.
_BYPASS: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], bool]] = (
    weakref.WeakKeyDictionary())
#: The temporary table a load under row-level security goes through.
_LOAD = "pg_temp.ownstate_load"


def _raw(conn: AsyncConnection[Any]) -> Any:
    """The psycopg connection itself: an inline connection is a new wrapper at each
    checkout, so what is remembered per connection is keyed by what it wraps."""
    return conn.raw if isinstance(conn, InlineConnection) else conn


def _teach(conn: AsyncConnection[Any]) -> None:
    for cls, dumper in _ARRAY_DUMPERS:
        conn.adapters.register_dumper(cls, dumper)
    _TAUGHT.add(_raw(conn))


def translate(exc: psycopg.Error) -> OwnstateError:
    """The ownstate error for a driver error that escaped an operation."""
    if isinstance(exc, psycopg.errors.IntegrityError):
        return Conflict(f"the database refused the write: {exc}")
    if isinstance(exc, psycopg.errors.DataError):
        return InvalidInput(f"the database refused the input: {exc}")
    return BackendUnavailable(f"PostgreSQL failed: {exc}")


class _Attempt:
    """How far one try of an operation got, so a failure can be judged safe to retry."""

    __slots__ = ("committing", "conn", "round_trips")

    def __init__(self) -> None:
        self.conn: AsyncConnection[Any] | None = None
        self.round_trips = 0
        self.committing = False

    def lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection is gone (not a refusal on a live one)."""
        if isinstance(exc, psycopg.errors.AdminShutdown):
            return True
        conn = self.conn
        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and (
            conn is None or conn.broken or conn.closed)


def _looks_dead(conn: AsyncConnection[Any]) -> bool:
    """Whether an idle pooled connection has been closed by the server, without a round
    trip: an idle connection has nothing to read unless the server said goodbye."""
    if conn.closed or conn.broken:
        return True
    try:
        fd = conn.fileno()
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([fd], [], [], 0)  # pragma: no cover - no poll()
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)  # pragma: no cover - no poll()


class Cursor:
    """The cursor an operation runs its statements on, within its transaction.

    The transaction begins with the first statement, in the same round trip. In a read
    (``snapshot=False``) every statement is a transaction of its own, committed in that
    same round trip: under READ COMMITTED each statement reads a fresh snapshot anyway.
    In a write, ``last=True`` commits with the statement; a statement after that starts a
    new transaction.
    """

    __slots__ = ("_adopt", "_attempt", "_conn", "_made", "_open", "_read", "_settings",
                 "_snapshot", "_trip_count", "_trip_rows")

    def __init__(self, conn: AsyncConnection[Any], settings: tuple[str, tuple[str, ...]],
                 attempt: _Attempt, *, read: bool, snapshot: bool,
                 adopt: str | None = None) -> None:
        self._conn = conn
        self._adopt = adopt
        self._made: AsyncCursor[Any] | None = None
        self._settings = settings
        self._attempt = attempt
        self._read = read and not snapshot
        self._snapshot = snapshot
        self._open = False
        #: the rows (and count) of the last statement sent by ``_trip``, until they are
        #: fetched (None when the last statement went through psycopg's cursor)
        self._trip_rows: deque[Row] | None = None
        self._trip_count = -1

    @property
    def _cur(self) -> AsyncCursor[Any]:
        """psycopg's cursor, made when a statement first needs it (an operation whose
        statements all go by ``_trip`` never does)."""
        if self._made is None:
            self._made = self._conn.cursor()
        return self._made

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount if self._trip_rows is None else self._trip_count

    async def fetchone(self) -> Row | None:
        if self._trip_rows is not None:
            return self._trip_rows.popleft() if self._trip_rows else None
        row: Row | None = await self._cur.fetchone()
        return row

    async def fetchall(self) -> list[Row]:
        if self._trip_rows is not None:
            rows, self._trip_rows = list(self._trip_rows), deque()
            return rows
        fetched: list[Row] = await self._cur.fetchall()
        return fetched

    async def execute(self, query: Query, params: Params | None = None, *,
                      last: bool = False, binary: bool = False,
                      before: tuple[Query, Params] | None = None) -> None:
        """Run one statement; with ``last``, commit with it (a write's final statement);
        with ``binary``, rows arrive in binary (faster to decode numbers and times). With
        ``before``, that statement (whose rows are dropped) runs first, in the same round
        trip and transaction: in a read, the two are one transaction, and the second's
        snapshot is taken once the first is done."""
        commit = self._read or last
        if _trip.available and _PIPELINES and (commit or not self._open):
            await self._trip(query, params, binary, before, commit=commit)
            return
        if before is None:
            await self._send(lambda: self._cur.execute(query, params, binary=binary or None),
                             commit=commit)
            return
        conn, prior = self._conn, before

        async def both() -> None:
            await conn.execute(*prior)
            await self._cur.execute(query, params, binary=binary or None)

        await self._send(both, commit=commit)

    async def _trip(self, query: Query, params: Params | None, binary: bool,
                    before: tuple[Query, Params] | None, *, commit: bool) -> None:
        """``execute`` of a statement that opens or commits the transaction, in one round
        trip of ``_trip``: what ``_send`` pipelines through psycopg's cursor, sent below
        it. (A statement inside an open transaction goes through the cursor alone, which
        sends one without parameters in the simple protocol, several statements at once.)"""
        opening = not self._open
        statements = self._opening(explicit=not commit) if opening else []
        if before is not None:
            statements.append(Statement(*before))
        statements.append(Statement(query, params, binary))
        keep = len(statements) - 1
        if commit and not opening:
            statements.append(Statement("COMMIT"))
        self._sending(commit=commit)
        trip = Trip(self._conn, _raw(self._conn), statements, keep)
        self._trip_rows = None
        await self._conn.wait(trip.gen())
        self._trip_rows, self._trip_count = deque(trip.rows or ()), trip.rowcount
        self._open = not commit

    async def executemany(self, query: Query, params_seq: Iterable[Params]) -> None:
        await self._send(lambda: self._cur.executemany(query, params_seq),
                         commit=self._read)

    async def load_rows(self, table: str, columns: Sequence[str],
                        rows: Iterable[Sequence[Any]],
                        types: Sequence[str] | None = None) -> None:
        """``rows`` (values of ``columns``) into ``table`` by ``COPY ... FROM STDIN``,
        inside this write's transaction (which it opens first when no statement has yet).
        With ``types`` (the columns' type names) rows go in binary, which both sides encode
        and parse faster than text.

        PostgreSQL refuses ``COPY FROM`` into a table whose row-level security applies to
        the role, which ownstate's tables do to every role but a superuser or one with
        ``BYPASSRLS`` (they ``FORCE ROW LEVEL SECURITY``). For such a role the rows are
        copied into a temporary table made for this load (dropped with it, and at the
        latest when the transaction ends), then moved with ``INSERT ... SELECT``, which
        the policies check row by row: a row of another tenant fails the whole
        transaction. Whether the policies bind is asked once per connection and table
        (``row_security_active``). COPY cannot run in a pipeline, so it takes round trips
        of its own."""
        names = ", ".join(columns)
        binary = " (FORMAT BINARY)" if types is not None else ""
        if await self._bypasses(table):
            await self._copy(f"COPY {table} ({names}) FROM STDIN{binary}", rows, types)
            return
        await self._send(lambda: self._cur.execute(
            f"CREATE TEMP TABLE {_LOAD} ON COMMIT DROP AS SELECT {names} FROM {table} "
            "WITH NO DATA"), commit=False)
        await self._copy(f"COPY {_LOAD} ({names}) FROM STDIN{binary}", rows, types)
        conn = self._conn

        async def move() -> None:
            async with conn.pipeline():
                await self._cur.execute(
                    f"INSERT INTO {table} ({names}) SELECT {names} FROM {_LOAD}")
                await conn.execute(f"DROP TABLE {_LOAD}")

        await self._send(move, commit=False)

    async def _bypasses(self, table: str) -> bool:
        """Whether row-level security on ``table`` (in this transaction's search path)
        leaves this connection's role alone; asked once per connection."""
        key = (self._settings[1][0], table)
        known = _BYPASS.setdefault(_raw(self._conn), {})
        if key not in known:
            await self._send(lambda: self._cur.execute(
                "SELECT NOT row_security_active(%s)", (table,)), commit=False)
            found = await self._cur.fetchone()
            known[key] = bool(found is not None and found[0])
        return known[key]

    async def _copy(self, statement: str, rows: Iterable[Sequence[Any]],
                    types: Sequence[str] | None) -> None:
        if not self._open:
            await self._send(lambda: self._cur.execute("SELECT 1"), commit=False)
        self._attempt.round_trips += 1
        async with self._cur.copy(statement) as copy:
            if types is not None:
                copy.set_types(list(types))
            for row in rows:
                await copy.write_row(row)

    async def _send(self, statement: Callable[[], Awaitable[Any]], *, commit: bool) -> None:
        self._trip_rows = None
        opening = not self._open
        self._sending(commit=commit)
        if not _PIPELINES:  # pragma: no cover - libpq older than 14
            if opening:
                await self._begin()
            await statement()
            if commit:
                await self._conn.execute("COMMIT")
        elif opening and commit:
            # A transaction of one statement: what a pipeline sends before its Sync runs
            # as one implicit transaction, committed at the Sync (or rolled back whole).
            async with self._conn.pipeline():
                await self._begin(explicit=False)
                await statement()
        elif opening or commit:
            async with self._conn.pipeline():
                if opening:
                    await self._begin()
                await statement()
                if commit:
                    await self._conn.execute("COMMIT")
        else:
            await statement()
        self._open = not commit

    def _sending(self, *, commit: bool) -> None:
        """Count a round trip, and whether it carries a write's commit (``_Attempt``)."""
        if commit and not self._read:
            self._attempt.committing = True
        self._attempt.round_trips += 1

    def _opening(self, *, explicit: bool) -> list[Statement]:
        """The statements that open this cursor's transaction, with ``explicit`` a
        ``BEGIN`` first (else the transaction is the implicit one of a pipeline)."""
        opening = []
        if explicit:
            opening.append(Statement(
                "BEGIN ISOLATION LEVEL REPEATABLE READ" if self._snapshot else "BEGIN"))
            if self._adopt is not None:  # before any query of the transaction
                opening.append(Statement(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(
                    sql.Literal(self._adopt))))
        opening.append(Statement(*self._settings))
        return opening

    async def _begin(self, *, explicit: bool = True) -> None:
        for statement in self._opening(explicit=explicit):
            await self._conn.execute(statement.query, statement.params)

    async def _finish(self) -> None:
        """Commit what is still open."""
        if self._open:
            if not self._read:
                self._attempt.committing = True
            self._attempt.round_trips += 1
            await self._conn.execute("COMMIT")
            self._open = False


class PostgresCore:
    """A PostgreSQL database reached through a pool, tables in one schema.

    Give it a libpq connection string (it then opens and closes its own pool) or a ready
    ``psycopg_pool.AsyncConnectionPool`` or ``ConnectionPool`` (which it uses and never
    closes; its connections must be in autocommit mode). With ``inline`` or a synchronous
    pool, it runs inline (see the module docstring): for a sync client only. ``schema``
    is the PostgreSQL schema that holds ownstate's tables, so several applications can
    share one database. ``replay_cache`` is how many items the replay cache may hold (see
    ``_replay``; 0 turns it off).
    ``synchronous_checkpoints`` makes checkpoint writes wait for their WAL flush like every
    other write (see the module docstring for what the default gives up).
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | ConnectionPool[Any] | None = None,
        inline: bool = False,
        schema: str = "ownstate",
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        replay_cache: int = 20_000,
        synchronous_checkpoints: bool = False,
    ) -> None:
        if (conninfo is None) == (pool is None):
            raise InvalidInput("give the PostgreSQL backend a conninfo or a pool, not both")
        self._schema = schema
        self._owns_pool = pool is None
        self._inline = inline = inline or isinstance(pool, ConnectionPool)
        if pool is None:
            made = ConnectionPool if inline else AsyncConnectionPool
            pool = made(conninfo or "", min_size=min_size, max_size=max_size, open=False,
                        timeout=timeout, kwargs={"autocommit": True,
                                                 "prepare_threshold": _PREPARE_THRESHOLD})
        if inline != isinstance(pool, ConnectionPool):
            raise InvalidInput("an inline PostgreSQL backend needs a synchronous pool "
                               "(psycopg_pool.ConnectionPool)")
        # an inline pool is awaited as an async one is, so it is typed as one
        self._pool: AsyncConnectionPool[Any] = cast(
            "AsyncConnectionPool[Any]",
            InlinePool(pool) if isinstance(pool, ConnectionPool) else pool)
        self._opened = self._closed = False
        self._search_path = '"' + schema.replace('"', '""') + '", public'
        self._replay = ReplayCache(replay_cache)
        self._synchronous_checkpoints = synchronous_checkpoints
        #: whether a session store indexes its items, as last seen: (tenant, store) to
        #: the flag. A write that relies on it checks it in its statement (a store may be
        #: deleted and made again with the other flag).
        self._indexes_items: dict[tuple[str, str], bool] = {}

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def runs_inline(self) -> bool:
        """Whether operations run on the caller's thread over synchronous connections
        (for a sync client's inline portal), never waiting on an event loop."""
        return self._inline

    async def _connect(self, *, inline: bool) -> AsyncConnection[Any] | None:
        """A connection outside the pool, made with the pool's settings (over a synchronous
        connection with ``inline``); None when the pool makes its settings on demand."""
        kwargs, conninfo = self._pool.kwargs, self._pool.conninfo
        if not isinstance(conninfo, str) or not isinstance(kwargs, dict):
            return None
        options = {k: v for k, v in kwargs.items() if k != "autocommit"}
        if inline:
            return cast("AsyncConnection[Any]",
                        await InlineConnection.connect(conninfo, autocommit=True, **options))
        return await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **options)

    async def _open(self) -> None:
        if not self._opened:
            if self._owns_pool:
                if self._closed:  # psycopg's pools cannot be opened again
                    raise BackendUnavailable("this PostgreSQL backend is closed")
                try:
                    await self._pool.open(wait=True, timeout=self._pool.timeout)
                except (psycopg.Error, PoolTimeout) as exc:
                    raise BackendUnavailable(f"PostgreSQL is unreachable: {exc}") from exc
            self._opened = True

    async def close(self) -> None:
        listener = self.__dict__.pop("_decisions_listener", None)
        if listener is not None:
            await listener.close()
        if self._owns_pool and self._opened:
            await self._pool.close()
            self._closed = True
        self._opened = False

    async def _transaction(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]],
                           attempt: _Attempt, read: bool, snapshot: bool,
                           lazy_commit: bool, generic: bool) -> T:
        async with self._pool.connection() as conn:
            attempt.conn = conn
            if _looks_dead(conn):
                await conn.close()
                raise psycopg.OperationalError("the pooled connection was closed by the server")
            if _raw(conn) not in _TAUGHT:
                _teach(conn)
            settings: tuple[str, tuple[str, ...]] = (
                (_SETTINGS, (self._search_path,)) if tenant is None
                else (_SETTINGS_FOR_TENANT, (self._search_path, tenant)))
            if lazy_commit or generic:
                settings = (settings[0] + (_ASYNC_COMMIT if lazy_commit else "")
                            + (_GENERIC_PLAN if generic else ""), settings[1])
            held = EXPORT_SNAPSHOT.get()
            cur = Cursor(conn, settings, attempt, read=read, snapshot=snapshot,
                         adopt=held[1] if snapshot and held is not None and held[0] is self
                         else None)
            try:
                result = await fn(cur)
                await cur._finish()
            except BaseException:
                if not conn.broken and conn.info.transaction_status in (
                        TransactionStatus.INTRANS, TransactionStatus.INERROR):
                    # the pool discards a connection it cannot reset
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute("ROLLBACK")
                raise
            return result

    async def _run(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]], *,
                   read: bool, snapshot: bool = False, lazy_commit: bool = False,
                   generic: bool = False) -> T:
        attempts = self._attempts(tenant, fn, read=read, snapshot=snapshot,
                                  lazy_commit=lazy_commit, generic=generic)
        if self._inline and relayed():
            # an inline backend's call relayed for async code (``ownstate._inline``): its
            # blocking calls go to a worker thread, so that code's event loop keeps running
            return await asyncio.to_thread(drive, attempts)
        return await attempts

    async def _attempts(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]], *,
                        read: bool, snapshot: bool, lazy_commit: bool, generic: bool) -> T:
        await self._open()
        dead = lost_midway = rolled_back = 0
        while True:
            attempt = _Attempt()
            try:
                return await self._transaction(tenant, fn, attempt, read, snapshot,
                                               lazy_commit, generic)
            except psycopg.errors.TransactionRollback as exc:
                # A deadlock or serialisation failure: the server rolled the transaction
                # back and said so, so running it again is safe.
                rolled_back += 1
                if rolled_back > _RETRIES_AFTER_ROLLBACK or (attempt.committing and not read):
                    raise translate(exc) from exc
            except psycopg.Error as exc:
                if not attempt.lost(exc):
                    raise translate(exc) from exc
                if attempt.committing and not read:
                    raise BackendUnavailable(
                        f"the PostgreSQL connection was lost while committing a write; it "
                        f"may or may not have been applied: {exc}") from exc
                if attempt.round_trips > 1:
                    lost_midway += 1
                else:
                    dead += 1
                if lost_midway > _RETRIES_AFTER_LOSS or dead > self._pool.max_size:
                    raise BackendUnavailable(
                        f"the PostgreSQL connection was lost; nothing was applied: {exc}"
                    ) from exc
            except PoolTimeout as exc:
                raise BackendUnavailable(f"no PostgreSQL connection: {exc}") from exc
            except UnicodeEncodeError as exc:
                raise InvalidInput(f"text the database cannot store: {exc}") from exc

    async def _read(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]], *,
                    snapshot: bool = False, generic: bool = False) -> T:
        """Run reads, retried on a new connection if one was lost; with ``snapshot``, all
        of them in one transaction that reads one snapshot (REPEATABLE READ); with
        ``generic``, planned generically (``_GENERIC_PLAN``)."""
        return await self._run(tenant, fn, read=True, snapshot=snapshot, generic=generic)

    async def _write(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]], *,
                     generic: bool = False) -> T:
        """Run a write transaction, retried if its connection was lost before it was
        committed; lost while committing, it raises BackendUnavailable. ``generic`` as for
        :meth:`_read`."""
        return await self._run(tenant, fn, read=False, generic=generic)

    async def _write_checkpoint(self, tenant: str | None,
                                fn: Callable[[Cursor], Awaitable[T]]) -> T:
        """:meth:`_write` for a transaction that writes checkpoints only, planned
        generically: it commits without waiting for its WAL flush unless the backend was
        made ``synchronous_checkpoints`` (see the module docstring)."""
        return await self._run(tenant, fn, read=False, generic=True,
                               lazy_commit=not self._synchronous_checkpoints)
