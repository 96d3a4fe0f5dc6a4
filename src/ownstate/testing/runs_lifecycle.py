"""Conformance tests for a run's life: opening, awaiting a human, leases, closing and
fencing, with the controlled ``clock`` the other run tests share. Star-imported by
:mod:`.runs`; touches only the client fixtures give it.

Lease expiry is driven by the ``clock`` fixture, which replaces ``ownstate._ids.now`` with a
clock that only moves when the test says so: no test sleeps or asserts timing.

It may touch the public sync API, the error tree, the limits, the model and the shared
fixtures, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

import ownstate
from ownstate import _ids
from ownstate.errors import (
    ActiveRunExists,
    AlreadyExists,
    InvalidInput,
    LeaseHeld,
    LimitExceeded,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StaleLease,
)
from ownstate.limits import Limits
from ownstate.model import Effect, Run

from .fixtures import *

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

