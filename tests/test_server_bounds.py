"""What a live server refuses before it spends anything on a request: bodies over the
bound of the route they reach (declared or chunked, authenticated or not), and JSON given
as text (a query parameter, a header, a page token) that no stored JSON may be."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import ownstate
from ownstate._tokens import encode_token
from ownstate.limits import MAX_INT64, MAX_JSON_DEPTH, Limits
from ownstate.model import CheckpointScope
from ownstate.server.routes.checkpoints import upload_bound
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

API = "/api/2.0/agents"
BOUND = 64 * 1024
ITEMS = f"{API}/session-stores/bounded/sessions/s1/items"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://bounds-{uuid.uuid4().hex}", max_body_bytes=BOUND,
                      limits=Limits(max_checkpoint_bytes=BOUND, max_asset_bytes=BOUND,
                                    max_item_bytes=16 * 1024, max_batch_bytes=32 * 1024,
                                    max_batch_items=10))
    yield live
    live.stop()


@pytest.fixture(scope="module")
def admin(server: LiveServer) -> Iterator[httpx.Client]:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    token = server.mint_key(tenant=tenant, principal="admin", admin=True)
    with ownstate.connect(server.backend_url, tenant=tenant) as direct:
        direct.session_stores.create("bounded").add(actor_id="a", session_id="s1")
    with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"},
                      timeout=30) as http:
        yield http


@pytest.fixture(scope="module")
def checkpoints(admin: httpx.Client) -> tuple[str, dict[str, str]]:
    """The checkpoints path of a run in the admin's session, with its actor parameter."""
    run = admin.post(f"{API}/session-stores/bounded/sessions/s1/runs",
                     json={"framework": "test"})
    assert run.status_code == 200, run.text
    scope = CheckpointScope("a", "bounded", "s1", run.json()["run_id"])
    return (f"{API}/session-stores/{scope.store}/sessions/{scope.session_id}/runs/"
            f"{scope.run_id}/checkpoints", {"actor_id": scope.actor_id})


def _exchange(server: LiveServer, head: str, body: bytes = b"") -> tuple[int, dict[str, Any],
                                                                         bool]:
    """Send a request head and part of its body on a fresh connection, never the rest,
    and read the answer: its status, its JSON body, and whether the server closes the
    connection after it. An answer at all proves the server did not wait for the body it
    was promised. The body is sent from another thread while the answer is read, since a
    server that stops reading may close the connection before it has all of it."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        def send() -> None:
            with contextlib.suppress(OSError):  # the server may hang up first: expected
                sock.sendall(head.encode() + body)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        received = b""
        while not _complete(received):
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
        sender.join(timeout=20)
    status_line, _, rest = received.partition(b"\r\n")
    headers, _, content = rest.partition(b"\r\n\r\n")
    closed = b"connection: close" in headers.lower()
    return int(status_line.split()[1]), json.loads(content), closed


def _complete(received: bytes) -> bool:
    """Whether ``received`` holds a whole response with a Content-Length body."""
    headers, found, content = received.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in headers.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(content) >= int(line.split(b":")[1])
    return False


def _head(method: str, path: str, *, length: int | None = None, token: str | None = None,
          chunked: bool = False) -> str:
    lines = [f"{method} {path} HTTP/1.1", "host: test", "content-type: application/json"]
    if token is not None:
        lines.append(f"authorization: Bearer {token}")
    if length is not None:
        lines.append(f"content-length: {length}")
    if chunked:
        lines.append("transfer-encoding: chunked")
    return "\r\n".join(lines) + "\r\n\r\n"


HUGE = 256 * 1024 * 1024
RUN = f"{API}/session-stores/bounded/sessions/s1/runs/r1"


@pytest.mark.parametrize(("method", "path", "bound"), [
    pytest.param("POST", f"{ITEMS}:append", BOUND, id="json-route"),
    pytest.param("POST", f"{RUN}/checkpoints:put?actor_id=a", None, id="checkpoint-upload"),
    pytest.param("POST", f"{RUN}/checkpoints:put_writes?actor_id=a", None,
                 id="checkpoint-writes"),
    pytest.param("POST", f"{API}/assets?store=bounded&session_id=s1", BOUND, id="asset"),
    # A free path segment cannot borrow the checkpoint upload's larger bound by its suffix.
    pytest.param("PUT", f"{API}/runs/x/effects/y/checkpoints:put", BOUND,
                 id="effects-path-ending-like-an-upload"),
    pytest.param("PUT", f"{API}/runs/x/effects/y/checkpoints:put_writes", BOUND,
                 id="effects-path-ending-like-writes"),
])
def test_a_declared_body_over_the_routes_bound_is_refused_before_auth_and_unread(
        server: LiveServer, method: str, path: str, bound: int | None) -> None:
    limit = bound if bound is not None else upload_bound(server.app.state.settings.limits)
    for token in (None, "osk_not_a_key"):
        status, body, closed = _exchange(server, _head(method, path, length=HUGE, token=token))
        assert (status, body["code"]) == (413, "limit_exceeded"), body
        assert body["details"] == {"field": "request_body", "limit": limit, "actual": HUGE}
        assert closed


def test_a_declared_body_within_the_bound_still_reaches_authentication(
        server: LiveServer) -> None:
    status, body, _ = _exchange(server, _head("POST", f"{ITEMS}:append", length=2), b"{}")
    assert (status, body["code"]) == (401, "unauthenticated")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@pytest.mark.parametrize("route", ["json", "checkpoint", "asset"])
def test_a_chunked_body_is_refused_once_past_the_bound_without_reading_the_rest(
        server: LiveServer, admin: httpx.Client, checkpoints: tuple[str, dict[str, str]],
        route: str) -> None:
    """No Content-Length: the server counts as it reads, and answers 413 at the first
    bytes past the bound, while the client is still sending (the body never ends)."""
    token = admin.headers["authorization"].removeprefix("Bearer ")
    limit = BOUND
    if route == "json":
        path = f"{ITEMS}:append"
    elif route == "checkpoint":
        base, actor = checkpoints
        path = f"{base}:put?actor_id={actor['actor_id']}"
        limit = upload_bound(server.app.state.settings.limits)
    else:
        path = f"{API}/assets?store=bounded&session_id=s1"
    before = admin.get(ITEMS).json()
    pieces = b"".join(_chunk(b"x" * 16384) for _ in range(limit // 16384 + 2))
    status, body, closed = _exchange(server, _head("POST", path, token=token, chunked=True),
                                     pieces)
    assert (status, body["code"]) == (413, "limit_exceeded"), body
    assert body["details"]["field"] == "request_body"
    assert body["details"]["limit"] == limit
    assert closed
    assert admin.get(ITEMS).json() == before


def test_a_chunked_json_body_within_the_bound_is_read_whole(admin: httpx.Client) -> None:
    def pieces() -> Iterator[bytes]:
        text = json.dumps({"items": [{"data": {"n": n}} for n in range(3)]}).encode()
        for start in range(0, len(text), 7):
            yield text[start:start + 7]

    appended = admin.post(f"{ITEMS}:append", content=pieces(),
                          headers={"content-type": "application/json"})
    assert appended.status_code == 200, appended.text
    assert [i["data"] for i in appended.json()["session_items"]] == [{"n": n}
                                                                       for n in range(3)]


# JSON given as text --------------------------------------------------------------------


def _nested(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


def test_json_in_the_checkpoint_metadata_filter_is_held_to_the_body_rules(
        admin: httpx.Client, checkpoints: tuple[str, dict[str, str]]) -> None:
    base, actor = checkpoints
    deep = {"k": json.loads(_nested(MAX_JSON_DEPTH - 1))}
    assert admin.get(base, params=actor | {"metadata": json.dumps(deep)}).status_code == 200
    for bad in ('{"k": ' + _nested(MAX_JSON_DEPTH) + "}",
                '{"k": ' + _nested(1000) + "}", "[" * 4000,
                '{"k": ' + str(MAX_INT64 + 1) + "}", '{"k": ' + "9" * 5000 + "}"):
        response = admin.get(base, params=actor | {"metadata": bad})
        assert _problem(response, 400, "invalid_input")["details"]["field"] == "metadata"


def test_json_in_the_asset_labels_header_is_held_to_the_body_rules(
        admin: httpx.Client) -> None:
    def put(labels: str) -> httpx.Response:
        return admin.post(f"{API}/assets", params={"store": "bounded", "session_id": "s1"},
                          content=b"bytes", headers={"content-type": "text/plain",
                                                     "x-ownstate-metadata": labels})

    for bad in ('{"k": ' + _nested(1000) + "}", "[" * 4000, '{"k": ' + str(2**64) + "}"):
        assert _problem(put(bad), 400, "invalid_input")["details"]["field"] == "metadata"
    assert put('{"k": "v"}').status_code == 200


def test_integers_beyond_64_bits_in_bodies_are_refused(admin: httpx.Client) -> None:
    before = admin.get(ITEMS).json()
    for wide in (MAX_INT64 + 1, -(2**63) - 1):
        raw = b'{"items": [{"data": {"n": ' + str(wide).encode() + b"}}]}"
        response = admin.post(f"{ITEMS}:append", content=raw,
                              headers={"content-type": "application/json"})
        _problem(response, 400, "invalid_input")
    assert admin.get(ITEMS).json() == before


def test_a_forged_page_token_outside_64_bits_is_refused(admin: httpx.Client) -> None:
    admin.post(f"{ITEMS}:append", json={"items": [{"data": {"n": n}} for n in range(3)]})
    token = admin.get(ITEMS, params={"page_size": 1}).json()["next_page_token"]
    listing = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))[4:])[0]
    for position in ([MAX_INT64 + 1], [-(2**63) - 1], [10**30],
                     json.loads(_nested(MAX_JSON_DEPTH + 1))):
        forged = encode_token(listing, position)
        response = admin.get(ITEMS, params={"page_size": 1, "page_token": forged})
        assert _problem(response, 400, "invalid_input")["details"]["field"] == "page_token"
