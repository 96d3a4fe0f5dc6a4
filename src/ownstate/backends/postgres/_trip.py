"""Statements sent in one round trip, below psycopg's cursors and pipelines.

A transaction opens with its settings and its first statement pipelined in one round trip
(``_core``). Through a psycopg cursor inside ``connection.pipeline()`` each statement is
sent, flushed and polled for on its own, with a cursor's bookkeeping around it: about
twice the client CPU of one bare statement, for the two statements an operation sends.
Here the same protocol messages go through the parts psycopg's cursors are made of:
its query conversion and adapters (``PostgresQuery`` and the connection's transformer),
libpq's pipeline calls on ``pgconn``, and psycopg's compiled non-blocking generators
(``pipeline_communicate``, ``fetch_many``) driven by the connection's own ``wait``. All
statements are queued, then one Sync; the results are read back to the Sync, and only
the rows of the statement asked for are loaded.

What the server sees is what a psycopg pipeline sends: each statement parsed, bound and
executed in the extended protocol, in one implicit transaction unless one is open. A
statement is prepared as the connection's cursors prepare theirs, by the connection's
own record of its prepared statements (``prepare_threshold``, ``prepared_max``, the
least recently used deallocated): the two ways of sending share it. An error in a trip
that was to prepare a statement, or a server that forgot its prepared statements
(``DISCARD ALL``, a transaction pooler), makes the connection forget and deallocate
them all, as psycopg does after a rollback.

The first error a statement returns is raised as psycopg raises it (its class for the
SQLSTATE), after the pipeline was read to its Sync; a connection lost midway raises what
psycopg's generators raise. Either way the caller's error handling is the cursor's.

Where psycopg lacks these parts (a version that moved them), ``available`` is false and
the backend sends through psycopg's cursors instead.

It may touch psycopg (through ``ownstate._extras``), nothing of ownstate's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from ..._extras import requires

with requires("postgres", "the PostgreSQL backend"):
    import psycopg
    from psycopg.abc import Params
    from psycopg.pq import ExecStatus, Format

try:
    from psycopg._preparing import Prepare
    from psycopg._queries import PostgresQuery
    from psycopg.adapt import Transformer
    from psycopg.generators import fetch_many, pipeline_communicate
except ImportError:  # pragma: no cover - a psycopg that moved them
    available = False
else:
    available = True

__all__ = ["Statement", "Trip", "available"]

_FAILED = (ExecStatus.FATAL_ERROR, ExecStatus.BAD_RESPONSE)
_MISSING_STATEMENT = "26000"  # invalid_sql_statement_name


class Statement(NamedTuple):
    """One statement of a trip: its query (psycopg's placeholders), its parameters and
    whether its rows come back in binary."""

    query: Any
    params: Params | None = None
    binary: bool = False


class Trip:
    """The outcome of statement ``keep`` (an index into ``statements``; the others' rows
    are dropped), once :meth:`gen` has run: its rows (``rows``, a list of tuples; ``None``
    for a statement that returns none) and ``rowcount``."""

    __slots__ = ("_conn", "_keep", "_raw", "_statements", "rowcount", "rows")

    def __init__(self, conn: Any, raw: Any, statements: Sequence[Statement],
                 keep: int = -1) -> None:
        # ``conn`` is the connection the backend holds (for its ``info``), ``raw`` the
        # psycopg connection under it
        self._conn = conn
        self._raw = raw
        self._statements = statements
        self._keep = keep % len(statements)
        self.rows: list[tuple[Any, ...]] | None = None
        self.rowcount = -1

    def gen(self) -> Any:
        """psycopg's kind of generator (for ``connection.wait``) doing the round trip."""
        raw = self._raw
        pgconn = raw.pgconn
        manager = raw._prepared  # the connection's prepared statements, as its cursors'
        commands: deque[Any] = deque()
        # per statement: psycopg's preparation of it, the name and its new cache key
        plans: list[tuple[Any, bytes, Any]] = []
        # every query converted (where bad input is refused) before anything is recorded
        queries = []
        tx: Any = None
        for at, statement in enumerate(self._statements):
            transformer = Transformer(raw)
            query = PostgresQuery(transformer)
            query.convert(statement.query, statement.params)
            queries.append(query)
            if at == self._keep:
                tx = transformer
        for statement, query in zip(self._statements, queries, strict=True):
            prep, name = manager.get(query)
            fmt = Format.BINARY if statement.binary else Format.TEXT
            if prep is Prepare.SHOULD:
                commands.append(_bound(pgconn.send_prepare, name, query.query,
                                       param_types=query.types))
            if prep is Prepare.NO:
                commands.append(_bound(pgconn.send_query_params, query.query, query.params,
                                       param_types=query.types, param_formats=query.formats,
                                       result_format=fmt))
            else:
                commands.append(_bound(pgconn.send_query_prepared, name, query.params,
                                       param_formats=query.formats, result_format=fmt))
            plans.append((prep, name, manager.maybe_add_to_cache(query, prep, name)))
        commands.append(pgconn.pipeline_sync)
        pgconn.enter_pipeline_mode()
        fetched: list[list[Any]] = list((yield from pipeline_communicate(pgconn, commands)))
        while not fetched or fetched[-1][0].status != ExecStatus.PIPELINE_SYNC:
            got = yield from fetch_many(pgconn)
            if not got:  # pragma: no cover - libpq ended the pipeline early
                break
            fetched.append(got)
        pgconn.exit_pipeline_mode()
        error = self._settle(manager, plans, iter(fetched), tx)
        if error is not None and (any(prep is Prepare.SHOULD for prep, _, _ in plans)
                                  or error.sqlstate == _MISSING_STATEMENT):
            # a prepare skipped after the error, or statements the server forgot: psycopg
            # forgets the connection's and deallocates them all
            manager.clear()
        yield from manager.maintain_gen(raw)
        if error is not None:
            raise error

    def _settle(self, manager: Any, plans: Sequence[tuple[Any, bytes, Any]],
                fetched: Iterator[list[Any]], tx: Any) -> psycopg.Error | None:
        """Check the results in order and load the kept statement's rows; the first
        error (a prepare's, or the statement's)."""
        error: psycopg.Error | None = None
        kept: Any = None
        for at, (prep, name, key) in enumerate(plans):
            if prep is Prepare.SHOULD:  # the prepare's own result comes first
                error = error or _failed(next(fetched, []), self._conn)
            results = next(fetched, [])
            error = error or _failed(results, self._conn)
            if key is not None:
                manager.validate(key, prep, name, results)
            if at == self._keep and results:
                kept = results[-1]
        if error is None and kept is not None:
            if kept.status == ExecStatus.TUPLES_OK:
                tx.set_pgresult(kept)
                self.rows = tx.load_rows(0, kept.ntuples, tuple)
            tuples = kept.command_tuples
            self.rowcount = tuples if tuples is not None else -1
        return error


def _failed(results: Sequence[Any], conn: Any) -> psycopg.Error | None:
    """The error among one statement's results (none for one skipped after an error)."""
    for result in results:
        if result.status == ExecStatus.PIPELINE_ABORTED:
            return None
        if result.status in _FAILED:
            return psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    return None


def _bound(method: Any, *args: Any, **kwargs: Any) -> Any:
    return lambda: method(*args, **kwargs)
