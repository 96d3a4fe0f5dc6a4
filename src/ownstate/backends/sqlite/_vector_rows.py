"""Writing fact and item vectors inside the write's transaction, refusing another model's.

Shared by ``facts.py`` (a fact remembered with its vector), ``sessions.py`` (items
appended with theirs) and ``vectors.py`` (a reindex); the tables are described in
``vectors.py``.

It may touch the SQLite connection it is given, the session and vector ports and the
embeddings.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ...embeddings import Embedding
from ...embeddings._protocol import one_model
from ..ports.sessions import NewItem
from ..ports.vectors import VectorSpace

__all__ = ["admit", "admit_items", "space", "store_fact_vector", "store_item_vectors"]


def space(conn: sqlite3.Connection, tenant: str, store: str) -> VectorSpace | None:
    row = conn.execute(
        "SELECT model, length(vector) / 4 FROM fact_vectors "
        "WHERE tenant = ? AND memory_store = ? LIMIT 1", (tenant, store)).fetchone()
    return (str(row[0]), int(row[1])) if row is not None else None


def admit(conn: sqlite3.Connection, tenant: str, store: str, embedding: Embedding) -> None:
    """Refuse a vector of another model or dimension than the store's vectors."""
    one_model(store, space(conn, tenant, store), [embedding])


def store_fact_vector(conn: sqlite3.Connection, tenant: str, store: str, fid: int,
                      embedding: Embedding) -> None:
    """Write the vector of the fact ``fid`` in the caller's transaction. Raises
    EmbedderMismatch."""
    admit(conn, tenant, store, embedding)
    conn.execute(
        "INSERT OR REPLACE INTO fact_vectors (fid, tenant, memory_store, model, vector) "
        "VALUES (?, ?, ?, ?, ?)", (fid, tenant, store, embedding.model, embedding.data))


def admit_items(conn: sqlite3.Connection, tenant: str, store: str,
                embeddings: Sequence[Embedding]) -> None:
    """Refuse item vectors of another model or dimension than the session store's (or
    than each other's)."""
    row = conn.execute(
        "SELECT model, length(vector) / 4 FROM item_vectors WHERE tenant = ? AND store = ? "
        "LIMIT 1", (tenant, store)).fetchone()
    one_model(store, (str(row[0]), int(row[1])) if row is not None else None, embeddings)


def store_item_vectors(conn: sqlite3.Connection, tenant: str, store: str, sid: int,
                       first_seq: int, items: Sequence[NewItem]) -> None:
    """Write the vectors of ``items``, just appended to session ``sid`` from ``first_seq``
    on, in the caller's transaction. Raises EmbedderMismatch."""
    rows = [(seq, it.embedding) for seq, it in enumerate(items, start=first_seq)
            if it.embedding is not None]
    if not rows:
        return
    admit_items(conn, tenant, store, [e for _, e in rows])
    conn.executemany(
        "INSERT INTO item_vectors (id, tenant, store, model, vector) "
        "SELECT id, ?, ?, ?, ? FROM items WHERE sid = ? AND seq = ?",
        [(tenant, store, e.model, e.data, sid, seq) for seq, e in rows])
