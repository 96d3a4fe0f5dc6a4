"""What every part of the Redis backend shares: the client, key naming, scripts, lookups.

Key layout
----------
Every key starts with the prefix (``?prefix=`` in the URL, default ``ownstate``) and a
hash tag naming the tenant, so nothing is ever stored or found outside its tenant (API
keys apart: they are found by id, and carry their tenant inside). The tag decides the hash
slot, and so (on Redis Cluster) the node:

=========================  ==================================================================
tag                        what lives in its slot
=========================  ==================================================================
``{T}``                    the tenant's lists of session and memory stores; the run
                           directory (run id -> store and session), run order and the set
                           of runs that may be active; the asset directory; the index of
                           its API keys; every store grant, and their index by principal
``{T/S}``                  session store ``S``: its record and the index of its sessions
``{T/S/R}``                the session tree rooted at session ``R``: the root and every
                           fork of it, with their items, runs, effects, checkpoints and
                           asset references
``{T/S/X}``                for a fork ``X``: only its claim on the name, naming its root
``{T#M}``                  memory store ``M``: its record and every fact in it
``{T$H}``                  the content of an asset whose SHA-256 is ``H``
``{!key/K}``               API key ``K``, found by its id alone (see access.py): the one
                           tag that does not start with a tenant
=========================  ==================================================================

A session and its forks share one slot so that fork, delete with descendants, and every
write to a session or one of its runs is one Lua script on one slot: atomic on a single
Redis and on Cluster alike. Operations that span slots (creating a session, listing or
deleting a store, listing runs across the tenant, erasing a subject) are sequences of
such steps, ordered so that an interruption leaves only index entries that point at
nothing. Readers skip those; ``docs/redis.md`` lists each such operation and what an
interruption leaves.

It may touch redis-py (through ``ownstate._extras``), the search port's terms, the time
format (``ownstate._ids``), the model and errors, never the API above it.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ..._extras import requires
from ..._ids import parse_time
from ...errors import (
    BackendUnavailable,
    InvalidInput,
    SessionNotFound,
)
from ...model import Item, SessionRecord, build_item
from ..ports.search import terms

with requires("redis", "the Redis backend"):
    from redis import exceptions as redis_errors
    from redis._parsers import AsyncCommandsParser
    from redis.asyncio import Redis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.commands.core import AsyncScript

__all__ = [
    "CHECKPOINT_KINDS",
    "ITEMS",
    "ITEMS_ADD",
    "ITEM_INDEX",
    "MAX_LOG_BYTES",
    "RedisCore",
    "Reply",
    "decode_items",
    "encode_item",
    "item_key",
    "lua",
    "pack",
    "parse_redis_url",
    "search_document",
    "text",
    "unpack",
]

#: A script's reply: a list whose first element says how it went.
Reply = list[Any]

_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
#: How long a claim (on a fork's name, a run id) may wait for what it claims before a
#: later caller may take it over: a claim this old whose object does not exist was left by
#: a writer that stopped between its two steps.
CLAIM_GRACE_MS = 60_000
#: Per-run keys of the checkpoints port (see checkpoints.py); deleted with their run.
CHECKPOINT_KINDS = ("c", "cd", "cz", "cw", "cm")
#: Per-run keys: the run record, its effects ledger, its checkpoints.
RUN_KINDS = ("r", "e", *CHECKPOINT_KINDS)
#: Per-session keys: record, item log and offsets, item index, idempotency keys, children,
#: runs, assets, the terms of its items (search) and their vectors.
SESSION_KINDS = ("s", "l", "o", "ix", "ik", "kids", "runs", "a", "ar", "ash", "xd", "iv")


def text(value: Any) -> str:
    """A reply element as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _maybe(value: Any) -> str | None:
    return None if value is None else text(value)


def _lua_list(names: Sequence[str]) -> str:
    return "{" + ", ".join(f"'{n}'" for n in names) + "}"


# -- scripts ---------------------------------------------------------------------------

#: Every script begins here. ``KEYS[1]`` is the base of the slot's keys (``prefix:{tag}:``);
#: other keys of the slot are named from it, so each script touches exactly one slot.
_BASE = "local base = KEYS[1]\n"

#: For scripts on a session tree. ``ARGV[1]`` is the session id and ``ARGV[2]`` the tree's
#: root as the caller believes it; the script answers ``@moved`` (with the real root) when
#: it ran in the session's own slot and found a fork's claim there, and ``@gone`` when the
#: session is not in this tree.
_TREE = _BASE + """
local sid = ARGV[1]
local skey = base .. 's:' .. sid
if redis.call('EXISTS', skey) == 0 then
  if sid == ARGV[2] then
    local claim = redis.call('GET', base .. 'fork')
    if claim then return {'@moved', string.match(claim, '^([^|]*)')} end
  end
  return {'@gone'}
end
"""

#: For scripts on one run: the tree prelude, then ``ARGV[3]`` names a run of that session.
_RUN = _TREE + """
local run = ARGV[3]
local rkey = base .. 'r:' .. run
if redis.call('HGET', rkey, 'sid') ~= sid then return {'@norun'} end
"""

#: For checkpoint scripts: the run prelude, then ``ARGV[4]`` must be the run's actor (the
#: full scope is applied: tenant, store, session, actor, run).
_SCOPED = _RUN + """
if redis.call('HGET', rkey, 'actor') ~= ARGV[4] then return {'@norun'} end
"""

#: For fenced checkpoint writes: the scoped prelude, then ``ARGV[5..6]`` are the fence (a
#: run of the same session, of the same actor, and its fencing token; '' for none), checked
#: token first, then status, before the script changes anything.
_FENCED = _SCOPED + """
if ARGV[5] ~= '' then
  local fkey = base .. 'r:' .. ARGV[5]
  local f = redis.call('HMGET', fkey, 'sid', 'actor', 'st', 'tok')
  if f[1] ~= sid or f[2] ~= ARGV[4] then return {'@nofence'} end
  if tonumber(ARGV[6]) ~= tonumber(f[4]) then return {'@stale', f[4]} end
  if f[3] ~= 'running' and f[3] ~= 'awaiting_human' then return {'@closed', f[3]} end
end
"""

#: The tree's inverted index of its items, kept by every script that adds or removes
#: items, in the same script. ``xd:X`` maps each indexed item's seq of session ``X`` to
#: its document, ``LEN TERM:TF TERM:TF ...`` (its length in terms, then each distinct term
#: with its count, as :func:`~ownstate.backends.ports.search.terms` makes them);
#: ``xt:TERM`` maps ``X NUL seq`` to ``TF,LEN`` for every item of the tree holding the
#: term; ``xn`` holds the tree's number of indexed items (``n``) and their total length
#: (``len``). A search adds these up over the tenant's trees (see search.py).
ITEM_INDEX = """
local function ix_count(dn, dl)
  local xn = base .. 'xn'
  if redis.call('HINCRBY', xn, 'n', dn) <= 0 then redis.call('DEL', xn)
  else redis.call('HINCRBY', xn, 'len', dl) end
end
local function ix_add(s, seq, doc)
  local len = tonumber(string.match(doc, '^(%d+)'))
  local field = s .. '\\0' .. seq
  for term, tf in string.gmatch(doc, ' ([^ :]+):(%d+)') do
    redis.call('HSET', base .. 'xt:' .. term, field, tf .. ',' .. len)
  end
  redis.call('HSET', base .. 'xd:' .. s, seq, doc)
  ix_count(1, len)
end
local function ix_drop_doc(s, seq, doc)
  local field = s .. '\\0' .. seq
  for term in string.gmatch(doc, ' ([^ :]+):') do
    redis.call('HDEL', base .. 'xt:' .. term, field)
  end
  ix_count(-1, 0 - tonumber(string.match(doc, '^(%d+)')))
end
local function ix_drop(s, seq)
  local doc = redis.call('HGET', base .. 'xd:' .. s, seq)
  if doc then
    ix_drop_doc(s, seq, doc)
    redis.call('HDEL', base .. 'xd:' .. s, seq)
  end
  redis.call('HDEL', base .. 'iv:' .. s, seq)
end
local function ix_drop_session(s)
  local docs = redis.call('HGETALL', base .. 'xd:' .. s)
  for i = 1, #docs, 2 do ix_drop_doc(s, docs[i], docs[i + 1]) end
  redis.call('DEL', base .. 'xd:' .. s, base .. 'iv:' .. s)
end
"""

#: Deleting sessions of a tree: ``collect`` lists a session and its descendants, ``drop``
#: deletes them (with their runs, checkpoints and asset references) and reports what went
#: so the caller can clear the indexes in other slots.
DROP = ITEM_INDEX + f"""
local RUN_KINDS = {_lua_list(RUN_KINDS)}
local SESSION_KINDS = {_lua_list(SESSION_KINDS)}
local function collect(first)
  local out = {{first}}
  local i = 1
  while i <= #out do
    for _, kid in ipairs(redis.call('ZRANGE', base .. 'kids:' .. out[i], 0, -1)) do
      out[#out + 1] = kid
    end
    i = i + 1
  end
  return out
end
local function drop(sids)
  local gone, runs, assets = {{}}, {{}}, {{}}
  for _, s in ipairs(sids) do
    local f = redis.call('HMGET', base .. 's:' .. s, 'ord', 'claim')
    gone[#gone + 1] = s
    gone[#gone + 1] = f[1] or ''
    gone[#gone + 1] = f[2] or ''
    for _, r in ipairs(redis.call('ZRANGE', base .. 'runs:' .. s, 0, -1)) do
      runs[#runs + 1] = r
      runs[#runs + 1] = redis.call('HGET', base .. 'r:' .. r, 'dir') or ''
      for _, kind in ipairs(RUN_KINDS) do redis.call('DEL', base .. kind .. ':' .. r) end
    end
    local refs = redis.call('HGETALL', base .. 'ash:' .. s)
    for j = 1, #refs, 2 do
      assets[#assets + 1] = refs[j + 1]
      assets[#assets + 1] = refs[j]
    end
    ix_drop_session(s)
    for _, kind in ipairs(SESSION_KINDS) do redis.call('DEL', base .. kind .. ':' .. s) end
  end
  return gone, runs, assets
end
"""

#: ``item_key(el)``: the id of a stored item, spelled as in its JSON (see ``item_key``),
#: and where its closing quote is.
ITEM_KEY = r"""
local function item_key(el)
  local q = string.find(el, '"', 3, true)
  local id = string.sub(el, 3, q - 1)
  if not string.find(id, '\\', 1, true) then return id, q end
  local i = 3
  while true do
    local b = string.byte(el, i)
    if b == 34 then return string.sub(el, 3, i - 1), i end
    if b == 92 then i = i + 2 else i = i + 1 end
  end
end
"""

#: A session's items are one string, ``l:X``: each item's JSON after a comma, in seq order,
#: so that any run of items is one ``GETRANGE`` and reads back as one JSON array; and
#: ``o:X`` holds where each item ends, as fixed-width decimal numbers (``OFFSET_WIDTH``
#: digits each), so the item count is its length over that width.
OFFSET_WIDTH = 12
#: The longest item log of one session: Redis's limit on one string.
MAX_LOG_BYTES = 512 * 1024 * 1024 - 1
ITEMS = f"""
local W = {OFFSET_WIDTH}
local function items_count(okey) return redis.call('STRLEN', okey) / W end
local function item_end(okey, seq)
  if seq == 0 then return 0 end
  return tonumber(redis.call('GETRANGE', okey, (seq - 1) * W, seq * W - 1))
end
-- items a..b, each after a comma ('' when b < a)
local function items_span(lkey, okey, a, b)
  if b < a then return '' end
  return redis.call('GETRANGE', lkey, item_end(okey, a - 1), item_end(okey, b) - 1)
end
-- keep the first n items
local function items_keep(lkey, okey, n)
  if n == 0 then
    redis.call('DEL', lkey, okey)
  else
    redis.call('SET', lkey, redis.call('GETRANGE', lkey, 0, item_end(okey, n) - 1))
    redis.call('SET', okey, redis.call('GETRANGE', okey, 0, n * W - 1))
  end
end
-- whether vectors of generation gen may be written to the session's vector hash vkey:
-- not when it holds a later generation's; one of an earlier generation is emptied first
local function vectors_of(vkey, gen)
  local held = tonumber(redis.call('HGET', vkey, 'g') or '0')
  if held > gen then return false end
  if held < gen then
    redis.call('DEL', vkey)
    redis.call('HSET', vkey, 'g', gen)
  end
  return true
end
"""

#: ``items_add``: append items to a session's log and its item index, the one routine
#: every write that adds items runs (an append, a restore), so that both store alike.
#: Needs ``ITEMS`` and ``ITEM_INDEX`` before it.
ITEMS_ADD = f"""
-- append count items after the have items session sid (hash skey) holds: their keys are
-- ARGV[at + 1 .. at + count], the encoded items follow, then their search documents (see
-- ITEM_INDEX), indexed unless the session's store keeps items out of search; returns the
-- log's size instead when they would take it past the limit (then nothing is written)
local function items_add(sid, skey, have, at, count)
  local lkey, okey = base .. 'l:' .. sid, base .. 'o:' .. sid
  local ix = base .. 'ix:' .. sid
  local size = redis.call('STRLEN', lkey)
  local pos = size
  local parts, ends = {{}}, {{}}
  for j = 1, count do
    parts[j] = ARGV[at + count + j]
    pos = pos + #parts[j] + 1
    ends[j] = string.format('%0' .. W .. 'd', pos)
  end
  if pos > {MAX_LOG_BYTES} then return size end
  redis.call('APPEND', lkey, ',' .. table.concat(parts, ','))
  redis.call('APPEND', okey, table.concat(ends))
  local k = 0
  while k < count do
    local stop = math.min(k + 500, count)
    local seqs = {{}}
    for j = k + 1, stop do
      seqs[#seqs + 1] = ARGV[at + j]
      seqs[#seqs + 1] = have + j
    end
    redis.call('HSET', ix, unpack(seqs))
    k = stop
  end
  if redis.call('HGET', skey, 'nx') ~= '1' then
    for j = 1, count do ix_add(sid, have + j, ARGV[at + 2 * count + j]) end
  end
  return nil
end
"""

_SCRIPTS: dict[str, str] = {}


def lua(name: str, body: str, *, on: str = "slot") -> str:
    """Register a script under ``name``; ``on`` is ``slot`` (any slot), ``tree`` (a
    session in its tree: ``ARGV[1..2]``), ``run`` (a run of that session: ``ARGV[1..3]``)
    ``scoped`` (that run, of the actor ``ARGV[4]``) or ``fenced`` (scoped, and the fence
    of ``ARGV[5..6]`` holds). Returns the name."""
    prelude = {"slot": _BASE, "tree": _TREE, "run": _RUN, "scoped": _SCOPED,
               "fenced": _FENCED}[on]
    if name in _SCRIPTS:
        raise RuntimeError(f"script {name!r} is registered twice")
    _SCRIPTS[name] = prelude + body
    return name


# -- packing ---------------------------------------------------------------------------


def pack(fields: Iterable[bytes]) -> bytes:
    """Byte strings as ``<len>:<bytes>`` one after another (scripts read them too)."""
    return b"".join(b"%d:%s" % (len(f), f) for f in fields)


def unpack(raw: bytes) -> list[bytes]:
    out: list[bytes] = []
    pos = 0
    while pos < len(raw):
        colon = raw.index(b":", pos)
        end = colon + 1 + int(raw[pos:colon])
        out.append(raw[colon + 1:end])
        pos = end
    return out


# -- items -----------------------------------------------------------------------------


_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:@-]*")
_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def item_key(item_id: str) -> str:
    """How an item id is spelled inside its stored JSON (and so in the item index)."""
    if _PLAIN_ID.fullmatch(item_id):
        return item_id
    return _encode_json(item_id)[1:-1]


def encode_item(item_id: str, stamp: str, fmt: str, columns: Sequence[Any],
                data_json: str) -> str:
    """One stored item: a JSON array of its id, create time, format, derived columns and
    data (spliced in as given, never re-encoded). Scripts read the id from its start."""
    head = _encode_json([item_id, stamp, fmt, *columns])
    return f"{head[:-1]},{data_json}]"


def search_document(item_text: str) -> str:
    """An item's document in the tree's index (see ``ITEM_INDEX``): its length in terms,
    then each distinct term and its count."""
    found = terms(item_text)
    return " ".join([str(len(found)), *(f"{t}:{n}" for t, n in Counter(found).items())])


def _items(rows: Iterable[Sequence[Any]], first_seq: int, session_id: str) -> list[Item]:
    times: dict[str, datetime] = {}
    found = []
    for seq, f in enumerate(rows, start=first_seq):
        stamp = f[1]
        created = times.get(stamp)
        if created is None:
            created = times[stamp] = parse_time(stamp)
        found.append(build_item(f[0], session_id, seq, created, f[9], f[2], f[3], f[4], f[5],
                                f[6], f[7], f[8]))
    return found


def decode_items(span: bytes, first_seq: int, session_id: str) -> list[Item]:
    """Items from a span of a session's item log (each after a comma), in seq order from
    ``first_seq``: parsed as one JSON array."""
    if not span:
        return []
    return _items(json.loads(b"[" + span[1:] + b"]"), first_seq, session_id)


# -- URLs ------------------------------------------------------------------------------


def parse_redis_url(url: str) -> tuple[str, bool, dict[str, str]]:
    """``(driver URL, cluster?, ownstate options)`` of a ``redis://`` family URL.

    ``redis+cluster://`` and ``rediss+cluster://`` reach Redis Cluster; ``prefix`` and
    ``checkpoint_ttl`` are ownstate's options; the rest go to redis-py.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    cluster = scheme.endswith("+cluster")
    base_scheme = scheme.removesuffix("+cluster")
    if base_scheme not in ("redis", "rediss"):
        raise InvalidInput(f"not a Redis URL: {url!r}", field="url")
    query = parse_qs(parts.query, keep_blank_values=True)
    own = {k: v[-1] for k, v in query.items() if k in ("prefix", "checkpoint_ttl")}
    rest = "&".join(f"{k}={v}" for k, vs in query.items() if k not in own for v in vs)
    return urlunsplit((base_scheme, parts.netloc, parts.path, rest, "")), cluster, own


class _SharedCommandTable(AsyncCommandsParser):
    """redis-py reads the server's whole ``COMMAND`` table (to find keys in commands)
    every time a cluster client connects, which costs about half a second; clients made
    from the same URL in one process share the first one's table."""

    tables: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url

    async def initialize(self, node: ClusterNode | None = None) -> None:
        if node is not None:
            self.node = node
        table = self.tables.get(self._url)
        if table is None:
            await super().initialize(node)
            self.tables[self._url] = table = self.commands
        self.commands = table


# -- the core --------------------------------------------------------------------------


class RedisCore:
    """A Redis database (or Redis Cluster) and the conventions every part keeps.

    Give it a URL (it then opens and closes its own client) or a ready
    ``redis.asyncio.Redis`` / ``redis.asyncio.cluster.RedisCluster`` made with
    ``decode_responses=False`` (which it uses and never closes). ``prefix`` namespaces
    every key, so several applications can share one database. ``checkpoint_ttl`` (seconds)
    makes a run's checkpoints expire that long after the last checkpoint written to it.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Redis | RedisCluster | None = None,
        prefix: str = "ownstate",
        checkpoint_ttl: float | None = None,
    ) -> None:
        if (url is None) == (client is None):
            raise InvalidInput("give the Redis backend a URL or a client, not both")
        if not isinstance(prefix, str) or not 1 <= len(prefix) <= 64 or not set(prefix) <= (
                _PREFIX_CHARS | {":"}):
            raise InvalidInput("prefix must be 1-64 chars of [A-Za-z0-9_.:-]", field="prefix")
        if checkpoint_ttl is not None and not (
                isinstance(checkpoint_ttl, (int, float)) and not isinstance(checkpoint_ttl, bool)
                and 1 <= checkpoint_ttl < 2**31):
            raise InvalidInput("checkpoint_ttl must be a number of seconds >= 1",
                               field="checkpoint_ttl")
        self.prefix = prefix
        self.checkpoint_ttl = int(checkpoint_ttl) if checkpoint_ttl is not None else None
        self._owns_client = client is None
        if client is None:
            assert url is not None
            driver_url, cluster, _ = parse_redis_url(url)
            # No driver retries: a write whose reply was lost must not be sent twice.
            # Reads are retried here, once, where that is safe.
            no_retry = Retry(NoBackoff(), 0)
            try:
                if cluster:
                    client = RedisCluster.from_url(driver_url, retry=no_retry,
                                                   decode_responses=False)
                    client.commands_parser = _SharedCommandTable(driver_url)
                else:
                    client = Redis.from_url(driver_url, retry=no_retry, decode_responses=False)
            except (ValueError, redis_errors.RedisError,
                    redis_errors.RedisClusterException) as exc:
                raise InvalidInput(f"the Redis URL is malformed: {exc}", field="url") from exc
        elif client.get_encoder().decode_responses:
            raise InvalidInput("give the Redis backend a client made with "
                               "decode_responses=False", field="client")
        self.cluster = isinstance(client, RedisCluster)
        self._r: Any = client
        self._scripts: dict[str, AsyncScript] = {}
        self._roots: dict[tuple[str, str, str], str] = {}
        self._run_homes: dict[tuple[str, str], tuple[str, str]] = {}

    async def close(self) -> None:
        listener = self.__dict__.pop("_decisions_listener", None)
        if listener is not None:
            await listener.close()
        if self._owns_client:
            with contextlib.suppress(redis_errors.RedisError):
                await self._r.aclose()

    # -- keys ----------------------------------------------------------------------------

    def tenant_key(self, tenant: str) -> str:
        return f"{self.prefix}:{{{tenant}}}:"

    def store_key(self, tenant: str, store: str) -> str:
        return f"{self.prefix}:{{{tenant}/{store}}}:"

    def tree_key(self, tenant: str, store: str, root: str) -> str:
        return f"{self.prefix}:{{{tenant}/{store}/{root}}}:"

    def memory_key(self, tenant: str, store: str) -> str:
        return f"{self.prefix}:{{{tenant}#{store}}}:"

    def content_key(self, tenant: str, sha256: str) -> str:
        return f"{self.prefix}:{{{tenant}${sha256}}}:"

    # -- calling Redis -------------------------------------------------------------------

    def _fail(self, exc: Exception, *, write: bool) -> BackendUnavailable:
        if isinstance(exc, redis_errors.BusyLoadingError):
            # A LOADING reply (a restarted Redis reading its data back) is a refusal on a
            # live connection: the command was not run, so a write is as safe to retry
            # as a read. redis-py files it under ConnectionError, hence checked first.
            return BackendUnavailable(
                f"Redis is still loading its data and did not run the command; nothing "
                f"was applied, retry later: {exc}")
        if isinstance(exc, (redis_errors.ConnectionError, redis_errors.TimeoutError)):
            if write:
                return BackendUnavailable(
                    f"the Redis connection failed during a write; it may or may not have "
                    f"been applied: {exc}")
            return BackendUnavailable(f"Redis is unreachable: {exc}")
        return BackendUnavailable(f"Redis failed: {exc}")

    async def _eval(self, name: str, keys: Sequence[str], args: Iterable[Any], *,
                    write: bool = True) -> Reply:
        """Run a registered script; a read is retried once if the connection failed."""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._r.register_script(_SCRIPTS[name])
        argv = list(args)
        for attempt in (1, 2):
            try:
                reply: Reply = await script(keys=list(keys), args=argv)
                return reply
            except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
                if write or attempt == 2 or isinstance(exc, redis_errors.BusyLoadingError):
                    raise self._fail(exc, write=write) from exc
            except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
                raise self._fail(exc, write=write) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Run read commands as one pipeline (spread over nodes on Cluster), retried once."""
        if not commands:
            return []
        for attempt in (1, 2):
            try:
                pipe = self._r.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)
                result: list[Any] = await pipe.execute()
                return result
            except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
                if attempt == 2 or isinstance(exc, redis_errors.BusyLoadingError):
                    raise self._fail(exc, write=False) from exc
            except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
                raise self._fail(exc, write=False) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _command(self, *command: Any, write: bool) -> Any:
        if not write:
            return (await self._read([command]))[0]
        try:
            return await self._r.execute_command(*command)
        except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
            raise self._fail(exc, write=True) from exc

    # -- sessions, found through their tree ------------------------------------------

    def _root_guess(self, tenant: str, store: str, session_id: str) -> str:
        return self._roots.get((tenant, store, session_id), session_id)

    def _remember_root(self, tenant: str, store: str, session_id: str, root: str) -> None:
        if root == session_id:
            self._roots.pop((tenant, store, session_id), None)
            return
        if len(self._roots) > 100_000:
            self._roots.clear()
        self._roots[(tenant, store, session_id)] = root

    async def _tree(self, tenant: str, store: str, session_id: str, name: str,
                    args: Sequence[Any], *, write: bool = True) -> tuple[str, Reply]:
        """Run a tree script on the session's tree; ``(root, reply)``.

        A session that is not a fork lives in its own slot, found at once; a fork is found
        through the claim in its own slot (then remembered). Raises SessionNotFound.
        """
        key = (tenant, store, session_id)
        root = self._roots.get(key, session_id)
        for _ in range(3):
            reply = await self._eval(name, [self.tree_key(tenant, store, root)],
                                     [session_id, root, *args], write=write)
            status = reply[0]
            if status == b"@moved":
                root = text(reply[1])
                self._remember_root(tenant, store, session_id, root)
                continue
            if status == b"@gone":
                if root != session_id and key in self._roots:
                    del self._roots[key]
                    root = session_id
                    continue
                break
            return root, reply
        self._roots.pop(key, None)
        raise SessionNotFound(store=store, session_id=session_id)

    @staticmethod
    def _session_record(tenant: str, store: str, session_id: str,
                        fields: Sequence[Any]) -> SessionRecord:
        """From ``HMGET s:X actor parent root meta ct lat``."""
        return SessionRecord(
            tenant=tenant, store=store, session_id=session_id, actor_id=text(fields[0]),
            parent_session_id=_maybe(fields[1]), root_session_id=text(fields[2]),
            metadata=json.loads(fields[3]), create_time=parse_time(text(fields[4])),
            last_activity_time=parse_time(text(fields[5])),
        )

    # -- what goes when sessions go ----------------------------------------------------

    async def _after_sessions_dropped(self, tenant: str, store: str, root: str,
                                      reply: Sequence[Any]) -> int:
        """Clear what other slots hold about sessions a script just deleted: their store
        index entries, their fork claims, their runs' directory entries, their asset
        references. ``reply`` is ``drop``'s ``gone, runs, assets``. Returns how many
        sessions went."""
        gone, runs, assets = reply
        members = []
        for i in range(0, len(gone), 3):
            session_id, ordinal, claim = text(gone[i]), text(gone[i + 1]), gone[i + 2]
            self._roots.pop((tenant, store, session_id), None)
            if ordinal:
                members.append(self.index_member(int(ordinal), session_id, root))
            if claim:
                await self._eval("release_fork_claim",
                                 [self.tree_key(tenant, store, session_id)], [claim])
        if members:
            await self._eval("store_unindex", [self.store_key(tenant, store)], members)
        if runs:
            await self._eval("unclaim_runs", [self.tenant_key(tenant)], runs)
        for i in range(0, len(assets), 2):
            await self._release_content(tenant, text(assets[i]), text(assets[i + 1]))
        return len(gone) // 3

    async def _release_content(self, tenant: str, asset_id: str, sha256: str) -> None:
        """Drop one reference's hold on its content and its directory entry."""
        await self._eval("content_release", [self.content_key(tenant, sha256)], [asset_id])
        await self._eval("asset_undirect", [self.tenant_key(tenant)], [asset_id])

    @staticmethod
    def index_member(ordinal: int, session_id: str, root: str) -> str:
        """A store index entry: one per creation of a session, so that a failed or
        repeated creation never disturbs another's entry."""
        if root == session_id:
            return f"{ordinal}\x00{session_id}"
        return f"{ordinal}\x00{session_id}\x00{root}"

    @staticmethod
    def parse_member(member: bytes | str) -> tuple[int, str, str]:
        """``(ordinal, session_id, root)`` of a store index entry."""
        parts = text(member).split("\x00")
        return int(parts[0]), parts[1], parts[2] if len(parts) > 2 else parts[1]

    @staticmethod
    def nonce() -> str:
        return uuid.uuid4().hex


def claim_age_ms(claim: str, now_ms: int) -> int:
    """How old a claim (``...|ms|nonce`` or ``...\\x00ms\\x00nonce``) is."""
    sep = "|" if "|" in claim else "\x00"
    return now_ms - int(claim.split(sep)[-2])


# -- scripts shared by several parts ----------------------------------------------------

lua("release_fork_claim", """
if redis.call('GET', base .. 'fork') == ARGV[1] then redis.call('DEL', base .. 'fork') end
return {'ok'}
""")

lua("store_unindex", """
for i = 1, #ARGV do redis.call('ZREM', base .. 'index', ARGV[i]) end
return {'ok'}
""")

lua("unclaim_runs", """
local n = 0
for i = 1, #ARGV, 2 do
  local run, value = ARGV[i], ARGV[i + 1]
  if value ~= '' and redis.call('HGET', base .. 'runs', run) == value then
    redis.call('HDEL', base .. 'runs', run)
    redis.call('ZREM', base .. 'run-order', run)
    redis.call('SREM', base .. 'run-active', run)
    n = n + 1
  end
end
return {'ok', n}
""")

lua("content_release", """
redis.call('SREM', base .. 'refs', ARGV[1])
if redis.call('SCARD', base .. 'refs') == 0 then redis.call('DEL', base .. 'blob') end
return {'ok'}
""")

lua("asset_undirect", """
redis.call('HDEL', base .. 'assets', ARGV[1])
return {'ok'}
""")
