"""Store permissions: what a caller's principal may do to a session or memory store.

Admin keys may do anything in their tenant. Others need a grant on the store: READ to read
it, WRITE to change what it holds, MANAGE (or ownership) to grant, revoke and delete. A
caller without even READ learns nothing: it gets exactly the not-found a missing store
gives, built here from the ids alone so that the two cannot differ by a byte, and at the
same cost: a thing found in a store it may not read (a run, an asset) and an unknown one
both take one lookup of the thing and one of a grant, never a different number of calls.

It may touch only the caller (:mod:`.auth`) and its client
(``client.api_keys.permission_of``, ``grants_of``), the error tree and the model; never a
backend.
"""

from __future__ import annotations

from ..errors import InvalidInput, NotFound, PermissionDenied, RunNotFound, StoreNotFound
from ..model import Run
from .auth import Caller

__all__ = ["MEMORY_STORE", "SESSION_STORE", "require", "require_run", "unseen",
           "visible_stores"]

SESSION_STORE = "session_store"
MEMORY_STORE = "memory_store"
_RANK = {"READ": 1, "WRITE": 2, "MANAGE": 3, "OWNER": 3}
#: A store name no store can have (names are at least three characters).
_NO_STORE = ""


def _store_not_found(store: str) -> StoreNotFound:
    return StoreNotFound(f"no store {store!r}", store=store)


async def require(caller: Caller, kind: str, store: str, level: str) -> None:
    """Pass when ``caller`` may act at ``level`` on the store, which exists.

    Raises :class:`~ownstate.errors.StoreNotFound` (no such store, or not even READ on it)
    and :class:`~ownstate.errors.PermissionDenied` (it may read but not do this).
    """
    client = caller.client
    if caller.admin:
        try:
            if kind == SESSION_STORE:
                await client.session_stores.get(store)
            else:
                await client.memory_stores.get(store)
        except (NotFound, InvalidInput) as exc:  # a name no store can have names none
            raise _store_not_found(store) from exc
        return
    granted = await client.api_keys.permission_of(caller.principal, kind, store)
    if granted is None:
        raise _store_not_found(store)
    if _RANK.get(granted, 0) < _RANK[level]:
        raise PermissionDenied(f"{level} on {store!r} is needed", store=store, needed=level)


async def require_run(caller: Caller, run_id: str, level: str) -> Run:
    """The run, when ``caller`` may act at ``level`` on its session store.

    Raises :class:`~ownstate.errors.RunNotFound` (no such run, or not even READ on its
    store) and :class:`~ownstate.errors.PermissionDenied`.
    """
    try:
        run = await caller.client.runs.get(run_id)
    except NotFound as exc:
        await unseen(caller, SESSION_STORE)
        raise RunNotFound(f"no run {run_id!r}", run_id=run_id) from exc
    if not caller.admin:
        # A run goes with its store, so an admin's check would only re-read the store.
        try:
            await require(caller, SESSION_STORE, run.store, level)
        except NotFound as exc:
            raise RunNotFound(f"no run {run_id!r}", run_id=run_id) from exc
    return run


async def unseen(caller: Caller, kind: str) -> None:
    """For something not found, the grant lookup that something found in a store costs a
    caller who is not an admin, so that an unknown id and one the caller may not see take
    the same storage calls (and so the same time)."""
    if not caller.admin:
        await caller.client.api_keys.permission_of(caller.principal, kind, _NO_STORE)


async def visible_stores(caller: Caller, kind: str) -> set[str] | None:
    """The stores ``caller`` may read, or None for all of them (an admin)."""
    if caller.admin:
        return None
    grants = await caller.client.api_keys.grants_of(caller.principal)
    return {g.store for g in grants if g.kind == kind}
