"""API keys and store grants, in memory.

It may touch the in-memory data (``_data``), the model and errors, nothing else.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from ...errors import AlreadyExists, KeyNotFound
from ...model import ApiKey, Grant
from ._data import MemoryBase

__all__ = ["AccessInMemory"]


class AccessInMemory(MemoryBase):
    """Keys live in ``_data.api_keys`` under key_id as (record, secret hash); grants in
    ``_data.grants`` under (tenant, kind, store) as {principal: level}."""

    async def create_api_key(self, key: ApiKey, secret_hash: str) -> ApiKey:
        with self._data.lock:
            if key.key_id in self._data.api_keys:
                raise AlreadyExists(key_id=key.key_id)
            self._data.api_keys[key.key_id] = (key, secret_hash)
        return key

    async def find_api_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        with self._data.lock:
            found: tuple[ApiKey, str] | None = self._data.api_keys.get(key_id)
            return found

    async def list_api_keys(self, tenant: str) -> list[ApiKey]:
        with self._data.lock:
            keys = [key for key, _ in self._data.api_keys.values() if key.tenant == tenant]
        return sorted(keys, key=lambda k: (k.create_time, k.key_id))

    async def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> ApiKey:
        with self._data.lock:
            found = self._data.api_keys.get(key_id)
            if found is None or found[0].tenant != tenant:
                raise KeyNotFound(key_id=key_id)
            key: ApiKey = found[0]
            digest: str = found[1]
            if key.revoked_at is None:
                key = replace(key, revoked_at=now)
                self._data.api_keys[key_id] = (key, digest)
            return key

    async def set_grant(self, tenant: str, kind: str, store: str, principal: str,
                        level: str | None) -> str | None:
        with self._data.lock:
            grants = self._data.grants.setdefault((tenant, kind, store), {})
            if grants.get(principal) == "OWNER":
                return "OWNER"
            if level is None:
                grants.pop(principal, None)
            else:
                grants[principal] = level
            return level

    async def get_grant(self, tenant: str, kind: str, store: str,
                        principal: str) -> str | None:
        with self._data.lock:
            level: str | None = self._data.grants.get((tenant, kind, store), {}).get(principal)
            return level

    async def list_grants(self, tenant: str, kind: str, store: str) -> list[Grant]:
        with self._data.lock:
            grants = dict(self._data.grants.get((tenant, kind, store), {}))
        return [Grant(kind, store, p, level) for p, level in sorted(grants.items())]

    async def list_principal_grants(self, tenant: str, principal: str) -> list[Grant]:
        with self._data.lock:
            found = [Grant(kind, store, principal, grants[principal])
                     for (t, kind, store), grants in self._data.grants.items()
                     if t == tenant and principal in grants]
        return sorted(found, key=lambda g: (g.kind, g.store))

    async def drop_grants(self, tenant: str, kind: str, store: str) -> int:
        with self._data.lock:
            return self._drop_grants(tenant, kind, store)
