"""Ranked search over HTTP: a key finds only what it may read, refusals are problem
documents, and the library's search works unchanged through a reader's key."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

import ownstate
from ownstate.errors import LimitExceeded, StoreNotFound
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

API = "/api/2.0/agents"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://search-{uuid.uuid4().hex}", key_cache_seconds=0)
    yield live
    live.stop()


@pytest.fixture
def tenant(server: LiveServer) -> Iterator[tuple[str, ownstate.Client]]:
    """A tenant with session stores ``open`` and ``closed`` and memory stores ``mem`` and
    ``secret``, each holding text about refunds; ``reader`` may read ``open`` and
    ``mem`` only."""
    name = f"s-{uuid.uuid4().hex[:12]}"
    direct = ownstate.connect(server.backend_url, tenant=name)
    for store in ("open", "closed"):
        session = direct.session_stores.create(store).add(actor_id="user:1",
                                                         session_id=f"{store}-1")
        session.append_items([{"role": "user", "content": f"refund my {store} order"}])
    for store in ("mem", "secret"):
        direct.memory_stores.create(store).remember("user:1", "topic", f"refund {store}")
    direct.session_stores.get("open").grant_permission("reader", "READ")
    direct.memory_stores.get("mem").grant_permission("reader", "READ")
    yield name, direct
    direct.close()


def _http(server: LiveServer, tenant: str, principal: str, admin: bool = False) -> httpx.Client:
    token = server.mint_key(tenant=tenant, principal=principal, admin=admin)
    return httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"})


def test_a_key_finds_items_only_in_stores_it_may_read(
        server: LiveServer, tenant: tuple[str, ownstate.Client]) -> None:
    name, _ = tenant
    with _http(server, name, "reader") as reader, _http(server, name, "root", True) as admin, \
            _http(server, name, "stranger") as stranger:
        def stores(client: httpx.Client, **body: object) -> list[str]:
            answer = client.post(f"{API}/items:search", json={"query": "refund", **body})
            assert answer.status_code == 200, answer.text
            return [h["store"] for h in answer.json()["hits"]]

        assert sorted(stores(admin)) == ["closed", "open"]
        assert stores(reader) == ["open"]
        assert stores(reader, stores=["closed", "open"]) == ["open"]
        assert stores(reader, stores=["closed"]) == []
        assert stores(stranger) == []
        # a store it may not read answers exactly as a missing one
        hidden = _problem(reader.post(f"{API}/items:search",
                                      json={"query": "refund", "store": "closed"}),
                          404, "store_not_found")
        missing = _problem(reader.post(f"{API}/items:search",
                                       json={"query": "refund", "store": "nope"}),
                           404, "store_not_found")
        assert hidden["details"] == {"store": "closed"}
        assert missing["details"] == {"store": "nope"}


def test_a_key_searches_facts_only_in_memory_stores_it_may_read(
        server: LiveServer, tenant: tuple[str, ownstate.Client]) -> None:
    name, _ = tenant
    with _http(server, name, "reader") as reader:
        found = reader.post(f"{API}/memory-stores/mem/facts:search", json={"query": "refund"})
        assert found.status_code == 200, found.text
        (hit,) = found.json()["hits"]
        assert hit["fact"]["value"] == "refund mem"
        assert hit["score"] > 0
        _problem(reader.post(f"{API}/memory-stores/secret/facts:search",
                             json={"query": "refund"}), 404, "store_not_found")


@pytest.mark.parametrize(("path", "body", "status", "code"), [
    ("/items:search", {"query": ""}, 400, "invalid_input"),
    ("/items:search", {"query": "?!"}, 400, "invalid_input"),
    ("/items:search", {"query": "x" * 2001}, 400, "limit_exceeded"),
    ("/items:search", {"query": "refund", "limit": 0}, 400, "invalid_input"),
    ("/items:search", {"query": "refund", "store": "open", "stores": ["open"]}, 400,
     "invalid_input"),
    ("/items:search", {"query": "refund", "extra": 1}, 400, "invalid_input"),
    ("/memory-stores/mem/facts:search", {"query": ""}, 400, "invalid_input"),
    ("/memory-stores/mem/facts:search", {"query": " ".join(f"w{n}" for n in range(65))},
     400, "limit_exceeded"),
    ("/memory-stores/mem/facts:search", {"query": "refund", "as_of": "yesterday"}, 400,
     "invalid_input"),
])
def test_bad_searches_are_problem_documents(server: LiveServer,
                                            tenant: tuple[str, ownstate.Client], path: str,
                                            body: dict[str, object], status: int,
                                            code: str) -> None:
    name, _ = tenant
    with _http(server, name, "root", True) as admin:
        _problem(admin.post(f"{API}{path}", json=body), status, code)


def test_the_library_searches_through_a_readers_key(
        server: LiveServer, tenant: tuple[str, ownstate.Client]) -> None:
    name, direct = tenant
    token = server.mint_key(tenant=name, principal="reader")
    with ownstate.connect(server.url, token=token) as remote:
        hits = remote.session_stores.search_items("refund order")
        assert [(h.store, h.item.session_id, h.item.seq) for h in hits] == [("open", "open-1", 1)]
        assert hits == direct.session_stores.search_items("refund order", store="open")
        assert remote.memory_stores.get("mem").search("refund") == \
            direct.memory_stores.get("mem").search("refund")
        with pytest.raises(StoreNotFound):
            remote.session_stores.search_items("refund", store="closed")
        with pytest.raises(LimitExceeded):
            remote.session_stores.search_items("x" * 2001)
