"""The scripts a restore into Redis runs, and how a batch's calls go out together.

Each script writes rows into one slot and leaves a row whose key is held alone, so a
restore run again stores the rest and nothing twice. A row whose writes span slots (a
session: its store's index, a fork's claim, its tree; a run: the tenant's directory, its
tree; an asset: its content, the directory, its owner) is written in the order the
backend's own writes use, so that an interruption leaves only what readers already skip
(an index entry without its session, a directory entry without its run, a hold on
content), and the row itself is written last: a restore run again finds it missing and
writes it. The calls of a batch go out as one pipeline (on Redis Cluster, one by one).

It may touch Redis through ``_core`` and redis-py's errors, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import exceptions as redis_errors

from ._core import _SCRIPTS, CHECKPOINT_KINDS, ITEM_INDEX, ITEMS, ITEMS_ADD, RedisCore, Reply, lua

__all__ = ["eval_all", "write_all"]

# A store's record, live at once (ARGV: create time, nonce); '@exists' when one is there.
for _record in ("store", "mstore"):
    lua(f"xfer_{_record}", f"""
if redis.call('EXISTS', base .. '{_record}') == 1 then return {{'@exists'}} end
redis.call('HSET', base .. '{_record}', 'state', 'live', 'ct', ARGV[1], 'gen', ARGV[2])
return {{'ok'}}
""")

# In the tenant's slot, before the record: list the name and stamp its grants as the
# creation's. ARGV: kind, name, index, nonce, '1' unindexed / '0' indexed / '' neither.
lua("xfer_store_list", """
redis.call('SET', base .. 'grants-gen:' .. ARGV[1] .. ':' .. ARGV[2], ARGV[4])
redis.call('ZADD', base .. ARGV[3], 0, ARGV[2])
if ARGV[5] == '1' then redis.call('SADD', base .. 'unindexed', ARGV[2]) end
if ARGV[5] == '0' then redis.call('SREM', base .. 'unindexed', ARGV[2]) end
return {'ok'}
""")

# In the store's slot: an index entry for each (session, root) of ARGV; their ordinals.
lua("xfer_reserve", """
if redis.call('HGET', base .. 'store', 'state') ~= 'live' then return {'@nostore'} end
local out = {'ok'}
for i = 1, #ARGV, 2 do
  local ord = redis.call('INCR', base .. 'seq')
  local member = ord .. '\\0' .. ARGV[i]
  if ARGV[i + 1] ~= ARGV[i] then member = member .. '\\0' .. ARGV[i + 1] end
  redis.call('ZADD', base .. 'index', ord, member)
  out[#out + 1] = ord
end
return out
""")

# In a tree: sessions, ARGV in tens (id, actor, parent or '', root, labels, create time,
# last activity, ordinal, fork claim or '', '1' when its store keeps items out of search).
# Replies how many were stored.
lua("xfer_sessions", """
local n = 0
for i = 1, #ARGV, 10 do
  local sid = ARGV[i]
  local skey = base .. 's:' .. sid
  if redis.call('EXISTS', skey) == 0 then
    redis.call('HSET', skey, 'actor', ARGV[i + 1], 'root', ARGV[i + 3], 'meta', ARGV[i + 4],
               'ct', ARGV[i + 5], 'lat', ARGV[i + 6], 'ord', ARGV[i + 7])
    if ARGV[i + 2] ~= '' then
      redis.call('HSET', skey, 'parent', ARGV[i + 2])
      redis.call('ZADD', base .. 'kids:' .. ARGV[i + 2], ARGV[i + 7], sid)
    end
    if ARGV[i + 8] ~= '' then redis.call('HSET', skey, 'claim', ARGV[i + 8]) end
    if ARGV[i + 9] == '1' then redis.call('HSET', skey, 'nx', '1') end
    n = n + 1
  end
end
return {'ok', n}
""")

# In a tree: items appended after the session's ARGV[2] items, as an append stores them
# (indexed for search alike) but keeping the session's last activity. ARGV: session,
# count before, n, n item keys, n encoded items, their n search documents.
lua("xfer_items", ITEMS + ITEM_INDEX + ITEMS_ADD + """
local sid = ARGV[1]
local skey = base .. 's:' .. sid
if redis.call('EXISTS', skey) == 0 then return {'@gone'} end
local have = items_count(base .. 'o:' .. sid)
if have ~= tonumber(ARGV[2]) then return {'@count', have} end
local count = tonumber(ARGV[3])
local full = items_add(sid, skey, have, 3, count)
if full then return {'@full', full} end
return {'ok', count}
""")

# In a memory store's slot: facts, ARGV in groups (id, record, subject, key, order key,
# '1' current, length in terms, n terms, the terms). Each goes into its chain where its
# order key (record time, then current last) puts it, and into every index a remember
# keeps. Replies how many were stored.
lua("xfer_facts", """
if redis.call('HGET', base .. 'mstore', 'state') ~= 'live' then return {'@nostore'} end
local function order_of(rec)
  local ra = string.match(rec, '"ra":"([^"]*)"')
  if string.find(rec, '"sa":null', 1, true) then return ra .. '1' end
  return ra .. '0'
end
local i, stored = 1, 0
while i <= #ARGV do
  local id, rec, subject, key, mine = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local words = tonumber(ARGV[i + 7])
  if redis.call('HEXISTS', base .. 'f', id) == 0 then
    local chain = subject .. '\\0' .. key
    local ckey = base .. 'c:' .. chain
    -- facts arrive in record order, so the place is nearly always the end
    local pivot
    local last = redis.call('LINDEX', ckey, -1)
    if last and order_of(redis.call('HGET', base .. 'f', last)) > mine then
      for _, other in ipairs(redis.call('LRANGE', ckey, 0, -1)) do
        if order_of(redis.call('HGET', base .. 'f', other)) > mine then
          pivot = other
          break
        end
      end
    end
    redis.call('HSET', base .. 'f', id, rec)
    if pivot then redis.call('LINSERT', ckey, 'BEFORE', pivot, id)
    else redis.call('RPUSH', ckey, id) end
    redis.call('SADD', base .. 'subjects', subject)
    redis.call('SADD', base .. 'sk:' .. subject, key)
    redis.call('HSET', base .. 'chv', chain, redis.call('HINCRBY', base .. 'mstore', 'ver', 1))
    if ARGV[i + 5] == '1' then
      redis.call('ZADD', base .. 'cur', redis.call('HINCRBY', base .. 'mstore', 'seq', 1), id)
    end
    for j = 1, words do
      redis.call('SADD', base .. 'w:' .. ARGV[i + 7 + j], id)
      redis.call('SADD', base .. 'words', ARGV[i + 7 + j])
    end
    redis.call('HINCRBY', base .. 'mstore', 'tlen', ARGV[i + 6])
    stored = stored + 1
  end
  i = i + 8 + words
end
return {'ok', stored}
""")

# In the tenant's slot: claim run ids in the directory, ARGV in fours (run, store,
# session, '1' when running or awaiting) after a nonce. Replies per run: 'new' or 'held'
# (claimed before, for this session: a restore that stopped) with its ordinal and
# directory value, or 'taken' (another session's run of that id).
lua("xfer_run_claims", """
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {'ok'}
for i = 2, #ARGV, 4 do
  local run, home = ARGV[i], ARGV[i + 1] .. '\\0' .. ARGV[i + 2] .. '\\0'
  local cur = redis.call('HGET', base .. 'runs', run)
  if cur then
    if string.sub(cur, 1, #home) == home then
      out[#out + 1] = 'held'
      out[#out + 1] = redis.call('ZSCORE', base .. 'run-order', run) or '0'
      out[#out + 1] = cur
    else
      out[#out + 1] = 'taken'
      out[#out + 1] = ''
      out[#out + 1] = ''
    end
  else
    local value = home .. now_ms .. '\\0' .. ARGV[1]
    redis.call('HSET', base .. 'runs', run, value)
    local ord = redis.call('INCR', base .. 'run-seq')
    redis.call('ZADD', base .. 'run-order', ord, run)
    if ARGV[i + 3] == '1' then redis.call('SADD', base .. 'run-active', run) end
    out[#out + 1] = 'new'
    out[#out + 1] = ord
    out[#out + 1] = value
  end
end
return out
""")

# In a tree: runs, ARGV in groups (run, session, ordinal, '1' when running or awaiting,
# n, then n field/value pairs). Replies how many were stored.
lua("xfer_runs", """
local i, stored = 1, 0
while i <= #ARGV do
  local run, sid, ord, open = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local n = tonumber(ARGV[i + 4])
  local rkey = base .. 'r:' .. run
  if redis.call('EXISTS', rkey) == 0 then
    local fields = {}
    for j = 1, 2 * n do fields[j] = ARGV[i + 4 + j] end
    redis.call('HSET', rkey, unpack(fields))
    redis.call('ZADD', base .. 'runs:' .. sid, ord, run)
    if open == '1' then redis.call('HSET', base .. 's:' .. sid, 'active', run) end
    stored = stored + 1
  end
  i = i + 5 + 2 * n
end
return {'ok', stored}
""")

# In a tree: one checkpoint of a run, as a put stores it, its expiry set as a write sets
# it. ARGV: run, ttl ('' for none), member, packed checkpoint, sizes, writes, bytes.
lua("xfer_checkpoint", f"""
local run = ARGV[1]
local c, cd, cz, cw, cm = base .. 'c:' .. run, base .. 'cd:' .. run, base .. 'cz:' .. run,
  base .. 'cw:' .. run, base .. 'cm:' .. run
local m = ARGV[3]
if redis.call('HEXISTS', cz, m) == 1 then return {{'ok', 0}} end
redis.call('ZADD', c, redis.call('HINCRBY', cm, 'seq', 1), m)
redis.call('HSET', cd, m, ARGV[4])
redis.call('HSET', cz, m, ARGV[5])
if ARGV[6] ~= '' then redis.call('HSET', cw, m, ARGV[6]) end
redis.call('HINCRBY', cm, 'bytes', ARGV[7])
if ARGV[2] ~= '' then
  for _, kind in ipairs({{{", ".join(f"'{k}'" for k in CHECKPOINT_KINDS)}}}) do
    redis.call('EXPIRE', base .. kind .. ':' .. run, ARGV[2])
  end
end
return {{'ok', 1}}
""")

# In a tree: an asset reference of a session (ARGV: session, id, sha256, reference).
lua("xfer_asset", """
local sid = ARGV[1]
if redis.call('HEXISTS', base .. 'ar:' .. sid, ARGV[2]) == 1 then return {'ok', 0} end
redis.call('HSET', base .. 'ar:' .. sid, ARGV[2], ARGV[4])
redis.call('HSETNX', base .. 'ash:' .. sid, ARGV[3], ARGV[2])
redis.call('ZADD', base .. 'a:' .. sid, redis.call('HINCRBY', base .. 's:' .. sid, 'aseq', 1),
           ARGV[2])
return {'ok', 1}
""")

# In the tenant's slot: a reference without an owner (ARGV: id, sha256, reference).
lua("xfer_asset_loose", """
if redis.call('HEXISTS', base .. 'loose', ARGV[1]) == 1 then return {'ok', 0} end
redis.call('HSET', base .. 'loose', ARGV[1], ARGV[3])
redis.call('HSETNX', base .. 'loose-sha', ARGV[2], ARGV[1])
redis.call('HSET', base .. 'assets', ARGV[1], '')
return {'ok', 1}
""")

# In the tenant's slot: grants, ARGV in fours (kind, store, principal, level).
lua("xfer_grants", """
local n = 0
for i = 1, #ARGV, 4 do
  local grants = base .. 'grants:' .. ARGV[i] .. ':' .. ARGV[i + 1]
  if redis.call('HSETNX', grants, ARGV[i + 2], ARGV[i + 3]) == 1 then
    redis.call('SADD', base .. 'grants-of:' .. ARGV[i + 2], ARGV[i] .. '\\0' .. ARGV[i + 1])
    n = n + 1
  end
end
return {'ok', n}
""")


def _script(core: RedisCore, name: str) -> Any:
    script = core._scripts.get(name)
    if script is None:
        script = core._scripts[name] = core._r.register_script(_SCRIPTS[name])
    return script


async def eval_all(core: RedisCore, calls: Sequence[tuple[str, Sequence[str], Sequence[Any]]]
                   ) -> list[Reply]:
    """Run scripts (name, keys, args) in order: one pipeline on a single Redis."""
    if core.cluster or len(calls) < 2:
        return [await core._eval(name, keys, args) for name, keys, args in calls]
    pipe = core._r.pipeline(transaction=False)
    try:
        for name, keys, args in calls:
            await _script(core, name)(keys=list(keys), args=list(args), client=pipe)
        replies: list[Reply] = await pipe.execute()
    except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
        raise core._fail(exc, write=True) from exc
    return replies


async def write_all(core: RedisCore, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Run write commands as one pipeline (spread over nodes on Cluster)."""
    if not commands:
        return []
    pipe = core._r.pipeline(transaction=False)
    try:
        for command in commands:
            pipe.execute_command(*command)
        found: list[Any] = await pipe.execute()
    except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
        raise core._fail(exc, write=True) from exc
    return found
