"""Assets in Redis: content stored once per tenant and SHA-256, references by id.

Content lives in its own slot, ``{T$sha256}``: ``blob`` (the bytes) and ``refs`` (the ids
of the references that hold it). A session's references live in its tree (``ar:X``: id
-> reference; ``ash:X``: content -> id; ``a:X``: ids in the order made), so they go with
the session in the same script; references without an owner live in the tenant's slot
(``loose``, ``loose-sha``). ``{T}:assets`` maps every id to its owner.

Putting is three steps: hold the content (add the id to ``refs``, store the bytes unless
present), name the owner in the directory, then make the reference; a refused put (the
owner already holds this content, or the session is gone) undoes the first two. Deleting
a reference releases its hold, and the content goes with the last hold. An interruption
between steps can leave a hold that no reference claims, which keeps content alive (never
the reverse: a reference always finds its bytes).

It may touch Redis through ``_core``, the time format (``ownstate._ids``), the model and
errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from ..._ids import format_time, parse_time
from ...errors import AssetNotFound, SessionNotFound
from ...model import AssetRef
from ._core import RedisCore, lua, text

__all__ = ["AssetsInRedis"]

lua("content_hold", """
redis.call('SADD', base .. 'refs', ARGV[1])
if redis.call('EXISTS', base .. 'blob') == 0 then redis.call('SET', base .. 'blob', ARGV[2]) end
return {'ok'}
""")

lua("asset_direct", """
redis.call('HSET', base .. 'assets', ARGV[1], ARGV[2])
return {'ok'}
""")

# In the tenant's slot: ARGV: id, sha256, reference JSON.
lua("asset_put_loose", """
local earlier = redis.call('HGET', base .. 'loose-sha', ARGV[2])
if earlier then return {'@existing', earlier, redis.call('HGET', base .. 'loose', earlier)} end
redis.call('HSET', base .. 'loose', ARGV[1], ARGV[3])
redis.call('HSET', base .. 'loose-sha', ARGV[2], ARGV[1])
redis.call('HSET', base .. 'assets', ARGV[1], '')
return {'ok'}
""")

# In the session's tree: ARGV[3..5]: id, sha256, reference JSON.
lua("asset_put", """
local earlier = redis.call('HGET', base .. 'ash:' .. sid, ARGV[4])
if earlier then
  return {'@existing', earlier, redis.call('HGET', base .. 'ar:' .. sid, earlier)}
end
redis.call('HSET', base .. 'ar:' .. sid, ARGV[3], ARGV[5])
redis.call('HSET', base .. 'ash:' .. sid, ARGV[4], ARGV[3])
redis.call('ZADD', base .. 'a:' .. sid, redis.call('HINCRBY', skey, 'aseq', 1), ARGV[3])
return {'ok'}
""", on="tree")

lua("asset_get", """
return {'ok', redis.call('HGET', base .. 'ar:' .. sid, ARGV[3])}
""", on="tree")

lua("asset_list", """
local out = {'ok'}
for _, id in ipairs(redis.call('ZRANGE', base .. 'a:' .. sid, 0, -1)) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', base .. 'ar:' .. sid, id)
end
return out
""", on="tree")

lua("asset_delete", """
local ref = redis.call('HGET', base .. 'ar:' .. sid, ARGV[3])
if not ref then return {'@none'} end
local sha = cjson.decode(ref)[1]
redis.call('HDEL', base .. 'ar:' .. sid, ARGV[3])
if redis.call('HGET', base .. 'ash:' .. sid, sha) == ARGV[3] then
  redis.call('HDEL', base .. 'ash:' .. sid, sha)
end
redis.call('ZREM', base .. 'a:' .. sid, ARGV[3])
return {'ok', sha}
""", on="tree")

# In the tenant's slot: where the asset is, and for one without an owner, its reference.
lua("asset_find", """
local where = redis.call('HGET', base .. 'assets', ARGV[1])
if not where then return {'@none'} end
if where == '' then return {'loose', redis.call('HGET', base .. 'loose', ARGV[1])} end
return {'session', where}
""")

lua("asset_delete_loose", """
local ref = redis.call('HGET', base .. 'loose', ARGV[1])
if not ref then return {'@none'} end
local sha = cjson.decode(ref)[1]
redis.call('HDEL', base .. 'loose', ARGV[1])
if redis.call('HGET', base .. 'loose-sha', sha) == ARGV[1] then
  redis.call('HDEL', base .. 'loose-sha', sha)
end
redis.call('HDEL', base .. 'assets', ARGV[1])
return {'ok', sha}
""")


def _ref(asset_id: str, store: str | None, session_id: str | None, raw: bytes) -> AssetRef:
    sha256, size, media_type, metadata, created = json.loads(raw)
    return AssetRef(asset_id=asset_id, sha256=sha256, size=size, media_type=media_type,
                    store=store, session_id=session_id, metadata=metadata,
                    create_time=parse_time(created))


class AssetsInRedis(RedisCore):
    def _no_asset(self, asset_id: str) -> AssetNotFound:
        return AssetNotFound(asset_id=asset_id)

    async def put_asset(self, tenant: str, store: str | None, session_id: str | None,
                        asset_id: str, sha256: str, data: bytes, media_type: str,
                        metadata: Mapping[str, str], now: datetime) -> AssetRef:
        record = json.dumps([sha256, len(data), media_type, dict(metadata), format_time(now)],
                            ensure_ascii=False)
        content = self.content_key(tenant, sha256)
        await self._eval("content_hold", [content], [asset_id, data])
        if store is None or session_id is None:
            reply = await self._eval("asset_put_loose", [self.tenant_key(tenant)],
                                     [asset_id, sha256, record])
        else:
            await self._eval("asset_direct", [self.tenant_key(tenant)],
                             [asset_id, f"{store}\x00{session_id}"])
            try:
                _, reply = await self._tree(tenant, store, session_id, "asset_put",
                                            [asset_id, sha256, record])
            except SessionNotFound:
                await self._release_content(tenant, asset_id, sha256)
                raise
        if reply[0] == b"@existing":
            earlier = text(reply[1])
            # the hold and the directory entry just written are the existing reference's
            # own when it has this very id: releasing them would orphan it
            if earlier != asset_id:
                await self._release_content(tenant, asset_id, sha256)
            return _ref(earlier, store, session_id, reply[2])
        return AssetRef(asset_id=asset_id, sha256=sha256, size=len(data),
                        media_type=media_type, store=store, session_id=session_id,
                        metadata=dict(metadata), create_time=now)

    async def _find(self, tenant: str, asset_id: str) -> AssetRef:
        found = await self._eval("asset_find", [self.tenant_key(tenant)], [asset_id],
                                 write=False)
        if found[0] == b"loose" and found[1] is not None:
            return _ref(asset_id, None, None, found[1])
        if found[0] == b"session":
            store, session_id = text(found[1]).split("\x00")
            try:
                _, reply = await self._tree(tenant, store, session_id, "asset_get", [asset_id],
                                            write=False)
            except SessionNotFound:
                raise self._no_asset(asset_id) from None
            if reply[1] is not None:
                return _ref(asset_id, store, session_id, reply[1])
        raise self._no_asset(asset_id)

    async def get_asset(self, tenant: str, asset_id: str) -> tuple[AssetRef, bytes]:
        ref = await self._find(tenant, asset_id)
        data = await self._command("GET", self.content_key(tenant, ref.sha256) + "blob",
                                   write=False)
        if data is None:
            raise self._no_asset(asset_id)
        return ref, bytes(data)

    async def get_asset_ref(self, tenant: str, asset_id: str) -> AssetRef:
        return await self._find(tenant, asset_id)

    async def list_assets(self, tenant: str, store: str, session_id: str) -> list[AssetRef]:
        _, reply = await self._tree(tenant, store, session_id, "asset_list", [], write=False)
        return [_ref(text(reply[i]), store, session_id, reply[i + 1])
                for i in range(1, len(reply), 2)]

    async def delete_asset(self, tenant: str, asset_id: str) -> None:
        ref = await self._find(tenant, asset_id)
        if ref.store is None or ref.session_id is None:
            reply = await self._eval("asset_delete_loose", [self.tenant_key(tenant)],
                                     [asset_id])
        else:
            try:
                _, reply = await self._tree(tenant, ref.store, ref.session_id, "asset_delete",
                                            [asset_id])
            except SessionNotFound:
                raise self._no_asset(asset_id) from None
        if reply[0] != b"ok":
            raise self._no_asset(asset_id)
        await self._release_content(tenant, asset_id, text(reply[1]))
