"""Keep-alive HTTP/1.1 connections on asyncio streams, for the JSON calls to a plain
``http://`` server.

A request through ``httpx`` costs the client about 0.6 ms of CPU on loopback, four times
what the server spends answering a cached ``whoami``: URL merging, header models, cookie
extraction, an auth and a redirect flow, then httpcore's pool and h11's pure-Python
parser. A turn of an agent is two such requests. For the requests this client makes itself
(a method, a path already quoted, a few headers, a JSON or byte body; a whole answer read at
once) a request line, the header lines and a ``Content-Length`` or chunked body are all
there is, at a twelfth of the cost (docs/benchmarks.md, 2026-12-07).

It speaks only what those calls need, and :class:`~._transport.Transport` uses it only
where that is all that can happen: a client it opened itself (not one it was given), an
``http://`` URL, and no proxy configured for the host. TLS, proxies, streaming and uploads
through a caller's client stay with httpx. As with httpx's pool, an idle connection is
dropped once the server has closed it or after ``keepalive_expiry`` seconds, and a request
is never sent twice: a connection that fails mid-request raises
:class:`ConnectionFailed`, which the transport reports as the server being unreachable.

It may touch nothing else of ownstate's: only asyncio and the standard library.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Answer", "ConnectionFailed", "ConnectionPool"]

#: A header value that could end the header line early (and so smuggle another).
_UNSAFE = frozenset("\r\n\x00")
#: Bodies above this are read a piece at a time, each piece under its own timeout (as
#: httpx times out each read, not the whole body).
_PIECE = 64 * 1024


class ConnectionFailed(Exception):
    """The server could not be reached, closed the connection, timed out, or answered
    with something that is not HTTP/1.1 this module reads."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole response: its status, its headers (names lowercased) and its body."""

    status: int
    headers: dict[str, str]
    content: bytes


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection may carry another request: the server has not closed
        it (nor sent anything unasked) and it has not been idle too long."""
        return (now - self.idle_since < expiry and not self.writer.is_closing()
                and not self.reader.at_eof())

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """At most ``max_connections`` connections to ``host:port``, ``max_keepalive`` of them
    kept idle between requests, each for at most ``keepalive_expiry`` seconds."""

    def __init__(self, host: str, port: int, *, host_header: str, max_connections: int = 64,
                 max_keepalive: int = 32, keepalive_expiry: float = 5.0) -> None:
        self.host, self.port = host, port
        self._host_line = f"host: {host_header}\r\n"
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._max_keepalive = max_keepalive
        self._expiry = keepalive_expiry
        self._closed = False

    async def request(self, method: str, target: str, headers: Mapping[str, str],
                      body: bytes | None, timeout: float) -> Answer:
        """Send one request (``target``: the path and query, quoted) and read its whole
        answer, each step within ``timeout`` seconds.

        Raises :class:`ConnectionFailed`, also for a header that holds a line break."""
        try:
            head = self._head(method, target, headers, body)
        except (ValueError, UnicodeEncodeError) as exc:
            raise ConnectionFailed(str(exc)) from exc
        async with self._slots:
            connection = await self._connection(timeout)
            reusable = False
            try:
                answer, reusable = await self._exchange(connection, head, body, timeout)
            except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    TimeoutError, ValueError, zlib.error) as exc:
                raise ConnectionFailed(f"{type(exc).__name__}: {exc}" if str(exc)
                                       else type(exc).__name__) from exc
            finally:
                if reusable and not self._closed and len(self._idle) < self._max_keepalive:
                    connection.idle_since = time.monotonic()
                    self._idle.append(connection)
                else:
                    connection.close()
            return answer

    def _head(self, method: str, target: str, headers: Mapping[str, str],
              body: bytes | None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1\r\n", self._host_line]
        for name, value in headers.items():
            if not _UNSAFE.isdisjoint(value) or not _UNSAFE.isdisjoint(name):
                raise ValueError(f"the header {name!r} holds a line break")
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"content-length: {len(body)}\r\n")
        elif method in ("POST", "PUT", "PATCH"):
            lines.append("content-length: 0\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("ascii")

    async def _connection(self, timeout: float) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now, self._expiry):
                return connection
            connection.close()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise ConnectionFailed(f"cannot connect to {self.host}:{self.port}: "
                                   f"{type(exc).__name__}: {exc}") from exc
        return _Connection(reader, writer)

    async def _exchange(self, connection: _Connection, head: bytes, body: bytes | None,
                        timeout: float) -> tuple[Answer, bool]:
        """The answer, and whether the connection may carry another request."""
        writer, reader = connection.writer, connection.reader
        writer.write(head + body if body is not None and len(body) < _PIECE else head)
        if body is not None and len(body) >= _PIECE:
            writer.write(body)
        async with asyncio.timeout(timeout):
            await writer.drain()
            while True:
                status, version, headers = _parse_head(await reader.readuntil(b"\r\n\r\n"))
                if not 100 <= status < 200:
                    break
        content = await _read_body(reader, headers, status, method_head=head.startswith(
            b"HEAD "), timeout=timeout)
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding != "identity":
            content = _decode(content, encoding)
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        return Answer(status, headers, content), keep

    async def close(self) -> None:
        """Close every idle connection; requests in flight close theirs when done."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _parse_head(raw: bytes) -> tuple[int, str, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"a malformed header line: {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        # repeated fields are one list (RFC 9110 5.3); set-cookie is never read here
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), version, headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], status: int, *,
                     method_head: bool, timeout: float) -> bytes:
    if method_head or status in (204, 304):
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pieces: list[bytes] = []
        while True:
            async with asyncio.timeout(timeout):
                size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                async with asyncio.timeout(timeout):
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass  # trailer fields, unread
                return b"".join(pieces)
            pieces.append(await _read_exactly(reader, size, timeout))
            async with asyncio.timeout(timeout):
                if await reader.readexactly(2) != b"\r\n":
                    raise ValueError("a malformed chunk")
    length = headers.get("content-length")
    if length is None:
        raise ValueError("an answer with neither Content-Length nor chunked encoding")
    if not length.isdigit():
        raise ValueError(f"a malformed Content-Length: {length[:40]!r}")
    return await _read_exactly(reader, int(length), timeout)


async def _read_exactly(reader: asyncio.StreamReader, size: int, timeout: float) -> bytes:
    if size <= _PIECE:
        async with asyncio.timeout(timeout):
            return await reader.readexactly(size)
    pieces: list[bytes] = []
    while size:
        async with asyncio.timeout(timeout):
            piece = await reader.readexactly(min(size, _PIECE))
        pieces.append(piece)
        size -= len(piece)
    return b"".join(pieces)


def _decode(content: bytes, encoding: str) -> bytes:
    """A body the server compressed although it was not asked to (a proxy may)."""
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(content, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        try:
            return zlib.decompress(content)
        except zlib.error:
            return zlib.decompress(content, -zlib.MAX_WBITS)
    raise ValueError(f"an answer in an encoding this client does not read: {encoding!r}")
