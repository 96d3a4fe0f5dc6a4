"""Checkpoints and pending writes in Redis.

A run's checkpoints live in its tree, next to the run record, in five keys:
``c:RUN`` (a sorted set of ``namespace NUL checkpoint_id`` by when each was first stored),
``cd:RUN`` (each one's parent, type tag, metadata and payload), ``cz:RUN`` (its create time
and stored bytes), ``cw:RUN`` (its pending writes, in the order first stored) and
``cm:RUN`` (counters: the next ordinal and the run's stored bytes). Every call checks the
full scope (tenant, store, session, actor, run) inside the script that reads or writes.

With ``checkpoint_ttl`` set, every write to a run's checkpoints sets those five keys to
expire that many seconds later, together: a run's checkpoints vanish as a whole once it
has stored none for that long (never one by one, which would break parent chains).

Retention and usage walk the tenant's runs and work on each run in one script, so each
run is changed atomically but a pass over the tenant is not one transaction.

It may touch Redis through ``_core``, the run part beside it, the checkpoint and run ports,
the time format (``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ... import model
from ..._ids import format_time, parse_time
from ...errors import CheckpointNotFound, RunNotFound, SessionNotFound
from ...model import JSON, CheckpointRecord, CheckpointScope, PendingWrite, RunUsage
from ..ports.checkpoints import Fence, NewCheckpoint, page_cut
from ..ports.runs import RunState, run_refusal
from ._core import CHECKPOINT_KINDS, Reply, lua, pack, text, unpack
from .runs import RunsInRedis, micros

__all__ = ["CheckpointsInRedis"]

_KEYS = f"""
local c, cd, cz = base .. 'c:' .. run, base .. 'cd:' .. run, base .. 'cz:' .. run
local cw, cm = base .. 'cw:' .. run, base .. 'cm:' .. run
local function touch(ttl)
  if ttl ~= '' then
    for _, kind in ipairs({{{", ".join(f"'{k}'" for k in CHECKPOINT_KINDS)}}}) do
      redis.call('EXPIRE', base .. kind .. ':' .. run, ttl)
    end
  end
end
local function field(s, pos)
  local colon = string.find(s, ':', pos, true)
  local n = tonumber(string.sub(s, pos, colon - 1))
  return string.sub(s, colon + 1, colon + n), colon + n + 1
end
-- a pending write: task id, index, channel, type tag, task path, payload
local function write_entry(s, pos)
  local start = pos
  local task, index, payload
  task, pos = field(s, pos)
  index, pos = field(s, pos)
  for _ = 1, 3 do _, pos = field(s, pos) end
  payload, pos = field(s, pos)
  return {{key = task .. '\\0' .. index, raw = string.sub(s, start, pos - 1), size = #payload}}, pos
end
local function stored(m)
  return {{m, redis.call('HGET', cd, m), redis.call('HGET', cz, m),
          redis.call('HGET', cw, m) or ''}}
end
-- drops member m; its payload and its writes took pb and wb bytes, which it returns
local function forget(m, pb, wb)
  redis.call('ZREM', c, m)
  redis.call('HDEL', cd, m)
  redis.call('HDEL', cz, m)
  redis.call('HDEL', cw, m)
  return tonumber(pb) + tonumber(wb)
end
"""

# ARGV[5..6]: the fence; ARGV[7..12]: ttl ('' for none), member, packed checkpoint,
# payload bytes, time, its microseconds. Replies the create time and the pending writes.
lua("cp_put", _KEYS + """
local m = ARGV[8]
local old = redis.call('HGET', cz, m)
local pbytes = tonumber(ARGV[10])
local created
if old then
  local us, pb, wb, ct = string.match(old, '^(%d+) (%d+) (%d+) (.*)$')
  redis.call('HSET', cz, m, us .. ' ' .. pbytes .. ' ' .. wb .. ' ' .. ct)
  redis.call('HINCRBY', cm, 'bytes', pbytes - tonumber(pb))
  created = ct
else
  redis.call('ZADD', c, redis.call('HINCRBY', cm, 'seq', 1), m)
  redis.call('HSET', cz, m, ARGV[12] .. ' ' .. pbytes .. ' 0 ' .. ARGV[11])
  redis.call('HINCRBY', cm, 'bytes', pbytes)
  created = ARGV[11]
end
redis.call('HSET', cd, m, ARGV[9])
touch(ARGV[7])
return {'ok', created, redis.call('HGET', cw, m) or ''}
""", on="fenced")

# ARGV[5..6]: the fence; ARGV[7..]: ttl, member, then each write packed.
lua("cp_put_writes", _KEYS + """
local m = ARGV[8]
local sizes = redis.call('HGET', cz, m)
if not sizes then return {'@nocp'} end
local list, index = {}, {}
local cur = redis.call('HGET', cw, m) or ''
local pos = 1
while pos <= #cur do
  local w
  w, pos = write_entry(cur, pos)
  list[#list + 1] = w
  index[w.key] = #list
end
local delta = 0
for i = 9, #ARGV do
  local w = write_entry(ARGV[i], 1)
  local at = index[w.key]
  if at then
    delta = delta + w.size - list[at].size
    list[at] = w
  else
    list[#list + 1] = w
    index[w.key] = #list
    delta = delta + w.size
  end
end
local out = {}
for i, w in ipairs(list) do out[i] = w.raw end
if #out > 0 then redis.call('HSET', cw, m, table.concat(out)) end
local us, pb, wb, ct = string.match(sizes, '^(%d+) (%d+) (%d+) (.*)$')
redis.call('HSET', cz, m, us .. ' ' .. pb .. ' ' .. (tonumber(wb) + delta) .. ' ' .. ct)
redis.call('HINCRBY', cm, 'bytes', delta)
touch(ARGV[7])
return {'ok'}
""", on="fenced")

# ARGV[5..7]: namespace, checkpoint id, '1' for the newest in the namespace.
lua("cp_get", _KEYS + """
local m
if ARGV[7] == '1' then
  local prefix = ARGV[5] .. '\\0'
  local n = redis.call('ZCARD', c)
  local i = 0
  while i < n and not m do
    for _, x in ipairs(redis.call('ZREVRANGE', c, i, i + 63)) do
      if string.sub(x, 1, #prefix) == prefix then
        m = x
        break
      end
    end
    i = i + 64
  end
  if not m then return {'ok'} end
else
  m = ARGV[5] .. '\\0' .. ARGV[6]
end
if not redis.call('HGET', cz, m) then return {'ok'} end
local out = stored(m)
table.insert(out, 1, 'ok')
return out
""", on="scoped")

# ARGV[5..8]: namespace, '1' when a namespace is given, before ('' for none), limit ('' for
# none). Replies newest first.
lua("cp_list", _KEYS + """
local chosen = {}
local members = redis.call('ZREVRANGE', c, 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local m = members[i]
  local cut = string.find(m, '\\0', 1, true)
  if ARGV[6] ~= '1' or string.sub(m, 1, cut - 1) == ARGV[5] then
    chosen[#chosen + 1] = {m, tonumber(members[i + 1]), string.sub(m, cut + 1)}
  end
end
if ARGV[7] ~= '' then
  local mark
  for _, e in ipairs(chosen) do
    if e[3] == ARGV[7] and (not mark or e[2] > mark) then mark = e[2] end
  end
  if not mark then return {'@nocp'} end
  local kept = {}
  for _, e in ipairs(chosen) do if e[2] < mark then kept[#kept + 1] = e end end
  chosen = kept
end
local limit = #chosen
if ARGV[8] ~= '' then limit = math.min(limit, tonumber(ARGV[8])) end
local out = {'ok'}
for i = 1, limit do
  for _, x in ipairs(stored(chosen[i][1])) do out[#out + 1] = x end
end
return out
""", on="scoped")

# ARGV[5..10]: namespace, '1' when a namespace is given, before ('' for none), a position
# to go on from ('' for the start), most entries, most bytes. Replies whether more
# follow, then position, member and stored fields of each entry, newest first: as many as
# fit in the bytes (at least one), so a page never loads more than it may return.
lua("cp_page", _KEYS + """
local function wanted(m)
  return ARGV[6] ~= '1' or string.sub(m, 1, string.find(m, '\\0', 1, true) - 1) == ARGV[5]
end
local top = '+inf'
if ARGV[8] ~= '' then top = '(' .. ARGV[8] end
if ARGV[7] ~= '' then
  local mark
  local members = redis.call('ZREVRANGE', c, 0, -1, 'WITHSCORES')
  for i = 1, #members, 2 do
    local m = members[i]
    if wanted(m) and string.sub(m, string.find(m, '\\0', 1, true) + 1) == ARGV[7] then
      mark = tonumber(members[i + 1])
      break
    end
  end
  if not mark then return {'@nocp'} end
  if ARGV[8] == '' or mark < tonumber(ARGV[8]) then top = '(' .. mark end
end
local most, room = tonumber(ARGV[9]), tonumber(ARGV[10])
local out = {'ok', '0'}
local n, used = 0, 0
local members = redis.call('ZREVRANGEBYSCORE', c, top, '-inf', 'WITHSCORES')
for i = 1, #members, 2 do
  local m = members[i]
  if wanted(m) then
    local _, pb, wb = string.match(redis.call('HGET', cz, m), '^(%d+) (%d+) (%d+)')
    local size = tonumber(pb) + tonumber(wb)
    if n >= most or (n > 0 and used + size > room) then
      out[2] = '1'
      break
    end
    n, used = n + 1, used + size
    out[#out + 1] = members[i + 1]
    for _, x in ipairs(stored(m)) do out[#out + 1] = x end
  end
end
return out
""", on="scoped")

# ARGV[5..6]: the fence; ARGV[7..8]: namespace, '1' when a namespace is given; ARGV[9..]:
# the checkpoint ids.
# Keeps every index of the run consistent: the order (c), data (cd), sizes (cz), writes
# (cw) and the run's stored bytes (cm). The ordinal counter in cm only grows, so a
# checkpoint stored again under a deleted id takes the newest place. Deleting stores
# nothing, so the expiry is left as the last write set it.
lua("cp_delete", _KEYS + """
local doomed = {}
if ARGV[8] == '1' then
  for i = 9, #ARGV do doomed[#doomed + 1] = ARGV[7] .. '\\0' .. ARGV[i] end
elseif #ARGV >= 9 then
  local wanted = {}
  for i = 9, #ARGV do wanted[ARGV[i]] = true end
  for _, m in ipairs(redis.call('ZRANGE', c, 0, -1)) do
    if wanted[string.sub(m, string.find(m, '\\0', 1, true) + 1)] then
      doomed[#doomed + 1] = m
    end
  end
end
local deleted, freed = 0, 0
for _, m in ipairs(doomed) do
  local sizes = redis.call('HGET', cz, m)
  if sizes then
    local _, pb, wb = string.match(sizes, '^(%d+) (%d+) (%d+)')
    deleted = deleted + 1
    freed = freed + forget(m, pb, wb)
  end
end
if freed > 0 then redis.call('HINCRBY', cm, 'bytes', -freed) end
return {'ok', deleted}
""", on="fenced")

lua("cp_delete_run", _KEYS + """
local n = redis.call('ZCARD', c)
redis.call('DEL', c, cd, cz, cw, cm)
return {'ok', n}
""", on="scoped")

# Oldest first, for copying.
lua("cp_dump", _KEYS + """
local out = {'ok'}
for _, m in ipairs(redis.call('ZRANGE', c, 0, -1)) do
  for _, x in ipairs(stored(m)) do out[#out + 1] = x end
end
return out
""", on="scoped")

# ARGV[5..]: ttl, then member, checkpoint, sizes, writes for each checkpoint, oldest first.
lua("cp_load", _KEYS + """
redis.call('DEL', c, cd, cz, cw, cm)
local bytes, n = 0, 0
for i = 6, #ARGV, 4 do
  local m = ARGV[i]
  redis.call('ZADD', c, redis.call('HINCRBY', cm, 'seq', 1), m)
  redis.call('HSET', cd, m, ARGV[i + 1])
  redis.call('HSET', cz, m, ARGV[i + 2])
  if ARGV[i + 3] ~= '' then redis.call('HSET', cw, m, ARGV[i + 3]) end
  local _, pb, wb = string.match(ARGV[i + 2], '^(%d+) (%d+) (%d+)')
  bytes = bytes + tonumber(pb) + tonumber(wb)
  n = n + 1
end
if n > 0 then redis.call('HINCRBY', cm, 'bytes', bytes) end
touch(ARGV[5])
return {'ok', n}
""", on="scoped")

# On a session's tree: ARGV[3] is the actor the caller names.
lua("cp_delete_session", f"""
if redis.call('HGET', skey, 'actor') ~= ARGV[3] then return {{'@gone'}} end
local n = 0
for _, run in ipairs(redis.call('ZRANGE', base .. 'runs:' .. sid, 0, -1)) do
  n = n + redis.call('ZCARD', base .. 'c:' .. run)
  for _, kind in ipairs({{{", ".join(f"'{k}'" for k in CHECKPOINT_KINDS)}}}) do
    redis.call('DEL', base .. kind .. ':' .. run)
  end
end
return {{'ok', n}}
""", on="tree")

# ARGV[4..6]: keep last ('' for no limit), cutoff in microseconds ('' for none), '1' to
# drop all of an ended run's.
lua("cp_retain", _KEYS + """
if redis.call('ZCARD', c) == 0 then return {'ok', 0, 0} end
local ended = false
if ARGV[6] == '1' then
  local st = redis.call('HGET', rkey, 'st')
  ended = st ~= 'running' and st ~= 'awaiting_human'
end
local keep = tonumber(ARGV[4])
local cutoff = tonumber(ARGV[5])
local kept = {}
local deleted, freed = 0, 0
for _, m in ipairs(redis.call('ZREVRANGE', c, 0, -1)) do
  local ns = string.sub(m, 1, string.find(m, '\\0', 1, true) - 1)
  kept[ns] = (kept[ns] or 0) + 1
  local us, pb, wb = string.match(redis.call('HGET', cz, m), '^(%d+) (%d+) (%d+)')
  if ended or (keep and kept[ns] > keep) or (cutoff and tonumber(us) < cutoff) then
    deleted = deleted + 1
    freed = freed + forget(m, pb, wb)
  end
end
if freed > 0 then redis.call('HINCRBY', cm, 'bytes', -freed) end
return {'ok', deleted, freed}
""", on="run")


def _canonical(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))



def _pack_write(write: PendingWrite) -> bytes:
    return pack([write.task_id.encode(), str(write.index).encode(), write.channel.encode(),
                 write.type_tag.encode(), write.task_path.encode(), bytes(write.payload)])


def _writes(raw: bytes) -> tuple[PendingWrite, ...]:
    fields = unpack(raw)
    return tuple(
        PendingWrite(fields[i].decode(), int(fields[i + 1]), fields[i + 2].decode(),
                     fields[i + 3].decode(), fields[i + 5], task_path=fields[i + 4].decode())
        for i in range(0, len(fields), 6))


def _record(run_id: str, member: bytes, data: bytes, sizes: bytes,
            writes: bytes) -> CheckpointRecord:
    namespace, _, checkpoint_id = member.partition(b"\x00")
    parent, type_tag, metadata, payload = unpack(data)
    return CheckpointRecord(
        run_id=run_id, namespace=namespace.decode(), checkpoint_id=checkpoint_id.decode(),
        parent_checkpoint_id=parent.decode() or None, type_tag=type_tag.decode(),
        payload=payload, metadata=json.loads(metadata),
        create_time=parse_time(sizes.split(b" ", 3)[3].decode()),
        pending_writes=_writes(writes))


def _records(run_id: str, reply: Reply) -> list[CheckpointRecord]:
    return [_record(run_id, *reply[i:i + 4]) for i in range(1, len(reply), 4)]


class CheckpointsInRedis(RunsInRedis):
    # helpers ---------------------------------------------------------------------------

    def _ttl(self) -> str:
        return str(self.checkpoint_ttl) if self.checkpoint_ttl is not None else ""

    async def _scoped(self, tenant: str, scope: CheckpointScope, name: str,
                      args: Sequence[Any], *, write: bool = True) -> Reply:
        """Run a checkpoint script with the whole scope applied; RunNotFound (one error,
        one message) when the run is missing or outside the scope."""
        try:
            _, reply = await self._tree(tenant, scope.store, scope.session_id, name,
                                        [scope.run_id, scope.actor_id, *args], write=write)
        except SessionNotFound:
            raise RunNotFound(run_id=scope.run_id) from None
        if reply[0] == b"@norun":
            raise RunNotFound(run_id=scope.run_id)
        return reply

    async def _fenced(self, tenant: str, scope: CheckpointScope, name: str,
                      fence: Fence | None, args: Sequence[Any]) -> Reply:
        """Run a fenced write script (see ``fenced`` in ``_core.lua``): the fence is
        checked in the script that writes, before it changes anything."""
        reply = await self._scoped(tenant, scope, name, [
            fence.run_id if fence is not None else "",
            fence.fencing_token if fence is not None else "", *args])
        if fence is not None and reply[0] in (b"@nofence", b"@stale", b"@closed"):
            if reply[0] == b"@nofence":
                raise RunNotFound(run_id=fence.run_id)
            # the script names the first rule it broke: a newer token, or the run's end
            state = (RunState("running", int(reply[1])) if reply[0] == b"@stale"
                     else RunState(text(reply[1]), fence.fencing_token))
            refusal = run_refusal(fence.run_id, state, fence.fencing_token)
            assert refusal is not None
            raise refusal
        return reply

    # writes ----------------------------------------------------------------------------

    async def put_checkpoint(self, tenant: str, scope: CheckpointScope,
                             checkpoint: NewCheckpoint, fence: Fence | None,
                             now: datetime) -> CheckpointRecord:
        member = f"{checkpoint.namespace}\x00{checkpoint.checkpoint_id}"
        packed = pack([(checkpoint.parent_checkpoint_id or "").encode(),
                       checkpoint.type_tag.encode(), checkpoint.metadata_json.encode(),
                       checkpoint.payload])
        reply = await self._fenced(
            tenant, scope, "cp_put", fence,
            [self._ttl(), member, packed, len(checkpoint.payload), format_time(now),
             micros(now)])
        return CheckpointRecord(
            run_id=scope.run_id, namespace=checkpoint.namespace,
            checkpoint_id=checkpoint.checkpoint_id,
            parent_checkpoint_id=checkpoint.parent_checkpoint_id,
            type_tag=checkpoint.type_tag, payload=bytes(checkpoint.payload),
            metadata=json.loads(checkpoint.metadata_json),
            create_time=parse_time(text(reply[1])), pending_writes=_writes(reply[2]))

    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         fence: Fence | None, now: datetime) -> None:
        reply = await self._fenced(
            tenant, scope, "cp_put_writes", fence,
            [self._ttl(), f"{namespace}\x00{checkpoint_id}", *map(_pack_write, writes)])
        if reply[0] == b"@nocp":
            raise CheckpointNotFound(
                run_id=scope.run_id, checkpoint_id=checkpoint_id,
                namespace=namespace)

    # reads -----------------------------------------------------------------------------

    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        reply = await self._scoped(
            tenant, scope, "cp_get",
            [namespace, checkpoint_id or "", "1" if checkpoint_id is None else "0"],
            write=False)
        if len(reply) == 1:
            return None
        return _record(scope.run_id, *reply[1:5])

    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        wanted = {key: _canonical(value) for key, value in metadata.items()}
        reply = await self._scoped(
            tenant, scope, "cp_list",
            [namespace or "", "1" if namespace is not None else "0", before or "",
             "" if limit is None or wanted else limit], write=False)
        if reply[0] == b"@nocp":
            raise CheckpointNotFound(run_id=scope.run_id, checkpoint_id=before)
        found = _records(scope.run_id, reply)
        if wanted:
            found = [r for r in found
                     if all(k in r.metadata and _canonical(r.metadata[k]) == v
                            for k, v in wanted.items())]
            if limit is not None:
                found = found[:limit]
        return found

    async def page_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, after: int | None, limit: int,
                               max_bytes: int) -> tuple[list[CheckpointRecord], int | None]:
        # The script cuts by size; a metadata filter is applied here, so it reads on
        # (a bounded batch a call) until the page is full or nothing is left.
        wanted = {key: _canonical(value) for key, value in metadata.items()}
        found: list[tuple[int, int, CheckpointRecord]] = []  # position, bytes, record
        cursor = after
        while True:
            reply = await self._scoped(
                tenant, scope, "cp_page",
                [namespace or "", "1" if namespace is not None else "0", before or "",
                 "" if cursor is None else cursor, limit + 1, max_bytes], write=False)
            if reply[0] == b"@nocp":
                raise CheckpointNotFound(run_id=scope.run_id, checkpoint_id=before)
            for i in range(2, len(reply), 5):
                cursor = int(reply[i])
                record = _record(scope.run_id, *reply[i + 1:i + 5])
                if all(k in record.metadata and _canonical(record.metadata[k]) == v
                       for k, v in wanted.items()):
                    size = len(record.payload) + sum(len(w.payload)
                                                     for w in record.pending_writes)
                    found.append((cursor, size, record))
            taken, _ = page_cut([f[1] for f in found], limit, max_bytes)
            if reply[1] != b"1" or taken < len(found):
                break
        taken, more = page_cut([f[1] for f in found], limit, max_bytes)
        return [f[2] for f in found[:taken]], found[taken - 1][0] if more else None

    # deletes and copies ----------------------------------------------------------------

    async def delete_checkpoints(self, tenant: str, scope: CheckpointScope,
                                 namespace: str | None, checkpoint_ids: Sequence[str],
                                 fence: Fence | None) -> int:
        reply = await self._fenced(
            tenant, scope, "cp_delete", fence,
            [namespace or "", "1" if namespace is not None else "0", *checkpoint_ids])
        return int(reply[1])

    async def delete_run_checkpoints(self, tenant: str, scope: CheckpointScope) -> int:
        reply = await self._scoped(tenant, scope, "cp_delete_run", [])
        return int(reply[1])

    async def delete_session_checkpoints(self, tenant: str, actor_id: str, store: str,
                                         session_id: str) -> int:
        _, reply = await self._tree(tenant, store, session_id, "cp_delete_session",
                                    [actor_id])
        if reply[0] != b"ok":
            raise SessionNotFound(store=store, session_id=session_id)
        return int(reply[1])

    async def copy_checkpoints(self, tenant: str, source: CheckpointScope,
                               target: CheckpointScope) -> int:
        dump = await self._scoped(tenant, source, "cp_dump", [], write=False)
        if source.run_id == target.run_id:
            await self._scoped(tenant, target, "cp_dump", [], write=False)
            return (len(dump) - 1) // 4
        loaded = await self._scoped(tenant, target, "cp_load", [self._ttl(), *dump[1:]])
        return int(loaded[1])

    # housekeeping ----------------------------------------------------------------------

    async def _tenant_runs(self, tenant: str) -> list[str]:
        return [text(r) for r in await self._command(
            "ZRANGE", self.tenant_key(tenant) + "run-order", 0, -1, write=False)]

    async def _usage(self, tenant: str, run_ids: Sequence[str]) -> list[RunUsage]:
        located = await self._locate_runs(tenant, run_ids)
        commands: list[tuple[Any, ...]] = []
        for run_id, (store, _, root) in located.items():
            base = self.tree_key(tenant, store, root)
            commands += [("ZCARD", f"{base}c:{run_id}"), ("HGET", f"{base}cm:{run_id}", "bytes")]
        counts = await self._read(commands)
        usage = [RunUsage(run_id, int(counts[2 * n]), int(counts[2 * n + 1] or 0))
                 for n, run_id in enumerate(located) if int(counts[2 * n])]
        usage.sort(key=lambda u: (-u.stored_bytes, u.run_id))
        return usage

    async def apply_retention(self, tenant: str, policy: model.RetentionPolicy,
                              now: datetime) -> model.RetentionReport:
        cutoff = ""
        if policy.max_age_seconds is not None:
            cutoff = str(micros(now - timedelta(seconds=policy.max_age_seconds)))
        keep = "" if policy.keep_last is None else str(policy.keep_last)
        deleted = freed = 0
        for held in await self._usage(tenant, await self._tenant_runs(tenant)):
            try:
                reply = await self._run_call(tenant, held.run_id, "cp_retain",
                                             [keep, cutoff, "1" if policy.drop_when_run_ends
                                              else "0"])
            except RunNotFound:
                continue
            deleted += int(reply[1])
            freed += int(reply[2])
        return model.RetentionReport(checkpoints_deleted=deleted, bytes_freed=freed)

    async def checkpoint_usage(self, tenant: str, run_id: str | None) -> list[RunUsage]:
        runs = [run_id] if run_id is not None else await self._tenant_runs(tenant)
        return await self._usage(tenant, runs)
