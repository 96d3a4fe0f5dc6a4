"""Session stores, sessions and items in Redis.

A store is a hash ``{T/S}:store`` (``state`` is ``live``, or ``deleting`` while a delete is
under way) with ``{T/S}:index``, a sorted set holding one entry per session creation
(``ordinal NUL session [NUL root]``, scored by the ordinal), and the tenant's
``{T}:stores`` lists its name. A session ``X`` of tree ``R`` is the hash ``{T/S/R}:s:X``
(actor, parent, root, metadata, times, ordinal); its items are one append-only string
``{T/S/R}:l:X`` with their end offsets in ``o:X`` (item ``seq`` is the ``seq``-th; see
``ITEMS`` in _core.py), ``ix:X`` maps item ids to seqs and ``ik:X`` idempotency keys to
what their first call stored.

Creating a session is two steps: an index entry in the store's slot, then the session in
its own slot (refused, and the entry withdrawn, if the id is taken). A fork is four: read
the parent, an index entry, a claim on the new id in its own slot, then the copy inside
the parent's tree. Listing reads the index and skips entries whose session does not exist
(or exists as another creation of that id).

It may touch Redis through ``_core`` and ``_grants``, the session port, the embeddings, the
time format (``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ... import errors
from ..._ids import format_time, parse_time
from ...embeddings import Embedding
from ...embeddings._protocol import one_model
from ...model import Item, SessionRecord, SessionStoreRecord
from ..ports.sessions import NewItem, SessionOrder, changed_labels, forked_record
from ._core import (
    CLAIM_GRACE_MS,
    DROP,
    ITEM_INDEX,
    ITEM_KEY,
    ITEMS,
    ITEMS_ADD,
    MAX_LOG_BYTES,
    RedisCore,
    Reply,
    claim_age_ms,
    decode_items,
    encode_item,
    item_key,
    lua,
    search_document,
    text,
)
from ._grants import claim_scripts, create_with_grants, drop_store_grants

__all__ = ["SessionsInRedis"]

T = TypeVar("T")

_SESSION_FIELDS = ("actor", "parent", "root", "meta", "ct", "lat")
_GET = "local f = redis.call('HMGET', skey, 'actor', 'parent', 'root', 'meta', 'ct', 'lat')\n"
_RETURN_RECORD = _GET + "return {'ok', f[1], f[2], f[3], f[4], f[5], f[6]}\n"

# -- stores ----------------------------------------------------------------------------

lua("stores_remove", """
redis.call('ZREM', base .. 'stores', ARGV[1])
return {'ok'}
""")

claim_scripts("store")

# ARGV[1] is '1' to force; the rest are index entries the caller found dangling. Replies
# the store's nonce, then its index entries.
lua("store_close", """
local f = redis.call('HMGET', base .. 'store', 'state', 'gen')
local state = f[1]
if not state or state == 'creating' then return {'@nostore'} end
for i = 2, #ARGV do redis.call('ZREM', base .. 'index', ARGV[i]) end
local members = redis.call('ZRANGE', base .. 'index', 0, -1)
if state == 'live' then
  if ARGV[1] ~= '1' and #members > 0 then
    table.insert(members, 1, '@members')
    return members
  end
  redis.call('HSET', base .. 'store', 'state', 'deleting')
end
table.insert(members, 1, f[2] or '')
table.insert(members, 1, 'ok')
return members
""")

lua("store_finish", """
if redis.call('HGET', base .. 'store', 'state') == 'deleting' then
  redis.call('DEL', base .. 'store', base .. 'index', base .. 'seq')
end
return {'ok'}
""")

lua("store_reserve", """
if redis.call('HGET', base .. 'store', 'state') ~= 'live' then return {'@nostore'} end
local ord = redis.call('INCR', base .. 'seq')
local member = ord .. '\\0' .. ARGV[1]
if ARGV[2] ~= ARGV[1] then member = member .. '\\0' .. ARGV[2] end
redis.call('ZADD', base .. 'index', ord, member)
return {'ok', ord}
""")

# ARGV: the model and dimension of vectors about to be stored with items. The store's
# item vectors are all of one model: the first to be stored fixes it. Replies the model
# and dimension the store keeps, and the generation of its vectors (``ivg``: see
# vectors.py).
lua("store_item_space", """
if redis.call('HGET', base .. 'store', 'state') ~= 'live' then return {'@nostore'} end
local found = redis.call('HMGET', base .. 'store', 'ivm', 'ivd', 'ivg')
if not found[1] then
  redis.call('HSET', base .. 'store', 'ivm', ARGV[1], 'ivd', ARGV[2])
  return {'ok', ARGV[1], ARGV[2], found[3] or '0'}
end
return {'ok', found[1], found[2], found[3] or '0'}
""")

# -- sessions --------------------------------------------------------------------------

_NOW_MS = ("local t = redis.call('TIME')\n"
           "local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)\n")

# In the new session's own slot. ARGV: id, actor, metadata, time, ordinal, claim to take
# over ('' for none), '1' when its store keeps items out of search.
lua("session_create", _NOW_MS + """
local sid = ARGV[1]
local skey = base .. 's:' .. sid
if redis.call('EXISTS', skey) == 1 then return {'@exists'} end
local claim = redis.call('GET', base .. 'fork')
if claim then
  if claim ~= ARGV[6] then return {'@claimed', claim, now_ms} end
  redis.call('DEL', base .. 'fork')
end
redis.call('HSET', skey, 'actor', ARGV[2], 'root', sid, 'meta', ARGV[3], 'ct', ARGV[4],
           'lat', ARGV[4], 'ord', ARGV[5])
if ARGV[7] == '1' then redis.call('HSET', skey, 'nx', '1') end
return {'ok'}
""")

# In a fork's own slot: claim its id for the tree ARGV[2]. ARGV: id, root, claim to take
# over, nonce.
lua("fork_claim", _NOW_MS + """
local sid = ARGV[1]
if redis.call('EXISTS', base .. 's:' .. sid) == 1 then return {'@exists'} end
local claim = redis.call('GET', base .. 'fork')
if claim and claim ~= ARGV[3] then return {'@claimed', claim, now_ms} end
local value = ARGV[2] .. '|' .. now_ms .. '|' .. ARGV[4]
redis.call('SET', base .. 'fork', value)
return {'ok', value}
""")

lua("session_get", _RETURN_RECORD, on="tree")

lua("session_exists", """
return {'ok', redis.call('EXISTS', base .. 's:' .. ARGV[1])}
""")

# ARGV[3]: the metadata JSON read before, ARGV[4]: the new one.
lua("session_set_meta", """
if redis.call('HGET', skey, 'meta') ~= ARGV[3] then return {'@changed'} end
redis.call('HSET', skey, 'meta', ARGV[4])
""" + _RETURN_RECORD, on="tree")

lua("session_delete", DROP + """
local kids = redis.call('ZRANGE', base .. 'kids:' .. sid, 0, -1)
if #kids > 0 and ARGV[3] ~= '1' then
  table.insert(kids, 1, '@children')
  return kids
end
if ARGV[4] and ARGV[4] ~= redis.call('HGET', skey, 'actor') then return {'@other'} end
local parent = redis.call('HGET', skey, 'parent')
if parent then redis.call('ZREM', base .. 'kids:' .. parent, sid) end
local gone, runs, assets = drop(collect(sid))
return {'ok', gone, runs, assets}
""", on="tree")

# On the parent. ARGV[3..8]: child id, up-to item key (or ''), time, ordinal, nonce, claim.
lua("session_fork", ITEMS + ITEM_KEY + ITEM_INDEX + """
local child = ARGV[3]
local plog, poff = base .. 'l:' .. sid, base .. 'o:' .. sid
local cut = items_count(poff)
if ARGV[4] ~= '' then
  local seq = redis.call('HGET', base .. 'ix:' .. sid, ARGV[4])
  if not seq then return {'@noitem'} end
  cut = tonumber(seq)
end
local ckey = base .. 's:' .. child
if redis.call('EXISTS', ckey) == 1 then return {'@exists'} end
local p = redis.call('HMGET', skey, 'actor', 'root', 'meta', 'nx')
if cut > 0 then
  local log = redis.call('GETRANGE', plog, 0, item_end(poff, cut) - 1)
  local offsets = redis.call('GETRANGE', poff, 0, cut * W - 1)
  local parts, ends, ix = {}, {}, {}
  local from, pos = 2, 0
  for seq = 1, cut do
    local stop = tonumber(string.sub(offsets, (seq - 1) * W + 1, seq * W))
    local el = string.sub(log, from, stop)
    local _, q = item_key(el)
    local id = 'itm_' .. string.sub(redis.sha1hex(ARGV[7] .. ':' .. seq), 1, 32)
    parts[seq] = ',["' .. id .. '"' .. string.sub(el, q + 1)
    pos = pos + #parts[seq]
    ends[seq] = string.format('%0' .. W .. 'd', pos)
    ix[#ix + 1] = id
    ix[#ix + 1] = seq
    from = stop + 2
    if #ix >= 1000 then
      redis.call('HSET', base .. 'ix:' .. child, unpack(ix))
      ix = {}
    end
  end
  if #ix > 0 then redis.call('HSET', base .. 'ix:' .. child, unpack(ix)) end
  redis.call('SET', base .. 'l:' .. child, table.concat(parts))
  redis.call('SET', base .. 'o:' .. child, table.concat(ends))
  for seq = 1, cut do
    local doc = redis.call('HGET', base .. 'xd:' .. sid, seq)
    if doc then ix_add(child, seq, doc) end
    local vec = redis.call('HGET', base .. 'iv:' .. sid, seq)
    if vec then redis.call('HSET', base .. 'iv:' .. child, seq, vec) end
  end
  local gen = redis.call('HGET', base .. 'iv:' .. sid, 'g')
  if gen then redis.call('HSET', base .. 'iv:' .. child, 'g', gen) end
end
redis.call('HSET', ckey, 'actor', p[1], 'parent', sid, 'root', p[2], 'meta', p[3],
           'ct', ARGV[5], 'lat', ARGV[5], 'ord', ARGV[6], 'claim', ARGV[8])
if p[4] then redis.call('HSET', ckey, 'nx', p[4]) end
redis.call('ZADD', base .. 'kids:' .. sid, ARGV[6], child)
return {'ok', p[1], p[2], p[3]}
""", on="tree")

# -- items -----------------------------------------------------------------------------

# ARGV[3..7]: time, idempotency key ('' for none), request hash, item keys as JSON, count;
# then the item keys, the encoded items, their search documents (see ITEM_INDEX), their
# vectors ('' for none) and the generation of those vectors ('' when there are none; see
# vectors.py: they are not written when the session holds a later one's). Replies the
# first seq, or for a replayed key the seqs and the items then stored (and still there).
lua("items_append", ITEMS + ITEM_INDEX + ITEMS_ADD + """
local lkey, okey = base .. 'l:' .. sid, base .. 'o:' .. sid
local ix = base .. 'ix:' .. sid
if ARGV[4] ~= '' then
  local seen = redis.call('HGET', base .. 'ik:' .. sid, ARGV[4])
  if seen then
    local nl = string.find(seen, '\\n', 1, true)
    if string.sub(seen, 1, nl - 1) ~= ARGV[5] then return {'@reused'} end
    local seqs = {}
    for _, id in ipairs(cjson.decode(string.sub(seen, nl + 1))) do
      local s = redis.call('HGET', ix, id)
      if s then seqs[#seqs + 1] = tonumber(s) end
    end
    table.sort(seqs)
    local out = {'@replay'}
    for _, s in ipairs(seqs) do
      out[#out + 1] = s
      out[#out + 1] = items_span(lkey, okey, s, s)
    end
    return out
  end
end
local n = items_count(okey)
local count = tonumber(ARGV[7])
local full = items_add(sid, skey, n, 7, count)
if full then return {'@full', full} end
local vkey = base .. 'iv:' .. sid
if ARGV[8 + 4 * count] ~= '' and redis.call('HGET', skey, 'nx') ~= '1'
    and vectors_of(vkey, tonumber(ARGV[8 + 4 * count])) then
  for j = 1, count do
    local vec = ARGV[7 + 3 * count + j]
    if vec ~= '' then redis.call('HSET', vkey, n + j, vec) end
  end
end
redis.call('HSET', skey, 'lat', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', base .. 'ik:' .. sid, ARGV[4], ARGV[5] .. '\\n' .. ARGV[6])
end
return {'ok', n + 1}
""", on="tree")

# ARGV[3..5]: descending ('1'/'0'), limit, after seq ('' for none). Replies the first seq
# and the items in ascending order, as one span of the log.
lua("items_list", ITEMS + """
local lkey, okey = base .. 'l:' .. sid, base .. 'o:' .. sid
local n = items_count(okey)
local limit = tonumber(ARGV[4])
local first, last
if ARGV[3] == '1' then
  last = n
  if ARGV[5] ~= '' then last = math.min(last, tonumber(ARGV[5]) - 1) end
  first = math.max(1, last - limit + 1)
else
  first = 1
  if ARGV[5] ~= '' then first = math.max(1, tonumber(ARGV[5]) + 1) end
  last = math.min(n, first + limit - 1)
end
return {'ok', first, items_span(lkey, okey, first, last)}
""", on="tree")

lua("items_get", ITEMS + """
local seq = redis.call('HGET', base .. 'ix:' .. sid, ARGV[3])
if not seq then return {'@noitem'} end
seq = tonumber(seq)
return {'ok', seq, items_span(base .. 'l:' .. sid, base .. 'o:' .. sid, seq, seq)}
""", on="tree")

lua("items_pop", ITEMS + ITEM_KEY + ITEM_INDEX + """
local lkey, okey = base .. 'l:' .. sid, base .. 'o:' .. sid
local n = items_count(okey)
if n == 0 then return {'@empty'} end
local span = items_span(lkey, okey, n, n)
items_keep(lkey, okey, n - 1)
ix_drop(sid, n)
redis.call('HDEL', base .. 'ix:' .. sid, (item_key(string.sub(span, 2))))
redis.call('HSET', skey, 'lat', ARGV[3])
return {'ok', n, span}
""", on="tree")

lua("items_clear", ITEMS + ITEM_INDEX + """
local n = items_count(base .. 'o:' .. sid)
ix_drop_session(sid)
redis.call('DEL', base .. 'l:' .. sid, base .. 'o:' .. sid, base .. 'ix:' .. sid)
redis.call('HSET', skey, 'lat', ARGV[3])
return {'ok', n}
""", on="tree")


def _record_from_reply(tenant: str, store: str, session_id: str,
                       reply: Reply) -> SessionRecord:
    return RedisCore._session_record(tenant, store, session_id, reply[1:7])


class SessionsInRedis(RedisCore):
    # stores ----------------------------------------------------------------------------

    async def create_store(self, tenant: str, name: str, now: datetime,
                           owner: str | None = None, index_items: bool = True,
                           ) -> SessionStoreRecord:
        # Which stores do not index items is a tenant-wide set, written before the store
        # exists (a store made again with the default is indexed again).
        await self._command("SADD" if not index_items else "SREM",
                            self.tenant_key(tenant) + "unindexed", name, write=True)
        await create_with_grants(
            self, "store", self.store_key(tenant, name), tenant, "session_store", name, owner,
            "stores", now, lambda: self._delete_store_now(tenant, name, force=True),
            "session store")
        return SessionStoreRecord(tenant=tenant, name=name, create_time=now)

    async def _store_states(self, tenant: str, names: Sequence[str]) -> list[Any]:
        return await self._read([("HMGET", self.store_key(tenant, n) + "store", "state", "ct")
                                 for n in names])

    async def get_store(self, tenant: str, name: str) -> SessionStoreRecord:
        (state,) = await self._store_states(tenant, [name])
        if state[0] != b"live":
            raise errors.StoreNotFound(store=name)
        return SessionStoreRecord(tenant=tenant, name=name, create_time=parse_time(text(state[1])))

    async def list_stores(
        self, tenant: str, limit: int, after: str | None
    ) -> list[SessionStoreRecord]:
        return await self._list_named(tenant, "stores", limit, after, self._store_states,
                                      SessionStoreRecord)

    async def _list_named(
        self, tenant: str, index: str, limit: int, after: str | None,
        states: Callable[[str, Sequence[str]], Awaitable[list[Any]]],
        record: Callable[..., T],
    ) -> list[T]:
        """Names from the tenant's ``index`` (by name, after ``after``) whose record is
        live, up to ``limit``."""
        found: list[T] = []
        low = f"({after}" if after is not None else "-"
        while len(found) < limit:
            batch = max(limit - len(found), 16)
            names = [text(n) for n in await self._command(
                "ZRANGEBYLEX", self.tenant_key(tenant) + index, low, "+", "LIMIT", 0, batch,
                write=False)]
            if not names:
                break
            for name, state in zip(names, await states(tenant, names), strict=True):
                if state[0] == b"live" and len(found) < limit:
                    found.append(record(tenant=tenant, name=name,
                                        create_time=parse_time(text(state[1]))))
            low = f"({names[-1]}"
        return found

    async def delete_store(self, tenant: str, name: str, force: bool) -> int:
        return await self._delete_store_now(tenant, name, force)

    async def _delete_store_now(self, tenant: str, name: str, force: bool) -> int:
        """Close the store to new sessions, delete its session trees one by one, then the
        store. A store left ``deleting`` by an interrupted call is finished by the next
        call that touches the name."""
        dangling: list[str] = []
        for _ in range(10):
            reply = await self._eval("store_close", [self.store_key(tenant, name)],
                                     ["1" if force else "0", *dangling])
            if reply[0] == b"@nostore":
                raise errors.StoreNotFound(store=name)
            if reply[0] == b"ok":
                nonce, members = text(reply[1]), [text(m) for m in reply[2:]]
                break
            members = [text(m) for m in reply[1:]]
            live = await self._live_members(tenant, name, members)
            if live:
                raise errors.StoreNotEmpty(store=name, sessions=len(live))
            dangling = members  # entries of creations that never finished
        else:
            raise errors.BackendUnavailable(f"session store {name!r} kept changing; retry")
        # closed, the store is gone for readers: its grants go next (see _grants.py)
        await drop_store_grants(self, tenant, "session_store", name, nonce)
        deleted = 0
        roots = dict.fromkeys(self.parse_member(m)[2] for m in members)
        for root in roots:
            deleted += await self._drop_tree(tenant, name, root, actor=None)
        await self._eval("stores_remove", [self.tenant_key(tenant)], [name])
        await self._eval("store_finish", [self.store_key(tenant, name)], [])
        return deleted

    async def _drop_tree(self, tenant: str, store: str, root: str, *,
                         actor: str | None) -> int:
        """Delete the tree rooted at ``root`` (only if its actor is ``actor``, when given);
        returns how many sessions went."""
        args = [root, root, "1"] + ([actor] if actor is not None else [])
        reply = await self._eval("session_delete", [self.tree_key(tenant, store, root)], args)
        if reply[0] != b"ok":
            return 0
        return await self._after_sessions_dropped(tenant, store, root, reply[1:4])

    async def _live_members(self, tenant: str, store: str,
                            members: Sequence[str]) -> list[tuple[str, list[Any]]]:
        """The index entries whose session exists as that creation, with its fields."""
        parsed = [self.parse_member(m) for m in members]
        rows = await self._read([
            ("HMGET", self.tree_key(tenant, store, root) + "s:" + sid, *_SESSION_FIELDS, "ord")
            for _, sid, root in parsed])
        return [(sid, row) for (ordinal, sid, _), row in zip(parsed, rows, strict=True)
                if row[0] is not None and row[6] is not None and int(row[6]) == ordinal]

    async def _admit_item_vectors(self, tenant: str, store: str,
                                  vectors: Sequence[Embedding]) -> int:
        """Fix the store's item vector model to these vectors' (when it has none yet), or
        refuse them for being of another; returns the generation they are written as. A
        step before the append: a failed append leaves the model fixed, with no vector of
        it. Raises EmbedderMismatch, StoreNotFound."""
        first = vectors[0]
        reply = await self._eval("store_item_space", [self.store_key(tenant, store)],
                                 [first.model, first.dimension])
        if reply[0] != b"ok":
            raise errors.StoreNotFound(store=store)
        one_model(store, (text(reply[1]), int(reply[2])), vectors)
        return int(reply[3])

    # sessions --------------------------------------------------------------------------

    async def _reserve(self, tenant: str, store: str, session_id: str, root: str) -> str:
        """Add an index entry for a session about to be made; returns the entry."""
        reply = await self._eval("store_reserve", [self.store_key(tenant, store)],
                                 [session_id, root])
        if reply[0] != b"ok":
            raise errors.StoreNotFound(store=store)
        return self.index_member(int(reply[1]), session_id, root)

    async def _unreserve(self, tenant: str, store: str, member: str) -> None:
        await self._eval("store_unindex", [self.store_key(tenant, store)], [member])

    async def _claim_is_dead(self, tenant: str, store: str, session_id: str, claim: str,
                             now_ms: int) -> bool:
        """Whether a fork's claim on ``session_id`` was left by a fork that never finished."""
        if claim_age_ms(claim, now_ms) < CLAIM_GRACE_MS:
            return False
        root = claim.split("|")[0]
        reply = await self._eval("session_exists", [self.tree_key(tenant, store, root)],
                                 [session_id], write=False)
        return int(reply[1]) == 0

    async def create_session(
        self, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], now: datetime,
    ) -> SessionRecord:
        unindexed = await self._command("SISMEMBER", self.tenant_key(tenant) + "unindexed",
                                        store, write=False)
        member = await self._reserve(tenant, store, session_id, session_id)
        ordinal = self.parse_member(member)[0]
        meta = json.dumps(dict(metadata), ensure_ascii=False)
        takeover = ""
        for _ in range(3):
            reply = await self._eval(
                "session_create", [self.tree_key(tenant, store, session_id)],
                [session_id, actor_id, meta, format_time(now), ordinal, takeover,
                 "1" if int(unindexed) else "0"])
            if reply[0] == b"ok":
                self._remember_root(tenant, store, session_id, session_id)
                return SessionRecord(
                    tenant=tenant, store=store, session_id=session_id, actor_id=actor_id,
                    parent_session_id=None, root_session_id=session_id,
                    metadata=dict(metadata), create_time=now, last_activity_time=now)
            if reply[0] == b"@claimed" and await self._claim_is_dead(
                    tenant, store, session_id, text(reply[1]), int(reply[2])):
                takeover = text(reply[1])
                continue
            break
        await self._unreserve(tenant, store, member)
        raise errors.AlreadyExists(store=store, session_id=session_id)

    async def get_session(self, tenant: str, store: str, session_id: str) -> SessionRecord:
        _, reply = await self._tree(tenant, store, session_id, "session_get", [], write=False)
        return _record_from_reply(tenant, store, session_id, reply)

    async def list_sessions(
        self, tenant: str, store: str, *, actor_id: str | None, metadata: Mapping[str, str],
        order: SessionOrder, descending: bool, limit: int, after: Sequence[Any] | None,
    ) -> tuple[list[SessionRecord], list[Any] | None]:
        await self.get_store(tenant, store)
        wanted = dict(metadata)

        def keep(row: list[Any]) -> bool:
            if actor_id is not None and text(row[0]) != actor_id:
                return False
            if wanted:
                labels = json.loads(row[3])
                return all(labels.get(k) == v for k, v in wanted.items())
            return True

        index = self.store_key(tenant, store) + "index"
        chosen: list[tuple[Any, SessionRecord]] = []
        if order == "create_time":
            # walk the index in order, a batch at a time, until the page is full
            if after is not None:
                bound = f"({int(after[0])}"
            else:
                bound = "+inf" if descending else "-inf"
            while len(chosen) <= limit:
                batch = limit + 1 - len(chosen) + 8
                if descending:
                    raw = await self._command("ZREVRANGEBYSCORE", index, bound, "-inf",
                                              "LIMIT", 0, batch, write=False)
                else:
                    raw = await self._command("ZRANGEBYSCORE", index, bound, "+inf",
                                              "LIMIT", 0, batch, write=False)
                members = [text(m) for m in raw]
                if not members:
                    break
                for sid, row in await self._live_members(tenant, store, members):
                    if keep(row):
                        chosen.append(([int(row[6])], self._session_record(
                            tenant, store, sid, row)))
                bound = f"({self.parse_member(members[-1])[0]}"
                if len(members) < batch:
                    break
        else:
            # last activity moves with every write, so no index follows it: read them all
            members = [text(m) for m in await self._command("ZRANGE", index, 0, -1,
                                                            write=False)]
            rows = [(([text(row[5]), int(row[6])]), self._session_record(tenant, store, sid,
                                                                          row))
                    for sid, row in await self._live_members(tenant, store, members)
                    if keep(row)]
            if after is not None:
                cursor = [str(after[0]), int(after[1])]
                rows = [r for r in rows
                        if (r[0] < cursor if descending else r[0] > cursor)]
            rows.sort(key=lambda r: r[0], reverse=descending)
            chosen = rows
        page = chosen[:limit]
        cursor_out = page[-1][0] if len(chosen) > limit else None
        return [record for _, record in page], cursor_out

    async def update_metadata(
        self, tenant: str, store: str, session_id: str, changes: Mapping[str, str | None],
        max_labels: int,
    ) -> SessionRecord:
        for _ in range(20):
            _, reply = await self._tree(tenant, store, session_id, "session_get", [],
                                        write=False)
            raw = reply[4]
            labels = changed_labels(json.loads(raw), changes, max_labels)
            _, reply = await self._tree(tenant, store, session_id, "session_set_meta",
                                        [raw, json.dumps(labels, ensure_ascii=False)])
            if reply[0] == b"ok":
                return _record_from_reply(tenant, store, session_id, reply)
        raise errors.BackendUnavailable(f"session {session_id!r} metadata kept changing; retry")

    async def delete_session(self, tenant: str, store: str, session_id: str, force: bool) -> int:
        root, reply = await self._tree(tenant, store, session_id, "session_delete",
                                       ["1" if force else "0"])
        if reply[0] == b"@children":
            raise errors.HasChildren(store=store, session_id=session_id,
                                     children=[text(c) for c in reply[1:]])
        return await self._after_sessions_dropped(tenant, store, root, reply[1:4])

    async def fork_session(
        self, tenant: str, store: str, session_id: str, new_session_id: str,
        up_to_item_id: str | None, now: datetime,
    ) -> SessionRecord:
        root, reply = await self._tree(tenant, store, session_id, "session_get", [],
                                       write=False)
        parent = _record_from_reply(tenant, store, session_id, reply)
        if up_to_item_id is not None:
            await self.get_item(tenant, store, session_id, up_to_item_id)
        member = await self._reserve(tenant, store, new_session_id, root)
        ordinal = self.parse_member(member)[0]
        home = self.tree_key(tenant, store, new_session_id)
        nonce = self.nonce()
        takeover = ""
        claim = None
        for _ in range(3):
            got = await self._eval("fork_claim", [home], [new_session_id, root, takeover, nonce])
            if got[0] == b"ok":
                claim = text(got[1])
                break
            if got[0] == b"@claimed" and await self._claim_is_dead(
                    tenant, store, new_session_id, text(got[1]), int(got[2])):
                takeover = text(got[1])
                continue
            break
        if claim is None:
            await self._unreserve(tenant, store, member)
            raise errors.AlreadyExists(
                store=store, session_id=new_session_id)
        stamp = format_time(now)
        done = await self._eval(
            "session_fork", [self.tree_key(tenant, store, root)],
            [session_id, root, new_session_id,
             item_key(up_to_item_id) if up_to_item_id is not None else "", stamp, ordinal,
             self.nonce(), claim])
        if done[0] != b"ok":
            await self._eval("release_fork_claim", [home], [claim])
            await self._unreserve(tenant, store, member)
            if done[0] == b"@noitem":
                raise errors.ItemNotFound(session_id=session_id, item_id=up_to_item_id)
            if done[0] == b"@exists":
                raise errors.AlreadyExists(
                    store=store, session_id=new_session_id)
            raise errors.SessionNotFound(store=store, session_id=session_id)
        self._remember_root(tenant, store, new_session_id, root)
        return forked_record(parent, new_session_id, now)

    # items -----------------------------------------------------------------------------

    async def append_items(
        self, tenant: str, store: str, session_id: str, items: Sequence[NewItem],
        idempotency: tuple[str, str] | None, now: datetime,
    ) -> list[Item]:
        stamp = format_time(now)
        keys = [item_key(it.item_id) for it in items]
        encoded = [
            encode_item(it.item_id, stamp, it.format,
                        (it.role, it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens),
                        it.data_json)
            for it in items]
        key, request_hash = idempotency if idempotency is not None else ("", "")
        vectors = [it.embedding for it in items if it.embedding is not None]
        generation = await self._admit_item_vectors(tenant, store, vectors) if vectors else ""
        _, reply = await self._tree(
            tenant, store, session_id, "items_append",
            [stamp, key, request_hash, json.dumps(keys) if key else "", len(items), *keys,
             *encoded, *(search_document(it.text) for it in items),
             *(it.embedding.data if it.embedding is not None else b"" for it in items),
             generation])
        status = reply[0]
        if status == b"@reused":
            raise errors.IdempotencyKeyReused(
                session_id=session_id, idempotency_key=key)
        if status == b"@replay":
            return [decode_items(reply[i + 1], int(reply[i]), session_id)[0]
                    for i in range(1, len(reply), 2)]
        if status == b"@full":
            raise errors.LimitExceeded(
                f"session {session_id!r} holds {int(reply[1])} bytes of items; on Redis one "
                f"session's items are at most {MAX_LOG_BYTES} bytes", field="items",
                limit=MAX_LOG_BYTES, actual=int(reply[1]))
        first = int(reply[1])
        loads = json.loads
        return [
            Item(it.item_id, session_id, first + n, now, loads(it.data_json), it.format,
                 it.role, it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
            for n, it in enumerate(items)
        ]

    async def list_items(
        self, tenant: str, store: str, session_id: str, *, descending: bool, limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        _, reply = await self._tree(
            tenant, store, session_id, "items_list",
            ["1" if descending else "0", limit, "" if after_seq is None else after_seq],
            write=False)
        found = decode_items(reply[2], int(reply[1]), session_id)
        if descending:
            found.reverse()
        return found

    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        _, reply = await self._tree(tenant, store, session_id, "items_get",
                                    [item_key(item_id)], write=False)
        if reply[0] != b"ok":
            raise errors.ItemNotFound(session_id=session_id, item_id=item_id)
        return decode_items(reply[2], int(reply[1]), session_id)[0]

    async def pop_item(self, tenant: str, store: str, session_id: str,
                       now: datetime) -> Item | None:
        _, reply = await self._tree(tenant, store, session_id, "items_pop", [format_time(now)])
        if reply[0] != b"ok":
            return None
        return decode_items(reply[2], int(reply[1]), session_id)[0]

    async def clear_items(self, tenant: str, store: str, session_id: str, now: datetime) -> int:
        _, reply = await self._tree(tenant, store, session_id, "items_clear",
                                    [format_time(now)])
        return int(reply[1])
