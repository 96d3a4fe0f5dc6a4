"""Session stores and their permissions, in the shape of the Databricks session-store API.

It may touch the permission checks, the routing base, :mod:`._common`, :mod:`._stores` and
the shared schemas, and FastAPI and pydantic; never a backend.
"""

from __future__ import annotations

from fastapi import Response
from pydantic import BaseModel, Field
from pydantic_core import to_json

from ..permissions import SESSION_STORE, require, visible_stores
from ..routing import CallerDep
from ..schemas import ItemOut, Score, SearchMode, StrictModel
from ._common import LOOKUP_ID_PATTERN, api_router, item_json
from ._stores import StoreKind, add_store_routes

__all__ = ["router"]

router = api_router("session stores")

SESSION_STORES = StoreKind(SESSION_STORE, lambda client: client.session_stores)
StoresOut = add_store_routes(router, SESSION_STORES)


class DeletedOut(BaseModel):
    sessions_deleted: int


@router.delete("/session-stores/{store}", response_model=DeletedOut)
async def delete_session_store(store: str, caller: CallerDep,
                               force: bool = False) -> DeletedOut:
    """Delete a session store (MANAGE); with ``force`` also its sessions and items."""
    await require(caller, SESSION_STORE, store, "MANAGE")
    deleted = await caller.client.session_stores.delete(store, force=force)
    return DeletedOut(sessions_deleted=deleted)


class SearchItemsIn(StrictModel):
    query: str = Field(description=(
        "What to look for: at most 2,000 characters and 64 distinct terms; items holding "
        "any of its words rank by BM25 relevance."))
    store: str | None = Field(default=None, description="Only this session store.")
    stores: list[str] | None = Field(default=None, max_length=1000, description=(
        "Only these session stores (those of them the caller may read)."))
    actor_id: str | None = Field(default=None, min_length=1, max_length=256)
    session_id: str | None = Field(default=None, pattern=LOOKUP_ID_PATTERN)
    limit: int = Field(default=10, ge=1, le=1000)
    mode: SearchMode = None


class ItemHitOut(BaseModel):
    store: str
    actor_id: str
    item: ItemOut
    score: Score


class ItemHitsOut(BaseModel):
    hits: list[ItemHitOut]


@router.post("/items:search", response_model=ItemHitsOut)
async def search_items(body: SearchItemsIn, caller: CallerDep) -> Response:
    """The conversation items that best match ``query``, best first, in the session stores
    the caller may read (READ on ``store`` when one is named)."""
    stores = body.stores
    if body.store is not None:
        await require(caller, SESSION_STORE, body.store, "READ")
    elif not caller.admin:
        visible = await visible_stores(caller, SESSION_STORE) or set()
        stores = sorted(visible if stores is None else visible & set(stores))
    found = await caller.client.session_stores.search_items(
        body.query, store=body.store, stores=stores, actor_id=body.actor_id,
        session_id=body.session_id, limit=body.limit, mode=body.mode)
    return Response(to_json({"hits": [
        {"store": h.store, "actor_id": h.actor_id, "item": item_json(h.item), "score": h.score}
        for h in found]}), media_type="application/json")
