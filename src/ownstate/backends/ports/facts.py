"""The facts port: memory stores and the bitemporal facts they hold.

Time model (documented for users in ``docs/memory.md``). Each fact claims that ``key`` had
``value`` from ``valid_from``. While it is current (``superseded_at`` is ``None``) the
claim is open-ended. When a later ``remember`` supersedes it at record time S, the fact
gets ``superseded_at = S`` and ``valid_to = max(new.valid_from, old.valid_from)``; from S
on we believe it held during ``[valid_from, valid_to)`` (an empty interval means it was
retracted). ``forget`` at time F closes the current fact the same way with
``valid_to = max(F, valid_from)``.

So a fact is believed at record time R when ``recorded_at <= R``, and at R it covers valid
time T when ``valid_from <= T`` and (``superseded_at`` is ``None`` or ``> R``, or
``valid_to > T``). ``recall(valid_at=T, known_at=R)`` returns, per key, the covering fact
with the greatest ``valid_from`` (ties: the latest ``recorded_at``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ...model import Fact, FactExplanation, MemoryStoreRecord

__all__ = ["FactPort", "NewFact"]


@dataclass(frozen=True, slots=True)
class NewFact:
    """A fact ready to store: validated and encoded by the public API."""

    fact_id: str
    subject: str
    key: str
    value_json: str
    confidence: float | None
    source_type: str
    #: ``(store, session_id, item_id)`` of the conversation item it came from, if any
    source: tuple[str, str, str] | None
    valid_from: datetime | None


class FactPort(ABC):
    """Storage for memory stores and facts."""

    @abstractmethod
    async def create_memory_store(self, tenant: str, name: str,
                                  now: datetime) -> MemoryStoreRecord:
        """Raises AlreadyExists."""

    @abstractmethod
    async def get_memory_store(self, tenant: str, name: str) -> MemoryStoreRecord:
        """Raises StoreNotFound."""

    @abstractmethod
    async def list_memory_stores(self, tenant: str, limit: int,
                                 after: str | None) -> list[MemoryStoreRecord]:
        """Memory stores ordered by name, strictly after ``after``."""

    @abstractmethod
    async def delete_memory_store(self, tenant: str, name: str) -> int:
        """Delete the store and all its facts (history included); returns facts deleted.

        Raises StoreNotFound.
        """

    @abstractmethod
    async def remember(self, tenant: str, store: str, fact: NewFact, now: datetime) -> Fact:
        """Record ``fact`` as the current one for (subject, key), superseding the current one
        in the same transaction. ``valid_from`` ``None`` means ``now``; ``recorded_at`` is
        ``now``. The source item, when given, must exist in the tenant.

        Raises StoreNotFound, ItemNotFound (unknown source item), SessionNotFound.
        """

    @abstractmethod
    async def recall(self, tenant: str, store: str, subject: str, keys: Sequence[str] | None,
                     valid_at: datetime, known_at: datetime) -> list[Fact]:
        """Per key, the fact that held at valid time ``valid_at`` as believed at record time
        ``known_at`` (see the module docstring), ordered by key. Raises StoreNotFound."""

    @abstractmethod
    async def history(self, tenant: str, store: str, subject: str, key: str) -> list[Fact]:
        """Every fact ever recorded for (subject, key), oldest record first.

        Raises StoreNotFound.
        """

    @abstractmethod
    async def explain(self, tenant: str, store: str, fact_id: str) -> FactExplanation:
        """The fact, the fact it superseded, the fact that superseded it, and its source
        item if that still exists. Raises StoreNotFound, FactNotFound."""

    @abstractmethod
    async def forget(self, tenant: str, store: str, subject: str, key: str, reason: str,
                     now: datetime) -> Fact | None:
        """Close the current fact for (subject, key) (never delete it); returns the closed
        fact, or ``None`` if there was no current fact. Raises StoreNotFound."""

    @abstractmethod
    async def search(self, tenant: str, store: str, terms: Sequence[str], subject: str | None,
                     limit: int) -> list[Fact]:
        """Current facts whose key or value text contains every term (whole words,
        case-insensitive), best match first. Raises StoreNotFound."""

    @abstractmethod
    async def subject_facts(self, tenant: str, subject: str) -> list[Fact]:
        """Every fact (history included) about ``subject`` in every memory store of the
        tenant, ordered by store, key and record time."""

    @abstractmethod
    async def erase_subject(self, tenant: str, subject: str,
                            include_sessions: bool) -> dict[str, int]:
        """Hard-delete every fact about ``subject`` in every memory store of the tenant, and
        with ``include_sessions`` every session whose actor_id is ``subject`` (with their
        items, runs, checkpoints and assets). Returns counts: ``facts``, ``sessions``."""
