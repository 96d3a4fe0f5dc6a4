"""Ranked search in SQLite: the ``fact_search`` and ``item_search`` FTS5 indexes.

Both are FTS5 tables of one column, ``terms``, holding the terms of
:mod:`ownstate.backends.ports.search` joined by spaces, each behind a fixed-length opaque
prefix naming its scope: the tenant and memory store for a fact (``fact_search``, keyed by
the fact's ``fid``), the tenant for an item (``item_search``, keyed by the item's ``id``).
A term's postings therefore hold one scope's documents only, so other tenants' and stores'
documents cost a search nothing, and FTS5's ``bm25()`` ranks with the document
frequencies of that scope. The number of documents and their average length that
``bm25()`` uses are the whole table's, which changes scores slightly, never which
documents match. The ``ascii`` tokenizer keeps each prefixed term one token: a term holds
no ASCII punctuation or space.

Rows enter in the same transaction as their fact or item (and for the data of earlier
versions, in migration 4, through the SQL functions :func:`register_functions` defines);
triggers remove them when the row is deleted. A closed fact stays indexed, so a search as
of an earlier valid time finds what held then. A store made with ``index_items=False``
adds no rows for its items.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from collections.abc import Sequence

from ...model import ItemHit
from ..ports.search import TextQuery, fact_text, item_text, terms, useful_terms
from ._core import ITEM_COLUMNS, SqliteCore, to_items

__all__ = ["SearchInSqlite", "fact_match", "fact_terms", "item_terms", "register_functions"]


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
    return " ".join([prefix, *(prefix + t for t in found)])


def fact_terms(tenant: str, store: str, key: str, value_json: str) -> str:
    """The ``fact_search`` text of a fact."""
    return _joined(_prefix(tenant, store), terms(fact_text(key, json.loads(value_json))))


def item_terms(tenant: str, text: str) -> str:
    """The ``item_search`` text of an item whose searchable text is ``text``."""
    return _joined(_prefix(tenant), terms(text))


def _item_terms_of_data(tenant: str, data_json: str) -> str:
    return item_terms(tenant, item_text(json.loads(data_json)))


def register_functions(conn: sqlite3.Connection) -> None:
    """The SQL functions migrations call to index rows written before an index existed."""
    conn.create_function("ownstate_fact_terms", 4, fact_terms, deterministic=True)
    conn.create_function("ownstate_item_terms", 2, _item_terms_of_data, deterministic=True)


def _match(conn: sqlite3.Connection, vocabulary: str, prefix: str,
           query: TextQuery) -> str:
    """The ``MATCH`` argument of a query in one scope: its terms that count, by their
    document frequencies in the scope (``useful_terms``)."""
    wanted = [prefix + t for t in query.terms]
    marks = ", ".join("?" * (len(wanted) + 1))
    df = dict(conn.execute(f"SELECT term, doc FROM {vocabulary} WHERE term IN ({marks})",
                           [prefix, *wanted]).fetchall())
    n = df.pop(prefix, 0)
    kept = useful_terms(wanted, df, n)
    return " OR ".join(f'"{t}"' for t in kept)


def fact_match(conn: sqlite3.Connection, tenant: str, store: str, query: TextQuery) -> str:
    """The ``fact_search MATCH`` argument of a query in one memory store."""
    return _match(conn, "fact_vocabulary", _prefix(tenant, store), query)


class SearchInSqlite(SqliteCore):
    """``search_items`` over items, ranked by FTS5's bm25() (facts: ``FactsInSqlite``)."""

    async def search_items(
        self, tenant: str, query: TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        columns = ", ".join("i." + c for c in ITEM_COLUMNS.split(", "))
        sql = (
            f"SELECT {columns}, s.store, s.session_id, s.actor_id, -bm25(item_search) AS score "
            "FROM item_search JOIN items i ON i.id = item_search.rowid "
            "JOIN sessions s ON s.sid = i.sid "
            "WHERE item_search MATCH ? AND i.tenant = ? AND s.tenant = ? "
            + ("" if stores is None else "AND s.store IN (SELECT value FROM json_each(?)) ")
            + "AND (? IS NULL OR s.actor_id = ?) AND (? IS NULL OR s.session_id = ?) "
            "ORDER BY score DESC, s.store, s.session_id, i.seq LIMIT ?"
        )
        tail: list[object] = [tenant, tenant]
        if stores is not None:
            tail.append(json.dumps(list(stores)))
        tail += [actor_id, actor_id, session_id, session_id, limit]

        def run(conn: sqlite3.Connection) -> list[ItemHit]:
            match = _match(conn, "item_vocabulary", _prefix(tenant), query)
            rows = conn.execute(sql, [match, *tail]).fetchall()
            return [ItemHit(r[11], r[13], to_items([r], r[12])[0], float(r[14]))
                    for r in rows]

        return await self._run(run)
