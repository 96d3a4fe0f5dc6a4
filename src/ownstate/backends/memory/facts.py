"""Memory stores and facts, in memory.

Each memory store keeps, per (subject, key), the list of its facts in record order (the
last one is the current fact when it is not closed), plus an index from fact id to that
list. The rules are written out plainly here; they are the reference the SQLite backend
and the conformance suite are held to.

It may touch the in-memory data (``_data``), the fact and search ports, the embeddings, the
clock (``ownstate._ids``), the model and errors, nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from ... import _ids
from ...embeddings import Embedding
from ...errors import (
    AlreadyExists,
    EmbedderMismatch,
    FactNotFound,
    ItemNotFound,
    StoreNotFound,
)
from ...model import Fact, FactExplanation, FactHit, Item, MemoryStoreRecord
from ..ports.facts import NewFact, covers
from ..ports.search import TextQuery, fact_text, rank, terms
from ._data import MemoryBase

__all__ = ["FactsInMemory"]


@dataclass(slots=True)
class _StoredFact:
    record: Fact  # with ``value`` None: the value lives in value_json
    value_json: str
    terms: tuple[str, ...]
    order: int
    embedding: Embedding | None = None

    def to_fact(self) -> Fact:
        return replace(self.record, value=json.loads(self.value_json))


@dataclass(slots=True)
class _StoreFacts:
    record: MemoryStoreRecord
    chains: dict[tuple[str, str], list[_StoredFact]] = field(default_factory=dict)
    by_id: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the model and dimension of the store's vectors, while it has any
    space: tuple[str, int] | None = None

    def find(self, fact_id: str) -> _StoredFact | None:
        where = self.by_id.get(fact_id)
        if where is None:
            return None
        return next(f for f in self.chains[where] if f.record.fact_id == fact_id)


def _admit_vectors(stored: _StoreFacts, store: str,
                   embeddings: Sequence[Embedding | None]) -> None:
    """Refuse vectors of a model other than the store's (its vectors' model, kept in
    ``stored.space``; a store whose vectors are all gone takes any model again)."""
    fixed = stored.space
    from_store = fixed is not None
    for embedding in embeddings:
        if embedding is None:
            continue
        space = (embedding.model, embedding.dimension)
        if fixed is not None and fixed != space and from_store and not any(
                f.embedding is not None for chain in stored.chains.values() for f in chain):
            fixed = None
        if fixed is None:
            fixed, from_store = space, False
        elif fixed != space:
            raise EmbedderMismatch(store=store, model=space[0], dimension=space[1],
                                   stored_model=fixed[0], stored_dimension=fixed[1])
    stored.space = fixed


def _current(chain: list[_StoredFact]) -> _StoredFact | None:
    if chain and chain[-1].record.superseded_at is None:
        return chain[-1]
    return None


def _record_time(chain: list[_StoredFact], now: datetime) -> datetime:
    """``now``, or the chain's last record or close time if that is later."""
    if not chain:
        return now
    last = chain[-1].record
    return max(now, last.superseded_at or last.recorded_at)


class MemoryStoresBase(MemoryBase):
    """The lookup of a memory store's facts, which the facts and the vectors parts share."""

    def _memory_store(self, tenant: str, name: str) -> _StoreFacts:
        found: _StoreFacts | None = self._data.memory_stores.get((tenant, name))
        if found is None:
            raise StoreNotFound(store=name)
        return found


class FactsInMemory(MemoryStoresBase):
    """Memory stores and facts, kept in ``_data.memory_stores`` by (tenant, name)."""

    def _tenant_stores(self, tenant: str) -> list[_StoreFacts]:
        return [self._data.memory_stores[key] for key in sorted(self._data.memory_stores)
                if key[0] == tenant]

    # memory stores ---------------------------------------------------------------------

    async def create_memory_store(self, tenant: str, name: str, now: datetime,
                                  owner: str | None = None) -> MemoryStoreRecord:
        with self._data.lock:
            if (tenant, name) in self._data.memory_stores:
                raise AlreadyExists(store=name)
            record = MemoryStoreRecord(tenant=tenant, name=name, create_time=now)
            self._start_grants(tenant, "memory_store", name, owner)
            self._data.memory_stores[(tenant, name)] = _StoreFacts(record)
            return record

    async def get_memory_store(self, tenant: str, name: str) -> MemoryStoreRecord:
        with self._data.lock:
            return self._memory_store(tenant, name).record

    async def list_memory_stores(self, tenant: str, limit: int,
                                 after: str | None) -> list[MemoryStoreRecord]:
        with self._data.lock:
            chosen = [s.record for s in self._tenant_stores(tenant)
                      if after is None or s.record.name > after]
            return chosen[:limit]

    async def list_subjects(self, tenant: str, store: str, limit: int,
                            after: str | None) -> list[str]:
        with self._data.lock:
            subjects = {s for s, _ in self._memory_store(tenant, store).chains}
        return sorted(s for s in subjects if after is None or s > after)[:limit]

    async def delete_memory_store(self, tenant: str, name: str) -> int:
        with self._data.lock:
            facts = self._memory_store(tenant, name)
            self._drop_grants(tenant, "memory_store", name)
            del self._data.memory_stores[(tenant, name)]
            return len(facts.by_id)

    # facts -----------------------------------------------------------------------------

    def _find_source(self, tenant: str, source: tuple[str | None, str, str]) -> str:
        """The store of the source item; ItemNotFound unless it exists in the tenant."""
        store, session_id, item_id = source
        for (t, st, sid), stored in self._data.sessions.items():
            if t != tenant or sid != session_id or (store is not None and st != store):
                continue
            if any(it.item_id == item_id for it in stored.items):
                return st
        raise ItemNotFound(session_id=session_id, item_id=item_id)

    async def remember(self, tenant: str, store: str, facts: Sequence[NewFact],
                       now: datetime) -> list[Fact]:
        with self._data.lock:
            stored = self._memory_store(tenant, store)
            sources = [self._find_source(tenant, f.source) if f.source is not None else None
                       for f in facts]
            _admit_vectors(stored, store, [f.embedding for f in facts])
            made: list[Fact] = []
            for new, source_store in zip(facts, sources, strict=True):
                chain = stored.chains.setdefault((new.subject, new.key), [])
                moment = _record_time(chain, now)
                valid_from = new.valid_from if new.valid_from is not None else moment
                current = _current(chain)
                if current is not None:
                    old = current.record
                    current.record = replace(
                        old, superseded_at=moment, valid_to=max(valid_from, old.valid_from),
                        closed_reason="superseded")
                record = Fact(
                    fact_id=new.fact_id, memory_store=store, subject=new.subject, key=new.key,
                    value=None, confidence=new.confidence, source_type=new.source_type,
                    source_session_id=new.source[1] if new.source else None,
                    source_item_id=new.source[2] if new.source else None,
                    valid_from=valid_from, valid_to=None, recorded_at=moment,
                    superseded_at=None,
                    supersedes=current.record.fact_id if current is not None else None,
                    source_store=source_store,
                )
                value = json.loads(new.value_json)
                chain.append(_StoredFact(record, new.value_json,
                                         tuple(terms(fact_text(new.key, value))),
                                         self._data.next("facts"), new.embedding))
                stored.by_id[new.fact_id] = (new.subject, new.key)
                made.append(replace(record, value=value))
            return made

    async def recall(self, tenant: str, store: str, subject: str, keys: Sequence[str] | None,
                     valid_at: datetime | None, known_at: datetime | None) -> list[Fact]:
        valid_at, known_at = _ids.now_unless(valid_at, known_at)
        with self._data.lock:
            stored = self._memory_store(tenant, store)
            wanted = None if keys is None else set(keys)
            found: list[Fact] = []
            for (s, key), chain in sorted(stored.chains.items()):
                if s != subject or (wanted is not None and key not in wanted):
                    continue
                covering = [f for f in chain if covers(f.record, valid_at, known_at)]
                if covering:
                    found.append(covering[-1].to_fact())
            return found

    async def history(self, tenant: str, store: str, subject: str, key: str) -> list[Fact]:
        with self._data.lock:
            chain = self._memory_store(tenant, store).chains.get((subject, key), [])
            return [f.to_fact() for f in chain]

    def _fact(self, tenant: str, store: str, fact_id: str) -> Fact:
        found = self._memory_store(tenant, store).find(fact_id)
        if found is None:
            raise FactNotFound(store=store, fact_id=fact_id)
        return found.to_fact()

    async def get_fact(self, tenant: str, store: str, fact_id: str) -> Fact:
        with self._data.lock:
            return self._fact(tenant, store, fact_id)

    async def explain(self, tenant: str, store: str, fact_id: str) -> FactExplanation:
        with self._data.lock:
            fact = self._fact(tenant, store, fact_id)
            chain = self._memory_store(tenant, store).chains[(fact.subject, fact.key)]
            superseded = next((f.to_fact() for f in chain
                               if f.record.fact_id == fact.supersedes), None)
            superseded_by = next((f.to_fact() for f in chain
                                  if f.record.supersedes == fact_id), None)
            return FactExplanation(fact, superseded, superseded_by, self._source_item(
                tenant, fact.source_store, fact.source_session_id, fact.source_item_id))

    def _source_item(self, tenant: str, store: str | None, session_id: str | None,
                     item_id: str | None) -> Item | None:
        if store is None or session_id is None or item_id is None:
            return None
        session = self._data.sessions.get((tenant, store, session_id))
        if session is None:
            return None
        return next((it.to_item(session_id) for it in session.items if it.item_id == item_id),
                    None)

    async def forget(self, tenant: str, store: str, subject: str, key: str, reason: str,
                     now: datetime) -> Fact | None:
        with self._data.lock:
            chain = self._memory_store(tenant, store).chains.get((subject, key), [])
            current = _current(chain)
            if current is None:
                return None
            moment = _record_time(chain, now)
            old = current.record
            current.record = replace(old, superseded_at=moment,
                                     valid_to=max(moment, old.valid_from),
                                     closed_reason=reason)
            return current.to_fact()

    async def search(self, tenant: str, store: str, query: TextQuery, subject: str | None,
                     valid_at: datetime | None, limit: int) -> list[FactHit]:
        valid_at, known_at = _ids.now_unless(valid_at, None)
        with self._data.lock:
            stored = self._memory_store(tenant, store)
            in_force: set[str] = set()
            for (s, _), chain in stored.chains.items():
                if subject is None or s == subject:
                    covering = [f for f in chain if covers(f.record, valid_at, known_at)]
                    if covering:
                        in_force.add(covering[-1].record.fact_id)
            collection = sorted(((f, f.terms) for chain in stored.chains.values()
                                 for f in chain), key=lambda doc: doc[0].record.fact_id)
            hits = rank(query.terms, collection, lambda f: f.record.fact_id in in_force)
            return [FactHit(f.to_fact(), score) for f, score in hits[:limit]]

    async def subject_facts(self, tenant: str, subject: str) -> list[Fact]:
        with self._data.lock:
            return [
                f.to_fact()
                for stored in self._tenant_stores(tenant)
                for (s, _), chain in sorted(stored.chains.items()) if s == subject
                for f in chain
            ]

    async def erase_subject(self, tenant: str, subject: str,
                            include_sessions: bool) -> dict[str, int]:
        with self._data.lock:
            facts = 0
            for stored in self._tenant_stores(tenant):
                for key in [k for k in stored.chains if k[0] == subject]:
                    for f in stored.chains.pop(key):
                        del stored.by_id[f.record.fact_id]
                        facts += 1
            sessions = 0
            if include_sessions:
                doomed: dict[str, list[str]] = {}
                for (t, st, sid), session in self._data.sessions.items():
                    if t == tenant and session.record.actor_id == subject:
                        doomed.setdefault(st, []).append(sid)
                for st, ids in doomed.items():
                    for sid in ids:
                        del self._data.sessions[(tenant, st, sid)]
                    self._on_sessions_deleted(tenant, st, ids)
                    sessions += len(ids)
            return {"facts": facts, "sessions": sessions}
