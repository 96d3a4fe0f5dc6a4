"""Conformance tests for ranked search: ``memory.search`` over facts and
``session_stores.search_items`` over conversation items, on every backend.

They hold each backend to the one definition in :mod:`ownstate.backends.ports.search`:
which documents match (any query term; case, accents and Unicode compatibility forms
ignored; scripts without spaces found by substring), how they rank (BM25: rarer terms
and more of them rank higher, equal scores by a stable id), which facts are in force
(as ``recall`` says, now or ``as_of``), the provenance every hit carries, the filters,
and refusals that change nothing. Orders are asserted only where every BM25 engine
agrees, whatever its collection statistics.

It may touch the public sync API (``ownstate``, ``ownstate.api.sync``), the backends'
capability flags (names only), the error tree, the model, the shared fixtures and targets,
and pytest; never a backend directly.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import ownstate
from ownstate.api.sync import MemoryStore
from ownstate.backends.base import Capability
from ownstate.errors import InvalidInput, LimitExceeded, StoreNotFound
from ownstate.model import FactHit, ItemHit

from .fixtures import *  # noqa: F403
from .fixtures import snapshot
from .targets import Target

pytestmark = pytest.mark.usefixtures("searchable")


@pytest.fixture
def searchable(target: Target) -> None:
    """Skip unless the backend declares text search."""
    if not target.has(Capability.TEXT_SEARCH):
        pytest.skip(f"{target.name} does not declare Capability.TEXT_SEARCH")


@pytest.fixture
def memory(client: ownstate.Client) -> MemoryStore:
    return client.memory_stores.create("search-memory")


def _keys(hits: list[FactHit]) -> list[str]:
    return [h.fact.key for h in hits]


def _noise(memory: MemoryStore, n: int = 6) -> None:
    """Facts that make ``common`` a common word and leave ``rare`` rare."""
    for i in range(n):
        memory.remember("user:noise", f"noise{i}", f"common filler text number{i}")


# facts ---------------------------------------------------------------------------------


def test_hits_are_ranked_by_relevance(memory: MemoryStore) -> None:
    _noise(memory)
    memory.remember("user:1", "a", "common words only")
    memory.remember("user:1", "b", "a rare word and common ones")
    memory.remember("user:1", "c", "rare and unusual, never common")
    memory.remember("user:1", "d", "unusual")
    hits = memory.search("rare unusual common")
    assert all(isinstance(h, FactHit) for h in hits)
    # more of the rarer terms rank higher; a term in most facts does not count while
    # rarer ones are asked for
    assert _keys(hits) == ["c", "d", "b"]
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert scores[-1] > 0
    assert _keys(memory.search("rare unusual common", limit=2)) == ["c", "d"]
    # asked for alone, a common term finds every fact holding it
    assert len(memory.search("common")) == 9


def test_a_shorter_fact_ranks_above_a_longer_one(memory: MemoryStore) -> None:
    _noise(memory)
    memory.remember("user:1", "long", "refund " + " ".join(f"pad{i}" for i in range(30)))
    memory.remember("user:1", "short", "refund please")
    assert _keys(memory.search("refund")) == ["short", "long"]


def test_equal_scores_are_ordered_by_fact_id(memory: MemoryStore) -> None:
    _noise(memory)
    made = [memory.remember(f"user:{n}", "topic", "refund request") for n in range(5)]
    hits = memory.search("refund")
    assert [h.fact.fact_id for h in hits] == sorted(f.fact_id for f in made)
    assert len({h.score for h in hits}) == 1
    assert memory.search("refund") == hits  # and the same every time


def test_words_of_keys_values_and_json(memory: MemoryStore) -> None:
    email = memory.remember("user:1", "preferred_channel", "Email, never SMS")
    home = memory.remember("user:2", "address", {"street": "1 Rue de la Paix", "city": "Paris"})
    misc = memory.remember("user:2", "notes", ["likes cafés", 42, True, None])

    def ids(query: str, **kwargs: Any) -> set[str]:
        return {h.fact.fact_id for h in memory.search(query, **kwargs)}

    assert ids("EMAIL") == {email.fact_id}
    assert ids("preferred") == {email.fact_id}  # key words count
    assert ids("street") == {home.fact_id}  # object keys and values
    assert ids("42") == {misc.fact_id} == ids("true") == ids("null")
    assert ids("mail") == set()  # whole words only
    assert ids("paris email") == {home.fact_id, email.fact_id}


def test_case_accents_and_compatibility_forms_are_ignored(memory: MemoryStore) -> None:
    cafe = memory.remember("user:1", "place", "Café Zürich")
    street = memory.remember("user:1", "street", "Große Straße")
    # full-width letters and digits, and a ligature
    wide = memory.remember("user:1", "code", "\uff21\uff22\uff23\uff11\uff12\uff13 \ufb01le")
    assert [h.fact.fact_id for h in memory.search("CAFE zurich")] == [cafe.fact_id]
    assert [h.fact.fact_id for h in memory.search("café")] == [cafe.fact_id]
    assert [h.fact.fact_id for h in memory.search("strasse")] == [street.fact_id]
    assert [h.fact.fact_id for h in memory.search("abc123")] == [wide.fact_id]
    assert [h.fact.fact_id for h in memory.search("file")] == [wide.fact_id]


def test_scripts_without_spaces_are_found_by_substring(memory: MemoryStore) -> None:
    tokyo = memory.remember("user:1", "home", "東京都に住んでいます")
    kyoto = memory.remember("user:2", "home", "京都の大学で働いています")
    thai = memory.remember("user:3", "greeting", "ภาษาไทยง่ายมาก")
    memory.remember("user:4", "home", "Lisbon")

    def ids(query: str) -> list[str]:
        return [h.fact.fact_id for h in memory.search(query)]

    assert ids("東京") == [tokyo.fact_id]
    assert set(ids("京都")) == {tokyo.fact_id, kyoto.fact_id}
    assert ids("大学") == [kyoto.fact_id]
    assert set(ids("京")) == {tokyo.fact_id, kyoto.fact_id}  # one character
    assert ids("ไทย") == [thai.fact_id]
    assert ids("住んで") == [tokyo.fact_id]


def test_only_facts_in_force_are_found(memory: MemoryStore) -> None:
    old = memory.remember("user:1", "channel", "email")
    memory.remember("user:1", "channel", "sms")
    memory.remember("user:2", "channel", "email please")
    memory.forget("user:2", "channel")
    assert memory.search("email") == []
    assert _keys(memory.search("sms")) == ["channel"]
    moment = old.recorded_at
    # as of when the first fact held, it is the one found
    assert [h.fact.fact_id for h in memory.search("email", as_of=moment)] == [old.fact_id]


def test_as_of_follows_valid_time(memory: MemoryStore) -> None:
    now = memory.remember("user:0", "clock", "now").recorded_at
    basic = memory.remember("user:1", "plan", "basic", valid_from=now - timedelta(days=30))
    pro = memory.remember("user:1", "plan", "pro", valid_from=now + timedelta(days=7))
    assert [h.fact.fact_id for h in memory.search("plan basic pro")] == [basic.fact_id]
    later = memory.search("plan basic pro", as_of=now + timedelta(days=8))
    assert [h.fact.fact_id for h in later] == [pro.fact_id]
    assert memory.search("plan", as_of=now - timedelta(days=31)) == []
    recalled = memory.recall("user:1", as_of=now + timedelta(days=8))
    assert [h.fact for h in later] == recalled


def test_subject_limits_the_search(memory: MemoryStore) -> None:
    memory.remember("user:1", "channel", "email")
    theirs = memory.remember("user:2", "channel", "email")
    assert [h.fact for h in memory.search("email", subject="user:2")] == [theirs]
    assert memory.search("email", subject="user:3") == []


def test_search_is_per_store(client: ownstate.Client, memory: MemoryStore) -> None:
    other = client.memory_stores.create("other-memory")
    mine = memory.remember("user:1", "channel", "email")
    theirs = other.remember("user:1", "channel", "email")
    assert [h.fact for h in memory.search("email")] == [mine]
    assert [h.fact for h in other.search("email")] == [theirs]


def test_a_fact_hit_carries_its_provenance(client: ownstate.Client,
                                           memory: MemoryStore) -> None:
    session = client.session_stores.create("chats").add(actor_id="user:1")
    (item,) = session.append_items([{"role": "user", "content": "email me please"}])
    fact = memory.remember("user:1", "channel", "email", source=item)
    (hit,) = memory.search("email")
    assert hit.fact == fact
    assert (hit.fact.source_store, hit.fact.source_session_id, hit.fact.source_item_id) == (
        "chats", session.session_id, item.item_id)


def test_bad_queries_are_refused_and_change_nothing(client: ownstate.Client,
                                                    memory: MemoryStore) -> None:
    memory.remember("user:1", "channel", "email")
    before = snapshot(client)
    for query in ["", "   ", "?!", 5, None]:
        with pytest.raises(InvalidInput) as err:
            memory.search(query)  # type: ignore[arg-type]
        assert err.value.field == "query"
    for limit in [0, -1, 10_000]:
        with pytest.raises(LimitExceeded) as err:
            memory.search("x", limit=limit)
        assert err.value.field == "limit"
    with pytest.raises(LimitExceeded) as err:
        memory.search("x" * 2001)
    assert (err.value.field, err.value.limit) == ("query", 2000)
    with pytest.raises(LimitExceeded) as err:
        memory.search(" ".join(f"w{n}" for n in range(65)))
    assert (err.value.field, err.value.limit) == ("query", 64)
    assert memory.search(" ".join(f"w{n}" for n in range(64)) + " w0") == []
    with pytest.raises(InvalidInput):
        memory.search("email", subject="")
    gone = client.memory_stores.create("gone-memory")
    client.memory_stores.delete("gone-memory")
    with pytest.raises(StoreNotFound):
        gone.search("email")
    assert snapshot(client) == before


def test_ownstates_own_subjects_are_found_only_when_named(memory: MemoryStore) -> None:
    _noise(memory)
    mark = memory.remember("ownstate:distill", "chats/s-1", {"seq": 3, "note": "refund"})
    mine = [memory.remember(f"user:{n}", "topic", "refund request") for n in range(3)]
    # a page the reserved fact would have taken a place in is filled with the others
    assert [h.fact for h in memory.search("refund", limit=3)] == sorted(
        mine, key=lambda f: f.fact_id)
    assert mark.fact_id not in {h.fact.fact_id for h in memory.search("refund note seq")}
    assert [h.fact for h in memory.search("refund", subject="ownstate:distill")] == [mark]
    assert "ownstate:distill" not in memory.subjects().items
    assert memory.subjects(page_size=1).items == ["user:0"]
    assert memory.subjects_after(after="user:2") == ["user:noise"]
    assert memory.recall("ownstate:distill") == [mark]


# items ---------------------------------------------------------------------------------


def _chat(client: ownstate.Client, store: str = "chats", actor: str = "user:1",
          texts: tuple[str, ...] = ()) -> ownstate.Session:
    try:
        found = client.session_stores.get(store)
    except StoreNotFound:
        found = client.session_stores.create(store)
    session = found.add(actor_id=actor)
    if texts:
        session.append_items([{"role": "user", "content": t} for t in texts])
    return session


def test_items_are_ranked_and_carry_where_they_live(client: ownstate.Client) -> None:
    _chat(client, texts=tuple(f"common filler number{i}" for i in range(6)))
    session = _chat(client, actor="user:2", texts=(
        "When did Caroline go to the LGBTQ support group?",
        "Caroline went to the support group on Sunday, common knowledge",
    ))
    hits = client.session_stores.search_items("caroline support group sunday")
    assert all(isinstance(h, ItemHit) for h in hits)
    assert [(h.store, h.actor_id, h.item.session_id, h.item.seq) for h in hits] == [
        ("chats", "user:2", session.session_id, 2), ("chats", "user:2", session.session_id, 1)]
    assert hits[0].score > hits[1].score > 0
    assert hits[0].item == session.get_item(hits[0].item.item_id)


def test_tool_names_and_arguments_are_found(client: ownstate.Client) -> None:
    session = _chat(client)
    session.append_items([
        {"type": "function_call", "name": "get_weather", "call_id": "call_Zq81",
         "arguments": '{"city": "Lisbon", "units": "metric"}'},
        {"type": "function_call_output", "call_id": "call_Zq81", "output": "18 degrees"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is mild."}]},
    ])
    search = client.session_stores.search_items
    assert [h.item.seq for h in search("weather")] == [1]
    assert [h.item.seq for h in search("lisbon")] == [1]
    assert [h.item.seq for h in search("units")] == [1]  # argument names too
    assert [h.item.seq for h in search("degrees")] == [2]
    assert [h.item.seq for h in search("MILD")] == [3]
    assert search("call_zq81") == []  # ids and types are not text
    assert search("function_call") == []


def test_equal_item_scores_are_ordered_by_store_session_and_seq(
        client: ownstate.Client) -> None:
    _chat(client, "a-chats", texts=tuple(f"filler {i}" for i in range(6)))
    made = [_chat(client, store, texts=("refund please", "refund please"))
            for store in ("b-chats", "a-chats", "b-chats")]
    hits = client.session_stores.search_items("refund")
    expected = sorted((s.store, s.session_id, seq) for s in made for seq in (1, 2))
    assert [(h.store, h.item.session_id, h.item.seq) for h in hits] == expected
    assert len({h.score for h in hits}) == 1


def test_item_filters(client: ownstate.Client) -> None:
    one = _chat(client, "chats", "user:1", ("refund for order 1",))
    two = _chat(client, "chats", "user:2", ("refund for order 2",))
    three = _chat(client, "other-chats", "user:1", ("refund for order 3",))
    search = client.session_stores.search_items

    def where(**kwargs: Any) -> set[str]:
        return {h.item.session_id for h in search("refund", **kwargs)}

    assert where() == {one.session_id, two.session_id, three.session_id}
    assert where(store="chats") == {one.session_id, two.session_id}
    assert where(stores=["other-chats", "no-such-store"]) == {three.session_id}
    assert where(stores=[]) == set()
    assert where(actor_id="user:1") == {one.session_id, three.session_id}
    assert where(session_id=two.session_id) == {two.session_id}
    assert where(store="chats", actor_id="user:1") == {one.session_id}
    assert [h.item.seq for h in search("refund", limit=1)] == [1]


def test_items_follow_the_history(client: ownstate.Client) -> None:
    session = _chat(client, texts=("first refund", "second refund", "third refund"))
    child = session.fork(up_to_item_id=session.list_items_after(limit=2)[1].item_id)
    search = client.session_stores.search_items
    assert {(h.item.session_id, h.item.seq) for h in search("refund")} == {
        (session.session_id, 1), (session.session_id, 2), (session.session_id, 3),
        (child.session_id, 1), (child.session_id, 2)}
    session.pop_item()
    assert search("third") == []
    child.clear()
    assert {h.item.session_id for h in search("refund")} == {session.session_id}
    session.delete(force=True)
    assert search("refund") == []


def test_items_of_another_tenant_are_never_found(client: ownstate.Client,
                                                 other_tenant: ownstate.Client) -> None:
    _chat(client, texts=("refund please",))
    assert other_tenant.session_stores.search_items("refund") == []
    _chat(other_tenant, texts=("refund please",))
    assert len(client.session_stores.search_items("refund")) == 1


def test_item_scripts_without_spaces(client: ownstate.Client) -> None:
    session = _chat(client, texts=("我想退款\uff0c订单号是12345", "谢谢"))
    assert [h.item.seq for h in client.session_stores.search_items("退款")] == [1]
    assert [h.item.session_id for h in client.session_stores.search_items("12345")] == [
        session.session_id]


def test_bad_item_searches_are_refused_and_change_nothing(client: ownstate.Client) -> None:
    _chat(client, texts=("refund please",))
    before = snapshot(client)
    search = client.session_stores.search_items
    for query in ["", "?!", 5]:
        with pytest.raises(InvalidInput) as err:
            search(query)  # type: ignore[arg-type]
        assert err.value.field == "query"
    with pytest.raises(LimitExceeded):
        search("x" * 2001)
    with pytest.raises(LimitExceeded) as err:
        search("refund", limit=0)
    assert err.value.field == "limit"
    with pytest.raises(StoreNotFound):
        search("refund", store="no-such-store")
    with pytest.raises(InvalidInput):
        search("refund", store="Bad Name")
    with pytest.raises(InvalidInput):
        search("refund", stores="chats")
    with pytest.raises(InvalidInput):
        search("refund", store="chats", stores=["chats"])
    with pytest.raises(InvalidInput):
        search("refund", actor_id="")
    assert snapshot(client) == before


def test_a_store_may_keep_its_items_out_of_search(client: ownstate.Client) -> None:
    quiet = client.session_stores.create("quiet-chats", index_items=False)
    session = quiet.add(actor_id="user:1")
    session.append_items([{"role": "user", "content": "refund please"}])
    session.fork()
    loud = _chat(client, texts=("refund please",))
    assert [h.item.session_id for h in client.session_stores.search_items("refund")] == [
        loud.session_id]
    assert client.session_stores.search_items("refund", store="quiet-chats") == []
    assert [i.data for i in session.list_items()] == [{"role": "user",
                                                       "content": "refund please"}]
    # a store made again under the name, with the default, indexes again
    client.session_stores.delete("quiet-chats", force=True)
    _chat(client, "quiet-chats", texts=("refund again",))
    assert len(client.session_stores.search_items("refund", store="quiet-chats")) == 1
    with pytest.raises(InvalidInput):
        client.session_stores.create("bad-chats", index_items="no")  # type: ignore[arg-type]
