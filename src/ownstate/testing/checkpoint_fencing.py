"""Conformance tests for fenced checkpoint writes and paged checkpoint listings.

Star-import this module in a test file that provides a ``target`` fixture. A worker that
lost its run (another one claimed it, or the run ended) must not change its checkpoints:
``put``, ``put_writes`` and ``delete`` with its old fencing token are refused and leave
everything as it was. Listings come a page at a time, bounded in count and in bytes.

It may touch the public sync API, the error tree, the limits, the model and the shared
fixtures, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ownstate
from ownstate.errors import InvalidInput, LimitExceeded, RunClosed, RunNotFound, StaleLease
from ownstate.limits import Limits
from ownstate.model import CheckpointScope, PendingWrite, Run

from .fixtures import *
from .fixtures import FrozenTime

Client = ownstate.Client

#: Every fenced write, as ``write(client, scope, **fence)``.
WRITES: dict[str, Callable[..., Any]] = {
    "put": lambda c, s, **f: c.checkpoints.put(s, "c1", type_tag="json", payload=b"zombie",
                                               **f),
    "put_new": lambda c, s, **f: c.checkpoints.put(s, "c9", type_tag="json", payload=b"z",
                                                   **f),
    "put_writes": lambda c, s, **f: c.checkpoints.put_writes(
        s, "c1", [PendingWrite("t", 0, "ch", "json", b"zombie")], **f),
    "delete": lambda c, s, **f: c.checkpoints.delete(s, ["c1"], **f),
}


def _stored(client: Client, scope: CheckpointScope) -> Any:
    return (client.checkpoints.list(scope), client.checkpoints.usage(scope.run_id))


def _leased(client: Client, session: ownstate.Session) -> Run:
    """A run leased to ``w1`` for 30 s (token 1), holding checkpoint ``c1`` with a write."""
    run = client.runs.open_run(session, "langgraph", "t-1", owner="w1", ttl=30)
    scope = run.checkpoint_scope()
    client.checkpoints.put(scope, "c1", type_tag="json", payload=b"first",
                           fencing_token=run.fencing_token)
    client.checkpoints.put_writes(scope, "c1", [PendingWrite("t", 0, "ch", "json", b"w")],
                                  fencing_token=run.fencing_token)
    return run


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_zombie_after_a_takeover_is_refused_and_changes_nothing(
        client: Client, session: ownstate.Session, frozen_time: FrozenTime,
        write: str) -> None:
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    frozen_time.advance(31)  # w1 stalls past its lease; w2 takes the run over
    lease = client.runs.resume(run.run_id, owner="w2", ttl=30)
    before = _stored(client, scope)
    with pytest.raises(StaleLease) as caught:
        WRITES[write](client, scope, fencing_token=run.fencing_token)
    assert caught.value.details == {"run_id": run.run_id, "fencing_token": 1, "current": 2}
    assert _stored(client, scope) == before
    WRITES[write](client, scope, fencing_token=lease.fencing_token)  # the new holder may


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_after_the_run_ended_is_refused_and_changes_nothing(
        client: Client, session: ownstate.Session, write: str) -> None:
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    client.runs.close_run(run.run_id, "cancelled")  # an operator stops it
    before = _stored(client, scope)
    with pytest.raises(RunClosed) as caught:
        WRITES[write](client, scope, fencing_token=run.fencing_token)
    assert caught.value.details == {"run_id": run.run_id, "status": "cancelled"}
    assert _stored(client, scope) == before


def test_a_stale_token_on_an_ended_run_is_stale_first(client: Client,
                                                     session: ownstate.Session) -> None:
    run = _leased(client, session)
    client.runs.mark_awaiting(run.run_id, {"kind": "approval"}, fencing_token=1)
    lease = client.runs.resume(run.run_id, owner="w2")
    client.runs.close_run(run.run_id, "done", fencing_token=lease.fencing_token)
    with pytest.raises(StaleLease):
        WRITES["put"](client, run.checkpoint_scope(), fencing_token=run.fencing_token)


def test_a_paused_workers_token_goes_stale_when_another_resumes(
        client: Client, session: ownstate.Session) -> None:
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    client.runs.mark_awaiting(run.run_id, {"kind": "approval"}, fencing_token=1)
    WRITES["put"](client, scope, fencing_token=1)  # still its token while paused
    client.runs.resume(run.run_id, owner="w2")
    before = _stored(client, scope)
    with pytest.raises(StaleLease):
        WRITES["put_writes"](client, scope, fencing_token=1)
    assert _stored(client, scope) == before


@pytest.mark.parametrize("write", sorted(WRITES))
def test_the_fence_may_be_another_run_of_the_session(client: Client,
                                                    session: ownstate.Session,
                                                    write: str) -> None:
    # As LangGraph keeps a thread's checkpoints on its first run, fenced by the
    # invocation's own run.
    holder = _leased(client, session)
    client.runs.close_run(holder.run_id, "done", fencing_token=1)
    scope = holder.checkpoint_scope()
    invocation = client.runs.open_run(session, "langgraph", "t-1", owner="w1")
    fence = {"fencing_token": invocation.fencing_token, "fencing_run_id": invocation.run_id}
    WRITES[write](client, scope, **fence)
    client.runs.mark_awaiting(invocation.run_id, {"kind": "approval"}, fencing_token=1)
    client.runs.resume(invocation.run_id, owner="w2")
    before = _stored(client, scope)
    with pytest.raises(StaleLease) as caught:
        WRITES[write](client, scope, **fence)
    assert caught.value.run_id == invocation.run_id
    assert _stored(client, scope) == before


def test_a_fence_outside_the_session_is_not_found(client: Client, store: ownstate.SessionStore,
                                                 session: ownstate.Session) -> None:
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    elsewhere = client.runs.open_run(store.add(actor_id="customer-123"), "langgraph",
                                     owner="w1")
    before = _stored(client, scope)
    for fencing_run_id in (elsewhere.run_id, "no-such-run"):
        for write in WRITES.values():
            with pytest.raises(RunNotFound) as caught:
                write(client, scope, fencing_token=1, fencing_run_id=fencing_run_id)
            assert caught.value.run_id == fencing_run_id
    assert _stored(client, scope) == before


def test_unfenced_writes_are_not_fenced(client: Client, session: ownstate.Session) -> None:
    # Without a token a write is an operator's (or a single writer's): it works while
    # another worker holds the lease, and on an ended run.
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    for write in WRITES.values():
        write(client, scope)
    client.runs.close_run(run.run_id, "done")
    for write in WRITES.values():
        write(client, scope)
    assert client.checkpoints.get(scope, "c9") is not None


@pytest.mark.parametrize(("fence", "field"), [
    ({"fencing_token": -1}, "fencing_token"),
    ({"fencing_token": True}, "fencing_token"),
    ({"fencing_token": "1"}, "fencing_token"),
    ({"fencing_run_id": "run-1"}, "fencing_run_id"),
    ({"fencing_token": 1, "fencing_run_id": ""}, "fencing_run_id"),
])
def test_a_malformed_fence_is_refused(client: Client, session: ownstate.Session,
                                      fence: dict[str, Any], field: str) -> None:
    run = _leased(client, session)
    scope = run.checkpoint_scope()
    before = _stored(client, scope)
    for write in WRITES.values():
        with pytest.raises(InvalidInput) as caught:
            write(client, scope, **fence)
        assert caught.value.field == field
    assert _stored(client, scope) == before


# -- paged listings ----------------------------------------------------------------------


def _every_page(client: Client, scope: CheckpointScope, **kwargs: Any) -> list[list[str]]:
    pages, token = [], None
    while True:
        page = client.checkpoints.list_page(scope, page_token=token, **kwargs)
        pages.append([r.checkpoint_id for r in page.items])
        token = page.next_page_token
        if token is None:
            return pages


def test_pages_split_a_listing_by_count(client: Client,
                                        checkpoint_scope: CheckpointScope) -> None:
    for n in range(7):
        client.checkpoints.put(checkpoint_scope, f"c{n}", type_tag="json", payload=b"x",
                               namespace="sub" if n % 3 == 0 else "",
                               metadata={"odd": n % 2 == 1})
    assert _every_page(client, checkpoint_scope, page_size=3) == [
        ["c6", "c5", "c4"], ["c3", "c2", "c1"], ["c0"]]
    assert _every_page(client, checkpoint_scope, page_size=2, namespace="") == [
        ["c5", "c4"], ["c2", "c1"]]
    assert _every_page(client, checkpoint_scope, page_size=2, metadata={"odd": True}) == [
        ["c5", "c3"], ["c1"]]
    assert _every_page(client, checkpoint_scope, page_size=2, before="c4") == [
        ["c3", "c2"], ["c1", "c0"]]
    assert _every_page(client, checkpoint_scope) == [[f"c{n}" for n in range(6, -1, -1)]]


def test_pages_stop_at_the_byte_bound(client: Client,
                                      checkpoint_scope: CheckpointScope) -> None:
    for n, size in enumerate([40, 30, 30, 100, 10]):
        client.checkpoints.put(checkpoint_scope, f"c{n}", type_tag="json",
                               payload=b"x" * size)
    client.checkpoints.put_writes(checkpoint_scope, "c2",
                                  [PendingWrite("t", 0, "ch", "json", b"w" * 25)])
    # newest first: c4 10, c3 100, c2 30 + 25, c1 30, c0 40; never past 60 unless alone
    assert _every_page(client, checkpoint_scope, page_bytes=60) == [
        ["c4"], ["c3"], ["c2"], ["c1"], ["c0"]]
    assert _every_page(client, checkpoint_scope, page_bytes=70) == [
        ["c4"], ["c3"], ["c2"], ["c1", "c0"]]
    assert _every_page(client, checkpoint_scope, page_bytes=200, page_size=2) == [
        ["c4", "c3"], ["c2", "c1"], ["c0"]]


def test_a_token_neither_repeats_nor_skips_while_others_change(
        client: Client, checkpoint_scope: CheckpointScope) -> None:
    for n in range(6):
        client.checkpoints.put(checkpoint_scope, f"c{n}", type_tag="json", payload=b"x")
    first = client.checkpoints.list_page(checkpoint_scope, page_size=2)
    assert [r.checkpoint_id for r in first.items] == ["c5", "c4"]
    client.checkpoints.delete(checkpoint_scope, ["c4", "c3"])  # the last one seen, too
    client.checkpoints.put(checkpoint_scope, "c9", type_tag="json", payload=b"x")
    rest = client.checkpoints.list_page(checkpoint_scope, page_size=10,
                                        page_token=first.next_page_token)
    assert [r.checkpoint_id for r in rest.items] == ["c2", "c1", "c0"]
    assert rest.next_page_token is None


def test_a_page_token_belongs_to_its_listing(client: Client,
                                             checkpoint_scope: CheckpointScope) -> None:
    for n in range(3):
        client.checkpoints.put(checkpoint_scope, f"c{n}", type_tag="json", payload=b"x")
    token = client.checkpoints.list_page(checkpoint_scope, page_size=1).next_page_token
    others: list[dict[str, Any]] = [{"namespace": ""}, {"metadata": {"a": 1}},
                                    {"before": "c2"}, {"page_token": "garbage"}]
    for kwargs in others:
        with pytest.raises(InvalidInput) as caught:
            client.checkpoints.list_page(checkpoint_scope, **{"page_token": token, **kwargs})
        assert caught.value.field == "page_token"


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"page_size": 0}, LimitExceeded, "page_size"),
    ({"page_bytes": 0}, InvalidInput, "page_bytes"),
    ({"page_bytes": 1.5}, InvalidInput, "page_bytes"),
    ({"page_bytes": Limits().max_page_bytes + 1}, LimitExceeded, "page_bytes"),
])
def test_bad_page_arguments_are_refused(client: Client, checkpoint_scope: CheckpointScope,
                                        kwargs: dict[str, Any], error: type[Exception],
                                        field: str) -> None:
    with pytest.raises(error) as caught:
        client.checkpoints.list_page(checkpoint_scope, **kwargs)
    assert getattr(caught.value, "field", None) == field


def test_pages_of_an_unknown_run_are_not_found(client: Client,
                                               checkpoint_scope: CheckpointScope) -> None:
    with pytest.raises(RunNotFound):
        client.checkpoints.list_page(CheckpointScope(
            checkpoint_scope.actor_id, checkpoint_scope.store, checkpoint_scope.session_id,
            "run-nope"))
