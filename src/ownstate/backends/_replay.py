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

Entries keep the items' data marshalled, a run of items per blob, and every read loads
it again, so callers get fresh objects they may change freely (one ``marshal`` of many
items loads several times faster than as many JSON texts, and faster than a pickle; data
that ``marshal`` cannot hold, such as a subclass of dict, is pickled instead). Before
new data is marshalled, equal keys and short strings in it are made one object, which
marshal writes once and a load makes once (a string cannot be changed, so its readers
may share it): a conversation's items load in about a quarter less time, for a walk over
each item once, when it enters the cache. Runs are merged as an entry grows, so an entry
of n items has O(log n) of them. The rest of an item (its id, seq, time and derived
columns) is immutable and kept as one list per field, which the reader shares out as it
is: a replay builds its records a field at a time (``model.build_items``). The cache
holds at most ``max_items`` items across sessions, dropping the least recently replayed
sessions first. It trusts that items are never updated in place (ownstate never does;
whoever edits ``items.data`` by hand should turn the cache off with ``replay_cache=0``).
Threads may share a cache: each of its methods holds its lock.

It may touch nothing else of ownstate's and no database: the backend that keeps one reads
the items and hands them over.
"""

from __future__ import annotations

import marshal
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Replay", "ReplayCache"]

#: An item without its data: (item_id, seq, create_time, format, role, type, tool_name,
#: model, in_tokens, out_tokens)
Meta = tuple[Any, ...]


#: A run of items' data: how many, how to load it, and the blob to load.
Run = tuple[int, Callable[[bytes], list[Any]], bytes]

#: The longest string value made one object with its equals (keys always are): roles,
#: types, statuses and names repeat; longer text rarely does.
_SHORT = 40
_CONTAINERS = (dict, list)


def _shared(data: list[Any]) -> list[Any]:
    """A copy of the JSON values ``data`` in which equal keys and equal short strings are
    one object. Anything else (a subclass, a tuple) is kept as it is; a value nested too
    deep to walk is kept whole."""
    memo: dict[str, str] = {}
    share = memo.setdefault
    containers, short = _CONTAINERS, _SHORT

    def walk(value: Any) -> Any:
        if value.__class__ is dict:
            return {share(k, k) if k.__class__ is str else k: (
                walk(v) if v.__class__ in containers
                else share(v, v) if v.__class__ is str and len(v) <= short else v)
                for k, v in value.items()}
        return [walk(v) if v.__class__ in containers
                else share(v, v) if v.__class__ is str and len(v) <= short else v
                for v in value]

    try:
        return [walk(v) if v.__class__ in containers else v for v in data]
    except RecursionError:
        return data


def _run(data: list[Any]) -> Run:
    """``data`` kept as a marshal, or a pickle when marshal cannot hold it (an object that
    is not a plain dict, list, str, number, bool or None, or one nested too deep)."""
    try:
        return len(data), marshal.loads, marshal.dumps(data)
    except ValueError:
        return len(data), pickle.loads, pickle.dumps(data, pickle.HIGHEST_PROTOCOL)


class Replay:
    """What the cache holds for one session: its internal id, and its first items (seq 1
    to ``last_seq``) as ``columns`` of metadata (one list per field of :data:`Meta`) plus
    runs of their data."""

    __slots__ = ("columns", "runs", "sid")

    def __init__(self, sid: int, meta: Sequence[Meta], data: list[Any]) -> None:
        self.sid = sid
        self.columns: list[list[Any]] = [list(column) for column in zip(*meta, strict=True)]
        self.runs: list[Run] = [_run(_shared(data))] if data else []

    @property
    def last_seq(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def item_id(self, seq: int) -> str:
        return str(self.columns[0][seq - 1])

    def slice(self, start: int, stop: int) -> tuple[list[list[Any]], list[Any]]:
        """The metadata columns and fresh data of the items at positions ``start:stop``."""
        stop = min(stop, self.last_seq)
        data: list[Any] = []
        offset = 0
        for count, load, blob in self.runs:
            if offset + count > start and offset < stop:
                loaded = load(blob)
                if offset >= start and offset + count <= stop:
                    data += loaded
                else:
                    data += loaded[max(start - offset, 0):stop - offset]
            offset += count
            if offset >= stop:
                break
        return [column[start:stop] for column in self.columns], data

    def extend(self, meta: Sequence[Meta], data: list[Any]) -> None:
        """Add the items that follow ``last_seq``; merge a run into the one before it
        once that one is no longer than it (so runs shrink geometrically; a merged run
        shares the strings each of its parts shared)."""
        if not meta:
            return
        if not self.columns:
            self.columns = [[] for _ in meta[0]]
        for column, values in zip(self.columns, zip(*meta, strict=True), strict=True):
            column.extend(values)
        self.runs.append(_run(_shared(data)))
        while len(self.runs) > 1 and self.runs[-2][0] <= self.runs[-1][0]:
            (_, load_a, a), (_, load_b, b) = self.runs[-2:]
            self.runs[-2:] = [_run(load_a(a) + load_b(b))]


class ReplayCache:
    """At most ``max_items`` items of the sessions replayed last, by (tenant, store,
    session_id)."""

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._entries: OrderedDict[tuple[str, str, str], Replay] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def held(self, key: tuple[str, str, str], start: int, stop: int
             ) -> tuple[Replay, list[list[Any]], list[Any]] | None:
        """The entry of ``key`` and its items at positions ``start:stop`` (its metadata
        columns and fresh data, as :meth:`Replay.slice`), if it holds position ``start``."""
        with self._lock:
            found = self._entries.get(key)
            if found is None or not 0 <= start <= found.last_seq:
                return None
            self._entries.move_to_end(key)
            columns, data = found.slice(start, stop)
        return found, columns, data

    def drop(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            self._drop(key)

    def put(self, key: tuple[str, str, str], replay: Replay) -> None:
        """Keep ``replay`` (replacing what was kept for ``key``) if it fits."""
        with self._lock:
            self._drop(key)
            if 0 < replay.last_seq <= self.max_items:
                self._entries[key] = replay
                self._size += replay.last_seq
                self._evict()

    def extend(self, key: tuple[str, str, str], replay: Replay, meta: Sequence[Meta],
               data: list[Any]) -> None:
        """Add items read after the end of ``replay``, if it is still the entry of
        ``key`` and still ends where they begin (another read may have moved it on)."""
        with self._lock:
            if self._entries.get(key) is not replay or not meta or (
                    meta[0][1] != replay.last_seq + 1):
                return
            replay.extend(meta, data)
            self._size += len(meta)
            self._evict()

    def _drop(self, key: tuple[str, str, str]) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self._size -= found.last_seq

    def _evict(self) -> None:
        while self._size > self.max_items and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._size -= evicted.last_seq
