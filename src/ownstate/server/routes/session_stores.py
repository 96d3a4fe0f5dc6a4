"""Session stores and their permissions, in the shape of the Databricks session-store API."""

from __future__ import annotations

from pydantic import BaseModel

from ..permissions import SESSION_STORE, require
from ..routing import CallerDep
from ._common import api_router
from ._stores import StoreKind, add_store_routes

__all__ = ["router"]

router = api_router("session stores")

SESSION_STORES = StoreKind(
    kind=SESSION_STORE, collection="session-stores", label="session store",
    list_field="session_stores", stores=lambda client: client.session_stores)
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
