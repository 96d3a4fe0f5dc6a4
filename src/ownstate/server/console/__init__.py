"""The operator's console at ``/console``: server-rendered pages (Jinja2) with htmx, over
the same public operations and permission checks as the HTTP API.

A browser signs in with an API key; every page acts as that key, so its tenant and grants
decide what the console shows and allows, exactly as they decide what the API does. One
module per view (``inbox``, ``sessions``, ``memory``, ``runs``, ``admin``), their shared
ground in ``_web``; templates and the vendored static files (htmx, the stylesheet) ship in
the wheel, so the console needs no network beyond the server.

:func:`install` adds the console, and Swagger UI from local files at ``/docs``, to the app.

It may touch only the console's views and FastAPI (its static files, and Swagger UI from
``swagger_ui_bundle``).
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from . import admin, inbox, memory, runs, sessions, signin
from ._web import CONSOLE, SignInNeeded, SignIns, error_page

__all__ = ["error_page", "install", "is_console"]

_SWAGGER = "/docs/static"


def is_console(request: Request) -> bool:
    """Whether the request is one of the console's (its errors are pages, not JSON)."""
    path = request.url.path
    return path == CONSOLE or path.startswith(CONSOLE + "/")


def install(app: FastAPI) -> None:
    """Serve the console under ``/console`` and Swagger UI at ``/docs``, all from files
    shipped with ownstate."""
    import swagger_ui_bundle  # type: ignore[import-untyped]

    app.state.console_sign_ins = SignIns()
    for module in (signin, inbox, sessions, memory, runs, admin):
        app.include_router(module.router)
    static = resources.files("ownstate.server.console") / "static"
    app.mount(f"{CONSOLE}/static", StaticFiles(directory=str(static)), name="console-static")
    app.mount(_SWAGGER, StaticFiles(directory=str(swagger_ui_bundle.swagger_ui_path)),
              name="swagger-static")

    @app.exception_handler(SignInNeeded)
    async def sign_in_needed(request: Request, exc: SignInNeeded) -> Response:
        return error_page(request, exc)

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title="ownstate API",
            swagger_js_url=f"{_SWAGGER}/swagger-ui-bundle.js",
            swagger_css_url=f"{_SWAGGER}/swagger-ui.css",
            swagger_favicon_url=f"{_SWAGGER}/favicon-32x32.png")
