"""An item's ``terms`` in PostgreSQL: a restore sends them in ``tsvector``'s binary form,
an append in its text; both must store the same value, and the text must be the one
appends always wrote."""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ownstate.backends.ports.search import terms
from ownstate.backends.postgres._tsvector import (
    item_terms_binary,
    item_vector_binary,
    items_terms_binary,
    vector_binary,
)
from ownstate.backends.postgres.search import _vector, scope_prefix

CORPUS = [
    "",
    "   ... !!! ---",
    "Hello, world! hello WORLD, hello again.",
    "turn 12: the quick brown fox jumps over the quick brown fox",
    "Crème brûlée à la façon de Zoë; naïve café, résumé, ÀÉÎÕÜ",
    "Straße ﬁnance ＡＢＣ① ⅻ İstanbul ΣΊΣΥΦΟΣ",
    "東京都の天気は晴れです。明日も晴れ！",  # noqa: RUF001 - full-width on purpose
    "カタカナとひらがなと漢字 mixed with english words",
    "ภาษาไทยไม่มีช่องว่าง and ພາສາລາວ and ភាសាខ្មែរ and မြန်မာ",
    "emoji 🎉🎉 party 👩‍👩‍👧 family 🇫🇷 flag ✓ done",
    "snake_case and kebab-case and dotted.name and C++ and a/b/c and x=1;y=2",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em space",
    "digits 3.14159 1,000,000 ٣٤٥ ০১২ 12ab34",
    "a" * 250 + " short " + "b" * 199 + " " + "é" * 120,
    " ".join(["same"] * 300) + " other",
    "'quoted' \"double\" back\\slash colon:word",
    "Ünïcödé ÇÀÑ ÂÊÎ ǅ ǈ ẞ ﬀ ﬃ",
    "한국어 텍스트 검색",
    "עברית ועוד مرحبا بالعالم",
]


def _reference_vector(prefix: str, found: Sequence[str]) -> tuple[str, int]:
    """The text form as appends wrote it before the grouping of repeated terms (kept
    here to hold the text to it)."""
    def lexeme(term: str) -> str:
        if len(term.encode()) > 200:
            term = "h" + hashlib.blake2b(term.encode(), digest_size=16).hexdigest()
        return prefix + term

    positions: dict[str, list[str]] = {}
    for n, term in enumerate(found, start=1):
        at = positions.setdefault(lexeme(term), [])
        if len(at) < 255:
            at.append(str(min(n, 16383)))
    return " ".join(f"{lex}:{','.join(at)}" for lex, at in positions.items()), len(found)


def _long() -> list[str]:
    """Terms past the largest position, a term repeated past 255, and a long term whose
    hash is spelled by another term of the same document."""
    long_term = "x" * 201
    hashed = "h" + hashlib.blake2b(long_term.encode(), digest_size=16).hexdigest()
    return [long_term, "a", hashed, long_term, *(f"w{n % 97}" for n in range(17_000)),
            hashed, *["late"] * 3]


CASES = [terms(text) for text in CORPUS] + [_long()]


@pytest.mark.parametrize("found", CASES, ids=range(len(CASES)))
def test_text_terms_are_those_appends_always_wrote(found: list[str]) -> None:
    prefix = scope_prefix("default")
    assert _vector(prefix, found) == _reference_vector(prefix, found)


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_text_terms_hold_for_any_text(text: str) -> None:
    prefix = scope_prefix("t")
    assert _vector(prefix, terms(text)) == _reference_vector(prefix, terms(text))


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=300))
@settings(max_examples=300, deadline=None)
def test_ascii_terms_are_the_general_ones(text: str) -> None:
    from ownstate.backends.ports.search import _RUN_RE, _run_terms

    general = [t for run in _RUN_RE.findall(text.lower()) for t in _run_terms(run, False)]
    assert terms(text) == general


@pytest.fixture
def conn() -> Iterator[object]:
    psycopg = pytest.importorskip("psycopg")
    from conftest import POSTGRES_URL, _require

    _require("postgres")
    with psycopg.connect(POSTGRES_URL) as connection:
        connection.execute("CREATE TEMP TABLE t (n int, txt tsvector, bin tsvector)")
        yield connection


def _stored(conn: object, cases: Sequence[list[str]], tenant: str) -> list[tuple[object, ...]]:
    prefix = scope_prefix(tenant)
    cur = conn.cursor()  # type: ignore[attr-defined]
    with cur.copy("COPY t (n, bin) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "bytea"])
        for n, found in enumerate(cases):
            vector, size = item_vector_binary(tenant, found)
            assert size == len(found)
            assert vector == vector_binary(prefix, found)
            copy.write_row((n, vector))
    cur.executemany("UPDATE t SET txt = %s::tsvector WHERE n = %s",
                    [(_vector(prefix, found)[0], n) for n, found in enumerate(cases)])
    return cur.execute("SELECT n, txt = bin, txt::text = bin::text, tsvectorsend(txt) = "
                       "tsvectorsend(bin), length(bin) FROM t ORDER BY n").fetchall()


def test_binary_terms_store_what_the_text_stores(conn: object) -> None:
    rows = _stored(conn, CASES, "default")
    assert len(rows) == len(CASES)
    for n, same, same_text, same_bytes, _ in rows:
        assert (same, same_text, same_bytes) == (True, True, True), CORPUS[n] if n < len(
            CORPUS) else "long"


@given(st.lists(st.text(max_size=120), min_size=1, max_size=20))
@settings(max_examples=30, deadline=None)
def test_binary_terms_hold_for_any_text(texts: list[str]) -> None:
    psycopg = pytest.importorskip("psycopg")
    from conftest import POSTGRES_URL, _require

    _require("postgres")
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    with psycopg.connect(POSTGRES_URL) as connection:
        connection.execute("CREATE TEMP TABLE t (n int, txt tsvector, bin tsvector)")
        rows = _stored(connection, [terms(t) for t in texts], tenant)
    assert all(r[1] and r[2] and r[3] for r in rows), texts


def _appended(conn: object, cases: Sequence[list[str]], tenant: str
              ) -> tuple[list[tuple[object, ...]], Counter[str]]:
    """Each case's terms as an append sends them (one ``tsvector[]`` and one ``int4[]``),
    read back beside the same terms in text form; and the counts the append logs."""
    from ownstate.backends.postgres import _core
    from ownstate.backends.postgres._arrays import BinaryInts, BinaryVectors

    _core._teach(conn)  # type: ignore[arg-type]
    prefix = scope_prefix(tenant)
    seen: Counter[str] = Counter()
    vectors, lens = items_terms_binary(prefix, cases, seen)
    rows = conn.execute(  # type: ignore[attr-defined]
        "SELECT u.n, u.v = t.txt::tsvector, u.v::text = t.txt::tsvector::text, "
        "tsvectorsend(u.v) = tsvectorsend(t.txt::tsvector), u.l "
        "FROM unnest(%s::tsvector[], %s::int[]) WITH ORDINALITY AS u (v, l, n) "
        "JOIN unnest(%s::text[]) WITH ORDINALITY AS t (txt, n) ON t.n = u.n ORDER BY u.n",
        (BinaryVectors(vectors), BinaryInts(lens),
         [_vector(prefix, found)[0] for found in cases])).fetchall()
    return rows, seen


@pytest.mark.parametrize("cases", [CASES, CASES[::-1], [], [[]], CASES[2:3]],
                         ids=["all", "reversed", "none", "one-empty", "one"])
def test_an_append_sends_the_terms_the_text_stores(conn: object,
                                                   cases: list[list[str]]) -> None:
    rows, seen = _appended(conn, cases, "default")
    assert [r[0] for r in rows] == list(range(1, len(cases) + 1))
    assert all(r[1] and r[2] and r[3] for r in rows)
    assert [r[4] for r in rows] == [len(found) for found in cases]
    logged: Counter[str] = Counter()
    for found in cases:
        item_terms_binary(scope_prefix("default"), found, logged)
    assert seen == logged


@given(st.lists(st.text(max_size=120), max_size=20))
@settings(max_examples=30, deadline=None)
def test_an_append_sends_the_terms_of_any_text(texts: list[str]) -> None:
    psycopg = pytest.importorskip("psycopg")
    from conftest import POSTGRES_URL, _require

    _require("postgres")
    with psycopg.connect(POSTGRES_URL) as connection:
        cases = [terms(t) for t in texts]
        rows, _ = _appended(connection, cases, f"t-{uuid.uuid4().hex[:6]}")
    assert len(rows) == len(texts)
    assert all(r[1] and r[2] and r[3] for r in rows), texts
    assert [r[4] for r in rows] == [len(found) for found in cases]
