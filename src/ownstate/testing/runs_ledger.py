"""Conformance tests for what runs record and who sees them: the effects ledger, listing
and outstanding runs, tenant scope, cascades from sessions and stores, and the async
client. Star-imported by :mod:`.runs`; it may touch no backend but through the client the
fixtures give it, and imports only the public sync API, the error tree, the model,
:mod:`.runs_lifecycle`, the shared fixtures and pytest.
"""
# ruff: noqa: F403

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import ownstate
from ownstate.errors import (
    ActiveRunExists,
    InvalidInput,
    LeaseHeld,
    LimitExceeded,
    NotFound,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StaleLease,
)
from ownstate.model import Run

from .fixtures import *
from .fixtures import run_async
from .runs_lifecycle import (
    Clock,
    _effects,
    _runs,
)

Client = ownstate.Client


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

