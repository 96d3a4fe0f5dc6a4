"""A Redis that is still loading its data after a restart: its ``LOADING`` refusals.

A ``redis-server`` of this module's own, on a free loopback port, is given a data set,
stopped, and started again with Redis's ``key-load-delay`` so that it stays in its
loading phase (answering ``LOADING`` to every data command) until the test lets it finish.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ENABLED, REQUIRED, wait_for

import ownstate
from ownstate.errors import BackendUnavailable

try:
    import redis
except ImportError:  # only without the 'redis' extra
    if "redis" in REQUIRED:
        raise
    pytest.skip("redis-py (the 'redis' extra) is not installed", allow_module_level=True)

START_TIMEOUT = 60.0
#: Keys the restarted server loads, each over loading-process-events-interval-bytes so
#: that it answers clients between any two keys, and how long it sleeps on each (us):
#: long enough that the loading outlasts the test until the test ends it.
FILLER_KEYS = 500
KEY_LOAD_DELAY_US = 100_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _loading(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=5) as probe:
        return bool(probe.info("persistence")["loading"])


class _Server:
    """One redis-server process on ``port`` with its data in ``home``."""

    def __init__(self, binary: str, home: Path) -> None:
        self.port = _free_port()
        self._args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--daemonize", "no", "--dir", str(home)]
        self._log = home / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str) -> None:
        with self._log.open("ab") as log:
            self.process = subprocess.Popen([*self._args, *extra], stdout=log,
                                            stderr=subprocess.STDOUT)
        wait_for("redis-server to accept connections", self._answers,
                 time.monotonic() + START_TIMEOUT, (redis.ConnectionError,))

    def _answers(self) -> bool:
        with redis.Redis(port=self.port, socket_timeout=5) as probe:
            try:
                return bool(probe.ping())
            except redis.BusyLoadingError:
                return True

    def stop_saving(self) -> None:
        assert self.process is not None
        with redis.Redis(port=self.port) as admin:
            admin.shutdown(save=True)  # redis-py takes the closed connection as the reply
        self.process.wait(timeout=START_TIMEOUT)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_Server]:
    if "redis" not in ENABLED:
        pytest.skip("the redis backend is not enabled (OWNSTATE_TEST_BACKENDS)")
    binary = shutil.which("redis-server")
    if binary is None:
        if "redis" in REQUIRED:
            pytest.fail("redis-server is needed, and OWNSTATE_REQUIRE_BACKENDS requires redis")
        pytest.skip("redis-server is not on PATH")
    made = _Server(binary, tmp_path)
    made.start()
    try:
        yield made
    finally:
        made.kill()


def test_a_write_refused_while_redis_loads_says_nothing_was_applied(server: _Server) -> None:
    url = f"redis://127.0.0.1:{server.port}/0?prefix=loading"
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="a", session_id="s")
        session.append_items([{"n": 1}])
        with redis.Redis(port=server.port) as admin:
            filler = admin.pipeline(transaction=False)
            for index in range(FILLER_KEYS):
                filler.set(f"filler:{index}", os.urandom(2048))
            filler.execute()
        server.stop_saving()
        server.start("--key-load-delay", str(KEY_LOAD_DELAY_US),
                     "--loading-process-events-interval-bytes", "1024")
        assert _loading(server.port)

        # The client's connection died with the old process. A read is retried once on a
        # new connection, which meets a server refusing every data command with LOADING.
        with pytest.raises(BackendUnavailable) as unread:
            list(session.list_items())
        assert isinstance(unread.value.__cause__, redis.BusyLoadingError)
        assert "nothing was applied" in unread.value.message
        # A write on that live connection is refused the same way: not run, so it is not
        # a write that may or may not have happened.
        with pytest.raises(BackendUnavailable) as refused:
            session.append_items([{"n": 2}])
        assert isinstance(refused.value.__cause__, redis.BusyLoadingError)
        assert "nothing was applied" in refused.value.message
        assert "may or may not" not in refused.value.message
        assert _loading(server.port), "the refusals above were made while Redis loaded"

        with redis.Redis(port=server.port) as admin:
            admin.config_set("key-load-delay", 0)
        wait_for("Redis to finish loading", lambda: not _loading(server.port),
                 time.monotonic() + START_TIMEOUT)
        # The refused write was not applied, so retrying it is safe: it lands once.
        session.append_items([{"n": 2}])
        assert [i.data for i in session.list_items(order_by="create_time asc")] == [
            {"n": 1}, {"n": 2}]
