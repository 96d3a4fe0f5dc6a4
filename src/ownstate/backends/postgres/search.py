"""Ranked search in PostgreSQL: ``terms`` tsvectors, GIN indexes, ``search_stats`` and
``search_terms``.

A fact's and an item's terms (:mod:`ownstate.backends.ports.search`, computed here in
Python, never by a text-search parser: no stemming, no stop words) are stored in its row
as a ``tsvector`` named ``terms`` whose lexemes carry a fixed-length opaque prefix naming
the scope (the tenant and memory store for a fact, the tenant for an item) and whose
positions count the term's occurrences; ``terms_len`` holds the number of terms. One GIN
index per table finds the rows holding a lexeme. Terms too long for a lexeme are stored
as their hash.

BM25 needs the number of documents in the scope and their total length: ``search_stats``
keeps them; and the number of documents holding each query term: ``search_terms`` keeps
it per lexeme (a lexeme names its scope). Both are kept in eight shards per row (a writer
adds to the shard of its connection, so concurrent writers rarely wait on one row), in
the transaction that writes the documents, as its last statement; deletes, cascades
included, subtract through statement-level triggers (stats first, then terms, as writers
do). Counting a common term's documents at query time would read up to half the scope's
rows.

A write does not add to ``search_terms`` row by row (a batch of 20 items would update
some 250 rows, most of an indexed append's time): it adds one row to
``search_term_log``, its documents per term (:data:`LOG_FROM`). The log is folded into
``search_terms`` (:data:`FOLD`: its rows deleted, their counts summed per lexeme and
added, lexemes in code-point order, so two folders never wait on each other's rows in
turn) by every search, before it reads, for its tenant and kind, in a statement of its
own so that what it reads next sees what a concurrent fold committed; and by a write
that finds :data:`FOLD_ENTRIES` or more term counts logged for its tenant and kind, in
its own statement, which bounds what a search may find to fold. A count in the log is
already in force: a delete subtracts from ``search_terms`` whether or not the rows'
counts were folded yet, and a sum over both is exact at all times.
A search (:func:`ranked`) reads those counts and the postings of its rarest terms (through
the GIN index) in one statement, then the rows of the first candidates they give, and
scores them best first and exactly, in Python from their counts of the kept lexemes, as
"Candidates" in the ports module says (SQLite does the same). Closed facts stay indexed,
so a search as of an earlier valid time finds what held then; a store made with
``index_items=False`` leaves its items' ``terms`` NULL, and its appends make no terms.
Items appended through ``append_items`` get their terms later, from the next search
(``items_search.py``, which holds ``search_items``); until then their ``terms`` and
``terms_len`` are NULL and nothing counts them.

It may touch PostgreSQL through ``_core``, the search port and the migrations' progress
(``_migrations``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

from .._migrations import Progress
from ..ports import search as rules
from ..ports.search import terms
from ._core import Cursor

__all__ = ["ADD_COUNTS", "FOLD", "FOLD_ENTRIES", "LOG_FROM", "LONGEST_LEXEME", "MAX_POSITION",
           "MAX_POSITIONS", "Vector", "add_counts", "backfill",
           "fact_vector", "grouped_positions", "item_vector", "lexeme", "logged_counts",
           "ranked", "scope_prefix", "term_counts_sql", "term_positions"]

T = TypeVar("T")

#: Longest term (in UTF-8 bytes) stored as itself; longer ones are stored by their hash.
LONGEST_LEXEME = 200
#: Positions kept per lexeme (a tsvector keeps at most 256), and the largest position (a
#: later one is stored as it).
MAX_POSITIONS = 255
MAX_POSITION = 16383


class Vector(NamedTuple):
    """A document's ``terms`` as ``tsvector`` text, its ``terms_len``, and its distinct
    lexemes (what ``search_terms`` counts)."""

    text: str
    length: int
    lexemes: Iterable[str]


def scope_prefix(*parts: str) -> str:
    """An opaque, fixed-length lexeme prefix for a scope: 16 hex digits."""
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).hexdigest()


def lexeme(prefix: str, term: str) -> str:
    """The lexeme of ``term`` in the scope ``prefix``."""
    if len(term) * 4 > LONGEST_LEXEME and len(term.encode()) > LONGEST_LEXEME:
        term = "h" + hashlib.blake2b(term.encode(), digest_size=16).hexdigest()
    return prefix + term


def grouped_positions(found: Sequence[str]) -> dict[str, Any]:
    """Each distinct term of ``found`` (in first-seen order) and its positions, from 1: an
    ``int`` for a term seen once (most are), else a list. The fast paths of the tsvector's
    text and binary forms both read this."""
    positions: dict[str, Any] = {}
    for n, term in enumerate(found, start=1):
        at = positions.get(term)
        if at is None:
            positions[term] = n
        elif at.__class__ is int:
            positions[term] = [at, n]
        else:
            at.append(n)
    return positions


def term_positions(found: Sequence[str]) -> dict[str, list[int]]:
    """Each distinct term of ``found`` (in first-seen order) and its positions, from 1."""
    positions: dict[str, list[int]] = {}
    for n, term in enumerate(found, start=1):
        at = positions.get(term)
        if at is None:
            positions[term] = [n]
        else:
            at.append(n)
    return positions


def _lexeme_positions(prefix: str, found: Sequence[str]) -> dict[str, list[int]]:
    positions: dict[str, list[int]] = {}
    for term, at in term_positions(found).items():
        lex = lexeme(prefix, term)
        held = positions.get(lex)  # a long term's hash may spell a stored term
        positions[lex] = at if held is None else sorted(held + at)
    return positions


def _text(positions: dict[str, list[int]], length: int) -> str:
    """The ``tsvector`` text of lexemes and their positions. Terms hold only letters and
    digits, so they need no quoting."""
    if length > MAX_POSITION:
        return " ".join(f"{lex}:{','.join(str(min(n, MAX_POSITION)) for n in at[:MAX_POSITIONS])}"
                        for lex, at in positions.items())
    return " ".join(f"{lex}:{','.join(map(str, at[:MAX_POSITIONS]))}"
                    for lex, at in positions.items())


def _vector(prefix: str, found: Sequence[str]) -> tuple[str, int]:
    """The ``tsvector`` text of a document's terms, and its length in terms."""
    made = _made(prefix, found)
    return made.text, made.length


#: positions as text
_NUMBERS = [str(n) for n in range(MAX_POSITION + 1)]


def _made(prefix: str, found: Sequence[str]) -> Vector:
    if len(found) <= MAX_POSITION:
        # the usual document: no position to cap, and (when no term is long enough to
        # be hashed) one lexeme per term; a term seen once keeps its position as an int
        positions = grouped_positions(found)
        if max(map(len, positions), default=0) * 4 <= LONGEST_LEXEME:
            numbers = _NUMBERS
            return Vector(" ".join([
                f"{prefix}{term}:{numbers[at]}" if at.__class__ is int else
                f"{prefix}{term}:{','.join([numbers[n] for n in at[:MAX_POSITIONS]])}"
                for term, at in positions.items()]), len(found),
                [prefix + term for term in positions])
    exact = _lexeme_positions(prefix, found)
    return Vector(_text(exact, len(found)), len(found), exact.keys())


def fact_vector(tenant: str, store: str, key: str, value: Any) -> Vector:
    return _made(scope_prefix(tenant, store), terms(rules.fact_text(key, value)))


def item_vector(tenant: str, text: str) -> Vector:
    return _made(scope_prefix(tenant), terms(text))


#: A write folds the log of its tenant and kind when it finds at least this many term
#: counts in it: what a search may have to fold is bounded by about this many (and one
#: write's own).
FOLD_ENTRIES = 20_000

#: Adds the counts of the log rows ``{gone}`` (a CTE of deleted rows) to ``search_terms``,
#: one row per lexeme, in code-point order (the order of ``COLLATE "C"``, as the delete
#: triggers take them, so two writers take the rows they share in one order). The counts
#: are summed per prefix and term, and each sum's lexeme spelled after: a prefix has a
#: fixed length, so that is one sum per lexeme, with one concatenation per lexeme rather
#: than per logged count (a fold of 20,000 counts took about 13% less time).
_FOLDED = (
    "INSERT INTO search_terms AS c (tenant, kind, lexeme, shard, docs) "
    "SELECT %(tenant)s, %(kind)s, t.prefix || t.term, pg_backend_pid() %% 8, t.docs FROM ("
    "SELECT g.prefix, u.term, sum(u.docs) AS docs FROM {gone} AS g, "
    "unnest(string_to_array(g.terms, ' '), string_to_array(g.counts, ' ')::bigint[]) "
    "AS u (term, docs) GROUP BY 1, 2) AS t ORDER BY t.prefix || t.term COLLATE \"C\" "
    "ON CONFLICT (tenant, kind, lexeme, shard) DO UPDATE SET docs = c.docs + excluded.docs"
)

#: Folds the log of a tenant and kind (``tenant``, ``kind``) into ``search_terms``.
FOLD = (
    "WITH gone AS (DELETE FROM search_term_log WHERE tenant = %(tenant)s "
    "AND kind = %(kind)s RETURNING prefix, terms, counts) " + _FOLDED.format(gone="gone")
)

#: CTEs that log a write's documents per term, after the CTE ``{after}`` and only when it
#: has a row (``log_prefix``, ``log_terms``, ``log_counts``, ``log_entries``: see
#: :func:`logged_counts`), then fold the log when it held ``fold_at`` term counts or
#: more (the row just logged is not among them: a statement does not see its own rows).
LOG_FROM = (
    "logged AS (INSERT INTO search_term_log (tenant, kind, prefix, terms, counts, entries) "
    "SELECT %(tenant)s, %(kind)s, %(log_prefix)s, %(log_terms)s, %(log_counts)s, "
    "%(log_entries)s FROM {after} RETURNING 1), "
    "due AS (DELETE FROM search_term_log WHERE tenant = %(tenant)s AND kind = %(kind)s "
    "AND EXISTS (SELECT FROM logged) AND (SELECT sum(entries) FROM search_term_log "
    "WHERE tenant = %(tenant)s AND kind = %(kind)s) >= %(fold_at)s "
    "RETURNING prefix, terms, counts), "
    "folded AS (" + _FOLDED.format(gone="due") + ")"
)

#: Adds documents to a scope's statistics and logs their terms, in that order (as the
#: delete triggers subtract them: statistics, then terms).
ADD_COUNTS = (
    "WITH stats AS (INSERT INTO search_stats AS s (tenant, kind, scope, shard, docs, length) "
    "VALUES (%(tenant)s, %(kind)s, %(scope)s, pg_backend_pid() %% 8, %(docs)s, %(length)s) "
    "ON CONFLICT (tenant, kind, scope, shard) DO UPDATE SET docs = s.docs + excluded.docs, "
    "length = s.length + excluded.length RETURNING 1), " + LOG_FROM.format(after="stats")
    + " SELECT"
)


def logged_counts(prefix: str, counts: Counter[str]) -> dict[str, Any]:
    """The parameters of :data:`LOG_FROM`: the documents of each term of ``counts``, a term
    being a lexeme without its scope's ``prefix``."""
    return {"log_prefix": prefix, "log_terms": " ".join(counts),
            "log_counts": " ".join(map(str, counts.values())), "log_entries": len(counts),
            "fold_at": FOLD_ENTRIES}


def _scope_terms(prefix: str, lexemes: Counter[str]) -> Counter[str]:
    """``lexemes`` (all of scope ``prefix``) as terms without the prefix."""
    cut = len(prefix)
    terms: Counter[str] = Counter()
    for lex, n in lexemes.items():
        if lex[:cut] != prefix:
            raise ValueError(f"lexeme {lex!r} is not of the scope counted ({prefix!r})")
        terms[lex[cut:]] = n
    return terms


async def add_counts(cur: Cursor, tenant: str, kind: str, scope: str, docs: int,
                     length: int, counts: Counter[str]) -> None:
    """Count ``docs`` documents of ``length`` terms in all, holding the lexemes of
    ``counts`` (all of the scope's prefix), into ``search_stats`` and the log of
    ``search_terms``: the last statement of a write."""
    if docs:
        prefix = scope_prefix(tenant) if kind == "item" else scope_prefix(tenant, scope)
        await cur.execute(ADD_COUNTS, {"tenant": tenant, "kind": kind, "scope": scope,
                                       "docs": docs, "length": length,
                                       **logged_counts(prefix, _scope_terms(prefix, counts))})


def term_counts_sql(alias: str) -> str:
    """The columns a search scores row ``alias`` by: its ``terms_len`` and, for each kept
    lexeme it holds, that lexeme's place in ``kept`` (from 1) and its count.

    ``setweight`` with a lexeme filter marks the kept lexemes' positions with weight A
    (stored terms carry none, that is D) and ``ts_filter`` keeps only those, so only
    the row's kept lexemes are unnested: joining every lexeme of the row to ``kept``
    took about twice as long for a search's candidates. Every stored lexeme has a
    position, so none is lost by the filter."""
    return (f"{alias}.terms_len, (SELECT array_agg(array[array_position(%(kept)s::text[], "
            "u.lexeme), cardinality(u.positions)]) FROM unnest(ts_filter(setweight("
            f"{alias}.terms, 'A', %(kept)s::text[]), '{{a}}')) AS u)")


#: The statistics of a query's scope (the row whose lexeme is NULL), and each query
#: lexeme with its documents (``search_terms`` read by its whole key: a plan that holds
#: however stale the table's statistics are) and, for those ``read_terms`` reads first,
#: their postings, by the GIN index alone (a lexeme names its scope, and the candidates
#: are checked on their rows; a tenant predicate here could lead the planner to intersect
#: the postings with every row of the tenant). The kept terms are those of
#: ``useful_terms``.
_STATS_AND_POSTINGS = (
    "WITH st AS (SELECT coalesce(sum(docs), 0) AS n, coalesce(sum(length), 0) AS len "
    "FROM search_stats WHERE tenant = %(tenant)s AND kind = %(kind)s "
    "AND scope = %(scope)s), "
    "d AS (SELECT w.t, coalesce(c.docs, 0) AS docs FROM unnest(%(wanted)s::text[]) AS w (t) "
    "CROSS JOIN LATERAL (SELECT sum(docs) AS docs FROM search_terms "
    "WHERE tenant = %(tenant)s AND kind = %(kind)s AND lexeme = w.t COLLATE \"C\") AS c), "
    "k AS (SELECT d.t, d.docs FROM d, st WHERE d.docs > 0 AND (2 * d.docs < st.n "
    "OR NOT EXISTS (SELECT 1 FROM d AS e WHERE 2 * e.docs < st.n))), "
    "r AS (SELECT k.t, row_number() OVER w AS rn, sum(k.docs) OVER w AS cum FROM k "
    "WINDOW w AS (ORDER BY k.docs, k.t COLLATE \"C\" ROWS UNBOUNDED PRECEDING)) "
    "SELECT NULL, st.n, st.len, NULL FROM st UNION ALL "
    "SELECT d.t, d.docs, 0, CASE WHEN r.rn = 1 OR r.cum <= %(budget)s THEN "
    "ARRAY(SELECT f.{key} FROM {table} f WHERE f.terms @@ d.t::tsquery) END "
    "FROM d LEFT JOIN r ON r.t = d.t"
)


class _Unscored(Exception):
    """``top`` asked for a candidate not fetched yet (the argument: its id)."""


async def ranked(cur: Cursor, table: str, key: str, kind: str, prefix: str,
                 params: dict[str, Any], query: rules.TextQuery, limit: int,
                 fetch: Callable[[list[int]], Awaitable[list[tuple[int, T, Any, int, Any]]]],
                 narrow: str | None = None) -> list[tuple[T, float]]:
    """The ``limit`` best documents of scope ``prefix`` in ``table`` (row id ``key``), with
    their scores, best first (see "Candidates" in :mod:`~ownstate.backends.ports.search`).

    ``params`` names ``tenant`` and ``scope`` (the ``search_stats`` scope), and what the
    SQL of ``fetch`` and ``narrow`` needs; ``kept`` (the lexemes that count) and ``any``
    (a ``tsquery`` holding when one of them is present) are added to it. ``fetch``
    returns, for the row ids given, each document that passes the search's filters as
    (its id, document, tie key, ``terms_len``, the pairs of :func:`term_counts_sql`).
    ``narrow``, for a filter that keeps few documents, selects the ids of those it keeps
    that match ``any``; they are the candidates then, instead of the postings of the
    rarest terms.
    """
    wanted = [lexeme(prefix, t) for t in query.terms]
    # the log folded first, in the same round trip; the counts are read by the next
    # statement, whose snapshot holds what this fold and any it waited for committed
    await cur.execute(_STATS_AND_POSTINGS.format(key=key, table=table), {
        "tenant": params["tenant"], "scope": params["scope"], "kind": kind,
        "wanted": wanted, "budget": rules.CANDIDATE_POSTINGS}, binary=True,
        before=(FOLD, {"tenant": params["tenant"], "kind": kind}))
    n, size = 0, 0
    df: dict[str, int] = {}
    read_first: dict[str, list[int]] = {}  # the postings the statement read
    for lex, docs, total, ids in await cur.fetchall():
        if lex is None:
            n, size = int(docs), int(total)
        elif docs > 0:
            df[lex] = int(docs)
            if ids is not None:
                read_first[lex] = ids
    kept = [t for t in rules.useful_terms(wanted, df, n) if t in df]
    if n <= 0 or not kept:
        return []
    weights = {t: rules.idf(df[t], n) for t in kept}
    bm25 = rules.bm25_of(kept, weights, n, size / n)
    params.update(kept=kept, any=" | ".join(kept))
    scored: dict[int, tuple[T, float, Any] | None] = {}

    def score(ids: list[int]) -> list[tuple[T, float, Any]]:
        for i in ids:
            if i not in scored:
                raise _Unscored(i)
        return [hit for hit in (scored[i] for i in ids) if hit is not None]

    async def rank(found: list[tuple[float, int]], unread_idf: float,
                   cap: int | None) -> list[tuple[T, float]]:
        # top() scores a chunk at a time; the candidates from the one it asks for on are
        # fetched and scored a batch at a time, so that most searches take one round trip
        ahead = rules.RESCORED
        while True:
            try:
                return rules.top(found, unread_idf, limit, score, cap)
            except _Unscored as missing:
                start = next(n for n, (_, i) in enumerate(found) if i == missing.args[0])
                batch = [i for _, i in found[start:start + ahead] if i not in scored]
                ahead *= 4
                for i in batch:
                    scored[i] = None
                for i, doc, tie, length, pairs in await fetch(batch):
                    value = bm25({kept[o - 1]: c for o, c in pairs or ()}, length)
                    if value > 0:
                        scored[i] = (doc, value, tie)

    if narrow is not None:
        await cur.execute(narrow, params)
        return await rank([(0.0, int(r[0])) for r in await cur.fetchall()], math.inf, None)

    async def postings(read: Sequence[str]) -> dict[str, list[int]]:
        # as _STATS_AND_POSTINGS reads them
        await cur.execute(
            f"SELECT q.t, ARRAY(SELECT f.{key} FROM {table} f WHERE f.terms @@ q.t::tsquery) "
            "FROM unnest(%(read)s::text[]) AS q (t)", {"read": list(read)}, binary=True)
        return {t: ids for t, ids in await cur.fetchall()}  # noqa: C416 - typed rows

    budget = rules.CANDIDATE_POSTINGS
    found: dict[str, list[int]] = {}
    while True:
        read, unread = rules.read_terms(kept, df, budget)
        for t in read:
            if t not in found and t in read_first:
                found[t] = read_first.pop(t)
        fresh = [t for t in read if t not in found]
        if fresh:
            found.update(await postings(fresh))
        hits = await rank(rules.candidates(found, weights), sum(weights[t] for t in unread),
                          rules.RESCORED if unread else None)
        if not unread or len(hits) >= limit:
            return hits
        budget = 4 * max(budget, sum(df[t] for t in read))


async def backfill(cur: Cursor) -> None:
    """Index the facts and items written before ranked search existed, and count them into
    ``search_stats``: the data half of migration 5, run in its transaction. Row-level
    security is lifted for the transaction so that the schema's owner sees every tenant."""
    tables = ("facts", "items", "search_stats")
    for table in tables:
        await cur.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    await _index_rows(cur, "facts", "fid", "tenant, memory_store, key, value::text",
                      lambda r: fact_vector(r[0], r[1], r[2], json.loads(r[3])))
    await _index_rows(cur, "items", "id", "tenant, data::text",
                      lambda r: item_vector(r[0], rules.item_text(json.loads(r[1]))))
    await cur.execute(
        "INSERT INTO search_stats (tenant, kind, scope, shard, docs, length) "
        "SELECT tenant, 'fact', memory_store, 0, count(*), sum(terms_len) FROM facts "
        "WHERE terms_len IS NOT NULL GROUP BY tenant, memory_store "
        "UNION ALL SELECT tenant, 'item', '', 0, count(*), sum(terms_len) FROM items "
        "WHERE terms_len IS NOT NULL GROUP BY tenant")
    for table in tables:
        await cur.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


async def _index_rows(cur: Cursor, table: str, key: str, columns: str,
                      vector: Callable[[Sequence[Any]], Vector]) -> None:
    """Store the terms of every row of ``table``, 2000 rows at a time in ``key`` order:
    ``vector`` makes a row's terms and their count from its ``columns``. The count done,
    the rate and the time left are logged as it goes (``_migrations.Progress``)."""
    await cur.execute(f"SELECT count(*) FROM {table}")
    counted = await cur.fetchone()
    progress = Progress(f"indexing {table} for search", int(counted[0]) if counted else 0)
    last = 0
    while True:
        await cur.execute(f"SELECT {key}, {columns} FROM {table} WHERE {key} > %s "
                          f"ORDER BY {key} LIMIT 2000", (last,))
        rows = await cur.fetchall()
        if not rows:
            progress.finish()
            return
        made = [vector(r[1:]) for r in rows]
        await cur.execute(
            f"UPDATE {table} SET terms = v.terms::tsvector, terms_len = v.len FROM "
            f"unnest(%s::bigint[], %s::text[], %s::int[]) AS v ({key}, terms, len) "
            f"WHERE {table}.{key} = v.{key}",
            ([r[0] for r in rows], [m[0] for m in made], [m[1] for m in made]))
        last = rows[-1][0]
        progress.advance(len(rows))
