"""Statements sent in one round trip below psycopg's cursor (``backends/postgres/_trip``):
the rows of the statement asked for, psycopg's errors, and the connection's prepared
statements kept as its cursors keep them, whatever fails.

Each test uses a connection of its own to the database of ``OWNSTATE_TEST_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``) and a temporary table; the tests
skip when the server is unreachable, unless ``OWNSTATE_REQUIRE_BACKENDS`` names postgres.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from conftest import POSTGRES_URL, _require  # noqa: E402

from ownstate.backends.postgres._trip import Statement, Trip  # noqa: E402

_SETTINGS = Statement("SELECT set_config('TimeZone', %s, true)", ("UTC",))
_INSERT = "INSERT INTO trip_rows (k, v) VALUES (%s, %s) RETURNING k, v"


@pytest.fixture
def conn() -> Iterator[Any]:
    """A connection that prepares a statement the second time it runs, as the backend's
    pool makes them, with a temporary table ``trip_rows`` (``k`` unique)."""
    _require("postgres")
    made = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3,
                           prepare_threshold=1)
    made.execute("CREATE TEMP TABLE trip_rows (k int PRIMARY KEY, v text)")
    yield made
    made.close()


def _trip(conn: Any, statements: Sequence[Statement], keep: int = -1) -> Trip:
    trip = Trip(conn, conn, statements, keep)
    conn.wait(trip.gen())
    return trip


def _prepared(conn: Any) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements",
                                           prepare=False)}


def test_a_trip_is_one_implicit_transaction_with_the_rows_asked_for(conn: Any) -> None:
    trip = _trip(conn, [_SETTINGS, Statement(_INSERT, (1, "a")),
                        Statement("SELECT current_setting('TimeZone')")], keep=1)
    assert (trip.rows, trip.rowcount) == ([(1, "a")], 1)
    # the setting was local to the trip's transaction, the insert committed with it
    assert conn.execute("SELECT current_setting('TimeZone'), count(*) FROM trip_rows"
                        ).fetchone()[1] == 1
    # an explicit transaction stays open past the trip's Sync; COMMIT after the statement
    # kept does not take its place
    _trip(conn, [Statement("BEGIN"), Statement(_INSERT, (2, "b"))])
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    trip = _trip(conn, [Statement("UPDATE trip_rows SET v = 'c' WHERE k = 2 RETURNING v"),
                        Statement("COMMIT")], keep=0)
    assert (trip.rows, trip.rowcount) == ([("c",)], 1)
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    trip = _trip(conn, [Statement("DELETE FROM trip_rows")])
    assert (trip.rows, trip.rowcount) == (None, 2)


def test_a_refused_statement_raises_psycopgs_error_and_applies_nothing(conn: Any) -> None:
    _trip(conn, [_SETTINGS, Statement(_INSERT, (1, "a"))])
    with pytest.raises(psycopg.errors.UniqueViolation):
        _trip(conn, [_SETTINGS, Statement(_INSERT, (2, "b")), Statement(_INSERT, (1, "c"))])
    assert conn.execute("SELECT k, v FROM trip_rows").fetchall() == [(1, "a")]
    # bad input is refused before anything is sent or recorded (the settings, due to be
    # prepared at this run, are not taken as prepared), and the connection goes on
    dates = Statement("SELECT set_config('DateStyle', %s, true)", ("ISO",))
    _trip(conn, [dates])
    with pytest.raises(psycopg.DataError):
        _trip(conn, [dates, Statement(_INSERT, (3, "nul\x00"))])
    assert _trip(conn, [dates, Statement(_INSERT, (3, "d"))]).rows == [(3, "d")]


def test_statements_are_prepared_as_the_connections_cursors_prepare_them(conn: Any) -> None:
    select = Statement("SELECT v FROM trip_rows WHERE k = %s", (1,))
    _trip(conn, [_SETTINGS, select])
    assert _prepared(conn) == set()  # run once: not prepared
    _trip(conn, [_SETTINGS, select])
    names = _prepared(conn)
    assert len(names) == 2
    assert all(name.startswith("_pg3_") for name in names)  # psycopg's own record
    _trip(conn, [_SETTINGS, select])
    assert _prepared(conn) == names
    # a cursor's ROLLBACK makes psycopg deallocate them all; the trip prepares again
    conn.execute("BEGIN")
    conn.execute("ROLLBACK")
    assert _prepared(conn) == set()
    _trip(conn, [_SETTINGS, select])
    _trip(conn, [_SETTINGS, select])
    assert len(_prepared(conn)) == 2


def test_a_prepare_skipped_after_an_error_is_not_taken_as_done(conn: Any) -> None:
    # The second statement is due to be prepared on its second run; its first run comes
    # after a failing statement, so the server never parses it: psycopg must not believe
    # it prepared.
    select = Statement("SELECT count(*) FROM trip_rows WHERE v = %s", ("x",))
    _trip(conn, [select])
    with pytest.raises(psycopg.errors.DivisionByZero):
        _trip(conn, [Statement("SELECT 1 / 0"), select])
    assert _trip(conn, [select]).rows == [(0,)]
    assert _trip(conn, [select]).rows == [(0,)]


def test_statements_the_server_forgot_are_forgotten_by_the_connection(conn: Any) -> None:
    select = Statement("SELECT v FROM trip_rows WHERE k = %s", (1,))
    _trip(conn, [select])
    _trip(conn, [select])
    conn.pgconn.exec_(b"DEALLOCATE ALL")  # behind psycopg's back, as a pooler might
    with pytest.raises(psycopg.errors.InvalidSqlStatementName):
        _trip(conn, [select])
    assert _trip(conn, [select]).rows == []


def test_an_async_connection_sends_the_same_trip() -> None:
    _require("postgres")

    async def scenario() -> list[Any]:
        made = await psycopg.AsyncConnection.connect(
            POSTGRES_URL, autocommit=True, connect_timeout=3, prepare_threshold=1)
        try:
            seen = []
            for n in range(3):
                trip = Trip(made, made, [_SETTINGS, Statement(
                    "SELECT %s::int + 1, current_setting('TimeZone')", (n,))])
                await made.wait(trip.gen())
                seen.append(trip.rows)
            with pytest.raises(psycopg.errors.DivisionByZero):
                await made.wait(Trip(made, made, [Statement("SELECT 1 / 0")]).gen())
            return seen
        finally:
            await made.close()

    assert asyncio.run(scenario()) == [[(1, "UTC")], [(2, "UTC")], [(3, "UTC")]]


def test_a_connection_that_never_prepares_sends_every_trip_unnamed(conn: Any) -> None:
    # as the pool's connections are made behind a transaction pooler
    conn.prepare_threshold = None
    select = Statement("SELECT count(*) FROM trip_rows WHERE k = %s", (1,))
    for _ in range(4):
        assert _trip(conn, [_SETTINGS, select]).rows == [(0,)]
    assert _prepared(conn) == set()


def test_a_prepare_the_server_refuses_is_the_trips_error(conn: Any) -> None:
    # The statement ran once; at its second run it is prepared, and the prepare fails
    # (its table is gone): that is the trip's error, not a statement without rows.
    conn.execute("CREATE TEMP TABLE trip_gone (k int)")
    select = Statement("SELECT count(*) FROM trip_gone")
    assert _trip(conn, [_SETTINGS, select]).rows == [(0,)]
    conn.execute("DROP TABLE trip_gone")
    with pytest.raises(psycopg.errors.UndefinedTable):
        _trip(conn, [_SETTINGS, select])
    conn.execute("CREATE TEMP TABLE trip_gone (k int)")
    assert _trip(conn, [_SETTINGS, select]).rows == [(0,)]
