"""Conformance tests for memory stores and facts over time: stores, remembering, recall
and history, provenance, the two time axes, and forgetting; with the controlled ``clock``
and the ``memory`` fixture the other memory tests share. Star-imported by :mod:`.memory`.

Most tests run on a controlled clock (the ``clock`` fixture), which replaces the time the
public API stamps writes with, so that record times are exact and distinct.

It may touch the public sync API (``ownstate``, ``ownstate.api.sync``), ids (the controlled
clock), the backends' capability flags (names only), the error tree, the model, the shared
fixtures and targets, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

import json
import math
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import ownstate
from ownstate import _ids
from ownstate.api.sync import MemoryStore
from ownstate.backends.base import Capability
from ownstate.errors import (
    FactNotFound,
    InvalidInput,
    ItemNotFound,
    LimitExceeded,
    NotFound,
    StoreNotFound,
)
from ownstate.model import Fact

from .fixtures import *
from .fixtures import check_store_kind, check_store_lifecycle, snapshot
from .targets import Target

Client = ownstate.Client

#: a fixed origin for valid times, long before the controlled clock starts
BASE = datetime(2020, 1, 1, tzinfo=UTC)
#: where the controlled clock starts
START = datetime(2030, 1, 1, tzinfo=UTC)


def _day(n: float) -> datetime:
    return BASE + timedelta(days=n)


class Clock:
    """The time the public API stamps writes with: moves one millisecond per reading, and
    can be moved on explicitly."""

    def __init__(self, start: datetime) -> None:
        self._lock = threading.Lock()
        self._now = start

    def __call__(self) -> datetime:
        with self._lock:
            self._now += timedelta(milliseconds=1)
            return self._now

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._now += delta

    def peek(self) -> datetime:
        """The time the next reading will give."""
        with self._lock:
            return self._now + timedelta(milliseconds=1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Control the API's clock (``ownstate._ids.now``) for the duration of a test."""
    controlled = Clock(START)
    monkeypatch.setattr(_ids, "now", controlled)
    return controlled


@pytest.fixture
def memory(client: Client, clock: Clock) -> MemoryStore:
    """A memory store on the test's client, with the clock controlled."""
    return client.memory_stores.create("support-memory")


def facts_snapshot(client: Client, *subjects: str) -> dict[str, Any]:
    """What the tenant stores about ``subjects`` (facts and their sessions), and the memory
    and session stores it has, as plain data, to prove an error changed nothing."""
    state: dict[str, Any] = {"memory_stores": [m.name for m in client.memory_stores.list()],
                             "sessions": snapshot(client)}
    for subject in subjects:
        exported = client.memory_stores.export_subject(subject)
        del exported["exported_at"]
        state[subject] = exported
    return state


def _values(facts: list[Fact]) -> dict[str, Any]:
    return {f.key: f.value for f in facts}


# memory stores -----------------------------------------------------------------------


def test_memory_store_create_get_list_delete(client: Client) -> None:
    check_store_lifecycle(client.memory_stores, "support-memory")
    with pytest.raises(StoreNotFound):
        client.memory_stores.delete("support-memory")


@pytest.mark.parametrize("name", ["ab", "x" * 56, "Upper", "has space", "dots.bad", "", 7])
def test_memory_store_bad_names_are_refused(client: Client, name: Any) -> None:
    with pytest.raises(InvalidInput):
        client.memory_stores.create(name)
    with pytest.raises(InvalidInput):
        client.memory_stores.get(name)
    assert list(client.memory_stores.list()) == []


def test_memory_store_names_are_unique_and_list_in_order(client: Client) -> None:
    check_store_kind(client.memory_stores, "mem")
    with pytest.raises(InvalidInput):
        client.memory_stores.list_page(page_token="not-a-token")
    client.session_stores.create("aaa-sessions")
    client.session_stores.create("bbb-sessions")
    foreign = client.session_stores.list_page(page_size=1)
    assert foreign.next_page_token is not None
    with pytest.raises(InvalidInput):
        client.memory_stores.list_page(page_token=foreign.next_page_token)


def test_memory_and_session_stores_are_separate(client: Client, memory: MemoryStore) -> None:
    sessions = client.session_stores.create(memory.name)  # same name, other kind
    session = sessions.add(actor_id="user:8814")
    (item,) = session.append_items([{"role": "user", "content": "email me"}])
    fact = memory.remember("user:8814", "channel", "email", source=item)
    assert client.session_stores.delete(memory.name, force=True) == 1
    assert memory.recall("user:8814") == [fact]
    assert memory.explain(fact.fact_id).source_item is None
    assert [m.name for m in client.memory_stores.list()] == [memory.name]
    assert list(client.session_stores.list()) == []


def test_deleting_a_session_never_touches_facts(client: Client, memory: MemoryStore,
                                                session: ownstate.Session) -> None:
    (item,) = session.append_items([{"role": "user", "content": "call me"}])
    fact = memory.remember("user:8814", "channel", "phone", source=item)
    assert memory.explain(fact.fact_id).source_item == item
    session.delete()
    assert memory.get(fact.fact_id) == fact
    explained = memory.explain(fact.fact_id)
    assert explained.fact == fact
    assert explained.source_item is None
    assert (fact.source_session_id, fact.source_item_id) == (session.session_id, item.item_id)


def test_deleting_a_memory_store_deletes_its_facts(client: Client, memory: MemoryStore) -> None:
    other = client.memory_stores.create("other-memory")
    memory.remember("user:1", "a", 1)
    memory.remember("user:1", "a", 2)
    memory.remember("user:2", "b", 3)
    kept = other.remember("user:1", "a", "kept")
    assert client.memory_stores.delete(memory.name) == 3
    with pytest.raises(StoreNotFound):
        memory.recall("user:1")
    with pytest.raises(StoreNotFound):
        memory.remember("user:1", "a", 4)
    again = client.memory_stores.create(memory.name)
    assert again.recall("user:1") == []
    assert again.history("user:1", "a") == []
    assert other.recall("user:1") == [kept]


def test_subjects_are_listed_in_order_a_page_at_a_time(
        client: Client, other_tenant: Client, memory: MemoryStore) -> None:
    """A store lists the subjects that have facts in it, each once, in subject order; a
    forgotten subject stays listed (its facts are closed, not deleted), an erased one
    does not. Other stores and other tenants list their own."""
    assert memory.subjects().items == []
    subjects = [f"user:{n}" for n in (5, 1, 4, 2, 3)]
    for subject in subjects:
        memory.remember(subject, "plan", "pro")
        memory.remember(subject, "plan", "team")
    memory.remember("user:1", "tz", "UTC")
    other = client.memory_stores.create("other-memory")
    other.remember("user:9", "plan", "free")
    other.remember("user:8", "plan", "free")
    other_tenant.memory_stores.create(memory.name).remember("user:0", "plan", "free")

    first = memory.subjects(page_size=2)
    assert first.items == ["user:1", "user:2"]
    second = memory.subjects(page_size=2, page_token=first.next_page_token)
    third = memory.subjects(page_size=2, page_token=second.next_page_token)
    assert second.items + third.items == ["user:3", "user:4", "user:5"]
    assert third.next_page_token is None
    assert memory.subjects_after(after="user:3", limit=1) == ["user:4"]
    assert other.subjects().items == ["user:8", "user:9"]
    assert other_tenant.memory_stores.get(memory.name).subjects().items == ["user:0"]

    memory.forget("user:2", "plan")
    memory.erase_subject("user:3")
    assert memory.subjects().items == ["user:1", "user:2", "user:4", "user:5"]

    with pytest.raises(InvalidInput) as err:
        memory.subjects(page_token="not-a-token")
    assert err.value.field == "page_token"
    with pytest.raises(InvalidInput):  # a token of another store's listing
        memory.subjects(page_token=other.subjects(page_size=1).next_page_token)
    with pytest.raises(LimitExceeded):
        memory.subjects(page_size=0)
    client.memory_stores.delete("other-memory")
    with pytest.raises(StoreNotFound):
        other.subjects()
    with pytest.raises(StoreNotFound):
        other.subjects_after()


# remember, recall, history -------------------------------------------------------------


def test_remember_records_a_current_fact(memory: MemoryStore, clock: Clock) -> None:
    at = clock.peek()
    fact = memory.remember("user:8814", "preferred_channel", "email", confidence=0.9)
    assert fact.fact_id
    assert (fact.memory_store, fact.subject, fact.key) == (memory.name, "user:8814",
                                                          "preferred_channel")
    assert (fact.value, fact.confidence, fact.source_type) == ("email", 0.9, "agent")
    assert (fact.source_store, fact.source_session_id, fact.source_item_id) == (None,) * 3
    # A server stamps the time with the same (test) clock, read once more on its side.
    assert fact.valid_from == fact.recorded_at >= at
    assert (fact.valid_to, fact.superseded_at, fact.supersedes, fact.closed_reason) == (None,) * 4
    assert memory.recall("user:8814") == [fact]
    assert memory.history("user:8814", "preferred_channel") == [fact]
    assert memory.get(fact.fact_id) == fact


def test_remembering_again_supersedes_and_keeps_history(memory: MemoryStore) -> None:
    first = memory.remember("user:8814", "channel", "email")
    second = memory.remember("user:8814", "channel", "sms", source_type="user")
    assert second.supersedes == first.fact_id
    closed = memory.get(first.fact_id)
    assert closed.superseded_at == second.recorded_at
    assert closed.valid_to == second.valid_from
    assert closed.closed_reason == "superseded"
    assert closed.value == "email"
    assert memory.recall("user:8814") == [second]
    assert memory.history("user:8814", "channel") == [closed, second]


def test_recall_is_per_key_ordered_and_filtered(memory: MemoryStore) -> None:
    memory.remember("user:1", "timezone", "UTC")
    memory.remember("user:1", "channel", "email")
    memory.remember("user:1", "name", "Ada")
    memory.remember("user:2", "channel", "sms")
    memory.remember("user:1", "timezone", "CET")
    assert [(f.key, f.value) for f in memory.recall("user:1")] == [
        ("channel", "email"), ("name", "Ada"), ("timezone", "CET")]
    assert _values(memory.recall("user:1", ["timezone", "channel", "missing"])) == {
        "channel": "email", "timezone": "CET"}
    assert _values(memory.recall("user:1", keys=("name", "name"))) == {"name": "Ada"}
    assert memory.recall("user:1", keys=[]) == []
    assert memory.recall("user:3") == []
    assert memory.history("user:1", "missing") == []


def test_values_are_any_json_stored_exactly(memory: MemoryStore) -> None:
    values: list[Any] = [
        {"nested": {"list": [1, 2.5, None, True], "text": "caf\u00e9 \U0001f600"}},
        [1, "two", {"3": []}],
        "plain",
        0,
        -1.25,
        True,
        None,
        "",
        {},
    ]
    for n, value in enumerate(values):
        memory.remember("user:json", f"k{n}", value)
    recalled = memory.recall("user:json")
    assert [f.value for f in sorted(recalled, key=lambda f: int(f.key[1:]))] == values
    for fact in recalled:
        assert json.dumps(fact.value) == json.dumps(memory.get(fact.fact_id).value)


def test_stored_values_are_immutable(memory: MemoryStore) -> None:
    value: dict[str, Any] = {"tags": ["original"]}
    fact = memory.remember("user:1", "profile", value)
    value["tags"].append("changed after remember")
    fact.value["tags"].append("changed through result")
    memory.recall("user:1")[0].value["tags"].append("changed through recall")
    assert memory.get(fact.fact_id).value == {"tags": ["original"]}


def test_confidence_bounds(memory: MemoryStore) -> None:
    assert memory.remember("user:1", "a", 1, confidence=0).confidence == 0
    assert memory.remember("user:1", "b", 1, confidence=1).confidence == 1
    assert memory.remember("user:1", "c", 1, confidence=None).confidence is None
    assert memory.recall("user:1", ["a"])[0].confidence == 0.0


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("subject", {"subject": ""}),
        ("subject", {"subject": "   "}),
        ("subject", {"subject": "x" * 257}),
        ("subject", {"subject": "tab\there"}),
        ("subject", {"subject": 8814}),
        ("key", {"key": ""}),
        ("key", {"key": "k" * 257}),
        ("key", {"key": None}),
        ("value", {"value": float("nan")}),
        ("value", {"value": float("inf")}),
        ("value", {"value": {1, 2}}),
        ("value", {"value": b"bytes"}),
        ("value", {"value": object()}),
        ("value", {"value": {"when": datetime(2024, 1, 1, tzinfo=UTC)}}),
        ("confidence", {"confidence": -0.01}),
        ("confidence", {"confidence": 1.01}),
        ("confidence", {"confidence": math.nan}),
        ("confidence", {"confidence": math.inf}),
        ("confidence", {"confidence": True}),
        ("confidence", {"confidence": "0.5"}),
        ("source_type", {"source_type": "robot"}),
        ("source_type", {"source_type": None}),
        ("valid_from", {"valid_from": datetime(2024, 1, 1)}),
        ("valid_from", {"valid_from": "2024-01-01T00:00:00Z"}),
        ("valid_from", {"valid_from": datetime(999, 1, 1, tzinfo=UTC)}),
        ("source", {"source": "itm_123"}),
        ("source", {"source": ("store", "session")}),
        ("source", {"source": ("store", "", "itm_1")}),
        ("source", {"source": {"item_id": "itm_1"}}),
    ],
)
def test_bad_input_is_refused_and_nothing_changes(client: Client, memory: MemoryStore,
                                                  field: str, kwargs: dict[str, Any]) -> None:
    memory.remember("user:8814", "channel", "email")
    before = facts_snapshot(client, "user:8814")
    call: dict[str, Any] = {"subject": "user:8814", "key": "channel", "value": "sms"}
    call.update(kwargs)
    with pytest.raises(InvalidInput) as err:
        memory.remember(call.pop("subject"), call.pop("key"), call.pop("value"), **call)
    assert err.value.field == field
    assert facts_snapshot(client, "user:8814") == before


def test_value_size_is_bounded(make_client: Any, clock: Clock) -> None:
    client = make_client(limits=ownstate.Limits(max_item_bytes=100, max_batch_items=3))
    memory = client.memory_stores.create("bounded")
    memory.remember("user:1", "note", "x" * 90)
    before = facts_snapshot(client, "user:1")
    with pytest.raises(LimitExceeded) as err:
        memory.remember("user:1", "note", "x" * 99)
    assert (err.value.field, err.value.limit, err.value.actual) == ("value", 100, 101)
    with pytest.raises(LimitExceeded):
        memory.remember("user:1", "note", "\u00e9" * 50)  # 100 bytes of UTF-8 plus quotes
    with pytest.raises(LimitExceeded) as err:
        memory.remember_many([{"subject": "user:1", "key": f"k{n}", "value": n}
                              for n in range(4)])
    assert (err.value.field, err.value.limit) == ("facts", 3)
    assert facts_snapshot(client, "user:1") == before


def test_naive_and_aware_times_in_queries(memory: MemoryStore) -> None:
    memory.remember("user:1", "a", 1, valid_from=_day(0))
    with pytest.raises(InvalidInput) as err:
        memory.recall("user:1", as_of=datetime(2024, 1, 1))
    assert err.value.field == "as_of"
    with pytest.raises(InvalidInput) as err:
        memory.recall("user:1", known_at=datetime(2024, 1, 1))
    assert err.value.field == "known_at"
    with pytest.raises(InvalidInput) as err:
        memory.recall("user:1", keys="a")
    assert err.value.field == "keys"
    with pytest.raises(InvalidInput):
        memory.recall("user:1", keys=["a", ""])
    with pytest.raises(InvalidInput):
        memory.recall("")
    plus_two = timezone(timedelta(hours=2))
    fact = memory.remember("user:1", "b", 2,
                           valid_from=datetime(2020, 1, 2, 2, 0, tzinfo=plus_two))
    assert fact.valid_from == _day(1)
    assert fact.valid_from.utcoffset() == timedelta(0)
    assert memory.get(fact.fact_id).valid_from == _day(1)
    assert _values(memory.recall("user:1", as_of=datetime(2020, 1, 2, 1, 59, 59,
                                                         tzinfo=plus_two))) == {"a": 1}


# provenance ----------------------------------------------------------------------------


def test_source_item_gives_provenance(client: Client, memory: MemoryStore,
                                      session: ownstate.Session) -> None:
    first, second = session.append_items([
        {"role": "user", "content": "Please email me"},
        {"role": "user", "content": "Actually, text me"},
    ])
    by_item = memory.remember("user:8814", "channel", "email", source=first,
                              source_type="user")
    assert (by_item.source_store, by_item.source_session_id, by_item.source_item_id) == (
        session.store, session.session_id, first.item_id)
    by_tuple = memory.remember("user:8814", "channel", "sms",
                               source=(session.store, session.session_id, second.item_id))
    assert by_tuple.source_item_id == second.item_id
    assert by_tuple.source_store == session.store
    explained = memory.explain(by_tuple.fact_id)
    assert explained.fact == by_tuple
    assert explained.superseded == memory.get(by_item.fact_id)
    assert explained.superseded_by is None
    assert explained.source_item == second
    assert explained.source_item is not None
    assert explained.source_item.data == {"role": "user", "content": "Actually, text me"}
    older = memory.explain(by_item.fact_id)
    assert older.superseded is None
    assert older.superseded_by == by_tuple
    assert older.source_item == first


def test_unknown_source_item_is_refused_and_nothing_changes(
        client: Client, memory: MemoryStore, session: ownstate.Session) -> None:
    (item, popped) = session.append_items([{"role": "user", "content": "hi"},
                                           {"role": "user", "content": "popped"}])
    assert session.pop_item() == popped
    other = client.session_stores.get(session.store).add(actor_id="someone")
    memory.remember("user:8814", "channel", "email")
    before = facts_snapshot(client, "user:8814")
    refused: list[Any] = [
        (session.store, session.session_id, "itm_missing"),
        (session.store, other.session_id, item.item_id),  # the item is in another session
        ("no-such-store", session.session_id, item.item_id),
        (session.store, "no-such-session", item.item_id),
    ]
    for source in refused:
        with pytest.raises(ItemNotFound) as err:
            memory.remember("user:8814", "channel", "sms", source=source)
        assert err.value.item_id == source[2]
    moved = ownstate.Item(item.item_id, other.session_id, item.seq, item.create_time,
                          item.data, item.format)
    with pytest.raises(ItemNotFound):
        memory.remember("user:8814", "channel", "sms", source=moved)
    with pytest.raises(ItemNotFound):
        memory.remember("user:8814", "channel", "sms", source=popped)
    assert facts_snapshot(client, "user:8814") == before


def test_get_and_explain_unknown_facts(client: Client, memory: MemoryStore) -> None:
    other = client.memory_stores.create("other-memory")
    theirs = other.remember("user:1", "a", 1)
    for fact_id in ["fct_missing", theirs.fact_id]:
        with pytest.raises(FactNotFound) as err:
            memory.get(fact_id)
        assert err.value.fact_id == fact_id
        assert isinstance(err.value, NotFound)
        with pytest.raises(FactNotFound):
            memory.explain(fact_id)
    with pytest.raises(InvalidInput):
        memory.get("")


# the two time axes ---------------------------------------------------------------------


def test_valid_time_axis(memory: MemoryStore) -> None:
    """``as_of`` asks what was true in the world at a moment, as we know it now."""
    memory.remember("user:1", "plan", "basic", valid_from=_day(0))
    memory.remember("user:1", "plan", "pro", valid_from=_day(10))
    memory.remember("user:1", "plan", "team", valid_from=_day(20))
    assert memory.recall("user:1", as_of=_day(-1)) == []
    assert _values(memory.recall("user:1", as_of=_day(0))) == {"plan": "basic"}
    assert _values(memory.recall("user:1", as_of=_day(9.99))) == {"plan": "basic"}
    assert _values(memory.recall("user:1", as_of=_day(10))) == {"plan": "pro"}
    assert _values(memory.recall("user:1", as_of=_day(25))) == {"plan": "team"}
    assert _values(memory.recall("user:1")) == {"plan": "team"}
    basic, pro, team = memory.history("user:1", "plan")
    assert (basic.valid_from, basic.valid_to) == (_day(0), _day(10))
    assert (pro.valid_from, pro.valid_to) == (_day(10), _day(20))
    assert (team.valid_from, team.valid_to) == (_day(20), None)


def test_record_time_axis(memory: MemoryStore) -> None:
    """``known_at`` asks what we believed at a moment, before later corrections."""
    first = memory.remember("user:1", "city", "Paris", valid_from=_day(0))
    second = memory.remember("user:1", "city", "Lyon", valid_from=_day(5))
    assert first.recorded_at < second.recorded_at
    assert memory.recall("user:1", known_at=first.recorded_at - timedelta(microseconds=1)) == []
    then = memory.recall("user:1", known_at=first.recorded_at)
    assert then == [memory.get(first.fact_id)]
    assert _values(then) == {"city": "Paris"}
    # what we believed then about a later time: Paris, open-ended
    assert _values(memory.recall("user:1", as_of=_day(6), known_at=first.recorded_at)) == {
        "city": "Paris"}
    assert _values(memory.recall("user:1", as_of=_day(6), known_at=second.recorded_at)) == {
        "city": "Lyon"}
    assert _values(memory.recall("user:1", as_of=_day(4), known_at=second.recorded_at)) == {
        "city": "Paris"}


def test_backdated_correction_retracts_the_current_fact(memory: MemoryStore) -> None:
    wrong = memory.remember("user:1", "employer", "Acme", valid_from=_day(10))
    fixed = memory.remember("user:1", "employer", "Globex", valid_from=_day(5))
    retracted = memory.get(wrong.fact_id)
    assert retracted.valid_to == retracted.valid_from == _day(10)  # an empty interval
    assert retracted.superseded_at == fixed.recorded_at
    assert fixed.supersedes == wrong.fact_id
    for day in (5, 10, 30):
        assert _values(memory.recall("user:1", as_of=_day(day))) == {"employer": "Globex"}
    assert memory.recall("user:1", as_of=_day(4)) == []
    # before the correction was recorded we believed Acme from day 10
    before = wrong.recorded_at
    assert _values(memory.recall("user:1", as_of=_day(12), known_at=before)) == {
        "employer": "Acme"}
    assert memory.recall("user:1", as_of=_day(7), known_at=before) == []


def test_backdated_correction_overrides_closed_facts_too(memory: MemoryStore) -> None:
    memory.remember("user:1", "tier", "silver", valid_from=_day(10))
    memory.remember("user:1", "tier", "gold", valid_from=_day(20))
    correction = memory.remember("user:1", "tier", "bronze", valid_from=_day(0))
    for day in (0, 10, 15, 20, 40):
        assert memory.recall("user:1", as_of=_day(day)) == [correction]
    # what we believed before the correction is unchanged
    assert _values(memory.recall("user:1", as_of=_day(15),
                                 known_at=correction.recorded_at - timedelta(microseconds=1))
                   ) == {"tier": "silver"}


def test_future_dated_fact(memory: MemoryStore, clock: Clock, target: Target) -> None:
    now = clock.peek()
    current = memory.remember("user:1", "plan", "basic", valid_from=now - timedelta(days=30))
    scheduled = memory.remember("user:1", "plan", "pro", valid_from=now + timedelta(days=7))
    assert scheduled.supersedes == current.fact_id
    assert _values(memory.recall("user:1")) == {"plan": "basic"}  # not in force yet
    assert _values(memory.recall("user:1", as_of=now + timedelta(days=8))) == {"plan": "pro"}
    assert memory.get(current.fact_id).valid_to == scheduled.valid_from
    if target.has(Capability.TEXT_SEARCH):
        # search finds what recall finds: the fact in force now, then the scheduled one
        assert [h.fact.fact_id for h in memory.search("plan")] == [current.fact_id]
        assert [h.fact.fact_id for h in memory.search(
            "plan", as_of=now + timedelta(days=8))] == [scheduled.fact_id]
    clock.advance(timedelta(days=10))
    assert _values(memory.recall("user:1")) == {"plan": "pro"}


def test_forgetting_a_scheduled_fact_cancels_it(memory: MemoryStore, clock: Clock) -> None:
    now = clock.peek()
    memory.remember("user:1", "plan", "basic", valid_from=now - timedelta(days=30))
    scheduled = memory.remember("user:1", "plan", "pro", valid_from=now + timedelta(days=7))
    forgotten = memory.forget("user:1", "plan", "cancelled the upgrade")
    assert forgotten is not None
    assert forgotten.fact_id == scheduled.fact_id
    assert forgotten.valid_to == forgotten.valid_from  # it never held
    assert _values(memory.recall("user:1")) == {"plan": "basic"}
    assert memory.recall("user:1", as_of=now + timedelta(days=8)) == []


def test_same_valid_from_replaces(memory: MemoryStore) -> None:
    memory.remember("user:1", "k", "first", valid_from=_day(3))
    second = memory.remember("user:1", "k", "second", valid_from=_day(3))
    assert memory.recall("user:1", as_of=_day(3)) == [second]
    first = memory.history("user:1", "k")[0]
    assert first.valid_to == first.valid_from


# forget --------------------------------------------------------------------------------


def test_forget_closes_and_keeps_history(memory: MemoryStore) -> None:
    fact = memory.remember("user:8814", "timezone", "CET", valid_from=_day(0))
    memory.remember("user:8814", "channel", "email")
    forgotten = memory.forget("user:8814", "timezone", "user asked")
    assert forgotten is not None
    assert forgotten.fact_id == fact.fact_id
    assert forgotten.closed_reason == "forgotten: user asked"
    assert forgotten.superseded_at is not None
    assert forgotten.valid_to == forgotten.superseded_at
    assert _values(memory.recall("user:8814")) == {"channel": "email"}
    assert memory.history("user:8814", "timezone") == [forgotten]
    assert memory.get(fact.fact_id) == forgotten
    # what we believed before forgetting is still answerable
    assert memory.recall("user:8814", ["timezone"], known_at=fact.recorded_at) == [
        forgotten]
    assert memory.forget("user:8814", "timezone") is None
    assert memory.forget("user:8814", "never-set") is None
    assert memory.explain(fact.fact_id).superseded_by is None


def test_forget_without_reason_and_remember_again(memory: MemoryStore) -> None:
    memory.remember("user:1", "nickname", "Al")
    forgotten = memory.forget("user:1", "nickname")
    assert forgotten is not None
    assert forgotten.closed_reason == "forgotten"
    again = memory.remember("user:1", "nickname", "Ally")
    assert again.supersedes is None
    assert memory.recall("user:1") == [again]
    assert [f.value for f in memory.history("user:1", "nickname")] == ["Al", "Ally"]
    with pytest.raises(InvalidInput):
        memory.forget("user:1", "nickname", reason=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        memory.forget("user:1", "nickname", reason="x" * 1001)
    assert memory.recall("user:1") == [again]

