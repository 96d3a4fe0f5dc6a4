"""Writing fact and item vectors inside the write's transaction, refusing another model's.

Shared by ``facts.py`` (facts remembered with their vectors), ``sessions.py`` (items
appended with theirs) and ``vectors.py`` (a reindex); the tables are described in
``vectors.py``.

It may touch PostgreSQL through ``_core``, the session and vector ports and the embeddings.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...embeddings import Embedding
from ...embeddings._protocol import one_model
from ..ports.sessions import NewItem
from ..ports.vectors import VectorSpace
from ._core import Cursor

__all__ = ["admit_items", "put_item_vectors", "space", "store_fact_vectors", "store_item_vectors"]


async def space(cur: Cursor, tenant: str, store: str) -> VectorSpace | None:
    await cur.execute(
        "SELECT model, array_length(vector, 1) FROM fact_vectors "
        "WHERE tenant = %s AND memory_store = %s LIMIT 1", (tenant, store))
    row = await cur.fetchone()
    return (str(row[0]), int(row[1])) if row is not None else None


async def store_fact_vectors(cur: Cursor, tenant: str, store: str,
                             vectors: Sequence[tuple[str, Embedding]]) -> int:
    """Write each ``(fact_id, vector)`` in the caller's transaction (replacing a fact's
    earlier vector; skipping facts that do not exist); returns how many were written.
    Raises EmbedderMismatch."""
    if not vectors:
        return 0
    one_model(store, await space(cur, tenant, store), [e for _, e in vectors])
    await cur.execute(
        "INSERT INTO fact_vectors (fid, tenant, memory_store, model, vector) "
        "SELECT f.fid, f.tenant, f.memory_store, v.model, v.vector::real[] "
        "FROM unnest(%s::text[], %s::text[], %s::text[]) AS v(fact_id, model, vector) "
        "JOIN facts f ON f.tenant = %s AND f.fact_id = v.fact_id AND f.memory_store = %s "
        "ON CONFLICT (fid) DO UPDATE SET model = excluded.model, vector = excluded.vector",
        ([fact_id for fact_id, _ in vectors], [e.model for _, e in vectors],
         [_literal(e) for _, e in vectors],
         tenant, store))
    return int(cur.rowcount)


def _literal(embedding: Embedding) -> str:
    return "{" + ",".join(repr(x) for x in embedding.unpack()) + "}"


async def admit_items(cur: Cursor, tenant: str, store: str,
                      embeddings: Sequence[Embedding]) -> None:
    """Refuse item vectors of another model or dimension than the session store's (or
    than each other's). Raises EmbedderMismatch."""
    await cur.execute(
        "SELECT model, array_length(vector, 1) FROM item_vectors "
        "WHERE tenant = %s AND store = %s LIMIT 1", (tenant, store))
    row = await cur.fetchone()
    one_model(store, (str(row[0]), int(row[1])) if row is not None else None, embeddings)


async def put_item_vectors(cur: Cursor, tenant: str, store: str,
                           vectors: Sequence[tuple[str, int, Embedding]]) -> int:
    """Write each ``(session_id, seq, vector)`` of the session store in the caller's
    transaction (replacing an item's earlier vector; skipping items that do not exist);
    returns how many were written. Raises EmbedderMismatch."""
    if not vectors:
        return 0
    await admit_items(cur, tenant, store, [e for _, _, e in vectors])
    await cur.execute(
        "INSERT INTO item_vectors (id, tenant, store, model, vector) "
        "SELECT i.id, i.tenant, s.store, v.model, v.vector::real[] "
        "FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[]) "
        "AS v(session_id, seq, model, vector) "
        "JOIN sessions s ON s.tenant = %s AND s.store = %s AND s.session_id = v.session_id "
        "JOIN items i ON i.sid = s.sid AND i.seq = v.seq "
        "ON CONFLICT (id) DO UPDATE SET model = excluded.model, vector = excluded.vector",
        ([sid for sid, _, _ in vectors], [seq for _, seq, _ in vectors],
         [e.model for _, _, e in vectors], [_literal(e) for _, _, e in vectors],
         tenant, store))
    return int(cur.rowcount)


async def store_item_vectors(cur: Cursor, tenant: str, store: str,
                             items: Sequence[NewItem]) -> None:
    """Write the vectors of ``items``, just appended to a session of ``store``, in the
    caller's transaction, unless the store does not index items. Raises
    EmbedderMismatch."""
    rows = [(it.item_id, it.embedding) for it in items if it.embedding is not None]
    if not rows:
        return
    await admit_items(cur, tenant, store, [e for _, e in rows])
    await cur.execute(
        "INSERT INTO item_vectors (id, tenant, store, model, vector) "
        "SELECT i.id, i.tenant, %s, v.model, v.vector::real[] "
        "FROM unnest(%s::text[], %s::text[], %s::text[]) AS v(item_id, model, vector) "
        "JOIN items i ON i.tenant = %s AND i.item_id = v.item_id "
        "WHERE (SELECT index_items FROM session_stores WHERE tenant = %s AND name = %s)",
        (store, [i for i, _ in rows], [e.model for _, e in rows],
         [_literal(e) for _, e in rows], tenant, tenant, store))
