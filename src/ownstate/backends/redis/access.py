"""API keys and store grants in Redis.

Keys
----
``{!key/K}:key``
    API key ``K``: a hash of its tenant, principal, admin flag (``1``/``0``), create time,
    revoke time (absent until revoked) and secret hash. Each key has a slot of its own,
    named by its id alone, because authentication finds a key before it knows the
    tenant. A tenant tag never starts with ``!``, so no tenant's keys share this name.
``{T}:api-keys``
    The tenant's key ids, scored by create time in microseconds since the epoch (ties
    ordered by id): the listing's index.
``{T}:grants:KIND:S``
    The grants on store ``S`` of kind ``KIND`` (``session_store`` or ``memory_store``):
    a hash of principal -> level.
``{T}:grants-of:P``
    Which stores principal ``P`` holds grants on: a set of ``KIND NUL S``.

Grants live in the tenant's slot, with the index of them by principal, so that every
grant operation (set, take away, drop a store's, list a principal's) is one script on one
slot and the index never disagrees with the grants, on Cluster too.
``{T}:grants-gen:KIND:S`` names the creation of the store that the grants belong to; how
grants are made and dropped with their store, across two slots, is in _grants.py.

Creating a key spans two slots: the id goes into the tenant's index first, then the key
is written (refused when its id is taken, which withdraws an index entry this call
added). An interruption in between leaves an index entry without a key, which listings
skip; never a key that listings miss.

It may touch Redis through ``_core`` and ``_grants``, the time format (``ownstate._ids``),
the model and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..._ids import format_time, parse_time
from ...errors import AlreadyExists, KeyNotFound
from ...model import ApiKey, Grant
from ._core import RedisCore, lua, text
from ._grants import DROP_GRANTS as _DROP

__all__ = ["AccessInRedis"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
#: The fields of a key's hash, in the order they are read.
_FIELDS = ("tenant", "principal", "admin", "ct", "rv", "hash")

# ARGV: the fields of _FIELDS, with rv empty for a key not revoked.
lua("api_key_create", """
local tenant = redis.call('HGET', base .. 'key', 'tenant')
if tenant then return {'@taken', tenant} end
redis.call('HSET', base .. 'key', 'tenant', ARGV[1], 'principal', ARGV[2], 'admin', ARGV[3],
           'ct', ARGV[4], 'hash', ARGV[6])
if ARGV[5] ~= '' then redis.call('HSET', base .. 'key', 'rv', ARGV[5]) end
return {'ok'}
""")

# ARGV: tenant, revoke time. A key of another tenant is as unknown as a missing one.
lua("api_key_revoke", """
if redis.call('HGET', base .. 'key', 'tenant') ~= ARGV[1] then return {'@nokey'} end
redis.call('HSETNX', base .. 'key', 'rv', ARGV[2])
local f = redis.call('HMGET', base .. 'key', 'tenant', 'principal', 'admin', 'ct', 'rv',
                     'hash')
return {'ok', f[1], f[2], f[3], f[4], f[5], f[6]}
""")

# ARGV: kind, store, principal, level ('' takes the grant away). An owner stays one.
# Replies the level held afterwards.
lua("grant_set", """
local member = ARGV[1] .. '\\0' .. ARGV[2]
local grants = base .. 'grants:' .. ARGV[1] .. ':' .. ARGV[2]
local held = redis.call('HGET', grants, ARGV[3])
if held == 'OWNER' then return {'ok', held} end
if ARGV[4] == '' then
  redis.call('HDEL', grants, ARGV[3])
  redis.call('SREM', base .. 'grants-of:' .. ARGV[3], member)
  return {'ok'}
end
redis.call('HSET', grants, ARGV[3], ARGV[4])
redis.call('SADD', base .. 'grants-of:' .. ARGV[3], member)
return {'ok', ARGV[4]}
""")

# ARGV: kind, store. Replies how many grants went.
lua("grants_drop", _DROP + """
drop()
return {'ok', #principals}
""")

# ARGV: principal. Replies kind, store, level for each store the principal holds a grant on.
lua("grants_of", """
local out = {'ok'}
for _, member in ipairs(redis.call('SMEMBERS', base .. 'grants-of:' .. ARGV[1])) do
  local kind, store = string.match(member, '^([^%z]*)%z(.*)$')
  local level = redis.call('HGET', base .. 'grants:' .. kind .. ':' .. store, ARGV[1])
  if level then
    out[#out + 1] = kind
    out[#out + 1] = store
    out[#out + 1] = level
  end
end
return out
""")


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _key(key_id: str, fields: Sequence[Any]) -> ApiKey:
    return ApiKey(key_id=key_id, tenant=text(fields[0]), principal=text(fields[1]),
                  admin=text(fields[2]) == "1", create_time=parse_time(text(fields[3])),
                  revoked_at=parse_time(text(fields[4])) if fields[4] is not None else None)


class AccessInRedis(RedisCore):
    """The access port on Redis and Redis Cluster."""

    def api_key_key(self, key_id: str) -> str:
        """The base of API key ``key_id``'s slot (its hash is ``key`` in it)."""
        return f"{self.prefix}:{{!key/{key_id}}}:"

    def grants_key(self, tenant: str, kind: str, store: str) -> str:
        """The hash of a store's grants (principal -> level), in the tenant's slot."""
        return f"{self.tenant_key(tenant)}grants:{kind}:{store}"

    # API keys --------------------------------------------------------------------------

    async def create_api_key(self, key: ApiKey, secret_hash: str) -> ApiKey:
        index = self.tenant_key(key.tenant) + "api-keys"
        added = await self._command("ZADD", index, "NX", _micros(key.create_time), key.key_id,
                                    write=True)
        revoked = format_time(key.revoked_at) if key.revoked_at is not None else ""
        reply = await self._eval("api_key_create", [self.api_key_key(key.key_id)], [
            key.tenant, key.principal, "1" if key.admin else "0",
            format_time(key.create_time), revoked, secret_hash])
        if reply[0] == b"@taken":
            if int(added) and text(reply[1]) != key.tenant:
                await self._command("ZREM", index, key.key_id, write=True)
            raise AlreadyExists(key_id=key.key_id)
        return key

    async def find_api_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        fields = await self._command("HMGET", self.api_key_key(key_id) + "key", *_FIELDS,
                                     write=False)
        if fields[0] is None:
            return None
        return _key(key_id, fields), text(fields[5])

    async def list_api_keys(self, tenant: str) -> list[ApiKey]:
        ids = [text(m) for m in await self._command(
            "ZRANGE", self.tenant_key(tenant) + "api-keys", 0, -1, write=False)]
        found = await self._read([("HMGET", self.api_key_key(i) + "key", *_FIELDS)
                                  for i in ids])
        # an entry whose key was never written (an interrupted or refused create) is skipped
        keys = [_key(i, f) for i, f in zip(ids, found, strict=True)
                if f[0] is not None and text(f[0]) == tenant]
        return sorted(keys, key=lambda k: (k.create_time, k.key_id))

    async def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> ApiKey:
        reply = await self._eval("api_key_revoke", [self.api_key_key(key_id)],
                                 [tenant, format_time(now)])
        if reply[0] != b"ok":
            raise KeyNotFound(key_id=key_id)
        return _key(key_id, reply[1:])

    # grants ----------------------------------------------------------------------------

    async def set_grant(self, tenant: str, kind: str, store: str, principal: str,
                        level: str | None) -> str | None:
        reply = await self._eval("grant_set", [self.tenant_key(tenant)],
                                 [kind, store, principal, level or ""])
        return text(reply[1]) if len(reply) > 1 else None

    async def get_grant(self, tenant: str, kind: str, store: str,
                        principal: str) -> str | None:
        level = await self._command("HGET", self.grants_key(tenant, kind, store), principal,
                                    write=False)
        return text(level) if level is not None else None

    async def list_grants(self, tenant: str, kind: str, store: str) -> list[Grant]:
        found = await self._command("HGETALL", self.grants_key(tenant, kind, store),
                                    write=False)
        # redis-py answers HGETALL with a dict, or a flat list through a pipeline
        pairs = found.items() if isinstance(found, dict) else zip(
            found[::2], found[1::2], strict=True)
        grants = sorted((text(p), text(level)) for p, level in pairs)
        return [Grant(kind, store, principal, level) for principal, level in grants]

    async def list_principal_grants(self, tenant: str, principal: str) -> list[Grant]:
        reply = await self._eval("grants_of", [self.tenant_key(tenant)], [principal],
                                 write=False)
        found = sorted((text(reply[i]), text(reply[i + 1]), text(reply[i + 2]))
                       for i in range(1, len(reply), 3))
        return [Grant(kind, store, principal, level) for kind, store, level in found]

    async def drop_grants(self, tenant: str, kind: str, store: str) -> int:
        reply = await self._eval("grants_drop", [self.tenant_key(tenant)], [kind, store])
        return int(reply[1])
