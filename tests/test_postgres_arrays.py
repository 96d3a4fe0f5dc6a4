"""Array parameters built in their binary form (``backends/postgres/_arrays``): what the
server reads back is what was given, and what they cannot carry goes to psycopg as before.

Uses the database of ``OWNSTATE_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``); skips when the server is unreachable,
unless ``OWNSTATE_REQUIRE_BACKENDS`` names postgres.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from conftest import POSTGRES_URL, _require  # noqa: E402

from ownstate.backends.postgres import _core  # noqa: E402
from ownstate.backends.postgres._arrays import (  # noqa: E402
    BinaryBigints,
    BinaryByteas,
    BinaryTexts,
    bigints,
    byteas,
    texts,
)


@pytest.fixture
def conn() -> Iterator[Any]:
    """A connection taught the backend's array types, as its pool's connections are."""
    _require("postgres")
    made = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    _core._teach(made)  # type: ignore[arg-type]
    yield made
    made.close()


TEXTS = [[], ["a"], ["", None, "été", "雪 ❄", "x" * 70_000] * 3, ["s"] * 16, [None],
         [None, None]]
BIGINTS = [[], [0], [-(2**63), 2**63 - 1, None, -1, 42], [None]]
BYTEAS = [[], [b""], [b"\x00\xff" * 1000, None, bytearray(b"ab"), memoryview(b"cd")]]


@pytest.mark.parametrize("values", TEXTS)
def test_texts_arrive_as_given(conn: Any, values: list[str | None]) -> None:
    sent = texts(values)
    assert isinstance(sent, BinaryTexts)
    row = conn.execute("SELECT %b::text[], cardinality(%b::text[])", (sent, sent)).fetchone()
    assert row == (values, len(values))


@pytest.mark.parametrize("values", BIGINTS)
def test_bigints_arrive_as_given(conn: Any, values: list[int | None]) -> None:
    sent = bigints(values)
    assert isinstance(sent, BinaryBigints)
    assert conn.execute("SELECT %b::bigint[]", (sent,)).fetchone() == (values,)


@pytest.mark.parametrize("values", BYTEAS)
def test_byteas_arrive_as_given(conn: Any, values: list[Any]) -> None:
    sent = byteas(values)
    assert isinstance(sent, BinaryByteas)
    got = conn.execute("SELECT %b::bytea[]", (sent,)).fetchone()[0]
    assert got == [None if v is None else bytes(v) for v in values]


@pytest.mark.parametrize("values", [["ok", "nul\x00"], ["lone \ud800"]],
                         ids=["nul", "surrogate"])
def test_text_they_cannot_carry_goes_to_psycopg(conn: Any, values: list[str]) -> None:
    assert texts(values) is values  # psycopg refuses it, as it always has
    with pytest.raises((psycopg.DataError, UnicodeEncodeError)):
        conn.execute("SELECT %s::text[]", (texts(values),))


def test_an_integer_beyond_bigint_goes_to_psycopg(conn: Any) -> None:
    values: list[int | None] = [1, 2**63]
    assert bigints(values) is values
    with pytest.raises(psycopg.DataError):
        conn.execute("SELECT %s::bigint[]", (bigints(values),))


def test_an_append_of_text_the_database_refuses_stores_nothing(conn: Any) -> None:
    import uuid

    import ownstate
    from ownstate.errors import InvalidInput

    schema = f"t_arr_{uuid.uuid4().hex[:8]}"
    try:
        with ownstate.connect(f"{POSTGRES_URL}?schema={schema}") as client:
            session = client.session_stores.create("arrays").add(actor_id="a")
            session.append_items([{"role": "user", "content": "kept"}])
            with pytest.raises(InvalidInput):
                session.append_items([{"role": "user", "content": "fine"},
                                      {"role": "us\x00er", "content": "refused"}])
            assert [i.data["content"] for i in session.list_items()] == ["kept"]
    finally:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_list_past_short_is_left_to_psycopg(conn: Any) -> None:
    from ownstate.backends.postgres._arrays import SHORT

    long_texts: list[str | None] = ["t"] * (SHORT + 1)
    long_ints: list[int | None] = [7] * (SHORT + 1)
    long_bytes: list[bytes | None] = [b"b"] * (SHORT + 1)
    assert texts(long_texts) is long_texts
    assert bigints(long_ints) is long_ints
    assert byteas(long_bytes) is long_bytes
    assert conn.execute("SELECT %b::text[], %b::bigint[], %b::bytea[]",
                        (long_texts, long_ints, long_bytes)).fetchone() == (
        long_texts, long_ints, long_bytes)
