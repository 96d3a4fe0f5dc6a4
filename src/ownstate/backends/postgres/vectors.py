"""Fact and item vectors in PostgreSQL: ``fact_vectors`` and ``item_vectors``, one row
beside each fact or item that has one (an item's: its ``id``, tenant and session store).

A row holds the fact's ``fid`` (its key, and a foreign key that deletes the vector with
the fact), the tenant and memory store, the model that made it and the vector as
``real[]``. The server has no vector extension to count on (pgvector is not part of
PostgreSQL), so a search scans the store's vectors of the query's model and computes each
dot product in SQL (``unnest`` of the two arrays side by side, summed); the index
``fact_vectors_by_store`` confines the scan to one store, and row-level security confines
it to the tenant. A write adds its facts' vectors inside its own transaction, after the
store's vectors' model has been checked (``_fact_vectors.py``).

It may touch PostgreSQL through ``_core``, the fact and vector-row parts beside it, the
shared SQL (``backends._sql``), the vector port, the embeddings, the model and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ... import errors
from ...embeddings import Embedding
from ...model import Fact, Item, ItemHit, build_item
from .._sql import F_FACT_COLUMNS
from ..ports.vectors import VectorSpace
from ._core import Cursor, PostgresCore
from ._vector_rows import put_item_vectors as _put_item_vectors
from ._vector_rows import space as _space
from ._vector_rows import store_fact_vectors
from .facts import FactsInPostgres, _fact

__all__ = ["VectorsInPostgres"]

_ITEMS = ("i.item_id, i.seq, i.create_time, i.data, i.format, i.role, i.type, i.tool_name, "
          "i.model, i.in_tokens, i.out_tokens")


class VectorsInPostgres(PostgresCore):
    async def fact_vector_space(self, tenant: str, store: str) -> VectorSpace | None:
        async def run(cur: Cursor) -> VectorSpace | None:
            await FactsInPostgres._require_memory_store(cur, tenant, store)
            return await _space(cur, tenant, store)

        return await self._read(tenant, run)

    async def nearest_facts(self, tenant: str, store: str, query: Embedding,
                            subject: str | None, limit: int,
                            as_of: datetime | None) -> list[tuple[Fact, float]]:
        if as_of is None:
            believed: tuple[str, tuple[datetime, ...]] = ("f.superseded_at IS NULL", ())
        else:
            believed = ("f.valid_from <= %s AND (f.superseded_at IS NULL OR f.valid_to > %s)",
                        (as_of, as_of))

        async def run(cur: Cursor) -> list[tuple[Fact, float]]:
            await FactsInPostgres._require_memory_store(cur, tenant, store)
            await cur.execute(
                f"SELECT {F_FACT_COLUMNS}, (SELECT sum(a * b) FROM unnest(v.vector::float8[], "
                "%s::float8[]) AS t(a, b)) AS similarity "
                "FROM fact_vectors v JOIN facts f ON f.fid = v.fid "
                "WHERE v.tenant = %s AND v.memory_store = %s AND v.model = %s "
                "AND array_length(v.vector, 1) = %s "
                "AND (%s::text IS NULL OR f.subject = %s) AND "
                f"{believed[0]} ORDER BY similarity DESC, f.fid DESC LIMIT %s",
                (list(query.unpack()), tenant, store, query.model, query.dimension, subject,
                 subject, *believed[1], limit))
            return [(_fact(row), float(row[-1])) for row in await cur.fetchall()]

        return await self._read(tenant, run)

    async def nearest_items(self, tenant: str, query: Embedding, *,
                            stores: Sequence[str] | None, actor_id: str | None,
                            session_id: str | None, limit: int) -> list[ItemHit]:
        async def run(cur: Cursor) -> list[ItemHit]:
            await cur.execute(
                f"SELECT {_ITEMS}, s.store, s.session_id, s.actor_id, "
                "(SELECT sum(a * b) FROM unnest(v.vector::float8[], %s::float8[]) AS t(a, b)) "
                "AS similarity FROM item_vectors v JOIN items i ON i.id = v.id "
                "JOIN sessions s ON s.sid = i.sid "
                "WHERE v.tenant = %s AND v.model = %s AND array_length(v.vector, 1) = %s "
                "AND (%s::text[] IS NULL OR s.store = ANY(%s::text[])) "
                "AND (%s::text IS NULL OR s.actor_id = %s) "
                "AND (%s::text IS NULL OR s.session_id = %s) "
                "ORDER BY similarity DESC, s.store, s.session_id, i.seq LIMIT %s",
                (list(query.unpack()), tenant, query.model, query.dimension,
                 list(stores) if stores is not None else None,
                 list(stores) if stores is not None else None, actor_id, actor_id,
                 session_id, session_id, limit))
            return [ItemHit(r[11], r[13], build_item(r[0], r[12], r[1], r[2], r[3], r[4], r[5],
                                                     r[6], r[7], r[8], r[9], r[10]),
                            float(r[14])) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def facts_to_embed(self, tenant: str, store: str, model: str, after: str | None,
                             limit: int) -> list[Fact]:
        async def run(cur: Cursor) -> list[Fact]:
            await FactsInPostgres._require_memory_store(cur, tenant, store)
            await cur.execute(
                f"SELECT {F_FACT_COLUMNS} FROM facts f LEFT JOIN fact_vectors v ON v.fid = f.fid "
                "WHERE f.tenant = %s AND f.memory_store = %s AND f.superseded_at IS NULL "
                "AND (v.fid IS NULL OR v.model <> %s) AND f.fact_id > %s "
                "ORDER BY f.fact_id LIMIT %s", (tenant, store, model, after or "", limit))
            return [_fact(row) for row in await cur.fetchall()]

        return await self._read(tenant, run)

    async def put_fact_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, Embedding]],
                               replace: bool) -> int:
        async def run(cur: Cursor) -> int:
            await FactsInPostgres._require_memory_store(cur, tenant, store, "FOR KEY SHARE")
            if replace:
                await cur.execute(
                    "DELETE FROM fact_vectors WHERE tenant = %s AND memory_store = %s",
                    (tenant, store))
            return await store_fact_vectors(cur, tenant, store, vectors)

        return await self._write(tenant, run)

    async def items_to_embed(self, tenant: str, store: str, model: str,
                             after: tuple[str, int] | None, limit: int) -> list[Item]:
        last_sid, last_seq = after if after is not None else ("", 0)

        async def run(cur: Cursor) -> list[Item]:
            if not await _indexes_items(cur, tenant, store):
                return []
            await cur.execute(
                f"SELECT {_ITEMS}, s.session_id FROM sessions s JOIN items i ON i.sid = s.sid "
                "LEFT JOIN item_vectors v ON v.id = i.id "
                "WHERE s.tenant = %s AND s.store = %s AND (v.id IS NULL OR v.model <> %s) "
                "AND (s.session_id, i.seq) > (%s, %s) "
                "ORDER BY s.session_id, i.seq LIMIT %s",
                (tenant, store, model, last_sid, last_seq, limit))
            return [build_item(r[0], r[11], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8],
                               r[9], r[10]) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def put_item_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, int, Embedding]],
                               replace: bool) -> int:
        async def run(cur: Cursor) -> int:
            indexed = await _indexes_items(cur, tenant, store, "FOR KEY SHARE")
            if replace:
                await cur.execute("DELETE FROM item_vectors WHERE tenant = %s AND store = %s",
                                  (tenant, store))
            return await _put_item_vectors(cur, tenant, store, vectors) if indexed else 0

        return await self._write(tenant, run)


async def _indexes_items(cur: Cursor, tenant: str, store: str, lock: str = "") -> bool:
    """Whether the session store indexes its items. Raises StoreNotFound."""
    await cur.execute("SELECT index_items FROM session_stores WHERE tenant = %s AND name = %s "
                      + lock, (tenant, store))
    row = await cur.fetchone()
    if row is None:
        raise errors.StoreNotFound(store=store)
    return bool(row[0])
