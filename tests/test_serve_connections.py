"""What one connection may cost a real ``ownstate serve`` process: a bounded request head,
a bounded number of header fields, and deadlines for clients that are slow to send."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from test_server_security import _free_port, _wait_ready

import ownstate

WHOAMI = "/api/2.0/agents/whoami"
#: How long a test waits for the server to act on a one-second deadline: generous, so a
#: busy machine cannot fail it; a server without the deadline never acts at all.
PATIENCE = 30


class Served:
    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token
        host, port = base.removeprefix("http://").split(":")
        self.address = (host, int(port))

    def connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=PATIENCE)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = f"sqlite:///{tmp_path_factory.mktemp('serve') / 'state.db'}"
    with ownstate.connect(url, tenant="default") as direct:
        _, token = direct.api_keys.create("admin", admin=True)
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ownstate", "--url", url, "serve", "--port", str(port),
         "--no-bootstrap", "--log-level", "warning", "--request-timeout", "1",
         "--keep-alive-timeout", "1", "--max-header-bytes", "65536", "--max-headers", "40"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, base, token)
        yield Served(base, token)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as a
    close: the server hung up on bytes it would not read)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while piece := sock.recv(65536):
            received += piece
    return received


def _status(response: bytes) -> int:
    return int(response.split(b"\r\n", 1)[0].split()[1])


def test_an_oversized_head_is_refused_and_the_connection_closed_without_buffering_it(
        served: Served) -> None:
    sent = 0
    total = 64 * 1024 * 1024

    def send(sock: socket.socket) -> None:
        nonlocal sent
        piece = b"a" * 65536
        with contextlib.suppress(OSError):  # the server hangs up long before the end
            sock.sendall(f"GET {WHOAMI} HTTP/1.1\r\nhost: test\r\n"
                         f"authorization: Bearer {served.token}\r\nx-big: ".encode())
            while sent < total:
                sock.sendall(piece)
                sent += len(piece)

    with served.connect() as sock:
        sender = threading.Thread(target=send, args=(sock,), daemon=True)
        sender.start()
        response = _read_until_closed(sock)
        sender.join(timeout=PATIENCE)
    assert _status(response) in (400, 431), response[:200]
    # The kernel's socket buffers take a few MiB before the server's answer is noticed;
    # a server that buffered the head would have taken all 64.
    assert sent < total // 2


def test_a_head_within_the_bound_is_served(served: Served) -> None:
    response = httpx.get(served.base + WHOAMI, headers={
        "authorization": f"Bearer {served.token}", "x-padding": "p" * 32000})
    assert response.status_code == 200


def test_too_many_header_fields_get_431(served: Served) -> None:
    headers = [("authorization", f"Bearer {served.token}")] + [
        (f"x-field-{n}", "v") for n in range(60)]
    response = httpx.get(served.base + WHOAMI, headers=headers)
    assert response.status_code == 431
    body = response.json()
    assert (body["code"], body["details"]["field"]) == ("limit_exceeded", "request_headers")
    assert body["details"]["limit"] == 40


@pytest.mark.parametrize("sent", [
    pytest.param(b"", id="a-connection-that-sends-nothing"),
    pytest.param(b"GET /api/2.0/agents/whoami HTTP/1.1\r\nhost: te", id="half-a-head"),
    pytest.param(b"POST /api/2.0/agents/session-stores HTTP/1.1\r\nhost: test\r\n"
                 b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"name\"",
                 id="fewer-body-bytes-than-promised"),
])
def test_a_client_slow_to_send_its_request_is_dropped_after_the_timeout(
        served: Served, sent: bytes) -> None:
    with served.connect() as sock:
        sock.sendall(sent)
        # Without a deadline the server would wait for the rest for ever, and this recv
        # would time out instead of seeing the connection closed.
        assert _read_until_closed(sock) == b""


def test_a_request_sent_in_pieces_within_the_timeout_is_served(served: Served) -> None:
    body = json.dumps({"name": "slow-but-on-time"}).encode()
    head = (f"POST /api/2.0/agents/session-stores HTTP/1.1\r\nhost: test\r\n"
            f"authorization: Bearer {served.token}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
    with served.connect() as sock:
        for piece in (head[:20], head[20:], body[:5], body[5:]):
            sock.sendall(piece)
            time.sleep(0.1)
        response = _read_until_closed(sock)
    assert _status(response) == 200, response
