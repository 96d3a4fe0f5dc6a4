"""Ranked search in SQLite: the ``fact_search`` and ``item_search`` FTS5 indexes and their
term statistics, ``fact_term_counts`` and ``item_term_counts``.

Both indexes are FTS5 tables of one column, ``terms``, holding the terms of
:mod:`ownstate.backends.ports.search` joined by spaces, each behind a fixed-length opaque
prefix naming its scope: the tenant and memory store for a fact (``fact_search``, keyed by
the fact's ``fid``), the tenant for an item (``item_search``, keyed by the item's ``id``),
and the bare prefix first. A term's postings therefore hold one scope's documents only, so
other tenants' and stores' documents cost a search nothing. The ``ascii`` tokenizer keeps
each prefixed term one token: a term holds no ASCII punctuation or space.

FTS5 only finds documents here; it does not rank them. Its ``bm25()`` counts each query
term's documents by reading the term's whole posting list on every query, which for the
common words of a question in a store of 100,000 facts is most of the time a search takes,
and scores every document holding any query term. So each scope's statistics are kept in
``*_term_counts`` instead: per prefixed term the number of documents holding it, and for
the bare prefix the scope's number of documents and their total size in terms. A search
reads the statistics of its terms there, the postings of its rarest terms from FTS5 (see
"Candidates" in the ports module), and scores candidates in Python from their indexed text
(the FTS5 content table, ``*_search_content``), with the scope's own statistics, as the
memory backend does.

Indexing later. A write does not index what it writes: it adds the range of its new rows'
ids to ``fact_index_queue`` or ``item_index_queue``, in its own transaction
(:func:`defer`), and the next search indexes the rows of every queued range, computing
their terms from the stored facts and items, counts those terms and empties the queue, in
one write transaction of its own before it reads (:func:`index_pending`); so does a write
that finds some :data:`PENDING_LIMIT` ids queued, which bounds what a search can find to
do. Indexing many rows at once costs less per row than indexing each write's few (one
FTS5 segment, and one upsert per distinct term of them all), and a write pays for one
small row. It is PostgreSQL's GIN "pending list", kept as ranges of row ids. A search sees
every write that committed before it began, ranked as if each write had indexed its own
rows. A range may come to cover ids of rows deleted since, or indexed already (SQLite
reuses the id of a deleted last row), or, for items, of a store that does not index them:
indexing skips those. (The data of earlier versions was indexed by migrations 4 and 8,
through the SQL functions :func:`register_functions` defines and SQL.) A trigger removes
a deleted row's entry and uncounts its terms. A closed fact stays indexed, so a search as
of an earlier valid time finds what held then. A store made with ``index_items=False``
adds nothing to the queue.

It may touch the SQLite connections of ``_core``, the search port, JSON decoding
(``ownstate._jsontext``) and the model.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from ..._jsontext import decode_json
from ...model import Item, ItemHit
from ..ports import search as rules
from ._core import ITEM_COLUMNS, SqliteCore, to_items, write

__all__ = ["PENDING_LIMIT", "SearchInSqlite", "count_terms", "defer", "fact_prefix",
           "fact_terms", "index_pending", "item_terms", "ranked", "register_functions"]

T = TypeVar("T")

#: About how many rows may wait for indexing before a write indexes them itself.
PENDING_LIMIT = 10_000

# per kind, the documents of the queued ranges not yet indexed, each with the arguments of
# its terms function: a range may hold ids that were deleted, and (after a deleted row's id
# was reused) rows indexed since or, for items, of a store that does not index them
_QUEUED = {
    "fact": "SELECT f.fid, f.tenant, f.memory_store, f.key, f.value FROM fact_index_queue q "
            "CROSS JOIN facts f ON f.fid BETWEEN q.first AND q.last "
            "WHERE NOT EXISTS (SELECT 1 FROM fact_search_content c WHERE c.id = f.fid)",
    "item": "SELECT i.id, i.tenant, i.data FROM item_index_queue q "
            "CROSS JOIN items i ON i.id BETWEEN q.first AND q.last "
            "CROSS JOIN sessions s ON s.sid = i.sid "
            "CROSS JOIN session_stores t ON t.tenant = s.tenant AND t.name = s.store "
            "WHERE t.index_items AND NOT EXISTS "
            "(SELECT 1 FROM item_search_content c WHERE c.id = i.id)",
}


@functools.lru_cache(maxsize=1024)
def _prefix(*parts: str) -> str:
    """An opaque, fixed-length token prefix for a scope: 10 chars of ``[a-z2-7]``.

    The prefix only narrows what FTS5 reads; every search also checks the scope on the
    row itself, so two scopes that shared a prefix would cost time, never correctness.
    """
    digest = hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).digest()
    return base64.b32encode(digest).decode()[:10].lower()


def _joined(prefix: str, found: Sequence[str]) -> str:
    # the bare prefix marks each document of the scope, so that its document frequency
    # is the scope's number of documents
    if not found:
        return prefix
    return prefix + " " + prefix + (" " + prefix).join(found)


def fact_prefix(tenant: str, store: str) -> str:
    """The prefix of a memory store's terms in ``fact_search``."""
    return _prefix(tenant, store)


def fact_terms(tenant: str, store: str, key: str, value_json: str) -> str:
    """The ``fact_search`` text of a fact."""
    text = rules.fact_text(key, json.loads(value_json))
    return _joined(_prefix(tenant, store), rules.terms(text))


def item_terms(tenant: str, text: str) -> str:
    """The ``item_search`` text of an item whose searchable text is ``text``."""
    return _joined(_prefix(tenant), rules.terms(text))


def _item_terms_of_data(tenant: str, data_json: str) -> str:
    return item_terms(tenant, rules.item_text(decode_json(data_json)))



def register_functions(conn: sqlite3.Connection) -> None:
    """The SQL functions migrations call to index rows written before an index existed."""
    conn.create_function("ownstate_fact_terms", 4, fact_terms, deterministic=True)
    conn.create_function("ownstate_item_terms", 2, _item_terms_of_data, deterministic=True)


def count_terms(conn: sqlite3.Connection, kind: str,
                documents: Iterable[tuple[str, Sequence[str]]]) -> None:
    """Add documents just indexed, each as its scope's prefix and its terms (unprefixed),
    to ``fact_term_counts`` or ``item_term_counts`` (``kind`` ``fact`` or ``item``)."""
    docs: dict[str, Counter[str]] = {}
    scopes: dict[str, list[int]] = {}  # prefix: [documents, size]
    for prefix, found in documents:
        counter = docs.get(prefix)
        if counter is None:
            counter = docs[prefix] = Counter()
            scopes[prefix] = [0, 0]
        counter.update(set(found))
        scope = scopes[prefix]
        scope[0] += 1
        scope[1] += len(found)
    rows = [(prefix, n, size) for prefix, (n, size) in scopes.items()]
    rows += [(prefix + term, n, 0) for prefix, counter in docs.items()
             for term, n in counter.items()]
    rows.sort()
    conn.execute(
        f"INSERT INTO {kind}_term_counts (term, docs, size) "
        "SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?) WHERE true "
        "ON CONFLICT (term) DO UPDATE SET docs = docs + excluded.docs, "
        "size = size + excluded.size", (json.dumps(rows),))


def defer(conn: sqlite3.Connection, kind: str, ids_sql: str, params: Sequence[object]) -> None:
    """Queue the rows just written, whose ``fid`` or ``id`` ``ids_sql`` selects (as ``id``),
    for indexing later, in the caller's write transaction, as the range from the lowest to
    the highest; index everything queued when about :data:`PENDING_LIMIT` rows wait."""
    conn.execute(
        f"INSERT INTO {kind}_index_queue (first, last) SELECT lo, hi FROM "
        f"(SELECT min(id) AS lo, max(id) AS hi FROM ({ids_sql})) WHERE lo IS NOT NULL "
        "ON CONFLICT (first) DO UPDATE SET last = max(last, excluded.last)", params)
    # the ids queued are mostly consecutive: their span bounds their number from above
    low, high = conn.execute(
        f"SELECT (SELECT first FROM {kind}_index_queue ORDER BY first LIMIT 1), "
        f"(SELECT last FROM {kind}_index_queue ORDER BY first DESC LIMIT 1)").fetchone()
    if low is not None and high - low + 1 >= PENDING_LIMIT:
        _index(conn, kind)


def _queued_documents(kind: str, row: Sequence[Any]) -> tuple[str, list[str]]:
    """A queued row's scope prefix and terms."""
    if kind == "fact":
        value = row[4] if isinstance(row[4], str) else bytes(row[4]).decode()
        return _prefix(row[1], row[2]), rules.terms(rules.fact_text(row[3], decode_json(value)))
    return _prefix(row[1]), rules.terms(rules.item_text(decode_json(row[2])))


def _index(conn: sqlite3.Connection, kind: str) -> None:
    documents: dict[int, tuple[str, list[str]]] = {}  # by rowid: ranges may overlap
    for r in conn.execute(_QUEUED[kind]):
        if r[0] not in documents:
            documents[r[0]] = _queued_documents(kind, r)
    conn.executemany(f"INSERT INTO {kind}_search (rowid, terms) VALUES (?, ?)",
                     [(rowid, _joined(*doc)) for rowid, doc in documents.items()])
    count_terms(conn, kind, documents.values())
    conn.execute(f"DELETE FROM {kind}_index_queue")


def index_pending(conn: sqlite3.Connection, kind: str) -> None:
    """Index the ``fact`` or ``item`` rows queued for it, in a write transaction of their
    own, if any are (outside a transaction: what a search does before it reads)."""
    if conn.execute(f"SELECT 1 FROM {kind}_index_queue LIMIT 1").fetchone() is None:
        return
    with write(conn):
        _index(conn, kind)


def ranked(conn: sqlite3.Connection, kind: str, prefix: str, query: rules.TextQuery, limit: int,
           fetch: Callable[[list[int]], Iterable[tuple[T, str, Any]]],
           narrow: Callable[[], list[int]] | None = None) -> list[tuple[T, float]]:
    """The ``limit`` best documents of scope ``prefix`` in ``kind``'s index, with their
    scores, best first (see "Candidates" in :mod:`~ownstate.backends.ports.search`).

    ``fetch`` returns, for the row ids given, each document that passes the search's
    filters as (document, its index text, tie key); ``narrow``, when a filter keeps few
    documents, returns the ids of all it keeps, and those are scored instead of reading
    postings.
    """
    index_pending(conn, kind)
    wanted = [prefix + t for t in query.terms]
    stats = {r[0]: (int(r[1]), int(r[2])) for r in conn.execute(
        f"SELECT term, docs, size FROM {kind}_term_counts "
        "WHERE term IN (SELECT value FROM json_each(?))", (json.dumps([prefix, *wanted]),))}
    n, size = stats.pop(prefix, (0, 0))
    df = {t: d for t, (d, _) in stats.items() if d > 0}
    kept = [t for t in rules.useful_terms(wanted, df, n) if t in df]
    if n <= 0 or not kept:
        return []
    weights = {t: rules.idf(df[t], n) for t in kept}
    bm25 = rules.bm25_of(kept, weights, n, size / n)

    def score(ids: list[int]) -> list[tuple[T, float, Any]]:
        scored = []
        for doc, text, tie in fetch(ids):
            found = text.split(" ")
            value = bm25(Counter(found), len(found) - 1)
            if value > 0:
                scored.append((doc, value, tie))
        return scored

    if narrow is not None:
        return rules.top([(0.0, i) for i in narrow()], math.inf, limit, score, None)

    def postings(read: Iterable[str]) -> dict[str, list[int]]:
        return {t: [r[0] for r in conn.execute(
            f"SELECT rowid FROM {kind}_search WHERE {kind}_search MATCH ?", (f'"{t}"',))]
            for t in read}

    budget = rules.CANDIDATE_POSTINGS
    found: dict[str, list[int]] = {}
    while True:
        read, unread = rules.read_terms(kept, df, budget)
        found.update(postings(t for t in read if t not in found))
        hits = rules.top(rules.candidates(found, weights), sum(weights[t] for t in unread), limit,
                         score, rules.RESCORED if unread else None)
        if not unread or len(hits) >= limit:
            return hits
        budget = 4 * max(budget, sum(df[t] for t in read))


class SearchInSqlite(SqliteCore):
    """``search_items`` over items (facts: ``FactsInSqlite``)."""

    async def search_items(
        self, tenant: str, query: rules.TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        columns = ", ".join("i." + c for c in ITEM_COLUMNS.split(", "))
        where = (
            "i.tenant = ? AND s.tenant = ? "
            + ("" if stores is None else "AND s.store IN (SELECT value FROM json_each(?)) ")
            + "AND (? IS NULL OR s.actor_id = ?) AND (? IS NULL OR s.session_id = ?)"
        )
        sql = (
            # CROSS JOIN keeps SQLite from reading the tenant's items by index for the ids
            f"SELECT {columns}, s.store, s.session_id, s.actor_id, c.c0 FROM json_each(?) j "
            "CROSS JOIN items i ON i.id = j.value CROSS JOIN sessions s ON s.sid = i.sid "
            f"CROSS JOIN item_search_content c ON c.id = i.id WHERE {where}"
        )
        tail: list[object] = [tenant, tenant]
        if stores is not None:
            tail.append(json.dumps(list(stores)))
        tail += [actor_id, actor_id, session_id, session_id]

        def run(conn: sqlite3.Connection) -> list[ItemHit]:
            def fetch(ids: list[int]) -> list[tuple[tuple[str, str, Item], str, Any]]:
                rows = conn.execute(sql, [json.dumps(ids), *tail]).fetchall()
                return [((r[11], r[13], to_items([r], r[12])[0]), r[14], (r[11], r[12], r[1]))
                        for r in rows]

            def narrow() -> list[int]:
                return [r[0] for r in conn.execute(
                    f"SELECT i.id FROM items i JOIN sessions s ON s.sid = i.sid WHERE {where}",
                    tail)]

            hits = ranked(conn, "item", _prefix(tenant), query, limit, fetch,
                          narrow if session_id is not None else None)
            return [ItemHit(*found, score) for found, score in hits]

        return await self._run(run)
