"""One HTTP connection pool to an ownstate server, and the call every port makes through it.

A call to a plain ``http://`` server goes over the keep-alive connections of
``_connections`` when this transport opened its own client and no proxy is configured for
the host: on asyncio streams, or, for a sync client that runs inline (``inline=True``), on
blocking sockets that never wait on an event loop. Everything else (TLS, proxies, a
caller's own client) goes through httpx. Either way a call sends the same request and
reads the same answer the same way.

It may touch httpx and its connection pool (``_connections``, on h11), both imported on
first use through ``ownstate._extras``, the wire format (``ownstate._wire``), the inline
flag (``ownstate._inline``) and errors; it is the only module of this backend that
touches httpx.
"""

from __future__ import annotations

import asyncio
import json as _json
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from ... import _wire
from ..._extras import requires
from ..._inline import relayed
from ...errors import BackendUnavailable, InvalidInput, OwnstateError

if TYPE_CHECKING:
    from ._connections import BlockingPool, ConnectionPool

__all__ = ["Transport"]

Params = Mapping[str, str | int | float | bool | None]

#: Characters a path keeps as they are (httpx's choice): the ports quote ids themselves.
_PATH_SAFE = "/%!$&'()*+,;=:@~"
_KEEPALIVE = 32


class Transport:
    """Sends requests with the bearer token and turns problem responses into errors.

    Give it a ready ``httpx.AsyncClient`` (``client=``; used and never closed) or let it
    open one.
    """

    def __init__(self, base_url: str, token: str | None, *, timeout: float = 30.0,
                 client: Any = None, inline: bool = False) -> None:
        with requires("http", "the remote client (http:// URLs)"):
            import httpx

            from . import _connections
        self._httpx = httpx
        self._connections = _connections
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._owns = client is None
        self._timeout = timeout
        self._pool: ConnectionPool | None = None
        self._blocking: BlockingPool | None = None
        self._prefix, self._headers = "", headers
        direct = self._direct(base_url, headers) if self._owns else None
        if direct is not None:
            host, port, host_header, self._prefix = direct
            if inline:
                self._blocking = _connections.BlockingPool(
                    host, port, host_header=host_header, max_keepalive=_KEEPALIVE)
            else:
                self._pool = _connections.ConnectionPool(
                    host, port, host_header=host_header, max_keepalive=_KEEPALIVE)
        self.client: Any = client
        if client is None and direct is None:
            self.client = httpx.AsyncClient(
                base_url=base_url, headers=headers, timeout=timeout,
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))
        if client is not None and token:
            self.client.headers["authorization"] = f"Bearer {token}"

    @property
    def inline(self) -> bool:
        """Whether every call blocks the calling thread instead of waiting on an event
        loop (``inline=True`` and a server this transport reaches over its own
        connections)."""
        return self._blocking is not None

    @staticmethod
    def _direct(base_url: str, headers: dict[str, str]) -> tuple[str, int, str, str] | None:
        """Where the connections for calls to ``base_url`` go when it needs nothing httpx
        adds (see the module docstring): host, port, ``host`` header and the path prefix
        every call carries; None when it might."""
        parts = urlsplit(base_url)
        host = parts.hostname
        if parts.scheme != "http" or not host or not all(
                v.isascii() and v.isprintable() for v in headers.values()):
            return None
        proxies = urllib.request.getproxies()
        if ("http" in proxies or "all" in proxies) and not urllib.request.proxy_bypass(host):
            return None
        port = parts.port or 80
        shown = f"[{host}]" if ":" in host else host
        return (host, port, shown if port == 80 else f"{shown}:{port}",
                quote(parts.path.rstrip("/"), safe=_PATH_SAFE))

    async def call(self, method: str, path: str, *, params: Params | None = None,
                   json: Any = None, content: bytes | None = None,
                   headers: Mapping[str, str] | None = None,
                   timeout: float | None = None) -> Any:
        """The decoded JSON body of a 2xx answer (None when empty).

        Raises the error a problem answer names, or
        :class:`~ownstate.errors.BackendUnavailable` when the server cannot be reached.
        """
        if self._pool is None and self._blocking is None:
            response = await self.raw(method, path, params=params, json=json,
                                      content=content, headers=headers, timeout=timeout)
            return _parse(response.content) if response.content else None
        answer = await self._direct_call(method, path, params, json, content, headers, timeout)
        return _parse(answer) if answer else None

    async def content(self, method: str, path: str) -> bytes:
        """The body of a 2xx answer as it is (an asset's bytes); raises as :meth:`call`."""
        if self._pool is None and self._blocking is None:
            return bytes((await self.raw(method, path)).content)
        return await self._direct_call(method, path, None, None, None, None, None)

    async def _direct_call(self, method: str, path: str, params: Params | None, body: Any,
                           content: bytes | None, headers: Mapping[str, str] | None,
                           timeout: float | None) -> bytes:
        """The body of a 2xx answer, over this transport's own connections (blocking the
        thread when it runs inline)."""
        sent = dict(self._headers)
        if body is not None:
            try:  # exactly as httpx encodes a json= body
                content = _json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                                      allow_nan=False).encode("utf-8")
            except UnicodeError as exc:
                raise _not_unicode() from exc
            sent["content-type"] = "application/json"
        if headers:
            sent.update(headers)
        target = self._prefix + quote(path, safe=_PATH_SAFE)
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        if query:
            target += "?" + urlencode(query, quote_via=quote)
        wait = self._timeout if timeout is None else timeout
        try:
            if self._blocking is not None:
                if not relayed():
                    answer = self._blocking.request(method, target, sent, content, wait)
                else:  # relayed on an event loop (see ownstate._inline): keep it running
                    answer = await asyncio.to_thread(self._blocking.request, method, target,
                                                     sent, content, wait)
            else:
                assert self._pool is not None
                answer = await self._pool.request(method, target, sent, content, wait)
        except self._connections.ConnectionFailed as exc:
            raise BackendUnavailable(f"the ownstate server is unreachable: {exc}") from exc
        if 200 <= answer.status < 300:
            return answer.content
        raise _refused(answer.status, answer.content)

    async def raw(self, method: str, path: str, *, params: Params | None = None,
                  json: Any = None, content: bytes | None = None,
                  headers: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> Any:
        """The ``httpx.Response`` of a 2xx answer; raises as :meth:`call`. ``timeout``
        replaces the client's for this request (a long poll's)."""
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = await self.client.request(method, path, params=query, json=json,
                                                 content=content, headers=headers, **extra)
        except UnicodeError as exc:
            raise _not_unicode() from exc
        except self._httpx.HTTPError as exc:
            raise BackendUnavailable(f"the ownstate server is unreachable: {exc}") from exc
        if response.is_success:
            return response
        raise _refused(response.status_code, response.content)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
        if self._blocking is not None:
            self._blocking.close()
        if self._owns and self.client is not None:
            await self.client.aclose()


def _refused(status: int, body: bytes) -> OwnstateError:
    """The error a non-2xx answer names (its problem+json body, if it is JSON)."""
    try:
        problem = _json.loads(body)
    except ValueError:
        problem = None
    return _wire.error_from_problem(status, problem)


def _not_unicode() -> InvalidInput:
    return InvalidInput("text must be valid Unicode: lone surrogates cannot be sent",
                        field="request")


def _parse(body: bytes) -> Any:
    # The json module, not a faster parser: stored data must come back exactly, and the
    # fast ones turn integers beyond 64 bits into floats.
    return _json.loads(body)


def _query_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
