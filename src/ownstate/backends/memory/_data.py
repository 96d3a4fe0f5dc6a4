"""The plain Python data behind the in-memory backend, shared by its parts.

It may touch the model, the embeddings and the record of an item's derived columns
(``formats.derive``), nothing else.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...embeddings import Embedding
from ...formats.derive import DerivedColumns
from ...model import Item, SessionRecord, SessionStoreRecord

__all__ = ["MemoryBase"]


@dataclass(slots=True)
class _StoredItem:
    item_id: str
    seq: int
    create_time: datetime
    data_json: str
    format: str
    #: role, type, tool name, model and token counts, as derived when it was appended
    columns: DerivedColumns
    #: its search terms; none when its store does not index items
    terms: tuple[str, ...] = ()
    #: its vector, when it was appended by a client with an embedder
    embedding: Embedding | None = None

    def to_item(self, session_id: str) -> Item:
        return Item(
            item_id=self.item_id, session_id=session_id, seq=self.seq,
            create_time=self.create_time, data=json.loads(self.data_json), format=self.format,
            **self.columns._asdict(),
        )


@dataclass(slots=True)
class _StoredSession:
    record: SessionRecord
    ordinal: int
    items: list[_StoredItem] = field(default_factory=list)
    # idempotency key -> (request hash, item ids of the first result)
    idempotency: dict[str, tuple[str, list[str]]] = field(default_factory=dict)


@dataclass
class _Data:
    lock: threading.RLock = field(default_factory=threading.RLock)
    stores: dict[tuple[str, str], SessionStoreRecord] = field(default_factory=dict)
    sessions: dict[tuple[str, str, str], _StoredSession] = field(default_factory=dict)
    next_ordinal: int = 1
    # Each part of the backend keeps its own records here, under keys it chooses.
    memory_stores: dict[Any, Any] = field(default_factory=dict)
    facts: dict[Any, Any] = field(default_factory=dict)
    runs: dict[Any, Any] = field(default_factory=dict)
    effects: dict[Any, Any] = field(default_factory=dict)
    checkpoints: dict[Any, Any] = field(default_factory=dict)
    assets: dict[Any, Any] = field(default_factory=dict)
    blobs: dict[Any, Any] = field(default_factory=dict)
    api_keys: dict[Any, Any] = field(default_factory=dict)
    grants: dict[Any, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    #: session stores made with index_items=False
    unindexed: set[tuple[str, str]] = field(default_factory=set)

    def next(self, counter: str) -> int:
        """The next number of a named, process-wide increasing counter."""
        value = self.counters.get(counter, 0) + 1
        self.counters[counter] = value
        return value






class MemoryBase:
    """What every part of the in-memory backend shares: the data and the cascade hooks.

    A part that keeps records owned by sessions overrides its hook; the backend calls all
    of them, under the lock, whenever sessions are deleted.
    """

    _data: _Data

    def _drop_runs_of_sessions(self, tenant: str, store: str,
                               session_ids: Sequence[str]) -> None:
        """Delete the runs (with their checkpoints and effects) of these sessions."""

    def _drop_checkpoints_of_runs(self, tenant: str, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and pending writes of these runs."""

    def _drop_assets_of_sessions(self, tenant: str, store: str,
                                 session_ids: Sequence[str]) -> None:
        """Delete the asset references of these sessions (and content nobody references)."""

    def _start_grants(self, tenant: str, kind: str, store: str, owner: str | None) -> None:
        """A new store's grants (none left over, the owner's when named), written before
        the store itself so that a failure leaves no store without its owner."""
        key = (tenant, kind, store)
        if owner is not None:
            self._data.grants[key] = {owner: "OWNER"}
        else:
            self._data.grants.pop(key, None)

    def _drop_grants(self, tenant: str, kind: str, store: str) -> int:
        """Drop a store's grants, before the store itself goes; returns how many."""
        return len(self._data.grants.pop((tenant, kind, store), {}))

    def _on_sessions_deleted(self, tenant: str, store: str, session_ids: Sequence[str]) -> None:
        self._drop_assets_of_sessions(tenant, store, session_ids)
        self._drop_runs_of_sessions(tenant, store, session_ids)
