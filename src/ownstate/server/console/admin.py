"""Admin: the tenant's API keys (a new key's token is shown once; revoke) and the grants
on its session and memory stores. Admin keys only, as the API's key routes are; grants
go through the stores' own ``grant_permission`` and ``revoke_permission``. It may touch the
caller's client (``ownstate.api``), the console's base (:mod:`._web`), the routes' shared
checks (``ownstate.server.routes._common``) and the model, and FastAPI.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Form, Request
from fastapi.responses import Response

from ...api import AsyncSessionStore
from ...api.memory import AsyncMemoryStore
from ...model import Grant
from ..auth import Caller
from ..routes._common import require_admin
from ._web import CONSOLE, ConsoleCaller, console_router, redirect, render

__all__ = ["router"]

router = console_router()

_Kind = Literal["session_store", "memory_store"]


async def _grants(caller: Caller) -> list[tuple[str, str, list[Grant]]]:
    client = caller.client
    out: list[tuple[str, str, list[Grant]]] = []
    async for store in client.session_stores.list():
        out.append(("session_store", store.name, await store.permissions()))
    async for memory in client.memory_stores.list():
        out.append(("memory_store", memory.name, await memory.permissions()))
    return out


async def _page(request: Request, signed: ConsoleCaller, **context: Any) -> Response:
    caller = signed.caller
    require_admin(caller, "manage API keys")
    keys = sorted(await caller.client.api_keys.list(),
                  key=lambda k: (k.revoked_at is not None, k.create_time))
    return render(request, "admin.html", signed, keys=keys, stores=await _grants(caller),
                  **context)


@router.get("/admin")
async def admin(request: Request, signed: ConsoleCaller) -> Response:
    return await _page(request, signed)


@router.post("/admin/keys")
async def create_key(request: Request, signed: ConsoleCaller,
                     principal: Annotated[str, Form(max_length=256)],
                     admin: Annotated[bool, Form()] = False) -> Response:
    """A new key for a principal; its token is on this page only."""
    require_admin(signed.caller, "manage API keys")
    key, token = await signed.caller.client.api_keys.create(principal.strip(), admin=admin)
    return await _page(request, signed, new_key=key, new_token=token)


@router.post("/admin/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str, signed: ConsoleCaller) -> Response:
    require_admin(signed.caller, "manage API keys")
    await signed.caller.client.api_keys.revoke(key_id)
    request.app.state.keys.forget(key_id)
    return redirect(f"{CONSOLE}/admin")


async def _store(caller: Caller, kind: _Kind,
                 store: str) -> AsyncSessionStore | AsyncMemoryStore:
    if kind == "session_store":
        return await caller.client.session_stores.get(store)
    return await caller.client.memory_stores.get(store)


@router.post("/admin/grants")
async def grant(signed: ConsoleCaller, kind: Annotated[_Kind, Form()],
                store: Annotated[str, Form(max_length=64)],
                principal: Annotated[str, Form(max_length=256)],
                level: Annotated[Literal["READ", "WRITE", "MANAGE"], Form()]) -> Response:
    require_admin(signed.caller, "manage grants")
    handle = await _store(signed.caller, kind, store)
    await handle.grant_permission(principal.strip(), level)
    return redirect(f"{CONSOLE}/admin#grants")


@router.post("/admin/grants/revoke")
async def revoke_grant(signed: ConsoleCaller, kind: Annotated[_Kind, Form()],
                       store: Annotated[str, Form(max_length=64)],
                       principal: Annotated[str, Form(max_length=256)]) -> Response:
    require_admin(signed.caller, "manage grants")
    handle = await _store(signed.caller, kind, store)
    await handle.revoke_permission(principal)
    return redirect(f"{CONSOLE}/admin#grants")
