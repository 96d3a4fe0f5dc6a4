"""Writing facts' vectors inside the write's transaction, refusing another model's.

Shared by ``facts.py`` (facts remembered with their vectors) and ``vectors.py`` (a
reindex); the table is described in ``vectors.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...embeddings import Embedding
from ...errors import EmbedderMismatch
from ..ports.vectors import VectorSpace
from ._core import Cursor

__all__ = ["space", "store_fact_vectors"]


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
    found = await space(cur, tenant, store)
    for _, embedding in vectors:
        mine = (embedding.model, embedding.dimension)
        if found is None:
            found = mine
        elif found != mine:
            raise EmbedderMismatch(store=store, model=mine[0], dimension=mine[1],
                                   stored_model=found[0], stored_dimension=found[1])
    await cur.execute(
        "INSERT INTO fact_vectors (fid, tenant, memory_store, model, vector) "
        "SELECT f.fid, f.tenant, f.memory_store, v.model, v.vector::real[] "
        "FROM unnest(%s::text[], %s::text[], %s::text[]) AS v(fact_id, model, vector) "
        "JOIN facts f ON f.tenant = %s AND f.fact_id = v.fact_id AND f.memory_store = %s "
        "ON CONFLICT (fid) DO UPDATE SET model = excluded.model, vector = excluded.vector",
        ([fact_id for fact_id, _ in vectors], [e.model for _, e in vectors],
         ["{" + ",".join(repr(x) for x in e.unpack()) + "}" for _, e in vectors],
         tenant, store))
    return int(cur.rowcount)
