"""Conformance tests for session stores, sessions and items.

Star-import this module in a test file that provides a ``target`` fixture.

It may touch the public sync API, page tokens (``ownstate._tokens``), the limits, the model
and the shared fixtures, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import ownstate
from ownstate import (
    AlreadyExists,
    InvalidInput,
    ItemNotFound,
    LimitExceeded,
    SessionNotFound,
    StoreNotFound,
)

from .fixtures import *
from .fixtures import check_store_kind, check_store_lifecycle, run_async, snapshot

Client = ownstate.Client


def _texts(session: ownstate.Session, order_by: str = "create_time asc") -> list[Any]:
    return [i.data.get("content") for i in session.list_items(order_by=order_by)]


def _messages(*texts: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": t} for t in texts]


# session stores ----------------------------------------------------------------------


def test_store_create_get_list_delete(client: Client) -> None:
    check_store_lifecycle(client.session_stores, "support-agent-sessions")


@pytest.mark.parametrize("name", ["ab", "x" * 56, "Upper", "has space", "dots.bad", "", "é-abc"])
def test_store_bad_names_are_refused(client: Client, name: str) -> None:
    with pytest.raises(InvalidInput):
        client.session_stores.create(name)
    assert list(client.session_stores.list()) == []


@pytest.mark.parametrize("name", ["abc", "x" * 55, "a-b_c-09"])
def test_store_name_bounds_are_accepted(client: Client, name: str) -> None:
    assert client.session_stores.create(name).name == name


def test_store_names_are_unique_and_list_in_order(client: Client) -> None:
    check_store_kind(client.session_stores, "store")


def test_store_delete_refuses_while_sessions_exist(client: Client,
                                                   session: ownstate.Session) -> None:
    session.append_items(_messages("kept"))
    before = snapshot(client)
    with pytest.raises(ownstate.StoreNotEmpty) as err:
        client.session_stores.delete(session.store)
    assert err.value.sessions == 1
    assert snapshot(client) == before


def test_store_delete_force_removes_sessions_and_items(client: Client,
                                                       session: ownstate.Session) -> None:
    session.append_items(_messages("gone"))
    session.fork()
    assert client.session_stores.delete(session.store, force=True) == 2
    with pytest.raises(StoreNotFound):
        client.session_stores.get(session.store)
    recreated = client.session_stores.create(session.store)
    assert list(recreated.list_sessions()) == []


def test_tenants_do_not_see_each_other(client: Client, other_tenant: Client,
                                       session: ownstate.Session) -> None:
    session.append_items(_messages("private"))
    assert list(other_tenant.session_stores.list()) == []
    with pytest.raises(StoreNotFound):
        other_tenant.session_stores.get(session.store)
    theirs = other_tenant.session_stores.create(session.store)
    with pytest.raises(SessionNotFound):
        theirs.get(session.session_id)
    mine_again = theirs.add(actor_id="someone-else", session_id=session.session_id)
    assert list(mine_again.list_items()) == []
    assert _texts(session) == ["private"]


def test_bad_tenant_is_refused(make_client: Any) -> None:
    with pytest.raises(InvalidInput):
        make_client(tenant="")
    with pytest.raises(InvalidInput):
        make_client(tenant="has space")


# sessions ----------------------------------------------------------------------------


def test_add_session_with_generated_and_chosen_ids(store: ownstate.SessionStore) -> None:
    generated = store.add(actor_id="customer-1")
    assert generated.session_id
    assert generated.parent_session_id is None
    assert generated.root_session_id == generated.session_id
    chosen = store.add(actor_id="customer-1", session_id="case-1", metadata={"channel": "web"})
    got = store.get("case-1")
    assert got.record == chosen.record
    assert got.actor_id == "customer-1"
    assert got.metadata == {"channel": "web"}
    assert got.create_time == got.last_activity_time


def test_duplicate_session_is_refused(client: Client, session: ownstate.Session) -> None:
    store = client.session_stores.get(session.store)
    session.append_items(_messages("first"))
    before = snapshot(client)
    with pytest.raises(AlreadyExists) as err:
        store.add(actor_id="someone", session_id=session.session_id)
    assert err.value.session_id == session.session_id
    assert snapshot(client) == before


@pytest.mark.parametrize("actor_id", ["", "   ", None, 7, "bad\nline", "x" * 257, "\udc00"])
def test_actor_id_is_required_and_bounded(client: Client, store: ownstate.SessionStore,
                                          actor_id: Any) -> None:
    with pytest.raises(InvalidInput) as err:
        store.add(actor_id=actor_id)
    assert err.value.field == "actor_id"
    assert list(store.list_sessions()) == []


@pytest.mark.parametrize("session_id", ["", "-leading-dash", "has space", "x" * 129, "ü"])
def test_bad_session_ids_are_refused(store: ownstate.SessionStore, session_id: str) -> None:
    with pytest.raises(InvalidInput):
        store.add(actor_id="a", session_id=session_id)
    assert list(store.list_sessions()) == []


@pytest.mark.parametrize(
    "metadata",
    [{"k": 1}, {"bad key": "v"}, {"k": "\udc00"}, {"k": "v" * 257},
     {f"k{n}": "v" for n in range(33)}, ["k"]],
)
def test_bad_metadata_is_refused(store: ownstate.SessionStore, metadata: Any) -> None:
    with pytest.raises(InvalidInput):
        store.add(actor_id="a", metadata=metadata)
    assert list(store.list_sessions()) == []


def test_unknown_session_and_store(client: Client, store: ownstate.SessionStore) -> None:
    with pytest.raises(SessionNotFound) as err:
        store.get("no-such-session")
    assert (err.value.store, err.value.session_id) == (store.name, "no-such-session")
    with pytest.raises(StoreNotFound):
        client.session_stores.get("no-such-store")


def test_metadata_labels_update(client: Client, session: ownstate.Session) -> None:
    session.update_metadata({"priority": "high", "channel": None})
    assert session.metadata == {"priority": "high"}
    assert client.session_stores.get(session.store).get(session.session_id).metadata == {
        "priority": "high"}
    assert session.actor_id == "customer-123"


def test_metadata_update_past_the_bound_changes_nothing(client: Client,
                                                        session: ownstate.Session) -> None:
    session.update_metadata({f"k{n}": "v" for n in range(31)})
    before = snapshot(client)
    with pytest.raises(LimitExceeded):
        session.update_metadata({"one-more": "v", "and-another": "v"})
    with pytest.raises(InvalidInput):
        session.update_metadata({"k0": 5})  # type: ignore[dict-item]
    with pytest.raises(InvalidInput):
        session.update_metadata({"bad key!": None})
    with pytest.raises(InvalidInput):
        session.append_items([{"a": 1}], idempotency_key="k\ud800")
    with pytest.raises(LimitExceeded):
        session.append_items([{"a": 1}], idempotency_key="k" * 257)
    assert snapshot(client) == before


def test_list_sessions_filters_by_actor_and_metadata(store: ownstate.SessionStore) -> None:
    store.add(actor_id="alice", session_id="s1", metadata={"channel": "web", "tier": "gold"})
    store.add(actor_id="alice", session_id="s2", metadata={"channel": "mail"})
    store.add(actor_id="bob", session_id="s3", metadata={"channel": "web"})
    def ids(**kw: Any) -> list[str]:
        return sorted(s.session_id for s in store.list_sessions(**kw))

    assert ids(actor_id="alice") == ["s1", "s2"]
    assert ids(metadata={"channel": "web"}) == ["s1", "s3"]
    assert ids(actor_id="alice", metadata={"channel": "web", "tier": "gold"}) == ["s1"]
    assert ids(metadata={"channel": "fax"}) == []


def test_list_sessions_orders(store: ownstate.SessionStore) -> None:
    made = [store.add(actor_id="a", session_id=f"s{n}") for n in range(4)]
    newest_first = [s.session_id for s in store.list_sessions()]
    assert newest_first == ["s3", "s2", "s1", "s0"]
    assert [s.session_id for s in store.list_sessions(order_by="create_time asc")] == [
        "s0", "s1", "s2", "s3"]
    made[1].append_items(_messages("touch"))
    by_activity = [s.session_id for s in store.list_sessions(order_by="last_activity_time desc")]
    assert by_activity[0] == "s1"
    assert sorted(by_activity) == ["s0", "s1", "s2", "s3"]


@pytest.mark.parametrize("order_by", ["create_time desc", "create_time asc",
                                      "last_activity_time desc", "last_activity_time asc"])
def test_session_paging_survives_additions(store: ownstate.SessionStore, order_by: str) -> None:
    existing = {store.add(actor_id="a", session_id=f"old-{n:02d}").session_id for n in range(10)}
    seen: list[str] = []
    page = store.list_sessions_page(order_by=order_by, page_size=3)
    added = 0
    while True:
        seen.extend(s.session_id for s in page.items)
        store.add(actor_id="a", session_id=f"new-{added:02d}")
        added += 1
        if page.next_page_token is None:
            break
        page = store.list_sessions_page(order_by=order_by, page_size=3,
                                        page_token=page.next_page_token)
    assert len(seen) == len(set(seen)), "a session was repeated"
    assert existing <= set(seen), "a session that existed was skipped"


def test_session_page_tokens_are_checked(store: ownstate.SessionStore) -> None:
    for n in range(3):
        store.add(actor_id="a", session_id=f"s{n}")
    token = store.list_sessions_page(page_size=1).next_page_token
    assert token is not None
    with pytest.raises(InvalidInput):
        store.list_sessions_page(page_size=1, page_token=token, order_by="create_time asc")
    with pytest.raises(InvalidInput):
        store.list_sessions_page(page_size=1, page_token=token, actor_id="a")
    with pytest.raises(InvalidInput):
        store.list_sessions_page(page_token="not-a-token")
    with pytest.raises(LimitExceeded):
        store.list_sessions_page(page_size=0)
    with pytest.raises(InvalidInput):
        store.list_sessions_page(order_by="name")


def test_json_nests_at_most_the_documented_depth(client: Client,
                                                 session: ownstate.Session) -> None:
    """Items (and every other stored JSON value) nest at most ``MAX_JSON_DEPTH`` levels, so
    whatever is stored can be read back by any JSON library, over HTTP too."""
    from ownstate.limits import MAX_JSON_DEPTH

    def nested(levels: int) -> dict[str, Any]:
        value: dict[str, Any] = {"leaf": True}
        for _ in range(levels - 1):
            value = {"n": value}
        return value

    (kept,) = session.append_items([nested(MAX_JSON_DEPTH)])
    assert session.get_item(kept.item_id).data == nested(MAX_JSON_DEPTH)
    before = snapshot(client)
    with pytest.raises(InvalidInput) as refused:
        session.append_items([nested(MAX_JSON_DEPTH + 1)])
    assert refused.value.details["field"] == "items"
    memory = client.memory_stores.create("deep-memory")
    with pytest.raises(InvalidInput):
        memory.remember("user:1", "deep", [nested(MAX_JSON_DEPTH)])
    assert snapshot(client) == before
    assert memory.recall("user:1") == []


def test_text_no_datastore_can_hold_is_refused_everywhere(client: Client,
                                                         session: ownstate.Session) -> None:
    """A lone surrogate (JSON's "\\ud800" escape spells one) is bad input wherever JSON
    is stored: items, fact values, what a run awaits, checkpoint metadata."""
    from ownstate.model import CheckpointScope

    lone = "\ud800"
    memory = client.memory_stores.create("surrogates")
    run = client.runs.open_run(session, framework="test")
    scope = CheckpointScope(session.actor_id, session.store, session.session_id, run.run_id)
    before = snapshot(client)
    with pytest.raises(InvalidInput):
        session.append_items([{"role": "user", "content": lone}])
    with pytest.raises(InvalidInput):
        memory.remember("user:1", "k", {"text": lone})
    with pytest.raises(InvalidInput):
        client.runs.mark_awaiting(run.run_id, {"kind": lone})
    with pytest.raises(InvalidInput):
        client.checkpoints.put(scope, checkpoint_id="c1", type_tag="json", payload=b"x",
                               metadata={"note": lone})
    assert snapshot(client) == before
    assert memory.recall("user:1") == []
    assert client.runs.get(run.run_id).status == "running"
    assert client.checkpoints.get(scope) is None


def test_integers_beyond_64_bits_are_refused_everywhere(client: Client,
                                                       session: ownstate.Session) -> None:
    """An integer that no signed 64-bit column holds is bad input wherever JSON is stored
    (items, derived token counts, fact values, what a run awaits, effects, checkpoint
    metadata and its filter), as a counter, and as a forged page-token position: every
    backend refuses it alike, and the bounds themselves read back exactly."""
    import base64

    from ownstate._tokens import encode_token
    from ownstate.limits import MAX_INT64, MIN_INT64
    from ownstate.model import CheckpointScope

    (edge,) = session.append_items([{"n": MAX_INT64, "m": MIN_INT64,
                                     "usage": {"input_tokens": MAX_INT64}}])
    assert session.get_item(edge.item_id).data["n"] == MAX_INT64
    session.append_items(_messages("a", "b"))
    memory = client.memory_stores.create("wide-ints")
    run = client.runs.open_run(session, framework="test")
    scope = CheckpointScope(session.actor_id, session.store, session.session_id, run.run_id)
    token = session.list_items_page(page_size=1).next_page_token
    assert token is not None
    listing = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))[4:])[0]

    def refusals(wide: int) -> list[Callable[[], object]]:
        return [
            lambda: session.append_items([{"n": wide}]),
            lambda: session.append_items([{"role": "assistant", "content": "x",
                                           "usage": {"input_tokens": wide}}]),
            lambda: memory.remember("user:1", "k", wide),
            lambda: memory.remember("user:1", "k", {"list": [1, wide]}),
            lambda: client.runs.mark_awaiting(run.run_id, {"kind": "approval", "n": wide}),
            lambda: client.runs.record_effect(run.run_id, "tc-1", {"n": wide}),
            lambda: client.checkpoints.put(scope, "c1", type_tag="json", payload=b"x",
                                           metadata={"step": wide}),
            lambda: client.checkpoints.list(scope, metadata={"step": wide}),
            lambda: client.runs.close_run(run.run_id, "done", step_count=wide),
            lambda: session.list_items_page(after_seq=wide),
            lambda: session.list_items_page(page_size=1,
                                            page_token=encode_token(listing, [wide])),
        ]

    before = snapshot(client)
    for wide in (MAX_INT64 + 1, MIN_INT64 - 1, 10**30):
        for refuse in refusals(wide):
            with pytest.raises(InvalidInput):
                refuse()
    assert snapshot(client) == before
    assert memory.recall("user:1") == []
    assert client.runs.get(run.run_id).status == "running"
    assert client.runs.get_effect(run.run_id, "tc-1") is None
    assert client.checkpoints.get(scope) is None


def test_a_forged_session_page_token_is_refused(client: ownstate.Client,
                                                store: ownstate.SessionStore) -> None:
    """Tokens carry a checksum, not a signature: a token made by hand for the right
    listing but holding positions of the wrong kind is bad input, never a crash."""
    from ownstate._tokens import encode_token

    store.add(actor_id="a", session_id="s0")
    for order, position in (("create_time desc", ["x"]), ("create_time desc", [None]),
                            ("last_activity_time desc", [1, 2]),
                            ("last_activity_time asc", ["a", "b"])):
        scope = "\x00".join(["sessions", client.tenant, store.name, order, "", repr([])])
        with pytest.raises(InvalidInput):
            store.list_sessions_page(order_by=order,
                                     page_token=encode_token(scope, position))


# items -------------------------------------------------------------------------------


def test_append_returns_items_in_order_with_gapless_seq(session: ownstate.Session) -> None:
    first = session.append_items(_messages("a", "b"))
    second = session.append_items(_messages("c"))
    assert [i.seq for i in first + second] == [1, 2, 3]
    assert [i.data["content"] for i in first + second] == ["a", "b", "c"]
    assert len({i.item_id for i in first + second}) == 3
    assert all(i.session_id == session.session_id for i in first)
    assert first[0].create_time <= second[0].create_time
    assert _texts(session) == ["a", "b", "c"]
    assert _texts(session, "create_time desc") == ["c", "b", "a"]
    assert [i.data["content"] for i in session.list_items()] == ["c", "b", "a"]


def test_data_is_stored_exactly_as_given(session: ownstate.Session) -> None:
    data = {
        "type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "héllo \u2603 \U0001f600 \"quoted\"\n"}],
        "nested": {"list": [1, 2.5, -3e-9, True, None, {"deep": []}], "big": 2**62},
        "empty": {}, "zero": 0.0,
    }
    (stored,) = session.append_items([data])
    again = session.get_item(stored.item_id)
    assert stored.data == data == again.data
    assert json.dumps(again.data, sort_keys=True) == json.dumps(data, sort_keys=True)


def test_stored_data_is_immutable(session: ownstate.Session) -> None:
    data: dict[str, Any] = {"role": "user", "content": ["original"]}
    (stored,) = session.append_items([data])
    data["content"].append("changed after append")
    stored.data["content"].append("changed through result")
    listed = next(session.list_items())
    listed.data["content"].append("changed through listing")
    assert session.get_item(stored.item_id).data == {"role": "user", "content": ["original"]}


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "user", "content": float("nan")}],
        [{"role": "user", "content": {1, 2}}],
        [{"role": "user", "content": object()}],
        [{"role": "user", "content": b"bytes"}],
        [{1: "integer key"}],
        [{"content": "lone \ud800 surrogate"}],
        [{"nested": [{"ok": 1}, {2.5: "float key"}]}],
        ["a string item"],
        [["a", "list"]],
        [{"ok": 1}, 5],
        [],
        {"role": "user"},
        "text",
    ],
)
def test_bad_items_are_refused_and_nothing_changes(client: Client, session: ownstate.Session,
                                                   bad: Any) -> None:
    session.append_items(_messages("kept"))
    before = snapshot(client)
    with pytest.raises(InvalidInput) as err:
        session.append_items(bad)
    assert err.value.field == "items"
    assert snapshot(client) == before


def test_cyclic_data_is_refused(client: Client, session: ownstate.Session) -> None:
    loop: list[Any] = []
    loop.append(loop)
    looped: dict[str, Any] = {"role": "user"}
    looped["self"] = looped
    for bad in ({"content": loop}, looped):
        with pytest.raises(InvalidInput):
            session.append_items([bad])
    assert list(session.list_items()) == []


def test_a_batch_with_one_bad_item_stores_none(client: Client, session: ownstate.Session) -> None:
    with pytest.raises(InvalidInput) as err:
        session.append_items([*_messages("fine", "also fine"), {"content": float("inf")}])
    assert err.value.index == 2
    assert list(session.list_items()) == []


@pytest.mark.parametrize("bad", [{"max_item_bytes": 0}, {"max_page_size": -1},
                                 {"default_page_size": 2000}, {"max_batch_items": True},
                                 {"max_item_bytes": 2**30}])
def test_nonsensical_limits_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        ownstate.Limits(**bad)


def test_size_bounds(make_client: Any) -> None:
    client = make_client(limits=ownstate.Limits(max_item_bytes=200, max_batch_items=3,
                                                max_batch_bytes=400))
    session = client.session_stores.create("bounded").add(actor_id="a")
    session.append_items([{"content": "x" * 150}])
    before = snapshot(client)
    with pytest.raises(LimitExceeded) as err:
        session.append_items([{"content": "x" * 200}])
    assert (err.value.field, err.value.limit) == ("items", 200)
    with pytest.raises(LimitExceeded):
        session.append_items([{"n": n} for n in range(4)])
    with pytest.raises(LimitExceeded):
        session.append_items([{"content": "y" * 150}] * 3)
    with pytest.raises(LimitExceeded):
        session.append_items([{"content": "\u00e9" * 100}])  # 200 bytes of UTF-8 plus the keys
    assert snapshot(client) == before


def test_idempotent_retry_returns_first_result(client: Client, session: ownstate.Session) -> None:
    first = session.append_items(_messages("once", "only"), idempotency_key="req-1")
    before = snapshot(client)
    retried = session.append_items(_messages("once", "only"), idempotency_key="req-1")
    assert [(i.item_id, i.seq, i.data) for i in retried] == [
        (i.item_id, i.seq, i.data) for i in first]
    assert snapshot(client) == before
    with pytest.raises(ownstate.IdempotencyKeyReused) as err:
        session.append_items(_messages("different"), idempotency_key="req-1")
    assert err.value.idempotency_key == "req-1"
    assert snapshot(client) == before
    other = session.append_items(_messages("once", "only"), idempotency_key="req-2")
    assert [i.seq for i in other] == [3, 4]


def test_idempotency_keys_are_per_session(store: ownstate.SessionStore) -> None:
    one, two = store.add(actor_id="a"), store.add(actor_id="a")
    one.append_items(_messages("x"), idempotency_key="k")
    assert [i.seq for i in two.append_items(_messages("x"), idempotency_key="k")] == [1]
    assert _texts(two) == ["x"]


def test_derived_columns(session: ownstate.Session) -> None:
    items = session.append_items([
        {"role": "user", "content": "refund my order"},
        {"type": "function_call", "name": "refund", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "message", "role": "assistant", "model": "gpt-x",
         "content": [{"type": "output_text", "text": "done"}],
         "usage": {"input_tokens": 12, "output_tokens": 3}},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
         "usage": {"prompt_tokens": 5, "completion_tokens": 7}},
        {"role": "tool", "name": "lookup", "content": "42", "tool_call_id": "t1"},
        {"something": "else"},
    ])
    got = [(i.role, i.type, i.tool_name, i.model, i.in_tokens, i.out_tokens, i.format)
           for i in session.list_items(order_by="create_time asc")]
    assert got == [
        ("user", "message", None, None, None, None, "openai.responses"),
        (None, "function_call", "refund", None, None, None, "openai.responses"),
        (None, "function_call_output", None, None, None, None, "openai.responses"),
        ("assistant", "message", None, "gpt-x", 12, 3, "openai.responses"),
        ("assistant", "message", "lookup", None, 5, 7, "openai.responses"),
        ("tool", "message", "lookup", None, None, None, "openai.responses"),
        (None, None, None, None, None, None, "json"),
    ]
    assert items[3].in_tokens == 12


def test_explicit_format(client: Client, session: ownstate.Session) -> None:
    (item,) = session.append_items([{"type": "user", "message": {}}], format="claude.transcript")
    assert item.format == "claude.transcript"
    before = snapshot(client)
    with pytest.raises(InvalidInput):
        session.append_items([{"a": 1}], format="Bad Format")
    assert snapshot(client) == before


def test_item_paging(session: ownstate.Session) -> None:
    session.append_items(_messages(*[f"m{n}" for n in range(7)]))
    page = session.list_items_page(order_by="create_time asc", page_size=3)
    seen = [i.data["content"] for i in page.items]
    while page.next_page_token:
        page = session.list_items_page(order_by="create_time asc", page_size=3,
                                       page_token=page.next_page_token)
        seen += [i.data["content"] for i in page.items]
    assert seen == [f"m{n}" for n in range(7)]
    newest = session.list_items_page(page_size=3)
    assert [i.seq for i in newest.items] == [7, 6, 5]
    rest = list(session.list_items(page_token=newest.next_page_token, page_size=2))
    assert [i.seq for i in rest] == [4, 3, 2, 1]
    exact = session.list_items_page(page_size=7)
    assert exact.next_page_token is None


def test_item_listing_from_a_seq(session: ownstate.Session) -> None:
    session.append_items(_messages(*[f"m{n}" for n in range(1, 8)]))
    page = session.list_items_page(order_by="create_time asc", after_seq=4, page_size=2)
    assert [i.seq for i in page.items] == [5, 6]
    rest = session.list_items_page(order_by="create_time asc", page_token=page.next_page_token)
    assert [i.seq for i in rest.items] == [7]
    older = session.list_items_page(after_seq=4)
    assert [i.seq for i in older.items] == [3, 2, 1]
    assert session.list_items_page(order_by="create_time asc", after_seq=7).items == []
    assert [i.seq for i in session.list_items_page(order_by="create_time asc",
                                                   after_seq=0).items] == list(range(1, 8))
    for bad in [-1, "3", 2.0, True]:
        with pytest.raises(InvalidInput):
            session.list_items_page(after_seq=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        session.list_items_page(after_seq=1, page_token=page.next_page_token)


def test_item_page_tokens_are_checked(store: ownstate.SessionStore,
                                      session: ownstate.Session) -> None:
    session.append_items(_messages("a", "b", "c"))
    token = session.list_items_page(page_size=1).next_page_token
    assert token is not None
    other = store.add(actor_id="a")
    other.append_items(_messages("x", "y"))
    with pytest.raises(InvalidInput):
        other.list_items_page(page_token=token)
    with pytest.raises(InvalidInput):
        session.list_items_page(page_token=token, order_by="create_time asc")
    for bad in ["", "garbage", token[:-2], token + "AA", "e30"]:
        with pytest.raises(InvalidInput):
            session.list_items_page(page_token=bad)
    for size in [0, -1, 1001]:
        with pytest.raises(LimitExceeded):
            session.list_items_page(page_size=size)
    with pytest.raises(InvalidInput):
        session.list_items_page(page_size="10")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        session.list_items_page(order_by="seq sideways")


def test_pop_and_clear(session: ownstate.Session) -> None:
    assert session.pop_item() is None
    session.append_items(_messages("a", "b", "c"))
    popped = session.pop_item()
    assert popped is not None
    assert (popped.seq, popped.data["content"]) == (3, "c")
    (d,) = session.append_items(_messages("d"))
    assert d.seq == 3, "seq stays gapless after a pop"
    assert _texts(session) == ["a", "b", "d"]
    assert session.clear() == 3
    assert list(session.list_items()) == []
    assert session.clear() == 0
    (e,) = session.append_items(_messages("e"))
    assert e.seq == 1
    assert session.refresh().session_id == session.session_id


def test_activity_time_moves_with_writes(session: ownstate.Session) -> None:
    created = session.last_activity_time
    session.append_items(_messages("a"))
    appended = session.refresh().last_activity_time
    assert appended >= created
    session.pop_item()
    assert session.refresh().last_activity_time >= appended
    assert session.create_time == created


def test_get_unknown_item(session: ownstate.Session, store: ownstate.SessionStore) -> None:
    other = store.add(actor_id="a")
    (foreign,) = other.append_items(_messages("theirs"))
    for item_id in ["itm_missing", foreign.item_id]:
        with pytest.raises(ItemNotFound) as err:
            session.get_item(item_id)
        assert err.value.item_id == item_id


def test_operations_on_a_deleted_session(session: ownstate.Session) -> None:
    session.delete()
    for call in (lambda: session.append_items(_messages("x")), session.pop_item, session.clear,
                 lambda: list(session.list_items()), session.refresh, session.fork,
                 lambda: session.update_metadata({"a": "b"}), session.delete):
        with pytest.raises(SessionNotFound):
            call()


# fork and delete ---------------------------------------------------------------------


def test_fork_copies_history(store: ownstate.SessionStore, session: ownstate.Session) -> None:
    items = session.append_items(_messages("a", "b", "c"))
    whole = session.fork()
    upto = session.fork(up_to_item_id=items[1].item_id, session_id="case-456-retry")
    assert whole.parent_session_id == session.session_id
    assert upto.session_id == "case-456-retry"
    assert _texts(whole) == ["a", "b", "c"]
    assert _texts(upto) == ["a", "b"]
    assert [i.seq for i in upto.list_items(order_by="create_time asc")] == [1, 2]
    assert upto.actor_id == session.actor_id
    assert upto.metadata == session.metadata
    copied = {i.item_id for i in whole.list_items()}
    assert not copied & {i.item_id for i in items}, "forked items get their own ids"
    (d,) = upto.append_items(_messages("d"))
    assert d.seq == 3
    assert _texts(session) == ["a", "b", "c"]
    grandchild = upto.fork()
    assert grandchild.parent_session_id == upto.session_id
    assert grandchild.root_session_id == session.session_id
    assert store.get(grandchild.session_id).root_session_id == session.session_id


def test_fork_refusals_change_nothing(client: Client, session: ownstate.Session,
                                      store: ownstate.SessionStore) -> None:
    session.append_items(_messages("a"))
    other = store.add(actor_id="x", session_id="other")
    (foreign,) = other.append_items(_messages("o"))
    before = snapshot(client)
    with pytest.raises(ItemNotFound):
        session.fork(up_to_item_id=foreign.item_id)
    with pytest.raises(ItemNotFound):
        session.fork(up_to_item_id="itm_nope")
    with pytest.raises(AlreadyExists):
        session.fork(session_id="other")
    with pytest.raises(InvalidInput):
        session.fork(session_id="bad id")
    assert snapshot(client) == before


def test_forking_a_session_whose_store_is_gone_is_session_not_found(client: Client) -> None:
    # a session cannot outlive its store, so what a fork misses is the session, on every
    # backend alike (not StoreNotFound, whatever a backend looks up first)
    gone = client.session_stores.create("gone-soon")
    session = gone.add(actor_id="x", session_id="orphan")
    session.delete()
    client.session_stores.delete("gone-soon")
    before = snapshot(client)
    with pytest.raises(ownstate.SessionNotFound) as err:
        session.fork()
    assert type(err.value) is ownstate.SessionNotFound
    assert snapshot(client) == before


def test_delete_refuses_while_children_exist(client: Client, session: ownstate.Session) -> None:
    session.append_items(_messages("a"))
    child = session.fork(session_id="child")
    before = snapshot(client)
    with pytest.raises(ownstate.HasChildren) as err:
        session.delete()
    assert err.value.children == ["child"]
    assert snapshot(client) == before
    assert child.delete() == 1
    assert session.delete() == 1


def test_delete_force_cascades_to_descendants_only(store: ownstate.SessionStore,
                                                   session: ownstate.Session) -> None:
    session.append_items(_messages("a"))
    child = session.fork(session_id="child")
    child.fork(session_id="grandchild")
    sibling = session.fork(session_id="sibling")
    unrelated = store.add(actor_id="z", session_id="unrelated")
    assert child.delete(force=True) == 2
    remaining = sorted(s.session_id for s in store.list_sessions())
    assert remaining == sorted([session.session_id, sibling.session_id, unrelated.session_id])
    assert session.delete(force=True) == 2
    assert [s.session_id for s in store.list_sessions()] == ["unrelated"]
    with pytest.raises(SessionNotFound):
        store.get("grandchild")


# the async twin ----------------------------------------------------------------------


def test_async_client_has_the_same_behaviour(target: Any) -> None:
    async def scenario() -> None:
        async with await target.connect_async() as client:
            store = await client.session_stores.create("async-store")
            session = await store.add(actor_id="a", session_id="s")
            await session.append_items(_messages("a", "b"))
            assert [i.data["content"] async for i in
                    session.list_items(order_by="create_time asc", page_size=1)] == ["a", "b"]
            with pytest.raises(AlreadyExists):
                await store.add(actor_id="a", session_id="s")
            assert [s.name async for s in client.session_stores.list()] == ["async-store"]
            assert [s.session_id async for s in store.list_sessions()] == ["s"]

    run_async(scenario())
    with target.connect() as sync_client:
        seen = sync_client.session_stores.get("async-store").get("s")
        assert _texts(seen) == ["a", "b"]
