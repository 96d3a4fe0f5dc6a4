"""How ``ownstate serve`` runs the app under uvicorn, with bounds on headers and slow clients.

uvicorn's default HTTP/1.1 parser (httptools) buffers a request head of any size, and no
parser of uvicorn's times out a client that is slow to send its request: a connection
that sends part of a head, or fewer body bytes than its ``Content-Length`` promises, is
held for as long as the client likes. So the server runs uvicorn's h11 parser, whose
``h11_max_incomplete_event_size`` bounds the head (a larger one gets ``400`` and the
connection is closed as soon as the bound is crossed, without buffering the rest), and
adds one deadline: from a request's first byte to its last (head and body), and for a new
connection to begin its first request. A client that misses it is disconnected. Between
requests uvicorn's own keep-alive timeout applies. The number of header fields is bounded
by the app (``ServerSettings.max_headers``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

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


class _DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request."""

    request_timeout: float = HttpBounds().request_timeout

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Keep the deadline while a request is arriving (a head begun, a body under way),
        drop it once the request is whole or the connection is between requests."""
        state = self.conn.their_state
        arriving = state is h11.SEND_BODY or (state is h11.IDLE
                                              and bool(self.conn.trailing_data[0]))
        if arriving:
            self._arm()
        else:
            self._disarm()

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
    protocol = type("OwnstateHTTPProtocol", (_DeadlineProtocol,),
                    {"request_timeout": bounds.request_timeout})
    return uvicorn.Config(app, host=host, port=port, http=protocol,
                          h11_max_incomplete_event_size=bounds.max_header_bytes,
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
