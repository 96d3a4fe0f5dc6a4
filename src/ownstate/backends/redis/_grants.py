"""How a store's grants are made and dropped together with the store, in Redis.

A store's record lives in its own slot (``{T/S}``, ``{T#M}``) and its grants in the
tenant's (``{T}``, see access.py), so on Redis Cluster no one script can write both.
Creating a store is therefore three steps, ordered so that no store is ever seen without
its owner:

1. claim the name in the store's slot: the record is written ``creating`` with a nonce
   (readers see no store; a second creator is told the store exists);
2. in the tenant's slot, one script: drop grants left over from an earlier store of the
   name, write the owner's ``OWNER`` grant, list the name;
3. in the store's slot, turn the record ``live`` if the claim is still this call's.

A call that fails after step 1 withdraws its claim. One that stops (a crash) leaves a
``creating`` record that readers skip and that a later creator takes over once it is
``CLAIM_GRACE_MS`` old, and perhaps grants on the name, which that creation drops in its
step 2. The grants of a creation are stamped with its nonce (``{T}:grants-gen:KIND:S``), so
a delete that stopped and resumes late drops only the grants of the store it deleted,
never those of a store made of the name since.

Deleting closes the record first (``deleting``: readers see no store), then drops the
grants, then the rest; a call that stops is finished by the next delete or create of the
name. So a failed create or delete leaves no store without its owner and no visible store
changed; what it leaves is invisible and finished by the next call on the name.

It may touch Redis through ``_core``, the time format (``ownstate._ids``) and errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime

from ..._ids import format_time
from ...errors import AlreadyExists, BackendUnavailable, StoreNotFound
from ._core import CLAIM_GRACE_MS, RedisCore, lua

#: How often, and how long, a create waits for another call's create of the same name to
#: finish (a create takes milliseconds; one that died is taken over after the grace time).
_CREATING_WAITS = 100
_CREATING_PAUSE = 0.01

__all__ = ["DROP_GRANTS", "claim_scripts", "create_with_grants", "drop_store_grants"]

#: The start of a script dropping a store's grants (``ARGV[1..2]``: kind, store), which
#: then calls ``drop()``. Its reads come before its writes: a failing read (a key of the wrong type)
#: stops it before it has changed anything, as Redis does not undo a script's writes.
DROP_GRANTS = """
local member = ARGV[1] .. '\\0' .. ARGV[2]
local grants = base .. 'grants:' .. ARGV[1] .. ':' .. ARGV[2]
local gen = base .. 'grants-gen:' .. ARGV[1] .. ':' .. ARGV[2]
local principals = redis.call('HKEYS', grants)
local function drop()
  for _, principal in ipairs(principals) do
    redis.call('SREM', base .. 'grants-of:' .. principal, member)
  end
  redis.call('DEL', grants, gen)
end
"""

# ARGV: kind, store, owner ('' for none), the tenant's index of the kind's stores, nonce.
lua("grants_start", DROP_GRANTS + """
drop()
if ARGV[3] ~= '' then
  redis.call('HSET', grants, ARGV[3], 'OWNER')
  redis.call('SADD', base .. 'grants-of:' .. ARGV[3], member)
end
redis.call('SET', gen, ARGV[5])
redis.call('ZADD', base .. ARGV[4], 0, ARGV[2])
return {'ok'}
""")

# ARGV: kind, store, the nonce of the store whose grants go ('' for a store made before
# grants were stamped). Grants stamped by another creation stay. Replies how many went.
lua("grants_drop_of", DROP_GRANTS + """
local stamp = redis.call('GET', gen)
if stamp and stamp ~= ARGV[3] then return {'ok', 0} end
drop()
return {'ok', #principals}
""")


def claim_scripts(record: str) -> None:
    """Register steps 1 and 3 (``RECORD_create``, ``RECORD_open``) and the withdrawal of a
    claim (``RECORD_unclaim``) for stores whose record is the hash ``record``."""
    hkey = f"base .. '{record}'"
    # ARGV: create time, nonce, grace (ms).
    lua(f"{record}_create", f"""
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local f = redis.call('HMGET', {hkey}, 'state', 'since')
if f[1] == 'live' then return {{'@exists'}} end
if f[1] == 'creating' then
  if now_ms - tonumber(f[2]) < tonumber(ARGV[3]) then return {{'@creating'}} end
elseif f[1] then
  return {{'@deleting'}}
end
redis.call('HSET', {hkey}, 'state', 'creating', 'ct', ARGV[1], 'gen', ARGV[2],
           'since', now_ms)
return {{'ok'}}
""")
    # ARGV: nonce.
    lua(f"{record}_open", f"""
local f = redis.call('HMGET', {hkey}, 'state', 'gen')
if f[1] ~= 'creating' or f[2] ~= ARGV[1] then return {{'@lost'}} end
redis.call('HSET', {hkey}, 'state', 'live')
redis.call('HDEL', {hkey}, 'since')
return {{'ok'}}
""")
    lua(f"{record}_unclaim", f"""
local f = redis.call('HMGET', {hkey}, 'state', 'gen')
if f[1] == 'creating' and f[2] == ARGV[1] then redis.call('DEL', {hkey}) end
return {{'ok'}}
""")


async def create_with_grants(core: RedisCore, record: str, key: str, tenant: str,
                             kind: str, name: str, owner: str | None, index: str,
                             now: datetime, finish_delete: Callable[[], Awaitable[object]],
                             label: str) -> None:
    """Create the store whose record is ``record`` in the slot ``key``, with its grants,
    in the three steps above; ``finish_delete`` completes a delete of the name that
    stopped half-way. Raises AlreadyExists."""
    nonce = core.nonce()
    waits = 0
    for _ in range(10):
        reply = await core._eval(f"{record}_create", [key],
                                 [format_time(now), nonce, CLAIM_GRACE_MS])
        while reply[0] == b"@creating" and waits < _CREATING_WAITS:
            # another call is creating the name: a clash is reported once that store can
            # be read, so that a caller's "get it, else create it" finds it
            waits += 1
            await asyncio.sleep(_CREATING_PAUSE)
            reply = await core._eval(f"{record}_create", [key],
                                     [format_time(now), nonce, CLAIM_GRACE_MS])
        if reply[0] == b"ok":
            break
        if reply[0] in (b"@exists", b"@creating"):
            raise AlreadyExists(f"{label} {name!r} already exists", store=name)
        with contextlib.suppress(StoreNotFound):
            await finish_delete()
    else:
        raise BackendUnavailable(f"{label} {name!r} kept changing; retry")
    try:
        await core._eval("grants_start", [core.tenant_key(tenant)],
                         [kind, name, owner or "", index, nonce])
        reply = await core._eval(f"{record}_open", [key], [nonce])
    except BaseException:
        with contextlib.suppress(BackendUnavailable):
            await core._eval(f"{record}_unclaim", [key], [nonce])
        raise
    if reply[0] != b"ok":  # stopped longer than the grace, and taken over
        raise BackendUnavailable(f"{label} {name!r} was claimed by another create; retry")


async def drop_store_grants(core: RedisCore, tenant: str, kind: str, store: str,
                            nonce: str) -> int:
    """The grants of the store created with ``nonce`` (a closed one); how many went."""
    reply = await core._eval("grants_drop_of", [core.tenant_key(tenant)], [kind, store, nonce])
    return int(reply[1])
