"""How ``ownstate serve`` writes a response to the socket: the head together with the body
when the app sends both in one step of the event loop (one write, one segment), and the
head alone, without waiting, when the body comes later (a stream's first event)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.server import ServerState

from ownstate.server.serving import uvicorn_config


class Transport(asyncio.Transport):
    """Records every write the server makes, as the socket would receive them."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _protocol(app: Any) -> tuple[Any, Transport]:
    config = uvicorn_config(app, host="127.0.0.1", port=8000, log_config=None,
                            lifespan="off")
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(),
                                          app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def _answered(transport: Transport, pieces: int) -> None:
    for _ in range(1000):
        if len(transport.writes) >= pieces:
            return
        await asyncio.sleep(0.001)


async def _json_answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", b"11")]})
    await send({"type": "http.response.body", "body": b'{"ok":true}'})


def test_a_head_and_the_body_sent_together_are_one_write() -> None:
    async def run() -> Transport:
        protocol, transport = _protocol(_json_answer)
        request = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n"
        protocol.data_received(request)
        await _answered(transport, 1)
        protocol.data_received(request)  # the next request on the kept-alive connection
        await _answered(transport, 2)
        await asyncio.sleep(0.01)
        protocol.connection_lost(None)
        return transport

    transport = asyncio.run(run())
    assert len(transport.writes) == 2, transport.writes
    for written in transport.writes:
        assert written.startswith(b"HTTP/1.1 200 OK\r\n")
        assert written.endswith(b'\r\n\r\n{"ok":true}')


def test_a_head_whose_body_comes_later_is_written_at_once() -> None:
    async def run() -> tuple[list[bytes], Transport]:
        later = asyncio.Event()

        async def stream(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            await later.wait()
            await send({"type": "http.response.body", "body": b"data: 1\n\n",
                        "more_body": True})
            await send({"type": "http.response.body", "body": b""})

        protocol, transport = _protocol(stream)
        protocol.data_received(b"GET /events HTTP/1.1\r\nhost: x\r\n\r\n")
        await _answered(transport, 1)
        before = list(transport.writes)  # the body is not sent yet
        later.set()
        await _answered(transport, 3)
        protocol.connection_lost(None)
        return before, transport

    before, transport = asyncio.run(run())
    assert len(before) == 1
    assert before[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert before[0].endswith(b"\r\n\r\n")
    assert b"".join(transport.writes[1:]) == b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"


def test_a_response_that_closes_the_connection_is_written_before_the_close() -> None:
    async def run() -> Transport:
        protocol, transport = _protocol(_json_answer)
        protocol.data_received(b"GET /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        for _ in range(1000):
            if transport.closed:
                break
            await asyncio.sleep(0.001)
        protocol.connection_lost(None)
        return transport

    transport = asyncio.run(run())
    assert transport.closed
    assert len(transport.writes) == 1
    assert transport.writes[0].endswith(b'{"ok":true}')
