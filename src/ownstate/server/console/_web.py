"""What every console view is built on: the templates, sign-in sessions, CSRF tokens, the
security headers, and the signed-in caller.

Signing in trades an API key for an opaque session id in an ``HttpOnly``,
``SameSite=Strict`` cookie; the key itself stays on the server, in a table held by this
process (so a restart, or another replica, signs the browser out). Each request turns the
session back into a :class:`~ownstate.server.auth.Caller` through the server's own key
check, so a revoked key stops working in the console exactly as it does over the API, and
every view acts through that caller's client and the API's permission checks.

Every POST carries a CSRF token: the session's own (synchronizer token) once signed in,
and before that (the sign-in form) one bound to a short-lived cookie (double submit).

It may touch the server's key check, the caller and its client (for the caller's grants);
it knows no view.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from ...errors import InvalidInput, OwnstateError, PermissionDenied, Unauthenticated
from ..auth import Caller, KeyCheck
from ..permissions import MEMORY_STORE, SESSION_STORE, visible_stores
from ..routing import BoundedRoute, problem_response

__all__ = [
    "CONSOLE",
    "CSP",
    "CSRF_FIELD",
    "SESSION_COOKIE",
    "SIGN_IN_COOKIE",
    "ConsoleCaller",
    "SignInNeeded",
    "SignIns",
    "Signed",
    "check_csrf",
    "console_router",
    "error_page",
    "may",
    "memory_levels",
    "moment",
    "redirect",
    "render",
    "safe_url",
    "security_headers",
    "sign_ins",
    "signed_in",
    "store_index",
    "store_levels",
]

#: Where the console lives.
CONSOLE = "/console"
SESSION_COOKIE = "ownstate_console"
SIGN_IN_COOKIE = "ownstate_console_signin"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
#: Scripts, styles and images from this origin only: nothing inline, nothing elsewhere.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
_RANK = {"READ": 1, "WRITE": 2, "MANAGE": 3, "OWNER": 3}

_templates = Environment(
    loader=FileSystemLoader(str(resources.files("ownstate.server.console") / "templates")),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True, lstrip_blocks=True)


R = TypeVar("R", bound=Response)


def security_headers(response: R) -> R:
    """Mark a console response: a strict Content-Security-Policy, no framing, no sniffing,
    no referrer, no caching."""
    response.headers["content-security-policy"] = CSP
    response.headers["x-content-type-options"] = "nosniff"
    response.headers["x-frame-options"] = "DENY"
    response.headers["referrer-policy"] = "no-referrer"
    response.headers.setdefault("cache-control", "no-store")
    return response


def safe_url(value: object) -> str | None:
    """``value`` when it is an http(s) URL, else None: a link a page may carry."""
    if not isinstance(value, str):
        return None
    try:
        scheme = urlsplit(value.strip()).scheme.lower()
    except ValueError:
        return None
    return value.strip() if scheme in ("http", "https") else None


def _pretty(value: object) -> str:
    """JSON laid out for reading (text that holds JSON is laid out too)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _ago(moment: object) -> str:
    """How long ago ``moment`` was, in the largest unit that fits."""
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return ""
    if not isinstance(moment, datetime):
        return ""
    seconds = max(0, int((datetime.now(UTC) - moment).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _when(moment: object) -> str:
    if isinstance(moment, datetime):
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if moment is None else str(moment)


_templates.filters.update(pretty=_pretty, ago=_ago, when=_when, safe_url=safe_url)
_templates.globals.update(console=CONSOLE)


@dataclass(slots=True)
class _SignIn:
    token: str
    csrf: str
    expires: float


@dataclass
class SignIns:
    """The signed-in browsers of this process: session id to API key and CSRF token.

    Sessions last ``lifetime`` seconds from sign-in; at most ``capacity`` are held, the
    oldest dropped first.
    """

    lifetime: float = 8 * 3600
    capacity: int = 10_000
    _held: dict[str, _SignIn] = field(default_factory=dict)

    def open(self, token: str) -> tuple[str, str]:
        """A new session for ``token``: its id and its CSRF token."""
        now = time.monotonic()
        for sid in [s for s, v in self._held.items() if v.expires <= now]:
            del self._held[sid]
        while len(self._held) >= self.capacity:
            del self._held[next(iter(self._held))]
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._held[sid] = _SignIn(token, csrf, now + self.lifetime)
        return sid, csrf

    def find(self, sid: str | None) -> _SignIn | None:
        held = self._held.get(sid or "")
        if held is None or held.expires <= time.monotonic():
            return None
        return held

    def close(self, sid: str | None) -> None:
        self._held.pop(sid or "", None)


@dataclass(frozen=True, slots=True)
class Signed:
    """The signed-in caller of a console request, and its session's CSRF token."""

    caller: Caller
    csrf: str
    sid: str


class SignInNeeded(Exception):
    """No live console session: the browser is sent to the sign-in page."""


def sign_ins(request: Request) -> SignIns:
    held: SignIns = request.app.state.console_sign_ins
    return held


async def signed_in(request: Request) -> Signed:
    """The console's caller (a FastAPI dependency): the key of the browser's session,
    checked as every API request's key is. A POST must carry the session's CSRF token.

    Raises SignInNeeded (sent to the sign-in page), PermissionDenied (a POST without the
    session's CSRF token).
    """
    sid = request.cookies.get(SESSION_COOKIE)
    held = sign_ins(request).find(sid)
    if held is None or sid is None:
        raise SignInNeeded
    check: KeyCheck = request.app.state.keys
    try:
        caller = await check.caller(f"Bearer {held.token}")
    except Unauthenticated as exc:  # revoked since sign-in
        sign_ins(request).close(sid)
        raise SignInNeeded from exc
    if request.method not in ("GET", "HEAD"):
        await check_csrf(request, held.csrf)
    request.state.caller = caller
    return Signed(caller, held.csrf, sid)


async def check_csrf(request: Request, expected: str) -> None:
    """Pass when the request carries ``expected`` in the ``x-csrf-token`` header or the
    ``csrf_token`` form field. Raises :class:`~ownstate.errors.PermissionDenied` (403)."""
    given = request.headers.get(CSRF_HEADER)
    if given is None:
        form = await request.form()
        value = form.get(CSRF_FIELD)
        given = value if isinstance(value, str) else None
    if not given or not expected or not hmac.compare_digest(given, expected):
        raise PermissionDenied("this change does not carry the page's CSRF token; reload the "
                          "page and try again")


ConsoleCaller = Annotated[Signed, Depends(signed_in)]


def console_router() -> APIRouter:
    """A router for one console view: HTML pages, left out of the API's schema."""
    return APIRouter(prefix=CONSOLE, include_in_schema=False, route_class=BoundedRoute)


def render(request: Request, template: str, signed: Signed | None = None, *,
           status_code: int = 200, **context: Any) -> HTMLResponse:
    """The page (or fragment) ``template`` with ``context``, and the console's headers."""
    page = _templates.get_template(template).render(
        request=request, signed=signed, csrf=signed.csrf if signed else "",
        caller=signed.caller if signed else None, **context)
    return security_headers(HTMLResponse(page, status_code=status_code))


def redirect(path: str) -> RedirectResponse:
    response = RedirectResponse(path, status_code=303)
    security_headers(response)
    return response


def error_page(request: Request, exc: Exception) -> Response:
    """A console request's failure as a page: sign-in for a browser that is not signed in,
    else the error's status with its message (the API's problem, read by a person)."""
    if isinstance(exc, SignInNeeded):
        if request.method == "GET" and "hx-request" not in request.headers:
            return redirect(f"{CONSOLE}/sign-in")
        response = Response(status_code=401)
        response.headers["hx-redirect"] = f"{CONSOLE}/sign-in"
        return security_headers(response)
    assert isinstance(exc, OwnstateError)
    problem = json.loads(bytes(problem_response(exc).body))
    return render(request, "error.html", None, status_code=int(problem["status"]),
                  problem=problem)


def moment(text: str | None, field: str) -> datetime | None:
    """A moment typed into a form (``2026-12-01``, ``2026-12-01T18:00``; the server's
    local time unless it names an offset), or None for a blank field.

    Raises :class:`~ownstate.errors.InvalidInput` naming ``field``.
    """
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(f"{field} must be a date or time (YYYY-MM-DD[THH:MM[:SS]])",
                           field=field) from exc
    return parsed if parsed.tzinfo else parsed.astimezone()


async def store_index(request: Request, signed: Signed, kind: str,
                      template: str) -> HTMLResponse:
    """The page ``template`` naming the stores of ``kind`` the caller may read: every
    store for an admin, else those it holds a grant on."""
    caller = signed.caller
    visible = await visible_stores(caller, kind)
    if visible is not None:
        names = sorted(visible)
    elif kind == SESSION_STORE:
        names = [s.name async for s in caller.client.session_stores.list()]
    else:
        names = [m.name async for m in caller.client.memory_stores.list()]
    return render(request, template, signed, names=names)


async def store_levels(caller: Caller) -> Mapping[str, int] | None:
    """The rank of the caller's grant on each session store it may read, or None for an
    admin (who may do anything)."""
    if caller.admin:
        return None
    grants = await caller.client.api_keys.grants_of(caller.principal)
    return {g.store: _RANK.get(g.level, 0) for g in grants if g.kind == SESSION_STORE}


def may(levels: Mapping[str, int] | None, store: str, level: str) -> bool:
    """Whether ``levels`` (from :func:`store_levels` or a memory twin) allow ``level``."""
    return levels is None or levels.get(store, 0) >= _RANK[level]


async def memory_levels(caller: Caller) -> Mapping[str, int] | None:
    """As :func:`store_levels`, for memory stores."""
    if caller.admin:
        return None
    grants = await caller.client.api_keys.grants_of(caller.principal)
    return {g.store: _RANK.get(g.level, 0) for g in grants if g.kind == MEMORY_STORE}
