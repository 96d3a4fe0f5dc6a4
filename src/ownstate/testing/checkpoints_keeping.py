"""Conformance tests for which checkpoints are kept: scope between runs and tenants,
deleting and copying, cascades, retention policies, usage, and the async client.
Star-imported by :mod:`.checkpoints`. Ages are driven by the ``frozen_time`` fixture, which
replaces ``ownstate._ids.now`` with a clock that only moves when the test says so. It may
touch the public sync API, the error tree, the limits, the model,
:mod:`.checkpoints_storing` and the shared fixtures, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

import ownstate
from ownstate.errors import (
    CheckpointNotFound,
    InvalidInput,
    LimitExceeded,
    RunNotFound,
    SessionNotFound,
)
from ownstate.limits import Limits
from ownstate.model import (
    CheckpointRecord,
    CheckpointScope,
    PendingWrite,
    RetentionPolicy,
    RetentionReport,
    Run,
    RunUsage,
)

from .checkpoints_storing import (
    _ids_of,
    _other_run,
    _put,
    _state,
)
from .fixtures import *
from .fixtures import FrozenTime, run_async, snapshot

Client = ownstate.Client


# scope -------------------------------------------------------------------------------


_OPERATIONS: dict[str, Callable[[Client, CheckpointScope], object]] = {
    "put": lambda c, s: _put(c, s, "c9"),
    "put_writes": lambda c, s: c.checkpoints.put_writes(
        s, "c1", [PendingWrite("t", 0, "ch", "json", b"x")]),
    "get": lambda c, s: c.checkpoints.get(s),
    "get_by_id": lambda c, s: c.checkpoints.get(s, "c1"),
    "list": lambda c, s: c.checkpoints.list(s),
    "delete_run": lambda c, s: c.checkpoints.delete_run(s),
    "delete": lambda c, s: c.checkpoints.delete(s, ["c1"]),
    "delete_in_namespace": lambda c, s: c.checkpoints.delete(s, ["c1"], namespace=""),
    "delete_nothing": lambda c, s: c.checkpoints.delete(s, []),
    "copy_from": lambda c, s: c.checkpoints.copy(s, s),
}


def _refusal(call: Callable[[], object]) -> RunNotFound:
    with pytest.raises(RunNotFound) as err:
        call()
    return err.value


@pytest.mark.parametrize("operation", sorted(_OPERATIONS))
def test_unknown_and_foreign_runs_are_indistinguishable(
        client: Client, other_tenant: Client, session: ownstate.Session, checkpoint_run: Run,
        operation: str) -> None:
    scope = checkpoint_run.checkpoint_scope()
    _put(client, scope, "c1")
    store = client.session_stores.get(session.store)
    store.add(actor_id="customer-999", session_id="case-other")
    client.session_stores.create("another-store").add(actor_id=session.actor_id,
                                                       session_id=session.session_id)
    run_id = checkpoint_run.run_id
    wrong = [
        CheckpointScope("customer-999", scope.store, scope.session_id, run_id),
        CheckpointScope(scope.actor_id, scope.store, "case-other", run_id),
        CheckpointScope(scope.actor_id, "another-store", scope.session_id, run_id),
        CheckpointScope("customer-999", scope.store, "case-other", run_id),
        CheckpointScope(scope.actor_id, scope.store, "no-such-session", run_id),
    ]
    before = _state(client, scope)
    act = _OPERATIONS[operation]
    # in another tenant the same run id names no run at all
    unknown = _refusal(lambda: act(other_tenant, scope))
    assert unknown.details == {"run_id": run_id}
    for foreign in wrong:
        refused = _refusal(lambda: act(client, foreign))  # noqa: B023
        assert type(refused) is type(unknown)
        assert str(refused) == str(unknown)
        assert refused.details == unknown.details
        assert refused.code == unknown.code
    assert _state(client, scope) == before


def test_foreign_and_unknown_give_equal_errors(client: Client, session: ownstate.Session,
                                               checkpoint_run: Run,
                                               other_tenant: Client) -> None:
    scope = checkpoint_run.checkpoint_scope()
    _put(client, scope, "c1")
    as_other_actor = CheckpointScope("intruder", scope.store, scope.session_id, scope.run_id)
    foreign = _refusal(lambda: client.checkpoints.get(as_other_actor))
    from_other_tenant = _refusal(lambda: other_tenant.checkpoints.get(scope))
    client.checkpoints.delete_run(scope)
    client.runs.close_run(scope.run_id, "done")
    session.delete()
    unknown = _refusal(lambda: client.checkpoints.get(scope))
    assert str(foreign) == str(from_other_tenant) == str(unknown)
    assert foreign.details == from_other_tenant.details == unknown.details
    assert type(foreign) is type(from_other_tenant) is type(unknown) is RunNotFound


def test_copy_names_the_missing_run(client: Client, checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    missing = CheckpointScope(checkpoint_scope.actor_id, checkpoint_scope.store,
                              checkpoint_scope.session_id, "run-missing")
    before = _state(client, checkpoint_scope)
    assert _refusal(lambda: client.checkpoints.copy(missing, checkpoint_scope)).run_id == (
        "run-missing")
    assert _refusal(lambda: client.checkpoints.copy(checkpoint_scope, missing)).run_id == (
        "run-missing")
    assert _state(client, checkpoint_scope) == before


def test_tenants_do_not_see_each_other(client: Client, other_tenant: Client,
                                       session: ownstate.Session, checkpoint_run: Run) -> None:
    scope = checkpoint_run.checkpoint_scope()
    _put(client, scope, "c0", b"older")
    _put(client, scope, "c1", b"mine")
    client.runs.close_run(scope.run_id, "done")
    theirs = other_tenant.session_stores.create(session.store).add(
        actor_id=session.actor_id, session_id=session.session_id)
    their_run = other_tenant.runs.open_run(theirs, "langgraph", run_id="run-shared-name")
    their_scope = their_run.checkpoint_scope()
    _put(other_tenant, their_scope, "c1", b"theirs")
    assert other_tenant.checkpoints.usage() == [RunUsage("run-shared-name", 1, 6)]
    assert client.checkpoints.usage() == [RunUsage(scope.run_id, 2, 9)]
    assert client.checkpoints.usage("run-shared-name") == []
    with pytest.raises(RunNotFound):
        client.checkpoints.get(their_scope)
    with pytest.raises(SessionNotFound):
        other_tenant.checkpoints.delete_session(session.actor_id, "no-such-store", "nope")
    assert other_tenant.checkpoints.delete_session(session.actor_id, session.store,
                                                   session.session_id) == 1
    _put(other_tenant, their_scope, "c2", b"theirs")
    other_tenant.runs.close_run(their_run.run_id, "done")
    report = other_tenant.checkpoints.apply_retention(RetentionPolicy(keep_last=1,
                                                                      drop_when_run_ends=True))
    assert report == RetentionReport(1, 6)
    assert _ids_of(client.checkpoints.list(scope)) == ["c1", "c0"]
    assert client.checkpoints.delete_run(scope) == 2


# deleting and copying ----------------------------------------------------------------


def _facts(client: Client) -> Any:
    memory = client.memory_stores.get("checkpoint-facts")
    return memory.recall("user:1")


def _everything_but_checkpoints(client: Client, *run_ids: str) -> Any:
    return (snapshot(client), [client.runs.get(r) for r in run_ids], _facts(client),
            [(a, client.assets.get(a.asset_id)) for st in client.session_stores.list()
             for s in st.list_sessions() for a in client.assets.list(s)])


def _busy_tenant(client: Client, session: ownstate.Session) -> tuple[Run, Run]:
    """Two runs in two sessions with items, checkpoints, writes, facts and assets."""
    session.append_items([{"role": "user", "content": "hello"}])
    memory = client.memory_stores.create("checkpoint-facts")
    memory.remember("user:1", "channel", "email", source=next(iter(session.list_items())))
    client.assets.put(b"image", "image/png", session=session)
    first = client.runs.open_run(session, "langgraph", run_id="run-first")
    other_session = client.session_stores.get(session.store).add(actor_id="customer-7",
                                                                  session_id="case-7")
    other_session.append_items([{"role": "user", "content": "other"}])
    second = client.runs.open_run(other_session, "langgraph", run_id="run-second")
    for run in (first, second):
        scope = run.checkpoint_scope()
        for n in range(3):
            _put(client, scope, f"c{n}", b"x" * 10, metadata={"step": n})
        client.checkpoints.put_writes(scope, "c2", [PendingWrite("t", 0, "ch", "json",
                                                                 b"y" * 5)])
    return first, second


def test_delete_run_keeps_everything_else(client: Client, session: ownstate.Session) -> None:
    first, second = _busy_tenant(client, session)
    before = _everything_but_checkpoints(client, first.run_id, second.run_id)
    assert client.checkpoints.delete_run(first.checkpoint_scope()) == 3
    assert client.checkpoints.list(first.checkpoint_scope()) == []
    assert len(client.checkpoints.list(second.checkpoint_scope())) == 3
    assert _everything_but_checkpoints(client, first.run_id, second.run_id) == before
    assert client.checkpoints.delete_run(first.checkpoint_scope()) == 0
    _put(client, first.checkpoint_scope(), "again")
    assert _ids_of(client.checkpoints.list(first.checkpoint_scope())) == ["again"]


def _by_id(client: Client, scope: CheckpointScope) -> dict[tuple[str, str], CheckpointRecord]:
    return {(r.namespace, r.checkpoint_id): r for r in client.checkpoints.list(scope)}


def test_delete_some_checkpoints_keeps_the_rest_as_they_were(
        client: Client, checkpoint_scope: CheckpointScope, frozen_time: FrozenTime) -> None:
    scope = checkpoint_scope
    for n in range(5):
        _put(client, scope, f"c{n}", f"payload-{n}".encode(), metadata={"step": n},
             parent_checkpoint_id=f"c{n - 1}" if n else None)
        client.checkpoints.put_writes(scope, f"c{n}", [PendingWrite("t", 0, "ch", "json",
                                                                    b"w%d" % n)])
        frozen_time.advance(10)
    before = _by_id(client, scope)
    assert client.checkpoints.delete(scope, ["c1", "c3"]) == 2
    rest = client.checkpoints.list(scope)
    assert _ids_of(rest) == ["c4", "c2", "c0"]
    assert rest == [before[("", i)] for i in ("c4", "c2", "c0")]
    assert client.checkpoints.get(scope, "c1") is None
    assert client.checkpoints.get(scope, "c3") is None
    assert client.checkpoints.get(scope) == before[("", "c4")]
    assert _ids_of(client.checkpoints.list(scope, before="c2")) == ["c0"]
    assert _ids_of(client.checkpoints.list(scope, limit=2)) == ["c4", "c2"]
    assert _ids_of(client.checkpoints.list(scope, metadata={"step": 2})) == ["c2"]
    with pytest.raises(CheckpointNotFound):
        client.checkpoints.list(scope, before="c3")
    assert client.checkpoints.delete(scope, ["c4"]) == 1
    assert client.checkpoints.get(scope) == before[("", "c2")]


def test_delete_matches_every_namespace_or_one(client: Client,
                                               checkpoint_scope: CheckpointScope) -> None:
    scope = checkpoint_scope
    _put(client, scope, "c1")
    _put(client, scope, "c1", namespace="sub")
    _put(client, scope, "c2", namespace="sub")
    _put(client, scope, "c1", namespace="other")
    assert client.checkpoints.delete(scope, ["c1"], namespace="sub") == 1
    assert sorted(_by_id(client, scope)) == [("", "c1"), ("other", "c1"), ("sub", "c2")]
    assert client.checkpoints.delete(scope, ["c1", "c2"], namespace="") == 1
    assert sorted(_by_id(client, scope)) == [("other", "c1"), ("sub", "c2")]
    _put(client, scope, "c2")
    assert client.checkpoints.delete(scope, ["c2", "c1"]) == 3
    assert client.checkpoints.list(scope) == []
    assert client.checkpoints.usage(scope.run_id) == []


def test_delete_ignores_ids_not_stored(client: Client,
                                       checkpoint_scope: CheckpointScope) -> None:
    scope = checkpoint_scope
    _put(client, scope, "c1")
    _put(client, scope, "c2")
    before = _state(client, scope)
    assert client.checkpoints.delete(scope, ["nope"]) == 0
    assert client.checkpoints.delete(scope, ["c1"], namespace="elsewhere") == 0
    assert _state(client, scope) == before
    assert client.checkpoints.delete(scope, ["nope", "c1", "c1", "gone"]) == 1
    assert client.checkpoints.delete(scope, ["c1"]) == 0
    assert _ids_of(client.checkpoints.list(scope)) == ["c2"]


def test_delete_nothing(client: Client, checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    before = _state(client, checkpoint_scope)
    assert client.checkpoints.delete(checkpoint_scope, []) == 0
    assert client.checkpoints.delete(checkpoint_scope, (), namespace="") == 0
    assert _state(client, checkpoint_scope) == before
    fresh = _other_run(client, checkpoint_scope.store, "case-empty").checkpoint_scope()
    assert client.checkpoints.delete(fresh, ["c1"]) == 0


def test_delete_takes_pending_writes_and_a_new_put_is_new(
        client: Client, checkpoint_scope: CheckpointScope, frozen_time: FrozenTime) -> None:
    scope = checkpoint_scope
    first = _put(client, scope, "c1", b"old")
    client.checkpoints.put_writes(scope, "c1", [PendingWrite("t", 0, "ch", "json", b"w")])
    frozen_time.advance(10)
    _put(client, scope, "c2")
    _put(client, scope, "c3")
    assert client.checkpoints.delete(scope, ["c1"]) == 1
    frozen_time.advance(10)
    again = _put(client, scope, "c1", b"new")
    assert again.pending_writes == ()
    assert again.create_time > first.create_time
    assert _ids_of(client.checkpoints.list(scope)) == ["c1", "c3", "c2"]
    assert client.checkpoints.get(scope) == again
    # the newest one deleted and stored again is still the newest
    assert client.checkpoints.delete(scope, ["c1"]) == 1
    _put(client, scope, "c1", b"newer")
    assert _ids_of(client.checkpoints.list(scope)) == ["c1", "c3", "c2"]
    assert client.checkpoints.list(scope, before="c1")[0].checkpoint_id == "c3"
    assert client.checkpoints.usage(scope.run_id) == [RunUsage(scope.run_id, 3, 7)]


def test_delete_updates_usage_and_keeps_everything_else(client: Client,
                                                        session: ownstate.Session) -> None:
    first, second = _busy_tenant(client, session)
    before = _everything_but_checkpoints(client, first.run_id, second.run_id)
    others = client.checkpoints.list(second.checkpoint_scope())
    assert client.checkpoints.usage() == [RunUsage("run-first", 3, 35),
                                          RunUsage("run-second", 3, 35)]
    assert client.checkpoints.delete(first.checkpoint_scope(), ["c2"]) == 1
    assert client.checkpoints.usage() == [RunUsage("run-second", 3, 35),
                                          RunUsage("run-first", 2, 20)]
    assert client.checkpoints.delete(first.checkpoint_scope(), ["c0", "c1"]) == 2
    assert client.checkpoints.usage() == [RunUsage("run-second", 3, 35)]
    assert client.checkpoints.usage("run-first") == []
    assert client.checkpoints.list(first.checkpoint_scope()) == []
    assert client.checkpoints.list(second.checkpoint_scope()) == others
    assert _everything_but_checkpoints(client, first.run_id, second.run_id) == before
    _put(client, first.checkpoint_scope(), "c0", b"abc")
    assert client.checkpoints.usage("run-first") == [RunUsage("run-first", 1, 3)]
    assert client.checkpoints.apply_retention(RetentionPolicy(keep_last=1)) == (
        RetentionReport(checkpoints_deleted=2, bytes_freed=20))


def test_delete_in_one_run_leaves_the_same_ids_of_another(client: Client,
                                                          session: ownstate.Session) -> None:
    first, second = _busy_tenant(client, session)
    theirs = client.checkpoints.list(second.checkpoint_scope())
    assert client.checkpoints.delete(first.checkpoint_scope(), ["c0", "c1", "c2"]) == 3
    assert client.checkpoints.list(second.checkpoint_scope()) == theirs


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"checkpoint_ids": "c1"}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": b"c1"}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": None}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": {"c1": 1}}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": {"c1"}}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": ["c1", ""]}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": ["c1", "x" * 257]}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": ["c1", 7]}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": ["c1", None]}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": ["c1", "bad\x00id"]}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": ["c1", "tab\tid"]}, InvalidInput, "checkpoint_ids"),
    ({"checkpoint_ids": ["c1"] * 3}, LimitExceeded, "checkpoint_ids"),
    ({"namespace": 5}, InvalidInput, "namespace"),
    ({"namespace": "n" * 257}, InvalidInput, "namespace"),
    ({"namespace": "bad\x00ns"}, InvalidInput, "namespace"),
])
def test_bad_delete_is_refused_and_changes_nothing(make_client: Callable[..., Client],
                                                   kwargs: dict[str, Any],
                                                   error: type[Exception], field: str) -> None:
    client = make_client(limits=Limits(max_batch_items=2))
    session = client.session_stores.create("bounded").add(actor_id="a", session_id="s")
    scope = client.runs.open_run(session, "langgraph").checkpoint_scope()
    _put(client, scope, "c1", metadata={"k": "v"})
    client.checkpoints.put_writes(scope, "c1", [PendingWrite("t", 0, "ch", "json", b"w")])
    _put(client, scope, "c1", namespace="sub")
    before = _state(client, scope)
    arguments: dict[str, Any] = {"checkpoint_ids": ["c1"]}
    arguments.update(kwargs)
    with pytest.raises(error) as err:
        client.checkpoints.delete(scope, arguments.pop("checkpoint_ids"), **arguments)
    assert getattr(err.value, "field", None) == field
    assert _state(client, scope) == before
    # at the bound it goes through
    assert client.checkpoints.delete(scope, ["c1", "c9"]) == 2


def test_delete_session_checkpoints(client: Client, session: ownstate.Session) -> None:
    first, second = _busy_tenant(client, session)
    client.runs.close_run(first.run_id, "done")
    third = client.runs.open_run(session, "langgraph", run_id="run-third")
    _put(client, third.checkpoint_scope(), "t1")
    before = _everything_but_checkpoints(client, first.run_id, second.run_id, third.run_id)
    state = _state(client, first.checkpoint_scope(), second.checkpoint_scope())
    with pytest.raises(SessionNotFound) as err:
        client.checkpoints.delete_session("customer-7", session.store, session.session_id)
    assert (err.value.store, err.value.session_id) == (session.store, session.session_id)
    with pytest.raises(SessionNotFound):
        client.checkpoints.delete_session(session.actor_id, session.store, "no-such")
    with pytest.raises(InvalidInput):
        client.checkpoints.delete_session("", session.store, session.session_id)
    with pytest.raises(InvalidInput):
        client.checkpoints.delete_session(session.actor_id, "Bad Store", session.session_id)
    assert _state(client, first.checkpoint_scope(), second.checkpoint_scope()) == state
    assert client.checkpoints.delete_session(session.actor_id, session.store,
                                             session.session_id) == 4
    assert client.checkpoints.list(first.checkpoint_scope()) == []
    assert client.checkpoints.list(third.checkpoint_scope()) == []
    assert len(client.checkpoints.list(second.checkpoint_scope())) == 3
    assert _everything_but_checkpoints(client, first.run_id, second.run_id,
                                       third.run_id) == before


def test_copy_replaces_the_target(client: Client, session: ownstate.Session) -> None:
    first, second = _busy_tenant(client, session)
    source, target = first.checkpoint_scope(), second.checkpoint_scope()
    _put(client, source, "s1", b"sub", namespace="sub")
    _put(client, target, "only-in-target")
    originals = client.checkpoints.list(source)
    assert client.checkpoints.copy(source, target) == 4
    copies = client.checkpoints.list(target)
    assert [(c.namespace, c.checkpoint_id, c.parent_checkpoint_id, c.type_tag, c.payload,
             c.metadata, c.create_time, c.pending_writes) for c in copies] == [
        (c.namespace, c.checkpoint_id, c.parent_checkpoint_id, c.type_tag, c.payload,
         c.metadata, c.create_time, c.pending_writes) for c in originals]
    assert {c.run_id for c in copies} == {target.run_id}
    assert client.checkpoints.list(source) == originals
    client.checkpoints.put_writes(target, "c2", [PendingWrite("t", 1, "ch", "json", b"z")])
    source_latest = client.checkpoints.get(source, "c2")
    assert source_latest is not None
    assert len(source_latest.pending_writes) == 1


def test_copy_onto_itself_changes_nothing(client: Client,
                                          checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    _put(client, checkpoint_scope, "c2")
    before = _state(client, checkpoint_scope)
    assert client.checkpoints.copy(checkpoint_scope, checkpoint_scope) == 2
    assert _state(client, checkpoint_scope) == before


# cascades ----------------------------------------------------------------------------


def test_checkpoints_go_with_their_session(client: Client, session: ownstate.Session,
                                           checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    client.checkpoints.put_writes(checkpoint_scope, "c1",
                                  [PendingWrite("t", 0, "ch", "json", b"x")])
    client.runs.close_run(checkpoint_scope.run_id, "done")
    session.delete()
    assert client.checkpoints.usage() == []
    with pytest.raises(RunNotFound):
        client.checkpoints.get(checkpoint_scope)
    again = client.session_stores.get(session.store).add(actor_id=session.actor_id,
                                                         session_id=session.session_id)
    fresh = client.runs.open_run(again, "langgraph", run_id="run-fresh").checkpoint_scope()
    assert client.checkpoints.list(fresh) == []


def test_checkpoints_go_with_their_store(client: Client, session: ownstate.Session,
                                         checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    client.session_stores.delete(session.store, force=True)
    assert client.checkpoints.usage() == []
    with pytest.raises(RunNotFound):
        client.checkpoints.list(checkpoint_scope)


# retention ---------------------------------------------------------------------------


def test_keep_last_per_run_and_namespace(client: Client, session: ownstate.Session) -> None:
    first, second = _busy_tenant(client, session)
    _put(client, first.checkpoint_scope(), "s0", b"abc", namespace="sub")
    before = _everything_but_checkpoints(client, first.run_id, second.run_id)
    report = client.checkpoints.apply_retention(RetentionPolicy(keep_last=2))
    assert report == RetentionReport(checkpoints_deleted=2, bytes_freed=20)
    assert _ids_of(client.checkpoints.list(first.checkpoint_scope())) == ["s0", "c2", "c1"]
    assert _ids_of(client.checkpoints.list(second.checkpoint_scope())) == ["c2", "c1"]
    assert client.checkpoints.apply_retention(RetentionPolicy(keep_last=2)) == RetentionReport(
        0, 0)
    report = client.checkpoints.apply_retention(RetentionPolicy(keep_last=1))
    assert report == RetentionReport(checkpoints_deleted=2, bytes_freed=20)
    latest = client.checkpoints.get(first.checkpoint_scope())
    assert latest is not None
    assert latest.checkpoint_id == "c2"
    assert len(latest.pending_writes) == 1
    assert _everything_but_checkpoints(client, first.run_id, second.run_id) == before


def test_max_age(client: Client, session: ownstate.Session, frozen_time: FrozenTime) -> None:
    scope = client.runs.open_run(session, "langgraph").checkpoint_scope()
    _put(client, scope, "old", b"1234")
    client.checkpoints.put_writes(scope, "old", [PendingWrite("t", 0, "ch", "json", b"12")])
    frozen_time.advance(3600)
    _put(client, scope, "new", b"5678")
    frozen_time.advance(1800)
    assert client.checkpoints.apply_retention(
        RetentionPolicy(max_age_seconds=5400)) == RetentionReport(0, 0)
    assert client.checkpoints.apply_retention(
        RetentionPolicy(max_age_seconds=3000)) == RetentionReport(1, 6)
    assert _ids_of(client.checkpoints.list(scope)) == ["new"]


def test_drop_when_run_ends(client: Client, session: ownstate.Session) -> None:
    first, second = _busy_tenant(client, session)
    assert client.checkpoints.apply_retention(
        RetentionPolicy(drop_when_run_ends=True)) == RetentionReport(0, 0)
    client.runs.close_run(first.run_id, "cancelled")
    before = _everything_but_checkpoints(client, first.run_id, second.run_id)
    report = client.checkpoints.apply_retention(RetentionPolicy(drop_when_run_ends=True))
    assert report == RetentionReport(checkpoints_deleted=3, bytes_freed=35)
    assert client.checkpoints.list(first.checkpoint_scope()) == []
    assert len(client.checkpoints.list(second.checkpoint_scope())) == 3
    assert _everything_but_checkpoints(client, first.run_id, second.run_id) == before


@pytest.mark.parametrize("status", ["done", "failed", "cancelled"])
def test_every_ended_status_counts(client: Client, session: ownstate.Session,
                                   status: str) -> None:
    scope = client.runs.open_run(session, "langgraph").checkpoint_scope()
    _put(client, scope, "c1")
    client.runs.close_run(scope.run_id, status)
    assert client.checkpoints.apply_retention(
        RetentionPolicy(drop_when_run_ends=True)).checkpoints_deleted == 1


def test_policies_combine(client: Client, session: ownstate.Session,
                          frozen_time: FrozenTime) -> None:
    first, second = _busy_tenant(client, session)
    frozen_time.advance(100)
    _put(client, second.checkpoint_scope(), "c3", b"fresh")
    client.runs.close_run(first.run_id, "done")
    report = client.checkpoints.apply_retention(
        RetentionPolicy(keep_last=3, max_age_seconds=50, drop_when_run_ends=True))
    assert report == RetentionReport(checkpoints_deleted=6, bytes_freed=70)
    assert _ids_of(client.checkpoints.list(second.checkpoint_scope())) == ["c3"]
    assert client.checkpoints.apply_retention(RetentionPolicy()) == RetentionReport(0, 0)


@pytest.mark.parametrize("policy", [
    None, {"keep_last": 1}, RetentionPolicy(keep_last=0), RetentionPolicy(keep_last=-1),
    RetentionPolicy(keep_last=True), RetentionPolicy(keep_last=1.5),  # type: ignore[arg-type]
    RetentionPolicy(max_age_seconds=0), RetentionPolicy(max_age_seconds=-5),
    RetentionPolicy(max_age_seconds=math.nan), RetentionPolicy(max_age_seconds="60"),  # type: ignore[arg-type]
    RetentionPolicy(drop_when_run_ends=1),  # type: ignore[arg-type]
])
def test_bad_policy_is_refused(client: Client, checkpoint_scope: CheckpointScope,
                               policy: Any) -> None:
    _put(client, checkpoint_scope, "c1")
    before = _state(client, checkpoint_scope)
    with pytest.raises(InvalidInput):
        client.checkpoints.apply_retention(policy)
    assert _state(client, checkpoint_scope) == before


# usage -------------------------------------------------------------------------------


def test_usage_counts_payload_and_writes(client: Client, session: ownstate.Session) -> None:
    _first, second = _busy_tenant(client, session)
    _put(client, second.checkpoint_scope(), "big", b"z" * 100)
    assert client.checkpoints.usage() == [RunUsage("run-second", 4, 135),
                                          RunUsage("run-first", 3, 35)]
    assert client.checkpoints.usage("run-first") == [RunUsage("run-first", 3, 35)]
    assert client.checkpoints.usage("run-unknown") == []
    _put(client, second.checkpoint_scope(), "big", b"z")
    assert client.checkpoints.usage("run-second") == [RunUsage("run-second", 4, 36)]
    with pytest.raises(InvalidInput):
        client.checkpoints.usage("")


# the async client --------------------------------------------------------------------


def test_async_client_has_the_same_checkpoints(target: Any) -> None:
    async def scenario() -> list[str]:
        async with await target.connect_async() as client:
            store = await client.session_stores.create("async-store")
            session = await store.add(actor_id="a", session_id="s")
            run = await client.runs.open_run(session, "langgraph")
            scope = run.checkpoint_scope()
            await client.checkpoints.put(scope, "c1", type_tag="json", payload=b"{}")
            await client.checkpoints.put_writes(scope, "c1",
                                                [PendingWrite("t", 0, "ch", "json", b"1")])
            got = await client.checkpoints.get(scope)
            assert got is not None
            assert len(got.pending_writes) == 1
            await client.checkpoints.put(scope, "c2", type_tag="json", payload=b"{}")
            assert await client.checkpoints.delete(scope, ["c2"], namespace="") == 1
            return _ids_of(await client.checkpoints.list(scope))

    assert run_async(scenario()) == ["c1"]
