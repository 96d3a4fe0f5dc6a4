"""Conformance tests for a checkpoint stored with items (``checkpoints.put_with_items``).

Star-import this module in a test file that provides a ``target`` fixture. On a backend
that declares ``Capability.CHECKPOINT_ITEMS``, the items and the checkpoint are stored in
one transaction: every refusal (a run out of scope, a stale or closed fence, a
``first_seq`` that is not the session's next) stores neither, and what is stored is what
a separate append and put would have stored. A backend without it refuses the call and
stores nothing.

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
from ownstate.model import CheckpointScope, Item, PendingWrite, Run

from .fixtures import *
from .fixtures import FrozenTime, snapshot
from .targets import Target

Client = ownstate.Client

_ITEMS: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "where is my parcel to Lisbon?"},
    {"type": "function_call", "name": "track_parcel", "call_id": "c1", "arguments": "{}"},
    {"type": "message", "role": "assistant", "content": "it left Porto this morning",
     "model": "gpt-test", "usage": {"input_tokens": 12, "output_tokens": 7}},
]


def _capable(target: Target) -> None:
    if not target.has(Capability.CHECKPOINT_ITEMS):
        pytest.skip(f"{target.name} does not declare Capability.CHECKPOINT_ITEMS")


def _columns(item: Item) -> tuple[Any, ...]:
    """What an item is besides its id and time: seq, data, format and derived columns."""
    return (item.seq, item.data, item.format, item.role, item.type, item.tool_name,
            item.model, item.in_tokens, item.out_tokens)


def _put(client: Client, scope: CheckpointScope, items: list[dict[str, Any]],
         first_seq: int, checkpoint_id: str = "c1", **fence: Any) -> Any:
    return client.checkpoints.put_with_items(
        scope, checkpoint_id, items, first_seq=first_seq, type_tag="json",
        payload=b'{"step": 1}', metadata={"step": 1}, **fence)


def _stored(client: Client, scope: CheckpointScope) -> Any:
    return (snapshot(client), client.checkpoints.list(scope),
            client.checkpoints.usage(scope.run_id))


def test_the_items_and_the_checkpoint_are_stored_as_an_append_and_a_put_would(
        target: Target, client: Client, store: ownstate.SessionStore) -> None:
    _capable(target)
    assert client.checkpoints.puts_items
    one = store.add(actor_id="a", session_id="one")
    two = store.add(actor_id="a", session_id="two")
    one.append_items([{"role": "user", "content": "hello"}])
    two.append_items([{"role": "user", "content": "hello"}])
    scope = client.runs.open_run(one, "langgraph", "t").checkpoint_scope()
    record, items = _put(client, scope, _ITEMS, 2)
    appended = two.append_items(_ITEMS)
    assert [_columns(i) for i in items] == [_columns(i) for i in appended]
    assert [i.seq for i in items] == [2, 3, 4]
    listed = list(one.list_items(order_by="create_time asc"))
    assert [(i.item_id, _columns(i)) for i in listed[1:]] == [
        (i.item_id, _columns(i)) for i in items]
    assert all(i.session_id == "one" for i in items)
    got = client.checkpoints.get(scope, "c1")
    assert got == record
    assert got is not None
    assert (got.payload, got.metadata, got.type_tag) == (b'{"step": 1}', {"step": 1}, "json")
    assert one.refresh().last_activity_time == items[0].create_time
    # the next append continues after them, gapless
    assert [i.seq for i in one.append_items([{"role": "user", "content": "thanks"}])] == [5]


def test_items_stored_with_a_checkpoint_are_found_by_search(
        target: Target, client: Client, session: ownstate.Session,
        checkpoint_scope: CheckpointScope) -> None:
    _capable(target)
    if not target.has(Capability.TEXT_SEARCH):
        pytest.skip(f"{target.name} does not declare Capability.TEXT_SEARCH")
    _put(client, checkpoint_scope, _ITEMS, 1)
    hits = client.session_stores.search_items("Lisbon parcel", store=session.store)
    assert [h.item.seq for h in hits] == [1]


def test_a_replaced_checkpoint_keeps_its_writes_and_place(
        target: Target, client: Client, session: ownstate.Session,
        checkpoint_scope: CheckpointScope) -> None:
    _capable(target)
    scope = checkpoint_scope
    client.checkpoints.put(scope, "c1", type_tag="json", payload=b"first")
    client.checkpoints.put(scope, "c2", type_tag="json", payload=b"second")
    client.checkpoints.put_writes(scope, "c1", [PendingWrite("t", 0, "ch", "json", b"w")])
    record, items = _put(client, scope, _ITEMS[:1], 1)
    assert [w.payload for w in record.pending_writes] == [b"w"]
    assert [c.checkpoint_id for c in client.checkpoints.list(scope)] == ["c2", "c1"]
    assert [i.seq for i in items] == [1]


@pytest.mark.parametrize("first_seq", [1, 3, 99])
def test_a_first_seq_that_is_not_the_next_stores_neither(
        target: Target, client: Client, session: ownstate.Session,
        checkpoint_scope: CheckpointScope, first_seq: int) -> None:
    _capable(target)
    session.append_items([{"role": "user", "content": "hi"}])
    before = _stored(client, checkpoint_scope)
    with pytest.raises(SeqConflict) as err:
        _put(client, checkpoint_scope, _ITEMS, first_seq)
    assert (err.value.session_id, err.value.first_seq) == (session.session_id, first_seq)
    assert _stored(client, checkpoint_scope) == before


def _leased(client: Client, session: ownstate.Session) -> Run:
    return client.runs.open_run(session, "langgraph", "t-1", owner="w1", ttl=30)


def test_a_stale_fence_stores_neither(target: Target, client: Client,
                                      session: ownstate.Session,
                                      frozen_time: FrozenTime) -> None:
    _capable(target)
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    frozen_time.advance(31)
    client.runs.resume(run.run_id, "w2", ttl=30)  # the lease moves on: token 2
    before = _stored(client, scope)
    with pytest.raises(StaleLease):
        _put(client, scope, _ITEMS, 1, fencing_token=run.fencing_token)
    assert _stored(client, scope) == before
    # the same write under the current lease is stored whole
    token = client.runs.get(run.run_id).fencing_token
    _, items = _put(client, scope, _ITEMS, 1, fencing_token=token)
    assert [i.seq for i in items] == [1, 2, 3]


def test_a_closed_run_stores_neither(target: Target, client: Client,
                                     session: ownstate.Session) -> None:
    _capable(target)
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    client.runs.close_run(run.run_id, status="done", fencing_token=run.fencing_token)
    before = _stored(client, scope)
    with pytest.raises(RunClosed):
        _put(client, scope, _ITEMS, 1, fencing_token=run.fencing_token)
    assert _stored(client, scope) == before


def test_a_run_outside_the_scope_stores_neither(
        target: Target, client: Client, store: ownstate.SessionStore,
        session: ownstate.Session, checkpoint_run: Run) -> None:
    _capable(target)
    other = store.add(actor_id="someone-else", session_id="other")
    foreign = CheckpointScope(other.actor_id, store.name, other.session_id,
                              checkpoint_run.run_id)
    before = _stored(client, checkpoint_run.checkpoint_scope())
    with pytest.raises(RunNotFound):
        _put(client, foreign, _ITEMS, 1)
    with pytest.raises(RunNotFound):
        _put(client, CheckpointScope(session.actor_id, store.name, session.session_id,
                                     "run-nope"), _ITEMS, 1)
    assert _stored(client, checkpoint_run.checkpoint_scope()) == before


def test_bad_items_or_seq_are_refused_before_anything_is_stored(
        target: Target, client: Client, session: ownstate.Session,
        checkpoint_scope: CheckpointScope) -> None:
    _capable(target)
    before = _stored(client, checkpoint_scope)
    for items, first_seq in (([], 1), ([{"bad": float("nan")}], 1), (["not an object"], 1),
                             (_ITEMS, 0), (_ITEMS, True)):
        with pytest.raises(InvalidInput):
            _put(client, checkpoint_scope, items, first_seq)  # type: ignore[arg-type]
    assert _stored(client, checkpoint_scope) == before


def test_a_backend_without_it_refuses_and_stores_nothing(
        target: Target, client: Client, session: ownstate.Session,
        checkpoint_scope: CheckpointScope) -> None:
    if target.has(Capability.CHECKPOINT_ITEMS):
        pytest.skip(f"{target.name} declares Capability.CHECKPOINT_ITEMS")
    assert not client.checkpoints.puts_items
    before = _stored(client, checkpoint_scope)
    with pytest.raises(InvalidInput, match="CHECKPOINT_ITEMS"):
        _put(client, checkpoint_scope, _ITEMS, 1)
    assert _stored(client, checkpoint_scope) == before
