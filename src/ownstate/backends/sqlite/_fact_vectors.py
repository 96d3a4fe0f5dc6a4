"""Writing a fact's vector inside the write's transaction, refusing another model's.

Shared by ``facts.py`` (a fact remembered with its vector) and ``vectors.py`` (a reindex);
the table is described in ``vectors.py``.
"""

from __future__ import annotations

import sqlite3

from ...embeddings import Embedding
from ...errors import EmbedderMismatch
from ..ports.vectors import VectorSpace

__all__ = ["admit", "space", "store_fact_vector"]


def space(conn: sqlite3.Connection, tenant: str, store: str) -> VectorSpace | None:
    row = conn.execute(
        "SELECT model, length(vector) / 4 FROM fact_vectors "
        "WHERE tenant = ? AND memory_store = ? LIMIT 1", (tenant, store)).fetchone()
    return (str(row[0]), int(row[1])) if row is not None else None


def admit(conn: sqlite3.Connection, tenant: str, store: str, embedding: Embedding) -> None:
    """Refuse a vector of another model or dimension than the store's vectors."""
    found = space(conn, tenant, store)
    if found is not None and found != (embedding.model, embedding.dimension):
        raise EmbedderMismatch(store=store, model=embedding.model,
                               dimension=embedding.dimension, stored_model=found[0],
                               stored_dimension=found[1])


def store_fact_vector(conn: sqlite3.Connection, tenant: str, store: str, fid: int,
                      embedding: Embedding) -> None:
    """Write the vector of the fact ``fid`` in the caller's transaction. Raises
    EmbedderMismatch."""
    admit(conn, tenant, store, embedding)
    conn.execute(
        "INSERT OR REPLACE INTO fact_vectors (fid, tenant, memory_store, model, vector) "
        "VALUES (?, ?, ?, ?, ?)", (fid, tenant, store, embedding.model, embedding.data))
