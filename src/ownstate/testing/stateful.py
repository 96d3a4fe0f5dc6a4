"""A model-based test of session stores, sessions and items.

A Hypothesis state machine drives the sync client with random sequences of calls (valid
and invalid) and keeps a plain-Python model of what must be stored: stores, their sessions
in creation order, each session's items, metadata, parent and root links, and the
idempotency keys it has seen. After every step the stored state must equal the model, and
every call the model says must be refused must raise exactly the documented error (and,
because the model did not change, must have changed nothing).

Each example gets a fresh, empty database derived from the target's URL by
:func:`fresh_url`. Small :class:`~ownstate.Limits` make the size bounds easy to reach.

It may touch the public sync API, the error tree and the targets, and Hypothesis; never a
backend directly.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import ownstate
from ownstate.errors import (
    AlreadyExists,
    HasChildren,
    IdempotencyKeyReused,
    InvalidInput,
    ItemNotFound,
    LimitExceeded,
    OwnstateError,
    SessionNotFound,
    StoreNotEmpty,
    StoreNotFound,
)

from .targets import Target

__all__ = ["SessionsMachine", "fresh_url", "test_sessions_state_machine"]

#: Bounds small enough for random batches and label sets to cross them.
LIMITS = ownstate.Limits(max_batch_items=4, max_item_bytes=4096, max_metadata_labels=3)

SETTINGS = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


def fresh_url(target: Target, directory: Path) -> str | None:
    """A URL for a new, empty database of the target's backend, where the URL can name one.

    ``sqlite:`` URLs get a new file in ``directory`` (options kept); ``memory:`` URLs get a
    new name. Any other URL (a server the target has prepared, with its own cleanup) comes
    back unchanged, and a target opened by a backend factory has none (None):
    :class:`SessionsMachine` also gives every example a tenant of its own, which isolates
    examples on any backend.
    """
    if target.url is None:
        return None
    parts = urlsplit(target.url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if scheme == "sqlite":
        path = directory.resolve() / f"{uuid.uuid4().hex}.db"
        return f"sqlite:///{path}" + (f"?{parts.query}" if parts.query else "")
    return target.url


def open_fresh(target: Target, directory: Path, **kwargs: Any) -> ownstate.Client:
    """A client on a new, empty database of the target (see :func:`fresh_url`), or through
    the target's own opener or backend factory when it has one (a server target gives each
    tenant a key)."""
    if target.opener is not None or target.backend is not None:
        return target.connect(**kwargs)
    return ownstate.connect(fresh_url(target, directory), **kwargs)


# -- the model -----------------------------------------------------------------------------


@dataclass
class ModelItem:
    data: dict[str, Any]
    format: str
    item_id: str


@dataclass
class ModelKey:
    """What an idempotency key was first used with."""

    signature: tuple[tuple[str, str], ...]
    item_ids: list[str]
    batch: list[dict[str, Any]]
    format: str | None


@dataclass
class ModelSession:
    actor_id: str
    parent: str | None
    root: str
    metadata: dict[str, str]
    items: list[ModelItem] = field(default_factory=list)
    keys: dict[str, ModelKey] = field(default_factory=dict)


#: store name -> session id -> session, both in creation order
ModelStores = dict[str, dict[str, ModelSession]]


def _json_text(value: Any) -> str:
    """The exact JSON text of ``value``: tells 1 from 1.0 and True, and sees key order."""
    return json.dumps(value, ensure_ascii=False)


def _mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` about four times in five, else ``rare``.

    ``usual`` sits at 0, the draw Hypothesis makes first and shrinks towards, so simple
    examples stay productive rather than spending their steps on refusals.
    """
    return st.integers(0, 4).flatmap(lambda n: rare if n == 4 else usual)


def _expected_format(data: dict[str, Any], fixed: str | None) -> str:
    if fixed is not None:
        return fixed
    shaped = data.get("type") in _TYPED_KINDS or ("role" in data and "content" in data)
    return "openai.responses" if shaped else "json"


def _signature(batch: list[dict[str, Any]], fixed: str | None) -> tuple[tuple[str, str], ...]:
    return tuple((_expected_format(d, fixed), _json_text(d)) for d in batch)


def _expect_refusal(
    refusals: Collection[type[OwnstateError]], call: Callable[[], object]
) -> OwnstateError:
    """Run ``call``, which must raise exactly one of ``refusals`` (not a subclass of one)."""
    names = sorted(r.__name__ for r in refusals)
    try:
        result = call()
    except OwnstateError as exc:
        if type(exc) not in refusals:
            raise AssertionError(
                f"expected one of {names}, got {type(exc).__name__}: {exc}") from exc
        return exc
    raise AssertionError(f"expected one of {names}, but the call returned {result!r}")


# -- what the machine generates -----------------------------------------------------------

VALID_STORE_NAMES = ["alpha", "beta-2", "gamma_3"]
INVALID_STORE_NAMES: list[Any] = ["ab", "Alpha", "a" * 56, "with space", "", "naïve", None, 42]
SESSION_IDS = ["s1", "s2", "case-456", "a.b:c@d"]
INVALID_SESSION_IDS: list[Any] = ["", "-lead", "has space", "x" * 129, 7]
ACTORS = ["customer-1", "customer-2", "ünïcode actor"]
INVALID_ACTORS: list[Any] = ["", "   ", "line\nbreak", None]
LABEL_KEYS = ["channel", "tier", "x.y/z:1", "lang"]
FORMATS = ["langchain", "adk.event", "json"]
IDEMPOTENCY_KEYS = ["k1", "k2"]
_TYPED_KINDS = ["message", "function_call", "reasoning"]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=5,
)
# plain objects never have the keys that make a shape recognisable ("k_" prefix)
plain_items = st.dictionaries(st.text(max_size=6).map(lambda k: f"k_{k}"), json_values,
                              max_size=4)
message_items = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system"]), "content": json_values})
typed_items = st.fixed_dictionaries(
    {"type": st.sampled_from(_TYPED_KINDS)}, optional={"k_payload": json_values})
items = st.one_of(plain_items, message_items, typed_items)
batches = st.lists(items, min_size=1, max_size=4)
formats = st.none() | st.none() | st.sampled_from(FORMATS)
label_values = st.text(max_size=8)
small_labels = st.dictionaries(st.sampled_from(LABEL_KEYS), label_values,
                              max_size=LIMITS.max_metadata_labels)
labels = _mostly(
    small_labels,
    st.dictionaries(st.sampled_from(LABEL_KEYS), label_values, min_size=4, max_size=4),
)
#: (argument of ``add``, a value it refuses, the error)
invalid_session_inputs = st.one_of(
    st.tuples(st.just("session_id"), st.sampled_from(INVALID_SESSION_IDS),
              st.just(InvalidInput)),
    st.tuples(st.just("actor_id"), st.sampled_from(INVALID_ACTORS), st.just(InvalidInput)),
    st.tuples(st.just("actor_id"), st.just("x" * 257), st.just(LimitExceeded)),
    st.tuples(st.just("metadata"), st.sampled_from(
        [{"bad key": "v"}, {"channel": 5}, {"": "v"}, ["not", "a", "map"]]),
        st.just(InvalidInput)),
    st.tuples(st.just("metadata"), st.just({"channel": "x" * 257}), st.just(LimitExceeded)),
)


@dataclass(frozen=True)
class InvalidAppend:
    """An append call with exactly one thing wrong, and the error that must refuse it."""

    items: Any
    format: str | None
    idempotency_key: str | None
    error: type[OwnstateError]


@st.composite
def invalid_appends(draw: st.DrawFn) -> InvalidAppend:
    good: list[Any] = draw(st.lists(items, max_size=LIMITS.max_batch_items - 1))
    at = draw(st.integers(0, len(good)))
    kind = draw(st.sampled_from(
        ["nan", "inf", "set", "bytes", "int-key", "not-dict", "empty", "too-many", "too-big",
         "not-a-list", "bad-format", "bad-key", "wide-int"]))
    if kind in {"nan", "inf", "set", "bytes", "int-key", "not-dict", "too-big", "wide-int"}:
        bad: Any = {
            # JSON would turn the key into "1": what is stored would not read back as given
            "int-key": {"k_bad": {1: "one"}},
            "nan": {"k_bad": [1, {"deep": float("nan")}]},
            "inf": {"k_bad": float("-inf")},
            "set": {"k_bad": {1, 2}},
            "bytes": {"k_bad": b"raw"},
            "not-dict": draw(st.sampled_from(["text", 5, ["a", "list"], None])),
            "too-big": {"k_big": "x" * (LIMITS.max_item_bytes + 1)},
            # stored JSON holds signed 64-bit integers only, alike on every backend
            "wide-int": {"k_bad": [draw(st.sampled_from([2**63, -(2**63) - 1, 2**70]))]},
        }[kind]
        error = LimitExceeded if kind == "too-big" else InvalidInput
        return InvalidAppend([*good[:at], bad, *good[at:]], None, None, error)
    if kind == "empty":
        return InvalidAppend([], None, None, InvalidInput)
    if kind == "too-many":
        too_many = [{"k_n": n} for n in range(LIMITS.max_batch_items + 1)]
        return InvalidAppend(too_many, None, None, LimitExceeded)
    if kind == "not-a-list":
        not_a_list = draw(st.sampled_from([{"k_a": 1}, "text", None]))
        return InvalidAppend(not_a_list, None, None, InvalidInput)
    batch = good or [{"k_a": 1}]
    if kind == "bad-format":
        return InvalidAppend(batch, "Not A Format", None, InvalidInput)
    bad_key = draw(st.sampled_from(["", "line\nbreak", "x" * 257]))
    return InvalidAppend(batch, None, bad_key,
                         LimitExceeded if len(bad_key) > 256 else InvalidInput)


# -- the machine --------------------------------------------------------------------------


class SessionsMachine(RuleBasedStateMachine):
    """Random calls on the sync client, checked step by step against a plain model.

    Subclass it with ``new_database`` set to a function returning the URL of a fresh, empty
    database; each example calls it once, and works in a tenant of its own there.
    """

    new_database: ClassVar[Callable[[], str | None]]

    def open_client(self, **kwargs: Any) -> ownstate.Client:
        """A client on a fresh database; override it where a URL alone cannot open one
        (a server, whose keys decide the tenant)."""
        return ownstate.connect(type(self).new_database(), **kwargs)

    def __init__(self) -> None:
        super().__init__()
        self.client = self.open_client(limits=LIMITS, tenant=f"machine-{uuid.uuid4().hex}")
        self.model: ModelStores = {}
        # every handle ever made, so calls on deleted things can be tried too
        self.store_handles: dict[str, ownstate.SessionStore] = {}
        self.session_handles: dict[tuple[str, str], ownstate.Session] = {}

    def teardown(self) -> None:
        self.client.close()

    # helpers ----------------------------------------------------------------------------

    def _session(self, key: tuple[str, str]) -> ModelSession | None:
        return self.model.get(key[0], {}).get(key[1])

    def live_sessions(self) -> list[tuple[str, str]]:
        """The (store, session id) of every session that exists, in creation order."""
        return [key for key in self.session_handles if self._session(key) is not None]

    def _pick_session(self, data: st.DataObject) -> tuple[str, str]:
        """A live session, often the newest or one with forks (so that forks of forks and
        deletes of whole trees happen); now and then any session ever made, deleted or not.

        Rules that call this have a live session as their precondition.
        """
        # creation order, not sorted: generated ids are random, and draws must replay
        live = self.live_sessions()
        parents = [key for key in live if any(
            s.parent == key[1] for s in self.model[key[0]].values())]
        way = data.draw(_mostly(st.sampled_from(["any-live", "newest", "parent"]), st.just("any")),
                        label="pick")
        if way == "any" or not live:
            return data.draw(st.sampled_from(list(self.session_handles)), label="session")
        if way == "newest":
            return live[-1]
        return data.draw(st.sampled_from(parents if way == "parent" and parents else live),
                         label="session")

    def _check_gone(self, store: str, session_ids: list[str]) -> None:
        """Handles on deleted sessions now answer SessionNotFound."""
        for session_id in session_ids:
            _expect_refusal({SessionNotFound}, self.session_handles[(store, session_id)].refresh)

    def _all_item_ids(self) -> list[str]:
        """Every stored item id, in a replayable order."""
        return [it.item_id for sessions in self.model.values()
                for s in sessions.values() for it in s.items]

    def _check_item(self, got: ownstate.Item, want: ModelItem, seq: int, session_id: str) -> None:
        assert got.item_id == want.item_id, (got.item_id, want.item_id)
        assert got.seq == seq, (got.seq, seq)
        assert got.session_id == session_id
        assert _json_text(got.data) == _json_text(want.data), (got.data, want.data)
        assert got.format == want.format, (got.format, want.format)
        if "role" in want.data and "content" in want.data:
            assert got.role == want.data["role"]

    # stores -----------------------------------------------------------------------------

    @precondition(lambda self: len(self.model) < len(VALID_STORE_NAMES))
    @rule(name=_mostly(st.sampled_from(VALID_STORE_NAMES), st.sampled_from(INVALID_STORE_NAMES)))
    def create_store(self, name: Any) -> None:
        self._create_store(name)

    def _create_store(self, name: Any) -> None:
        def call() -> ownstate.SessionStore:
            return self.client.session_stores.create(name)

        if name not in VALID_STORE_NAMES:
            _expect_refusal({InvalidInput}, call)
        elif name in self.model:
            _expect_refusal({AlreadyExists}, call)
        else:
            handle = call()
            assert handle.name == name
            self.model[name] = {}
            self.store_handles[name] = handle

    # forced deletes are kept rare: each one wipes out most of what an example has built
    @rule(data=st.data(), force=_mostly(st.just(False), st.just(True)))
    def delete_store(self, data: st.DataObject, force: bool) -> None:
        existing = st.sampled_from(list(self.model)) if self.model else st.nothing()
        name = data.draw(_mostly(existing, st.sampled_from(VALID_STORE_NAMES)
                                 | st.sampled_from(INVALID_STORE_NAMES)), label="name")

        def call() -> int:
            return self.client.session_stores.delete(name, force=force)

        if name not in VALID_STORE_NAMES:
            _expect_refusal({InvalidInput}, call)
        elif name not in self.model:
            _expect_refusal({StoreNotFound}, call)
        elif self.model[name] and not force:
            error = _expect_refusal({StoreNotEmpty}, call)
            assert error.details["sessions"] == len(self.model[name])
        else:
            assert call() == len(self.model[name])
            self._check_gone(name, list(self.model.pop(name)))
            _expect_refusal({StoreNotFound}, lambda: self.client.session_stores.get(name))

    # sessions ---------------------------------------------------------------------------

    # Hypothesis tends to repeat one rule for a run of steps, so examples start from a store
    # holding a session with history, rather than spending their steps getting there
    @initialize(session_id=st.none() | st.sampled_from(SESSION_IDS),
                actor=st.sampled_from(ACTORS), metadata=st.none() | small_labels,
                histories=st.lists(batches, min_size=1, max_size=3))
    def first_store_and_session(self, session_id: str | None, actor: str,
                                metadata: dict[str, str] | None,
                                histories: list[list[dict[str, Any]]]) -> None:
        store = VALID_STORE_NAMES[0]
        self._create_store(store)
        self._add_session(store, session_id, actor, metadata)
        for batch in histories:
            self._append(next(iter(self.session_handles)), batch, None, None)

    @rule(data=st.data(), session_id=st.none() | st.sampled_from(SESSION_IDS),
          actor=st.sampled_from(ACTORS), metadata=st.none() | labels,
          invalid=_mostly(st.none(), invalid_session_inputs))
    def add_session(self, data: st.DataObject, session_id: str | None, actor: str,
                    metadata: dict[str, str] | None,
                    invalid: tuple[str, Any, type[OwnstateError]] | None) -> None:
        store = data.draw(st.sampled_from(list(self.store_handles)), label="store")
        if invalid is None:
            self._add_session(store, session_id, actor, metadata)
            return
        kwargs: dict[str, Any] = {"actor_id": actor, "session_id": session_id,
                                  "metadata": metadata}
        argument, value, error = invalid
        kwargs[argument] = value
        # validation happens before the store is looked up, so even a deleted store's
        # handle must answer with the validation error
        _expect_refusal({error}, lambda: self.store_handles[store].add(**kwargs))

    def _add_session(self, store: str, session_id: str | None, actor: str,
                     metadata: dict[str, str] | None) -> None:
        handle = self.store_handles[store]

        def call() -> ownstate.Session:
            return handle.add(actor_id=actor, session_id=session_id, metadata=metadata)

        refusals: set[type[OwnstateError]] = set()
        if metadata is not None and len(metadata) > LIMITS.max_metadata_labels:
            refusals.add(LimitExceeded)
        if store not in self.model:
            refusals.add(StoreNotFound)
        elif session_id in self.model[store]:
            refusals.add(AlreadyExists)
        if refusals:
            _expect_refusal(refusals, call)
            return
        made = call()
        assert made.store == store
        assert made.actor_id == actor
        assert made.parent_session_id is None
        assert made.root_session_id == made.session_id
        assert made.metadata == (metadata or {})
        if session_id is not None:
            assert made.session_id == session_id
        else:
            assert made.session_id not in self.model[store]
        self.model[store][made.session_id] = ModelSession(
            actor_id=actor, parent=None, root=made.session_id, metadata=dict(metadata or {}))
        self.session_handles[(store, made.session_id)] = made

    @precondition(lambda self: self.live_sessions())
    @rule(data=st.data(), changes=st.dictionaries(
        st.sampled_from(LABEL_KEYS), _mostly(label_values, st.none()), min_size=1, max_size=4))
    def update_metadata(self, data: st.DataObject, changes: dict[str, str | None]) -> None:
        key = self._pick_session(data)
        handle, stored = self.session_handles[key], self._session(key)

        def call() -> ownstate.Session:
            return handle.update_metadata(changes)

        to_set = {k: v for k, v in changes.items() if v is not None}
        merged = dict(stored.metadata) if stored is not None else {}
        for k, v in changes.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        refusals: set[type[OwnstateError]] = set()
        if len(to_set) > LIMITS.max_metadata_labels:
            refusals.add(LimitExceeded)
        if stored is None:
            refusals.add(SessionNotFound)
        elif len(merged) > LIMITS.max_metadata_labels:
            refusals.add(LimitExceeded)
        if refusals:
            _expect_refusal(refusals, call)
            return
        assert stored is not None
        assert call().metadata == merged
        stored.metadata = merged

    @precondition(lambda self: self.live_sessions())
    @rule(data=st.data(), up_to=_mostly(st.sampled_from(["none", "own"]),
                                        st.sampled_from(["other", "unknown", "empty"])),
          child_id=st.none() | st.sampled_from([*SESSION_IDS, "-invalid"]))
    def fork(self, data: st.DataObject, up_to: str, child_id: str | None) -> None:
        # half the time fork the newest session, which is often a fork: trees grow deep
        chain = data.draw(st.booleans(), label="fork the newest")
        key = self.live_sessions()[-1] if chain else self._pick_session(data)
        store, parent_id = key
        handle, parent = self.session_handles[key], self._session(key)
        up_to_item_id: str | None = None
        own_ids = [it.item_id for it in parent.items] if parent is not None else []
        if up_to == "own" and own_ids:
            up_to_item_id = data.draw(st.sampled_from(own_ids), label="up_to_item_id")
        elif up_to == "other":
            others = [i for i in self._all_item_ids() if i not in own_ids]
            up_to_item_id = data.draw(st.sampled_from(others)) if others else "itm_gone"
        elif up_to == "unknown":
            up_to_item_id = "itm_" + "0" * 32
        elif up_to == "empty":
            up_to_item_id = ""

        def call() -> ownstate.Session:
            return handle.fork(up_to_item_id=up_to_item_id, session_id=child_id)

        refusals: set[type[OwnstateError]] = set()
        if child_id == "-invalid" or up_to_item_id == "":
            refusals.add(InvalidInput)
        if parent is None:
            refusals.add(SessionNotFound)
        else:
            if up_to_item_id is not None and up_to_item_id not in own_ids:
                refusals.add(ItemNotFound)
            if child_id in self.model[store]:
                refusals.add(AlreadyExists)
        if refusals:
            _expect_refusal(refusals, call)
            return
        assert parent is not None
        child = call()
        assert child.store == store
        assert child.parent_session_id == parent_id
        assert child.root_session_id == parent.root
        assert child.actor_id == parent.actor_id
        assert child.metadata == parent.metadata
        if child_id is not None:
            assert child.session_id == child_id
        assert child.session_id not in self.model[store]
        cut = len(parent.items) if up_to_item_id is None else own_ids.index(up_to_item_id) + 1
        copied = child.list_items(order_by="create_time asc")
        fresh_ids = [it.item_id for it in copied]
        assert len(fresh_ids) == cut
        assert not set(fresh_ids) & set(self._all_item_ids()), "fork reused item ids"
        self.model[store][child.session_id] = ModelSession(
            actor_id=parent.actor_id, parent=parent_id, root=parent.root,
            metadata=dict(parent.metadata),
            items=[ModelItem(it.data, it.format, new_id)
                   for it, new_id in zip(parent.items[:cut], fresh_ids, strict=True)])
        self.session_handles[(store, child.session_id)] = child

    @precondition(lambda self: self.live_sessions())
    @rule(data=st.data(), force=st.booleans())
    def delete_session(self, data: st.DataObject, force: bool) -> None:
        # half the time the oldest session with forks, usually the root of the deepest tree
        parents = [key for key in self.live_sessions()
                   if any(s.parent == key[1] for s in self.model[key[0]].values())]
        oldest_parent = data.draw(st.booleans(), label="oldest parent") and parents
        key = parents[0] if oldest_parent else self._pick_session(data)
        store, session_id = key
        handle, stored = self.session_handles[key], self._session(key)

        def call() -> int:
            return handle.delete(force=force)

        if stored is None:
            _expect_refusal({SessionNotFound}, call)
            return
        sessions = self.model[store]
        children = [sid for sid, s in sessions.items() if s.parent == session_id]
        if children and not force:
            error = _expect_refusal({HasChildren}, call)
            named = error.details["children"]
            assert isinstance(named, list)
            assert sorted(named) == sorted(children)
            return
        doomed = [session_id]
        for doomed_id in doomed:
            doomed.extend(sid for sid, s in sessions.items() if s.parent == doomed_id)
        assert call() == len(doomed)
        for doomed_id in doomed:
            del sessions[doomed_id]
        self._check_gone(store, doomed)

    @rule(data=st.data(), actor=st.none() | st.sampled_from(ACTORS),
          wanted=st.dictionaries(st.sampled_from(LABEL_KEYS), st.text(max_size=8),
                                 max_size=2))
    def query_sessions(self, data: st.DataObject, actor: str | None,
                       wanted: dict[str, str]) -> None:
        store = data.draw(st.sampled_from(list(self.store_handles)), label="store")
        handle = self.store_handles[store]
        if store not in self.model:
            _expect_refusal({StoreNotFound}, lambda: list(handle.list_sessions()))
            return
        expected = [
            sid for sid, s in self.model[store].items()
            if (actor is None or s.actor_id == actor)
            and all(s.metadata.get(k) == v for k, v in wanted.items())
        ]
        for order in ("create_time asc", "create_time desc"):
            found = [s.session_id for s in handle.list_sessions(
                actor_id=actor, metadata=wanted, order_by=order, page_size=2)]
            assert found == (expected if order.endswith("asc") else expected[::-1]), order

    # items ------------------------------------------------------------------------------

    def _append(self, key: tuple[str, str], batch: list[dict[str, Any]], fixed: str | None,
                idempotency_key: str | None) -> None:
        handle, stored = self.session_handles[key], self._session(key)

        def call() -> list[ownstate.Item]:
            return handle.append_items(batch, idempotency_key=idempotency_key, format=fixed)

        if stored is None:
            _expect_refusal({SessionNotFound}, call)
            return
        signature = _signature(batch, fixed)
        seen = stored.keys.get(idempotency_key) if idempotency_key is not None else None
        if seen is not None and seen.signature != signature:
            error = _expect_refusal({IdempotencyKeyReused}, call)
            assert error.details["idempotency_key"] == idempotency_key
            return
        result = call()
        if seen is not None:
            # a replay writes nothing and returns the first call's items still stored
            wanted = [(n, it) for n, it in enumerate(stored.items, 1)
                      if it.item_id in seen.item_ids]
            assert len(result) == len(wanted)
            for got, (seq, want) in zip(result, wanted, strict=True):
                self._check_item(got, want, seq, key[1])
            return
        assert len(result) == len(batch)
        first = len(stored.items) + 1
        for n, (got, data) in enumerate(zip(result, batch, strict=True)):
            want = ModelItem(data, _expected_format(data, fixed), got.item_id)
            self._check_item(got, want, first + n, key[1])
            stored.items.append(want)
        if idempotency_key is not None:
            stored.keys[idempotency_key] = ModelKey(
                signature, [it.item_id for it in result], batch, fixed)

    # Everything is drawn inside, so this is the one rule with a single argument: Hypothesis
    # orders rules by how many arguments they take and tries the first one most often.
    @precondition(lambda self: self.live_sessions())
    @rule(data=st.data())
    def append_items(self, data: st.DataObject) -> None:
        key = self._pick_session(data)
        batch = data.draw(batches, label="batch")
        fixed = data.draw(formats, label="format")
        idempotency_key = data.draw(st.none() | st.sampled_from(IDEMPOTENCY_KEYS),
                                    label="idempotency_key")
        invalid: InvalidAppend | None = data.draw(_mostly(st.none(), invalid_appends()),
                                                  label="invalid")
        if invalid is None:
            self._append(key, batch, fixed, idempotency_key)
            return
        refusals: set[type[OwnstateError]] = {invalid.error}
        if self._session(key) is None:
            refusals.add(SessionNotFound)
        _expect_refusal(refusals, lambda: self.session_handles[key].append_items(
            invalid.items, idempotency_key=invalid.idempotency_key, format=invalid.format))

    @precondition(lambda self: any(s.keys for ss in self.model.values() for s in ss.values()))
    @rule(data=st.data(), tamper=_mostly(st.none(), st.sampled_from(
        ["add-item", "change-value", "reorder-keys", "change-format"])))
    def retry_append(self, data: st.DataObject, tamper: str | None) -> None:
        """Send a keyed append again, as first sent (a replay) or changed (a conflict)."""
        keyed = [(store, sid, k) for store, ss in self.model.items()
                 for sid, s in ss.items() for k in s.keys]
        store, sid, idempotency_key = data.draw(st.sampled_from(keyed), label="retry")
        first = self.model[store][sid].keys[idempotency_key]
        batch: list[dict[str, Any]] = json.loads(json.dumps(first.batch))
        fixed = first.format
        if tamper == "add-item" and len(batch) < LIMITS.max_batch_items:
            batch.append({"k_extra": True})
        elif tamper == "change-value":
            batch[-1] = {**batch[-1], "k_changed": 1}
        elif tamper == "reorder-keys":
            # the same object with its keys in another order is another request body
            batch[0] = dict(reversed(batch[0].items()))
        elif tamper == "change-format":
            fixed = "langchain" if fixed != "langchain" else "adk.event"
        self._append((store, sid), batch, fixed, idempotency_key)

    @precondition(lambda self: self.live_sessions())
    @rule(data=st.data(), clear=_mostly(st.just(False), st.just(True)))
    def pop_item_or_clear(self, data: st.DataObject, clear: bool) -> None:
        key = self._pick_session(data)
        handle, stored = self.session_handles[key], self._session(key)
        if stored is None:
            _expect_refusal({SessionNotFound}, handle.clear if clear else handle.pop_item)
            return
        if clear:
            assert handle.clear() == len(stored.items)
            stored.items.clear()
            return
        popped = handle.pop_item()
        if not stored.items:
            assert popped is None
            return
        assert popped is not None
        self._check_item(popped, stored.items[-1], len(stored.items), key[1])
        stored.items.pop()

    @precondition(lambda self: self.live_sessions())
    @rule(data=st.data(), which=_mostly(st.just("own"),
                                        st.sampled_from(["other", "unknown", "empty"])))
    def get_item(self, data: st.DataObject, which: str) -> None:
        key = self._pick_session(data)
        handle, stored = self.session_handles[key], self._session(key)
        own = stored.items if stored is not None else []
        if which == "own" and own:
            seq = data.draw(st.integers(1, len(own)), label="seq")
            got = handle.get_item(own[seq - 1].item_id)
            self._check_item(got, own[seq - 1], seq, key[1])
            return
        item_id = "" if which == "empty" else "itm_" + "f" * 32
        if which == "other":
            others = [i for i in self._all_item_ids() if i not in {it.item_id for it in own}]
            item_id = data.draw(st.sampled_from(others)) if others else item_id
        refusals: set[type[OwnstateError]] = {InvalidInput} if item_id == "" else set()
        refusals.add(SessionNotFound if stored is None else ItemNotFound)
        _expect_refusal(refusals, lambda: handle.get_item(item_id))

    # invariants -------------------------------------------------------------------------

    @invariant()
    def stored_state_matches_model(self) -> None:
        stores = [s.name for s in self.client.session_stores.list(page_size=2)]
        assert stores == sorted(self.model), (stores, sorted(self.model))
        for name, sessions in self.model.items():
            listed = list(self.store_handles[name].list_sessions(order_by="create_time asc"))
            assert [s.session_id for s in listed] == list(sessions), name
            for handle in listed:
                want = sessions[handle.session_id]
                record = handle.record
                assert record.store == name
                assert record.actor_id == want.actor_id
                assert record.parent_session_id == want.parent
                assert record.root_session_id == want.root
                assert record.metadata == want.metadata
                assert record.last_activity_time >= record.create_time
                replay = list(handle.list_items(order_by="create_time asc", page_size=3))
                assert [it.seq for it in replay] == list(range(1, len(want.items) + 1))
                for seq, (got, item) in enumerate(zip(replay, want.items, strict=True), 1):
                    self._check_item(got, item, seq, handle.session_id)
                newest_first = [it.item_id for it in handle.list_items()]
                assert newest_first == [it.item_id for it in reversed(want.items)]


def test_sessions_state_machine(target: Target, tmp_path: Path) -> None:
    """Random call sequences agree with the model on the target backend."""
    directory = tmp_path / "state-machine"
    directory.mkdir()

    class OnTarget(SessionsMachine):
        new_database = staticmethod(lambda: fresh_url(target, directory))

        def open_client(self, **kwargs: Any) -> ownstate.Client:
            return open_fresh(target, directory, **kwargs)

    run_state_machine_as_test(OnTarget, settings=SETTINGS)
