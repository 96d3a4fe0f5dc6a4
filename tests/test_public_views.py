"""The public operations the HTTP server is built on: keyset listings, grant lookups,
principal-scoped run views, and the caller's own bounds, on the reference backend."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import ownstate
from ownstate import InvalidInput, LimitExceeded


@pytest.fixture
def client() -> Iterator[ownstate.Client]:
    with ownstate.connect("memory://", limits=ownstate.Limits(max_page_size=5,
                                                             default_page_size=5)) as made:
        yield made


def test_grant_lookups_answer_for_a_principal(client: ownstate.Client) -> None:
    client.session_stores.create("support", owner="alice")
    client.session_stores.get("support").grant_permission("bob", "READ")
    keys = client.api_keys
    assert keys.permission_of("alice", "session_store", "support") == "OWNER"
    assert keys.permission_of("bob", "session_store", "support") == "READ"
    assert keys.permission_of("bob", "memory_store", "support") is None
    assert keys.permission_of("bob", "session_store", "") is None  # no store has that name
    assert [(g.store, g.level) for g in keys.grants_of("bob")] == [("support", "READ")]
    with pytest.raises(InvalidInput) as refused:
        keys.permission_of("bob", "bucket", "support")
    assert refused.value.field == "kind"


def test_register_stores_a_digest_and_refuses_anything_else(client: ownstate.Client) -> None:
    secret = "s" * 43
    key = client.api_keys.register("carol", hashlib.sha256(secret.encode()).hexdigest())
    assert client.api_keys.authenticate(f"osk_{key.key_id}_{secret}").principal == "carol"
    with pytest.raises(InvalidInput) as refused:
        client.api_keys.register("carol", "ABC")
    assert refused.value.field == "secret_sha256"
    assert [k.principal for k in client.api_keys.list()] == ["carol"]


def test_keyset_listings_page_on_from_their_cursors(client: ownstate.Client) -> None:
    for name in ("aaa", "bbb", "ccc"):
        client.session_stores.create(name)
    assert [s.name for s in client.session_stores.list_after(after="aaa", limit=1)] == ["bbb"]
    store = client.session_stores.get("aaa")
    for n in range(4):
        store.add(actor_id="u", session_id=f"s{n}")
    first, cursor = store.list_sessions_after(order_by="create_time asc", limit=2)
    rest, end = store.list_sessions_after(order_by="create_time asc", after=cursor, limit=6)
    assert [s.session_id for s in first + rest] == ["s0", "s1", "s2", "s3"]
    assert cursor is not None
    assert end is None
    with pytest.raises(InvalidInput) as refused:
        store.list_sessions_after(order_by="last_activity_time", after=cursor)
    assert refused.value.field == "after"
    with pytest.raises(LimitExceeded):
        store.list_sessions_after(limit=7)  # one past a page is the most
    session = store.get("s0")
    items = session.append_items([{"role": "user", "content": str(n)} for n in range(3)])
    after = session.list_items_after(order_by="create_time asc", after_seq=items[0].seq)
    assert [i.item_id for i in after] == [i.item_id for i in items[1:]]


def test_update_metadata_holds_the_callers_own_bound(client: ownstate.Client) -> None:
    session = client.session_stores.create("aaa").add(actor_id="u", metadata={"a": "1"})
    with pytest.raises(LimitExceeded):
        session.update_metadata({"b": "2"}, max_labels=1)
    assert session.refresh().metadata == {"a": "1"}
    assert session.update_metadata({"b": "2"}, max_labels=2).metadata == {"a": "1", "b": "2"}


def test_run_views_keep_only_the_named_stores(client: ownstate.Client) -> None:
    for name in ("aaa", "bbb"):
        store = client.session_stores.create(name)
        for _ in range(3):
            run = client.runs.open_run(store.add(actor_id="u"), "langgraph")
            client.runs.mark_awaiting(run.run_id, {"kind": "approval"})
    runs, cursor = client.runs.list_after(stores={"bbb"}, limit=2)
    more, end = client.runs.list_after(stores={"bbb"}, after=cursor, limit=6)
    assert [r.store for r in runs + more] == ["bbb"] * 3
    assert end is None
    assert client.runs.list_after(stores=set()) == ([], None)
    waiting = client.runs.outstanding(stores={"aaa"}, limit=2)
    assert [r.store for r in waiting] == ["aaa", "aaa"]
    assert client.runs.outstanding(entered_before=datetime(2000, 1, 1, tzinfo=UTC),
                                  limit=5) == []
    with pytest.raises(InvalidInput) as refused:
        client.runs.outstanding(older_than=1, entered_before=datetime.now(UTC), limit=5)
    assert refused.value.field == "older_than"


def test_subject_facts_and_capabilities(client: ownstate.Client) -> None:
    client.memory_stores.create("mem").remember("user:1", "tz", "UTC")
    assert [f.key for f in client.memory_stores.subject_facts("user:1")] == ["tz"]
    assert isinstance(client.capabilities, frozenset)
