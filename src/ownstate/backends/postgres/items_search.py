"""Item search in PostgreSQL: items indexed later, and ``search_items``.

Indexing later. An append (``append_items``) to a store that indexes its items writes
them with ``terms`` and ``terms_len`` NULL, and adds the range of their ids to
``item_index_queue`` (one row: the tenant, the first and last id), in its own statement
(``sessions.append_ctes``); a fork of a session whose items wait queues its copies the
same way. The next search in the tenant indexes every queued range first, in a
transaction of its own (:func:`index_queued`): one statement deletes the tenant's
ranges and reads, in the same snapshot, the items they hold that a store indexing its
items still has unindexed; their terms are computed here, from the stored data, exactly
as an append computed them before (``_tsvector``), stored by one ``UPDATE`` of those
rows still unindexed, and the documents actually updated are counted into
``search_stats`` and the term log (``search.py``), last. A second search that comes
meanwhile waits on the ranges' row locks, then finds them gone, and reads what the first
committed: no row is indexed or counted twice. An append that finds the tenant's queued
ids span :data:`PENDING_LIMIT` or more indexes them after it commits, which bounds what
a search can find to do. A search so sees every write committed before it began, ranked
as if each write had indexed its own rows.

A range may hold ids of items deleted since (the delete counted nothing: its
statement triggers subtract only rows whose ``terms_len`` is set), of other tenants'
items (ids are one sequence) or of a store that does not index its items: indexing skips
those. Bulk writes (``bulk.py``), restores (``transfer.py``) and checkpoints with items
(``checkpoints.py``) still store terms as they write.

The terms stay in the item's row, updated after the insert, rather than in a side table
filled by the pass: the update writes a second version of each row (``terms`` is in a GIN
index, so it is never HOT) and new entries in each of ``items``' indexes, about 30 µs of
server time per item on the LoCoMo turns, yet append and pass together cost no more CPU
than an append that indexed its own rows (one log row and one fold for the whole backlog
pay for it), and the append itself costs what an unindexed one does. A side table
measured about 12 µs less server time per item to store, but would change every path
that writes, copies, deletes or reads terms (bulk writes and restores ``COPY`` them with
the rows); see docs/benchmarks.md, 2026-12-04.

It may touch PostgreSQL through ``_core``, the search and ``_tsvector`` parts beside it,
the search port, JSON decoding (``ownstate._jsontext``) and the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..._jsontext import decode_json
from ...model import ItemHit, build_item
from ..ports import search as rules
from ..ports.search import item_text, terms
from ._arrays import BinaryInts, BinaryVectors
from ._core import Cursor, PostgresCore
from ._tsvector import items_terms_binary
from .search import ADD_COUNTS, logged_counts, ranked, scope_prefix, term_counts_sql

__all__ = ["PENDING_LIMIT", "QUEUE", "QUEUED_SPAN", "SearchInPostgres", "index_queued"]

#: About how many item ids may wait for indexing in a tenant before an append indexes
#: them itself (their span, from the lowest queued to the highest, is what is compared).
PENDING_LIMIT = 10_000

#: The ``WITH`` entry that queues the items of the CTE ``{added}`` (``id``, ``terms_len``)
#: left unindexed, when ``{indexed}`` holds: the range of their ids.
QUEUE = (
    "queued AS (INSERT INTO item_index_queue AS q (tenant, first, last) "
    "SELECT %(tenant)s, min(a.id), max(a.id) FROM {added} a WHERE a.terms_len IS NULL "
    "AND {indexed} HAVING count(*) > 0 "
    "ON CONFLICT (tenant, first) DO UPDATE SET last = greatest(q.last, excluded.last) "
    "RETURNING 1)"
)

#: The span of the ids a tenant has queued (NULL when none are): a bound on their number.
QUEUED_SPAN = (
    "(SELECT last FROM item_index_queue WHERE tenant = %(tenant)s ORDER BY first DESC "
    "LIMIT 1) - (SELECT first FROM item_index_queue WHERE tenant = %(tenant)s "
    "ORDER BY first LIMIT 1) + 1"
)

# the tenant's queued ranges deleted (a second indexer waits on their locks, then finds
# them gone), and the items they hold still unindexed, of stores that index their items:
# each id of a range looked up by primary key, whatever the statistics say (a plan that
# scans the tenant's items for each range would read them all)
_TAKE = (
    "WITH q AS (DELETE FROM item_index_queue WHERE tenant = %(tenant)s "
    "RETURNING first, last) "
    "SELECT i.id, i.data::text FROM q CROSS JOIN LATERAL generate_series(q.first, q.last) "
    "AS g (id) CROSS JOIN LATERAL (SELECT * FROM items i WHERE i.id = g.id OFFSET 0) AS i "
    "JOIN sessions s ON s.sid = i.sid "
    "JOIN session_stores t ON t.tenant = s.tenant AND t.name = s.store "
    "WHERE i.tenant = %(tenant)s AND i.terms_len IS NULL AND t.index_items"
)

# the terms stored, in the rows still unindexed (a row deleted meanwhile is not updated);
# the rows found by primary key
_STORE = (
    "UPDATE items i SET terms = v.terms, terms_len = v.len FROM unnest(%(ids)s::bigint[], "
    "%(terms)b::tsvector[], %(lens)b::int[]) AS v (id, terms, len) "
    "WHERE i.id = ANY(%(ids)s::bigint[]) AND i.id = v.id AND i.terms_len IS NULL "
    "RETURNING i.id"
)


async def index_queued(cur: Cursor, tenant: str) -> int:
    """Index the items ``tenant`` has queued, in the caller's write transaction (its
    counts last); the number indexed."""
    await cur.execute(_TAKE, {"tenant": tenant})
    rows = {int(r[0]): r[1] for r in await cur.fetchall()}  # ranges may overlap
    if not rows:
        return 0
    prefix = scope_prefix(tenant)
    ids = list(rows)
    found = [terms(item_text(decode_json(data))) for data in rows.values()]
    counts: Counter[str] = Counter()
    vectors, lens = items_terms_binary(prefix, found, counts)
    await cur.execute(_STORE, {"ids": ids, "terms": BinaryVectors(vectors),
                               "lens": BinaryInts(lens)})
    stored = {int(r[0]) for r in await cur.fetchall()}
    if len(stored) < len(ids):  # some were deleted meanwhile: count only those stored
        found = [f for i, f in zip(ids, found, strict=True) if i in stored]
        counts.clear()
        items_terms_binary(prefix, found, counts)
    if not found:
        return 0
    await cur.execute(ADD_COUNTS, {
        "tenant": tenant, "kind": "item", "scope": "", "docs": len(found),
        "length": sum(map(len, found)), **logged_counts(prefix, counts)}, last=True)
    return len(found)


async def _queued(cur: Cursor, tenant: str) -> bool:
    await cur.execute("SELECT EXISTS (SELECT FROM item_index_queue WHERE tenant = %s)",
                      (tenant,))
    row = await cur.fetchone()
    return bool(row and row[0])


_ITEM_COLUMNS = ("f.item_id, f.seq, f.create_time, f.data::text, f.format, f.role, f.type, "
                 "f.tool_name, f.model, f.in_tokens, f.out_tokens")


class SearchInPostgres(PostgresCore):
    """``search_items`` over items (facts: ``FactsInPostgres.search``)."""

    async def index_queued_items(self, tenant: str) -> int:
        """Index what ``tenant`` has queued, if anything is: what a search does first."""
        if not await self._read(tenant, lambda cur: _queued(cur, tenant)):
            return 0
        return await self._write(tenant, lambda cur: index_queued(cur, tenant))

    async def search_items(
        self, tenant: str, query: rules.TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        await self.index_queued_items(tenant)
        where = (
            "f.tenant = %(tenant)s AND s.tenant = %(tenant)s "
            + ("" if stores is None else "AND s.store = ANY(%(stores)s) ")
            + "AND (%(actor)s::text IS NULL OR s.actor_id = %(actor)s) "
            "AND (%(session)s::text IS NULL OR s.session_id = %(session)s)"
        )
        # from the ids, one row at a time by primary key (whatever the statistics say):
        # what scoring needs (the tie key, the length, the counts), not the items, which
        # are read for the hits alone
        sql = (f"SELECT f.id, s.store, s.session_id, f.seq, {term_counts_sql('f')} "
               "FROM unnest(%(ids)s::bigint[]) AS j (id) "
               "CROSS JOIN LATERAL (SELECT * FROM items f WHERE f.id = j.id OFFSET 0) AS f "
               "CROSS JOIN LATERAL (SELECT * FROM sessions s WHERE s.sid = f.sid OFFSET 0) AS s "
               f"WHERE {where}")
        items = (f"SELECT f.id, {_ITEM_COLUMNS}, s.actor_id FROM items f "
                 "JOIN sessions s ON s.sid = f.sid WHERE f.id = ANY(%(ids)s) "
                 "AND f.tenant = %(tenant)s")
        narrow = ("SELECT f.id FROM items f JOIN sessions s ON s.sid = f.sid "
                  f"WHERE {where} AND f.terms @@ %(any)s::tsquery")
        params: dict[str, Any] = {
            "tenant": tenant, "scope": "", "actor": actor_id, "session": session_id,
            "stores": list(stores) if stores is not None else None}

        async def run(cur: Cursor) -> list[ItemHit]:
            async def fetch(ids: list[int]) -> list[tuple[int, Any, Any, int, Any]]:
                await cur.execute(sql, {**params, "ids": ids}, binary=True)
                return [(r[0], r, (r[1], r[2], r[3]), r[4], r[5])
                        for r in await cur.fetchall()]

            hits = await ranked(cur, "items", "id", "item", scope_prefix(tenant), params,
                                query, limit, fetch, narrow if session_id is not None else None)
            if not hits:
                return []
            await cur.execute(items, {"ids": [h[0] for h, _ in hits], "tenant": tenant},
                              binary=True)
            rows = {r[0]: r for r in await cur.fetchall()}
            # data as text, decoded for the hits only; a hit deleted since it was scored
            # is left out
            return [ItemHit(h[1], r[12], build_item(
                        r[1], h[2], r[2], r[3], decode_json(r[4]), r[5], r[6], r[7], r[8],
                        r[9], r[10], r[11]), value)
                    for h, value in hits if (r := rows.get(h[0])) is not None]

        return await self._read(tenant, run)
