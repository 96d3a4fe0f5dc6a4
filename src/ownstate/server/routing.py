"""What every route is built on: the server's settings, the route class that bounds
request bodies and headers, the caller dependency, and errors as problem+json responses.

Routes and the app import this module; it imports neither (nor any route), and reaches the
library only through the caller's client and the error tree.

It may touch the caller (:mod:`.auth`), the wire form of errors (``ownstate._wire``), the
error tree, the limits and ``ownstate._extras``, and FastAPI and starlette.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from .. import _wire
from .._extras import requires
from ..errors import InvalidInput, LimitExceeded, OwnstateError
from ..limits import Limits
from .auth import Caller, KeyCheck

with requires("server", "the HTTP server"):
    from fastapi import Depends, Request
    from fastapi.responses import JSONResponse
    from fastapi.routing import APIRoute
    from starlette.types import Receive, Send

__all__ = ["BoundedRoute", "CallerDep", "ServerSettings", "get_caller", "problem_response",
           "upload_body"]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How a server runs.

    - ``limits``: the bounds every request is held to (docs/limits.md)
    - ``max_body_bytes``: the largest JSON request body (default: the largest batch plus
      1 MiB of envelope); uploads are held to their routes' own bounds instead (assets to
      ``limits.max_asset_bytes``, checkpoints to ``routes.checkpoints.upload_bound``)
    - ``max_headers``: the most header fields a request may carry (``431`` beyond); their
      total size is bounded by the HTTP server (``serving.HttpBounds``)
    - ``key_cache_seconds``: how long a checked key is remembered (0: check every request);
      a key revoked on another replica is refused by this one within this time
    - ``migrate``: bring the schema up to date at start (else only verify it)
    - ``metrics_token``: when set, ``GET /metrics`` needs it as a bearer token (else it is
      open: serve it on an internal network only)
    - ``tracer_provider``: the OpenTelemetry tracer provider for storage spans (default:
      the global one; none configured means no spans)
    - ``embedder``: the :class:`~ownstate.embeddings.Embedder` every request's client
      embeds writes and queries with (the backend must store vectors); without one,
      semantic and hybrid searches are refused and everything is lexical
    """

    limits: Limits = field(default_factory=Limits)
    max_body_bytes: int | None = None
    max_headers: int = 100
    key_cache_seconds: float = 2.0
    migrate: bool = True
    metrics_token: str | None = None
    tracer_provider: Any = None
    embedder: Any = None

    @property
    def body_limit(self) -> int:
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return self.limits.max_batch_bytes + 1024 * 1024


def problem_response(error: OwnstateError, headers: dict[str, str] | None = None
                     ) -> JSONResponse:
    body = _wire.problem_for(error)
    status = int(body["status"])
    extra = dict(headers or {})
    if status == 401:
        extra["www-authenticate"] = 'Bearer realm="ownstate"'
    return JSONResponse(body, status_code=status, media_type=_wire.PROBLEM_MEDIA_TYPE,
                        headers=extra)


#: Routes whose bodies are raw uploads, with the bound each is held to (see
#: :func:`upload_body`); every other route's body is JSON, held to the JSON body bound.
_UPLOAD_BOUNDS: dict[Callable[..., Any], Callable[[Limits], int]] = {}

E = TypeVar("E", bound=Callable[..., Any])


def upload_body(bound: Callable[[Limits], int]) -> Callable[[E], E]:
    """Declare a route's body a raw upload held to ``bound(limits)`` bytes, instead of
    the JSON body bound (place it under the route decorator)."""
    def declare(endpoint: E) -> E:
        _UPLOAD_BOUNDS[endpoint] = bound
        return endpoint
    return declare


class BoundedRoute(APIRoute):
    """A route that holds its request body to the bound the route declares, and its
    header fields to ``max_headers``, before authentication and before a byte of the body
    is read.

    The bound is the route's own (its upload bound, else the JSON body bound), so no path
    can borrow another route's. A ``Content-Length`` above it is refused unread; a body
    without one (chunked) is counted as it arrives, and reading stops at the first byte
    past the bound. Either way the answer is ``413`` with ``connection: close``, so the
    rest of the body is never read.
    """

    async def handle(self, scope: MutableMapping[str, Any], receive: Receive,
                     send: Send) -> None:
        if scope["type"] != "http":
            await super().handle(scope, receive, send)
            return
        settings: ServerSettings = scope["app"].state.settings
        headers = scope["headers"]
        if len(headers) > settings.max_headers:
            await _refuse(scope, receive, send, LimitExceeded(
                f"the request has {len(headers)} header fields; the limit is "
                f"{settings.max_headers}", field="request_headers",
                limit=settings.max_headers, actual=len(headers)))
            return
        upload = _UPLOAD_BOUNDS.get(self.endpoint)
        bound = upload(settings.limits) if upload is not None else settings.body_limit
        for name, value in headers:
            if name == b"content-length":
                declared = int(value) if value.isdigit() else -1
                if not 0 <= declared <= bound:
                    await _refuse(scope, receive, send, _too_large(bound, declared)
                                  if declared >= 0 else InvalidInput(
                                      "Content-Length is malformed", field="request_body"))
                    return
        await _BodyCount(bound, scope, receive, send).run(super().handle)


class _BodyCount:
    """Counts a body as the app reads it; past the bound, answers 413 itself, tells the
    app the client went away, and drops whatever the app answers after that."""

    def __init__(self, bound: int, scope: MutableMapping[str, Any], receive: Receive,
                 send: Send) -> None:
        self.bound, self.scope, self._receive, self._send = bound, scope, receive, send
        self.seen = 0
        self.started = self.refused = False

    async def run(self, app: Callable[[Any, Receive, Send], Awaitable[None]]) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:
            if not self.refused:
                raise
            # The app failed over the body it was refused; the 413 has been sent.

    async def receive(self) -> MutableMapping[str, Any]:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.bound:
                if self.started:
                    raise _too_large(self.bound, self.seen)
                self.refused = True
                await _refuse(self.scope, self._receive, self._send,
                              _too_large(self.bound, self.seen))
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


async def _refuse(scope: MutableMapping[str, Any], receive: Receive, send: Send,
                  error: OwnstateError) -> None:
    await problem_response(error, {"connection": "close"})(scope, receive, send)


def _too_large(limit: int, actual: int) -> LimitExceeded:
    return LimitExceeded(f"the request body is {actual} bytes; the limit is {limit}",
                         field="request_body", limit=limit, actual=actual)


async def get_caller(request: Request) -> Caller:
    """The authenticated caller (a FastAPI dependency). Raises Unauthenticated."""
    check: KeyCheck = request.app.state.keys
    caller = await check.caller(request.headers.get("authorization"))
    request.state.caller = caller
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]
