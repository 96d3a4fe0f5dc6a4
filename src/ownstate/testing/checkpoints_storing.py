"""Conformance tests for storing checkpoints: put and get, pending writes, listing and the
input refused. Star-imported by :mod:`.checkpoints`; it may touch no backend but through the
client the fixtures give it, and imports only the public sync API, the error tree, the
limits, the model, the shared fixtures and pytest.
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
)
from ownstate.limits import Limits
from ownstate.model import (
    CheckpointRecord,
    CheckpointScope,
    PendingWrite,
    Run,
)

from .fixtures import *
from .fixtures import FrozenTime, snapshot

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


def test_a_write_given_twice_in_one_call_is_stored_once_with_its_last_value(
        client: Client, checkpoint_scope: CheckpointScope) -> None:
    # As if the writes were stored one after another: the second replaces the first in
    # place, so the pair keeps the first one's position.
    _put(client, checkpoint_scope, "c1")
    client.checkpoints.put_writes(checkpoint_scope, "c1", [
        PendingWrite("task-a", 0, "messages", "msgpack", b"first"),
        PendingWrite("task-a", 1, "other", "msgpack", b"between"),
        PendingWrite("task-a", 0, "messages", "json", b"last"),
    ])
    got = client.checkpoints.get(checkpoint_scope, "c1")
    assert got is not None
    assert got.pending_writes == (
        PendingWrite("task-a", 0, "messages", "json", b"last"),
        PendingWrite("task-a", 1, "other", "msgpack", b"between"),
    )


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

