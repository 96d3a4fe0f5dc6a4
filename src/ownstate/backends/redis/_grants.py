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
"""

from __future__ import annotations

from ._core import RedisCore, lua

__all__ = ["DROP_GRANTS", "drop_store_grants", "start_store_grants"]

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


async def start_store_grants(core: RedisCore, tenant: str, kind: str, store: str,
                             owner: str | None, index: str, nonce: str) -> None:
    """Step 2 of a create: the new store's grants, and its name in ``index``."""
    await core._eval("grants_start", [core.tenant_key(tenant)],
                     [kind, store, owner or "", index, nonce])


async def drop_store_grants(core: RedisCore, tenant: str, kind: str, store: str,
                            nonce: str) -> int:
    """The grants of the store created with ``nonce`` (a closed one); how many went."""
    reply = await core._eval("grants_drop_of", [core.tenant_key(tenant)], [kind, store, nonce])
    return int(reply[1])
