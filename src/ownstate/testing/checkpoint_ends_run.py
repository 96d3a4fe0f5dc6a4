"""Conformance tests for a checkpoint write that ends its fencing run (``end_run``).

Star-import this module in a test file that provides a ``target`` fixture. On a backend
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
from ownstate.errors import InvalidInput, RunClosed, RunNotFound, SeqConflict, StaleLease
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
