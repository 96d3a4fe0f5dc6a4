"""The sessions, runs and access conformance suites on a 3-master Redis Cluster, started
here (keys and grants span slots: a key's own slot and its tenant's).

The cluster runs on free loopback ports for this module only (``redis-server`` and
``redis-cli`` must be on PATH) and is torn down afterwards. It runs whenever the ``redis``
backend is enabled (see conftest.py) or ``OWNSTATE_TEST_BACKENDS`` names ``redis-cluster``;
when ``OWNSTATE_REQUIRE_BACKENDS`` names ``redis``, a cluster that cannot start fails the
tests instead of skipping them.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ENABLED, REQUIRED, wait_for

import ownstate
from ownstate.testing import Suite, Target

try:
    import redis

    from ownstate.backends.redis import RedisBackend
except ImportError:  # only without the 'redis' extra
    if "redis" in REQUIRED:
        raise
    pytest.skip("redis-py (the 'redis' extra) is not installed", allow_module_level=True)

ownstate_suite = Suite("access", "conformance", "runs")

MASTERS = 3
START_TIMEOUT = 30.0

_chosen = {b.strip() for b in os.environ.get("OWNSTATE_TEST_BACKENDS", "").split(",")}
ON = "redis" in ENABLED or "redis-cluster" in _chosen


def _refuse(reason: str) -> None:
    if "redis" in REQUIRED or "redis-cluster" in REQUIRED:
        pytest.fail(f"{reason}, and OWNSTATE_REQUIRE_BACKENDS requires redis")
    pytest.skip(reason)


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback, each with its cluster bus port (port + 10000) free too."""
    found: list[int] = []
    for port in range(21000 + os.getpid() % 4000, 29990):
        if len(found) == count:
            break
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        found.append(port)
    return found


def _cluster_ok(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=2) as node:
        info = node.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh 3-master cluster; yields its ``redis+cluster://`` URL."""
    if not ON:
        pytest.skip("the redis backend is not enabled (OWNSTATE_TEST_BACKENDS)")
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        _refuse("redis-server and redis-cli are needed to start a Redis Cluster")
    assert server is not None
    assert cli is not None
    base: Path = tmp_path_factory.mktemp("redis-cluster")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        ports = _free_ports(MASTERS)
        deadline = time.monotonic() + START_TIMEOUT
        for port in ports:
            home = base / str(port)
            home.mkdir()
            log = (home / "redis.log").open("wb")
            processes.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", str(home / "nodes.conf"), "--save", "",
                 "--appendonly", "no", "--daemonize", "no", "--dir", str(home)],
                stdout=log, stderr=subprocess.STDOUT))
            log.close()
        for port in ports:
            wait_for(f"redis-server on port {port}",
                     lambda p=port: redis.Redis(port=p, socket_timeout=1).ping(), deadline,
                     (redis.RedisError,))
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, capture_output=True, timeout=START_TIMEOUT)
        for port in ports:
            wait_for(f"cluster_state:ok on port {port}", lambda p=port: _cluster_ok(p),
                     deadline, (redis.RedisError,))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        _stop(processes)
        _refuse(f"a Redis Cluster could not be started ({type(exc).__name__}: {exc})")
    try:
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        _stop(processes)


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def target(redis_cluster: str) -> Target:
    """The cluster, under a key prefix of this test's own."""
    return Target("redis-cluster", f"{redis_cluster}?prefix=t{uuid.uuid4().hex[:12]}",
                  RedisBackend.capabilities)


def test_a_session_and_its_runs_share_one_slot(target: Target, redis_cluster: str) -> None:
    """Every key of a session tree (items, forks, runs, effects, checkpoints, assets) is in
    the slot of its tree; the store's and the tenant's keys are elsewhere."""
    prefix = target.url.rsplit("prefix=", 1)[1]
    with ownstate.connect(target.url) as client:
        store = client.session_stores.create("slots")
        session = store.add(actor_id="a", session_id="case-1")
        session.append_items([{"role": "user", "content": "hi"}], idempotency_key="k")
        child = session.fork(session_id="case-1-fork")
        child.append_items([{"role": "user", "content": "forked"}])
        run = client.runs.open_run(child, "langgraph", owner="w")
        client.runs.record_effect(run.run_id, "call", 1)
        client.checkpoints.put(run.checkpoint_scope(), "c1", type_tag="json", payload=b"{}")
        client.assets.put(b"bytes", "text/plain", session=child)
    node = redis.RedisCluster.from_url(redis_cluster.replace("redis+cluster", "redis"))
    try:
        keys = [k.decode() for k in node.scan_iter(match=f"{prefix}:*", target_nodes="all")]
        slots = {k: node.keyslot(k) for k in keys}
        tree = [k for k in keys if "{default/slots/case-1}" in k]
        assert len(tree) >= 10
        assert len({slots[k] for k in tree}) == 1
        assert {k.split("}:")[1].split(":")[0] for k in tree} >= {
            "s", "l", "o", "ix", "ik", "kids", "runs", "r", "e", "c", "a", "ar"}
        assert all("{default" in k for k in keys if not k.endswith(":layout"))
    finally:
        node.close()
