"""One HTTP connection pool to an ownstate server, and the call every port makes through it.

It may touch httpx (imported on first use, through ``ownstate._extras``), the wire format
(``ownstate._wire``) and errors; it is the only module of this backend that touches httpx.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ... import _wire
from ..._extras import requires
from ...errors import BackendUnavailable, InvalidInput

__all__ = ["Transport"]

Params = Mapping[str, str | int | float | bool | None]


class Transport:
    """Sends requests with the bearer token and turns problem responses into errors.

    Give it a ready ``httpx.AsyncClient`` (``client=``; used and never closed) or let it
    open one.
    """

    def __init__(self, base_url: str, token: str | None, *, timeout: float = 30.0,
                 client: Any = None) -> None:
        with requires("http", "the remote client (http:// URLs)"):
            import httpx
        self._httpx = httpx
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._owns = client is None
        self.client: Any = client if client is not None else httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))
        if client is not None and token:
            self.client.headers["authorization"] = f"Bearer {token}"

    async def call(self, method: str, path: str, *, params: Params | None = None,
                   json: Any = None, content: bytes | None = None,
                   headers: Mapping[str, str] | None = None,
                   timeout: float | None = None) -> Any:
        """The decoded JSON body of a 2xx answer (None when empty).

        Raises the error a problem answer names, or
        :class:`~ownstate.errors.BackendUnavailable` when the server cannot be reached.
        """
        response = await self.raw(method, path, params=params, json=json, content=content,
                                  headers=headers, timeout=timeout)
        if not response.content:
            return None
        return _parse(response.content)

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
            raise InvalidInput("text must be valid Unicode: lone surrogates cannot be sent",
                               field="request") from exc
        except self._httpx.HTTPError as exc:
            raise BackendUnavailable(f"the ownstate server is unreachable: {exc}") from exc
        if response.is_success:
            return response
        try:
            body = response.json()
        except ValueError:
            body = None
        raise _wire.error_from_problem(response.status_code, body)

    async def close(self) -> None:
        if self._owns:
            await self.client.aclose()


def _parse(body: bytes) -> Any:
    # The json module, not a faster parser: stored data must come back exactly, and the
    # fast ones turn integers beyond 64 bits into floats.
    return json.loads(body)


def _query_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
