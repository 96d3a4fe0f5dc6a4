"""The facts port: memory stores and the bitemporal facts they hold.

Time model (documented for users in ``docs/memory.md``). Each fact claims that ``key`` has
``value`` from ``valid_from`` on. While it is current (``superseded_at`` is ``None``) the
claim is open-ended. When a later ``remember`` supersedes it at record time S, the fact
gets ``superseded_at = S`` and ``valid_to = max(new.valid_from, old.valid_from)``; from S
on we believe it held during ``[valid_from, valid_to)`` (an empty interval means it was
retracted). ``forget`` at time F closes the current fact the same way with
``valid_to = max(F, valid_from)``.

So a fact is believed at record time R when ``recorded_at <= R``, and at R it covers valid
time T when ``valid_from <= T`` and (``superseded_at`` is ``None`` or ``> R``, or
``valid_to > T``). ``recall(valid_at=T, known_at=R)`` returns, per key, of the facts that
cover T at R the one recorded last. A fact recorded later speaks for every valid time from
its ``valid_from`` on, so a backdated correction overrides what was believed before for
that whole span, including closed facts whose intervals it overlaps.

Record times never go backwards for one (subject, key): a write's record time S is the
later of the clock and the last record or close time of that (subject, key), so that
``recorded_at <= superseded_at`` always holds and "recorded last" agrees with the clock
even when clocks of several writers disagree.

Search (:meth:`FactPort.search`) ranks facts by the terms and relevance of
:mod:`ownstate.backends.ports.search`, over every fact in the store: a closed fact stays
indexed so that a search as of an earlier valid time finds what held then.

It may touch the search port, the embeddings and the model, and no datastore: each backend
implements it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ...embeddings import Embedding
from ...model import Fact, FactExplanation, FactHit, MemoryStoreRecord
from .search import TextQuery

__all__ = ["FactPort", "NewFact", "covers"]


def covers(fact: Fact, valid_at: datetime, known_at: datetime) -> bool:
    """Whether ``fact``, as believed at ``known_at``, held at ``valid_at`` (the rule above)."""
    if fact.recorded_at > known_at or fact.valid_from > valid_at:
        return False
    if fact.superseded_at is None or fact.superseded_at > known_at:
        return True
    return fact.valid_to is not None and fact.valid_to > valid_at

@dataclass(frozen=True, slots=True)
class NewFact:
    """A fact ready to store: validated and encoded by the public API."""

    fact_id: str
    subject: str
    key: str
    value_json: str
    confidence: float | None
    source_type: str
    #: ``(store, session_id, item_id)`` of the conversation item it came from, if any;
    #: a store of ``None`` means "find the item by its id in the tenant" (its session
    #: must then be ``session_id``)
    source: tuple[str | None, str, str] | None
    valid_from: datetime | None
    #: its vector, when the client has an embedder: stored in the same transaction
    embedding: Embedding | None = None


class FactPort(ABC):
    """Storage for memory stores and facts."""

    @abstractmethod
    async def create_memory_store(self, tenant: str, name: str, now: datetime,
                                  owner: str | None = None) -> MemoryStoreRecord:
        """Create the store with its grants, in one transaction, as
        :meth:`~ownstate.backends.ports.sessions.SessionPort.create_store` does.

        Raises AlreadyExists.
        """

    @abstractmethod
    async def get_memory_store(self, tenant: str, name: str) -> MemoryStoreRecord:
        """Raises StoreNotFound."""

    @abstractmethod
    async def list_memory_stores(self, tenant: str, limit: int,
                                 after: str | None) -> list[MemoryStoreRecord]:
        """Memory stores ordered by name, strictly after ``after``."""

    @abstractmethod
    async def delete_memory_store(self, tenant: str, name: str) -> int:
        """Delete the store, all its facts (history included) and its grants, in one
        transaction; returns facts deleted.

        Raises StoreNotFound.
        """

    @abstractmethod
    async def list_subjects(self, tenant: str, store: str, limit: int,
                            after: str | None) -> list[str]:
        """The subjects that have at least one fact in the store, current or closed (a
        forgotten subject stays listed; an erased one is gone), ordered by subject, strictly
        after ``after``; at most ``limit``. Raises StoreNotFound."""

    @abstractmethod
    async def remember(self, tenant: str, store: str, facts: Sequence[NewFact],
                       now: datetime) -> list[Fact]:
        """Record each fact, in order, as the current one for its (subject, key), superseding
        the current one; all in one transaction, all or none. ``valid_from`` ``None`` means
        the record time. Every source item must exist in the tenant.

        Raises StoreNotFound, ItemNotFound (a source item that does not exist, or is not in
        the session named).
        """

    @abstractmethod
    async def recall(self, tenant: str, store: str, subject: str, keys: Sequence[str] | None,
                     valid_at: datetime | None, known_at: datetime | None) -> list[Fact]:
        """Per key, the fact that held at valid time ``valid_at`` as believed at record time
        ``known_at`` (see the module docstring), ordered by key; either None means now, by
        the clock that stamps records (a server's, for a remote client). Raises
        StoreNotFound."""

    @abstractmethod
    async def history(self, tenant: str, store: str, subject: str, key: str) -> list[Fact]:
        """Every fact ever recorded for (subject, key), in record order.

        Raises StoreNotFound.
        """

    @abstractmethod
    async def get_fact(self, tenant: str, store: str, fact_id: str) -> Fact:
        """One fact, current or not. Raises StoreNotFound, FactNotFound."""

    @abstractmethod
    async def explain(self, tenant: str, store: str, fact_id: str) -> FactExplanation:
        """The fact, the fact it superseded, the fact that superseded it, and its source
        item if that still exists. Raises StoreNotFound, FactNotFound."""

    @abstractmethod
    async def forget(self, tenant: str, store: str, subject: str, key: str, reason: str,
                     now: datetime) -> Fact | None:
        """Close the current fact for (subject, key) with ``closed_reason`` ``reason`` (never
        delete it); returns the closed fact, or ``None`` if there was no current fact.
        Raises StoreNotFound."""

    @abstractmethod
    async def search(self, tenant: str, store: str, query: TextQuery, subject: str | None,
                     valid_at: datetime | None, limit: int) -> list[FactHit]:
        """The facts in force at valid time ``valid_at`` (None: now) as believed now, the
        ones :meth:`recall` would return, that hold at least one of ``query.terms``
        (``subject``'s only, when given), best first by BM25 score, then by fact id; at
        most ``limit``. Raises StoreNotFound."""

    @abstractmethod
    async def subject_facts(self, tenant: str, subject: str) -> list[Fact]:
        """Every fact (history included) about ``subject`` in every memory store of the
        tenant, ordered by store, key and record order."""

    @abstractmethod
    async def erase_subject(self, tenant: str, subject: str,
                            include_sessions: bool) -> dict[str, int]:
        """Hard-delete every fact about ``subject`` in every memory store of the tenant, and
        with ``include_sessions`` every session (in every session store of the tenant) whose
        actor_id is ``subject``, with their items, runs, checkpoints and assets; all in one
        transaction. Returns counts: ``facts``, ``sessions``."""
