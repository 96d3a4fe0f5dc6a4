"""Security of the HTTP service as a whole: keys, revocation, replicas racing.

Per-route permission checks live with each area's tests (test_server_*.py); the sweep over
every route with other tenants' and other principals' ids is test_server_bola.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import ownstate
from ownstate.testing.server import LiveServer, problem

REQUIRED = {b.strip() for b in os.environ.get("OWNSTATE_REQUIRE_BACKENDS", "").split(",")}
POSTGRES_URL = os.environ.get("OWNSTATE_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://security-{uuid.uuid4().hex}", key_cache_seconds=0)
    yield live
    live.stop()


def _routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) of the API, path parameters filled with plausible ids."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        filled = path
        for name in ("store", "session_id", "run_id", "item_id", "fact_id", "asset_id",
                     "checkpoint_id", "tool_call_id", "key_id"):
            value = "0123456789abcdef" if name == "key_id" else f"x-{name.replace('_', '-')}"
            filled = filled.replace("{" + name + "}", value)
        assert "{" not in filled, f"a path parameter this test does not know: {path}"
        found.extend((method.upper(), filled) for method in operations)
    return found


def test_every_route_refuses_a_request_without_a_valid_key(server: LiveServer) -> None:
    token = server.mint_key(tenant="acme", principal="alice", admin=True)
    key_id = token.split("_")[1]
    revoked = server.mint_key(tenant="acme", principal="mallory", admin=True)
    with ownstate.connect(server.url, token=token) as admin:
        admin.api_keys.revoke(revoked.split("_")[1])
    wrong_secret = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    unknown = f"osk_{'f' * 16}_{token.split('_', 2)[2]}"
    headers_variants: list[dict[str, str]] = [
        {},
        {"authorization": "Basic YWxpY2U6c2VjcmV0"},
        {"authorization": "Bearer"},
        {"authorization": "Bearer not-a-key"},
        {"authorization": "bearer \tosk_"},
        {"authorization": f"Bearer osk_{key_id}"},
        {"authorization": f"Bearer {wrong_secret}"},
        {"authorization": f"Bearer {unknown}"},
        {"authorization": f"Bearer {revoked}"},
    ]
    routes = _routes(server.app)
    assert len(routes) > 30
    with httpx.Client(base_url=server.url) as http:
        bodies = set()
        for method, path in routes:
            for headers in headers_variants:
                response = http.request(method, path, headers=headers, json={})
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.headers["content-type"] == "application/problem+json"
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert response.json()["code"] == "unauthenticated"
                bodies.add((response.content, response.headers["www-authenticate"]))
        # No key, a malformed one, an unknown one, a wrong secret and a revoked key get
        # one answer, byte for byte: a refusal tells nothing about which it was.
        assert len(bodies) == 1, bodies
        # The key that made all this still works.
        ok = http.get("/api/2.0/agents/whoami", headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        assert ok.json()["key_id"] == key_id


def test_an_unknown_route_is_a_not_found_that_reads_properly(server: LiveServer) -> None:
    token = server.mint_key(tenant="acme", principal="alice", admin=True)
    with httpx.Client(base_url=server.url,
                      headers={"authorization": f"Bearer {token}"}) as http:
        for path in ("/api/2.0/agents/no-such-things", "/nowhere", "/api/2.0/agents/whoami/x"):
            body = problem(http.get(path), 404, "not_found")
            assert (body["detail"], body["details"]) == ("no such route", {}), body


def test_a_key_revoked_elsewhere_is_refused_within_the_cache_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/keys.db"
    live = LiveServer(url, key_cache_seconds=0.3)
    try:
        token = live.mint_key(tenant="acme", principal="svc")
        headers = {"authorization": f"Bearer {token}"}
        assert httpx.get(f"{live.url}/api/2.0/agents/whoami", headers=headers).status_code == 200
        # Revoked directly in the database, as `ownstate keys revoke` does.
        with ownstate.connect(url, tenant="acme") as direct:
            direct.api_keys.revoke(token.split("_")[1])
        time.sleep(0.35)
        refused = httpx.get(f"{live.url}/api/2.0/agents/whoami", headers=headers)
        assert refused.status_code == 401
    finally:
        live.stop()


def test_a_client_cannot_claim_a_tenant_its_key_does_not_belong_to(server: LiveServer) -> None:
    token = server.mint_key(tenant="acme", principal="alice", admin=True)
    with pytest.raises(ownstate.PermissionDenied):
        ownstate.connect(server.url, token=token, tenant="other")
    with pytest.raises(ownstate.Unauthenticated):
        ownstate.connect(server.url, token="osk_0123456789abcdef_" + "A" * 43)
    with ownstate.connect(server.url, token=token, tenant="acme") as client:
        assert client.tenant == "acme"


def test_keys_are_managed_by_admins_only(server: LiveServer) -> None:
    admin_token = server.mint_key(tenant="keys-t", principal="root", admin=True)
    user_token = server.mint_key(tenant="keys-t", principal="user")
    with ownstate.connect(server.url, token=user_token) as user:
        with pytest.raises(ownstate.PermissionDenied):
            user.api_keys.list()
        with pytest.raises(ownstate.PermissionDenied):
            user.api_keys.create("another", admin=True)
    with ownstate.connect(server.url, token=admin_token) as admin:
        before = admin.api_keys.list()
        made, token = admin.api_keys.create("svc-2")
        assert [k.key_id for k in admin.api_keys.list()] == [k.key_id for k in before] + [
            made.key_id]
        with ownstate.connect(server.url, token=token) as svc:
            assert svc.tenant == "keys-t"
        # Another tenant's key id is unknown here, and revoking it changes nothing.
        other = server.mint_key(tenant="keys-other", principal="x", admin=True)
        with pytest.raises(ownstate.KeyNotFound):
            admin.api_keys.revoke(other.split("_")[1])
    with ownstate.connect(server.url, token=other) as still_valid:
        assert still_valid.tenant == "keys-other"


def test_the_server_makes_key_ids_so_a_taken_one_tells_nothing(server: LiveServer) -> None:
    """A key id chosen by the client is refused alike whether it is taken (here, in another
    tenant) or not; a key registered by its secret's digest gets an id the server made."""
    import hashlib
    import secrets

    admin_token = server.mint_key(tenant="ids-t", principal="root", admin=True)
    elsewhere = server.mint_key(tenant="ids-other", principal="x").split("_")[1]
    headers = {"authorization": f"Bearer {admin_token}"}
    keys = "/api/2.0/agents/api-keys"
    secret = secrets.token_urlsafe(32)
    digest = hashlib.sha256(secret.encode()).hexdigest()
    with httpx.Client(base_url=server.url, headers=headers) as http:
        before = http.get(keys).json()
        answers = {(r.status_code, r.content) for r in (
            http.post(keys, json={"principal": "p", "key_id": key_id, "secret_sha256": digest})
            for key_id in (elsewhere, "0123456789abcdef"))}
        assert len(answers) == 1, answers
        problem(http.post(keys, json={"principal": "p", "key_id": elsewhere,
                                      "secret_sha256": digest}), 400, "invalid_input")
        assert http.get(keys).json() == before
        made = http.post(keys, json={"principal": "svc", "secret_sha256": digest})
        assert made.status_code == 200, made.text
        assert made.json()["token"] is None
        key_id = made.json()["key_id"]
        assert key_id != elsewhere
        assert len(key_id) == 16
        mine = http.get("/api/2.0/agents/whoami",
                        headers={"authorization": f"Bearer osk_{key_id}_{secret}"})
        assert (mine.status_code, mine.json()["principal"]) == (200, "svc")


def test_grants_through_the_remote_client(server: LiveServer) -> None:
    """The access conformance suite runs only where a client is the database's operator;
    through a server the creator of a store owns it, and grants it as its owner."""
    from ownstate.model import Grant

    tenant = f"grants-{uuid.uuid4().hex[:12]}"
    token = server.mint_key(tenant=tenant, principal="alice")
    bob = server.mint_key(tenant=tenant, principal="bob")
    with ownstate.connect(server.url, token=token) as alice:
        for kind, stores in (("session_store", alice.session_stores),
                             ("memory_store", alice.memory_stores)):
            store: Any = stores.create("shared")
            owned = Grant(kind, "shared", "alice", "OWNER")
            assert store.permissions() == [owned]
            assert store.grant_permission("bob", "write") == Grant(kind, "shared", "bob",
                                                                   "WRITE")
            assert stores.get("shared").permissions() == [
                owned, Grant(kind, "shared", "bob", "WRITE")]
            store.revoke_permission("bob")
            store.revoke_permission("nobody")
            assert store.permissions() == [owned]
    with ownstate.connect(server.url, token=bob) as client, \
            pytest.raises(ownstate.StoreNotFound):
        client.session_stores.get("shared")


@pytest.mark.parametrize(("collection", "field"), [("session-stores", "session_stores"),
                                                   ("memory-stores", "memory_stores")])
def test_a_principal_lists_the_stores_it_may_read_a_page_at_a_time(
        server: LiveServer, collection: str, field: str) -> None:
    tenant = f"list-{uuid.uuid4().hex[:12]}"
    admin = server.mint_key(tenant=tenant, principal="root", admin=True)
    tokens = {who: server.mint_key(tenant=tenant, principal=who) for who in ("alice", "bob")}
    path = f"/api/2.0/agents/{collection}"

    def http(token: str) -> httpx.Client:
        return httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"})

    with http(tokens["alice"]) as alice, http(tokens["bob"]) as bob, http(admin) as root:
        for name in ("a-own", "c-own", "e-own"):
            assert alice.post(path, json={"name": name}).status_code == 200
        for name in ("b-bob", "d-bob", "f-bob", "g-bob"):
            assert bob.post(path, json={"name": name}).status_code == 200
        for name, level in (("b-bob", "READ"), ("f-bob", "WRITE")):
            granted = bob.post(f"{path}/{name}/permissions:grant",
                               json={"principal": {"name": "alice"}, "permission": level})
            assert granted.status_code == 200
        assert root.post(path, json={"name": "h-admin"}).status_code == 200
        readable = ["a-own", "b-bob", "c-own", "e-own", "f-bob"]

        whole = alice.get(path)
        assert whole.status_code == 200, whole.text
        assert [s["name"] for s in whole.json()[field]] == readable
        assert whole.json()["next_page_token"] is None
        for size in (1, 2, 4, 5):
            seen, token, pages = [], None, 0
            while True:
                params: dict[str, Any] = {"page_size": size}
                if token is not None:
                    params["page_token"] = token
                page = alice.get(path, params=params)
                assert page.status_code == 200, page.text
                names = [s["name"] for s in page.json()[field]]
                assert 1 <= len(names) <= size
                seen += names
                pages += 1
                token = page.json()["next_page_token"]
                if token is None:
                    break
            assert (seen, pages) == (readable, -(-len(readable) // size))
        # Another principal's token is not alice's position; bob sees only his own.
        first = alice.get(path, params={"page_size": 2}).json()["next_page_token"]
        problem(bob.get(path, params={"page_token": first}), 400, "invalid_input")
        assert [s["name"] for s in bob.get(path).json()[field]] == [
            "b-bob", "d-bob", "f-bob", "g-bob"]
        assert [s["name"] for s in root.get(path).json()[field]] == sorted(
            [*readable, "d-bob", "g-bob", "h-admin"])
        # A revoked grant takes the store out of the listing at once.
        assert bob.post(f"{path}/b-bob/permissions:revoke",
                        json={"principal": {"name": "alice"}}).status_code == 200
        assert [s["name"] for s in alice.get(path).json()[field]] == [
            "a-own", "c-own", "e-own", "f-bob"]


# two server processes racing -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ownstate", "--url", url, "serve", "--port", str(port),
         "--no-bootstrap", "--no-migrate", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return process, f"http://127.0.0.1:{port}"


def _wait_ready(process: subprocess.Popen[bytes], base: str, token: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            response = httpx.get(f"{base}/api/2.0/agents/whoami",
                                 headers={"authorization": f"Bearer {token}"})
            if response.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise AssertionError(f"the server did not start: {stderr}")
        time.sleep(0.05)


def _database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path}/shared.db"
        return
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        if "postgres" in REQUIRED:
            pytest.fail(f"postgres is unreachable ({exc}), and OWNSTATE_REQUIRE_BACKENDS "
                        "requires it")
        pytest.skip(f"postgres is unreachable ({exc})")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgres"])
def shared_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from _database(request.param, tmp_path)


def test_two_server_processes_racing_to_resume_one_run_let_exactly_one_win(
        shared_database: str) -> None:
    with ownstate.connect(shared_database, tenant="race") as direct:
        _, token = direct.api_keys.create("workers", admin=True)
        store = direct.session_stores.create("race")
    servers = [_serve(shared_database) for _ in range(2)]
    try:
        for process, base in servers:
            _wait_ready(process, base, token)
        clients = [ownstate.connect(base, token=token) for _, base in servers]
        try:
            for attempt in range(8):
                session = clients[0].session_stores.get(store.name).add(actor_id="a")
                run = clients[0].runs.open_run(session, framework="langgraph")
                clients[0].runs.mark_awaiting(run.run_id, {"kind": "approval"})
                barrier = threading.Barrier(2)
                outcomes: list[Any] = [None, None]

                def claim(i: int, run_id: str = run.run_id,
                          barrier: threading.Barrier = barrier,
                          outcomes: list[Any] = outcomes) -> None:
                    barrier.wait()
                    try:
                        outcomes[i] = clients[i].runs.resume(run_id, owner=f"replica-{i}")
                    except ownstate.OwnstateError as exc:
                        outcomes[i] = exc

                threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                leases = [o for o in outcomes if isinstance(o, ownstate.Lease)]
                refused = [o for o in outcomes if isinstance(o, ownstate.LeaseHeld)]
                assert len(leases) == 1, (attempt, outcomes)
                assert len(refused) == 1, (attempt, outcomes)
                stored = clients[1].runs.get(run.run_id)
                assert stored.status == "running"
                assert stored.lease_owner == leases[0].owner
                assert stored.fencing_token == leases[0].fencing_token == 1
                assert refused[0].details["owner"] == leases[0].owner
                clients[0].runs.close_run(run.run_id, status="done")
        finally:
            for client in clients:
                client.close()
    finally:
        for process, _ in servers:
            process.terminate()
            process.communicate(timeout=20)


def test_every_kind_of_state_round_trips_through_a_server_on_each_database(
        shared_database: str) -> None:
    """The conformance suite's server runs on memory; here the server runs on SQLite and on
    PostgreSQL (row-level security, the key lookup past it), and the remote client
    touches every kind of state once, with another tenant's key refused alike."""
    from ownstate.model import CheckpointScope

    live = LiveServer(shared_database, key_cache_seconds=0)
    try:
        token = live.mint_key(tenant="round", principal="svc", admin=True)
        stranger = live.mint_key(tenant="elsewhere", principal="svc", admin=True)
        with ownstate.connect(live.url, token=token) as client, \
                ownstate.connect(live.url, token=stranger) as other:
            store = client.session_stores.create("round-trip")
            session = store.add(actor_id="a", session_id="s1")
            first, _ = session.append_items([{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}])
            assert [i.data["content"] for i in
                    session.list_items(order_by="create_time asc")] == ["hi", "hello"]
            fork = session.fork(up_to_item_id=first.item_id)
            assert [i.data for i in fork.list_items()] == [first.data]
            memory = client.memory_stores.create("round-memory")
            memory.remember("user:1", "tz", "UTC", source=first)
            assert memory.recall("user:1")[0].source_item_id == first.item_id
            run = client.runs.open_run(session, framework="langgraph")
            client.runs.mark_awaiting(run.run_id, {"kind": "approval"})
            assert [r.run_id for r in client.runs.outstanding()] == [run.run_id]
            lease = client.runs.resume(run.run_id, owner="w")
            scope = CheckpointScope("a", store.name, "s1", run.run_id)
            client.checkpoints.put(scope, checkpoint_id="c1", type_tag="json", payload=b"{}")
            assert client.checkpoints.get(scope).payload == b"{}"
            asset = client.assets.put(b"bytes", media_type="text/plain", session=session)
            assert client.assets.get(asset.asset_id) == b"bytes"
            client.runs.close_run(run.run_id, status="done",
                                  fencing_token=lease.fencing_token)
            with pytest.raises(ownstate.StoreNotFound):
                other.session_stores.get(store.name)
            with pytest.raises(ownstate.RunNotFound):
                other.runs.get(run.run_id)
            with pytest.raises(ownstate.AssetNotFound):
                other.assets.get(asset.asset_id)
    finally:
        live.stop()
