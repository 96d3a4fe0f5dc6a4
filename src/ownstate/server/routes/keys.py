"""Who the caller is, and the tenant's API keys (admin keys only).

It may touch the caller's client, the routing base, :mod:`._common` and the shared schemas,
the backends' capability flags (names only), the limits and the model, and FastAPI and
pydantic; never a backend.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Path, Request
from pydantic import BaseModel, Field

from ...backends import Capability
from ...limits import KEY_ID_RE, PRINCIPAL_RE, SECRET_DIGEST_RE, anchored
from ...model import ApiKey
from ..routing import CallerDep
from ..schemas import GrantsOut, StrictModel
from ._common import api_router, grants_out, require_admin

__all__ = ["API_VERSION", "router"]

#: The version of the wire contract; clients refuse a server speaking another.
API_VERSION = 1

router = api_router("access")


class WhoAmI(BaseModel):
    tenant: str
    principal: str
    admin: bool
    key_id: str
    api_version: int
    capabilities: list[str]


class ApiKeyOut(BaseModel):
    key_id: str
    tenant: str
    principal: str
    admin: bool
    create_time: datetime
    revoked_at: datetime | None = None


class ApiKeysOut(BaseModel):
    api_keys: list[ApiKeyOut]


class CreateKey(StrictModel):
    principal: str = Field(pattern=anchored(PRINCIPAL_RE))
    admin: bool = False
    secret_sha256: str | None = Field(default=None, pattern=anchored(SECRET_DIGEST_RE),
                                      description=(
        "Register a key whose secret the caller made: only its digest is sent, and the "
        "token is osk_{key_id}_{secret}. The server always makes the key id."))


class CreatedKey(ApiKeyOut):
    token: str | None = Field(default=None, description=(
        "The key's token, shown only now; absent when the caller sent its own digest."))


def _out(key: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(key_id=key.key_id, tenant=key.tenant, principal=key.principal,
                     admin=key.admin, create_time=key.create_time, revoked_at=key.revoked_at)


@router.get("/whoami", response_model=WhoAmI)
async def whoami(caller: CallerDep) -> WhoAmI:
    """The caller's tenant, principal and key, and what the server can do."""
    caps = set(caller.client.capabilities) | {Capability.MULTIPROCESS, Capability.PERSISTENT}
    caps -= {Capability.MIGRATIONS, Capability.OPERATOR}
    return WhoAmI(tenant=caller.tenant, principal=caller.principal, admin=caller.admin,
                  key_id=caller.key.key_id, api_version=API_VERSION,
                  capabilities=sorted(caps))


@router.get("/whoami/grants", response_model=GrantsOut)
async def my_grants(caller: CallerDep) -> GrantsOut:
    """Every grant the caller's principal holds."""
    return grants_out(await caller.client.api_keys.grants_of(caller.principal))


@router.post("/api-keys", response_model=CreatedKey)
async def create_api_key(body: CreateKey, caller: CallerDep) -> CreatedKey:
    """A new key for a principal of the caller's tenant (admin). The server makes the
    key id; a body naming one is refused like any unknown field, whatever the id."""
    require_admin(caller, "manage API keys")
    if body.secret_sha256 is not None:
        key = await caller.client.api_keys.register(body.principal, body.secret_sha256,
                                                    admin=body.admin)
        return CreatedKey(**_out(key).model_dump())
    key, token = await caller.client.api_keys.create(body.principal, admin=body.admin)
    return CreatedKey(**_out(key).model_dump(), token=token)


@router.get("/api-keys", response_model=ApiKeysOut)
async def list_api_keys(caller: CallerDep) -> ApiKeysOut:
    """Every key of the caller's tenant, revoked ones included (admin)."""
    require_admin(caller, "manage API keys")
    return ApiKeysOut(api_keys=[_out(k) for k in await caller.client.api_keys.list()])


@router.post("/api-keys/{key_id}:revoke", response_model=ApiKeyOut)
async def revoke_api_key(
    key_id: Annotated[str, Path(pattern=anchored(KEY_ID_RE))], caller: CallerDep,
    request: Request,
) -> ApiKeyOut:
    """Revoke a key of the caller's tenant (admin); requests carrying it are refused."""
    require_admin(caller, "manage API keys")
    key = await caller.client.api_keys.revoke(key_id)
    request.app.state.keys.forget(key_id)
    return _out(key)
