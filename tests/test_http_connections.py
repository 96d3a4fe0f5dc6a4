"""The remote client's own keep-alive connections (``backends.http._connections``) and when
its transport uses them rather than httpx: against a scripted HTTP server, the answers a
server or a proxy may give that the ownstate server itself does not (chunked bodies,
``connection: close``, an idle connection closed, a stall)."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from ownstate.backends.http._connections import (
    BlockingPool,
    ConnectionFailed,
    ConnectionPool,
    Exchange,
    build_request,
)
from ownstate.backends.http._transport import Transport
from ownstate.errors import BackendUnavailable, NotFound

Reply = Callable[[bytes, int], bytes | None]


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """A test that runs the coroutine function ``test`` on an event loop of its own."""
    @functools.wraps(test)
    def sync() -> None:
        asyncio.run(test())
    return sync


class Scripted:
    """An HTTP server on a free port that answers each request head with ``reply(head,
    n)`` (n counts the requests of all connections; None: close without answering), and
    records the connections and request heads it saw."""

    def __init__(self, reply: Reply, *, close_after: int | None = None) -> None:
        self.reply, self.close_after = reply, close_after
        self.connections = 0
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.bodies.append(await reader.readexactly(length))
                self.heads.append(head)
                answer = self.reply(head, len(self.heads))
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def scripted(reply: Reply, **options: Any) -> AsyncIterator[tuple[Scripted, int]]:
    script = Scripted(reply, **options)
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield script, port
    finally:
        server.close()


def ok(body: dict[str, Any], *extra: str) -> bytes:
    data = json.dumps(body).encode()
    head = ["HTTP/1.1 200 OK", "content-type: application/json",
            f"content-length: {len(data)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


def pool(port: int, **options: Any) -> ConnectionPool:
    return ConnectionPool("127.0.0.1", port, host_header=f"127.0.0.1:{port}", **options)


@run
async def test_a_connection_carries_request_after_request() -> None:
    async with scripted(lambda head, n: ok({"n": n})) as (script, port):
        connections = pool(port)
        for n in (1, 2, 3):
            answer = await connections.request("GET", "/x", {}, None, 5)
            assert json.loads(answer.content) == {"n": n}
        await connections.close()
    assert script.connections == 1
    assert script.heads[0].startswith(b"GET /x HTTP/1.1\r\nhost: 127.0.0.1:")


@run
async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    # a server's keep-alive timeout: it closes each connection after one answer
    async with scripted(lambda head, n: ok({"n": n}), close_after=1) as (script, port):
        connections = pool(port)
        for n in (1, 2, 3):
            await asyncio.sleep(0.05)  # the close arrives while the connection is idle
            assert json.loads((await connections.request("POST", "/x", {}, b"{}", 5)
                               ).content) == {"n": n}
        await connections.close()
    assert script.connections == 3
    assert script.bodies == [b"{}"] * 3  # each request sent once


@run
async def test_idle_connections_expire() -> None:
    async with scripted(lambda head, n: ok({})) as (script, port):
        connections = pool(port, keepalive_expiry=0.05)
        await connections.request("GET", "/x", {}, None, 5)
        await asyncio.sleep(0.1)
        await connections.request("GET", "/x", {}, None, 5)
        await connections.close()
    assert script.connections == 2


@run
async def test_connection_close_and_http_1_0_answers_are_not_kept() -> None:
    answers = [ok({"a": 1}, "connection: close"),
               ok({"a": 2}).replace(b"HTTP/1.1", b"HTTP/1.0", 1), ok({"a": 3})]
    async with scripted(lambda head, n: answers[n - 1]) as (script, port):
        connections = pool(port)
        for n in (1, 2, 3):
            assert json.loads((await connections.request("GET", "/", {}, None, 5)
                               ).content) == {"a": n}
        await connections.close()
    assert script.connections == 3


@run
async def test_chunked_and_compressed_answers_are_read_whole() -> None:
    body = json.dumps({"text": "x" * 200_000}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 70_000]), body[i:i + 70_000])
                      for i in range(0, len(body), 70_000))
    chunked = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks
               + b"0\r\nx-trailer: 1\r\n\r\n")
    packed = gzip.compress(body)
    compressed = (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n"
                  % len(packed)) + packed
    answers = [b"HTTP/1.1 100 Continue\r\n\r\n" + chunked, compressed, ok({})]
    async with scripted(lambda head, n: answers[n - 1]) as (script, port):
        connections = pool(port)
        assert (await connections.request("GET", "/", {}, None, 5)).content == body
        assert (await connections.request("GET", "/", {}, None, 5)).content == body
        assert (await connections.request("GET", "/", {}, None, 5)).status == 200
        await connections.close()
    assert script.connections == 1


@run
async def test_a_server_that_closes_without_answering_fails_the_call_once() -> None:
    async with scripted(lambda head, n: None) as (script, port):
        connections = pool(port)
        with pytest.raises(ConnectionFailed):
            await connections.request("POST", "/x", {}, b"{}", 5)
        await connections.close()
    assert len(script.heads) == 1  # not sent again


@run
async def test_a_stalled_answer_times_out_and_its_connection_is_dropped() -> None:
    def reply(head: bytes, n: int) -> bytes | None:
        return ok({}) if n > 1 else b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{"

    async with scripted(reply) as (script, port):
        connections = pool(port)
        with pytest.raises(ConnectionFailed, match="TimeoutError"):
            await connections.request("GET", "/", {}, None, 0.2)
        assert (await connections.request("GET", "/", {}, None, 5)).status == 200
        await connections.close()
    assert script.connections == 2


@run
async def test_a_cancelled_call_does_not_leave_its_connection_behind() -> None:
    async with scripted(lambda head, n: ok({}) if n > 1 else b"") as (script, port):
        connections = pool(port)
        task = asyncio.ensure_future(connections.request("GET", "/", {}, None, 5))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await connections.request("GET", "/", {}, None, 5)).status == 200
        await connections.close()
    assert script.connections == 2


@run
async def test_a_header_that_would_end_its_line_is_refused_unsent() -> None:
    async with scripted(lambda head, n: ok({})) as (script, port):
        connections = pool(port)
        with pytest.raises(ConnectionFailed, match="refuses to send"):
            await connections.request("GET", "/", {"x-a": "1\r\nx-b: 2"}, None, 5)
        await connections.close()
    assert script.heads == []
    assert script.connections == 0  # refused before a connection was taken


@run
async def test_the_transport_sends_calls_over_its_pool_as_httpx_would() -> None:
    def reply(head: bytes, n: int) -> bytes:
        if n == 2:
            problem = json.dumps({"type": "urn:ownstate:error:not_found", "title": "Not Found",
                                  "status": 404, "code": "not_found", "detail": "no such route",
                                  "details": {}}).encode()
            return (b"HTTP/1.1 404 Not Found\r\ncontent-type: application/problem+json\r\n"
                    b"content-length: %d\r\n\r\n" % len(problem)) + problem
        return ok({"n": n})

    async with scripted(reply) as (script, port):
        transport = Transport(f"http://127.0.0.1:{port}/base", "tok")
        assert transport._pool is not None
        assert await transport.call("POST", "/a b", params={"q": "x y", "f": False, "n": None},
                                    json={"k": "é"}) == {"n": 1}
        with pytest.raises(NotFound, match="no such route"):
            await transport.call("GET", "/missing")
        await transport.close()
    head = script.heads[0].decode()
    assert head.startswith("POST /base/a%20b?q=x%20y&f=false HTTP/1.1\r\n")
    assert "authorization: Bearer tok\r\n" in head
    assert "content-type: application/json\r\n" in head
    assert script.bodies[0] == '{"k":"é"}'.encode()


@run
async def test_an_unreachable_server_is_backend_unavailable() -> None:
    async with scripted(lambda head, n: ok({})) as (_, port):
        pass  # closed: nothing listens on the port now
    transport = Transport(f"http://127.0.0.1:{port}", "tok", timeout=2)
    with pytest.raises(BackendUnavailable, match="unreachable"):
        await transport.call("GET", "/")
    await transport.close()


def test_proxies_https_and_a_callers_client_go_through_httpx(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    assert Transport("http://127.0.0.1:1", "tok")._pool is not None
    assert Transport("https://example.com", "tok")._pool is None
    assert Transport("http://127.0.0.1:1", "tok",
                     client=httpx.AsyncClient(base_url="http://127.0.0.1:1"))._pool is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert Transport("http://db.example:8080", "tok")._pool is None
    monkeypatch.setenv("NO_PROXY", "db.example")
    assert Transport("http://db.example:8080", "tok")._pool is not None


def test_an_exchange_reads_an_answer_however_it_arrives_and_says_when_to_reuse() -> None:
    host = "127.0.0.1:1"
    exchange = Exchange()
    sent = b"".join(exchange.send(build_request(host, "POST", "/x", {"a": "1"}, b"{}"), b"{}"))
    assert sent == b"POST /x HTTP/1.1\r\nhost: 127.0.0.1:1\r\na: 1\r\ncontent-length: 2\r\n\r\n{}"
    answer = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nx-a: 1\r\nX-A: 2\r\n"
              b"transfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    *partial, last = [exchange.receive(answer[i:i + 1]) for i in range(len(answer))]
    assert partial == [None] * len(partial)
    assert last is not None
    assert (last.status, last.content) == (200, b"{}")
    assert last.headers["x-a"] == "1, 2"
    assert exchange.reusable()

    for answer, reusable in [(ok({}), True), (ok({}, "connection: close"), False),
                             (ok({}).replace(b"HTTP/1.1", b"HTTP/1.0", 1), False),
                             (ok({}) + b"HTTP/1.1 200 OK\r\n", False)]:  # sent unasked
        exchange = Exchange()
        exchange.send(build_request(host, "GET", "/", {}, None), None)
        assert exchange.receive(answer) is not None
        assert exchange.reusable() is reusable

    for answer in [b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{",
                   b"HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 2\r\n\r\n{}"]:
        exchange = Exchange()
        exchange.send(build_request(host, "GET", "/", {}, None), None)
        with pytest.raises(ConnectionFailed):
            exchange.receive(answer) or exchange.receive(b"")  # then closed


def blocking(port: int, **options: Any) -> BlockingPool:
    return BlockingPool("127.0.0.1", port, host_header=f"127.0.0.1:{port}", **options)


@run
async def test_blocking_connections_behave_as_the_asyncio_ones() -> None:
    # the scripted server runs on this loop; the blocking calls on worker threads
    async with scripted(lambda head, n: ok({"n": n}), close_after=2) as (script, port):
        connections = blocking(port)
        for n in (1, 2, 3):
            await asyncio.sleep(0.05)  # the server's close arrives while idle (after 2)
            answer = await asyncio.to_thread(connections.request, "POST", "/x", {}, b"{}", 5)
            assert json.loads(answer.content) == {"n": n}
        connections.close()
    assert script.connections == 2
    assert script.bodies == [b"{}"] * 3  # each request sent once

    async with scripted(lambda head, n: ok({})) as (script, port):
        connections = blocking(port, keepalive_expiry=0.05)
        await asyncio.to_thread(connections.request, "GET", "/", {}, None, 5)
        await asyncio.sleep(0.1)
        await asyncio.to_thread(connections.request, "GET", "/", {}, None, 5)
        connections.close()
    assert script.connections == 2

    def reply(head: bytes, n: int) -> bytes | None:
        return ok({}) if n > 1 else b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{"

    async with scripted(reply) as (script, port):
        connections = blocking(port)
        with pytest.raises(ConnectionFailed, match=r"TimeoutError|timed out"):
            await asyncio.to_thread(connections.request, "GET", "/", {}, None, 0.2)
        answer = await asyncio.to_thread(connections.request, "GET", "/", {}, None, 5)
        assert answer.status == 200
        with pytest.raises(ConnectionFailed, match="refuses to send"):
            connections.request("GET", "/", {"x-a": "1\r\nx-b: 2"}, None, 5)
        connections.close()
    assert script.connections == 2
    assert len(script.heads) == 2


@run
async def test_threads_share_the_blocking_connections() -> None:
    async with scripted(lambda head, n: ok({"n": n})) as (script, port):
        connections = blocking(port, max_keepalive=4)
        answers = await asyncio.gather(*(asyncio.to_thread(
            connections.request, "GET", "/", {}, None, 5) for _ in range(16)))
        connections.close()
    assert sorted(json.loads(a.content)["n"] for a in answers) == list(range(1, 17))
    assert script.connections <= 16


def test_an_inline_transport_blocks_instead_of_waiting_on_a_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    assert Transport("http://127.0.0.1:1", "tok", inline=True).inline
    assert not Transport("http://127.0.0.1:1", "tok").inline
    assert not Transport("https://example.com", "tok", inline=True).inline
    assert not Transport("http://127.0.0.1:1", "tok", inline=True,
                         client=httpx.AsyncClient(base_url="http://127.0.0.1:1")).inline
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert not Transport("http://db.example:8080", "tok", inline=True).inline

    async def serve() -> None:
        async with scripted(lambda head, n: ok({"n": n})) as (script, port):
            transport = Transport(f"http://127.0.0.1:{port}", "tok", inline=True)

            def driven() -> Any:  # as the sync client's portal drives it: no loop
                coro = transport.call("GET", "/x", params={"a": 1})
                with pytest.raises(StopIteration) as done:
                    coro.send(None)
                return done.value.value

            assert await asyncio.to_thread(driven) == {"n": 1}
            await transport.close()
        assert script.heads[0].startswith(b"GET /x?a=1 HTTP/1.1\r\n")

    monkeypatch.delenv("HTTP_PROXY")
    asyncio.run(serve())


def test_a_sync_client_relays_inline_calls_off_the_callers_loop() -> None:
    import ownstate

    whoami = {"api_version": 1, "tenant": "t", "principal": "p", "admin": True}

    async def main() -> None:
        async with scripted(lambda head, n: ok(whoami)) as (_, port):
            client = await asyncio.to_thread(ownstate.connect, f"http://127.0.0.1:{port}",
                                             token="tok")
            assert client.runs_inline
            # An adapter relaying a call for async code: the call runs on this loop, and
            # the request goes to a worker thread, so the server (on this loop too) answers.
            await asyncio.wait_for(client.relay_coroutine(
                client.backend.setup(migrate=False)), 5)
            await asyncio.to_thread(client.close)

    asyncio.run(main())
