"""Ranked search over items in Redis, from the inverted index each session tree keeps.

Every script that adds or removes items keeps its tree's index in the same step (see
``ITEM_INDEX`` in _core.py): per term, the items holding it with their counts and
lengths; per tree, how many items it indexes and their total length. Items of a store
created with ``index_items=False`` are never indexed (their sessions say so, ``nx``).

A tree is a hash slot of its own, so no one script sees a tenant's whole collection. A
search is two pipelined reads over the tenant's trees: first each tree's number of items,
total length and, per query term, how many of its items hold it, which add up to the
collection statistics of the shared definition
(:mod:`~ownstate.backends.ports.search`); then, in the trees searched, the postings of
the terms that count. Scores are computed here with :func:`~ownstate.backends.ports.search.bm25`,
so they equal the reference's. The cost grows with the tenant's number of session trees
(a few commands each) and with the postings of the query's terms, never with the
number of items that do not match; reading the trees of the tenant's stores walks their
session indexes.

It may touch Redis through ``_core``, the session part beside it, the search port, the
model, and the migrations' progress (``_migrations``).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ...model import ItemHit
from .._migrations import Progress
from ..ports.search import TextQuery, bm25, item_text, useful_terms
from ._core import ITEM_INDEX, ITEMS, decode_items, lua, search_document, text
from .sessions import SessionsInRedis

__all__ = ["SearchInRedis"]

_PAGE = 1000
#: A searched tree: its store and its root session.
Tree = tuple[str, str]


class SearchInRedis(SessionsInRedis):
    """``search_items`` from the trees' inverted indexes."""

    async def _indexed_trees(self, tenant: str) -> dict[Tree, dict[str, str]]:
        """Every session tree of the tenant's stores that index items, with the root of
        each session in it (session id -> root)."""
        names: list[str] = []
        after: str | None = None
        while True:
            page = await self.list_stores(tenant, _PAGE, after)
            names += [s.name for s in page]
            if len(page) < _PAGE:
                break
            after = page[-1].name
        unindexed = {text(n) for n in await self._command(
            "SMEMBERS", self.tenant_key(tenant) + "unindexed", write=False)}
        stores = sorted(set(names) - unindexed)
        indexes = await self._read([("ZRANGE", self.store_key(tenant, s) + "index", 0, -1)
                                    for s in stores])
        trees: dict[Tree, dict[str, str]] = {}
        for store, members in zip(stores, indexes, strict=True):
            for member in members:
                _, session_id, root = self.parse_member(member)
                trees.setdefault((store, root), {})[session_id] = root
        return trees

    async def index_existing_items(self) -> int:
        """Index every item written before items were indexed (layout 1), in every
        tenant under the prefix; returns how many were indexed. Each session is one
        script, so an interrupted build resumes where it stopped."""
        tenants = set()
        pattern = re.compile(rf"{re.escape(self.prefix)}:\{{([^/#$!}}]+)\}}:stores")
        async for key in self._r.scan_iter(match=f"{self.prefix}:{{*}}:stores", count=1000):
            found = pattern.fullmatch(text(key))
            if found:
                tenants.add(found.group(1))
        progress = Progress("indexing items for search")
        for tenant in sorted(tenants):
            await self._index_tenant(tenant, progress)
        progress.finish()
        return progress.done

    async def _index_tenant(self, tenant: str, progress: Progress) -> None:
        unindexed = {text(n) for n in await self._command(
            "SMEMBERS", self.tenant_key(tenant) + "unindexed", write=False)}
        names = [text(n) for n in await self._command(
            "ZRANGE", self.tenant_key(tenant) + "stores", 0, -1, write=False)]
        for store in names:
            members = [text(m) for m in await self._command(
                "ZRANGE", self.store_key(tenant, store) + "index", 0, -1, write=False)]
            roots = {sid: root for _, sid, root in map(self.parse_member, members)}
            for sid, _ in await self._live_members(tenant, store, members):
                root = self.tree_key(tenant, store, roots[sid])
                if store in unindexed:
                    await self._eval("session_unindexed", [root], [sid, roots[sid]])
                    continue
                after = None
                while True:
                    batch = await self.list_items(tenant, store, sid, descending=False,
                                                  limit=_PAGE, after_seq=after)
                    if not batch:
                        break
                    reply = await self._eval(
                        "items_index_build", [root],
                        [sid, roots[sid], batch[0].seq,
                         *(search_document(item_text(it.data)) for it in batch)])
                    progress.advance(int(reply[1]))
                    after = batch[-1].seq

    async def search_items(
        self, tenant: str, query: TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        trees = await self._indexed_trees(tenant)
        order = sorted(trees)
        words = query.terms
        commands: list[tuple[Any, ...]] = []
        for store, root in order:
            base = self.tree_key(tenant, store, root)
            commands.append(("HMGET", base + "xn", "n", "len"))
            commands += [("HLEN", base + "xt:" + w) for w in words]
        replies = await self._read(commands)
        n, total = 0, 0
        df: Counter[str] = Counter()
        holding: list[Tree] = []
        step = 1 + len(words)
        for i, tree in enumerate(order):
            counts, *lens = replies[i * step:(i + 1) * step]
            n += int(counts[0] or 0)
            total += int(counts[1] or 0)
            for w, found in zip(words, lens, strict=True):
                df[w] += int(found)
            if any(lens):
                holding.append(tree)
        kept = useful_terms(words, df, n)
        chosen = None if stores is None else set(stores)
        searched = [t for t in holding if (chosen is None or t[0] in chosen) and (
            session_id is None or session_id in trees[t])]
        postings = await self._read([
            ("HGETALL", self.tree_key(tenant, store, root) + "xt:" + w)
            for store, root in searched for w in kept])
        docs: dict[tuple[str, str, int], tuple[Counter[str], int]] = {}
        for i, (store, _) in enumerate(searched):
            for w, posting in zip(kept, postings[i * len(kept):(i + 1) * len(kept)],
                                  strict=True):
                for field, value in posting.items():
                    sid, seq = text(field).split("\x00")
                    if session_id is not None and sid != session_id:
                        continue
                    tf, length = text(value).split(",")
                    doc = docs.setdefault((store, sid, int(seq)), (Counter(), int(length)))
                    doc[0][w] = int(tf)
        avg = total / n if n else 0.0
        scored = sorted((-bm25(kept, tf, length, avg, df, n), where)
                        for where, (tf, length) in docs.items())
        roots = {(store, sid): root for (store, _), members in trees.items()
                 for sid, root in members.items()}
        actors = await self._actors(tenant, roots, {(s, sid) for _, (s, sid, _) in scored})
        wanted = [(score, where) for score, where in scored
                  if (where[0], where[1]) in actors
                  and (actor_id is None or actors[(where[0], where[1])] == actor_id)]
        return await self._hits(tenant, roots, actors, wanted[:limit])

    async def _actors(self, tenant: str, roots: dict[tuple[str, str], str],
                      sessions: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The actor of each (store, session) that still exists."""
        chosen = sorted(sessions)
        found = await self._read([
            ("HGET", self.tree_key(tenant, store, roots[(store, sid)]) + "s:" + sid, "actor")
            for store, sid in chosen])
        return {where: text(actor) for where, actor in zip(chosen, found, strict=True)
                if actor is not None}

    async def _hits(self, tenant: str, roots: dict[tuple[str, str], str],
                    actors: dict[tuple[str, str], str],
                    wanted: list[tuple[float, tuple[str, str, int]]]) -> list[ItemHit]:
        """The hits, read from their sessions (those popped meanwhile left out)."""

        async def one(store: str, sid: str, seq: int) -> Any:
            root = roots[(store, sid)]
            return await self._eval("items_list", [self.tree_key(tenant, store, root)],
                                    [sid, root, "0", 1, seq - 1], write=False)

        replies = await asyncio.gather(*(one(*where) for _, where in wanted))
        hits = []
        for (score, (store, sid, seq)), reply in zip(wanted, replies, strict=True):
            if reply[0] != b"ok" or int(reply[1]) != seq or not reply[2]:
                continue  # popped or deleted since the index was read
            (item,) = decode_items(reply[2], seq, sid)
            hits.append(ItemHit(store, actors[(store, sid)], item, -score))
        return hits


# ARGV[3]: the first seq; then the documents of the items from that seq on. Indexes each
# item the index lacks (so a build that runs twice, or beside new appends, counts each
# item once); nothing for a session of a store that keeps items out of search.
lua("items_index_build", ITEMS + ITEM_INDEX + """
if redis.call('HGET', skey, 'nx') == '1' then return {'ok', 0} end
local n = items_count(base .. 'o:' .. sid)
local made = 0
for j = 4, #ARGV do
  local seq = tonumber(ARGV[3]) + j - 4
  if seq <= n and redis.call('HEXISTS', base .. 'xd:' .. sid, seq) == 0 then
    ix_add(sid, seq, ARGV[j])
    made = made + 1
  end
end
return {'ok', made}
""", on="tree")

lua("session_unindexed", """
redis.call('HSET', skey, 'nx', '1')
return {'ok'}
""", on="tree")
