"""Conformance tests for what reaches across facts: search, batches, erasure and export,
tenants, concurrent writers, and the async twin. Star-imported by :mod:`.memory`; it may
touch no backend but through the client the fixtures give it, and imports only the public
sync API (``ownstate``, ``ownstate.api.sync``), the backends' capability flags (names only),
the error tree, the model, :mod:`.memory_facts`, the shared fixtures and targets, and pytest.
"""
# ruff: noqa: F403

from __future__ import annotations

import itertools
import json
import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

import ownstate
from ownstate.api.sync import MemoryStore
from ownstate.backends.base import Capability
from ownstate.errors import (
    AlreadyExists,
    AssetNotFound,
    FactNotFound,
    InvalidInput,
    ItemNotFound,
    RunNotFound,
    SessionNotFound,
    StoreNotFound,
)
from ownstate.model import Fact

from .fixtures import *
from .fixtures import run_async
from .memory_facts import (
    _day,
    _values,
    facts_snapshot,
)
from .targets import Target

Client = ownstate.Client


# search --------------------------------------------------------------------------------



# batches -------------------------------------------------------------------------------


def test_remember_many_is_ordered_and_atomic(client: Client, memory: MemoryStore,
                                             session: ownstate.Session) -> None:
    (item,) = session.append_items([{"role": "user", "content": "hi"}])
    made = memory.remember_many([
        {"subject": "user:1", "key": "a", "value": 1},
        {"subject": "user:1", "key": "a", "value": 2, "confidence": 0.5, "source": item},
        {"subject": "user:2", "key": "b", "value": [3], "source_type": "import",
         "valid_from": _day(1)},
    ])
    assert [f.value for f in made] == [1, 2, [3]]
    assert made[1].supersedes == made[0].fact_id
    assert made[1].source_item_id == item.item_id
    assert memory.history("user:1", "a") == [memory.get(made[0].fact_id), made[1]]
    assert memory.recall("user:2") == [made[2]]
    assert memory.remember_many([]) == []
    before = facts_snapshot(client, "user:1", "user:2")
    bad_batches: list[Any] = [
        [{"subject": "user:1", "key": "a", "value": 9}, {"subject": "user:1", "key": "a"}],
        [{"subject": "user:1", "key": "a", "value": 9},
         {"subject": "user:1", "key": "a", "value": 9, "extra": 1}],
        [{"subject": "user:1", "key": "a", "value": 9},
         {"subject": "user:1", "key": "a", "value": math.nan}],
        [{"subject": "user:1", "key": "a", "value": 9}, "not a mapping"],
        {"subject": "user:1", "key": "a", "value": 9},
    ]
    for batch in bad_batches:
        with pytest.raises(InvalidInput) as err:
            memory.remember_many(batch)
        if isinstance(batch, list):
            assert err.value.index == 1
    with pytest.raises(ItemNotFound):
        memory.remember_many([
            {"subject": "user:1", "key": "a", "value": 9},
            {"subject": "user:1", "key": "b", "value": 9,
             "source": (session.store, session.session_id, "itm_missing")},
        ])
    assert facts_snapshot(client, "user:1", "user:2") == before


# erasure and export --------------------------------------------------------------------


def test_erase_subject_is_tenant_wide(client: Client, other_tenant: Client,
                                      memory: MemoryStore, target: Target) -> None:
    second = client.memory_stores.create("second-memory")
    sessions = client.session_stores.create("chats")
    more = client.session_stores.create("more-chats")
    mine = sessions.add(actor_id="user:8814")
    mine_too = more.add(actor_id="user:8814")
    fork = mine.fork()
    someone = sessions.add(actor_id="user:1")
    (item,) = mine.append_items([{"role": "user", "content": "email me"}])
    someone.append_items([{"role": "user", "content": "keep me"}])
    memory.remember("user:8814", "channel", "email", source=item)
    memory.remember("user:8814", "channel", "sms")
    second.remember("user:8814", "timezone", "CET")
    kept = memory.remember("user:1", "channel", "phone", source=item)
    theirs_mem = other_tenant.memory_stores.create(memory.name)
    theirs_fact = theirs_mem.remember("user:8814", "channel", "fax")
    theirs_session = other_tenant.session_stores.create("chats").add(actor_id="user:8814")

    assert client.memory_stores.erase_subject("user:8814") == {"facts": 3, "sessions": 0}
    assert memory.recall("user:8814") == []
    assert memory.history("user:8814", "channel") == []
    assert second.history("user:8814", "timezone") == []
    if target.has(Capability.TEXT_SEARCH):
        assert memory.search("sms") == []
    assert mine.refresh().actor_id == "user:8814"  # sessions stay without include_sessions

    second.remember("user:8814", "timezone", "UTC")
    assert memory.erase_subject("user:8814", include_sessions=True) == {"facts": 1,
                                                                         "sessions": 3}
    for gone in (mine, mine_too, fork):
        with pytest.raises(SessionNotFound):
            gone.refresh()
    assert [s.session_id for s in sessions.list_sessions()] == [someone.session_id]
    assert memory.recall("user:1") == [kept]
    assert memory.explain(kept.fact_id).source_item is None
    assert theirs_mem.recall("user:8814") == [theirs_fact]
    assert theirs_session.refresh().actor_id == "user:8814"
    assert client.memory_stores.erase_subject("user:8814", include_sessions=True) == {
        "facts": 0, "sessions": 0}
    with pytest.raises(InvalidInput):
        client.memory_stores.erase_subject("")
    with pytest.raises(InvalidInput):
        client.memory_stores.erase_subject("user:1", include_sessions="yes")  # type: ignore[arg-type]
    assert memory.recall("user:1") == [kept]


def test_erasing_sessions_reaches_their_runs_and_assets(client: Client,
                                                       memory: MemoryStore) -> None:
    sessions = client.session_stores.create("chats")
    mine = sessions.add(actor_id="user:8814")
    theirs = sessions.add(actor_id="user:1")
    my_run = client.runs.open_run(mine, "langgraph", "t-1")
    their_run = client.runs.open_run(theirs, "langgraph", "t-2")
    my_asset = client.assets.put(b"my voice note", "audio/ogg", session=mine)
    their_asset = client.assets.put(b"their voice note", "audio/ogg", session=theirs)
    assert memory.erase_subject("user:8814", include_sessions=True) == {"facts": 0,
                                                                         "sessions": 1}
    with pytest.raises(RunNotFound):
        client.runs.get(my_run.run_id)
    with pytest.raises(AssetNotFound):
        client.assets.get_ref(my_asset.asset_id)
    assert client.runs.get(their_run.run_id) == their_run
    assert client.assets.get(their_asset.asset_id) == b"their voice note"


def test_export_subject(client: Client, memory: MemoryStore) -> None:
    second = client.memory_stores.create("second-memory")
    sessions = client.session_stores.create("chats")
    chat = sessions.add(actor_id="user:8814", metadata={"channel": "web"})
    items = chat.append_items([{"role": "user", "content": f"m{n}"} for n in range(3)])
    sessions.add(actor_id="user:1").append_items([{"role": "user", "content": "other"}])
    first = memory.remember("user:8814", "channel", "email", source=items[0])
    memory.remember("user:8814", "channel", {"kind": "sms"}, valid_from=_day(1))
    second.remember("user:8814", "timezone", "CET")
    memory.remember("user:1", "channel", "phone")

    exported = client.memory_stores.export_subject("user:8814")
    text = json.dumps(exported)
    assert json.loads(text) == exported
    assert (exported["format"], exported["version"]) == ("ownstate.subject-export", 1)
    assert (exported["tenant"], exported["subject"]) == (client.tenant, "user:8814")
    facts = exported["facts"]
    assert [(f["memory_store"], f["key"], f["value"]) for f in facts] == [
        ("second-memory", "timezone", "CET"),
        (memory.name, "channel", "email"),
        (memory.name, "channel", {"kind": "sms"}),
    ]
    assert facts[1]["fact_id"] == first.fact_id
    assert facts[1]["closed_reason"] == "superseded"
    assert facts[1]["source_item_id"] == items[0].item_id
    assert facts[2]["valid_from"] == "2020-01-02T00:00:00.000000Z"
    (session,) = exported["sessions"]
    assert (session["store"], session["session_id"]) == ("chats", chat.session_id)
    assert session["metadata"] == {"channel": "web"}
    assert [i["data"]["content"] for i in session["items"]] == ["m0", "m1", "m2"]
    assert [i["seq"] for i in session["items"]] == [1, 2, 3]
    empty = client.memory_stores.export_subject("user:nobody")
    assert (empty["facts"], empty["sessions"]) == ([], [])


# tenants -------------------------------------------------------------------------------


def test_tenants_do_not_see_each_other(client: Client, other_tenant: Client,
                                       memory: MemoryStore, session: ownstate.Session) -> None:
    (item,) = session.append_items([{"role": "user", "content": "private"}])
    fact = memory.remember("user:8814", "channel", "email", source=item)
    assert list(other_tenant.memory_stores.list()) == []
    with pytest.raises(StoreNotFound):
        other_tenant.memory_stores.get(memory.name)
    theirs = other_tenant.memory_stores.create(memory.name)
    assert theirs.recall("user:8814") == []
    assert theirs.history("user:8814", "channel") == []
    assert theirs.search("email") == []
    with pytest.raises(FactNotFound):
        theirs.get(fact.fact_id)
    with pytest.raises(FactNotFound):
        theirs.explain(fact.fact_id)
    assert theirs.forget("user:8814", "channel") is None
    for source in (item, (session.store, session.session_id, item.item_id)):
        with pytest.raises(ItemNotFound):
            theirs.remember("user:8814", "channel", "sms", source=source)
    assert other_tenant.memory_stores.export_subject("user:8814")["facts"] == []
    assert other_tenant.memory_stores.erase_subject("user:8814", include_sessions=True) == {
        "facts": 0, "sessions": 0}
    assert memory.recall("user:8814") == [fact]
    assert session.refresh().actor_id == "customer-123"


# concurrency ---------------------------------------------------------------------------


def test_concurrent_remembers_leave_one_linear_history(make_client: Callable[..., Client]
                                                       ) -> None:
    writers = 8
    setup = make_client()
    memory = setup.memory_stores.create("contended")
    earlier = memory.remember("user:1", "status", "initial")
    clients = [make_client() for _ in range(writers)]
    handles = [c.memory_stores.get("contended") for c in clients]
    barrier = threading.Barrier(writers)
    results: list[Fact | None] = [None] * writers
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            barrier.wait()
            results[n] = handles[n].remember("user:1", "status", f"writer-{n}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    history = memory.history("user:1", "status")
    assert len(history) == writers + 1
    assert history[0].fact_id == earlier.fact_id
    assert {f.value for f in history[1:]} == {f"writer-{n}" for n in range(writers)}
    assert {f.fact_id for f in history[1:]} == {f.fact_id for f in results if f is not None}
    current = [f for f in history if f.superseded_at is None]
    assert len(current) == 1
    assert current[0] == history[-1]
    assert memory.recall("user:1") == current
    # a linear chain: each fact superseded exactly once, by the next one recorded
    assert [f.supersedes for f in history] == [None, *(f.fact_id for f in history[:-1])]
    for older, newer in itertools.pairwise(history):
        assert older.superseded_at == newer.recorded_at
        assert older.closed_reason == "superseded"
        assert older.recorded_at <= newer.recorded_at


# the async twin ------------------------------------------------------------------------


def test_async_client_has_the_same_behaviour(target: Any) -> None:
    async def scenario() -> None:
        async with await target.connect_async() as client:
            memory = await client.memory_stores.create("async-memory")
            first = await memory.remember("user:1", "channel", "email")
            second = await memory.remember("user:1", "channel", "sms")
            assert await memory.recall("user:1") == [second]
            assert [f.fact_id for f in await memory.history("user:1", "channel")] == [
                first.fact_id, second.fact_id]
            assert (await memory.explain(second.fact_id)).superseded is not None
            assert [h.fact for h in await memory.search("sms")] == [second]
            assert [m.name async for m in client.memory_stores.list()] == ["async-memory"]
            with pytest.raises(AlreadyExists):
                await client.memory_stores.create("async-memory")

    run_async(scenario())
    with target.connect() as sync_client:
        memory = sync_client.memory_stores.get("async-memory")
        assert _values(memory.recall("user:1")) == {"channel": "sms"}
