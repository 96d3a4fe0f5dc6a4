"""Conformance tests for checkpoint writes that open a run (``put_opening_run``) or end
their fencing run (``end_run``) in the same transaction.

Star-import this module in a test file that provides a ``target`` fixture. On a backend
that declares ``Capability.CHECKPOINT_OPENS_RUN``, ``checkpoints.put_opening_run`` opens a
leased run in the scope's session and stores a checkpoint fenced by it, as
``runs.open_run`` and a fenced ``checkpoints.put`` would, both or neither: a session with
an active run, a taken run id or a scope outside the session stores nothing. On a backend
that declares ``Capability.CHECKPOINT_ENDS_RUN``, ``checkpoints.put`` and
``checkpoints.put_with_items`` with ``end_run`` store the checkpoint (and items) and end
the run they are fenced by in one transaction: the run ends as ``runs.close_run`` with
the same token would end it, and every refusal (a stale or closed fence, a run out of
scope, a ``first_seq`` that is not the session's next) stores nothing and leaves the run
as it was. A write without a fence, or on a backend without the capability, is refused
before anything is stored.

It may touch the public sync API, the backends' capability flags (names only), the error
tree, the model and the shared fixtures, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

from typing import Any

import pytest

import ownstate
from ownstate.backends import Capability
from ownstate.errors import (
    ActiveRunExists,
    AlreadyExists,
    InvalidInput,
    RunClosed,
    RunNotFound,
    SeqConflict,
    StaleLease,
)
from ownstate.model import CheckpointScope, Run

from .fixtures import *
from .fixtures import FrozenTime, snapshot
from .targets import Target

Client = ownstate.Client

_ITEMS: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "where is my parcel to Lisbon?"},
    {"type": "message", "role": "assistant", "content": "it left Porto this morning"},
]


def _capable(target: Target) -> None:
    if not target.has(Capability.CHECKPOINT_ENDS_RUN):
        pytest.skip(f"{target.name} does not declare Capability.CHECKPOINT_ENDS_RUN")


def _holder(client: Client, session: ownstate.Session) -> CheckpointScope:
    """The scope of a run that only holds checkpoints (as a LangGraph thread's first)."""
    holder = client.runs.open_run(session, "langgraph", "holder")
    client.runs.close_run(holder.run_id, "done")
    return holder.checkpoint_scope()


def _leased(client: Client, session: ownstate.Session) -> Run:
    return client.runs.open_run(session, "langgraph", "t-1", owner="w1", ttl=30)


def _put(client: Client, scope: CheckpointScope, run: Run, *, items: bool = False,
         checkpoint_id: str = "c1", **options: Any) -> Any:
    fence = {"fencing_token": run.fencing_token, "fencing_run_id": run.run_id, **options}
    if items:
        return client.checkpoints.put_with_items(
            scope, checkpoint_id, _ITEMS, first_seq=fence.pop("first_seq", 1),
            type_tag="json", payload=b'{"step": 2}', metadata={"step": 2}, **fence)
    return client.checkpoints.put(scope, checkpoint_id, type_tag="json",
                                  payload=b'{"step": 2}', metadata={"step": 2}, **fence)


def _stored(client: Client, scope: CheckpointScope, run_id: str) -> Any:
    return (snapshot(client), client.checkpoints.list(scope), client.runs.get(run_id))


@pytest.mark.parametrize("items", [False, True])
def test_the_write_ends_its_fencing_run_as_close_run_would(
        target: Target, client: Client, session: ownstate.Session, items: bool) -> None:
    _capable(target)
    assert client.checkpoints.ends_runs
    scope = _holder(client, session)
    run = _leased(client, session)
    stored = _put(client, scope, run, items=items, end_run="done", step_count=3)
    record = stored[0] if items else stored
    assert client.checkpoints.get(scope, "c1") == record
    ended = client.runs.get(run.run_id)
    assert (ended.status, ended.step_count, ended.lease_owner, ended.lease_expires_at) == (
        "done", 3, None, None)
    assert ended.ended_at is not None
    assert ended.fencing_token == run.fencing_token
    if items:
        assert [i.seq for i in stored[1]] == [1, 2]
        assert [i.seq for i in session.list_items(order_by="create_time asc")] == [1, 2]
    # the session may open its next run at once, and the ended run refuses its token
    client.runs.open_run(session, "langgraph", "t-2", owner="w1", ttl=30)
    with pytest.raises(RunClosed):
        _put(client, scope, run, checkpoint_id="c2")


def test_a_step_count_left_out_keeps_the_runs(target: Target, client: Client,
                                              session: ownstate.Session) -> None:
    _capable(target)
    scope = _holder(client, session)
    run = _leased(client, session)
    _put(client, scope, run, end_run="failed")
    ended = client.runs.get(run.run_id)
    assert (ended.status, ended.step_count) == ("failed", 0)


@pytest.mark.parametrize("items", [False, True])
def test_a_stale_fence_stores_nothing_and_ends_nothing(
        target: Target, client: Client, session: ownstate.Session,
        frozen_time: FrozenTime, items: bool) -> None:
    _capable(target)
    scope = _holder(client, session)
    run = _leased(client, session)
    frozen_time.advance(31)
    client.runs.resume(run.run_id, "w2", ttl=30)  # the lease moves on: token 2
    before = _stored(client, scope, run.run_id)
    with pytest.raises(StaleLease):
        _put(client, scope, run, items=items, end_run="done")
    assert _stored(client, scope, run.run_id) == before
    assert client.runs.get(run.run_id).status == "running"


@pytest.mark.parametrize("items", [False, True])
def test_a_closed_run_stores_nothing(target: Target, client: Client,
                                     session: ownstate.Session, items: bool) -> None:
    _capable(target)
    scope = _holder(client, session)
    run = _leased(client, session)
    client.runs.close_run(run.run_id, "cancelled", fencing_token=run.fencing_token)
    before = _stored(client, scope, run.run_id)
    with pytest.raises(RunClosed):
        _put(client, scope, run, items=items, end_run="done")
    assert _stored(client, scope, run.run_id) == before
    assert client.runs.get(run.run_id).status == "cancelled"


def test_a_first_seq_that_is_not_the_next_stores_nothing_and_ends_nothing(
        target: Target, client: Client, session: ownstate.Session) -> None:
    _capable(target)
    scope = _holder(client, session)
    run = _leased(client, session)
    session.append_items([{"role": "user", "content": "hi"}])
    before = _stored(client, scope, run.run_id)
    with pytest.raises(SeqConflict):
        _put(client, scope, run, items=True, first_seq=1, end_run="done")
    assert _stored(client, scope, run.run_id) == before
    assert client.runs.get(run.run_id).status == "running"


def test_a_scope_outside_the_session_stores_nothing_and_ends_nothing(
        target: Target, client: Client, store: ownstate.SessionStore,
        session: ownstate.Session) -> None:
    _capable(target)
    scope = _holder(client, session)
    run = _leased(client, session)
    other = store.add(actor_id="someone-else", session_id="other")
    foreign = CheckpointScope(other.actor_id, store.name, other.session_id, scope.run_id)
    before = _stored(client, scope, run.run_id)
    for wrong in (foreign, CheckpointScope(session.actor_id, store.name, session.session_id,
                                           "run-nope")):
        with pytest.raises(RunNotFound):
            _put(client, wrong, run, end_run="done")
    assert _stored(client, scope, run.run_id) == before
    assert client.runs.get(run.run_id).status == "running"


def test_bad_endings_are_refused_before_anything_is_stored(
        target: Target, client: Client, session: ownstate.Session) -> None:
    _capable(target)
    scope = _holder(client, session)
    run = _leased(client, session)
    before = _stored(client, scope, run.run_id)
    for options in ({"end_run": "running"}, {"end_run": "awaiting_human"},
                    {"end_run": True}, {"end_run": "done", "step_count": -1},
                    {"end_run": "done", "fencing_token": None, "fencing_run_id": None}):
        with pytest.raises(InvalidInput):
            _put(client, scope, run, **options)
    assert _stored(client, scope, run.run_id) == before


def test_a_backend_without_it_refuses_and_stores_nothing(
        target: Target, client: Client, session: ownstate.Session) -> None:
    if target.has(Capability.CHECKPOINT_ENDS_RUN):
        pytest.skip(f"{target.name} declares Capability.CHECKPOINT_ENDS_RUN")
    assert not client.checkpoints.ends_runs
    scope = _holder(client, session)
    run = _leased(client, session)
    before = _stored(client, scope, run.run_id)
    with pytest.raises(InvalidInput, match="CHECKPOINT_ENDS_RUN"):
        _put(client, scope, run, end_run="done")
    assert _stored(client, scope, run.run_id) == before


# -- a run opened with its first checkpoint ---------------------------------------------------


def _opens(target: Target) -> None:
    if not target.has(Capability.CHECKPOINT_OPENS_RUN):
        pytest.skip(f"{target.name} does not declare Capability.CHECKPOINT_OPENS_RUN")


def _open_put(client: Client, scope: CheckpointScope, **options: Any) -> Any:
    return client.checkpoints.put_opening_run(
        scope, options.pop("checkpoint_id", "c1"), framework="langgraph", owner="w1",
        type_tag="json", payload=b'{"step": -1}', metadata={"step": -1}, ttl=30,
        **{"thread_key": "t-1", **options})


def _all_runs(client: Client) -> Any:
    return sorted((r.run_id, r.status, r.fencing_token) for r in client.runs.list())


def test_the_run_is_opened_as_open_run_would_and_fences_the_checkpoint(
        target: Target, client: Client, session: ownstate.Session) -> None:
    _opens(target)
    assert client.checkpoints.opens_runs
    scope = _holder(client, session)
    run, record = _open_put(client, scope, run_id="run-one")
    assert client.runs.get("run-one") == run
    assert (run.status, run.framework, run.thread_key, run.lease_owner, run.fencing_token,
            run.session_id) == ("running", "langgraph", "t-1", "w1", 1, session.session_id)
    assert client.checkpoints.get(scope, "c1") == record
    assert (record.payload, record.metadata) == (b'{"step": -1}', {"step": -1})
    # the new lease fences the next writes, and an id is made up when none is given
    client.checkpoints.put(scope, "c2", type_tag="json", payload=b"next",
                           fencing_token=run.fencing_token, fencing_run_id=run.run_id)
    client.runs.close_run(run.run_id, "done", fencing_token=run.fencing_token)
    made, _ = _open_put(client, scope, checkpoint_id="c3")
    assert made.run_id.startswith("run_")


@pytest.mark.parametrize("refusal", ["active", "taken", "scope", "no-session"])
def test_a_refused_open_or_put_stores_neither(
        target: Target, client: Client, store: ownstate.SessionStore,
        session: ownstate.Session, refusal: str) -> None:
    _opens(target)
    scope = _holder(client, session)
    wanted: dict[str, Any] = {"run_id": "run-new"}
    error: type[Exception] = RunNotFound
    if refusal == "active":
        client.runs.open_run(session, "langgraph", "t-0", owner="w0", ttl=30)
        error = ActiveRunExists
    elif refusal == "taken":
        wanted = {"run_id": scope.run_id}  # the holder's id
        error = AlreadyExists
    elif refusal == "scope":
        other = store.add(actor_id="someone-else", session_id="other")
        scope = CheckpointScope(other.actor_id, store.name, other.session_id, scope.run_id)
    else:
        scope = CheckpointScope(session.actor_id, store.name, "no-such-session",
                                scope.run_id)
        error = ownstate.SessionNotFound
    before = (snapshot(client), _all_runs(client))
    with pytest.raises(error):
        _open_put(client, scope, **wanted)
    assert (snapshot(client), _all_runs(client)) == before


def test_bad_openings_are_refused_before_anything_is_stored(
        target: Target, client: Client, session: ownstate.Session) -> None:
    _opens(target)
    scope = _holder(client, session)
    before = (snapshot(client), _all_runs(client))
    bad: list[dict[str, Any]] = [
        {"framework": "Not A Framework"}, {"owner": None}, {"owner": ""}, {"ttl": 0},
        {"run_id": "bad id!"}, {"thread_key": ""}, {"type_tag": "has space"}]
    for options in bad:
        with pytest.raises(InvalidInput):
            client.checkpoints.put_opening_run(
                scope, "c1", **{"framework": "langgraph", "owner": "w1", "type_tag": "json",
                                "payload": b"x", **options})
    assert (snapshot(client), _all_runs(client)) == before


def test_a_backend_that_cannot_open_runs_with_checkpoints_refuses(
        target: Target, client: Client, session: ownstate.Session) -> None:
    if target.has(Capability.CHECKPOINT_OPENS_RUN):
        pytest.skip(f"{target.name} declares Capability.CHECKPOINT_OPENS_RUN")
    assert not client.checkpoints.opens_runs
    scope = _holder(client, session)
    before = (snapshot(client), _all_runs(client))
    with pytest.raises(InvalidInput, match="CHECKPOINT_OPENS_RUN"):
        _open_put(client, scope)
    assert (snapshot(client), _all_runs(client)) == before
