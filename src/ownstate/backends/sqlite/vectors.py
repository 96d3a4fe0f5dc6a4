"""Fact and item vectors in SQLite: ``fact_vectors`` and ``item_vectors``, one row beside
each fact or item that has a vector (an item's: its ``id``, tenant and session store).

A row holds the fact's ``fid`` (its key, and a foreign key that deletes the vector with
the fact), the tenant and memory store it belongs to, the model that made it and the
vector as float32 bytes, which is the layout sqlite-vec reads. A search scans the
store's vectors of the query's model with ``vec_distance_cosine`` (sqlite-vec's, in C,
or its Python stand-in; see ``_core.py``) and joins the facts it may return; the index
``fact_vectors_by_store`` confines the scan to one store. A write adds a fact's vector
inside its own transaction (``_fact_vectors.py``).

It may touch the SQLite connections of ``_core``, the fact and vector-row parts beside it,
the shared SQL (``backends._sql``), the vector port, the embeddings, the time format
(``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from ..._ids import format_time
from ...embeddings import Embedding
from ...errors import StoreNotFound
from ...model import Fact, Item, ItemHit
from .._sql import F_FACT_COLUMNS
from ..ports.vectors import VectorSpace
from ._core import ITEM_COLUMNS, SqliteCore, to_items, write
from ._vector_rows import admit_items, store_fact_vector
from ._vector_rows import space as _space
from .facts import FactsInSqlite, _fact

__all__ = ["VectorsInSqlite"]

_ITEMS = ", ".join(f"i.{c.strip()}" for c in ITEM_COLUMNS.split(","))


class VectorsInSqlite(SqliteCore):
    async def fact_vector_space(self, tenant: str, store: str) -> VectorSpace | None:
        def run(conn: sqlite3.Connection) -> VectorSpace | None:
            FactsInSqlite._require_memory_store(conn, tenant, store)
            return _space(conn, tenant, store)

        return await self._run(run)

    async def nearest_facts(self, tenant: str, store: str, query: Embedding,
                            subject: str | None, limit: int,
                            as_of: datetime | None) -> list[tuple[Fact, float]]:
        believed = "f.superseded_at IS NULL"
        times: tuple[str, ...] = ()
        if as_of is not None:
            stamp = format_time(as_of)
            believed = "f.valid_from <= ? AND (f.superseded_at IS NULL OR f.valid_to > ?)"
            times = (stamp, stamp)

        def run(conn: sqlite3.Connection) -> list[tuple[Fact, float]]:
            FactsInSqlite._require_memory_store(conn, tenant, store)
            rows = conn.execute(
                f"SELECT {F_FACT_COLUMNS}, 1.0 - vec_distance_cosine(v.vector, ?) AS similarity "
                "FROM fact_vectors v JOIN facts f ON f.fid = v.fid "
                "WHERE v.tenant = ? AND v.memory_store = ? AND v.model = ? "
                "AND length(v.vector) = ? AND (? IS NULL OR f.subject = ?) AND "
                f"{believed} ORDER BY similarity DESC, f.fid DESC LIMIT ?",
                (query.data, tenant, store, query.model, len(query.data), subject, subject,
                 *times, limit)).fetchall()
            return [(_fact(row), float(row[-1])) for row in rows]

        return await self._run(run)

    async def nearest_items(self, tenant: str, query: Embedding, *,
                            stores: Sequence[str] | None, actor_id: str | None,
                            session_id: str | None, limit: int) -> list[ItemHit]:
        chosen = "" if stores is None else (
            f"AND s.store IN ({', '.join('?' for _ in stores)}) ")

        def run(conn: sqlite3.Connection) -> list[ItemHit]:
            rows = conn.execute(
                f"SELECT {_ITEMS}, s.store, s.session_id, s.actor_id, "
                "1.0 - vec_distance_cosine(v.vector, ?) AS similarity "
                "FROM item_vectors v JOIN items i ON i.id = v.id JOIN sessions s ON s.sid = i.sid "
                "WHERE v.tenant = ? AND v.model = ? AND length(v.vector) = ? " + chosen
                + "AND (? IS NULL OR s.actor_id = ?) AND (? IS NULL OR s.session_id = ?) "
                "ORDER BY similarity DESC, s.store, s.session_id, i.seq LIMIT ?",
                (query.data, tenant, query.model, len(query.data), *(stores or ()), actor_id,
                 actor_id, session_id, session_id, limit)).fetchall()
            return [ItemHit(r[11], r[13], to_items([r], r[12])[0], float(r[14])) for r in rows]

        return await self._run(run)

    async def facts_to_embed(self, tenant: str, store: str, model: str, after: str | None,
                             limit: int) -> list[Fact]:
        def run(conn: sqlite3.Connection) -> list[Fact]:
            FactsInSqlite._require_memory_store(conn, tenant, store)
            rows = conn.execute(
                f"SELECT {F_FACT_COLUMNS} FROM facts f LEFT JOIN fact_vectors v ON v.fid = f.fid "
                "WHERE f.tenant = ? AND f.memory_store = ? AND f.superseded_at IS NULL "
                "AND (v.fid IS NULL OR v.model != ?) AND f.fact_id > ? "
                "ORDER BY f.fact_id LIMIT ?",
                (tenant, store, model, after or "", limit)).fetchall()
            return [_fact(row) for row in rows]

        return await self._run(run)

    async def put_fact_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, Embedding]],
                               replace: bool) -> int:
        def run(conn: sqlite3.Connection) -> int:
            stored = 0
            with write(conn):
                FactsInSqlite._require_memory_store(conn, tenant, store)
                if replace:
                    conn.execute("DELETE FROM fact_vectors WHERE tenant = ? AND memory_store = ?",
                                 (tenant, store))
                for fact_id, embedding in vectors:
                    row = conn.execute(
                        "SELECT fid FROM facts WHERE tenant = ? AND fact_id = ? "
                        "AND memory_store = ?", (tenant, fact_id, store)).fetchone()
                    if row is not None:
                        store_fact_vector(conn, tenant, store, int(row[0]), embedding)
                        stored += 1
            return stored

        return await self._run(run)

    async def items_to_embed(self, tenant: str, store: str, model: str,
                             after: tuple[str, int] | None, limit: int) -> list[Item]:
        last_sid, last_seq = after if after is not None else ("", 0)

        def run(conn: sqlite3.Connection) -> list[Item]:
            if not _indexes_items(conn, tenant, store):
                return []
            rows = conn.execute(
                f"SELECT {_ITEMS}, s.session_id FROM sessions s JOIN items i ON i.sid = s.sid "
                "LEFT JOIN item_vectors v ON v.id = i.id "
                "WHERE s.tenant = ? AND s.store = ? AND (v.id IS NULL OR v.model != ?) "
                "AND (s.session_id > ? OR (s.session_id = ? AND i.seq > ?)) "
                "ORDER BY s.session_id, i.seq LIMIT ?",
                (tenant, store, model, last_sid, last_sid, last_seq, limit)).fetchall()
            return [to_items([r], r[11])[0] for r in rows]

        return await self._run(run)

    async def put_item_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, int, Embedding]],
                               replace: bool) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                if replace:
                    conn.execute("DELETE FROM item_vectors WHERE tenant = ? AND store = ?",
                                 (tenant, store))
                if not _indexes_items(conn, tenant, store) or not vectors:
                    return 0
                admit_items(conn, tenant, store, [e for _, _, e in vectors])
                stored = 0
                for session_id, seq, e in vectors:
                    stored += conn.execute(
                        "INSERT OR REPLACE INTO item_vectors (id, tenant, store, model, vector) "
                        "SELECT i.id, s.tenant, s.store, ?, ? FROM sessions s "
                        "JOIN items i ON i.sid = s.sid WHERE s.tenant = ? AND s.store = ? "
                        "AND s.session_id = ? AND i.seq = ?",
                        (e.model, e.data, tenant, store, session_id, seq)).rowcount
            return stored

        return await self._run_write(run)


def _indexes_items(conn: sqlite3.Connection, tenant: str, store: str) -> bool:
    """Whether the session store indexes its items. Raises StoreNotFound."""
    row = conn.execute("SELECT index_items FROM session_stores WHERE tenant = ? AND name = ?",
                       (tenant, store)).fetchone()
    if row is None:
        raise StoreNotFound(store=store)
    return bool(row[0])
