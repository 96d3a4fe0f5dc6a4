"""Memory stores and facts in Redis.

Everything of one memory store lives in its own slot, ``{T#M}``: ``mstore`` (its record
and counters), ``f`` (fact id -> the fact as JSON), one list per (subject, key) of its fact
ids in record order (``c:SUBJECT NUL KEY``), ``sk:SUBJECT`` (a subject's keys),
``subjects``, ``cur`` (current facts by when they were recorded) and, for ranked search,
one set per term of the facts that hold it (``w:TERM``, listed in ``words``; closed facts
stay in it) and the store's total length in terms (``tlen`` in ``mstore``). A fact's
record keeps its distinct terms (``w``), their counts (``tf``) and its length (``tl``),
so a search scores its candidates in Python with the shared BM25 definition.

The bitemporal rules are computed here, in Python, from the chains a call touches, and
written by one script that first checks that none of those chains changed since they were
read (each holds a version drawn from a store-wide counter); if one did, the call reads
again and retries. So every ``remember`` (of any number of facts) and ``forget`` is one
atomic step, and concurrent writers to one (subject, key) leave one linear history.

Checking that a source item exists reads the session's tree first, a separate step: an item
deleted in between leaves a fact whose source is gone, which ``explain`` already reports
as a source item of ``None``.

It may touch Redis through ``_core`` and ``_grants``, the session part beside it, the fact
and search ports, the embeddings, the clock (``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ... import _ids
from ..._ids import format_time, parse_time
from ...embeddings import Embedding
from ...embeddings._protocol import one_model
from ...errors import (
    BackendUnavailable,
    FactNotFound,
    ItemNotFound,
    NotFound,
    StoreNotFound,
)
from ...model import Fact, FactExplanation, FactHit, Item, MemoryStoreRecord
from ..ports.facts import NewFact, covers
from ..ports.search import TextQuery, bm25, fact_text, terms, useful_terms
from ._core import Reply, lua, text
from ._grants import claim_scripts, create_with_grants, drop_store_grants
from .sessions import SessionsInRedis

__all__ = ["FactsInRedis"]

_LIVE = """
if redis.call('HGET', base .. 'mstore', 'state') ~= 'live' then return {'@nostore'} end
"""

lua("mstores_add", """
redis.call('ZADD', base .. 'mstores', 0, ARGV[1])
return {'ok'}
""")

lua("mstores_remove", """
redis.call('ZREM', base .. 'mstores', ARGV[1])
return {'ok'}
""")

claim_scripts("mstore")  # the create of a memory store goes as a session store's

# Deletes the facts and closes the store (``deleting``: readers see none); replies how
# many facts went and the store's nonce. ``mstore_finish`` then removes the record, once
# the grants are gone; a store left closed is finished by the next delete or create.
lua("mstore_drop", """
local f = redis.call('HMGET', base .. 'mstore', 'state', 'gen')
if f[1] ~= 'live' and f[1] ~= 'deleting' then return {'@nostore'} end
local n = redis.call('HLEN', base .. 'f')
for _, subject in ipairs(redis.call('SMEMBERS', base .. 'subjects')) do
  for _, key in ipairs(redis.call('SMEMBERS', base .. 'sk:' .. subject)) do
    redis.call('DEL', base .. 'c:' .. subject .. '\\0' .. key)
  end
  redis.call('DEL', base .. 'sk:' .. subject)
end
for _, word in ipairs(redis.call('SMEMBERS', base .. 'words')) do
  redis.call('DEL', base .. 'w:' .. word)
end
redis.call('DEL', base .. 'f', base .. 'chv', base .. 'cur', base .. 'subjects',
           base .. 'words', base .. 'fv')
redis.call('HDEL', base .. 'mstore', 'vm', 'vd')
redis.call('HSET', base .. 'mstore', 'state', 'deleting')
return {'ok', n, f[2] or ''}
""")

lua("mstore_finish", """
if redis.call('HGET', base .. 'mstore', 'state') == 'deleting' then
  redis.call('DEL', base .. 'mstore')
end
return {'ok'}
""")

# ARGV: chains (subject NUL key). Replies each chain's version and its last fact.
lua("facts_chains", _LIVE + """
local out = {'ok'}
for i = 1, #ARGV do
  out[#out + 1] = redis.call('HGET', base .. 'chv', ARGV[i]) or '0'
  local last = redis.call('LINDEX', base .. 'c:' .. ARGV[i], -1)
  out[#out + 1] = last and redis.call('HGET', base .. 'f', last) or ''
end
return out
""")

# ARGV[1]: how many chains to check, then (chain, version) pairs, then operations as
# (op, a, b) triples: F store fact a as b; C append fact b to chain a; S note subject a
# has key b; V give chain a a new version; + make fact a current; - make fact a not
# current; W index fact b under term a; X drop fact b from term a; L add a to the
# store's total length in terms; M refuse unless the store's vectors are of model a and
# dimension b (or it has none: then they are), first of all; E store vector b of fact a.
lua("facts_commit", _LIVE + """
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local chain, want = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if (redis.call('HGET', base .. 'chv', chain) or '0') ~= want then return {'@changed'} end
end
for i = 2 + 2 * n, #ARGV, 3 do
  local op, a, b = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if op == 'F' then
    redis.call('HSET', base .. 'f', a, b)
  elseif op == 'C' then
    redis.call('RPUSH', base .. 'c:' .. a, b)
  elseif op == 'S' then
    redis.call('SADD', base .. 'subjects', a)
    redis.call('SADD', base .. 'sk:' .. a, b)
  elseif op == 'V' then
    redis.call('HSET', base .. 'chv', a, redis.call('HINCRBY', base .. 'mstore', 'ver', 1))
  elseif op == '+' then
    redis.call('ZADD', base .. 'cur', redis.call('HINCRBY', base .. 'mstore', 'seq', 1), a)
  elseif op == '-' then
    redis.call('ZREM', base .. 'cur', a)
  elseif op == 'W' then
    redis.call('SADD', base .. 'w:' .. a, b)
    redis.call('SADD', base .. 'words', a)
  elseif op == 'L' then
    redis.call('HINCRBY', base .. 'mstore', 'tlen', a)
  elseif op == 'M' then
    local f = redis.call('HMGET', base .. 'mstore', 'vm', 'vd')
    if f[1] and (f[1] ~= a or f[2] ~= b) then return {'@mismatch', f[1], f[2]} end
    redis.call('HSET', base .. 'mstore', 'vm', a, 'vd', b)
  elseif op == 'E' then
    redis.call('HSET', base .. 'fv', a, b)
  elseif op == 'X' then
    redis.call('SREM', base .. 'w:' .. a, b)
    if redis.call('EXISTS', base .. 'w:' .. a) == 0 then redis.call('SREM', base .. 'words', a) end
  end
end
return {'ok'}
""")

# ARGV[1]: subject, ARGV[2]: '1' when keys are named, then the keys. Replies per key: the
# key, how many facts, and the facts in record order.
lua("facts_subject", _LIVE + """
local keys = {}
if ARGV[2] == '1' then
  for i = 3, #ARGV do keys[#keys + 1] = ARGV[i] end
else
  keys = redis.call('SMEMBERS', base .. 'sk:' .. ARGV[1])
end
local out = {'ok'}
for _, key in ipairs(keys) do
  local ids = redis.call('LRANGE', base .. 'c:' .. ARGV[1] .. '\\0' .. key, 0, -1)
  if #ids > 0 then
    out[#out + 1] = key
    out[#out + 1] = #ids
    for _, rec in ipairs(redis.call('HMGET', base .. 'f', unpack(ids))) do
      out[#out + 1] = rec
    end
  end
end
return out
""")

lua("facts_subjects", _LIVE + """
return {'ok', redis.call('SMEMBERS', base .. 'subjects')}
""")

lua("facts_get", _LIVE + """
return {'ok', redis.call('HGET', base .. 'f', ARGV[1])}
""")

# ARGV: terms. Replies the store's number of indexed facts and their total length, each
# term's document frequency, then every fact holding a term.
lua("facts_search", _LIVE + """
local out = {'ok', redis.call('HLEN', base .. 'f'),
             redis.call('HGET', base .. 'mstore', 'tlen') or '0'}
local seen = {}
local ids = {}
for i = 1, #ARGV do
  local members = redis.call('SMEMBERS', base .. 'w:' .. ARGV[i])
  out[#out + 1] = #members
  for _, id in ipairs(members) do
    if not seen[id] then seen[id] = true; ids[#ids + 1] = id end
  end
end
for _, id in ipairs(ids) do out[#out + 1] = redis.call('HGET', base .. 'f', id) end
return out
""")

lua("facts_erase", """
if not redis.call('HGET', base .. 'mstore', 'state') then return {'ok', 0} end
local subject = ARGV[1]
local n = 0
for _, key in ipairs(redis.call('SMEMBERS', base .. 'sk:' .. subject)) do
  local chain = subject .. '\\0' .. key
  for _, id in ipairs(redis.call('LRANGE', base .. 'c:' .. chain, 0, -1)) do
    local fact = cjson.decode(redis.call('HGET', base .. 'f', id))
    local current = redis.call('ZREM', base .. 'cur', id) == 1
    if current or fact.tl then
      for _, word in ipairs(fact.w) do
        redis.call('SREM', base .. 'w:' .. word, id)
        if redis.call('EXISTS', base .. 'w:' .. word) == 0 then
          redis.call('SREM', base .. 'words', word)
        end
      end
      redis.call('HINCRBY', base .. 'mstore', 'tlen', -(fact.tl or #fact.w))
    end
    redis.call('HDEL', base .. 'f', id)
    redis.call('HDEL', base .. 'fv', id)
    n = n + 1
  end
  redis.call('DEL', base .. 'c:' .. chain)
  redis.call('HDEL', base .. 'chv', chain)
end
redis.call('DEL', base .. 'sk:' .. subject)
redis.call('SREM', base .. 'subjects', subject)
return {'ok', n}
""")


def _encode(fact: dict[str, Any], value_json: str) -> str:
    """A stored fact: its fields as JSON with the value spliced in exactly as given."""
    head = json.dumps(fact, ensure_ascii=False, separators=(",", ":"))
    return f'{head[:-1]},"v":{value_json}}}'


def _time(value: str | None) -> datetime | None:
    return parse_time(value) if value is not None else None


def _fact(store: str, raw: bytes | str) -> Fact:
    f = json.loads(raw)
    return Fact(
        fact_id=f["id"], memory_store=store, subject=f["s"], key=f["k"], value=f["v"],
        confidence=f["c"], source_type=f["st"], source_session_id=f["ss"],
        source_item_id=f["si"], valid_from=parse_time(f["vf"]), valid_to=_time(f["vt"]),
        recorded_at=parse_time(f["ra"]), superseded_at=_time(f["sa"]), supersedes=f["sup"],
        closed_reason=f["cr"], source_store=f["sst"])


class _Chain:
    """One (subject, key) as read: its version and its last fact, to build on."""

    def __init__(self, name: str, version: str, last: dict[str, Any] | None) -> None:
        self.name = name
        self.version = version
        self.last = last

    def record_time(self, now: datetime) -> datetime:
        """``now``, or the chain's last record or close time if that is later."""
        if self.last is None:
            return now
        return max(now, parse_time(self.last["sa"] or self.last["ra"]))

    def current(self) -> dict[str, Any] | None:
        return self.last if self.last is not None and self.last["sa"] is None else None


def _close(ops: list[str], fact: dict[str, Any], closed_at: datetime, valid_to: datetime,
           reason: str) -> None:
    """Operations that close a current fact (never delete it)."""
    value_json = json.dumps(fact.pop("v"), ensure_ascii=False, separators=(",", ":"))
    fact.update(sa=format_time(closed_at), vt=format_time(valid_to), cr=reason)
    ops += ["F", fact["id"], _encode(fact, value_json), "-", fact["id"], ""]
    if "tl" not in fact:  # written before closed facts stayed indexed
        for word in fact["w"]:
            ops += ["X", word, fact["id"]]
        ops += ["L", str(-len(fact["w"])), ""]
    fact["v"] = json.loads(value_json)


def _holds_at(fact: dict[str, Any], at: datetime) -> bool:
    return parse_time(fact["vf"]) <= at and (fact["sa"] is None or parse_time(fact["vt"]) > at)


def _in_force(fact: dict[str, Any], at: datetime,
              chains: dict[tuple[str, str], list[dict[str, Any]]]) -> bool:
    """Whether recall at valid time ``at`` (as believed now) would return ``fact``."""
    if not _holds_at(fact, at):
        return False
    if fact["sa"] is None:
        return True
    chain = chains.get((fact["s"], fact["k"]), [])
    later = [f for f in chain if f["ra"] > fact["ra"]]
    return not any(_holds_at(f, at) for f in later)


class FactsInRedis(SessionsInRedis):
    # memory stores ---------------------------------------------------------------------

    async def create_memory_store(self, tenant: str, name: str, now: datetime,
                                  owner: str | None = None) -> MemoryStoreRecord:
        await create_with_grants(
            self, "mstore", self.memory_key(tenant, name), tenant, "memory_store", name,
            owner, "mstores", now, lambda: self.delete_memory_store(tenant, name),
            "memory store")
        # a delete of the same name running at the same time may have unlisted it
        await self._eval("mstores_add", [self.tenant_key(tenant)], [name])
        return MemoryStoreRecord(tenant=tenant, name=name, create_time=now)

    async def _memory_states(self, tenant: str, names: Sequence[str]) -> list[Any]:
        return await self._read([("HMGET", self.memory_key(tenant, n) + "mstore", "state",
                                  "ct") for n in names])

    async def get_memory_store(self, tenant: str, name: str) -> MemoryStoreRecord:
        (state,) = await self._memory_states(tenant, [name])
        if state[0] != b"live":
            raise StoreNotFound(store=name)
        return MemoryStoreRecord(tenant=tenant, name=name,
                                 create_time=parse_time(text(state[1])))

    async def list_memory_stores(self, tenant: str, limit: int,
                                 after: str | None) -> list[MemoryStoreRecord]:
        return await self._list_named(tenant, "mstores", limit, after, self._memory_states,
                                      MemoryStoreRecord)

    async def delete_memory_store(self, tenant: str, name: str) -> int:
        reply = await self._memory(tenant, name, "mstore_drop", [])
        await drop_store_grants(self, tenant, "memory_store", name, text(reply[2]))
        await self._eval("mstore_finish", [self.memory_key(tenant, name)], [])
        await self._eval("mstores_remove", [self.tenant_key(tenant)], [name])
        (state,) = await self._memory_states(tenant, [name])
        if state[0] is not None:  # made again meanwhile: keep it listed
            await self._eval("mstores_add", [self.tenant_key(tenant)], [name])
        return int(reply[1])

    async def _memory(self, tenant: str, store: str, name: str, args: Sequence[Any], *,
                      write: bool = True) -> Reply:
        reply = await self._eval(name, [self.memory_key(tenant, store)], args, write=write)
        if reply[0] == b"@nostore":
            raise StoreNotFound(store=store)
        return reply

    async def _memory_store_names(self, tenant: str) -> list[str]:
        return [text(n) for n in await self._command(
            "ZRANGE", self.tenant_key(tenant) + "mstores", 0, -1, write=False)]

    # facts -----------------------------------------------------------------------------

    async def _find_source(self, tenant: str, source: tuple[str | None, str, str]) -> str:
        """The store of the source item; ItemNotFound unless it exists in the tenant."""
        store, session_id, item_id = source
        stores = [store] if store is not None else [
            text(n) for n in await self._command(
                "ZRANGE", self.tenant_key(tenant) + "stores", 0, -1, write=False)]
        for candidate in stores:
            try:
                await self.get_item(tenant, candidate, session_id, item_id)
            except NotFound:
                continue
            return candidate
        raise ItemNotFound(session_id=session_id, item_id=item_id)

    async def _chains(self, tenant: str, store: str, names: Sequence[str]) -> list[_Chain]:
        reply = await self._memory(tenant, store, "facts_chains", names, write=False)
        return [_Chain(name, text(reply[1 + 2 * n]),
                       json.loads(reply[2 + 2 * n]) if reply[2 + 2 * n] else None)
                for n, name in enumerate(names)]

    async def _commit(self, tenant: str, store: str, chains: Sequence[_Chain],
                      ops: Sequence[str],
                      vectors: Sequence[tuple[str, Embedding]] = ()) -> bool:
        """Apply ``ops`` (and store ``vectors`` by fact id) unless a chain changed since
        it was read; False if one did. Raises EmbedderMismatch, StoreNotFound."""
        checks = [x for c in chains for x in (c.name, c.version)]
        versions = [x for c in chains for x in ("V", c.name, "")]
        space: list[Any] = []
        if vectors:
            first = vectors[0][1]
            one_model(store, None, [e for _, e in vectors])
            space = ["M", first.model, str(first.dimension)]
        stored = [x for fact_id, e in vectors for x in ("E", fact_id, e.data)]
        reply = await self._memory(tenant, store, "facts_commit",
                                   [len(chains), *checks, *space, *ops, *stored, *versions])
        if reply[0] == b"@mismatch":
            one_model(store, (text(reply[1]), int(reply[2])), [e for _, e in vectors])
        return bool(reply[0] == b"ok")

    async def remember(self, tenant: str, store: str, facts: Sequence[NewFact],
                       now: datetime) -> list[Fact]:
        await self.get_memory_store(tenant, store)
        sources = [await self._find_source(tenant, f.source) if f.source is not None else None
                   for f in facts]
        names = list(dict.fromkeys(f"{f.subject}\x00{f.key}" for f in facts))
        for _ in range(100):
            chains = await self._chains(tenant, store, names)
            by_name = {c.name: c for c in chains}
            ops: list[str] = []
            made: list[Fact] = []
            vectors = [(f.fact_id, f.embedding) for f in facts if f.embedding is not None]
            for new, source_store in zip(facts, sources, strict=True):
                chain = by_name[f"{new.subject}\x00{new.key}"]
                moment = chain.record_time(now)
                valid_from = new.valid_from if new.valid_from is not None else moment
                current = chain.current()
                if current is not None:
                    _close(ops, current, moment,
                           max(valid_from, parse_time(current["vf"])), "superseded")
                value = json.loads(new.value_json)
                found = terms(fact_text(new.key, value))
                counts = Counter(found)
                record = {
                    "id": new.fact_id, "s": new.subject, "k": new.key, "c": new.confidence,
                    "st": new.source_type,
                    "ss": new.source[1] if new.source else None,
                    "si": new.source[2] if new.source else None,
                    "sst": source_store, "vf": format_time(valid_from), "vt": None,
                    "ra": format_time(moment), "sa": None,
                    "sup": current["id"] if current is not None else None, "cr": None,
                    "w": list(counts), "tf": list(counts.values()), "tl": len(found),
                }
                encoded = _encode(record, new.value_json)
                ops += ["F", new.fact_id, encoded, "C", chain.name, new.fact_id,
                        "S", new.subject, new.key, "+", new.fact_id, ""]
                for word in counts:
                    ops += ["W", word, new.fact_id]
                ops += ["L", str(len(found)), ""]
                chain.last = json.loads(encoded)
                made.append(_fact(store, encoded))
            if await self._commit(tenant, store, chains, ops, vectors):
                return made
        raise BackendUnavailable(f"memory store {store!r} kept changing; retry")

    async def _subject(self, tenant: str, store: str, subject: str,
                       keys: Sequence[str] | None) -> dict[str, list[Fact]]:
        """The subject's facts per key (all keys, or those named), in record order."""
        args = [subject, "1", *keys] if keys is not None else [subject, "0"]
        reply = await self._memory(tenant, store, "facts_subject", args, write=False)
        chains: dict[str, list[Fact]] = {}
        pos = 1
        while pos < len(reply):
            key, count = text(reply[pos]), int(reply[pos + 1])
            chains[key] = [_fact(store, raw) for raw in reply[pos + 2:pos + 2 + count]]
            pos += 2 + count
        return chains

    async def recall(self, tenant: str, store: str, subject: str, keys: Sequence[str] | None,
                     valid_at: datetime | None, known_at: datetime | None) -> list[Fact]:
        valid_at, known_at = _ids.now_unless(valid_at, known_at)
        found: list[Fact] = []
        for _, chain in sorted((await self._subject(tenant, store, subject, keys)).items()):
            covering = [f for f in chain if covers(f, valid_at, known_at)]
            if covering:
                found.append(covering[-1])
        return found

    async def list_subjects(self, tenant: str, store: str, limit: int,
                            after: str | None) -> list[str]:
        reply = await self._memory(tenant, store, "facts_subjects", [], write=False)
        subjects = sorted(text(s) for s in reply[1])
        return [s for s in subjects if after is None or s > after][:limit]

    async def history(self, tenant: str, store: str, subject: str, key: str) -> list[Fact]:
        return (await self._subject(tenant, store, subject, [key])).get(key, [])

    async def get_fact(self, tenant: str, store: str, fact_id: str) -> Fact:
        reply = await self._memory(tenant, store, "facts_get", [fact_id], write=False)
        if reply[1] is None:
            raise FactNotFound(store=store, fact_id=fact_id)
        return _fact(store, reply[1])

    async def explain(self, tenant: str, store: str, fact_id: str) -> FactExplanation:
        fact = await self.get_fact(tenant, store, fact_id)
        chain = await self.history(tenant, store, fact.subject, fact.key)
        superseded = next((f for f in chain if f.fact_id == fact.supersedes), None)
        superseded_by = next((f for f in chain if f.supersedes == fact_id), None)
        return FactExplanation(fact, superseded, superseded_by, await self._source_item(
            tenant, fact.source_store, fact.source_session_id, fact.source_item_id))

    async def _source_item(self, tenant: str, store: str | None, session_id: str | None,
                           item_id: str | None) -> Item | None:
        if store is None or session_id is None or item_id is None:
            return None
        try:
            return await self.get_item(tenant, store, session_id, item_id)
        except NotFound:
            return None

    async def forget(self, tenant: str, store: str, subject: str, key: str, reason: str,
                     now: datetime) -> Fact | None:
        for _ in range(100):
            (chain,) = await self._chains(tenant, store, [f"{subject}\x00{key}"])
            current = chain.current()
            if current is None:
                return None
            moment = chain.record_time(now)
            ops: list[str] = []
            _close(ops, current, moment, max(moment, parse_time(current["vf"])), reason)
            if await self._commit(tenant, store, [chain], ops):
                return _fact(store, json.dumps(current, ensure_ascii=False))
        raise BackendUnavailable(f"memory store {store!r} kept changing; retry")

    async def search(self, tenant: str, store: str, query: TextQuery, subject: str | None,
                     valid_at: datetime | None, limit: int) -> list[FactHit]:
        at = valid_at or _ids.now()
        reply = await self._memory(tenant, store, "facts_search", query.terms, write=False)
        n, total = int(reply[1]), int(reply[2])
        df = {t: int(c) for t, c in zip(query.terms, reply[3:3 + len(query.terms)],
                                         strict=True)}
        avg = total / n if n else 0.0
        found = [json.loads(r) for r in reply[3 + len(query.terms):] if r is not None]
        closed = {(f["s"], f["k"]) for f in found if f["sa"] is not None}
        chains = await self._facts_of(tenant, store, closed) if closed else {}
        kept = useful_terms(query.terms, df, n)
        hits = []
        for f in found:
            if (subject is not None and f["s"] != subject) or not _in_force(f, at, chains) \
                    or not set(kept) & set(f["w"]):
                continue
            tf = (dict(zip(f["w"], f["tf"], strict=True)) if "tf" in f
                  else dict.fromkeys(f["w"], 1))
            hits.append((bm25(kept, Counter(tf), f.get("tl", len(f["w"])), avg, df, n),
                         f["id"], f))
        hits.sort(key=lambda h: (-h[0], h[1]))
        return [FactHit(_fact(store, json.dumps(f)), score) for score, _, f in hits[:limit]]

    async def _facts_of(self, tenant: str, store: str, chains: set[tuple[str, str]]
                        ) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """Every fact of each (subject, key), in record order."""
        out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for subject, key in chains:
            reply = await self._memory(tenant, store, "facts_subject", [subject, "1", key],
                                       write=False)
            out[(subject, key)] = [json.loads(r) for r in reply[3:]]
        return out

    async def subject_facts(self, tenant: str, subject: str) -> list[Fact]:
        found: list[Fact] = []
        for store in sorted(await self._memory_store_names(tenant)):
            try:
                chains = await self._subject(tenant, store, subject, None)
            except StoreNotFound:
                continue
            for _, chain in sorted(chains.items()):
                found += chain
        return found

    async def erase_subject(self, tenant: str, subject: str,
                            include_sessions: bool) -> dict[str, int]:
        facts = 0
        for store in await self._memory_store_names(tenant):
            reply = await self._eval("facts_erase", [self.memory_key(tenant, store)], [subject])
            facts += int(reply[1])
        sessions = 0
        if include_sessions:
            names = [text(n) for n in await self._command(
                "ZRANGE", self.tenant_key(tenant) + "stores", 0, -1, write=False)]
            for store in names:
                members = [text(m) for m in await self._command(
                    "ZRANGE", self.store_key(tenant, store) + "index", 0, -1, write=False)]
                for session_id, row in await self._live_members(tenant, store, members):
                    if text(row[0]) == subject and text(row[2]) == session_id:
                        sessions += await self._drop_tree(tenant, store, session_id,
                                                          actor=subject)
        return {"facts": facts, "sessions": sessions}
