"""Search modes over HTTP: ``mode`` on both search routes, ranked by the server's embedder,
refused as problem documents where the server has none, and a key still finds only what
it may read, in every mode."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import click
import httpx
import pytest

import ownstate
from ownstate.cli_common import load_embedder
from ownstate.errors import InvalidInput
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

API = "/api/2.0/agents"


class Letters:
    """A tiny embedder: counts of the letters a to h."""

    model = "test/letters"
    dimension = 8

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(t.lower().count(c)) + 0.01 for c in "abcdefgh"] for t in texts]


def _tenant(server: LiveServer, embedder: Letters | None) -> tuple[str, ownstate.Client]:
    name = f"s-{uuid.uuid4().hex[:12]}"
    direct = ownstate.connect(server.backend_url, tenant=name, embedder=embedder)
    for store in ("open", "closed"):
        session = direct.session_stores.create(store).add(actor_id="user:1",
                                                         session_id=f"{store}-1")
        session.append_items([{"role": "user", "content": f"refund my {store} order"},
                              {"role": "user", "content": "a bad dab of fade"}])
    for store in ("mem", "secret"):
        memory = direct.memory_stores.create(store)
        memory.remember("user:1", "topic", f"refund {store}")
        memory.remember("user:1", "paint", "a bad dab of fade")
    direct.session_stores.get("open").grant_permission("reader", "READ")
    direct.memory_stores.get("mem").grant_permission("reader", "READ")
    return name, direct


@pytest.fixture(scope="module")
def plain() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://plain-{uuid.uuid4().hex}", key_cache_seconds=0)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def embedding() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://embedding-{uuid.uuid4().hex}", key_cache_seconds=0,
                      embedder=Letters())
    yield live
    live.stop()


def _http(server: LiveServer, tenant: str, principal: str, admin: bool = False) -> httpx.Client:
    token = server.mint_key(tenant=tenant, principal=principal, admin=admin)
    return httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"},
                        timeout=60)


@pytest.mark.parametrize("path", ["/items:search", "/memory-stores/mem/facts:search"])
def test_without_an_embedder_only_lexical_is_served(plain: LiveServer, path: str) -> None:
    name, direct = _tenant(plain, None)
    with _http(plain, name, "root", True) as admin:
        for mode in ("semantic", "hybrid"):
            body = _problem(admin.post(f"{API}{path}", json={"query": "refund", "mode": mode}),
                            400, "invalid_input")
            assert body["details"]["field"] == "mode"
        _problem(admin.post(f"{API}{path}", json={"query": "refund", "mode": "fuzzy"}),
                 400, "invalid_input")
        for mode in ("lexical", None):
            answer = admin.post(f"{API}{path}", json={"query": "refund", "mode": mode})
            assert answer.status_code == 200, answer.text
            assert answer.json()["hits"]
    direct.close()


def test_the_library_passes_the_mode_to_the_server(plain: LiveServer,
                                                   embedding: LiveServer) -> None:
    name, direct = _tenant(plain, None)
    with ownstate.connect(plain.url, token=plain.mint_key(tenant=name, principal="root",
                                                          admin=True)) as remote:
        with pytest.raises(InvalidInput) as err:
            remote.memory_stores.get("mem").search("refund", mode="semantic")
        assert err.value.field == "mode"
        with pytest.raises(InvalidInput):
            remote.session_stores.search_items("refund", mode="hybrid")
        with pytest.raises(InvalidInput):
            remote.session_stores.search_items("refund", mode="fuzzy")  # type: ignore[arg-type]
        assert remote.session_stores.search_items("refund", store="open") == \
            direct.session_stores.search_items("refund", store="open")
    direct.close()
    name, direct = _tenant(embedding, Letters())
    token = embedding.mint_key(tenant=name, principal="root", admin=True)
    with ownstate.connect(embedding.url, token=token) as remote:
        for mode in ("lexical", "semantic", "hybrid", None):
            assert remote.memory_stores.get("mem").search("faded", mode=mode) == \
                direct.memory_stores.get("mem").search("faded", mode=mode)
            assert remote.session_stores.search_items("faded", mode=mode) == \
                direct.session_stores.search_items("faded", mode=mode)
        # the server's default is hybrid, as the library's is with an embedder
        assert remote.session_stores.search_items("faded") == \
            direct.session_stores.search_items("faded", mode="hybrid")
    direct.close()


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_every_mode_keeps_to_what_a_key_may_read(embedding: LiveServer, mode: str) -> None:
    name, direct = _tenant(embedding, Letters())
    with _http(embedding, name, "reader") as reader, \
            _http(embedding, name, "stranger") as stranger:
        found = reader.post(f"{API}/items:search", json={"query": "faded", "mode": mode})
        assert found.status_code == 200, found.text
        assert {h["store"] for h in found.json()["hits"]} == {"open"}
        none = stranger.post(f"{API}/items:search", json={"query": "faded", "mode": mode})
        assert none.json()["hits"] == []
        _problem(reader.post(f"{API}/items:search",
                             json={"query": "faded", "mode": mode, "store": "closed"}),
                 404, "store_not_found")
        facts = reader.post(f"{API}/memory-stores/mem/facts:search",
                            json={"query": "faded", "mode": mode})
        assert facts.status_code == 200, facts.text
        assert {h["fact"]["memory_store"] for h in facts.json()["hits"]} == {"mem"}
        _problem(reader.post(f"{API}/memory-stores/secret/facts:search",
                             json={"query": "faded", "mode": mode}), 404, "store_not_found")
    direct.close()


def test_the_mode_is_in_the_schema(plain: LiveServer) -> None:
    schema = httpx.get(f"{plain.url}/openapi.json", timeout=60).json()
    bodies = schema["components"]["schemas"]
    for name in ("SearchIn", "SearchItemsIn"):
        mode = bodies[name]["properties"]["mode"]
        assert {"lexical", "semantic", "hybrid"} <= {
            v for option in mode.get("anyOf", [mode]) for v in option.get("enum", [])}


def test_serve_loads_the_embedder_it_is_named() -> None:
    assert load_embedder(None) is None
    assert isinstance(load_embedder("test_server_semantic:Letters"), Letters)
    for bad in ("nothing", "no_such_module:x", "test_server_semantic:Nope"):
        with pytest.raises(click.BadParameter):
            load_embedder(bad)


def test_a_server_refuses_an_embedder_its_backend_cannot_store() -> None:
    from ownstate.server import create_app

    with pytest.raises(InvalidInput):
        create_app("memory://x", embedder="not an embedder")
