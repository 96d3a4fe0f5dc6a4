"""Decisions over HTTP: who may decide (WRITE; a READ-only key is refused, and so is a key
naming someone else), what a refusal answers (4xx problem+json, nothing changed), the
principal recorded, what a non-admin key sees in the inbox, and the long polls."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import ownstate
from ownstate.model import Run
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

API = "/api/2.0/agents"
RUNS = f"{API}/runs"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://decisions-{uuid.uuid4().hex}", key_cache_seconds=0)
    yield live
    live.stop()


class Tenant:
    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.name = f"t-{uuid.uuid4().hex[:12]}"
        self.admin = server.mint_key(tenant=self.name, principal="admin", admin=True)
        self.direct = ownstate.connect(server.backend_url, tenant=self.name)
        for store in ("alpha", "beta"):
            self.direct.session_stores.create(store)

    def key(self, principal: str, grants: dict[str, str]) -> str:
        for store, level in grants.items():
            self.direct.session_stores.get(store).grant_permission(principal, level)
        return self.server.mint_key(tenant=self.name, principal=principal)

    def http(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.server.url, timeout=30, headers={
            "authorization": f"Bearer {token or self.admin}"})

    def awaiting(self, store: str = "alpha") -> Run:
        session = self.direct.session_stores.get(store).add(actor_id="customer-1")
        run = self.direct.runs.open_run(session, "langgraph", thread_key=session.session_id)
        return self.direct.runs.mark_awaiting(run.run_id, {"kind": "approval",
                                                           "tool": "refund"})


@pytest.fixture
def tenant(server: LiveServer) -> Iterator[Tenant]:
    made = Tenant(server)
    yield made
    made.direct.close()


def test_a_writer_decides_as_its_own_principal(tenant: Tenant) -> None:
    run = tenant.awaiting()
    token = tenant.key("reviewer-1", {"alpha": "WRITE"})
    with tenant.http(token) as http:
        answer = http.post(f"{RUNS}/{run.run_id}:decide", json={
            "outcome": "reject", "comment": "no receipt", "payload": {"why": ["receipt"]}})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["decision"]["decided_by"] == "reviewer-1"
        assert (body["decision"]["outcome"], body["decision"]["payload"]) == (
            "reject", {"why": ["receipt"]})
        assert body["decisions"] == [body["decision"]]
        again = http.post(f"{RUNS}/{run.run_id}:decide", json={"outcome": "approve"})
        details = _problem(again, 409, "already_decided")["details"]
        assert details == {"run_id": run.run_id, "outcome": "reject"}
    stored = tenant.direct.runs.get(run.run_id)
    assert stored.decision is not None
    assert (stored.decision.decided_by, stored.decision.outcome) == ("reviewer-1", "reject")


def test_refusals_answer_problems_and_change_nothing(tenant: Tenant) -> None:
    run = tenant.awaiting()
    reader = tenant.key("reader-1", {"alpha": "READ"})
    writer = tenant.key("writer-1", {"alpha": "WRITE"})
    outsider = tenant.key("outsider-1", {"beta": "WRITE"})
    before = tenant.direct.runs.get(run.run_id)
    path = f"{RUNS}/{run.run_id}:decide"
    with tenant.http(reader) as http:
        _problem(http.post(path, json={"outcome": "approve"}), 403, "permission_denied")
        # a reader still sees the run, and waits on it
        assert http.get(f"{RUNS}/{run.run_id}/decision").json()["decision"] is None
    with tenant.http(outsider) as http:
        _problem(http.post(path, json={"outcome": "approve"}), 404, "run_not_found")
    with tenant.http(writer) as http:
        _problem(http.post(path, json={"outcome": "approve", "decided_by": "someone-else"}),
                 403, "permission_denied")
        for bad in ({"outcome": "maybe"}, {}, {"outcome": "approve", "comment": "x" * 5000},
                    {"outcome": "approve", "extra": 1}):
            _problem(http.post(path, json=bad), 400, "invalid_input")
        closed = tenant.direct.runs.open_run(
            tenant.direct.session_stores.get("alpha").add(actor_id="c"), "langgraph")
        _problem(http.post(f"{RUNS}/{closed.run_id}:decide", json={"outcome": "approve"}),
                 409, "not_awaiting")
    with tenant.http() as http:
        _problem(http.post(f"{RUNS}/run_missing:decide", json={"outcome": "approve"}),
                 404, "run_not_found")
    assert tenant.direct.runs.get(run.run_id) == before


def test_the_inbox_shows_a_key_only_its_stores(tenant: Tenant) -> None:
    mine, theirs = tenant.awaiting("alpha"), tenant.awaiting("beta")
    token = tenant.key("reviewer-2", {"alpha": "READ"})
    with tenant.http(token) as http:
        body = http.get(f"{RUNS}:awaiting").json()
        assert [r["run_id"] for r in body["runs"]] == [mine.run_id]
    with tenant.http() as http:
        pages: list[str] = []
        token_: str | None = None
        while True:
            body = http.get(f"{RUNS}:awaiting", params={
                "page_size": 1, **({"page_token": token_} if token_ else {})}).json()
            pages += [r["run_id"] for r in body["runs"]]
            token_ = body.get("next_page_token")
            if token_ is None:
                break
        assert pages == [mine.run_id, theirs.run_id]
        _problem(http.get(f"{RUNS}:awaiting", params={"wait": 61}), 400, "invalid_input")


def test_long_polls_return_once_decided(tenant: Tenant) -> None:
    run = tenant.awaiting()
    done: dict[str, Any] = {}

    def wait(name: str, path: str, params: dict[str, Any]) -> None:
        with tenant.http() as http:
            done[name] = http.get(path, params=params).json()

    waiters = [threading.Thread(target=wait, args=(
        "one", f"{RUNS}/{run.run_id}/decision", {"wait": 30})),
        threading.Thread(target=wait, args=(
            "any", f"{RUNS}:awaiting", {"decided": "true", "wait": 30}))]
    for thread in waiters:
        thread.start()
    time.sleep(0.3)
    assert done == {}  # both are held open
    tenant.direct.runs.decide(run.run_id, "approve")
    for thread in waiters:
        thread.join(timeout=30)
    assert done["one"]["decision"]["outcome"] == "approve"
    assert [r["run_id"] for r in done["any"]["runs"]] == [run.run_id]
    # through the remote client
    remote = ownstate.connect(tenant.server.url, token=tenant.admin)
    try:
        got = remote.runs.wait_for_decision(run.run_id, timeout=5)
        assert got is not None
        assert got.decided
        assert remote.runs.wait_for_decision(framework="adk", timeout=0.2) is None
        # the server narrows to the stores asked for, so nothing else comes back
        assert remote.runs.wait_for_decision(stores=["beta"], timeout=0.3) is None
        assert [r.run_id for r in remote.runs.decided(stores=["alpha"]).items] == [run.run_id]
    finally:
        remote.close()
    with tenant.http() as http:
        assert http.get(f"{RUNS}:awaiting", params={"decided": "true", "stores": "beta"}
                        ).json()["runs"] == []
        assert [r["run_id"] for r in http.get(f"{RUNS}:awaiting", params={
            "decided": "true", "stores": "alpha,beta"}).json()["runs"]] == [run.run_id]
        _problem(http.get(f"{RUNS}:awaiting", params={"stores": "Not A Store"}), 400,
                 "invalid_input")
