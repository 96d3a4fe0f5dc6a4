"""LangGraph's long-term memory store (``BaseStore``) over ownstate memory facts.

:class:`OwnstateStore` keeps every LangGraph item as one fact in one ownstate memory store
(``"langgraph"`` by default), so a node's memories are ordinary facts: recalled, searched,
corrected with history and erased per subject like any other.

The mapping (``docs/langgraph-store.md`` is the user's account of it):

- a namespace tuple is the fact's ``subject``: its labels joined with ``"."`` (LangGraph
  forbids ``"."`` inside a label, so the split is exact), ``("user:8814",)`` is the subject
  ``user:8814``;
- an item key is the fact's ``key``;
- a text that ownstate would refuse as a subject or key (blank, with control characters, or
  starting with ``%``) is stored as ``%`` followed by its percent-encoding, so every
  namespace and key round-trips exactly within the 256-character bound;
- the fact's value is ``{"value": <item value>, "created_at": ..., "ttl_minutes": ...}``
  (the last two only when needed); ``updated_at`` is the fact's ``recorded_at``;
- a put remembers a new fact (closing the previous one, which stays in the history), a
  delete forgets the current one;
- two reserved subjects under the root ``langgraph`` (a root LangGraph refuses for puts)
  hold the adapter's own records: ``langgraph.namespaces``, one fact per namespace ever
  written (what ``list_namespaces`` and prefix search enumerate), and
  ``langgraph.expiry``, the last TTL refresh of each item version.

Expiry is soft: an item put with ``ttl`` minutes expires ``ttl`` minutes after the later of
its fact's ``recorded_at`` and its last refresh; expired items are never returned, and
their facts stay where they are until overwritten or deleted.

It may touch the public API through the adapters' bridge and kernel, ids, the error tree,
the limits and the model, the backends' search terms and capability flags (pure names from
``ownstate.backends.ports.search`` and ``backends.base``, never a backend), and LangGraph's
``BaseStore``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from ... import _ids
from ...api import AsyncClient, AsyncMemoryStore, Client
from ...backends.base import Capability
from ...backends.ports.search import fact_text, query_terms, terms
from ...errors import InvalidInput, StoreNotFound
from ...limits import CONTROL_RE, MAX_NAME_CHARS, encode_json, store_name
from ...model import Fact
from .._bridge import Bridge, BridgedAdapter
from .._kernel import async_twin, ensure_store, sync_twin

__all__ = ["OwnstateStore"]

T = TypeVar("T")

#: LangGraph reserves this root label; the adapter keeps its own records under it.
_RESERVED_ROOT = "langgraph"
_INDEX_SUBJECT = "langgraph.namespaces"
_REFRESH_SUBJECT = "langgraph.expiry"
_ESCAPE = "%"
_WRAPPER_FIELDS = frozenset({"value", "created_at", "ttl_minutes"})
_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
#: ownstate's text search takes at most this many distinct words
_MAX_QUERY_WORDS = 32
#: A read refreshes an item's expiry only once this share of its TTL has passed since the
#: expiry was last set: each refresh is a write, and reading an item in a loop should not
#: write a record per read.
_REFRESH_AFTER = 0.1


# --- encoding namespaces and keys ---------------------------------------------------------

def _encode_text(text: str) -> str | None:
    """The subject or key that stores ``text``, or None when it would exceed the bound."""
    if text.strip() and not CONTROL_RE.search(text) and not text.startswith(_ESCAPE):
        stored = text
    else:
        try:
            stored = _ESCAPE + quote(text, safe="")
        except UnicodeEncodeError:  # lone surrogates have no UTF-8 form
            return None
    return stored if len(stored) <= MAX_NAME_CHARS else None


def _decode_text(stored: str) -> str | None:
    """The text a subject or key stores, or None when the adapter would not have written it
    (so that decoding and encoding stay exact inverses)."""
    if stored.startswith(_ESCAPE):
        try:
            text = unquote(stored[1:], errors="strict")
        except UnicodeDecodeError:
            return None
    else:
        text = stored
    return text if _encode_text(text) == stored else None


def _subject(namespace: tuple[str, ...]) -> str | None:
    """The fact subject of a namespace; None for one that cannot be stored."""
    return _encode_text(".".join(namespace)) if namespace else None


def _namespace(subject: str) -> tuple[str, ...] | None:
    """The namespace a fact subject stands for; None when it is no valid namespace."""
    text = _decode_text(subject)
    if text is None:
        return None
    labels = tuple(text.split("."))
    if any(not label or "\x00" in label for label in labels):
        return None
    return labels


def _reserved(namespace: tuple[str, ...]) -> bool:
    return bool(namespace) and namespace[0] == _RESERVED_ROOT


def _chunks(values: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


# --- items as facts -----------------------------------------------------------------------

@dataclass(slots=True)
class _Entry:
    """One LangGraph item, read from its current fact."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    ttl_minutes: float | None
    fact: Fact
    #: the JSON whose words a query matches: the item value, or a foreign fact's own value
    text: Any
    refreshed_at: datetime | None = None

    @property
    def expiry_set_at(self) -> datetime:
        if self.refreshed_at is not None and self.refreshed_at > self.fact.recorded_at:
            return self.refreshed_at
        return self.fact.recorded_at

    def expires_at(self) -> datetime | None:
        if self.ttl_minutes is None:
            return None
        try:
            return self.expiry_set_at + timedelta(minutes=self.ttl_minutes)
        except OverflowError:  # a TTL of centuries: never
            return None

    def item(self) -> Item:
        return Item(value=self.value, key=self.key, namespace=self.namespace,
                    created_at=self.created_at, updated_at=self.fact.recorded_at)

    def search_item(self) -> SearchItem:
        return SearchItem(namespace=self.namespace, key=self.key, value=self.value,
                          created_at=self.created_at, updated_at=self.fact.recorded_at)


def _entry(fact: Fact) -> _Entry | None:
    """The item a fact holds, or None when the fact is no item (a reserved subject, or a
    subject or key the adapter could not have written)."""
    namespace = _namespace(fact.subject)
    key = _decode_text(fact.key)
    if namespace is None or key is None or _reserved(namespace):
        return None
    created_at = fact.recorded_at
    ttl: float | None = None
    raw = fact.value
    text: Any = raw
    if (isinstance(raw, dict) and isinstance(raw.get("value"), dict)
            and set(raw) <= _WRAPPER_FIELDS):
        value: dict[str, Any] = raw["value"]
        text = value
        if isinstance(raw.get("created_at"), str):
            with contextlib.suppress(ValueError):  # hand-edited: fall back to the record
                created_at = _ids.parse_time(raw["created_at"])
        minutes = raw.get("ttl_minutes")
        if isinstance(minutes, (int, float)) and not isinstance(minutes, bool):
            ttl = float(minutes)
    elif isinstance(raw, dict):
        # A fact written by other means than this adapter: its object value is the item.
        value = raw
    else:
        value = {"value": raw}
    return _Entry(namespace, key, value, created_at, ttl, fact, text)


# --- filters and queries ------------------------------------------------------------------

def _check_filter(spec: Mapping[str, Any]) -> None:
    for name, expected in spec.items():
        if not isinstance(name, str):
            raise InvalidInput("filter keys must be strings", field="filter")
        if isinstance(expected, Mapping):
            if any(isinstance(k, str) and k.startswith("$") for k in expected):
                unknown = set(expected) - _OPERATORS
                if unknown:
                    raise InvalidInput(
                        f"unsupported filter operator(s) {sorted(map(str, unknown))}; "
                        f"use {sorted(_OPERATORS)}", field="filter")
            else:
                _check_filter(expected)


def _same(actual: Any, expected: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``, tuples are arrays."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, Mapping):
        return (isinstance(actual, dict) and set(actual) == set(expected)
                and all(_same(actual[k], v) for k, v in expected.items()))
    if isinstance(expected, (list, tuple)):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(_same(a, e) for a, e in zip(actual, expected, strict=True)))
    return bool(actual == expected)


def _ordered(actual: Any, operand: Any, operator: str) -> bool:
    """``$gt`` and friends: numbers with numbers, strings with strings, else no match."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                  for v in (actual, operand))
    if not numbers and not (isinstance(actual, str) and isinstance(operand, str)):
        return False
    if operator == "$gt":
        return bool(actual > operand)
    if operator == "$gte":
        return bool(actual >= operand)
    if operator == "$lt":
        return bool(actual < operand)
    return bool(actual <= operand)


def _matches(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in expected):
            for operator, operand in expected.items():
                if operator == "$eq":
                    ok = _same(actual, operand)
                elif operator == "$ne":
                    ok = not _same(actual, operand)
                else:
                    ok = _ordered(actual, operand, operator)
                if not ok:
                    return False
            return True
        return isinstance(actual, dict) and all(
            _matches(actual.get(k), v) for k, v in expected.items())
    return _same(actual, expected)


def _query_words(query: str | None) -> frozenset[str]:
    return frozenset(query_terms(query)) if query else frozenset()


def _has_words(entry: _Entry, words: frozenset[str]) -> bool:
    return not words or words <= set(terms(fact_text("", entry.text)))


def _path_matches(kind: str, path: Sequence[str], namespace: tuple[str, ...]) -> bool:
    if len(namespace) < len(path):
        return False
    labels = namespace[:len(path)] if kind == "prefix" else namespace[len(namespace) - len(path):]
    return all(p == "*" or p == label for p, label in zip(path, labels, strict=True))


# --- checking ops before anything is read or written ---------------------------------------

def _as_namespace(value: object, field_name: str) -> tuple[str, ...]:
    if not isinstance(value, (tuple, list)):
        raise InvalidNamespaceError(
            f"{field_name} must be a tuple of strings, got {type(value).__name__}")
    return tuple(value)


def _count(value: object, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{field_name} must be a non-negative integer", field=field_name)
    return value


@dataclass(frozen=True, slots=True)
class _Put:
    """A checked PutOp: where it goes and what it stores (value None deletes)."""

    namespace: tuple[str, ...]
    subject: str
    key: str | None  # None: a key that cannot be stored, so a delete has nothing to do
    value: dict[str, Any] | None
    ttl: float | None


def _check_put(op: PutOp) -> _Put:
    namespace = _as_namespace(op.namespace, "namespace")
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if namespace[0] == _RESERVED_ROOT:
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {namespace}')
    subject = _subject(namespace)
    if subject is None:
        raise InvalidNamespaceError(
            f"Namespace {namespace} is too long to store: its labels joined with '.' must "
            f"take at most {MAX_NAME_CHARS} characters (with escapes)")
    if not isinstance(op.key, str):
        raise InvalidInput("key must be a string", field="key")
    key = _encode_text(op.key)
    if op.value is None:
        return _Put(namespace, subject, key, None, None)
    if key is None:
        raise InvalidInput(f"key must take at most {MAX_NAME_CHARS} characters (with escapes)",
                           field="key")
    if not isinstance(op.value, Mapping):
        raise InvalidInput("value must be a mapping with string keys (or None to delete)",
                           field="value")
    value = dict(op.value)
    encode_json(value, field="value")  # refuse what JSON cannot hold before writing anything
    ttl = op.ttl
    if ttl is not None:
        if (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl)
                or ttl <= 0):
            raise InvalidInput("ttl must be None or a positive number of minutes", field="ttl")
        ttl = float(ttl)
    return _Put(namespace, subject, key, value, ttl)


def _check(op: object) -> Op | _Put:
    """Check one op; a PutOp comes back as a :class:`_Put`."""
    if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
        raise ValueError(f"Unknown operation type: {type(op)}")
    if isinstance(op, (GetOp, PutOp)):
        _as_namespace(op.namespace, "namespace")
    elif isinstance(op, SearchOp):
        _as_namespace(op.namespace_prefix, "namespace_prefix")
    validate_op_namespace(op)
    if isinstance(op, PutOp):
        return _check_put(op)
    if isinstance(op, GetOp):
        if not isinstance(op.key, str):
            raise InvalidInput("key must be a string", field="key")
    elif isinstance(op, SearchOp):
        if op.filter is not None:
            if not isinstance(op.filter, Mapping):
                raise InvalidInput("filter must be a mapping", field="filter")
            _check_filter(op.filter)
        if op.query is not None and not isinstance(op.query, str):
            raise InvalidInput("query must be a string", field="query")
        _count(op.limit, "limit")
        _count(op.offset, "offset")
    else:
        for condition in op.match_conditions or ():
            if getattr(condition, "match_type", None) not in ("prefix", "suffix"):
                raise InvalidInput("match_type must be 'prefix' or 'suffix'",
                                   field="match_conditions")
            _as_namespace(condition.path, "path")
        if op.max_depth is not None and (isinstance(op.max_depth, bool)
                                         or not isinstance(op.max_depth, int)
                                         or op.max_depth < 1):
            raise InvalidInput("max_depth must be None or a positive integer",
                               field="max_depth")
        _count(op.limit, "limit")
        _count(op.offset, "offset")
    return op


def _check_ttl_config(ttl: TTLConfig | None) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise InvalidInput("ttl must be a TTLConfig mapping", field="ttl")
    default = ttl.get("default_ttl")
    if default is not None and (isinstance(default, bool)
                                or not isinstance(default, (int, float))
                                or not math.isfinite(default) or default <= 0):
        raise InvalidInput("default_ttl must be None or a positive number of minutes",
                           field="ttl")
    if not isinstance(ttl.get("refresh_on_read", True), bool):
        raise InvalidInput("refresh_on_read must be True or False", field="ttl")
    config: TTLConfig = {**ttl}
    return config


# --- the store ----------------------------------------------------------------------------

@dataclass(slots=True)
class _Batch:
    """What one batch shares: the memory store, its clock and the refreshes it owes."""

    memory: AsyncMemoryStore
    now: datetime
    page: int
    batch_items: int
    text_search: bool
    namespaces: list[tuple[str, ...]] | None = None
    refresh: dict[str, _Entry] = field(default_factory=dict)


class OwnstateStore(BridgedAdapter, BaseStore):
    """A LangGraph ``BaseStore`` whose items are facts in an ownstate memory store.

    Build it from a connected :class:`~ownstate.Client` or :class:`~ownstate.AsyncClient`
    (``OwnstateStore(client)``), or with :meth:`from_url`, and pass it to
    ``graph.compile(store=...)``. ``memory_store`` names the memory store that holds the
    items (created on first use); ``ttl`` is LangGraph's ``TTLConfig``: ``default_ttl``
    (minutes) applies to puts that give no ``ttl``, ``refresh_on_read`` is the default of
    ``refresh_ttl`` on get and search.

    Every op of a batch is checked before anything is read or written. Reads see the
    store as it was before the batch's puts; puts to the same (namespace, key) keep the
    last. The mapping, limits and costs are in ``docs/langgraph-store.md``.

    Raises (from every method): ``InvalidNamespaceError`` (an empty namespace label, one with
    ``"."``, an empty namespace or the root ``"langgraph"`` on put, a namespace too long
    to store), :class:`~ownstate.errors.InvalidInput` (a bad key, value, ttl, filter,
    limit or offset), :class:`~ownstate.errors.LimitExceeded` (a value larger than
    ``Limits.max_item_bytes``), :class:`~ownstate.errors.StoreNotFound` (the memory store
    was deleted while in use), :class:`~ownstate.errors.BackendUnavailable`.
    """

    supports_ttl: bool = True

    def __init__(self, client: Client | AsyncClient, *, memory_store: str = "langgraph",
                 ttl: TTLConfig | None = None) -> None:
        """Raises :class:`~ownstate.errors.InvalidInput` (a bad memory store name or ttl),
        ``TypeError`` (``client`` is no ownstate client)."""
        self._setup(Bridge(client), memory_store, ttl)

    @classmethod
    def from_url(cls, url: str | None = None, *, memory_store: str = "langgraph",
                 ttl: TTLConfig | None = None, **connect_args: Any) -> OwnstateStore:
        """A store over a client it opens on ``url`` (and closes with :meth:`close`);
        ``connect_args`` go to :func:`ownstate.connect`.

        Raises :class:`~ownstate.errors.InvalidInput` (a bad name, ttl or URL),
        :class:`~ownstate.errors.SchemaVersion`, :class:`~ownstate.errors.BackendUnavailable`.
        """
        store_name(memory_store)
        checked = _check_ttl_config(ttl)
        store = cls.__new__(cls)
        store._setup(Bridge.from_url(url, **connect_args), memory_store, checked)
        return store

    def _setup(self, bridge: Bridge, memory_store: str, ttl: TTLConfig | None) -> None:
        self.memory_store_name = store_name(memory_store)
        self.ttl_config = _check_ttl_config(ttl)
        self._bridge = bridge
        self._memory: AsyncMemoryStore | None = None

    def __repr__(self) -> str:
        return f"<OwnstateStore memory_store={self.memory_store_name!r}>"

    async def _batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order of kind (reads, then puts) and return one result per op.

        Raises as the class docstring says; a refused batch reads and writes nothing.
        """
        return await self._run([_check(op) for op in ops])

    batch = sync_twin(_batch)
    abatch = async_twin(_batch)

    # --- running a batch ------------------------------------------------------------------

    async def _memory_store(self) -> AsyncMemoryStore:
        if self._memory is None:
            self._memory = await ensure_store(self._bridge.client.memory_stores,
                                              self.memory_store_name)
        return self._memory

    async def _run(self, ops: list[Op | _Put]) -> list[Result]:
        try:
            return await self._run_on_store(ops)
        except StoreNotFound:
            self._memory = None  # deleted while in use: the next batch makes it anew
            raise

    async def _run_on_store(self, ops: list[Op | _Put]) -> list[Result]:
        client = self._bridge.client
        run = _Batch(memory=await self._memory_store(), now=_ids.now(),
                     page=client.limits.max_page_size,
                     batch_items=client.limits.max_batch_items,
                     text_search=Capability.TEXT_SEARCH in client.capabilities)
        results: list[Result] = [None] * len(ops)
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        if gets:
            await self._get(run, gets, results)
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                results[i] = await self._search(run, op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = await self._list_namespaces(run, op)
        if run.refresh:
            await self._write_refreshes(run)
        puts = [op for op in ops if isinstance(op, _Put)]
        if puts:
            await self._put(run, puts)
        return results

    async def _read(self, run: _Batch, subject: str,
                    keys: Sequence[str] | None = None) -> list[_Entry]:
        """The items of one namespace (only ``keys``, when given), expired ones included."""
        if keys is None:
            facts = await run.memory.recall(subject)
        else:
            facts = []
            for chunk in _chunks(sorted(set(keys)), run.page):
                facts += await run.memory.recall(subject, chunk)
        return [e for f in facts if (e := _entry(f)) is not None]

    async def _live(self, run: _Batch, entries: list[_Entry]) -> list[_Entry]:
        """``entries`` without the expired ones (reading the last refresh of those with a
        TTL)."""
        timed = [e for e in entries if e.ttl_minutes is not None]
        if timed:
            refreshed: dict[str, datetime] = {}
            ids = sorted({e.fact.fact_id for e in timed})
            for chunk in _chunks(ids, run.page):
                for fact in await run.memory.recall(_REFRESH_SUBJECT, chunk):
                    refreshed[fact.key] = fact.recorded_at
            for e in timed:
                e.refreshed_at = refreshed.get(e.fact.fact_id)
        return [e for e in entries if (end := e.expires_at()) is None or end > run.now]

    def _touch(self, run: _Batch, entry: _Entry) -> None:
        """Owe a refresh of ``entry``'s expiry, unless it was set a moment ago."""
        if entry.ttl_minutes is None:
            return
        since = (run.now - entry.expiry_set_at).total_seconds()
        if since >= entry.ttl_minutes * 60 * _REFRESH_AFTER:
            run.refresh[entry.fact.fact_id] = entry

    async def _write_refreshes(self, run: _Batch) -> None:
        # One refresh record per item version, keyed by its fact id: a put or delete that
        # races with the refresh makes a new version, which the record does not touch.
        records: list[Mapping[str, Any]] = [
            {"subject": _REFRESH_SUBJECT, "key": fact_id,
             "value": {"subject": e.fact.subject, "key": e.fact.key}}
            for fact_id, e in sorted(run.refresh.items())]
        for chunk in _chunks(records, run.batch_items):
            await run.memory.remember_many(chunk)

    async def _get(self, run: _Batch, gets: list[tuple[int, GetOp]],
                   results: list[Result]) -> None:
        wanted: dict[str, set[str]] = {}
        places: list[tuple[int, GetOp, str, str]] = []
        for i, op in gets:
            namespace = tuple(op.namespace)
            subject = _subject(namespace)
            key = _encode_text(op.key)
            if subject is None or key is None or _reserved(namespace):
                continue  # nothing can be stored there
            wanted.setdefault(subject, set()).add(key)
            places.append((i, op, subject, key))
        found: dict[tuple[str, str], _Entry] = {}
        for subject, keys in wanted.items():
            for e in await self._live(run, await self._read(run, subject, sorted(keys))):
                found[(e.fact.subject, e.fact.key)] = e
        for i, op, subject, key in places:
            entry = found.get((subject, key))
            if entry is not None:
                results[i] = entry.item()
                if op.refresh_ttl:
                    self._touch(run, entry)

    async def _known_namespaces(self, run: _Batch) -> list[tuple[str, ...]]:
        """Every namespace ever written, sorted (some may hold no live item now)."""
        if run.namespaces is None:
            found = {ns for f in await run.memory.recall(_INDEX_SUBJECT)
                     if (ns := _namespace(f.key)) is not None and not _reserved(ns)}
            run.namespaces = sorted(found)
        return run.namespaces

    async def _search(self, run: _Batch, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        if _reserved(prefix) or op.limit == 0:
            return []
        depth = len(prefix)
        namespaces = {ns for ns in await self._known_namespaces(run) if ns[:depth] == prefix}
        if prefix:
            namespaces.add(prefix)  # facts written by other means are not in the index
        subjects = {s for ns in namespaces if (s := _subject(ns)) is not None}
        words = _query_words(op.query)
        entries: list[_Entry] | None = None
        if words and run.text_search and len(words) <= _MAX_QUERY_WORDS:
            hits = await run.memory.search(" ".join(sorted(words)), limit=run.page)
            if len(hits) < run.page:  # complete: no match was cut off by the limit
                entries = [e for h in hits
                           if h.fact.subject in subjects and (e := _entry(h.fact)) is not None]
        if entries is None:
            entries = []
            for subject in sorted(subjects):
                entries += await self._read(run, subject)
        spec = op.filter or {}
        entries = [e for e in entries
                   if all(_matches(e.value.get(k), v) for k, v in spec.items())
                   and _has_words(e, words)]
        entries = await self._live(run, entries)
        entries.sort(key=lambda e: (e.namespace, e.key))
        entries.sort(key=lambda e: e.fact.recorded_at, reverse=True)
        page = entries[op.offset:op.offset + op.limit]
        if op.refresh_ttl:
            for e in page:
                self._touch(run, e)
        return [e.search_item() for e in page]

    async def _list_namespaces(self, run: _Batch,
                               op: ListNamespacesOp) -> list[tuple[str, ...]]:
        if op.limit == 0:
            return []
        conditions = op.match_conditions or ()
        wanted = op.offset + op.limit
        listed: list[tuple[str, ...]] = []
        for namespace in await self._known_namespaces(run):
            if not all(_path_matches(c.match_type, tuple(c.path), namespace)
                       for c in conditions):
                continue
            shown = namespace[:op.max_depth] if op.max_depth is not None else namespace
            if listed and listed[-1] == shown:
                continue  # sorted order keeps equal truncations together
            subject = _subject(namespace)
            if subject is None or not await self._live(run, await self._read(run, subject)):
                continue  # only deleted or expired items left
            listed.append(shown)
            if len(listed) >= wanted:
                break
        return listed[op.offset:wanted]

    async def _put(self, run: _Batch, puts: list[_Put]) -> None:
        last: dict[tuple[str, str | None], _Put] = {}
        for put in puts:
            last[(put.subject, put.key)] = put
        writes = [p for p in last.values() if p.value is not None and p.key is not None]
        deletes = [p for p in last.values() if p.value is None and p.key is not None]
        if writes:
            by_subject: dict[str, list[str]] = {}
            for p in writes:
                by_subject.setdefault(p.subject, []).append(p.key or "")
            previous: dict[tuple[str, str], _Entry] = {}
            for subject, keys in by_subject.items():
                for e in await self._live(run, await self._read(run, subject, keys)):
                    previous[(e.fact.subject, e.fact.key)] = e
            indexed: set[str] = set()
            for subjects in _chunks(sorted(by_subject), run.page):
                indexed |= {f.key for f in await run.memory.recall(_INDEX_SUBJECT, subjects)}
            facts: list[Mapping[str, Any]] = [
                {"subject": _INDEX_SUBJECT, "key": p.subject, "value": list(p.namespace)}
                for p in {p.subject: p for p in writes}.values() if p.subject not in indexed]
            for p in writes:
                wrapper: dict[str, Any] = {"value": p.value}
                before = previous.get((p.subject, p.key or ""))
                if before is not None:
                    wrapper["created_at"] = _ids.format_time(before.created_at)
                if p.ttl is not None:
                    wrapper["ttl_minutes"] = p.ttl
                facts.append({"subject": p.subject, "key": p.key, "value": wrapper})
            for chunk in _chunks(facts, run.batch_items):
                await run.memory.remember_many(chunk)
        for p in deletes:
            await run.memory.forget(p.subject, p.key or "", reason="deleted by LangGraph store")
