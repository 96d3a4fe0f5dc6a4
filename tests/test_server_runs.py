"""Runs and checkpoints over HTTP: resume races between principals, refusals that change
nothing, what a non-admin key may see, scope mismatches that answer byte for byte as a
missing run, and the bound on checkpoint uploads."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import ownstate
from ownstate import _ids
from ownstate.errors import RunNotFound, SessionNotFound
from ownstate.limits import Limits
from ownstate.model import CheckpointScope, PendingWrite, Run
from ownstate.testing.checkpoints import FrozenTime
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

API = "/api/2.0/agents"
RUNS = f"{API}/runs"
SMALL = 1024


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://runs-{uuid.uuid4().hex}", key_cache_seconds=0)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def small_server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://small-runs-{uuid.uuid4().hex}", key_cache_seconds=0,
                      limits=Limits(max_checkpoint_bytes=SMALL))
    yield live
    live.stop()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FrozenTime:
    """The time the server's API sees (it runs in this process), standing still until
    advanced."""
    made = FrozenTime()
    monkeypatch.setattr(_ids, "now", made.now)
    return made


@dataclass
class Tenant:
    """A fresh tenant: its admin token, a direct client on the server's database, two
    stores (``alpha`` and ``beta``) with a session each, and keys with grants."""

    server: LiveServer
    name: str
    admin: str
    direct: ownstate.Client

    def key(self, principal: str, grants: dict[str, str] | None = None) -> str:
        for store, level in (grants or {}).items():
            self.direct.session_stores.get(store).grant_permission(principal, level)
        return self.server.mint_key(tenant=self.name, principal=principal)

    def http(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.server.url, timeout=30, headers={
            "authorization": f"Bearer {token or self.admin}"})

    def session(self, store: str = "alpha", session_id: str = "s1") -> ownstate.Session:
        return self.direct.session_stores.get(store).get(session_id)

    def open(self, store: str = "alpha", session_id: str = "s1", **kwargs: Any) -> Run:
        return self.direct.runs.open_run(self.session(store, session_id), "langgraph",
                                         **kwargs)


def _tenant(server: LiveServer) -> Iterator[Tenant]:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = server.mint_key(tenant=name, principal="admin", admin=True)
    direct = ownstate.connect(server.backend_url, tenant=name)
    try:
        for store in ("alpha", "beta"):
            direct.session_stores.create(store).add(actor_id="actor-1", session_id="s1")
        yield Tenant(server, name, admin, direct)
    finally:
        direct.close()


@pytest.fixture
def tenant(server: LiveServer) -> Iterator[Tenant]:
    yield from _tenant(server)


@pytest.fixture
def other_tenant(server: LiveServer) -> Iterator[Tenant]:
    yield from _tenant(server)


@pytest.fixture
def small_tenant(small_server: LiveServer) -> Iterator[Tenant]:
    yield from _tenant(small_server)


# resume races --------------------------------------------------------------------------


def test_two_principals_racing_resume_one_wins(tenant: Tenant, clock: FrozenTime) -> None:
    run = tenant.open()
    tokens = {p: tenant.key(p, {"alpha": "WRITE"}) for p in ("replica-a", "replica-b")}
    clients = {p: tenant.http(t) for p, t in tokens.items()}
    expected_token = run.fencing_token
    try:
        for round_no in range(25):
            clock.advance(31)  # every earlier lease has expired
            start = threading.Barrier(len(clients))
            answers: dict[str, httpx.Response] = {}

            def claim(principal: str, start: threading.Barrier = start,
                      answers: dict[str, httpx.Response] = answers) -> None:
                start.wait(timeout=30)
                answers[principal] = clients[principal].post(
                    f"{RUNS}/{run.run_id}:resume", json={"owner": principal, "ttl": 30})

            threads = [threading.Thread(target=claim, args=(p,)) for p in clients]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            won = [p for p, r in answers.items() if r.status_code == 200]
            assert len(won) == 1, (round_no, {p: r.text for p, r in answers.items()})
            winner = won[0]
            (loser,) = set(clients) - {winner}
            expected_token += 1
            lease = answers[winner].json()
            assert (lease["owner"], lease["fencing_token"]) == (winner, expected_token)
            problem = _problem(answers[loser], 409, "lease_held")
            assert problem["details"]["owner"] == winner
            assert problem["details"]["run_id"] == run.run_id
            # the loser's writes with the winner's predecessor's token are refused
            stale = clients[loser].post(f"{RUNS}/{run.run_id}:heartbeat",
                                        json={"fencing_token": expected_token - 1})
            _problem(stale, 409, "stale_lease")
    finally:
        for http in clients.values():
            http.close()
    assert tenant.direct.runs.get(run.run_id).fencing_token == expected_token


# bad input -----------------------------------------------------------------------------


BAD_BODIES: list[tuple[str, str, bytes]] = [
    # (route suffix, what is wrong, raw JSON body)
    (":resume", "no owner", b'{"ttl": 30}'),
    (":resume", "empty owner", b'{"owner": ""}'),
    (":resume", "owner too long", json.dumps({"owner": "x" * 257}).encode()),
    (":resume", "lone surrogate", b'{"owner": "\\ud800"}'),
    (":resume", "control char", b'{"owner": "a\\u0000b"}'),
    (":resume", "ttl as text", b'{"owner": "w", "ttl": "30"}'),
    (":resume", "ttl zero", b'{"owner": "w", "ttl": 0}'),
    (":resume", "ttl too long", b'{"owner": "w", "ttl": 86401}'),
    (":resume", "ttl NaN", b'{"owner": "w", "ttl": NaN}'),
    (":resume", "ttl overflow", b'{"owner": "w", "ttl": 1e400}'),
    (":resume", "ttl bool", b'{"owner": "w", "ttl": true}'),
    (":resume", "unknown field", b'{"owner": "w", "lease": 1}'),
    (":resume", "not an object", b'["w"]'),
    (":resume", "not JSON", b'{"owner": '),
    (":resume", "empty body", b""),
    (":heartbeat", "huge token", b'{"fencing_token": 1000000000000000000000000000000}'),
    (":heartbeat", "negative token", b'{"fencing_token": -1}'),
    (":heartbeat", "token as float", b'{"fencing_token": 1.0}'),
    (":heartbeat", "token as text", b'{"fencing_token": "1"}'),
    (":heartbeat", "enormous integer", b'{"fencing_token": ' + b"9" * 5000 + b"}"),
    (":close", "active status", b'{"status": "running"}'),
    (":close", "negative cost", b'{"status": "done", "usd_cost": -1}'),
    (":close", "infinite cost", b'{"status": "done", "usd_cost": Infinity}'),
    (":close", "steps as bool", b'{"status": "done", "step_count": true}'),
    (":close", "steps beyond 64 bits", b'{"status": "done", "step_count": 9223372036854775808}'),
    (":await", "awaiting a list", b'{"awaiting": ["approval"]}'),
    (":await", "awaiting NaN", b'{"awaiting": {"amount": NaN}}'),
    (":await", "awaiting surrogate", b'{"awaiting": {"note": "\\udfff"}}'),
    (":await", "requested_by empty", b'{"awaiting": {}, "requested_by": ""}'),
    ("/effects/call-1", "no result", b'{"fencing_token": 1}'),
    ("/effects/call-1", "result NaN", b'{"result": NaN}'),
    ("/effects/call-1", "result surrogate", b'{"result": ["\\ud83d"]}'),
    ("/effects/" + "x" * 257, "tool call id too long", b'{"result": 1}'),
]


@pytest.mark.parametrize(("suffix", "wrong", "body"), BAD_BODIES,
                         ids=[f"{s}-{w}" for s, w, _ in BAD_BODIES])
def test_bad_run_input_is_a_400_and_changes_nothing(tenant: Tenant, suffix: str, wrong: str,
                                                    body: bytes) -> None:
    run = tenant.open(owner="w")
    tenant.direct.runs.record_effect(run.run_id, "call-1", "kept", fencing_token=1)
    before = (tenant.direct.runs.get(run.run_id),
              tenant.direct.runs.get_effect(run.run_id, "call-1"))
    method = "PUT" if suffix.startswith("/effects/") else "POST"
    with tenant.http() as http:
        response = http.request(method, f"{RUNS}/{run.run_id}{suffix}", content=body,
                                headers={"content-type": "application/json"})
    assert response.status_code == 400, (wrong, response.text)
    assert response.json()["code"] in ("invalid_input", "limit_exceeded")
    assert (tenant.direct.runs.get(run.run_id),
            tenant.direct.runs.get_effect(run.run_id, "call-1")) == before


@pytest.mark.parametrize("body", [
    {"framework": "Bad Name"}, {"framework": "x" * 65}, {"framework": 7},
    {"framework": "langgraph", "run_id": "-leading"}, {"framework": "langgraph", "run_id": ""},
    {"framework": "langgraph", "thread_key": "t\nk"}, {"framework": "langgraph", "ttl": -1},
    {"framework": "langgraph", "owner": "\ud800"}, {"framework": "langgraph", "extra": 1},
])
def test_bad_open_run_creates_nothing(tenant: Tenant, body: dict[str, Any]) -> None:
    with tenant.http() as http:
        response = http.post(f"{API}/session-stores/alpha/sessions/s1/runs",
                             content=json.dumps(body).encode(),
                             headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert list(tenant.direct.runs.list()) == []


def test_bad_listing_arguments_are_400s(tenant: Tenant) -> None:
    tenant.open()
    with tenant.http() as http:
        for params in ({"status": "paused"}, {"framework": "Bad"}, {"limit": 0},
                       {"limit": 10**30}, {"page_size": 1001}, {"page_token": "garbage"},
                       {"after": "x"}, {"limit": 2, "page_size": 2}, {"session_id": "s1"},
                       {"store": "Bad Store"}):
            response = http.get(RUNS, params=params)
            assert response.status_code == 400, (params, response.text)
        for params in ({"status": "done"}, {"limit": 1001}, {"older_than": -1},
                       {"older_than": "nan"}, {"entered_before": "2030-01-01T00:00:00"},
                       {"older_than": 5, "entered_before": "2030-01-01T00:00:00Z"}):
            response = http.get(f"{RUNS}:outstanding", params=params)
            assert response.status_code == 400, (params, response.text)


def test_odd_tool_call_ids_round_trip(tenant: Tenant) -> None:
    run = tenant.open()
    odd = ["a/b", "..", ".", "a/../b", "?x=1#y", "100%", "with space", "é🙂", "/lead", "trail/"]
    with ownstate.connect(tenant.server.url, token=tenant.admin) as client:
        for n, call in enumerate(odd):
            assert client.runs.record_effect(run.run_id, call, n).recorded
        for n, call in enumerate(odd):
            effect = client.runs.get_effect(run.run_id, call)
            assert effect is not None
            assert (effect.tool_call_id, effect.result) == (call, n)
        assert client.runs.get_effect(run.run_id, "a") is None
        # an id no run could have is refused as the server refuses a missing run
        with pytest.raises(RunNotFound) as local:
            client.runs.get("no/such?run")
        with pytest.raises(RunNotFound) as remote:
            client.runs.get("no-such-run")
        assert str(local.value) == str(remote.value).replace("no-such-run", "no/such?run")
        assert local.value.details == {"run_id": "no/such?run"}


# what a non-admin key sees -------------------------------------------------------------


def _ids_of(body: dict[str, Any]) -> list[str]:
    return [r["run_id"] for r in body["runs"]]


def test_non_admin_sees_only_runs_of_stores_it_may_read(tenant: Tenant, clock: FrozenTime) -> None:
    alpha, beta = tenant.direct.session_stores.get("alpha"), tenant.direct.session_stores.get(
        "beta")
    made: list[Run] = []
    for n in range(9):
        store = alpha if n % 3 == 0 else beta
        session = store.add(actor_id="actor-1", session_id=f"s-{n}")
        made.append(tenant.direct.runs.open_run(session, "langgraph", run_id=f"r{n}"))
        clock.advance(1)
    for run in made:
        clock.advance(1)
        tenant.direct.runs.mark_awaiting(run.run_id, {"kind": "approval"})
    mine = [r.run_id for r in reversed(made) if r.store == "alpha"]  # newest first
    reader = tenant.key("reader", {"alpha": "READ"})
    stranger = tenant.key("stranger")

    with tenant.http(reader) as http:
        assert _ids_of(http.get(RUNS).json()) == mine
        for size in (1, 2):
            seen: list[str] = []
            token: str | None = None
            while True:
                params: dict[str, Any] = {"page_size": size}
                if token is not None:
                    params["page_token"] = token
                body = http.get(RUNS, params=params).json()
                assert len(body["runs"]) <= size
                seen += _ids_of(body)
                token = body.get("next_page_token")
                if token is None:
                    break
            assert seen == mine
            seen, after = [], None
            while True:
                params = {"limit": size} | ({"after": after} if after is not None else {})
                body = http.get(RUNS, params=params).json()
                seen += _ids_of(body)
                after = body.get("next_after")
                if after is None:
                    break
            assert seen == mine
        assert _ids_of(http.get(RUNS, params={"store": "alpha"}).json()) == mine
        waiting = http.get(f"{RUNS}:outstanding").json()
        assert _ids_of(waiting) == [r.run_id for r in made if r.store == "alpha"]
        assert _ids_of(http.get(f"{RUNS}:outstanding", params={"limit": 1}).json()) == ["r0"]

        hidden = http.get(RUNS, params={"store": "beta"})
        missing = http.get(RUNS, params={"store": "nope-store"})
        assert hidden.status_code == 404
        assert hidden.content.replace(b"beta", b"nope-store") == missing.content
        for path in ("", "/effects/call"):
            other = http.get(f"{RUNS}/r1{path}")
            absent = http.get(f"{RUNS}/zz{path}")
            _problem(other, 404, "run_not_found")
            assert other.content.replace(b"r1", b"zz") == absent.content
        assert http.get(f"{RUNS}/r0").json()["store"] == "alpha"
        # READ is not enough to drive a run
        denied = http.post(f"{RUNS}/r0:resume", json={"owner": "reader"})
        _problem(denied, 403, "permission_denied")
        denied = http.put(f"{RUNS}/r0/effects/call", json={"result": 1})
        _problem(denied, 403, "permission_denied")
        hidden_resume = http.post(f"{RUNS}/r1:resume", json={"owner": "reader"})
        _problem(hidden_resume, 404, "run_not_found")

    with tenant.http(stranger) as http:
        assert http.get(RUNS).json()["runs"] == []
        assert http.get(RUNS, params={"limit": 5}).json()["runs"] == []
        assert http.get(f"{RUNS}:outstanding").json()["runs"] == []
        opened = http.post(f"{API}/session-stores/alpha/sessions/s1/runs",
                           json={"framework": "langgraph"})
        nowhere = http.post(f"{API}/session-stores/nope-store/sessions/s1/runs",
                            json={"framework": "langgraph"})
        _problem(opened, 404, "session_not_found")
        assert opened.content.replace(b"alpha", b"nope-store") == nowhere.content
    assert [r.run_id for r in tenant.direct.runs.list()] == [r.run_id for r in reversed(made)]


def test_a_writer_drives_runs_in_its_store(tenant: Tenant) -> None:
    writer = tenant.key("writer", {"alpha": "WRITE"})
    with ownstate.connect(tenant.server.url, token=writer) as client:
        session = client.session_stores.get("alpha").get("s1")
        run = client.runs.open_run(session, "adk", owner="w")
        client.runs.mark_awaiting(run.run_id, {"kind": "approval"}, fencing_token=1)
        assert [r.run_id for r in client.runs.outstanding()] == [run.run_id]
        lease = client.runs.resume(run.run_id, "w2")
        assert client.runs.record_effect(run.run_id, "c", {"ok": True},
                                         fencing_token=lease.fencing_token).recorded
        closed = client.runs.close_run(run.run_id, "done", usd_cost=0.5, step_count=3)
        assert (closed.status, closed.usd_cost, closed.step_count) == ("done", 0.5, 3)
        assert [r.run_id for r in client.runs.list(session=session)] == [run.run_id]
    assert tenant.direct.runs.get(run.run_id) == closed


# checkpoints -----------------------------------------------------------------------------


def _base(scope: CheckpointScope) -> str:
    return (f"{API}/session-stores/{scope.store}/sessions/{scope.session_id}/runs/"
            f"{scope.run_id}/checkpoints")


def _upload(envelope: dict[str, Any], payload: bytes) -> bytes:
    return json.dumps(envelope).encode() + b"\n" + payload


def test_scope_mismatches_answer_byte_for_byte_as_a_missing_run(tenant: Tenant,
                                                                other_tenant: Tenant) -> None:
    run = tenant.open()
    scope = run.checkpoint_scope()
    tenant.direct.checkpoints.put(scope, "c1", type_tag="json", payload=b"secret")
    tenant.direct.session_stores.get("alpha").add(actor_id="actor-2", session_id="s2")
    stranger = tenant.key("stranger")
    other = other_tenant
    wrong = [
        CheckpointScope("actor-2", "alpha", "s1", run.run_id),
        CheckpointScope("actor-1", "alpha", "s2", run.run_id),
        CheckpointScope("actor-1", "beta", "s1", run.run_id),
        CheckpointScope("actor-1", "alpha", "no-session", run.run_id),
        CheckpointScope("actor-1", "nope-store", "s1", run.run_id),
    ]
    calls: dict[str, Callable[[httpx.Client, CheckpointScope], httpx.Response]] = {
        "get": lambda h, s: h.get(f"{_base(s)}:get", params={"actor_id": s.actor_id}),
        "list": lambda h, s: h.get(_base(s), params={"actor_id": s.actor_id}),
        "put": lambda h, s: h.post(f"{_base(s)}:put", params={"actor_id": s.actor_id},
                                   content=_upload({"checkpoint_id": "c2",
                                                    "type_tag": "json"}, b"forged")),
        "put_writes": lambda h, s: h.post(
            f"{_base(s)}:put_writes", params={"actor_id": s.actor_id},
            content=_upload({"checkpoint_id": "c1", "writes": [
                {"task_id": "t", "index": 0, "channel": "c", "type_tag": "json",
                 "size": 1}]}, b"x")),
        "delete": lambda h, s: h.post(f"{_base(s)}:delete", params={"actor_id": s.actor_id},
                                      json={"checkpoint_ids": ["c1"]}),
        "delete_run": lambda h, s: h.delete(_base(s), params={"actor_id": s.actor_id}),
        "copy": lambda h, s: h.post(f"{_base(s)}:copy", params={"actor_id": s.actor_id},
                                    json={"target": {"actor_id": s.actor_id,
                                                     "store": s.store,
                                                     "session_id": s.session_id,
                                                     "run_id": s.run_id}}),
    }
    before = tenant.direct.checkpoints.list(scope)
    with tenant.http() as admin, tenant.http(stranger) as outsider, other.http() as foreign:
        for name, call in calls.items():
            missing = call(admin, CheckpointScope("actor-1", "alpha", "s1", "no-such-run"))
            _problem(missing, 404, "run_not_found")
            expected = missing.content.replace(b"no-such-run", run.run_id.encode())
            answers = [call(admin, s) for s in wrong]
            answers += [call(outsider, scope), call(foreign, scope)]
            for answer in answers:
                assert answer.status_code == 404, (name, answer.text)
                assert answer.headers["content-type"] == missing.headers["content-type"]
                assert answer.content == expected, name
    assert tenant.direct.checkpoints.list(scope) == before


def test_checkpoints_over_http_by_permission(tenant: Tenant) -> None:
    run = tenant.open()
    scope = run.checkpoint_scope()
    reader = tenant.key("reader", {"alpha": "READ"})
    writer = tenant.key("writer", {"alpha": "WRITE"})
    with ownstate.connect(tenant.server.url, token=writer) as client:
        client.checkpoints.put(scope, "c1", type_tag="msgpack", payload=b"\x00\xff",
                               metadata={"step": 1})
        client.checkpoints.put_writes(scope, "c1", [
            PendingWrite("t", -1, "__error__", "json", b"e"),
            PendingWrite("t", 0, "messages", "json", b""),
        ])
        assert client.checkpoints.delete_session("actor-1", "alpha", "s1") == 1
        client.checkpoints.put(scope, "c1", type_tag="msgpack", payload=b"\x00\xff")
        with pytest.raises(ownstate.PermissionDenied):
            client.checkpoints.usage()
        with pytest.raises(ownstate.PermissionDenied):
            client.checkpoints.apply_retention(ownstate.RetentionPolicy(keep_last=1))
        assert [u.run_id for u in client.checkpoints.usage(run.run_id)] == [run.run_id]
    with ownstate.connect(tenant.server.url, token=reader) as client:
        got = client.checkpoints.get(scope)
        assert got is not None
        assert got.payload == b"\x00\xff"
        assert [c.checkpoint_id for c in client.checkpoints.list(scope)] == ["c1"]
        with pytest.raises(ownstate.PermissionDenied):
            client.checkpoints.delete_run(scope)
        with pytest.raises(ownstate.PermissionDenied):
            client.checkpoints.delete_session("actor-1", "alpha", "s1")
    hidden_run = tenant.open("beta")
    with ownstate.connect(tenant.server.url, token=reader) as client:
        assert client.checkpoints.usage(hidden_run.run_id) == []
        with pytest.raises(SessionNotFound) as hidden:
            client.checkpoints.delete_session("actor-1", "beta", "s1")
        with pytest.raises(SessionNotFound) as missing:
            client.checkpoints.delete_session("actor-1", "nope-store", "s1")
        assert str(hidden.value) == str(missing.value).replace("nope-store", "beta")
    assert tenant.direct.checkpoints.get(scope) is not None


def test_checkpoint_payloads_are_bounded(small_tenant: Tenant) -> None:
    run = small_tenant.open()
    scope = run.checkpoint_scope()
    base, actor = _base(scope), {"actor_id": scope.actor_id}
    envelope = {"checkpoint_id": "c1", "type_tag": "bin"}
    with small_tenant.http() as http:
        full = http.post(f"{base}:put", params=actor, content=_upload(envelope, b"x" * SMALL))
        assert full.status_code == 200, full.text
        before = small_tenant.direct.checkpoints.list(scope)
        over = http.post(f"{base}:put", params=actor,
                         content=_upload(envelope | {"checkpoint_id": "c2"}, b"x" * (SMALL + 1)))
        problem = _problem(over, 400, "limit_exceeded")
        assert problem["details"] == {"field": "payload", "limit": SMALL, "actual": SMALL + 1}
        huge = http.post(f"{base}:put", params=actor,
                         content=_upload(envelope, b"x" * (4 * 1024 * 1024)))
        _problem(huge, 413, "limit_exceeded")
        writes = {"checkpoint_id": "c1", "writes": [
            {"task_id": "t", "index": n, "channel": "c", "type_tag": "json", "size": 600}
            for n in range(2)]}
        too_much = http.post(f"{base}:put_writes", params=actor,
                             content=_upload(writes, b"y" * 1200))
        _problem(too_much, 400, "limit_exceeded")
        for malformed in (b"", b"no line feed", b"{not json}\nxx", b"[]\nxx",
                          _upload({"checkpoint_id": "c1"}, b"no type tag"),
                          _upload(envelope | {"extra": 1}, b"x"),
                          _upload(envelope | {"metadata": [1]}, b"x"),
                          _upload(envelope | {"type_tag": "has space"}, b"x"),
                          _upload(envelope | {"checkpoint_id": "\ud800"}, b"x")):
            response = http.post(f"{base}:put", params=actor, content=malformed)
            _problem(response, 400, response.json()["code"])
        for malformed in (_upload(writes | {"writes": [writes["writes"][0]]}, b"short"),
                          _upload(writes | {"writes": [{"task_id": "t", "index": True,
                                                        "channel": "c", "type_tag": "j",
                                                        "size": 1}]}, b"x"),
                          _upload(writes | {"writes": [{"task_id": "t", "index": 0,
                                                        "channel": "c", "type_tag": "j",
                                                        "size": -1}]}, b"")):
            response = http.post(f"{base}:put_writes", params=actor, content=malformed)
            _problem(response, 400, response.json()["code"])
        for params in ({"metadata": "[1]"}, {"metadata": "{"}, {"metadata": '{"k": NaN}'},
                       {"page_size": 0}, {"page_bytes": 0}, {"page_token": "x"},
                       {"before": ""}):
            response = http.get(base, params=actor | params)
            assert response.status_code == 400, (params, response.text)
        for policy in ({"keep_last": 0}, {"max_age_seconds": 1e300}, {"keep_last": "1"},
                       {"drop_when_run_ends": 1}, {"extra": True}):
            response = http.post(f"{API}/checkpoints:apply_retention", json=policy)
            assert response.status_code == 400, (policy, response.text)
    assert small_tenant.direct.checkpoints.list(scope) == before


def test_checkpoint_uploads_are_not_held_to_the_json_body_limit() -> None:
    live = LiveServer(f"memory://upload-{uuid.uuid4().hex}", max_body_bytes=64 * 1024,
                      limits=Limits(max_checkpoint_bytes=1024 * 1024, max_item_bytes=16 * 1024,
                                    max_batch_bytes=32 * 1024))
    try:
        with contextlib.closing(_tenant(live)) as made:
            tenant = next(made)
            scope = tenant.open().checkpoint_scope()
            payload = bytes(range(256)) * 2048  # 512 KiB
            with ownstate.connect(live.url, token=tenant.admin) as client:
                client.checkpoints.put(scope, "big", type_tag="bin", payload=payload)
                got = client.checkpoints.get(scope, "big")
                assert got is not None
                assert got.payload == payload
    finally:
        live.stop()
