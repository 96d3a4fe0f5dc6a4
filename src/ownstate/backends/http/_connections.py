"""Keep-alive HTTP/1.1 connections on asyncio streams (or blocking sockets), for the JSON
calls to a plain ``http://`` server.

A request through ``httpx`` costs the client about 0.6 ms of CPU on loopback, four times
what the server spends answering a cached ``whoami``: URL merging, header models, cookie
extraction, an auth and a redirect flow, then httpcore's pool on top of h11. The requests
this client makes itself (a method, a path already quoted, a few headers, a JSON or byte
body; a whole answer read at once) need none of that, only the HTTP/1.1 protocol, which
h11 does here as it does under httpcore: it frames each request, refuses a header it may
not send, parses the answer (``Content-Length`` or chunked bodies, 1xx answers, HTTP/1.0)
and says whether the connection may carry another request (docs/benchmarks.md,
2026-12-07).

:class:`Exchange` is that protocol without any I/O (h11 fed and drained); the pools around
it only move bytes: :class:`ConnectionPool` on asyncio streams, :class:`BlockingPool` on
blocking sockets for a sync client that runs its calls on the caller's threads.
:class:`~._transport.Transport` uses a pool only where nothing else can happen: a client
it opened itself (not one it was given), an ``http://`` URL, and no proxy configured for
the host. TLS, proxies and a caller's client stay with httpx. As with httpx's pool, an
idle connection is dropped once the server has closed it or after ``keepalive_expiry``
seconds, each read has its own timeout, and a request is never sent twice: a connection
that fails mid-request raises :class:`ConnectionFailed`, which the transport reports as
the server being unreachable.

It may touch nothing else of ownstate's: only h11, asyncio and the standard library.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import h11

__all__ = ["Answer", "BlockingPool", "ConnectionFailed", "ConnectionPool", "Exchange",
           "build_request"]

#: How much is read from the socket at a time, each read under its own timeout (as
#: httpx times out each read, not the whole answer).
_PIECE = 64 * 1024
#: Methods whose request says it has no body when it has none (as httpx does).
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class ConnectionFailed(Exception):
    """The server could not be reached, closed the connection, timed out, or answered
    with something that is not HTTP/1.1; or the request was refused unsent."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole response: its status, its headers (names lowercased) and its body."""

    status: int
    headers: dict[str, str]
    content: bytes


class Exchange:
    """The HTTP/1.1 of one connection, one request and answer at a time, without I/O: h11
    frames what is sent and parses what is received.

    :meth:`send` gives the bytes of a request from :func:`build_request` to write,
    :meth:`receive` takes the bytes read until the answer is whole, and :meth:`reusable`
    then says whether the connection may carry the next request (and readies it for
    that). Any I/O loop drives it the same way.
    """

    __slots__ = ("_content", "_h11", "_headers", "_status")

    def __init__(self) -> None:
        self._h11 = h11.Connection(h11.CLIENT)
        self._status = 0
        self._headers: dict[str, str] = {}
        self._content: list[bytes] = []

    def send(self, request: h11.Request, body: bytes | None) -> list[bytes]:
        """The bytes that send ``request`` (from :func:`build_request`) and its body, in
        pieces to write in order (one, unless a large body is not to be copied)."""
        send = self._h11.send_with_data_passthrough
        events = [request, h11.Data(data=body), h11.EndOfMessage()] if body else [
            request, h11.EndOfMessage()]
        pieces = [piece for event in events for piece in send(event) or ()]
        return pieces if body and len(body) >= _PIECE else [b"".join(pieces)]

    def receive(self, data: bytes) -> Answer | None:
        """Take ``data`` read from the connection (``b""``: it was closed); the answer once
        it is whole, else None (read more).

        Raises :class:`ConnectionFailed` for an answer that is not HTTP/1.1 h11 reads, one
        cut short, or a body in an encoding this client does not read."""
        connection = self._h11
        try:
            connection.receive_data(data)
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    return None
                if isinstance(event, h11.Data):
                    self._content.append(event.data)
                elif isinstance(event, h11.Response):
                    self._status = event.status_code
                    headers = self._headers
                    for name, value in event.headers:
                        key, text = name.decode("latin-1"), value.decode("latin-1")
                        # repeated fields are one list (RFC 9110 5.3); set-cookie is not read
                        headers[key] = f"{headers[key]}, {text}" if key in headers else text
                elif isinstance(event, h11.EndOfMessage):
                    return self._answer()
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionFailed("the server closed the connection without answering")
                # InformationalResponse (1xx): the answer follows
        except h11.RemoteProtocolError as exc:
            raise ConnectionFailed(f"RemoteProtocolError: {exc}") from exc

    def _answer(self) -> Answer:
        content = b"".join(self._content)
        headers = self._headers
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding != "identity":
            content = _decode(content, encoding)
        answer = Answer(self._status, headers, content)
        self._status, self._headers, self._content = 0, {}, []
        return answer

    def reusable(self) -> bool:
        """After a whole answer: whether the connection may carry another request (both
        sides done, nothing left unread, no ``connection: close`` nor HTTP/1.0); if so it
        is ready for the next one."""
        connection = self._h11
        if (connection.our_state is not h11.DONE or connection.their_state is not h11.DONE
                or connection.trailing_data != (b"", False)):
            return False
        connection.start_next_cycle()
        return True


def build_request(host: str, method: str, target: str, headers: Mapping[str, str],
                  body: bytes | None) -> h11.Request:
    """One request to ``host`` (``target``: the path and query, quoted) for
    :meth:`Exchange.send`, checked by h11 before any connection is used.

    Raises :class:`ConnectionFailed` for a request h11 refuses to send (a header value
    with a line break, say)."""
    fields = [("host", host), *headers.items()]
    if body is not None:
        fields.append(("content-length", str(len(body))))
    elif method in _BODY_METHODS:
        fields.append(("content-length", "0"))
    try:
        return h11.Request(method=method, target=target, headers=fields)
    except (h11.LocalProtocolError, UnicodeEncodeError) as exc:
        raise ConnectionFailed(f"a request h11 refuses to send: {exc}") from exc


class _Connection:
    __slots__ = ("exchange", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 exchange: Exchange) -> None:
        self.reader, self.writer, self.exchange = reader, writer, exchange
        self.idle_since = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection may carry another request: the server has not closed
        it (nor sent anything unasked) and it has not been idle too long."""
        return (now - self.idle_since < expiry and not self.writer.is_closing()
                and not self.reader.at_eof())

    def close(self) -> None:
        self.writer.close()


class _Kept(Protocol):
    idle_since: float

    def usable(self, now: float, expiry: float) -> bool: ...

    def close(self) -> None: ...


K = TypeVar("K", bound=_Kept)


class _Idle(Generic[K]):
    """The connections a pool keeps between requests: at most ``most``, each for at most
    ``expiry`` seconds. Threads may share it (no lock is held across I/O)."""

    def __init__(self, most: int, expiry: float) -> None:
        self._kept: list[K] = []
        self._lock = threading.Lock()
        self._most = most
        self._expiry = expiry
        self._closed = False

    def take(self) -> K | None:
        """An idle connection that may carry another request, or None; the ones found
        unusable on the way are closed."""
        now = time.monotonic()
        while True:
            with self._lock:
                connection = self._kept.pop() if self._kept else None
            if connection is None or connection.usable(now, self._expiry):
                return connection
            connection.close()

    def give_back(self, connection: K, reusable: bool) -> None:
        """Keep a connection done with its request, when ``reusable`` and there is room;
        else close it."""
        with self._lock:
            keep = reusable and not self._closed and len(self._kept) < self._most
            if keep:
                connection.idle_since = time.monotonic()
                self._kept.append(connection)
        if not keep:
            connection.close()

    def close(self) -> None:
        """Close every kept connection; those in use are closed when given back."""
        with self._lock:
            self._closed = True
            kept, self._kept = self._kept, []
        for connection in kept:
            connection.close()


def _failed(exc: BaseException) -> ConnectionFailed:
    return ConnectionFailed(f"{type(exc).__name__}: {exc}" if str(exc)
                            else type(exc).__name__)


def _unreachable(host: str, port: int, exc: BaseException) -> ConnectionFailed:
    return ConnectionFailed(f"cannot connect to {host}:{port}: {type(exc).__name__}: {exc}")


class ConnectionPool:
    """At most ``max_connections`` connections to ``host:port``, ``max_keepalive`` of them
    kept idle between requests, each for at most ``keepalive_expiry`` seconds."""

    def __init__(self, host: str, port: int, *, host_header: str, max_connections: int = 64,
                 max_keepalive: int = 32, keepalive_expiry: float = 5.0) -> None:
        self.host, self.port = host, port
        self._host = host_header
        self._idle: _Idle[_Connection] = _Idle(max_keepalive, keepalive_expiry)
        self._slots = asyncio.Semaphore(max_connections)

    async def request(self, method: str, target: str, headers: Mapping[str, str],
                      body: bytes | None, timeout: float) -> Answer:
        """Send one request (``target``: the path and query, quoted) and read its whole
        answer, each step within ``timeout`` seconds.

        Raises :class:`ConnectionFailed`, also for a request h11 refuses to send."""
        checked = build_request(self._host, method, target, headers, body)  # refused unsent
        async with self._slots:
            connection = await self._connection(timeout)
            reusable = False
            try:
                pieces = connection.exchange.send(checked, body)
                answer = await self._exchange(connection, pieces, timeout)
                reusable = connection.exchange.reusable()
            except (OSError, TimeoutError) as exc:
                raise _failed(exc) from exc
            finally:
                self._idle.give_back(connection, reusable)
            return answer

    async def _connection(self, timeout: float) -> _Connection:
        idle = self._idle.take()
        if idle is not None:
            return idle
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise _unreachable(self.host, self.port, exc) from exc
        return _Connection(reader, writer, Exchange())

    @staticmethod
    async def _exchange(connection: _Connection, pieces: list[bytes], timeout: float
                        ) -> Answer:
        reader, exchange = connection.reader, connection.exchange
        connection.writer.writelines(pieces)
        async with asyncio.timeout(timeout):
            await connection.writer.drain()
        while True:
            async with asyncio.timeout(timeout):
                received = await reader.read(_PIECE)
            answer = exchange.receive(received)
            if answer is not None:
                return answer

    async def close(self) -> None:
        """Close every idle connection; requests in flight close theirs when done."""
        self._idle.close()


class _Socket:
    __slots__ = ("exchange", "idle_since", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.exchange = sock, Exchange()
        self.idle_since = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection may carry another request: not idle too long, and
        nothing to read on it (the server has neither closed it nor sent anything
        unasked)."""
        if now - self.idle_since >= expiry:
            return False
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            self.sock.setblocking(True)
        return False  # closed (b"") or sent something unasked

    def close(self) -> None:
        self.sock.close()


class BlockingPool:
    """The connections of :class:`ConnectionPool` over blocking sockets, for a sync
    client that runs its calls on the caller's threads: the same limits, the same
    :class:`Exchange`; any of those threads may call :meth:`request` at once."""

    def __init__(self, host: str, port: int, *, host_header: str, max_connections: int = 64,
                 max_keepalive: int = 32, keepalive_expiry: float = 5.0) -> None:
        self.host, self.port = host, port
        self._host = host_header
        self._idle: _Idle[_Socket] = _Idle(max_keepalive, keepalive_expiry)
        self._slots = threading.BoundedSemaphore(max_connections)

    def request(self, method: str, target: str, headers: Mapping[str, str],
                body: bytes | None, timeout: float) -> Answer:
        """As :meth:`ConnectionPool.request`, blocking the calling thread."""
        checked = build_request(self._host, method, target, headers, body)  # refused unsent
        with self._slots:
            connection = self._connection(timeout)
            reusable = False
            try:
                sock, exchange = connection.sock, connection.exchange
                sock.settimeout(timeout)  # for each send and each read
                for piece in exchange.send(checked, body):
                    sock.sendall(piece)
                while (answer := exchange.receive(sock.recv(_PIECE))) is None:
                    pass
                reusable = exchange.reusable()
            except OSError as exc:  # TimeoutError is one
                raise _failed(exc) from exc
            finally:
                self._idle.give_back(connection, reusable)
            return answer

    def _connection(self, timeout: float) -> _Socket:
        idle = self._idle.take()
        if idle is not None:
            return idle
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as exc:
            raise _unreachable(self.host, self.port, exc) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio does
        return _Socket(sock)

    def close(self) -> None:
        """Close every idle connection; requests in flight close theirs when done."""
        self._idle.close()


def _decode(content: bytes, encoding: str) -> bytes:
    """A body the server compressed although it was not asked to (a proxy may)."""
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(content, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(content)
            except zlib.error:
                return zlib.decompress(content, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise ConnectionFailed(f"an answer that does not decode as {encoding}: {exc}") from exc
    raise ConnectionFailed(f"an answer in an encoding this client does not read: {encoding!r}")
