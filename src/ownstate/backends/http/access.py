"""API keys and store grants, over HTTP.

A key's secret is made by the caller (only its digest travels), its id by the server; the
server checks keys, and a client never looks one up, so :meth:`find_api_key` is refused.

It may touch the server through the transport of ``_base``, the wire format
(``ownstate._wire``), the model and errors.
"""

from __future__ import annotations

from datetime import datetime

from ... import _wire
from ...errors import PermissionDenied
from ...model import ApiKey, Grant
from ._base import API, HttpBase

__all__ = ["AccessOverHttp"]

KEYS = f"{API}/api-keys"


def _grants_path(kind: str, store: str) -> str:
    """Where a store's permissions live: under its session store or memory store."""
    collection = "session-stores" if kind == "session_store" else "memory-stores"
    return f"{API}/{collection}/{store}/permissions"


class AccessOverHttp(HttpBase):
    """The access port as calls to the server's key and permission routes."""

    async def create_api_key(self, key: ApiKey, secret_hash: str) -> ApiKey:
        # The server makes the key id: ``key.key_id`` does not travel.
        body = await self._http.call("POST", KEYS, json={
            "principal": key.principal, "admin": key.admin, "secret_sha256": secret_hash})
        return _wire.load(ApiKey, {k: v for k, v in body.items() if k != "token"})

    async def find_api_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        raise PermissionDenied("API keys are checked by the server, not looked up by clients")

    async def list_api_keys(self, tenant: str) -> list[ApiKey]:
        body = await self._http.call("GET", KEYS)
        return [_wire.load(ApiKey, k) for k in body["api_keys"]]

    async def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> ApiKey:
        body = await self._http.call("POST", f"{KEYS}/{key_id}:revoke")
        return _wire.load(ApiKey, body)

    async def set_grant(self, tenant: str, kind: str, store: str, principal: str,
                        level: str | None) -> str | None:
        # The server writes the grant in one step of its own backend, keeping an owner's
        # ownership; what the principal holds afterwards is read back.
        path = _grants_path(kind, store)
        if level is None:
            await self._http.call("POST", f"{path}:revoke",
                                  json={"principal": {"name": principal}})
        else:
            await self._http.call("POST", f"{path}:grant",
                                  json={"principal": {"name": principal}, "permission": level})
        return await self.get_grant(tenant, kind, store, principal)

    async def get_grant(self, tenant: str, kind: str, store: str,
                        principal: str) -> str | None:
        for grant in await self.list_grants(tenant, kind, store):
            if grant.principal == principal:
                return grant.level
        return None

    async def list_grants(self, tenant: str, kind: str, store: str) -> list[Grant]:
        body = await self._http.call("GET", _grants_path(kind, store))
        return [_wire.load(Grant, g) for g in body["grants"]]

    async def list_principal_grants(self, tenant: str, principal: str) -> list[Grant]:
        if principal != self.principal:
            # The server tells a key only its own principal's grants.
            raise PermissionDenied("over HTTP only the API key's own grants can be listed")
        body = await self._http.call("GET", f"{API}/whoami/grants")
        return [_wire.load(Grant, g) for g in body["grants"]]

    async def drop_grants(self, tenant: str, kind: str, store: str) -> int:
        # The server drops a store's grants itself when it deletes the store.
        return 0
