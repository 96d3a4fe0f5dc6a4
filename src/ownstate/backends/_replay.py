"""The replay cache: the items of recently replayed sessions, so that replaying a session
again reads from the database (or the server) only what was appended since. The SQL
backends and the HTTP client keep one each.

An agent reloads its whole history every turn; the history only grows. Items are
immutable once appended, and they leave a session only from its end (``pop_item``) or all
at once (``clear_items``, deleting the session or its store). So if the item at seq N
still has the id it had, the items at seq 1..N are unchanged; a session deleted and made
again gets a new internal id (SQLite may give it the old one back, but not the old item
ids: those are never made twice). Every read served from the cache is checked that way, by
the same statement that fetches the newer items: the database stays the only source of
truth, even with other processes writing.

Entries keep the items' data pickled, a run of items per pickle, and every read unpickles
it, so callers get fresh objects they may change freely (one pickle of many items loads
several times faster than as many JSON texts). Runs are merged as an entry grows, so an
entry of n items has O(log n) of them. The cache holds at most ``max_items`` items across
sessions, dropping the least recently replayed sessions first. It trusts that items are
never updated in place (ownstate never does; whoever edits ``items.data`` by hand should
turn the cache off with ``replay_cache=0``).

It may touch nothing else of ownstate's and no database: the backend that keeps one reads
the items and hands them over.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__ = ["Replay", "ReplayCache"]

#: An item without its data: (item_id, seq, create_time, format, role, type, tool_name,
#: model, in_tokens, out_tokens)
Meta = tuple[Any, ...]


def _pickled(data: list[Any]) -> bytes:
    return pickle.dumps(data, pickle.HIGHEST_PROTOCOL)


class Replay:
    """What the cache holds for one session: its internal id, and its first items (seq 1
    to ``last_seq``) as metadata plus runs of pickled data."""

    __slots__ = ("meta", "runs", "sid")

    def __init__(self, sid: int, meta: list[Meta], data: list[Any]) -> None:
        self.sid = sid
        self.meta = meta
        self.runs: list[tuple[int, bytes]] = [(len(data), _pickled(data))] if data else []

    @property
    def last_seq(self) -> int:
        return len(self.meta)

    def item_id(self, seq: int) -> str:
        return str(self.meta[seq - 1][0])

    def slice(self, start: int, stop: int) -> tuple[list[Meta], list[Any]]:
        """Metadata and fresh data of the items at positions ``start:stop``."""
        stop = min(stop, len(self.meta))
        data: list[Any] = []
        offset = 0
        for count, blob in self.runs:
            if offset + count > start and offset < stop:
                loaded = pickle.loads(blob)
                data.extend(loaded[max(start - offset, 0):stop - offset])
            offset += count
            if offset >= stop:
                break
        return self.meta[start:stop], data

    def extend(self, meta: Sequence[Meta], data: list[Any]) -> None:
        """Add the items that follow ``last_seq``; merge a run into the one before it
        once that one is no longer than it (so runs shrink geometrically)."""
        self.meta.extend(meta)
        self.runs.append((len(data), _pickled(data)))
        while len(self.runs) > 1 and self.runs[-2][0] <= self.runs[-1][0]:
            (first, a), (second, b) = self.runs[-2:]
            self.runs[-2:] = [(first + second, _pickled(pickle.loads(a) + pickle.loads(b)))]


class ReplayCache:
    """At most ``max_items`` items of the sessions replayed last, by (tenant, store,
    session_id)."""

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._entries: OrderedDict[tuple[str, str, str], Replay] = OrderedDict()
        self._size = 0

    def get(self, key: tuple[str, str, str]) -> Replay | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def drop(self, key: tuple[str, str, str]) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self._size -= found.last_seq

    def put(self, key: tuple[str, str, str], replay: Replay) -> None:
        """Keep ``replay`` (replacing what was kept for ``key``) if it fits."""
        self.drop(key)
        if 0 < replay.last_seq <= self.max_items:
            self._entries[key] = replay
            self._size += replay.last_seq
            self._evict()

    def extend(self, key: tuple[str, str, str], replay: Replay, meta: Sequence[Meta],
               data: list[Any]) -> None:
        """Add items read after the end of ``replay``, if it is still the entry of
        ``key`` and still ends where they begin (another read may have moved it on)."""
        if self._entries.get(key) is not replay or not meta or (
                meta[0][1] != replay.last_seq + 1):
            return
        replay.extend(meta, data)
        self._size += len(meta)
        self._evict()

    def _evict(self) -> None:
        while self._size > self.max_items and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._size -= evicted.last_seq
