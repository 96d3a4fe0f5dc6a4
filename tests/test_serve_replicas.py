"""Several stateless ``ownstate serve`` processes on one PostgreSQL schema, serving one
tenant: whatever is written through one replica is what the others read, with no state
of their own to drift (docs/scaling.md).

Each replica keeps a replay cache of the sessions it served, the client in front of it
another; both check every read against the database, so an append, a pop or a clear
through another replica shows at once. A decision made through one replica wakes a
waiter held open on another (PostgreSQL's ``NOTIFY``), and a key revoked through one is
refused by every other (``--key-cache 0``; by default within the key cache's seconds).
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from test_server_security import _database, _free_port

import ownstate

pytestmark = pytest.mark.timeout(600)

REPLICAS = 3
#: How long a replica may take to start (generous: the machine may be busy).
START_TIMEOUT = 240.0


def _wait_ready(process: subprocess.Popen[bytes], base: str, token: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            if httpx.get(f"{base}/api/2.0/agents/whoami",
                         headers={"authorization": f"Bearer {token}"}).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            _, stderr = process.communicate(timeout=20)
            raise AssertionError(f"the server did not start: {stderr.decode()}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A schema of its own on the test server, dropped afterwards."""
    yield from _database("postgres", tmp_path_factory.mktemp("replicas"))


@pytest.fixture(scope="module")
def replicas(database: str) -> Iterator[tuple[str, list[str]]]:
    """An admin key of tenant ``acme``, and the base URLs of the replicas serving it."""
    with ownstate.connect(database, tenant="acme") as direct:  # `ownstate migrate`
        _, token = direct.api_keys.create("operator", admin=True)
    processes = []
    bases = []
    try:
        for _ in range(REPLICAS):
            port = _free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "ownstate", "--url", database, "serve", "--port",
                 str(port), "--no-bootstrap", "--no-migrate", "--key-cache", "0",
                 "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            bases.append(f"http://127.0.0.1:{port}")
        for process, base in zip(processes, bases, strict=True):
            _wait_ready(process, base, token)
        yield token, bases
    finally:
        for process in processes:
            process.terminate()
            process.communicate(timeout=20)


@pytest.fixture
def clients(replicas: tuple[str, list[str]]) -> Iterator[list[ownstate.Client]]:
    token, bases = replicas
    opened = [ownstate.connect(base, token=token) for base in bases]
    yield opened
    for client in opened:
        client.close()


def _replay(client: ownstate.Client, store: str, session_id: str) -> list[str]:
    session = client.session_stores.get(store).get(session_id)
    return [str(i.data["content"]) for i in session.list_items(order_by="create_time asc")]


def test_a_session_written_through_each_replica_reads_the_same_through_every_other(
        clients: list[ownstate.Client]) -> None:
    a, b, c = clients
    store = a.session_stores.create(f"replicas-{uuid.uuid4().hex[:8]}")
    store.add(actor_id="user:1", session_id="s1")
    written: list[str] = []
    for turn in range(6):  # each turn through the next replica, replayed through all
        writer = clients[turn % REPLICAS]
        text = f"turn {turn}"
        writer.session_stores.get(store.name).get("s1").append_items(
            [{"role": "user", "content": text}])
        written.append(text)
        for reader in clients:
            assert _replay(reader, store.name, "s1") == written
    # what leaves the end of the session through one replica is gone through the others,
    # whose replay caches (server and client) hold the longer history
    popped = b.session_stores.get(store.name).get("s1").pop_item()
    assert popped is not None
    assert popped.data["content"] == written.pop()
    assert _replay(a, store.name, "s1") == written == _replay(c, store.name, "s1")
    c.session_stores.get(store.name).get("s1").append_items(
        [{"role": "user", "content": "after the pop"}])
    assert _replay(a, store.name, "s1") == [*written, "after the pop"]
    a.session_stores.get(store.name).get("s1").clear()
    assert _replay(b, store.name, "s1") == [] == _replay(c, store.name, "s1")


def test_facts_and_runs_are_shared_by_every_replica(clients: list[ownstate.Client]) -> None:
    a, b, c = clients
    memory = a.memory_stores.create(f"replica-facts-{uuid.uuid4().hex[:8]}")
    memory.remember("user:9", "channel", "email")
    b.memory_stores.get(memory.name).remember("user:9", "channel", "sms")
    (fact,) = c.memory_stores.get(memory.name).recall("user:9")
    assert fact.value == "sms"
    assert [f.value for f in a.memory_stores.get(memory.name).history("user:9", "channel")] \
        == ["email", "sms"]

    store = a.session_stores.create(f"replica-runs-{uuid.uuid4().hex[:8]}")
    session = store.add(actor_id="user:9")
    run = a.runs.open_run(session, framework="langgraph")
    with pytest.raises(ownstate.ActiveRunExists):  # the one-active-run rule, across replicas
        b.runs.open_run(b.session_stores.get(store.name).get(session.session_id),
                        framework="langgraph")
    b.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "refund"})
    assert run.run_id in [r.run_id for r in c.runs.outstanding(stores=[store.name])]


def test_a_decision_through_one_replica_wakes_a_waiter_on_another(
        clients: list[ownstate.Client]) -> None:
    a, b, _ = clients
    store = a.session_stores.create(f"replica-wait-{uuid.uuid4().hex[:8]}")
    run = a.runs.open_run(store.add(actor_id="user:3"), framework="langgraph")
    a.runs.mark_awaiting(run.run_id, {"kind": "approval"})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(a.runs.wait_for_decision, run.run_id, timeout=60)
        b.runs.decide(run.run_id, "approve", comment="through another replica")
        woken = waiting.result(timeout=90)
    assert woken is not None
    assert woken.decision is not None
    assert woken.decision.outcome == "approve"


def test_a_key_revoked_through_one_replica_is_refused_by_the_others(
        replicas: tuple[str, list[str]], clients: list[ownstate.Client]) -> None:
    _, bases = replicas
    key, secret = clients[0].api_keys.create("short-lived")
    with ownstate.connect(bases[1], token=secret) as holder:
        assert list(holder.session_stores.list()) == []  # served: the key is live
        clients[2].api_keys.revoke(key.key_id)
        with pytest.raises(ownstate.Unauthenticated):
            list(holder.session_stores.list())
