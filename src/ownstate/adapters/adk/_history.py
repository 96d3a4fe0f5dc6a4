"""What the ADK session service remembers of a session between calls: the revision a
``Session`` object last saw (its stale check and idempotency key), the history cached so the
next read fetches only what follows, and what one read found. Plain data, no storage. It may
touch the adapter's naming (:mod:`._state`), the public API's session type, the model and
ADK's ``Event``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.adk.events.event import Event

from ...api.aio import AsyncSession
from ...model import Item
from ._state import (
    EVENT_FORMAT,
    _fold_into,
    _timestamp,
)


@dataclass(frozen=True, slots=True)
class _Revision:
    """What a Session object last saw of its stored history: the last item (its seq and
    id; 0 and "" when empty), and whether the session carries session-scoped state.

    It travels in ``Session._storage_update_marker``, the attribute ADK reserves for a
    service's revision marker."""

    seq: int
    item_id: str
    has_state: bool

    _PREFIX = "ownstate:"

    @classmethod
    def of(cls, last: Item | None, has_state: bool) -> _Revision:
        return cls(last.seq, last.item_id, has_state) if last else cls(0, "", has_state)

    @classmethod
    def parse(cls, marker: str | None) -> _Revision | None:
        if not marker or not marker.startswith(cls._PREFIX):
            return None
        parts = marker[len(cls._PREFIX):].split(":")
        if len(parts) != 3 or not parts[0].isdigit():
            return None
        return cls(int(parts[0]), parts[1] if parts[1] != "-" else "", parts[2] == "s")

    def marker(self) -> str:
        return (f"{self._PREFIX}{self.seq}:{self.item_id or '-'}:"
                f"{'s' if self.has_state else '-'}")

    def append_key(self, attempt: int) -> str:
        """The idempotency key of an append made at this revision.

        Every append through this service at one revision uses the same key, so the
        datastore lets exactly one of them through: a second writer at a revision that
        has moved on is refused (IdempotencyKeyReused), which is the stale-session check,
        done in the same round trip as the append."""
        base = f"adk:{self.seq}:{self.item_id or '-'}"
        return base if attempt == 0 else f"{base}:{attempt}"


class _Stale(Exception):
    """Raised inside a coroutine; turned into ADK's StaleSessionError by the caller."""


@dataclass(frozen=True, slots=True)
class _Cached:
    """What this service last read of one session's history, kept so that the next read
    fetches only the items that follow it.

    The cache trusts nothing it cannot check: the next read asks for the items from
    ``seq`` on, and uses the cache only if the first of them is still the item
    ``item_id`` in a session created at ``created``. Items are immutable and leave a
    session only from its end (``pop_item``) or all at once (``clear``, deleting the
    session), and item ids are never reused, so then the items up to ``seq`` are the ones
    cached. Anything else (a pop, a clear, the session made again, another framework's
    items) sends the read down the full path. Sessions holding other frameworks' items are
    never cached. Apart from ``ids``, which only grows, an entry is never changed once
    made (a later read or append makes a new one), so a reader holding one always sees a
    consistent history.
    """

    created: datetime
    seq: int  # the last item read (0 and "" when the history was empty)
    item_id: str
    events: list[Event]
    stamps: list[float]  # each event's stored timestamp, what after_timestamp compares
    state: dict[str, Any]  # the session-scoped state the history folds to; never handed out
    #: The ids of the events, and of events appended through this service since: only
    #: ever grows, and may be shared with later entries (a superset is all _maybe_held
    #: needs).
    ids: set[str]
    #: The newest item appended through this service on top of this read, and how many
    #: events the Session object it was appended to then holds (see _maybe_held).
    tip: tuple[int, str]
    count: int
    last_id: str | None

    @classmethod
    def read(cls, created: datetime, last: tuple[int, str], events: list[Event],
             stamps: list[float], state: dict[str, Any], ids: set[str]) -> _Cached:
        return cls(created, last[0], last[1], events, stamps, state, ids, last, len(events),
                   events[-1].id if events else None)

    def extended(self, items: Sequence[Item], events: list[Event]) -> _Cached:
        """This history followed by ``items`` (read after it; all ADK's) and their
        ``events``."""
        if not items:
            return _Cached.read(self.created, (self.seq, self.item_id), self.events,
                                self.stamps, self.state, self.ids)
        state = dict(self.state)
        for item in items:
            _fold_into(state, item)
        ids = self.ids
        ids.update(e.id for e in events)
        last = items[-1]
        return _Cached.read(self.created, (last.seq, last.item_id), self.events + events,
                            self.stamps + [_timestamp(i) for i in items
                                           if i.format == EVENT_FORMAT],
                            state, ids)



@dataclass(slots=True)
class _Snapshot:
    """What a read of one session found."""

    handle: AsyncSession
    #: The whole history; or its newest part (not complete); or, with ``base``, the items
    #: that follow what ``base`` holds.
    items: list[Item]
    complete: bool  # items is the whole history, or all that follows base
    last: Item | None
    app_state: dict[str, Any]
    user_state: dict[str, Any]
    base: _Cached | None = None
