"""Fact and item vectors in Redis, stored beside their rows and ranked by a scan in Python.

A fact's vector is ``fv`` in its memory store's slot (fact id -> the packed float32 bytes
of :class:`~ownstate.embeddings.Embedding`), written by the script that stores the fact;
the store's model and dimension are ``vm`` and ``vd`` in ``mstore``, fixed by its first
vector. An item's vector is ``iv:X`` in its session tree (seq -> bytes), written by the
append's script and dropped with the item; the session store's item model is ``ivm`` and
``ivd`` in its record (see sessions.py). Erasing a subject, deleting a session or a store
removes their vectors in the same scripts that remove the rows. A session store's reindex
fixes ``ivm``/``ivd`` as an append does, then writes ``iv:X`` for the seqs that exist, one
script per session.

A session's vectors live in its tree and the store's model in the store's record, which
a cluster may keep on different nodes, so no one script can change both. Item vectors
therefore carry a generation: ``ivg`` in the store's record (0 when absent) and ``g`` in
each ``iv:X`` (0 when absent). A replacing reindex drops the model and adds one to
``ivg`` in one script, then empties each session's ``iv:X`` for the new generation. An
append learns the generation when its vectors' model is checked and writes them only
into an ``iv:X`` of that generation or an earlier one (emptied first); a search and a
reindex read only the ``iv:X`` of the store's generation. So an append whose model was
checked before a replacing reindex and whose items land after it leaves no vector of
the old model that counts as one of the new: its items have none until they are
reindexed.

Plain Redis has no vector index, so a semantic search reads every vector of the memory
store (or of the session stores searched) and takes dot products in Python (numpy where
it is installed): about 1.5 KB per 384-dimensional vector on the wire and a scan that
grows linearly with the store, fine for the thousands of facts or items of one agent's
memory, not for millions (use PostgreSQL, or a Redis with a vector index, for those).

It may touch Redis through ``_core``, the fact and search parts beside it, the vector port,
the embeddings (which bring numpy where it is installed), the model and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ... import errors
from ...embeddings import Embedding
from ...embeddings._protocol import dot, one_model
from ...model import Fact, Item, ItemHit
from ..ports.vectors import VectorSpace
from ._core import ITEMS, lua, text
from .facts import FactsInRedis, _fact
from .search import SearchInRedis

__all__ = ["VectorsInRedis"]

_LIVE = """
if redis.call('HGET', base .. 'mstore', 'state') ~= 'live' then return {'@nostore'} end
"""
_BATCH = 200

lua("facts_vector_space", _LIVE + """
local f = redis.call('HMGET', base .. 'mstore', 'vm', 'vd')
return {'ok', f[1], f[2]}
""")

lua("facts_vectors", _LIVE + """
local f = redis.call('HMGET', base .. 'mstore', 'vm', 'vd')
return {'ok', f[1], f[2], redis.call('HGETALL', base .. 'fv')}
""")

# ARGV[1]: '1' to drop every vector first; ARGV[2..3]: the model and dimension ('' when
# there are no vectors); then (fact id, vector) pairs. Facts that do not exist are
# skipped. Replies how many were stored.
lua("facts_put_vectors", _LIVE + """
if ARGV[1] == '1' then
  redis.call('DEL', base .. 'fv')
  redis.call('HDEL', base .. 'mstore', 'vm', 'vd')
end
if #ARGV < 4 then return {'ok', 0} end
local f = redis.call('HMGET', base .. 'mstore', 'vm', 'vd')
if f[1] and (f[1] ~= ARGV[2] or f[2] ~= ARGV[3]) then return {'@mismatch', f[1], f[2]} end
local n = 0
for i = 4, #ARGV, 2 do
  if redis.call('HEXISTS', base .. 'f', ARGV[i]) == 1 then
    redis.call('HSET', base .. 'fv', ARGV[i], ARGV[i + 1])
    n = n + 1
  end
end
if n > 0 then redis.call('HSET', base .. 'mstore', 'vm', ARGV[2], 'vd', ARGV[3]) end
return {'ok', n}
""")

lua("facts_current_ids", _LIVE + """
return {'ok', redis.call('ZRANGE', base .. 'cur', 0, -1), redis.call('HKEYS', base .. 'fv')}
""")

# In a session's tree. ARGV[3]: the generation of the vectors; ARGV[4..]: (seq, vector)
# pairs. Writes those of items that exist, unless the session's store keeps items out of
# search or the session holds vectors of a later generation; replies how many were
# written.
lua("items_put_vectors", ITEMS + """
if redis.call('HGET', skey, 'nx') == '1' then return {'ok', 0} end
local vkey = base .. 'iv:' .. sid
if not vectors_of(vkey, tonumber(ARGV[3])) then return {'ok', 0} end
local n = items_count(base .. 'o:' .. sid)
local written = 0
for i = 4, #ARGV, 2 do
  if tonumber(ARGV[i]) <= n then
    redis.call('HSET', vkey, ARGV[i], ARGV[i + 1])
    written = written + 1
  end
end
return {'ok', written}
""", on="tree")

# In a session's tree. ARGV[3]: a generation; empties the session's vectors of an earlier.
lua("items_drop_vectors", ITEMS + """
vectors_of(base .. 'iv:' .. sid, tonumber(ARGV[3]))
return {'ok'}
""", on="tree")

# Drops the store's item model and starts the next generation of its vectors; replies it.
lua("store_drop_item_space", """
if redis.call('HGET', base .. 'store', 'state') ~= 'live' then return {'@nostore'} end
redis.call('HDEL', base .. 'store', 'ivm', 'ivd')
return {'ok', redis.call('HINCRBY', base .. 'store', 'ivg', 1)}
""")

_PAGE = 256


def _believed(fact: Fact, as_of: datetime | None) -> bool:
    if as_of is None:
        return fact.superseded_at is None
    return fact.recorded_at <= as_of and (
        fact.superseded_at is None or fact.superseded_at > as_of)


def _space(model: Any, dimension: Any) -> VectorSpace | None:
    return None if model is None else (text(model), int(dimension))


def _generation(stored: Any) -> int:
    """A generation of item vectors as stored (``ivg``, ``g``): 0 when absent."""
    return 0 if stored is None else int(stored)


class VectorsInRedis(FactsInRedis, SearchInRedis):
    """The vectors port (``Capability.VECTORS``) on Redis."""

    async def fact_vector_space(self, tenant: str, store: str) -> VectorSpace | None:
        reply = await self._memory(tenant, store, "facts_vector_space", [], write=False)
        return _space(reply[1], reply[2])

    async def _facts_by_id(self, tenant: str, store: str, ids: Sequence[str]) -> list[Fact]:
        if not ids:
            return []
        (rows,) = await self._read([("HMGET", self.memory_key(tenant, store) + "f", *ids)])
        return [_fact(store, row) for row in rows if row is not None]

    async def nearest_facts(self, tenant: str, store: str, query: Embedding,
                            subject: str | None, limit: int,
                            as_of: datetime | None) -> list[tuple[Fact, float]]:
        reply = await self._memory(tenant, store, "facts_vectors", [], write=False)
        if _space(reply[1], reply[2]) != (query.model, query.dimension):
            return []
        pairs = reply[3]
        scored = sorted(((dot(pairs[i + 1], query.data), text(pairs[i]))
                         for i in range(0, len(pairs), 2)), key=lambda p: -p[0])
        found: list[tuple[Fact, float]] = []
        # read the facts best first, a batch at a time, until enough are in force
        for start in range(0, len(scored), _BATCH):
            batch = scored[start:start + _BATCH]
            facts = {f.fact_id: f for f in await self._facts_by_id(
                tenant, store, [fact_id for _, fact_id in batch])}
            for score, fact_id in batch:
                fact = facts.get(fact_id)
                if fact is not None and (subject is None or fact.subject == subject) and \
                        _believed(fact, as_of):
                    found.append((fact, score))
            if len(found) >= limit and start + _BATCH < len(scored) and \
                    scored[start + _BATCH][0] < found[limit - 1][1]:
                break
        found.sort(key=lambda p: (-p[1], -p[0].recorded_at.timestamp(), p[0].fact_id))
        return found[:limit]

    async def facts_to_embed(self, tenant: str, store: str, model: str, after: str | None,
                             limit: int) -> list[Fact]:
        space = await self.fact_vector_space(tenant, store)
        reply = await self._memory(tenant, store, "facts_current_ids", [], write=False)
        embedded = {text(i) for i in reply[2]} if space is not None and space[0] == model \
            else set()
        todo = sorted(fact_id for fact_id in map(text, reply[1])
                      if fact_id not in embedded and (after is None or fact_id > after))
        return sorted(await self._facts_by_id(tenant, store, todo[:limit]),
                      key=lambda f: f.fact_id)

    async def put_fact_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, Embedding]],
                               replace: bool) -> int:
        one_model(store, None, [e for _, e in vectors])
        first = vectors[0][1] if vectors else None
        args: list[Any] = ["1" if replace else "0", first.model if first else "",
                           str(first.dimension) if first else ""]
        args += [x for fact_id, e in vectors for x in (fact_id, e.data)]
        reply = await self._memory(tenant, store, "facts_put_vectors", args)
        if reply[0] == b"@mismatch":
            one_model(store, (text(reply[1]), int(reply[2])), [e for _, e in vectors])
        return int(reply[1])

    async def nearest_items(self, tenant: str, query: Embedding, *,
                            stores: Sequence[str] | None, actor_id: str | None,
                            session_id: str | None, limit: int) -> list[ItemHit]:
        trees = await self._indexed_trees(tenant)
        chosen = sorted({s for s, _ in trees if stores is None or s in stores})
        spaces = await self._read([("HMGET", self.store_key(tenant, s) + "store", "ivm", "ivd",
                                    "ivg") for s in chosen])
        wanted = {s: _generation(space[2]) for s, space in zip(chosen, spaces, strict=True)
                  if _space(space[0], space[1]) == (query.model, query.dimension)}
        roots = {(store, sid): root for (store, _), members in trees.items()
                 if store in wanted for sid, root in members.items()
                 if session_id is None or sid == session_id}
        where = sorted(roots)
        vectors = await self._read([
            ("HGETALL", self.tree_key(tenant, store, roots[(store, sid)]) + "iv:" + sid)
            for store, sid in where])
        actors = await self._actors(tenant, roots, set(where))
        scored = sorted(
            (-dot(vector, query.data), (store, sid, int(seq)))
            for (store, sid), found in zip(where, vectors, strict=True)
            if (store, sid) in actors and (actor_id is None or actors[(store, sid)] == actor_id)
            and _generation(found.get(b"g")) == wanted[store]
            for seq, vector in found.items() if seq != b"g")
        return await self._hits(tenant, roots, actors, scored[:limit])

    async def _store_sessions(self, tenant: str, store: str) -> dict[str, str] | None:
        """The session store's sessions (session id -> tree root), None when it does not
        index items. Raises StoreNotFound."""
        await self.get_store(tenant, store)
        if int(await self._command("SISMEMBER", self.tenant_key(tenant) + "unindexed", store,
                                   write=False)):
            return None
        (members,) = await self._read([("ZRANGE", self.store_key(tenant, store) + "index",
                                        0, -1)])
        return {sid: root for _, sid, root in map(self.parse_member, members)}

    async def items_to_embed(self, tenant: str, store: str, model: str,
                             after: tuple[str, int] | None, limit: int) -> list[Item]:
        sessions = await self._store_sessions(tenant, store)
        if not sessions:
            return []
        (space,) = await self._read([("HMGET", self.store_key(tenant, store) + "store",
                                      "ivm", "ivd", "ivg")])
        same_model = space[0] is not None and text(space[0]) == model
        todo: list[Item] = []
        for sid in sorted(s for s in sessions if after is None or s >= after[0]):
            embedded: set[int] = set()
            if same_model:
                key = self.tree_key(tenant, store, sessions[sid]) + "iv:" + sid
                held, seqs = await self._read([("HGET", key, "g"), ("HKEYS", key)])
                if _generation(held) == _generation(space[2]):
                    embedded = {int(seq) for seq in seqs if seq != b"g"}
            start = after[1] if after is not None and sid == after[0] else 0
            while True:
                try:
                    page = await self.list_items(tenant, store, sid, descending=False,
                                                 limit=_PAGE, after_seq=start)
                except errors.SessionNotFound:
                    break
                todo += [it for it in page if it.seq not in embedded]
                if len(todo) >= limit:
                    return todo[:limit]
                if len(page) < _PAGE:
                    break
                start = page[-1].seq
        return todo

    async def put_item_vectors(self, tenant: str, store: str,
                               vectors: Sequence[tuple[str, int, Embedding]],
                               replace: bool) -> int:
        sessions = await self._store_sessions(tenant, store)
        if replace:
            reply = await self._eval("store_drop_item_space", [self.store_key(tenant, store)],
                                     [])
            if reply[0] != b"ok":
                raise errors.StoreNotFound(store=store)
            for sid, root in (sessions or {}).items():
                await self._eval("items_drop_vectors", [self.tree_key(tenant, store, root)],
                                 [sid, root, int(reply[1])])
        if not sessions or not vectors:
            return 0
        embeddings = [e for _, _, e in vectors]
        one_model(store, None, embeddings)
        generation = await self._admit_item_vectors(tenant, store, embeddings)
        by_session: dict[str, list[Any]] = {}
        for sid, seq, e in vectors:
            if sid in sessions:
                by_session.setdefault(sid, [generation]).extend((seq, e.data))
        written = 0
        for sid, args in sorted(by_session.items()):
            try:
                _, reply = await self._tree(tenant, store, sid, "items_put_vectors", args)
            except errors.SessionNotFound:
                continue
            written += int(reply[1])
        return written
