"""Ranked search over items in Redis.

A session tree's items live in the tree's own slot, and a tenant's session stores in
slots of their own, so no one script can see every item of a tenant. This search reads
the stores' sessions and their items through the sessions port and ranks them with the
reference definition (:func:`~ownstate.backends.ports.search.rank`): the same terms and
scores as every other backend, at a cost that grows with the tenant's items, which suits
the modest histories Redis holds. Items of a store created with ``index_items=False`` (named in
the tenant's ``unindexed`` set) are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import NotFound
from ...model import Item, ItemHit, SessionRecord
from ..ports.search import TextQuery, item_text, rank, terms
from ._core import text
from .sessions import SessionsInRedis

__all__ = ["SearchInRedis"]

_PAGE = 1000


class SearchInRedis(SessionsInRedis):
    """``search_items`` by reading and ranking the items of the stores searched."""

    async def search_items(
        self, tenant: str, query: TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        names: list[str] = []
        after: str | None = None
        while True:
            page = await self.list_stores(tenant, _PAGE, after)
            names += [s.name for s in page]
            if len(page) < _PAGE:
                break
            after = page[-1].name
        chosen = None if stores is None else set(stores)
        unindexed = {text(n) for n in await self._command(
            "SMEMBERS", self.tenant_key(tenant) + "unindexed", write=False)}
        collection = []
        for store in sorted(set(names) - unindexed):
            for record in await self._sessions_of(tenant, store):
                items = await self._items_of(tenant, store, record.session_id)
                collection += [((store, record, item), terms(item_text(item.data)))
                               for item in items]

        def wanted(doc: tuple[str, SessionRecord, Item]) -> bool:
            store, record, _ = doc
            return ((chosen is None or store in chosen)
                    and (actor_id is None or record.actor_id == actor_id)
                    and (session_id is None or record.session_id == session_id))

        return [ItemHit(store, record.actor_id, item, score)
                for (store, record, item), score in rank(query.terms, collection,
                                                         wanted)[:limit]]

    async def _sessions_of(self, tenant: str, store: str) -> list[SessionRecord]:
        found: list[SessionRecord] = []
        cursor = None
        try:
            while True:
                page, cursor = await self.list_sessions(
                    tenant, store, actor_id=None, metadata={}, order="create_time",
                    descending=False, limit=_PAGE, after=cursor)
                found += page
                if cursor is None or len(page) < _PAGE:
                    break
        except NotFound:  # deleted meanwhile
            pass
        return sorted(found, key=lambda r: r.session_id)

    async def _items_of(self, tenant: str, store: str, session_id: str) -> list[Item]:
        found: list[Item] = []
        after = None
        try:
            while True:
                batch = await self.list_items(tenant, store, session_id, descending=False,
                                              limit=_PAGE, after_seq=after)
                found += batch
                if len(batch) < _PAGE:
                    break
                after = batch[-1].seq
        except NotFound:
            pass
        return found
