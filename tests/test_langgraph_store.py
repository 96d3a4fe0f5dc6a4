"""The LangGraph store adapter on every backend: the BaseStore behaviours LangGraph documents
(get/put/update/delete, namespaces, search, list_namespaces, TTL, async twins), its use
from a compiled graph, and refused input that changes nothing."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

import ownstate
from ownstate.adapters.langgraph import OwnstateStore
from ownstate.errors import InvalidInput, LimitExceeded, StoreNotFound
from ownstate.testing import Target

#: Namespaces and keys that need escaping or splitting care, each stored and read back.
AWKWARD_NAMESPACES = [
    ("user:8814",),
    ("a b", "%x", "line\nbreak"),
    ("  ",),
    ("ünï", "çødé", "日本"),
    ("%",),
    ("x", "y", "z", "w", "v"),
]
AWKWARD_KEYS = ["", " ", "%", "%41", "tab\tkey", "ключ", "a.b/c:d"]


@pytest.fixture
def store(client: ownstate.Client) -> Iterator[OwnstateStore]:
    s = OwnstateStore(client)
    yield s
    s.close()


def facts_of(client: ownstate.Client, subject: str, name: str = "langgraph") -> dict[str, Any]:
    return {f.key: f.value for f in client.memory_stores.get(name).recall(subject)}


def nothing_stored(store: OwnstateStore) -> bool:
    return store.list_namespaces() == [] and store.search(()) == []


# put / get / update / delete ------------------------------------------------------------


def test_put_get_update_delete(store: OwnstateStore, client: ownstate.Client) -> None:
    assert store.get(("users", "u1"), "prefs") is None
    store.put(("users", "u1"), "prefs", {"color": "red", "n": [1, 2.5, None, True]})
    item = store.get(("users", "u1"), "prefs")
    assert isinstance(item, Item)
    assert (item.namespace, item.key) == (("users", "u1"), "prefs")
    assert item.value == {"color": "red", "n": [1, 2.5, None, True]}
    assert isinstance(item.created_at, datetime)
    assert item.created_at.utcoffset() is not None
    assert item.created_at == item.updated_at

    store.put(("users", "u1"), "prefs", {"color": "green"})
    updated = store.get(("users", "u1"), "prefs")
    assert updated is not None
    assert updated.value == {"color": "green"}
    assert updated.created_at == item.created_at
    assert updated.updated_at > item.updated_at

    # the item is a fact: the update superseded the first value, which stays in the history
    mem = client.memory_stores.get("langgraph")
    history = mem.history("users.u1", "prefs")
    assert [f.value["value"] for f in history] == [{"color": "red", "n": [1, 2.5, None, True]},
                                                   {"color": "green"}]
    assert history[1].supersedes == history[0].fact_id

    store.delete(("users", "u1"), "prefs")
    assert store.get(("users", "u1"), "prefs") is None
    assert store.search(("users",)) == []
    assert [f.closed_reason for f in mem.history("users.u1", "prefs")][-1].startswith("forgotten")
    store.delete(("users", "u1"), "never-there")  # a no-op, like LangGraph's stores

    # put after delete starts a new life: a fresh created_at
    store.put(("users", "u1"), "prefs", {"color": "blue"})
    again = store.get(("users", "u1"), "prefs")
    assert again is not None
    assert again.created_at > updated.updated_at


def test_namespaces_are_isolated_and_round_trip(store: OwnstateStore,
                                                client: ownstate.Client) -> None:
    store.put(("users", "u1"), "k", {"who": 1})
    store.put(("users", "u2"), "k", {"who": 2})
    store.put(("users",), "k", {"who": 0})
    got = [store.get(ns, "k") for ns in [("users", "u1"), ("users", "u2"), ("users",)]]
    assert [i.value["who"] for i in got if i is not None] == [1, 2, 0]
    assert store.get(("users", "u3"), "k") is None
    store.delete(("users", "u1"), "k")
    assert store.get(("users", "u2"), "k") is not None

    for ns in AWKWARD_NAMESPACES:
        for key in AWKWARD_KEYS:
            store.put(ns, key, {"ns": list(ns), "key": key})
    for ns in AWKWARD_NAMESPACES:
        for key in AWKWARD_KEYS:
            item = store.get(ns, key)
            assert item is not None
            assert item.namespace == ns
            assert item.key == key
            assert item.value == {"ns": list(ns), "key": key}
        found = store.search(ns, limit=100)
        assert {(i.namespace, i.key) for i in found if i.namespace == ns} == \
            {(ns, k) for k in AWKWARD_KEYS}
    listed = store.list_namespaces(limit=100)
    assert set(AWKWARD_NAMESPACES) <= set(listed)
    assert listed == sorted(listed)

    # a plain namespace is a plain subject: ownstate's own calls see the LangGraph items
    assert facts_of(client, "user:8814")["a.b/c:d"]["value"] == {"ns": ["user:8814"],
                                                                 "key": "a.b/c:d"}


def test_facts_written_elsewhere_are_readable(store: OwnstateStore,
                                              client: ownstate.Client) -> None:
    mem = client.memory_stores.create("support-memory")
    mem.remember("user:8814", "timezone", "Europe/Paris")
    mem.remember("user:8814", "profile", {"name": "Ada"})
    shared = OwnstateStore(client, memory_store="support-memory")
    tz = shared.get(("user:8814",), "timezone")
    assert tz is not None
    assert tz.value == {"value": "Europe/Paris"}
    assert tz.created_at == tz.updated_at
    assert {i.key: i.value for i in shared.search(("user:8814",))} == {
        "timezone": {"value": "Europe/Paris"}, "profile": {"name": "Ada"}}
    # the internal records of the adapter never show as items
    shared.put(("user:8814",), "timezone", {"value": "Asia/Tokyo"}, ttl=60)
    shared.get(("user:8814",), "timezone")
    assert shared.get(("langgraph", "namespaces"), "user:8814") is None
    assert shared.search(("langgraph",)) == []
    assert all(i.namespace[0] != "langgraph" for i in shared.search(()))
    assert store.get(("user:8814",), "timezone") is None  # another memory store


# search ---------------------------------------------------------------------------------


def seed_docs(store: OwnstateStore) -> None:
    store.batch([
        PutOp(("docs", "a"), "1", {"kind": "report", "score": 5, "tags": ["x"],
                                  "meta": {"lang": "en", "pages": 10}}),
        PutOp(("docs", "a"), "2", {"kind": "memo", "score": 3.5, "tags": ["x", "y"],
                                  "meta": {"lang": "fr", "pages": 2}}),
        PutOp(("docs", "b"), "3", {"kind": "report", "score": 1, "flag": True}),
        PutOp(("docs", "b", "deep"), "4", {"kind": "report", "score": "high"}),
        PutOp(("other",), "5", {"kind": "report", "score": 9}),
    ])


def keys(items: list[SearchItem]) -> list[str]:
    return [i.key for i in items]


def test_search_by_prefix_and_filter(store: OwnstateStore) -> None:
    seed_docs(store)
    assert sorted(keys(store.search(("docs",)))) == ["1", "2", "3", "4"]
    assert sorted(keys(store.search(("docs", "b")))) == ["3", "4"]
    assert keys(store.search(("docs", "b", "deep"))) == ["4"]
    assert sorted(keys(store.search(()))) == ["1", "2", "3", "4", "5"]
    assert store.search(("doc",)) == []  # labels match whole, not as text prefixes
    assert all(isinstance(i, SearchItem) and i.score is None for i in store.search(()))

    def by(spec: dict[str, Any], prefix: tuple[str, ...] = ("docs",)) -> list[str]:
        return sorted(keys(store.search(prefix, filter=spec)))

    assert by({"kind": "report"}) == ["1", "3", "4"]
    assert by({"kind": {"$eq": "memo"}}) == ["2"]
    assert by({"kind": {"$ne": "report"}}) == ["2"]
    assert by({"score": {"$gt": 3.5}}) == ["1"]
    assert by({"score": {"$gte": 3.5}}) == ["1", "2"]
    assert by({"score": {"$lt": 3.5}}) == ["3"]
    assert by({"score": {"$lte": 3.5}}) == ["2", "3"]
    assert by({"score": {"$gt": 1, "$lt": 5}}) == ["2"]
    assert by({"score": {"$gte": "a"}}) == ["4"]  # strings compare with strings only
    assert by({"kind": "report", "score": {"$gte": 1}}) == ["1", "3"]
    assert by({"meta": {"lang": "fr"}}) == ["2"]
    assert by({"tags": ["x"]}) == ["1"]
    assert by({"flag": True}) == ["3"]
    assert by({"score": True}) == []  # true is not 1
    assert by({"missing": {"$ne": 1}}) == ["1", "2", "3", "4"]
    assert by({"kind": "report"}, ()) == ["1", "3", "4", "5"]

    # the same answers as LangGraph's own InMemoryStore, for the filters it can evaluate
    reference = InMemoryStore()
    seed_docs(reference)  # type: ignore[arg-type]
    for prefix, spec in [((), {"kind": "report"}), (("docs", "a"), {"score": {"$gt": 2}}),
                         ((), {"meta": {"lang": "en"}}),
                         ((), {"kind": {"$ne": "memo"}, "flag": True})]:
        expected = sorted(keys(reference.search(prefix, filter=spec)))
        assert sorted(keys(store.search(prefix, filter=spec))) == expected, spec


def test_search_order_and_pagination(store: OwnstateStore) -> None:
    for n in range(7):
        store.put(("pages", str(n % 2)), f"k{n}", {"n": n})
    newest_first = store.search(("pages",), limit=100)
    assert [i.value["n"] for i in newest_first] == [6, 5, 4, 3, 2, 1, 0]
    assert [i.updated_at for i in newest_first] == sorted(
        (i.updated_at for i in newest_first), reverse=True)
    pages = [store.search(("pages",), limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [len(p) for p in pages] == [3, 3, 1, 0]
    assert [i.key for p in pages for i in p] == [i.key for i in newest_first]
    assert store.search(("pages",), limit=0) == []
    store.put(("pages", "0"), "k0", {"n": 0})  # an update moves it to the front
    assert store.search(("pages",), limit=1)[0].key == "k0"
    assert len(store.search(("pages",))) == 7


def test_search_query_matches_words(store: OwnstateStore) -> None:
    store.put(("notes",), "a", {"text": "Prefers email contact", "lang": "en"})
    store.put(("notes",), "b", {"text": "Lives in Paris", "lang": "fr"})
    store.put(("notes", "old"), "c", {"text": "email bounced", "lang": "en"})
    store.put(("elsewhere",), "d", {"text": "email elsewhere"})

    def q(query: str, prefix: tuple[str, ...] = ("notes",), **kw: Any) -> list[str]:
        return sorted(keys(store.search(prefix, query=query, **kw)))

    assert q("email") == ["a", "c"]
    assert q("EMAIL contact") == ["a"]
    assert q("mail") == []  # whole words only
    assert q("email", ("notes", "old")) == ["c"]
    assert q("email", ()) == ["a", "c", "d"]
    assert q("email", filter={"lang": "en"}) == ["a", "c"]
    assert q("paris", filter={"lang": "en"}) == []
    assert q("text") == ["a", "b", "c"]  # object keys are words, as in ownstate search
    assert q("value") == []  # the words of the stored wrapper are not the item's
    assert q("") == ["a", "b", "c"]  # no query: every item
    long_text = " ".join(f"w{n}" for n in range(40))
    store.put(("notes",), "long", {"text": long_text})
    assert q(long_text) == ["long"]  # more words than ownstate search takes: scanned
    assert q("w1 w39 email") == []


def test_search_query_when_the_index_answer_is_cut_off(target: Target) -> None:
    """When ownstate's search hits its page bound, the store scans instead: same answer."""
    limits = ownstate.Limits(max_page_size=3, default_page_size=3)
    with ownstate.connect(target.url, limits=limits) as small:
        store = OwnstateStore(small)
        store.batch([PutOp(("n", str(i % 3)), f"k{i}", {"text": f"alpha {i}"})
                     for i in range(8)])
        assert sorted(keys(store.search(("n",), query="alpha", limit=20))) == \
            sorted(f"k{i}" for i in range(8))
        assert keys(store.search(("n", "1"), query="alpha 4")) == ["k4"]


# list_namespaces -----------------------------------------------------------------------


def test_list_namespaces(store: OwnstateStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
               ("a", "c", "f"), ("x", "v1"), ("y", "cache", "v1")]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a",)) == [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
        ("a", "c", "f")]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("v1",)) == [("x", "v1"), ("y", "cache", "v1")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "v1")) == [("x", "v1"), ("y", "cache", "v1")]
    assert store.list_namespaces(prefix=("a",), suffix=("d", "*")) == [
        ("a", "b", "d", "e"), ("a", "b", "d", "i")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("x",), ("y",)]
    assert store.list_namespaces(max_depth=2, limit=2, offset=1) == [("a", "c"), ("x", "v1")]
    everything = store.list_namespaces()
    assert [store.list_namespaces(limit=3, offset=o) for o in (0, 3, 6)] == [
        everything[0:3], everything[3:6], everything[6:9]]
    assert store.list_namespaces(prefix=("nope",)) == []
    # a namespace whose items are all deleted is no longer listed
    store.delete(("x", "v1"), "k")
    assert store.list_namespaces(suffix=("v1",)) == [("y", "cache", "v1")]

    # the same answers as LangGraph's own InMemoryStore
    reference = InMemoryStore()
    for ns in store.list_namespaces():
        reference.put(ns, "k", {"v": 1})
    for kwargs in [{"prefix": ("a", "b"), "max_depth": 3}, {"suffix": ("f",)},
                   {"prefix": ("*", "b")}, {"max_depth": 2, "offset": 2, "limit": 2}]:
        assert store.list_namespaces(**kwargs) == reference.list_namespaces(**kwargs), kwargs


# TTL ------------------------------------------------------------------------------------

TTL = 0.01  # minutes: 0.6 s, doubled on each run a loaded machine makes late


class _Late(Exception):
    """A time-bound check finished after its deadline, so it proves nothing either way."""


def _before(deadline: float, check: Callable[[], None]) -> None:
    """Runs checks that hold only until ``deadline`` (monotonic seconds). A failure, or a
    pass, that ends past the deadline is :class:`_Late`: the scenario runs again slower."""
    try:
        check()
    except AssertionError:
        if time.monotonic() >= deadline:
            raise _Late from None
        raise
    if time.monotonic() >= deadline:
        raise _Late


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def test_ttl_expiry_and_refresh(client: ownstate.Client) -> None:
    for attempt in range(4):
        try:
            _ttl_scenario(client, name=f"langgraph-ttl-{attempt}", ttl=TTL * 2 ** attempt)
            return
        except _Late:
            continue
    pytest.fail("every TTL run was late: the machine is too loaded to tell expiry apart")


def _ttl_scenario(client: ownstate.Client, *, name: str, ttl: float) -> None:
    unit = ttl * 60  # seconds
    store = OwnstateStore(client, memory_store=name)
    quiet = OwnstateStore(client, memory_store=f"{name}-quiet",
                          ttl={"default_ttl": ttl, "refresh_on_read": False})
    assert store.supports_ttl
    assert quiet.ttl_config == {"default_ttl": ttl, "refresh_on_read": False}
    first = time.monotonic()
    store.put(("t",), "refreshed", {"v": 1}, ttl=ttl)
    store.put(("t",), "read-only", {"v": 2}, ttl=ttl)
    store.put(("t",), "forever", {"v": 3})
    store.put(("gone",), "soon", {"v": 4}, ttl=ttl)
    quiet.put(("q",), "default", {"v": 5})  # default_ttl applies
    written = time.monotonic()

    # how expiry is stored: the TTL on the item's fact, refreshes as records of their own
    stored = facts_of(client, "t", name)
    assert stored["refreshed"]["ttl_minutes"] == ttl
    assert "ttl_minutes" not in stored["forever"]

    _sleep_until(first + 0.55 * unit)
    refreshing = time.monotonic()

    def still_live() -> None:
        assert store.get(("t",), "refreshed") is not None  # refreshes
        assert store.get(("t",), "read-only", refresh_ttl=False) is not None
        assert quiet.get(("q",), "default") is not None  # the config says: no refresh

    _before(first + unit, still_live)
    refreshed = time.monotonic()
    assert facts_of(client, "langgraph.expiry", name) != {}

    # past every first expiry, before the refreshed one's
    _sleep_until(written + 1.1 * unit)
    assert store.get(("t",), "read-only") is None
    assert store.get(("gone",), "soon") is None
    assert quiet.get(("q",), "default") is None

    def refreshed_lives() -> None:
        assert store.get(("t",), "refreshed", refresh_ttl=False) is not None
        assert sorted(keys(store.search(("t",), refresh_ttl=False))) == ["forever", "refreshed"]

    _before(refreshing + unit, refreshed_lives)
    assert ("gone",) not in store.list_namespaces()
    assert quiet.list_namespaces() == []

    _sleep_until(refreshed + 1.1 * unit)
    assert store.get(("t",), "refreshed") is None
    assert keys(store.search(("t",))) == ["forever"]
    assert store.search(("t",), query="1") == []

    # a put over an expired item starts afresh
    store.put(("gone",), "soon", {"v": 5})
    back = store.get(("gone",), "soon")
    assert back is not None
    assert back.created_at == back.updated_at
    assert ("gone",) in store.list_namespaces()
    quiet.close()
    store.close()


# batches and async ----------------------------------------------------------------------


def test_batch_reads_before_writes(store: OwnstateStore) -> None:
    store.put(("b",), "k", {"v": "old"})
    results = store.batch([
        PutOp(("b",), "k", {"v": "first"}),
        GetOp(("b",), "k"),
        SearchOp(("b",)),
        ListNamespacesOp(),
        PutOp(("b", "new"), "k", {"v": 1}),
        PutOp(("b",), "k", {"v": "last"}),
    ])
    assert results[0] is None
    assert results[4] is None
    assert results[5] is None
    get, found, listed = results[1], results[2], results[3]
    assert isinstance(get, Item)
    assert get.value == {"v": "old"}
    assert isinstance(found, list)
    assert [i.value for i in found] == [{"v": "old"}]
    assert listed == [("b",)]
    latest = store.get(("b",), "k")
    assert latest is not None
    assert latest.value == {"v": "last"}
    assert store.list_namespaces() == [("b",), ("b", "new")]
    assert store.batch([]) == []


def test_async_variants(target: Target) -> None:
    async def scenario() -> None:
        aclient = await ownstate.connect_async(target.url)
        try:
            store = OwnstateStore(aclient)
            await store.aput(("u", "1"), "a", {"text": "hello there", "n": 1})
            await store.aput(("u", "2"), "b", {"text": "hello again", "n": 2}, ttl=60)
            item = await store.aget(("u", "1"), "a")
            assert item is not None
            assert item.value["n"] == 1
            found = await store.asearch(("u",), query="hello", filter={"n": {"$gte": 2}})
            assert [i.key for i in found] == ["b"]
            assert await store.alist_namespaces(prefix=("u",)) == [("u", "1"), ("u", "2")]
            await store.adelete(("u", "1"), "a")
            assert await store.aget(("u", "1"), "a") is None
            assert await store.alist_namespaces() == [("u", "2")]
            results = await store.abatch([GetOp(("u", "2"), "b"), PutOp(("u", "2"), "b", None),
                                          SearchOp(("u",), limit=5)])
            assert isinstance(results[0], Item)
            assert results[1] is None
            assert isinstance(results[2], list)
            assert len(results[2]) == 1
            assert await store.asearch(("u",)) == []
            with pytest.raises(InvalidNamespaceError):
                await store.aput(("u.v",), "k", {})
            # a sync call on the loop that drives the async client is refused, not hung
            with pytest.raises(RuntimeError):
                store.get(("u", "2"), "b")
            store.close()  # a client given is not closed
            assert await store.aget(("u", "2"), "b") is None
        finally:
            await aclient.close()

    asyncio.run(scenario())


def test_sync_store_from_async_code(store: OwnstateStore) -> None:
    async def scenario() -> list[Any]:
        await store.aput(("s",), "k", {"v": 1})
        first = await store.aget(("s",), "k")
        listed = await store.alist_namespaces()
        return [first, listed]

    first, listed = asyncio.run(scenario())
    assert first.value == {"v": 1}
    assert listed == [("s",)]
    item = store.get(("s",), "k")
    assert item is not None
    assert item.updated_at == first.updated_at


def test_from_url_owns_its_client(target: Target) -> None:
    with OwnstateStore.from_url(target.url, memory_store="lg-owned") as store:
        store.put(("o",), "k", {"v": 1})
    with ownstate.connect(target.url) as c, OwnstateStore(c, memory_store="lg-owned") as again:
        item = again.get(("o",), "k")
        assert item is not None
        assert item.value == {"v": 1}
        again.close()
        assert c.memory_stores.get("lg-owned").name == "lg-owned"  # still open
    with pytest.raises(InvalidInput):
        OwnstateStore.from_url(target.url, memory_store="No")


def test_memory_store_deleted_while_in_use(store: OwnstateStore,
                                           client: ownstate.Client) -> None:
    store.put(("a",), "k", {"v": 1})
    assert client.memory_stores.delete("langgraph") == 2  # the item and its namespace record
    with pytest.raises(StoreNotFound):
        store.get(("a",), "k")
    assert store.get(("a",), "k") is None  # made anew, empty
    store.put(("a",), "k", {"v": 2})
    assert store.list_namespaces() == [("a",)]


# a compiled graph -----------------------------------------------------------------------


class State(TypedDict):
    user: str
    said: str
    recalled: list[str]


def remember_and_recall(state: State, *, store: BaseStore) -> dict[str, Any]:
    namespace = ("memories", state["user"])
    store.put(namespace, f"m{len(store.search(namespace, limit=100))}", {"text": state["said"]})
    return {"recalled": sorted(i.value["text"] for i in store.search(namespace, limit=100))}


async def aremember_and_recall(state: State, *, store: BaseStore) -> dict[str, Any]:
    namespace = ("memories", state["user"])
    found = await store.asearch(namespace, limit=100)
    await store.aput(namespace, f"m{len(found)}", {"text": state["said"]})
    return {"recalled": sorted(i.value["text"] for i in await store.asearch(namespace,
                                                                          limit=100))}


def build(node: Any, store: BaseStore) -> Any:
    graph = StateGraph(State)
    graph.add_node("memory", node)
    graph.add_edge(START, "memory")
    graph.add_edge("memory", END)
    return graph.compile(store=store)


def test_compiled_graph_uses_the_store(store: OwnstateStore, client: ownstate.Client) -> None:
    app = build(remember_and_recall, store)
    first = app.invoke({"user": "u1", "said": "likes tea", "recalled": []})
    assert first["recalled"] == ["likes tea"]
    app.invoke({"user": "u2", "said": "likes coffee", "recalled": []})
    second = app.invoke({"user": "u1", "said": "lives in Oslo", "recalled": []})
    assert second["recalled"] == ["likes tea", "lives in Oslo"]

    async_app = build(aremember_and_recall, store)
    third = asyncio.run(async_app.ainvoke({"user": "u1", "said": "has a cat", "recalled": []}))
    assert third["recalled"] == ["has a cat", "likes tea", "lives in Oslo"]
    # what the graph remembered is ownstate memory about the subject memories.u1
    assert sorted(v["value"]["text"] for v in facts_of(client, "memories.u1").values()) == \
        third["recalled"]
    assert store.list_namespaces() == [("memories", "u1"), ("memories", "u2")]


# refused input --------------------------------------------------------------------------

BAD_NAMESPACES: list[tuple[Any, ...]] = [(), ("a.b",), ("",), ("ok", ""), ("langgraph",),
                                         ("langgraph", "x"), ("a", "b\x00"), ("ok", 1)]


@pytest.mark.parametrize("namespace", BAD_NAMESPACES)
def test_invalid_namespaces_raise_as_langgraph_does(store: OwnstateStore,
                                                    namespace: tuple[Any, ...]) -> None:
    store.put(("keep",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError) as expected:
        InMemoryStore().put(namespace, "k", {"v": 1})
    with pytest.raises(type(expected.value)):
        store.put(namespace, "k", {"v": 1})
    # the same op given to batch directly, next to a valid one: the whole batch is refused
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("fresh",), "k", {"v": 1}), PutOp(namespace, "k", {"v": 1})])
    assert store.list_namespaces() == [("keep",)]
    assert store.get(("fresh",), "k") is None


def test_invalid_labels_in_reads_raise_as_langgraph_does(store: OwnstateStore) -> None:
    reference = InMemoryStore()
    for call in [lambda s: s.get(("a.b",), "k"), lambda s: s.search(("x", "")),
                 lambda s: s.delete(("a.b",), "k"), lambda s: s.list_namespaces(prefix=("a.",)),
                 lambda s: s.list_namespaces(suffix=("",))]:
        with pytest.raises(InvalidNamespaceError):
            call(reference)
        with pytest.raises(InvalidNamespaceError):
            call(store)
    with pytest.raises(InvalidNamespaceError):
        store.batch([SearchOp(("a.b",))])
    # reading what cannot exist is not an error
    assert store.get((), "k") is None
    assert store.get(("langgraph", "namespaces"), "x") is None
    assert store.get(("x" * 300,), "k") is None
    assert store.get(("x",), "k" * 300) is None
    assert nothing_stored(store)


def test_bad_values_change_nothing(store: OwnstateStore, client: ownstate.Client) -> None:
    store.put(("keep",), "k", {"v": 1})
    before = store.get(("keep",), "k")
    bad_puts: list[tuple[PutOp, type[Exception]]] = [
        (PutOp(("keep",), "k", {"v": {1, 2}}), InvalidInput),
        (PutOp(("keep",), "k", {"v": math.nan}), InvalidInput),
        (PutOp(("keep",), "k", ["not", "a", "mapping"]), InvalidInput),  # type: ignore[arg-type]
        (PutOp(("keep",), "k", {"v": 1}, ttl=-1), InvalidInput),
        (PutOp(("keep",), "k", {"v": 1}, ttl=math.inf), InvalidInput),
        (PutOp(("keep",), "k" * 300, {"v": 1}), InvalidInput),
        (PutOp(("keep",), 7, {"v": 1}), InvalidInput),  # type: ignore[arg-type]
        (PutOp(("x" * 300,), "k", {"v": 1}), InvalidNamespaceError),
    ]
    for op, error in bad_puts:
        with pytest.raises(error):
            store.batch([PutOp(("keep",), "k", {"v": 2}), PutOp(("new",), "k", {"v": 1}), op])
    odd_condition = MatchCondition("middle", ("a",))  # type: ignore[arg-type]
    bad_reads: list[tuple[Any, type[Exception]]] = [
        (SearchOp(("keep",), filter={"v": {"$regex": "x"}}), InvalidInput),
        (SearchOp(("keep",), limit=-1), InvalidInput),
        (ListNamespacesOp(max_depth=0), InvalidInput),
        (ListNamespacesOp(match_conditions=(odd_condition,)), InvalidInput),
        ("get", ValueError),  # not an op at all
    ]
    for op, error in bad_reads:
        with pytest.raises(error):
            store.batch([PutOp(("new",), "k", {"v": 1}), op])
    with pytest.raises(LimitExceeded):
        store.put(("keep",), "k", {"v": "x" * (client.limits.max_item_bytes + 1)})
    assert store.get(("keep",), "k") == before
    assert store.list_namespaces() == [("keep",)]
    assert len(client.memory_stores.get("langgraph").history("keep", "k")) == 1
    with pytest.raises(InvalidInput):
        OwnstateStore(client, ttl={"default_ttl": 0})
    with pytest.raises(InvalidInput):
        OwnstateStore(client, memory_store="Bad Name!")
