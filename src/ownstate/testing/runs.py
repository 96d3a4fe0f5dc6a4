"""Conformance tests for runs, leases, fencing and the effects ledger.

Star-import this module in a test file that provides a ``target`` fixture. Lease expiry is
driven by the ``clock`` fixture, which replaces ``ownstate._ids.now`` with a clock that
only moves when the test says so: no test sleeps or asserts timing.

The resume races run 200 rounds in all: 150 rounds of 8 threads, each with its own client,
on every backend; and, on backends with the ``multiprocess`` capability, 50 rounds in which
the 8 contenders are 4 threads here and 2 threads in each of 2 spawned OS processes.
"""
# ruff: noqa: F403

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

import ownstate
from ownstate import _ids
from ownstate.backends.base import Capability
from ownstate.errors import (
    ActiveRunExists,
    AlreadyExists,
    InvalidInput,
    LeaseHeld,
    LimitExceeded,
    NotFound,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StaleLease,
)
from ownstate.limits import Limits
from ownstate.model import Effect, Run

from .fixtures import *
from .fixtures import run_async

Client = ownstate.Client

_BASE = datetime(2030, 1, 1, tzinfo=UTC)


class Clock:
    """A clock that stands still until advanced; ``now`` reads ``offset.value`` seconds
    past a fixed base, so it can be shared with other processes through a shared value."""

    def __init__(self, offset: Any | None = None, base: datetime = _BASE) -> None:
        self.offset = offset if offset is not None else SimpleNamespace(value=0.0)
        self.base = base

    def now(self) -> datetime:
        return self.base + timedelta(seconds=float(self.offset.value))

    def advance(self, seconds: float) -> None:
        self.offset.value = float(self.offset.value) + seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Controls the time the runs API sees (lease expiry, ``requested_at``, ages)."""
    made = Clock()
    monkeypatch.setattr(_ids, "now", made.now)
    return made


def _runs(client: Client) -> list[Run]:
    return list(client.runs.list())


def _effects(client: Client, run_id: str, *call_ids: str) -> list[Effect | None]:
    return [client.runs.get_effect(run_id, call) for call in call_ids]


# opening runs ------------------------------------------------------------------------


def test_open_run_without_owner(client: Client, session: ownstate.Session,
                                clock: Clock) -> None:
    run = client.runs.open_run(session, "langgraph", "thread-1")
    assert run.run_id.startswith("run_")
    assert (run.store, run.session_id, run.actor_id) == (session.store, session.session_id,
                                                         session.actor_id)
    assert (run.framework, run.thread_key, run.status) == ("langgraph", "thread-1", "running")
    assert run.awaiting is None
    assert (run.step_count, run.usd_cost) == (0, 0.0)
    assert run.started_at == clock.now()
    assert run.ended_at is None
    assert (run.lease_owner, run.lease_expires_at, run.fencing_token) == (None, None, 0)
    assert client.runs.get(run.run_id) == run


def test_open_run_with_owner_takes_the_lease(client: Client, session: ownstate.Session,
                                             clock: Clock) -> None:
    run = client.runs.open_run(session, "openai.agents", run_id="run-1", owner="replica-1",
                               ttl=12.5)
    assert run.run_id == "run-1"
    assert run.thread_key is None
    assert run.lease_owner == "replica-1"
    assert run.lease_expires_at == clock.now() + timedelta(seconds=12.5)
    assert run.fencing_token == 1
    assert client.runs.get("run-1") == run


def test_one_active_run_per_session(client: Client, store: ownstate.SessionStore,
                                    session: ownstate.Session) -> None:
    first = client.runs.open_run(session, "langgraph")
    before = _runs(client)
    with pytest.raises(ActiveRunExists) as err:
        client.runs.open_run(session, "adk")
    assert err.value.run_id == first.run_id
    assert err.value.session_id == session.session_id
    assert _runs(client) == before

    client.runs.mark_awaiting(first.run_id, {"kind": "approval"})
    with pytest.raises(ActiveRunExists):
        client.runs.open_run(session, "adk", run_id="second")
    with pytest.raises(RunNotFound):
        client.runs.get("second")

    other = store.add(actor_id="customer-9")
    assert client.runs.open_run(other, "adk").status == "running"

    client.runs.close_run(first.run_id, "done")
    second = client.runs.open_run(session, "adk", run_id="second")
    assert [r.run_id for r in client.runs.list(session=session)] == ["second", first.run_id]
    with pytest.raises(ActiveRunExists) as err:
        client.runs.open_run(session, "adk")
    assert err.value.run_id == second.run_id


def test_concurrent_opens_leave_one_active_run(make_client: Callable[..., Client],
                                               session: ownstate.Session) -> None:
    clients = [make_client() for _ in range(8)]
    for attempt in range(10):
        start = threading.Barrier(len(clients))
        outcomes: list[Any] = [None] * len(clients)

        def contend(index: int, attempt: int = attempt, start: threading.Barrier = start,
                    outcomes: list[Any] = outcomes) -> None:
            mine = clients[index]
            handle = mine.session_stores.get(session.store).get(session.session_id)
            start.wait(timeout=60)
            try:
                outcomes[index] = mine.runs.open_run(handle, "langgraph",
                                                     run_id=f"r{attempt}-{index}")
            except ActiveRunExists as exc:
                outcomes[index] = exc
            except Exception as exc:  # reported by the assertions below
                outcomes[index] = repr(exc)

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(clients))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [o for o in outcomes if isinstance(o, Run)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, ActiveRunExists) and o.run_id == winners[0].run_id
                   for o in outcomes if o is not winners[0]), outcomes
        clients[0].runs.close_run(winners[0].run_id, "done")
    assert len(_runs(clients[0])) == 10


def test_run_ids_are_unique_in_the_tenant(client: Client, store: ownstate.SessionStore,
                                          session: ownstate.Session) -> None:
    client.runs.open_run(session, "langgraph", run_id="run:1")
    client.runs.close_run("run:1", "done")
    before = _runs(client)
    with pytest.raises(AlreadyExists) as err:
        client.runs.open_run(session, "langgraph", run_id="run:1")
    assert err.value.run_id == "run:1"
    with pytest.raises(AlreadyExists):
        client.runs.open_run(store.add(actor_id="x"), "langgraph", run_id="run:1")
    assert _runs(client) == before


@pytest.mark.parametrize(("field", "kwargs"), [
    ("framework", {"framework": ""}),
    ("framework", {"framework": "LangGraph"}),
    ("framework", {"framework": "has space"}),
    ("framework", {"framework": "x" * 65}),
    ("framework", {"framework": 7}),
    ("thread_key", {"thread_key": ""}),
    ("thread_key", {"thread_key": "x" * 257}),
    ("thread_key", {"thread_key": "line\nbreak"}),
    ("thread_key", {"thread_key": 12}),
    ("run_id", {"run_id": ""}),
    ("run_id", {"run_id": "has space"}),
    ("run_id", {"run_id": "-leading"}),
    ("run_id", {"run_id": "x" * 129}),
    ("owner", {"owner": ""}),
    ("owner", {"owner": "x" * 257}),
    ("owner", {"owner": "tab\there"}),
    ("ttl", {"ttl": 0}),
    ("ttl", {"ttl": -1}),
    ("ttl", {"ttl": math.nan}),
    ("ttl", {"ttl": math.inf}),
    ("ttl", {"ttl": True}),
    ("ttl", {"ttl": "30"}),
    ("ttl", {"ttl": 86_401}),
])
def test_open_run_bad_input_changes_nothing(client: Client, session: ownstate.Session,
                                            field: str, kwargs: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {"framework": "langgraph", **kwargs}
    with pytest.raises(InvalidInput) as err:
        client.runs.open_run(session, **arguments)
    assert err.value.field == field
    assert _runs(client) == []


def test_open_run_bounds_are_accepted(client: Client, store: ownstate.SessionStore) -> None:
    one = client.runs.open_run(store.add(actor_id="a"), "x" * 64, "k" * 256, owner="o" * 256,
                               ttl=86_400, run_id="r" * 128)
    assert (len(one.framework), len(one.thread_key or ""), one.fencing_token) == (64, 256, 1)
    two = client.runs.open_run(store.add(actor_id="a"), "a", "é", owner="🙂", ttl=0.001)
    assert (two.thread_key, two.lease_owner) == ("é", "🙂")


def test_open_run_needs_a_live_session_handle(client: Client,
                                              session: ownstate.Session) -> None:
    with pytest.raises(InvalidInput) as err:
        client.runs.open_run(session.session_id, "langgraph")  # type: ignore[arg-type]
    assert err.value.field == "session"
    session.delete()
    with pytest.raises(SessionNotFound):
        client.runs.open_run(session, "langgraph")
    assert _runs(client) == []


# awaiting a human --------------------------------------------------------------------


def test_mark_awaiting_records_what_and_when(client: Client, session: ownstate.Session,
                                             clock: Clock) -> None:
    run = client.runs.open_run(session, "langgraph", owner="replica-1")
    clock.advance(5)
    asked = {"kind": "approval", "tool": "refund", "payload": {"amount": 40}, "requested_by":
             "agent"}
    paused = client.runs.mark_awaiting(run.run_id, asked, fencing_token=1)
    assert paused.status == "awaiting_human"
    assert paused.awaiting == {**asked, "requested_at": _ids.format_time(clock.now()),
                               "requested_by": "agent"}
    assert (paused.lease_owner, paused.lease_expires_at, paused.fencing_token) == (
        None, None, 1), "a paused run's lease is released; its token stays"
    other_replica = client.runs.resume(run.run_id, "replica-2")
    assert other_replica.fencing_token == 2, "another replica can claim it at once"
    with pytest.raises(StaleLease):
        client.runs.record_effect(run.run_id, "call-1", "late", fencing_token=1)
    paused = client.runs.mark_awaiting(run.run_id, asked, fencing_token=2)
    assert client.runs.get(run.run_id) == paused
    assert asked["requested_by"] == "agent"
    assert "requested_at" not in asked

    again = client.runs.mark_awaiting(run.run_id, {"kind": "input", "requested_by": "agent"},
                                      requested_by="supervisor")
    assert again.awaiting is not None
    assert again.awaiting["requested_by"] == "supervisor"
    assert again.awaiting["kind"] == "input"
    bare = client.runs.mark_awaiting(run.run_id, {})
    assert bare.awaiting == {"requested_at": _ids.format_time(clock.now()),
                             "requested_by": None}


def test_returned_runs_are_copies(client: Client, session: ownstate.Session) -> None:
    run = client.runs.open_run(session, "langgraph")
    paused = client.runs.mark_awaiting(run.run_id, {"payload": {"n": 1}})
    assert paused.awaiting is not None
    paused.awaiting["payload"]["n"] = 2
    stored = client.runs.get(run.run_id).awaiting
    assert stored is not None
    assert stored["payload"] == {"n": 1}


@pytest.mark.parametrize(("field", "awaiting", "kwargs"), [
    ("awaiting", ["not", "a", "dict"], {}),
    ("awaiting", "approval", {}),
    ("awaiting", {"tool": {1, 2}}, {}),
    ("awaiting", {"cost": math.nan}, {}),
    ("awaiting", {1: "non-string key"}, {}),
    ("requested_by", {"requested_by": 5}, {}),
    ("requested_by", {}, {"requested_by": ""}),
    ("requested_by", {}, {"requested_by": "x" * 257}),
    ("fencing_token", {}, {"fencing_token": -1}),
    ("fencing_token", {}, {"fencing_token": "1"}),
    ("fencing_token", {}, {"fencing_token": True}),
])
def test_mark_awaiting_bad_input_changes_nothing(client: Client, session: ownstate.Session,
                                                 field: str, awaiting: Any,
                                                 kwargs: dict[str, Any]) -> None:
    run = client.runs.open_run(session, "langgraph", owner="w")
    with pytest.raises(InvalidInput) as err:
        client.runs.mark_awaiting(run.run_id, awaiting, **kwargs)
    assert err.value.field == field
    assert client.runs.get(run.run_id) == run


def test_awaiting_and_effects_are_bounded(make_client: Callable[..., Client]) -> None:
    small = make_client(limits=Limits(max_item_bytes=200))
    session = small.session_stores.create("bounded").add(actor_id="a")
    run = small.runs.open_run(session, "langgraph")
    with pytest.raises(LimitExceeded) as err:
        small.runs.mark_awaiting(run.run_id, {"payload": "x" * 200})
    assert (err.value.field, err.value.limit) == ("awaiting", 200)
    with pytest.raises(LimitExceeded) as err:
        small.runs.record_effect(run.run_id, "call-1", "x" * 200)
    assert (err.value.field, err.value.limit) == ("result", 200)
    assert small.runs.get(run.run_id) == run
    assert small.runs.get_effect(run.run_id, "call-1") is None
    assert small.runs.record_effect(run.run_id, "call-1", "x" * 100).recorded


# leases ------------------------------------------------------------------------------


def test_resume_claims_and_fences(client: Client, session: ownstate.Session,
                                  clock: Clock) -> None:
    run = client.runs.open_run(session, "langgraph")
    client.runs.mark_awaiting(run.run_id, {"kind": "approval"})
    lease = client.runs.resume(run.run_id, "replica-2", ttl=10)
    assert (lease.run_id, lease.owner, lease.fencing_token) == (run.run_id, "replica-2", 1)
    assert lease.expires_at == clock.now() + timedelta(seconds=10)
    resumed = client.runs.get(run.run_id)
    assert (resumed.status, resumed.awaiting) == ("running", None)
    assert (resumed.lease_owner, resumed.lease_expires_at, resumed.fencing_token) == (
        "replica-2", lease.expires_at, 1)

    clock.advance(9)
    with pytest.raises(LeaseHeld) as err:
        client.runs.resume(run.run_id, "replica-3")
    assert (err.value.run_id, err.value.owner, err.value.expires_at) == (
        run.run_id, "replica-2", lease.expires_at)
    assert client.runs.get(run.run_id) == resumed

    again = client.runs.resume(run.run_id, "replica-2")
    assert again.fencing_token == 2

    clock.advance(30)
    taken = client.runs.resume(run.run_id, "replica-3")
    assert (taken.owner, taken.fencing_token) == ("replica-3", 3)
    with pytest.raises(StaleLease) as stale:
        client.runs.heartbeat(run.run_id, again.fencing_token)
    assert (stale.value.fencing_token, stale.value.current) == (2, 3)


def test_resume_refusals(client: Client, session: ownstate.Session) -> None:
    run = client.runs.open_run(session, "langgraph")
    with pytest.raises(RunNotFound) as err:
        client.runs.resume("no-such-run", "w")
    assert err.value.run_id == "no-such-run"
    for bad in ("", "x" * 257, None, "a\x00b"):
        with pytest.raises(InvalidInput) as bad_err:
            client.runs.resume(run.run_id, bad)  # type: ignore[arg-type]
        assert bad_err.value.field == "owner"
    with pytest.raises(InvalidInput):
        client.runs.resume(run.run_id, "w", ttl=0)
    with pytest.raises(InvalidInput):
        client.runs.resume("", "w")
    assert client.runs.get(run.run_id) == run
    closed = client.runs.close_run(run.run_id, "cancelled")
    with pytest.raises(RunClosed) as closed_err:
        client.runs.resume(run.run_id, "w")
    assert (closed_err.value.run_id, closed_err.value.status) == (run.run_id, "cancelled")
    assert client.runs.get(run.run_id) == closed


def test_heartbeat(client: Client, session: ownstate.Session, clock: Clock) -> None:
    unleased = client.runs.open_run(session, "langgraph")
    with pytest.raises(StaleLease):
        client.runs.heartbeat(unleased.run_id, 0)
    assert client.runs.get(unleased.run_id) == unleased
    lease = client.runs.resume(unleased.run_id, "w", ttl=5)
    clock.advance(4)
    longer = client.runs.heartbeat(unleased.run_id, lease.fencing_token, ttl=20)
    assert (longer.owner, longer.fencing_token) == ("w", lease.fencing_token)
    assert longer.expires_at == clock.now() + timedelta(seconds=20)
    clock.advance(60)
    late = client.runs.heartbeat(unleased.run_id, lease.fencing_token)
    assert late.expires_at == clock.now() + timedelta(seconds=30)
    assert client.runs.get(unleased.run_id).lease_expires_at == late.expires_at
    for bad in (None, -1, "1", 1.0, True):
        with pytest.raises(InvalidInput):
            client.runs.heartbeat(unleased.run_id, bad)  # type: ignore[arg-type]
    with pytest.raises(RunNotFound):
        client.runs.heartbeat("no-such-run", 1)
    client.runs.close_run(unleased.run_id, "done", fencing_token=lease.fencing_token)
    with pytest.raises(RunClosed):
        client.runs.heartbeat(unleased.run_id, lease.fencing_token)


# closing -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["done", "failed", "cancelled"])
def test_close_run(client: Client, session: ownstate.Session, clock: Clock,
                   status: str) -> None:
    run = client.runs.open_run(session, "langgraph", owner="w")
    clock.advance(3)
    closed = client.runs.close_run(run.run_id, status, usd_cost=0.0123, step_count=7,
                                   fencing_token=1)
    assert (closed.status, closed.ended_at, closed.step_count) == (status, clock.now(), 7)
    assert closed.usd_cost == pytest.approx(0.0123)
    assert (closed.lease_owner, closed.lease_expires_at, closed.fencing_token) == (None, None, 1)
    assert client.runs.get(run.run_id) == closed
    with pytest.raises(RunClosed) as err:
        client.runs.close_run(run.run_id, "done")
    assert err.value.status == status
    with pytest.raises(RunClosed):
        client.runs.mark_awaiting(run.run_id, {})
    assert client.runs.get(run.run_id) == closed


def test_close_keeps_unset_counters_and_closes_awaiting_runs(
        client: Client, session: ownstate.Session) -> None:
    run = client.runs.open_run(session, "langgraph")
    paused = client.runs.mark_awaiting(run.run_id, {"kind": "approval"})
    closed = client.runs.close_run(run.run_id, "cancelled")
    assert (closed.status, closed.step_count, closed.usd_cost) == ("cancelled", 0, 0.0)
    assert closed.awaiting == paused.awaiting
    assert client.runs.outstanding() == []


@pytest.mark.parametrize(("field", "kwargs"), [
    ("status", {"status": "running"}),
    ("status", {"status": "awaiting_human"}),
    ("status", {"status": "DONE"}),
    ("status", {"status": None}),
    ("usd_cost", {"usd_cost": -0.01}),
    ("usd_cost", {"usd_cost": math.nan}),
    ("usd_cost", {"usd_cost": math.inf}),
    ("usd_cost", {"usd_cost": "1"}),
    ("usd_cost", {"usd_cost": True}),
    ("step_count", {"step_count": -1}),
    ("step_count", {"step_count": 1.5}),
    ("step_count", {"step_count": True}),
    ("fencing_token", {"fencing_token": -2}),
])
def test_close_run_bad_input_changes_nothing(client: Client, session: ownstate.Session,
                                             field: str, kwargs: dict[str, Any]) -> None:
    run = client.runs.open_run(session, "langgraph", owner="w")
    arguments: dict[str, Any] = {"status": "done", **kwargs}
    with pytest.raises(InvalidInput) as err:
        client.runs.close_run(run.run_id, **arguments)
    assert err.value.field == field
    assert client.runs.get(run.run_id) == run


# fencing -----------------------------------------------------------------------------


def test_stale_writers_are_refused_and_change_nothing(client: Client,
                                                      session: ownstate.Session,
                                                      clock: Clock) -> None:
    run = client.runs.open_run(session, "langgraph", owner="old", ttl=5)
    client.runs.record_effect(run.run_id, "call-1", {"charged": 40}, fencing_token=1)
    clock.advance(10)
    new = client.runs.resume(run.run_id, "new")
    assert new.fencing_token == 2
    before = client.runs.get(run.run_id)
    writes: list[Callable[[], object]] = [
        lambda: client.runs.mark_awaiting(run.run_id, {"kind": "approval"}, fencing_token=1),
        lambda: client.runs.heartbeat(run.run_id, 1),
        lambda: client.runs.close_run(run.run_id, "failed", usd_cost=1.0, fencing_token=1),
        lambda: client.runs.record_effect(run.run_id, "call-2", "x", fencing_token=1),
        lambda: client.runs.record_effect(run.run_id, "call-1", "x", fencing_token=1),
        lambda: client.runs.heartbeat(run.run_id, 3),
        lambda: client.runs.close_run(run.run_id, "done", fencing_token=99),
    ]
    for write in writes:
        with pytest.raises(StaleLease) as err:
            write()
        assert err.value.run_id == run.run_id
        assert err.value.current == 2
        assert err.value.fencing_token in (1, 3, 99)
    assert client.runs.get(run.run_id) == before
    assert client.runs.get_effect(run.run_id, "call-2") is None
    first = client.runs.get_effect(run.run_id, "call-1")
    assert first is not None
    assert first.result == {"charged": 40}

    client.runs.close_run(run.run_id, "done", fencing_token=2)
    with pytest.raises(StaleLease):
        client.runs.close_run(run.run_id, "done", fencing_token=1)
    with pytest.raises(RunClosed):
        client.runs.close_run(run.run_id, "done", fencing_token=2)


def test_writes_without_a_token_are_not_fenced(client: Client,
                                               session: ownstate.Session) -> None:
    run = client.runs.open_run(session, "langgraph", owner="w")
    client.runs.resume(run.run_id, "w")
    assert client.runs.mark_awaiting(run.run_id, {}).status == "awaiting_human"
    assert client.runs.record_effect(run.run_id, "c", 1).recorded
    assert client.runs.close_run(run.run_id, "cancelled").status == "cancelled"


# the effects ledger ------------------------------------------------------------------


@pytest.mark.parametrize("result", [None, 0, 1.5, "text", [1, "two", None], {"nested": {
    "list": [True, False], "unicode": "é🙂"}}])
def test_first_effect_wins(client: Client, session: ownstate.Session, clock: Clock,
                           result: Any) -> None:
    run = client.runs.open_run(session, "langgraph", owner="w")
    assert client.runs.get_effect(run.run_id, "call-1") is None
    first = client.runs.record_effect(run.run_id, "call-1", result, fencing_token=1)
    assert (first.run_id, first.tool_call_id, first.result, first.recorded) == (
        run.run_id, "call-1", result, True)
    assert first.recorded_at == clock.now()
    clock.advance(1)
    second = client.runs.record_effect(run.run_id, "call-1", {"different": True})
    assert (second.result, second.recorded_at, second.recorded) == (result, first.recorded_at,
                                                                     False)
    stored = client.runs.get_effect(run.run_id, "call-1")
    assert stored is not None
    assert (stored.result, stored.recorded_at) == (result, first.recorded_at)
    assert client.runs.get(run.run_id) == run


def test_effects_are_per_run_and_call(client: Client, store: ownstate.SessionStore) -> None:
    one = client.runs.open_run(store.add(actor_id="a"), "langgraph")
    two = client.runs.open_run(store.add(actor_id="a"), "langgraph")
    client.runs.record_effect(one.run_id, "call", "one")
    assert client.runs.record_effect(two.run_id, "call", "two").recorded
    assert client.runs.record_effect(one.run_id, "other-call", "three").recorded
    assert [e.result if e else None for e in _effects(client, one.run_id, "call", "other-call",
                                                      "none")] == ["one", "three", None]
    found = client.runs.get_effect(two.run_id, "call")
    assert found is not None
    assert found.result == "two"


def test_effect_refusals_change_nothing(client: Client, session: ownstate.Session) -> None:
    run = client.runs.open_run(session, "langgraph")
    for result in ({1, 2}, math.nan, {"a": object()}, b"bytes"):
        with pytest.raises(InvalidInput) as err:
            client.runs.record_effect(run.run_id, "call", result)
        assert err.value.field == "result"
    for call in ("", "x" * 257, None, "a\nb"):
        with pytest.raises(InvalidInput) as err:
            client.runs.record_effect(run.run_id, call, 1)  # type: ignore[arg-type]
        assert err.value.field == "tool_call_id"
        with pytest.raises(InvalidInput):
            client.runs.get_effect(run.run_id, call)  # type: ignore[arg-type]
    with pytest.raises(RunNotFound):
        client.runs.record_effect("no-such-run", "call", 1)
    with pytest.raises(RunNotFound):
        client.runs.get_effect("no-such-run", "call")
    assert client.runs.get_effect(run.run_id, "call") is None
    client.runs.record_effect(run.run_id, "early", "kept")
    client.runs.close_run(run.run_id, "done")
    replay = client.runs.record_effect(run.run_id, "early", "other")
    assert (replay.result, replay.recorded) == ("kept", False)
    with pytest.raises(RunClosed):
        client.runs.record_effect(run.run_id, "late", 1)
    assert client.runs.get_effect(run.run_id, "late") is None


# listing and outstanding -------------------------------------------------------------


def test_list_filters_and_pages(client: Client, store: ownstate.SessionStore) -> None:
    made = []
    for n in range(5):
        s = store.add(actor_id="a", session_id=f"s{n}")
        made.append(client.runs.open_run(s, "langgraph" if n % 2 else "adk", run_id=f"r{n}"))
    client.runs.close_run("r0", "done")
    client.runs.mark_awaiting("r3", {})
    newest_first = ["r4", "r3", "r2", "r1", "r0"]
    assert [r.run_id for r in client.runs.list()] == newest_first
    assert [r.run_id for r in client.runs.list(page_size=2)] == newest_first
    assert [r.run_id for r in client.runs.list(framework="adk")] == ["r4", "r2", "r0"]
    assert [r.run_id for r in client.runs.list(status="running")] == ["r4", "r2", "r1"]
    assert [r.run_id for r in client.runs.list(status="done", framework="adk")] == ["r0"]
    assert [r.run_id for r in client.runs.list(session=store.get("s3"))] == ["r3"]
    assert list(client.runs.list(status="failed")) == []

    first = client.runs.list_page(page_size=2)
    assert [r.run_id for r in first.items] == ["r4", "r3"]
    later = store.add(actor_id="a")
    client.runs.open_run(later, "adk", run_id="r5")
    second = client.runs.list_page(page_size=2, page_token=first.next_page_token)
    third = client.runs.list_page(page_size=2, page_token=second.next_page_token)
    assert [r.run_id for r in second.items + third.items] == ["r2", "r1", "r0"]
    assert third.next_page_token is None
    assert first.next_page_token is not None
    with pytest.raises(InvalidInput):
        client.runs.list_page(status="running", page_token=first.next_page_token)
    with pytest.raises(InvalidInput):
        client.runs.list_page(page_token="garbage")
    with pytest.raises(InvalidInput):
        client.runs.list_page(status="paused")
    with pytest.raises(InvalidInput):
        client.runs.list_page(framework="Bad Name")
    with pytest.raises(InvalidInput):
        client.runs.list_page(session="s1")  # type: ignore[arg-type]
    with pytest.raises(LimitExceeded):
        client.runs.list_page(page_size=0)


def test_outstanding(client: Client, store: ownstate.SessionStore, clock: Clock) -> None:
    def ids(runs: list[Run]) -> list[str]:
        return [r.run_id for r in runs]

    for n, framework in enumerate(["langgraph", "adk", "langgraph", "adk"]):
        client.runs.open_run(store.add(actor_id="a"), framework, run_id=f"r{n}")
        clock.advance(1)
    other_store = client.session_stores.create("other-store")
    client.runs.open_run(other_store.add(actor_id="b"), "langgraph", run_id="r4")
    assert client.runs.outstanding() == []
    for run_id in ("r2", "r0", "r4", "r1"):
        clock.advance(60)
        client.runs.mark_awaiting(run_id, {"kind": "approval"})
    client.runs.close_run("r1", "cancelled")

    waiting = client.runs.outstanding()
    assert ids(waiting) == ["r2", "r0", "r4"]
    assert all(r.status == "awaiting_human" for r in waiting)
    assert ids(client.runs.outstanding("running")) == ["r3"]
    assert ids(client.runs.outstanding(framework="langgraph")) == ["r2", "r0", "r4"]
    assert ids(client.runs.outstanding(framework="adk")) == []
    assert ids(client.runs.outstanding(older_than=timedelta(seconds=90))) == ["r2", "r0"]
    assert ids(client.runs.outstanding(older_than=150)) == ["r2"]
    assert ids(client.runs.outstanding(older_than=0.0)) == ["r2", "r0", "r4"]
    assert ids(client.runs.outstanding(older_than=10_000)) == []
    assert ids(client.runs.outstanding(limit=1)) == ["r2"]

    client.runs.resume("r2", "w")
    assert ids(client.runs.outstanding()) == ["r0", "r4"]
    assert ids(client.runs.outstanding("running")) == ["r3", "r2"]
    for bad in ({"status": "done"}, {"status": "nope"}, {"limit": 0}, {"limit": 1001},
                {"limit": True}, {"older_than": -1}, {"older_than": timedelta(seconds=-1)},
                {"older_than": "1h"}, {"older_than": math.nan}, {"framework": "Bad"}):
        with pytest.raises(InvalidInput):
            client.runs.outstanding(**bad)


# scope and cascade -------------------------------------------------------------------


def test_another_tenant_sees_no_runs(client: Client, other_tenant: Client,
                                     session: ownstate.Session) -> None:
    run = client.runs.open_run(session, "langgraph", owner="w")
    client.runs.record_effect(run.run_id, "call", "secret")
    client.runs.mark_awaiting(run.run_id, {"kind": "approval"})
    before = client.runs.get(run.run_id)

    with pytest.raises(RunNotFound) as missing:
        other_tenant.runs.get("no-such-run")
    attempts: list[Callable[[], object]] = [
        lambda: other_tenant.runs.get(run.run_id),
        lambda: other_tenant.runs.mark_awaiting(run.run_id, {}),
        lambda: other_tenant.runs.resume(run.run_id, "thief"),
        lambda: other_tenant.runs.heartbeat(run.run_id, 1),
        lambda: other_tenant.runs.close_run(run.run_id, "cancelled"),
        lambda: other_tenant.runs.record_effect(run.run_id, "call", "forged"),
        lambda: other_tenant.runs.get_effect(run.run_id, "call"),
    ]
    for attempt in attempts:
        with pytest.raises(RunNotFound) as err:
            attempt()
        assert type(err.value) is type(missing.value)
        assert err.value.details == {"run_id": run.run_id}
        assert str(err.value) == str(missing.value).replace("no-such-run", run.run_id)
    assert list(other_tenant.runs.list()) == []
    assert other_tenant.runs.outstanding() == []
    with pytest.raises(SessionNotFound):
        other_tenant.runs.open_run(session, "langgraph")

    theirs = other_tenant.session_stores.create(session.store).add(
        actor_id="someone", session_id=session.session_id)
    same_id = other_tenant.runs.open_run(theirs, "adk", run_id=run.run_id)
    assert same_id.actor_id == "someone"
    assert client.runs.get(run.run_id) == before
    effect = client.runs.get_effect(run.run_id, "call")
    assert effect is not None
    assert effect.result == "secret"
    assert other_tenant.runs.get_effect(run.run_id, "call") is None


def test_deleting_a_session_deletes_its_runs(client: Client, store: ownstate.SessionStore,
                                             session: ownstate.Session) -> None:
    gone = client.runs.open_run(session, "langgraph", run_id="gone")
    client.runs.record_effect("gone", "call", 1)
    client.runs.close_run("gone", "done")
    client.runs.open_run(session, "langgraph", run_id="gone-too")
    kept_session = store.add(actor_id="other")
    kept = client.runs.open_run(kept_session, "langgraph", run_id="kept")
    session.delete()
    for run_id in (gone.run_id, "gone-too"):
        with pytest.raises(RunNotFound):
            client.runs.get(run_id)
        with pytest.raises(RunNotFound):
            client.runs.get_effect(run_id, "call")
    assert _runs(client) == [kept]

    again = store.add(actor_id="customer-123", session_id=session.session_id)
    assert list(client.runs.list(session=again)) == []
    reopened = client.runs.open_run(again, "langgraph", run_id="gone")
    assert client.runs.get_effect(reopened.run_id, "call") is None


def test_deleting_a_store_deletes_its_runs(client: Client, store: ownstate.SessionStore,
                                           session: ownstate.Session) -> None:
    client.runs.open_run(session, "langgraph", run_id="in-store")
    client.runs.mark_awaiting("in-store", {"kind": "approval"})
    elsewhere = client.session_stores.create("elsewhere").add(actor_id="a")
    client.runs.open_run(elsewhere, "langgraph", run_id="elsewhere")
    client.session_stores.delete(store.name, force=True)
    with pytest.raises(RunNotFound):
        client.runs.get("in-store")
    assert client.runs.outstanding() == []
    assert [r.run_id for r in client.runs.list()] == ["elsewhere"]


def test_refusals_read_alike_on_every_backend(client: Client, session: ownstate.Session,
                                              clock: Clock) -> None:
    """Each refusal is worded from its ids by its class, so it reads the same whichever
    backend (or server) refused; over HTTP it arrives as it was raised."""
    run = client.runs.open_run(session, "langgraph", owner="a", ttl=5)
    clock.advance(10)
    client.runs.resume(run.run_id, "b", ttl=60)
    with pytest.raises(StaleLease) as stale:
        client.runs.heartbeat(run.run_id, 1)
    assert (str(stale.value), stale.value.details) == (
        f"run {run.run_id!r} is held with fencing token 2, not 1",
        {"run_id": run.run_id, "fencing_token": 1, "current": 2})
    with pytest.raises(LeaseHeld) as held:
        client.runs.resume(run.run_id, "c")
    assert str(held.value).startswith(f"run {run.run_id!r} is leased to 'b' until ")
    with pytest.raises(ActiveRunExists) as active:
        client.runs.open_run(session, "langgraph")
    assert str(active.value) == (f"session {session.session_id!r} already has an active run "
                                 f"{run.run_id!r}")
    client.runs.mark_awaiting(run.run_id, {"kind": "approval"}, fencing_token=2)
    client.runs.resume(run.run_id, "b")
    client.runs.close_run(run.run_id, "done")
    with pytest.raises(RunClosed) as closed:
        client.runs.close_run(run.run_id, "done")
    assert (str(closed.value), closed.value.details) == (
        f"run {run.run_id!r} has ended (done)", {"run_id": run.run_id, "status": "done"})
    unleased = client.runs.open_run(session, "langgraph")
    with pytest.raises(StaleLease) as no_lease:
        client.runs.heartbeat(unleased.run_id, 0)
    assert (str(no_lease.value), no_lease.value.details) == (
        f"run {unleased.run_id!r} holds no lease",
        {"run_id": unleased.run_id, "fencing_token": 0, "current": 0})
    with pytest.raises(RunNotFound) as missing:
        client.runs.heartbeat("no-such-run", 1)
    assert missing.value.details == {"run_id": "no-such-run"}


def test_errors_are_in_the_tree() -> None:
    assert issubclass(RunNotFound, NotFound)
    for error in (ActiveRunExists, LeaseHeld, StaleLease, RunClosed):
        assert issubclass(error, ownstate.Conflict)


# the async client --------------------------------------------------------------------


def test_async_client_runs(target: Any) -> None:
    async def scenario() -> None:
        async with await target.connect_async() as client:
            session = await (await client.session_stores.create("async-runs")).add(
                actor_id="a", session_id="s")
            run = await client.runs.open_run(session, "langgraph", owner="w")
            await client.runs.mark_awaiting(run.run_id, {"kind": "approval"}, fencing_token=1)
            assert [r.run_id for r in await client.runs.outstanding()] == [run.run_id]
            assert [r.run_id async for r in client.runs.list(session=session, page_size=1)] == [
                run.run_id]
            lease = await client.runs.resume(run.run_id, "w")
            with pytest.raises(LeaseHeld):
                await client.runs.resume(run.run_id, "other")
            effect = await client.runs.record_effect(run.run_id, "c", [1],
                                                     fencing_token=lease.fencing_token)
            assert effect.recorded

    run_async(scenario())
    with target.connect() as sync_client:
        run = next(iter(sync_client.runs.list()))
        assert (run.status, run.fencing_token, run.lease_owner) == ("running", 2, "w")
        effect = sync_client.runs.get_effect(run.run_id, "c")
        assert effect is not None
        assert effect.result == [1]


# resume races ------------------------------------------------------------------------

_TTL = 30.0


@dataclass
class _Outcome:
    round: int
    owner: str
    won: int | None
    stale_tried: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _contend(connect: Callable[[], Client], run_id: str, owner: str, rounds: int,
             barrier: Any, report: Callable[[_Outcome], object]) -> None:
    """One contender on a client of its own (``connect()``): each round, claim the run;
    then, having lost, write with the token of the last round it won, which must be
    refused; having won, write with the new token."""
    last: int | None = None
    with connect() as client, contextlib.suppress(threading.BrokenBarrierError):
        for round_no in range(rounds):
            outcome = _Outcome(round_no, owner, None)
            barrier.wait(timeout=120)
            try:
                outcome.won = client.runs.resume(run_id, owner, ttl=_TTL).fencing_token
            except LeaseHeld:
                pass
            except Exception as exc:
                outcome.problems.append(f"resume: {exc!r}")
            barrier.wait(timeout=120)
            if outcome.won is not None:
                try:
                    client.runs.heartbeat(run_id, outcome.won, ttl=_TTL)
                    client.runs.record_effect(run_id, f"won-{round_no}", owner,
                                              fencing_token=outcome.won)
                except Exception as exc:
                    outcome.problems.append(f"winner's write: {exc!r}")
                last = outcome.won
            elif last is not None:
                call = f"stale-{round_no}-{owner}"
                outcome.problems.extend(_stale_writes(client, run_id, owner, call, last))
                outcome.stale_tried.append(call)
            report(outcome)
            barrier.wait(timeout=120)


def _stale_writes(client: Client, run_id: str, owner: str, call: str,
                  stale: int) -> list[str]:
    """Write with a token that is no longer current; each write must be refused."""
    writes: list[tuple[str, Callable[[], object]]] = [
        ("heartbeat", lambda: client.runs.heartbeat(run_id, stale)),
        ("record_effect", lambda: client.runs.record_effect(run_id, call, owner,
                                                            fencing_token=stale)),
        ("close_run", lambda: client.runs.close_run(run_id, "failed", fencing_token=stale)),
    ]
    problems = []
    for name, write in writes:
        try:
            write()
            problems.append(f"{name} with stale token {stale} succeeded")
        except StaleLease:
            pass
        except Exception as exc:
            problems.append(f"{name}: {exc!r}")
    return problems


def _race_process(url: str, run_id: str, owners: list[str], rounds: int, barrier: Any,
                  offset: Any, results: Any) -> None:
    """A spawned process's part of the race: its own clock on the shared offset, and one
    thread per owner."""
    _ids.now = Clock(offset).now
    threads = [threading.Thread(target=_contend, args=(functools.partial(ownstate.connect, url),
                                                       run_id, owner, rounds, barrier,
                                                       results.put))
               for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _coordinate(clock: Clock, rounds: int, barrier: Any) -> None:
    """Expire every lease, then let a round run: claim, write, report."""
    for _ in range(rounds):
        clock.advance(_TTL + 1)
        for _phase in range(3):
            barrier.wait(timeout=120)


def _check_race(client: Client, run_id: str, outcomes: list[_Outcome], rounds: int,
                contenders: int, first_token: int) -> None:
    assert len(outcomes) == rounds * contenders
    problems = [(o.round, o.owner, p) for o in outcomes for p in o.problems]
    assert problems == []
    tokens = []
    for round_no in range(rounds):
        winners = [o for o in outcomes if o.round == round_no and o.won is not None]
        assert len(winners) == 1, (round_no, winners)
        tokens.append(winners[0].won)
        effect = client.runs.get_effect(run_id, f"won-{round_no}")
        assert effect is not None
        assert effect.result == winners[0].owner
    assert tokens == list(range(first_token + 1, first_token + rounds + 1))
    assert sum(len(o.stale_tried) for o in outcomes) > 0
    for o in outcomes:
        for call in o.stale_tried:
            assert client.runs.get_effect(run_id, call) is None
    final = client.runs.get(run_id)
    assert (final.status, final.fencing_token) == ("running", first_token + rounds)


@pytest.mark.slow
def test_resume_race_threads(client: Client, target: Any, session: ownstate.Session,
                             clock: Clock) -> None:
    rounds, contenders = 150, 8
    run = client.runs.open_run(session, "langgraph", owner="opener")
    barrier = threading.Barrier(contenders + 1)
    results: queue.SimpleQueue[_Outcome] = queue.SimpleQueue()
    threads = [threading.Thread(target=_contend, args=(target.connect, run.run_id, f"thread-{n}",
                                                       rounds, barrier, results.put))
               for n in range(contenders)]
    for thread in threads:
        thread.start()
    try:
        _coordinate(clock, rounds, barrier)
    except BaseException:
        barrier.abort()
        raise
    finally:
        for thread in threads:
            thread.join(timeout=120)
    outcomes = []
    while not results.empty():
        outcomes.append(results.get())
    _check_race(client, run.run_id, outcomes, rounds, contenders, run.fencing_token)


@pytest.mark.slow
def test_resume_race_across_processes(client: Client, target: Any,
                                      session: ownstate.Session,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if not target.has(Capability.MULTIPROCESS):
        pytest.skip("the backend does not share data between processes")
    rounds, local, remote, per_process = 50, 4, 2, 2
    contenders = local + remote * per_process
    ctx = multiprocessing.get_context("spawn")
    offset = ctx.Value("d", 0.0)
    clock = Clock(offset)
    monkeypatch.setattr(_ids, "now", clock.now)
    run = client.runs.open_run(session, "langgraph", owner="opener")
    barrier = ctx.Barrier(contenders + 1)
    results = ctx.Queue()
    processes = [
        ctx.Process(target=_race_process,
                    args=(target.url, run.run_id, [f"proc-{p}-{n}" for n in range(per_process)],
                          rounds, barrier, offset, results))
        for p in range(remote)
    ]
    threads = [threading.Thread(target=_contend, args=(target.connect, run.run_id, f"local-{n}",
                                                       rounds, barrier, results.put))
               for n in range(local)]
    for process in processes:
        process.start()
    for thread in threads:
        thread.start()
    outcomes: list[_Outcome] = []
    try:
        _coordinate(clock, rounds, barrier)
        outcomes = [results.get(timeout=120) for _ in range(rounds * contenders)]
    except BaseException:
        barrier.abort()
        raise
    finally:
        for thread in threads:
            thread.join(timeout=120)
        for process in processes:
            process.join(timeout=120)
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
        results.join_thread()
    assert [p.exitcode for p in processes] == [0] * remote
    assert {o.owner for o in outcomes if o.owner.startswith("proc-")} == {
        f"proc-{p}-{n}" for p in range(remote) for n in range(per_process)}
    _check_race(client, run.run_id, outcomes, rounds, contenders, run.fencing_token)
