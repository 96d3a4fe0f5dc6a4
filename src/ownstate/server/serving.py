"""How ``ownstate serve`` runs the app under uvicorn, with bounds on headers and slow clients.

uvicorn's httptools parser buffers a request head of any size, and no parser of uvicorn's
times out a client that is slow to send its request: a connection that sends part of a
head, or fewer body bytes than its ``Content-Length`` promises, is held for as long as the
client likes. The server runs httptools (it costs a third less server CPU per request
than uvicorn's h11 parser: docs/benchmarks.md) behind two bounds of its own: at most
``max_header_bytes`` of a head are fed to the parser (a longer one gets ``400`` and the
connection is closed as soon as the bound is crossed, without buffering the rest), and one
deadline: from a request's first byte to its last (head and body), and for a new
connection to begin its first request. A client that misses it is disconnected. Between
requests uvicorn's own keep-alive timeout applies. The number of header fields is bounded
by the app (``ServerSettings.max_headers``).

uvicorn writes a response's head and its body to the socket separately: two segments on
the wire, and a client that wakes for the head only to wait again for the body. The server
writes a response's head together with the first part of its body when the app sends that
part in the same step of the event loop (as every JSON answer does), and the head alone at
the end of that step otherwise (a stream's head is never held back for its first event).

It may touch nothing else of ownstate's: only uvicorn (and its httptools protocol).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any, cast

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HttpBounds", "loopback", "uvicorn_config"]

log = logging.getLogger("ownstate.server")


@dataclass(frozen=True, slots=True)
class HttpBounds:
    """What one connection may cost the server.

    - ``max_header_bytes``: the largest request head (request line and header fields);
      room for the largest asset labels header (128 KiB) and the usual headers besides
    - ``request_timeout``: seconds from a request's first byte to its last, head and body
      (and for a new connection to begin a request); a client that misses it is dropped
    - ``keep_alive_timeout``: seconds an idle connection is kept between requests
    """

    max_header_bytes: int = 256 * 1024
    request_timeout: float = 60.0
    keep_alive_timeout: int = 5


class _JoinedHead:
    """The transport one response is written through: its first write (the head) is held
    until the next write (the first part of the body), and both go to the socket as one;
    a head with no body written in the same step of the loop goes alone at its end. Every
    later write goes straight through, so flow control is the real transport's."""

    __slots__ = ("_fresh", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held: bytes | None = None
        self._fresh = True

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif self._fresh:
            self._fresh = False
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _BoundedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on each request head and a deadline on
    receiving each request, which writes each response's head with its body
    (:class:`_JoinedHead`).

    httptools keeps a header's pieces until the header is whole, so the bound is kept
    before the parser sees the bytes: while a head is arriving, at most ``max_head_bytes``
    of it are fed, and a head not complete by then gets ``400`` and the connection is
    closed, the rest unread."""

    request_timeout: float = HttpBounds().request_timeout
    max_head_bytes: int = HttpBounds().max_header_bytes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._in_head = True
        self._head_bytes = 0
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        while data and not self.transport.is_closing():
            if not self._in_head:
                super().data_received(data)
                return
            room = self.max_head_bytes - self._head_bytes
            piece, data = data[:room], data[room:]
            self._head_bytes += len(piece)
            super().data_received(piece)
            if data and self._in_head and not self.transport.is_closing():
                log.warning("refused a request head of more than %s bytes",
                            self.max_head_bytes)
                self.send_400_response("Request head too large.")
                return

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_head = False
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before and self.cycle is not None:  # a request to answer
            self.cycle.transport = cast(asyncio.Transport,
                                        _JoinedHead(self.cycle.transport, self.loop))

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        self._in_head = True  # what comes next is the next request's head
        self._head_bytes = 0

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None and not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.request_timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.warning("dropped a connection that did not send its request within %ss",
                        self.request_timeout)
            self.transport.close()


def uvicorn_config(app: Any, *, host: str, port: int, bounds: HttpBounds | None = None,
                   **options: Any) -> uvicorn.Config:
    """The uvicorn configuration that serves ``app`` within ``bounds`` (the defaults of
    :class:`HttpBounds` when None); ``options`` are further ``uvicorn.Config`` options."""
    bounds = bounds or HttpBounds()
    protocol = type("OwnstateHTTPProtocol", (_BoundedProtocol,),
                    {"request_timeout": bounds.request_timeout,
                     "max_head_bytes": bounds.max_header_bytes})
    return uvicorn.Config(app, host=host, port=port, http=protocol,
                          timeout_keep_alive=bounds.keep_alive_timeout, **options)


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``), reachable only from this
    machine; a host name is not, since it may resolve to anything."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
