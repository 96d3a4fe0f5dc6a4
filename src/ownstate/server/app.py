"""The ASGI app: settings, the shared backend, authentication, errors as problem+json."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

from .. import _wire
from .._extras import requires
from ..backends import Backend, open_backend, resolve_url
from ..errors import InvalidInput, LimitExceeded, NotFound, OwnstateError
from ..limits import Limits
from .auth import Caller, KeyCheck
from .telemetry import Telemetry

with requires("server", "the HTTP server"):
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.routing import Match

__all__ = ["CallerDep", "ServerSettings", "create_app", "get_caller", "problem_response"]

log = logging.getLogger("ownstate.server")

#: Paths whose bodies are streamed and bounded by their own limit (assets, checkpoint
#: uploads: see routes/checkpoints.py ``upload_bound``), not by the JSON body limit.
STREAMED_PREFIXES = ("/api/2.0/agents/assets",)
STREAMED_SUFFIXES = ("/checkpoints:put", "/checkpoints:put_writes")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How a server runs.

    - ``limits``: the bounds every request is held to (docs/limits.md)
    - ``max_body_bytes``: the largest JSON request body (default: the largest batch plus
      1 MiB of envelope); asset uploads are bounded by ``limits.max_asset_bytes`` instead
    - ``key_cache_seconds``: how long a checked key is remembered (0: check every request);
      a key revoked on another replica is refused by this one within this time
    - ``migrate``: bring the schema up to date at start (else only verify it)
    - ``metrics_token``: when set, ``GET /metrics`` needs it as a bearer token (else it is
      open: serve it on an internal network only)
    - ``tracer_provider``: the OpenTelemetry tracer provider for storage spans (default:
      the global one; none configured means no spans)
    """

    limits: Limits = field(default_factory=Limits)
    max_body_bytes: int | None = None
    key_cache_seconds: float = 2.0
    migrate: bool = True
    metrics_token: str | None = None
    tracer_provider: Any = None

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


def _validation_error(exc: RequestValidationError) -> InvalidInput:
    errors = exc.errors()
    first = errors[0] if errors else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query",
                                                                            "path")]
    field = ".".join(location) or "request"
    message = str(first.get("msg", "the request is malformed"))
    return InvalidInput(f"{field}: {message}", field=field)


class BodyLimit:
    """Refuses request bodies above the limit, by Content-Length before reading and by
    counting while reading, so an oversized request costs the server no memory."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: MutableMapping[str, Any],
                       receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
                       send: Callable[[MutableMapping[str, Any]], Awaitable[None]]) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if not path or path.startswith(STREAMED_PREFIXES) or path.endswith(STREAMED_SUFFIXES):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    await self._refuse(scope, receive, send, declared)
                    return
        seen = 0

        async def counted() -> MutableMapping[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _too_large(self.limit, seen)
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, scope: MutableMapping[str, Any], receive: Any, send: Any,
                      declared: int) -> None:
        error: OwnstateError = (_too_large(self.limit, declared) if declared >= 0 else
                                InvalidInput("Content-Length is malformed",
                                             field="request_body"))
        await problem_response(error, {"connection": "close"})(scope, receive, send)


def _too_large(limit: int, actual: int) -> LimitExceeded:
    return LimitExceeded(f"the request body is {actual} bytes; the limit is {limit}",
                         field="request_body", limit=limit, actual=actual)


def _allowed_methods(app: FastAPI, request: Request) -> str:
    """Every method some route serves at this path (a 405 must list them all)."""
    methods: set[str] = set()
    scope = dict(request.scope, method="")
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


async def get_caller(request: Request) -> Caller:
    """The authenticated caller (a FastAPI dependency). Raises Unauthenticated."""
    check: KeyCheck = request.app.state.keys
    caller = await check.caller(request.headers.get("authorization"))
    request.state.caller = caller
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]


def create_app(url: str | None = None, *, backend: Backend | None = None,
               **settings: Any) -> FastAPI:
    """The ASGI app over ``backend`` (used and never closed) or the backend for ``url``
    (opened at startup, closed at shutdown); ``settings`` as in :class:`ServerSettings`.

    Raises :class:`~ownstate.errors.InvalidInput` for an unknown URL scheme or setting.
    """
    try:
        config = ServerSettings(**settings)
    except TypeError as exc:
        raise InvalidInput(str(exc), field="settings") from exc
    owned = backend is None
    store = backend if backend is not None else open_backend(resolve_url(url))
    telemetry = Telemetry(config.tracer_provider)
    served = telemetry.traced(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await store.setup(migrate=config.migrate)
        try:
            yield
        finally:
            if owned:
                await store.close()

    from . import routes

    app = FastAPI(
        title="ownstate",
        version="1",
        summary="The system of record for AI-agent state, over HTTP.",
        description=(
            "Session stores, sessions and items (in the shape of the Databricks session-"
            "store API), memory stores and facts, runs, checkpoints and assets. Every route "
            "takes an API key as a bearer token; every error is application/problem+json "
            "with a stable `code`."),
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.backend = served
    app.state.settings = config
    app.state.keys = KeyCheck(served, config.limits, config.key_cache_seconds)

    @app.exception_handler(OwnstateError)
    async def ownstate_error(request: Request, exc: OwnstateError) -> JSONResponse:
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(_validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 405:
            body = _wire.problem_for(InvalidInput(f"{request.method} is not allowed here",
                                                  field="method"))
            body.update(status=405, title="Method Not Allowed")
            return JSONResponse(body, status_code=405, media_type=_wire.PROBLEM_MEDIA_TYPE,
                                headers={"allow": _allowed_methods(app, request)})
        error: OwnstateError = (NotFound("no such route") if exc.status_code == 404 else
                                InvalidInput(str(exc.detail), field="request"))
        return problem_response(error, dict(exc.headers or {}))

    @app.exception_handler(UnicodeError)
    async def not_unicode(request: Request, exc: UnicodeError) -> JSONResponse:
        # JSON may escape lone surrogates ("\\ud800"), which no database can store as text.
        return problem_response(InvalidInput(
            "text must be valid Unicode: lone surrogates cannot be stored", field="request"))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        body = {"type": "urn:ownstate:error:internal_error", "title": "Internal Server Error",
                "status": 500, "code": "internal_error",
                "detail": "the server failed unexpectedly", "details": {}}
        return JSONResponse(body, status_code=500, media_type=_wire.PROBLEM_MEDIA_TYPE)

    for router in routes.ROUTERS:
        app.include_router(router)
    app.add_middleware(BodyLimit, limit=config.body_limit)
    telemetry.install(app, metrics_token=config.metrics_token)
    return app
