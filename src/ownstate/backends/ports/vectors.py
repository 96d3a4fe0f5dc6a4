"""The vectors port: embeddings stored beside facts and items, and the nearest to a query.

Optional: a backend that implements it declares ``Capability.VECTORS``. A fact's vector
is written by :meth:`~ownstate.backends.ports.facts.FactPort.remember` in the fact's own
transaction when the :class:`~ownstate.backends.ports.facts.NewFact` carries one, and
goes with the fact (a deleted store or an erased subject leaves no vector behind). Every
vector of a store comes from one model: a write or a reindex that brings another model's
(or another dimension's) is refused with :class:`~ownstate.errors.EmbedderMismatch`
inside that transaction, so nothing of it is stored. An item's vector is written the same way by
:meth:`~ownstate.backends.ports.sessions.SessionPort.append_items` (one model per session
store; none for a store created with ``index_items=False``) and goes with the item.
Items stored without one (appended before the client had an embedder, or restored from an
archive, which carries no vectors) get theirs from :meth:`VectorPort.items_to_embed` and
:meth:`VectorPort.put_item_vectors`, a session store's reindex; a store that does not
index items takes none that way either.

Vectors are unit length (see :class:`~ownstate.embeddings.Embedding`), so similarity is
the dot product; ties order newest fact first. Ranking is the backend's own: sqlite-vec's
``vec_distance_cosine`` (a Python function where that extension is not installed),
PostgreSQL arrays summed in SQL, a scan in Python on Redis and in memory.

It may touch the search port, the embeddings, the model and errors, and no datastore: each
backend implements it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ...embeddings import Embedding
from ...errors import InvalidInput
from ...model import Fact, FactHit, Item, ItemHit
from .search import TextQuery

__all__ = ["VectorPort", "VectorSpace"]

#: ``(model, dimension)`` of the vectors a store holds
VectorSpace = tuple[str, int]


class VectorPort:
    """Storage and ranking of fact vectors. The defaults refuse: a backend without
    ``Capability.VECTORS`` stores none."""

    def _no_vectors(self) -> InvalidInput:
        return InvalidInput(f"{type(self).__name__} stores no vectors; connect without "
                            "embedder=", field="embedder")

    async def fact_vector_space(self, tenant: str, store: str) -> VectorSpace | None:
        """The model and dimension of the store's fact vectors, None when it has none.
        Raises StoreNotFound."""
        raise self._no_vectors()

    async def nearest_facts(self, tenant: str, store: str, query: Embedding,
                            subject: str | None, limit: int,
                            as_of: datetime | None) -> list[tuple[Fact, float]]:
        """The facts with vectors of ``query.model`` most similar to ``query``, most
        similar first, with their similarity; at most ``limit``. Current facts, or with
        ``as_of`` those believed current at that record time. Raises StoreNotFound."""
        raise self._no_vectors()

    async def nearest_items(self, tenant: str, query: Embedding, *,
                            stores: Sequence[str] | None, actor_id: str | None,
                            session_id: str | None, limit: int) -> list[ItemHit]:
        """The tenant's items with vectors of ``query.model`` most similar to ``query``,
        filtered as :meth:`~ownstate.backends.ports.sessions.SessionPort.search_items`
        filters, most similar first (the score), then by store, session id and seq; at
        most ``limit``."""
        raise self._no_vectors()

    async def ranked_facts(self, tenant: str, store: str, query: TextQuery,
                           subject: str | None, valid_at: datetime | None, limit: int,
                           mode: str | None) -> list[FactHit]:
        """For a backend with ``Capability.SERVER_RANKED``: the whole of
        ``memory.search``, ranked by the server in ``mode`` (None: the server's default).
        Raises InvalidInput (the server has no embedder for that mode), StoreNotFound."""
        raise InvalidInput(f"{type(self).__name__} does not rank searches itself",
                           field="mode")

    async def ranked_items(self, tenant: str, query: TextQuery, *,
                           stores: Sequence[str] | None, actor_id: str | None,
                           session_id: str | None, limit: int,
                           mode: str | None) -> list[ItemHit]:
        """For a backend with ``Capability.SERVER_RANKED``: the whole of
        ``search_items``, ranked by the server in ``mode`` (None: the server's default)."""
        raise InvalidInput(f"{type(self).__name__} does not rank searches itself",
                           field="mode")

    async def facts_to_embed(self, tenant: str, store: str, model: str, after: str | None,
                             limit: int) -> list[Fact]:
        """Current facts without a vector of ``model``, by fact id, strictly after
        ``after``; at most ``limit``. Raises StoreNotFound."""
        raise self._no_vectors()

    async def put_fact_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, Embedding]],
                               replace: bool) -> int:
        """Store each ``(fact_id, vector)`` (replacing the fact's earlier one), in one
        transaction; with ``replace``, first drop every vector of the store. Facts that
        no longer exist are skipped; returns how many were stored. Raises StoreNotFound,
        EmbedderMismatch."""
        raise self._no_vectors()

    async def items_to_embed(self, tenant: str, store: str, model: str,
                             after: tuple[str, int] | None, limit: int) -> list[Item]:
        """The session store's items without a vector of ``model`` (after a replacing
        ``put_item_vectors``: every item), by session id then seq, strictly after
        ``after`` (``(session_id, seq)``); at most ``limit``. None for a store created with
        ``index_items=False``. Raises StoreNotFound."""
        raise self._no_vectors()

    async def put_item_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, int, Embedding]],
                               replace: bool) -> int:
        """Store each ``(session_id, seq, vector)`` (replacing the item's earlier one), in
        one transaction; with ``replace``, first drop every item vector of the store.
        Items that no longer exist are skipped, and a store created with
        ``index_items=False`` takes none; returns how many were stored. Raises
        StoreNotFound, EmbedderMismatch."""
        raise self._no_vectors()
