"""Fact and item vectors, in memory: each stored fact and item holds its own, and a
search scans them.

The reference for the other backends' vector ports: similarity is the dot product of unit
vectors (:func:`~ownstate.embeddings._protocol.dot`), ties newest first.

It may touch the in-memory data (``_data``), its vector check (``_admit``) and the fact
part, the vector port, the embeddings, the model and errors, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ...embeddings import Embedding
from ...embeddings._protocol import dot
from ...errors import StoreNotFound
from ...model import Fact, Item, ItemHit
from ..ports.vectors import VectorSpace
from ._admit import admit_item_vectors
from ._data import _StoredSession
from .facts import MemoryStoresBase, _admit_vectors, _current, _StoredFact

__all__ = ["VectorsInMemory"]


def _believed(fact: Fact, as_of: datetime | None) -> bool:
    if as_of is None:
        return fact.superseded_at is None
    return fact.recorded_at <= as_of and (
        fact.superseded_at is None or fact.superseded_at > as_of)


class VectorsInMemory(MemoryStoresBase):
    async def fact_vector_space(self, tenant: str, store: str) -> VectorSpace | None:
        with self._data.lock:
            stored = self._memory_store(tenant, store)
            for chain in stored.chains.values():
                for f in chain:
                    if f.embedding is not None:
                        return (f.embedding.model, f.embedding.dimension)
            return None

    async def nearest_facts(self, tenant: str, store: str, query: Embedding,
                            subject: str | None, limit: int,
                            as_of: datetime | None) -> list[tuple[Fact, float]]:
        with self._data.lock:
            stored = self._memory_store(tenant, store)
            scored: list[tuple[float, int, _StoredFact]] = []
            for (s, _), chain in stored.chains.items():
                if subject is not None and s != subject:
                    continue
                for f in chain:
                    e = f.embedding
                    if (e is not None and e.model == query.model
                            and len(e.data) == len(query.data) and _believed(f.record, as_of)):
                        scored.append((dot(e.data, query.data), f.order, f))
            scored.sort(key=lambda t: (-t[0], -t[1]))
            return [(f.to_fact(), score) for score, _, f in scored[:limit]]

    async def nearest_items(self, tenant: str, query: Embedding, *,
                            stores: Sequence[str] | None, actor_id: str | None,
                            session_id: str | None, limit: int) -> list[ItemHit]:
        with self._data.lock:
            chosen = None if stores is None else set(stores)
            scored = []
            for (t, store, sid), stored in sorted(self._data.sessions.items()):
                if t != tenant or (chosen is not None and store not in chosen) or (
                        actor_id is not None and stored.record.actor_id != actor_id) or (
                        session_id is not None and sid != session_id):
                    continue
                for it in stored.items:
                    e = it.embedding
                    if e is not None and e.model == query.model and len(e.data) == len(
                            query.data):
                        scored.append((-dot(e.data, query.data), store, sid, it.seq,
                                       stored, it))
            scored.sort(key=lambda t: t[:4])
            return [ItemHit(store, stored.record.actor_id, it.to_item(sid), -neg)
                    for neg, store, sid, _, stored, it in scored[:limit]]

    async def facts_to_embed(self, tenant: str, store: str, model: str, after: str | None,
                             limit: int) -> list[Fact]:
        with self._data.lock:
            stored = self._memory_store(tenant, store)
            todo = sorted(
                (current for chain in stored.chains.values()
                 if (current := _current(chain)) is not None
                 and (current.embedding is None or current.embedding.model != model)
                 and (after is None or current.record.fact_id > after)),
                key=lambda f: f.record.fact_id)
            return [f.to_fact() for f in todo[:limit]]

    async def put_fact_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, Embedding]],
                               replace: bool) -> int:
        with self._data.lock:
            stored = self._memory_store(tenant, store)
            if replace:
                for chain in stored.chains.values():
                    for f in chain:
                        f.embedding = None
                stored.space = None
            _admit_vectors(stored, store, [e for _, e in vectors])
            count = 0
            for fact_id, embedding in vectors:
                where = stored.by_id.get(fact_id)
                for f in stored.chains.get(where, []) if where else []:
                    if f.record.fact_id == fact_id:
                        f.embedding = embedding
                        count += 1
            return count


    def _item_sessions(self, tenant: str, store: str) -> list[tuple[str, _StoredSession]]:
        """The store's sessions by id, none when it does not index items. Raises
        StoreNotFound."""
        if (tenant, store) not in self._data.stores:
            raise StoreNotFound(store=store)
        if (tenant, store) in self._data.unindexed:
            return []
        return sorted((sid, s) for (t, st, sid), s in self._data.sessions.items()
                      if t == tenant and st == store)

    async def items_to_embed(self, tenant: str, store: str, model: str,
                             after: tuple[str, int] | None, limit: int) -> list[Item]:
        with self._data.lock:
            todo: list[Item] = []
            for sid, session in self._item_sessions(tenant, store):
                if after is not None and sid < after[0]:
                    continue
                for it in session.items:
                    if after is not None and (sid, it.seq) <= after:
                        continue
                    if it.embedding is None or it.embedding.model != model:
                        todo.append(it.to_item(sid))
                        if len(todo) >= limit:
                            return todo
            return todo

    async def put_item_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, int, Embedding]],
                               replace: bool) -> int:
        with self._data.lock:
            sessions = dict(self._item_sessions(tenant, store))
            if replace:
                for session in sessions.values():
                    for it in session.items:
                        it.embedding = None
            if not sessions:
                return 0
            admit_item_vectors(self._data, tenant, store, [e for _, _, e in vectors])
            count = 0
            for sid, seq, embedding in vectors:
                found = sessions.get(sid)
                if found is not None and 1 <= seq <= len(found.items):
                    found.items[seq - 1].embedding = embedding
                    count += 1
            return count
