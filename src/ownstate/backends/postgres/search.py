"""Ranked search in PostgreSQL: ``terms`` tsvectors, GIN indexes and ``search_stats``.

A fact's and an item's terms (:mod:`ownstate.backends.ports.search`, computed here in
Python, never by a text-search parser: no stemming, no stop words) are stored in its row
as a ``tsvector`` named ``terms`` whose lexemes carry a fixed-length opaque prefix naming
the scope (the tenant and memory store for a fact, the tenant for an item) and whose
positions count the term's occurrences; ``terms_len`` holds the number of terms. One GIN
index per table finds the rows holding a query's lexemes. Terms too long for a lexeme are
stored as their hash.

BM25 needs the number of documents in the scope and their total length: ``search_stats``
keeps them, in eight shards per scope (a writer adds to the shard of its connection, so
concurrent writers rarely wait on one row). Writes add to it in their own statement;
deletes, cascades included, subtract through statement-level triggers. The document
frequency of each query term is counted at query time through the GIN index, and a query
scores its candidates with the formula of :func:`~ownstate.backends.ports.search.bm25`,
in SQL. Closed facts stay indexed, so a search as of an earlier valid time finds what held
then; a store made with ``index_items=False`` leaves its items' ``terms`` NULL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ...model import ItemHit, build_item
from ..ports.search import K1, B, TextQuery, fact_text, idf, item_text, terms, useful_terms
from ._core import Cursor, PostgresCore

__all__ = ["LONGEST_LEXEME", "MAX_POSITION", "MAX_POSITIONS", "WEIGHTS", "SearchInPostgres",
           "backfill", "fact_vector", "item_vector", "lexeme", "query_lexemes", "scope_prefix",
           "score_sql", "term_positions", "weigh"]

#: Longest term (in UTF-8 bytes) stored as itself; longer ones are stored by their hash.
LONGEST_LEXEME = 200
#: Positions kept per lexeme (a tsvector keeps at most 256), and the largest position (a
#: later one is stored as it).
MAX_POSITIONS = 255
MAX_POSITION = 16383


def scope_prefix(*parts: str) -> str:
    """An opaque, fixed-length lexeme prefix for a scope: 16 hex digits."""
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).hexdigest()


def lexeme(prefix: str, term: str) -> str:
    """The lexeme of ``term`` in the scope ``prefix``."""
    if len(term) * 4 > LONGEST_LEXEME and len(term.encode()) > LONGEST_LEXEME:
        term = "h" + hashlib.blake2b(term.encode(), digest_size=16).hexdigest()
    return prefix + term


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


def _vector(prefix: str, found: Sequence[str]) -> tuple[str, int]:
    """The ``tsvector`` text of a document's terms, and its length in terms. Terms hold
    only letters and digits, so they need no quoting."""
    positions: dict[str, list[int]] = {}
    for term, at in term_positions(found).items():
        lex = lexeme(prefix, term)
        held = positions.get(lex)  # a long term's hash may spell a stored term
        positions[lex] = at if held is None else sorted(held + at)
    if len(found) > MAX_POSITION:
        return " ".join(f"{lex}:{','.join(str(min(n, MAX_POSITION)) for n in at[:MAX_POSITIONS])}"
                        for lex, at in positions.items()), len(found)
    return " ".join(f"{lex}:{','.join(map(str, at[:MAX_POSITIONS]))}"
                    for lex, at in positions.items()), len(found)


def fact_vector(tenant: str, store: str, key: str, value: Any) -> tuple[str, int]:
    return _vector(scope_prefix(tenant, store), terms(fact_text(key, value)))


def item_vector(tenant: str, text: str) -> tuple[str, int]:
    return _vector(scope_prefix(tenant), terms(text))


def query_lexemes(prefix: str, query: TextQuery) -> list[str]:
    """A query's lexemes in a scope (each one a ``tsquery``'s text as it is: a lexeme holds
    only letters and digits, so it needs no quoting)."""
    return [lexeme(prefix, t) for t in query.terms]


async def weigh(cur: Cursor, table: str, scope: str, params: dict[str, Any]) -> None:
    """Add to ``params`` what a ranked query needs: ``kept`` (the lexemes of ``lexemes``
    that count, see ``useful_terms``), their ``idf``, ``any`` (a ``tsquery`` holding when
    one of them is present) and ``avgdl``. A document frequency is counted through the GIN
    index, and no further than half the scope's documents: past that, a term does not
    count, whatever its exact frequency. ``params`` names ``tenant``, ``kind``, ``scope``
    and what the predicate ``scope`` (on ``f``) needs."""
    await cur.execute(
        "WITH st AS (SELECT coalesce(sum(docs), 0) AS n, coalesce(sum(length), 0) AS len "
        "FROM search_stats WHERE tenant = %(tenant)s AND kind = %(kind)s "
        "AND scope = %(scope)s) "
        "SELECT st.n, st.len, (SELECT array_agg(d.n ORDER BY q.ord) "
        "FROM unnest(%(lexemes)s::text[]) WITH ORDINALITY AS q (t, ord) CROSS JOIN LATERAL "
        f"(SELECT count(*) AS n FROM (SELECT 1 FROM {table} f WHERE f.terms @@ q.t::tsquery "
        f"AND {scope} LIMIT st.n / 2 + 1) AS x) AS d) FROM st", params)
    row = await cur.fetchone()
    assert row is not None
    n, total, counted = int(row[0]), int(row[1]), row[2] or []
    df = dict(zip(params["lexemes"], (int(c) for c in counted), strict=True))
    n = max(n, *df.values(), 0)
    kept = useful_terms(params["lexemes"], df, n)
    params.update(kept=kept, idf=[idf(df[t], n) for t in kept], any=" | ".join(kept),
                  avgdl=max(total / n, 1e-9) if n else 1.0)


#: The CTE of the kept lexemes and their idf (parameters of ``weigh``).
WEIGHTS = "w AS (SELECT * FROM unnest(%(kept)s::text[], %(idf)s::float8[]) AS w (t, idf))"


def score_sql(alias: str) -> str:
    """The BM25 score of row ``alias`` against ``w`` and ``avgdl``."""
    return (
        f"(SELECT sum(w.idf * cardinality(u.positions) * {K1 + 1} / (cardinality(u.positions) "
        f"+ {K1} * ({1 - B} + {B} * {alias}.terms_len / %(avgdl)s::float8))) "
        f"FROM unnest({alias}.terms) u JOIN w ON w.t = u.lexeme)"
    )


async def backfill(cur: Cursor) -> None:
    """Index the facts and items written before ranked search existed, and count them into
    ``search_stats``: the data half of migration 5, run in its transaction. Row-level
    security is lifted for the transaction so that the schema's owner sees every tenant."""
    tables = ("facts", "items", "search_stats")
    for table in tables:
        await cur.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    last = 0
    while True:
        await cur.execute("SELECT fid, tenant, memory_store, key, value::text FROM facts "
                          "WHERE fid > %s ORDER BY fid LIMIT 2000", (last,))
        rows = await cur.fetchall()
        if not rows:
            break
        made = [fact_vector(r[1], r[2], r[3], json.loads(r[4])) for r in rows]
        await cur.execute(
            "UPDATE facts SET terms = v.terms::tsvector, terms_len = v.len FROM "
            "unnest(%s::bigint[], %s::text[], %s::int[]) AS v (fid, terms, len) "
            "WHERE facts.fid = v.fid",
            ([r[0] for r in rows], [m[0] for m in made], [m[1] for m in made]))
        last = rows[-1][0]
    last = 0
    while True:
        await cur.execute("SELECT id, tenant, data::text FROM items WHERE id > %s "
                          "ORDER BY id LIMIT 2000", (last,))
        rows = await cur.fetchall()
        if not rows:
            break
        made = [item_vector(r[1], item_text(json.loads(r[2]))) for r in rows]
        await cur.execute(
            "UPDATE items SET terms = v.terms::tsvector, terms_len = v.len FROM "
            "unnest(%s::bigint[], %s::text[], %s::int[]) AS v (id, terms, len) "
            "WHERE items.id = v.id",
            ([r[0] for r in rows], [m[0] for m in made], [m[1] for m in made]))
        last = rows[-1][0]
    await cur.execute(
        "INSERT INTO search_stats (tenant, kind, scope, shard, docs, length) "
        "SELECT tenant, 'fact', memory_store, 0, count(*), sum(terms_len) FROM facts "
        "WHERE terms_len IS NOT NULL GROUP BY tenant, memory_store "
        "UNION ALL SELECT tenant, 'item', '', 0, count(*), sum(terms_len) FROM items "
        "WHERE terms_len IS NOT NULL GROUP BY tenant")
    for table in tables:
        await cur.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


#: Adds documents to a scope's statistics: ``docs`` and ``length`` of the rows written.
ADD_STATS = (
    "INSERT INTO search_stats AS s (tenant, kind, scope, shard, docs, length) "
    "VALUES (%s, %s, %s, pg_backend_pid() %% 8, %s, %s) ON CONFLICT (tenant, kind, scope, shard) "
    "DO UPDATE SET docs = s.docs + excluded.docs, length = s.length + excluded.length"
)

_ITEM_COLUMNS = ("f.item_id, f.seq, f.create_time, f.data, f.format, f.role, f.type, "
                 "f.tool_name, f.model, f.in_tokens, f.out_tokens")


class SearchInPostgres(PostgresCore):
    """``search_items`` over items (facts: ``FactsInPostgres.search``)."""

    async def search_items(
        self, tenant: str, query: TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        sql = (
            f"WITH {WEIGHTS}, "
            "cand AS (SELECT f.*, s.store, s.session_id, s.actor_id FROM items f "
            "JOIN sessions s ON s.sid = f.sid "
            "WHERE f.terms @@ %(any)s::tsquery "
            "AND f.tenant = %(tenant)s AND s.tenant = %(tenant)s "
            + ("" if stores is None else "AND s.store = ANY(%(stores)s) ")
            + "AND (%(actor)s::text IS NULL OR s.actor_id = %(actor)s) "
            "AND (%(session)s::text IS NULL OR s.session_id = %(session)s)) "
            f"SELECT {_ITEM_COLUMNS}, f.store, f.session_id, f.actor_id, {score_sql('f')} "
            "AS score FROM cand f "
            "ORDER BY score DESC, f.store, f.session_id, f.seq LIMIT %(limit)s"
        )
        params = {"lexemes": query_lexemes(scope_prefix(tenant), query), "tenant": tenant,
                  "kind": "item", "scope": "",
                  "stores": list(stores) if stores is not None else None,
                  "actor": actor_id, "session": session_id, "limit": limit}

        async def run(cur: Cursor) -> list[ItemHit]:
            await weigh(cur, "items", "f.tenant = %(tenant)s", params)
            await cur.execute(sql, params)
            return [ItemHit(r[11], r[13], build_item(r[0], r[12], r[1], r[2], r[3], r[4], r[5],
                                                     r[6], r[7], r[8], r[9], r[10]),
                            float(r[14])) for r in await cur.fetchall()]

        return await self._read(tenant, run)
