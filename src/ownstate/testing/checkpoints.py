"""Conformance tests for checkpoints, pending writes, retention and usage.

Star-import this module in a test file that provides a ``target`` fixture. Ages are driven
by the ``frozen_time`` fixture, which replaces ``ownstate._ids.now`` with a clock that only
moves when the test says so: no test sleeps or asserts timing.
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
    NotFound,
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

from .fixtures import *
from .fixtures import FrozenTime, run_async, snapshot

Client = ownstate.Client

def _put(client: Client, scope: CheckpointScope, checkpoint_id: str, payload: bytes = b"p",
         **kwargs: Any) -> CheckpointRecord:
    kwargs.setdefault("type_tag", "msgpack")
    return client.checkpoints.put(scope, checkpoint_id, payload=payload, **kwargs)


def _ids_of(records: list[CheckpointRecord]) -> list[str]:
    return [r.checkpoint_id for r in records]


def _state(client: Client, *scopes: CheckpointScope) -> Any:
    """Everything stored about these runs' checkpoints, and the tenant's sessions."""
    return ([client.checkpoints.list(s) for s in scopes], client.checkpoints.usage(),
            snapshot(client))


def _other_run(client: Client, store: str, session_id: str, actor_id: str = "customer-123",
               run_id: str | None = None) -> Run:
    st = client.session_stores.get(store)
    session = st.add(actor_id=actor_id, session_id=session_id)
    return client.runs.open_run(session, "langgraph", run_id=run_id)


# put and get -------------------------------------------------------------------------


def test_put_then_get_returns_what_was_stored(client: Client,
                                              checkpoint_scope: CheckpointScope) -> None:
    stored = _put(client, checkpoint_scope, "c1", b"\x00\x01binary\xff", type_tag="msgpack",
                  metadata={"source": "input", "step": -1})
    assert stored.run_id == checkpoint_scope.run_id
    assert (stored.namespace, stored.checkpoint_id, stored.parent_checkpoint_id) == ("", "c1",
                                                                                   None)
    assert (stored.type_tag, stored.payload) == ("msgpack", b"\x00\x01binary\xff")
    assert stored.metadata == {"source": "input", "step": -1}
    assert stored.pending_writes == ()
    assert client.checkpoints.get(checkpoint_scope, "c1") == stored
    assert client.checkpoints.get(checkpoint_scope) == stored


def test_get_latest_is_per_namespace(client: Client, checkpoint_scope: CheckpointScope) -> None:
    assert client.checkpoints.get(checkpoint_scope) is None
    _put(client, checkpoint_scope, "c1")
    _put(client, checkpoint_scope, "c2", parent_checkpoint_id="c1")
    _put(client, checkpoint_scope, "sub-1", namespace="child:1")
    latest = client.checkpoints.get(checkpoint_scope)
    assert latest is not None
    assert (latest.checkpoint_id, latest.parent_checkpoint_id) == ("c2", "c1")
    sub = client.checkpoints.get(checkpoint_scope, namespace="child:1")
    assert sub is not None
    assert sub.checkpoint_id == "sub-1"
    assert client.checkpoints.get(checkpoint_scope, namespace="child:2") is None
    assert client.checkpoints.get(checkpoint_scope, "sub-1") is None
    assert client.checkpoints.get(checkpoint_scope, "no-such") is None


def test_order_is_insertion_not_id(client: Client, checkpoint_scope: CheckpointScope) -> None:
    for checkpoint_id in ["zz", "aa", "mm"]:
        _put(client, checkpoint_scope, checkpoint_id)
    assert _ids_of(client.checkpoints.list(checkpoint_scope)) == ["mm", "aa", "zz"]
    latest = client.checkpoints.get(checkpoint_scope)
    assert latest is not None
    assert latest.checkpoint_id == "mm"


def test_put_again_replaces_and_keeps_its_place(client: Client,
                                                checkpoint_scope: CheckpointScope,
                                                frozen_time: FrozenTime) -> None:
    first = _put(client, checkpoint_scope, "c1", b"old", metadata={"v": 1})
    client.checkpoints.put_writes(checkpoint_scope, "c1",
                                  [PendingWrite("task", 0, "messages", "json", b"w")])
    frozen_time.advance(5)
    _put(client, checkpoint_scope, "c2")
    again = _put(client, checkpoint_scope, "c1", b"new", type_tag="json",
                 parent_checkpoint_id="c0", metadata={"v": 2})
    assert (again.payload, again.type_tag, again.metadata) == (b"new", "json", {"v": 2})
    assert again.parent_checkpoint_id == "c0"
    assert again.create_time == first.create_time
    assert [w.payload for w in again.pending_writes] == [b"w"]
    assert _ids_of(client.checkpoints.list(checkpoint_scope)) == ["c2", "c1"]
    assert client.checkpoints.get(checkpoint_scope, "c1") == again


def test_bytes_likes_are_copied(client: Client, checkpoint_scope: CheckpointScope) -> None:
    buffer = bytearray(b"abc")
    _put(client, checkpoint_scope, "c1", buffer)  # type: ignore[arg-type]
    _put(client, checkpoint_scope, "c2", memoryview(b"xyz"))  # type: ignore[arg-type]
    buffer[0] = ord("Z")
    one, two = client.checkpoints.get(checkpoint_scope, "c1"), client.checkpoints.get(
        checkpoint_scope, "c2")
    assert one is not None
    assert two is not None
    assert (one.payload, two.payload) == (b"abc", b"xyz")
    assert type(one.payload) is bytes
    assert type(two.payload) is bytes


def test_payload_is_never_decoded(client: Client, checkpoint_scope: CheckpointScope) -> None:
    pickled = b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94"
    _put(client, checkpoint_scope, "c1", pickled, type_tag="pickle")
    got = client.checkpoints.get(checkpoint_scope)
    assert got is not None
    assert (got.type_tag, got.payload) == ("pickle", pickled)


def test_empty_payload_and_limits_at_the_bound(make_client: Callable[..., Client]) -> None:
    client = make_client(limits=Limits(max_checkpoint_bytes=8))
    session = client.session_stores.create("bounded").add(actor_id="a", session_id="s")
    scope = client.runs.open_run(session, "langgraph").checkpoint_scope()
    assert _put(client, scope, "empty", b"").payload == b""
    assert _put(client, scope, "full", b"x" * 8).payload == b"x" * 8
    before = _state(client, scope)
    with pytest.raises(LimitExceeded) as err:
        _put(client, scope, "over", b"x" * 9)
    assert (err.value.field, err.value.limit, err.value.actual) == ("payload", 8, 9)
    with pytest.raises(LimitExceeded):
        client.checkpoints.put_writes(scope, "full", [PendingWrite("t", 0, "c", "json",
                                                                   b"x" * 9)])
    with pytest.raises(LimitExceeded):
        client.checkpoints.put_writes(scope, "full", [
            PendingWrite("t", 0, "c", "json", b"x" * 5),
            PendingWrite("t", 1, "c", "json", b"x" * 5)])
    assert _state(client, scope) == before


# pending writes ----------------------------------------------------------------------


def test_pending_writes_are_kept_in_order_and_replaced_in_place(
        client: Client, checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    client.checkpoints.put_writes(checkpoint_scope, "c1", [
        PendingWrite("task-b", 0, "messages", "msgpack", b"b0"),
        PendingWrite("task-a", 1, "messages", "msgpack", b"a1", task_path="~root"),
    ])
    client.checkpoints.put_writes(checkpoint_scope, "c1", [
        PendingWrite("task-a", -3, "__interrupt__", "json", b"stop"),
        PendingWrite("task-b", 0, "messages", "json", b"b0-again"),
    ])
    got = client.checkpoints.get(checkpoint_scope, "c1")
    assert got is not None
    assert got.pending_writes == (
        PendingWrite("task-b", 0, "messages", "json", b"b0-again"),
        PendingWrite("task-a", 1, "messages", "msgpack", b"a1", task_path="~root"),
        PendingWrite("task-a", -3, "__interrupt__", "json", b"stop"),
    )
    assert client.checkpoints.list(checkpoint_scope)[0].pending_writes == got.pending_writes


def test_pending_writes_belong_to_one_checkpoint(client: Client,
                                                 checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    _put(client, checkpoint_scope, "c1", namespace="inner")
    client.checkpoints.put_writes(checkpoint_scope, "c1",
                                  [PendingWrite("t", 0, "ch", "json", b"outer")])
    client.checkpoints.put_writes(checkpoint_scope, "c1",
                                  [PendingWrite("t", 0, "ch", "json", b"inner")],
                                  namespace="inner")
    outer = client.checkpoints.get(checkpoint_scope, "c1")
    inner = client.checkpoints.get(checkpoint_scope, "c1", namespace="inner")
    assert outer is not None
    assert inner is not None
    assert [w.payload for w in outer.pending_writes] == [b"outer"]
    assert [w.payload for w in inner.pending_writes] == [b"inner"]


def test_pending_writes_need_a_stored_checkpoint(client: Client,
                                                 checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    before = _state(client, checkpoint_scope)
    with pytest.raises(CheckpointNotFound) as err:
        client.checkpoints.put_writes(checkpoint_scope, "c2",
                                      [PendingWrite("t", 0, "ch", "json", b"x")])
    assert (err.value.run_id, err.value.checkpoint_id) == (checkpoint_scope.run_id, "c2")
    assert isinstance(err.value, NotFound)
    with pytest.raises(CheckpointNotFound):
        client.checkpoints.put_writes(checkpoint_scope, "c1",
                                      [PendingWrite("t", 0, "ch", "json", b"x")],
                                      namespace="elsewhere")
    assert _state(client, checkpoint_scope) == before


def test_empty_writes_store_nothing(client: Client, checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    client.checkpoints.put_writes(checkpoint_scope, "c1", [])
    got = client.checkpoints.get(checkpoint_scope, "c1")
    assert got is not None
    assert got.pending_writes == ()


@pytest.mark.parametrize("writes", [
    "not-a-list",
    [("t", 0, "ch", "json", b"x")],
    [PendingWrite("t", 0, "ch", "json", b"ok"), PendingWrite("", 0, "ch", "json", b"x")],
    [PendingWrite("t", 0, "ch", "json", b"ok"), PendingWrite("t", 1, "ch", "json", "text")],  # type: ignore[arg-type]
    [PendingWrite("t", True, "ch", "json", b"x")],
    [PendingWrite("t", 1.5, "ch", "json", b"x")],  # type: ignore[arg-type]
    [PendingWrite("t", 0, "", "json", b"x")],
    [PendingWrite("t", 0, "ch", "", b"x")],
    [PendingWrite("t", 0, "ch", "json", b"x", task_path=None)],  # type: ignore[arg-type]
])
def test_bad_writes_are_refused_whole(client: Client, checkpoint_scope: CheckpointScope,
                                      writes: Any) -> None:
    _put(client, checkpoint_scope, "c1")
    before = _state(client, checkpoint_scope)
    with pytest.raises(InvalidInput) as err:
        client.checkpoints.put_writes(checkpoint_scope, "c1", writes)
    assert err.value.field == "writes"
    assert _state(client, checkpoint_scope) == before


def test_too_many_writes_are_refused(make_client: Callable[..., Client]) -> None:
    client = make_client(limits=Limits(max_batch_items=2))
    session = client.session_stores.create("bounded").add(actor_id="a", session_id="s")
    scope = client.runs.open_run(session, "langgraph").checkpoint_scope()
    _put(client, scope, "c1")
    with pytest.raises(LimitExceeded):
        client.checkpoints.put_writes(scope, "c1", [
            PendingWrite("t", n, "ch", "json", b"x") for n in range(3)])
    got = client.checkpoints.get(scope)
    assert got is not None
    assert got.pending_writes == ()


# listing -----------------------------------------------------------------------------


def test_list_newest_first_across_namespaces(client: Client,
                                             checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "c1")
    _put(client, checkpoint_scope, "s1", namespace="sub")
    _put(client, checkpoint_scope, "c2")
    assert _ids_of(client.checkpoints.list(checkpoint_scope)) == ["c2", "s1", "c1"]
    assert _ids_of(client.checkpoints.list(checkpoint_scope, namespace="")) == ["c2", "c1"]
    assert _ids_of(client.checkpoints.list(checkpoint_scope, namespace="sub")) == ["s1"]
    assert client.checkpoints.list(checkpoint_scope, namespace="none") == []


def test_list_limit_and_before(client: Client, checkpoint_scope: CheckpointScope) -> None:
    for n in range(5):
        _put(client, checkpoint_scope, f"c{n}")
    _put(client, checkpoint_scope, "s0", namespace="sub")
    assert _ids_of(client.checkpoints.list(checkpoint_scope, limit=2)) == ["s0", "c4"]
    assert client.checkpoints.list(checkpoint_scope, limit=0) == []
    assert _ids_of(client.checkpoints.list(checkpoint_scope, before="c3")) == ["c2", "c1", "c0"]
    assert _ids_of(client.checkpoints.list(checkpoint_scope, namespace="",
                                           before="c3", limit=1)) == ["c2"]
    assert _ids_of(client.checkpoints.list(checkpoint_scope, before="s0")) == [
        "c4", "c3", "c2", "c1", "c0"]
    assert client.checkpoints.list(checkpoint_scope, before="c0") == []
    with pytest.raises(CheckpointNotFound) as err:
        client.checkpoints.list(checkpoint_scope, before="nope")
    assert err.value.checkpoint_id == "nope"
    with pytest.raises(CheckpointNotFound):
        client.checkpoints.list(checkpoint_scope, namespace="sub", before="c3")


def test_list_filters_by_metadata(client: Client, checkpoint_scope: CheckpointScope) -> None:
    _put(client, checkpoint_scope, "int", metadata={"step": 1, "source": "loop"})
    _put(client, checkpoint_scope, "float", metadata={"step": 1.0, "source": "loop"})
    _put(client, checkpoint_scope, "bool", metadata={"step": True, "source": "input"})
    _put(client, checkpoint_scope, "null", metadata={"step": None})
    _put(client, checkpoint_scope, "nested", metadata={"writes": {"b": [1, "x"], "a": None}})
    _put(client, checkpoint_scope, "none")

    def ids(metadata: dict[str, Any]) -> list[str]:
        return _ids_of(client.checkpoints.list(checkpoint_scope, metadata=metadata))

    assert ids({"step": 1}) == ["int"]
    assert ids({"step": 1.0}) == ["float"]
    assert ids({"step": True}) == ["bool"]
    assert ids({"step": None}) == ["null"]
    assert ids({"source": "loop"}) == ["float", "int"]
    assert ids({"source": "loop", "step": 1}) == ["int"]
    assert ids({"writes": {"a": None, "b": [1, "x"]}}) == ["nested"]
    assert ids({"writes": {"a": None}}) == []
    assert ids({"missing": None}) == []
    assert ids({}) == ["none", "nested", "null", "bool", "float", "int"]


@pytest.mark.parametrize("kwargs", [
    {"namespace": 5}, {"metadata": ["step"]}, {"metadata": {1: "x"}},
    {"metadata": {"k": float("nan")}}, {"metadata": {"k": 2**64}}, {"before": ""},
    {"limit": -1}, {"limit": True},
    {"limit": "2"},
])
def test_bad_list_arguments_are_refused(client: Client, checkpoint_scope: CheckpointScope,
                                        kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        client.checkpoints.list(checkpoint_scope, **kwargs)


# bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"checkpoint_id": ""}, "checkpoint_id"),
    ({"checkpoint_id": "x" * 257}, "checkpoint_id"),
    ({"checkpoint_id": None}, "checkpoint_id"),
    ({"checkpoint_id": 7}, "checkpoint_id"),
    ({"checkpoint_id": "bad\x00id"}, "checkpoint_id"),
    ({"type_tag": ""}, "type_tag"),
    ({"type_tag": "t" * 65}, "type_tag"),
    ({"type_tag": "has space"}, "type_tag"),
    ({"type_tag": None}, "type_tag"),
    ({"payload": "text is not bytes"}, "payload"),
    ({"payload": None}, "payload"),
    ({"payload": [1, 2]}, "payload"),
    ({"namespace": None}, "namespace"),
    ({"namespace": "n" * 257}, "namespace"),
    ({"parent_checkpoint_id": ""}, "parent_checkpoint_id"),
    ({"metadata": ["a"]}, "metadata"),
    ({"metadata": {"k": {1, 2}}}, "metadata"),
    ({"metadata": {"k": math.inf}}, "metadata"),
    ({"metadata": {3: "int key"}}, "metadata"),
])
def test_bad_put_is_refused_and_changes_nothing(client: Client,
                                                checkpoint_scope: CheckpointScope,
                                                kwargs: dict[str, Any], field: str) -> None:
    _put(client, checkpoint_scope, "c1", b"kept", metadata={"k": "v"})
    before = _state(client, checkpoint_scope)
    arguments: dict[str, Any] = {"checkpoint_id": "c1", "type_tag": "msgpack",
                                 "payload": b"new"}
    arguments.update(kwargs)
    checkpoint_id = arguments.pop("checkpoint_id")
    with pytest.raises(InvalidInput) as err:
        client.checkpoints.put(checkpoint_scope, checkpoint_id, **arguments)
    assert err.value.field == field
    assert _state(client, checkpoint_scope) == before


def test_metadata_is_bounded(make_client: Callable[..., Client]) -> None:
    client = make_client(limits=Limits(max_item_bytes=32))
    session = client.session_stores.create("bounded").add(actor_id="a", session_id="s")
    scope = client.runs.open_run(session, "langgraph").checkpoint_scope()
    with pytest.raises(LimitExceeded) as err:
        _put(client, scope, "c1", metadata={"k": "v" * 40})
    assert err.value.field == "metadata"
    assert client.checkpoints.list(scope) == []


@pytest.mark.parametrize("scope", [
    None,
    ("customer-123", "support-agent-sessions", "case-456", "run-1"),
    CheckpointScope("", "support-agent-sessions", "case-456", "run-1"),
    CheckpointScope("customer-123", "Bad Store", "case-456", "run-1"),
    CheckpointScope("customer-123", "support-agent-sessions", "", "run-1"),
    CheckpointScope("customer-123", "support-agent-sessions", "case-456", ""),
    CheckpointScope("customer-123", "support-agent-sessions", "case-456", None),  # type: ignore[arg-type]
])
def test_malformed_scope_is_refused(client: Client, checkpoint_scope: CheckpointScope,
                                    scope: Any) -> None:
    _put(client, checkpoint_scope, "c1")
    before = _state(client, checkpoint_scope)
    with pytest.raises(InvalidInput):
        _put(client, scope, "c2")
    with pytest.raises(InvalidInput):
        client.checkpoints.get(scope)
    with pytest.raises(InvalidInput):
        client.checkpoints.delete_run(scope)
    with pytest.raises(InvalidInput):
        client.checkpoints.delete(scope, ["c1"])
    with pytest.raises(InvalidInput):
        client.checkpoints.copy(scope, checkpoint_scope)
    with pytest.raises(InvalidInput):
        client.checkpoints.copy(checkpoint_scope, scope)
    assert _state(client, checkpoint_scope) == before


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
