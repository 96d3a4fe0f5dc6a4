"""Signing in with an API key, and out: the console's session cookie.

It may touch the server's key check and the console's sign-in table (``_web``).
"""

from __future__ import annotations

import hmac
import secrets

from fastapi import Request
from fastapi.responses import Response

from ...errors import Unauthenticated
from ..auth import KeyCheck
from ._web import (
    CONSOLE,
    CSRF_FIELD,
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    ConsoleCaller,
    console_router,
    redirect,
    render,
    sign_ins,
)

__all__ = ["router"]

router = console_router()


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


@router.get("")
async def home() -> Response:
    return redirect(f"{CONSOLE}/inbox")


@router.get("/sign-in")
async def sign_in_page(request: Request) -> Response:
    """The sign-in form, with a CSRF token bound to a short-lived cookie."""
    token = secrets.token_urlsafe(32)
    response = render(request, "sign_in.html", None, signin_csrf=token)
    response.set_cookie(SIGN_IN_COOKIE, token, max_age=900, path=CONSOLE, httponly=True,
                        samesite="strict", secure=_secure(request))
    return response


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    """Trade an API key for a console session; the key must be one the API accepts."""
    form = await request.form()
    given, key = form.get(CSRF_FIELD), form.get("api_key")
    expected = request.cookies.get(SIGN_IN_COOKIE)
    if not (isinstance(given, str) and expected and hmac.compare_digest(given, expected)):
        return render(request, "sign_in.html", None, status_code=403,
                      signin_csrf=expected or "",
                      failure="The form had expired. Sign in again.")
    check: KeyCheck = request.app.state.keys
    try:
        if not isinstance(key, str):
            raise Unauthenticated("no key")
        await check.caller(f"Bearer {key.strip()}")
    except Unauthenticated:
        return render(request, "sign_in.html", None, status_code=401, signin_csrf=expected,
                      failure="That key is not one this server accepts.")
    sid, _ = sign_ins(request).open(key.strip())
    response = redirect(f"{CONSOLE}/inbox")
    response.set_cookie(SESSION_COOKIE, sid, path=CONSOLE, httponly=True, samesite="strict",
                        secure=_secure(request))
    response.delete_cookie(SIGN_IN_COOKIE, path=CONSOLE)
    return response


@router.post("/sign-out")
async def sign_out(request: Request, signed: ConsoleCaller) -> Response:
    sign_ins(request).close(signed.sid)
    response = redirect(f"{CONSOLE}/sign-in")
    response.delete_cookie(SESSION_COOKIE, path=CONSOLE)
    return response
