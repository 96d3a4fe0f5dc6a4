"""The ASGI app: the shared backend, its lifespan, the routers, and the error handlers that
answer every failure as problem+json.

It composes ``routing`` (settings, bounded routes, the caller) and ``routes``; nothing in
the server imports it but the package's lazy ``create_app``.

It may touch the backend it opens (``ownstate.backends``), the server's own modules
(``auth``, ``routing``, ``routes``, ``console``, ``telemetry``), the wire form of errors
(``ownstate._wire``), the error tree and ``ownstate._extras``, and FastAPI and starlette.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .. import _wire
from .._extras import requires
from ..backends import Backend, open_backend, resolve_url
from ..errors import InvalidInput, NotFound, OwnstateError
from .auth import KeyCheck
from .routing import BoundedRoute, ServerSettings, problem_response
from .telemetry import Telemetry

with requires("server", "the HTTP server"):
    from fastapi import APIRouter, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.routing import Match

    from . import console, routes

__all__ = ["ServerSettings", "create_app"]

log = logging.getLogger("ownstate.server")
#: A path parameter in a route template.
_PARAMETER = re.compile(r"\{[^}]*\}")


def _validation_error(exc: RequestValidationError) -> InvalidInput:
    errors = exc.errors()
    first = errors[0] if errors else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query",
                                                                            "path")]
    field = ".".join(location) or "request"
    message = str(first.get("msg", "the request is malformed"))
    return InvalidInput(f"{field}: {message}", field=field)


def _allowed_methods(app: FastAPI, request: Request) -> str:
    """Every method the routes of this path's template serve (a 405 must list them all).

    A path can match more than one template when a parameter would also take a literal
    suffix (``/runs/{run_id}`` matches ``/runs/r1:await``, which is
    ``/runs/{run_id}:await``'s); the path belongs to the template with the most literal
    text, as the document lists it, and only that template's methods are allowed."""
    by_template: dict[str, set[str]] = {}
    scope = dict(request.scope, method="")
    for route in app.router.routes:
        match, _ = route.matches(scope)
        template = getattr(route, "path_format", None)
        if match is not Match.NONE and template is not None:
            by_template.setdefault(template, set()).update(getattr(route, "methods", None)
                                                           or ())
    if not by_template:
        return ""
    chosen = max(by_template, key=lambda t: (len(_PARAMETER.sub("", t)), t))
    return ", ".join(sorted(by_template[chosen]))


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """Serve ``router``'s routes as the app's own.

    ``include_router`` would wrap the router in a branch that every request is matched
    against twice, once to select the branch and once inside it, through a scope of its
    own per route (a third of a request's routing cost); the routes are complete
    already (prefix, tags, responses and route class are the router's, applied as each
    was declared), and the router adds no dependencies, limits or lifespan."""
    app.router.routes.extend(router.routes)


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
        docs_url=None,  # served by the console's install, from local files
        redoc_url=None,
    )
    app.router.route_class = BoundedRoute
    app.state.backend = served
    app.state.settings = config
    app.state.keys = KeyCheck(served, config.limits, config.key_cache_seconds,
                              config.embedder)

    @app.exception_handler(OwnstateError)
    async def ownstate_error(request: Request, exc: OwnstateError) -> Response:
        if console.is_console(request):
            return console.error_page(request, exc)
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
        _add_routes(app, router)
    console.install(app)
    telemetry.install(app, metrics_token=config.metrics_token)
    return app
