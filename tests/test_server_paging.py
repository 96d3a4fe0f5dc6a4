"""Listings over HTTP that could grow without bound come a page at a time: a run's
checkpoints and a session's converted history, bounded in count and in bytes, and the
remote client follows the pages so the library behaves as it does on a local database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import ownstate
from ownstate.limits import Limits
from ownstate.model import CheckpointScope
from ownstate.testing.server import LiveServer

API = "/api/2.0/agents"
MIB = 1024 * 1024
PAGE_BYTES = 3 * MIB


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://paging-{uuid.uuid4().hex}", key_cache_seconds=0,
                      limits=Limits(max_page_bytes=PAGE_BYTES))
    yield live
    live.stop()


@pytest.fixture
def tenant(server: LiveServer) -> Iterator[tuple[ownstate.Client, str]]:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = server.mint_key(tenant=name, principal="admin", admin=True)
    with ownstate.connect(server.backend_url, tenant=name) as direct:
        direct.session_stores.create("alpha").add(actor_id="actor-1", session_id="s1")
        yield direct, admin


def _http(server: LiveServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=60,
                        headers={"authorization": f"Bearer {token}"})


def _base(scope: CheckpointScope) -> str:
    return (f"{API}/session-stores/{scope.store}/sessions/{scope.session_id}/runs/"
            f"{scope.run_id}/checkpoints")


def _large_checkpoints(direct: ownstate.Client) -> CheckpointScope:
    run = direct.runs.open_run(direct.session_stores.get("alpha").get("s1"), "langgraph")
    scope = run.checkpoint_scope()
    for n in range(4):
        direct.checkpoints.put(scope, f"c{n}", type_tag="bin", payload=bytes([n]) * (2 * MIB))
    return scope


def test_large_checkpoints_come_a_page_at_a_time_in_bounded_bodies(
        server: LiveServer, tenant: tuple[ownstate.Client, str]) -> None:
    direct, admin = tenant
    scope = _large_checkpoints(direct)
    pages: list[list[str]] = []
    params: dict[str, Any] = {"actor_id": scope.actor_id}
    with _http(server, admin) as http:
        while True:
            response = http.get(_base(scope), params=params)
            assert response.status_code == 200, response.text
            # two 2 MiB payloads would pass the 3 MiB bound: one a page, in base64
            assert len(response.content) < PAGE_BYTES * 4 // 3 + 64 * 1024
            body = response.json()
            pages.append([c["checkpoint_id"] for c in body["checkpoints"]])
            if body["next_page_token"] is None:
                break
            params["page_token"] = body["next_page_token"]
    assert pages == [["c3"], ["c2"], ["c1"], ["c0"]]


def test_the_remote_client_follows_the_pages(server: LiveServer,
                                             tenant: tuple[ownstate.Client, str]) -> None:
    direct, admin = tenant
    scope = _large_checkpoints(direct)
    with ownstate.connect(server.url, token=admin) as remote:
        assert remote.checkpoints.list(scope) == direct.checkpoints.list(scope)
        assert [c.checkpoint_id for c in remote.checkpoints.list(scope, limit=3)] == [
            "c3", "c2", "c1"]
        assert [c.checkpoint_id for c in remote.checkpoints.list(scope, before="c2")] == [
            "c1", "c0"]
        first = remote.checkpoints.list_page(scope, page_size=2)
        assert [c.checkpoint_id for c in first.items] == ["c3"]  # the server's 3 MiB
        rest = remote.checkpoints.list_page(scope, page_token=first.next_page_token)
        assert [c.checkpoint_id for c in rest.items] == ["c2"]
        small = direct.runs.open_run(direct.session_stores.get("alpha").add(
            actor_id="actor-1"), "langgraph").checkpoint_scope()
        for n in range(3):
            direct.checkpoints.put(small, f"s{n}", type_tag="bin", payload=b"x" * 10)
        page = remote.checkpoints.list_page(small, page_bytes=15)  # the client's bound
        assert [c.checkpoint_id for c in page.items] == ["s2"]
        page = remote.checkpoints.list_page(small, page_token=page.next_page_token)
        assert [c.checkpoint_id for c in page.items] == ["s1", "s0"]


def test_history_comes_a_page_at_a_time(server: LiveServer,
                                        tenant: tuple[ownstate.Client, str]) -> None:
    direct, admin = tenant
    session = direct.session_stores.get("alpha").get("s1")
    session.append_items([{"type": "message", "role": "user", "content": f"m{n}"}
                          for n in range(5)])
    session.append_items([{"type": "message", "role": "user", "content": "x" * 800_000}
                          for _ in range(6)])
    whole = session.history("openai.responses")
    path = f"{API}/session-stores/alpha/sessions/s1/history"
    pages: list[list[Any]] = []
    params: dict[str, Any] = {"as_format": "openai.responses", "page_size": 5}
    with _http(server, admin) as http:
        while True:
            response = http.get(path, params=params)
            assert response.status_code == 200, response.text
            assert len(response.content) < PAGE_BYTES + 64 * 1024
            body = response.json()
            pages.append(body["items"])
            if body["next_page_token"] is None:
                break
            params["page_token"] = body["next_page_token"]
        foreign = http.get(path, params={"as_format": "langchain",
                                         "page_token": params["page_token"]})
        assert foreign.status_code == 400
    assert [len(p) for p in pages] == [5, 3, 3]  # by count, then by bytes
    assert [entry for page in pages for entry in page] == whole
