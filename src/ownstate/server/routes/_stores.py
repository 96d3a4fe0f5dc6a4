"""The routes every kind of store has: create, get, list, and its permissions.

Session stores and memory stores share one permission model and one shape of listing, so
their routes are made here, once, for each kind; what differs (deleting, the contents)
stays in each kind's module.

It may touch the caller's client (``ownstate.api``, ``api.access``) and the permission
checks, the routing base, :mod:`._common` and the shared schemas, the error tree, the limits
and the model, and FastAPI and pydantic; never a backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, create_model

from ...api import AsyncClient, page_by_name
from ...api.access import permission_level
from ...errors import InvalidInput, NotFound
from ...limits import MAX_STORE_NAME_CHARS
from ...model import Grant
from ..auth import Caller
from ..permissions import SESSION_STORE, require, visible_stores
from ..routing import CallerDep
from ..schemas import Empty, GrantRequest, GrantsOut, RevokeRequest, StoreOut, StrictModel
from ._common import STORE_PATTERN, PageSize, PageToken, grants_out, keyset_mode

__all__ = ["StoreKind", "add_store_routes"]

StoreName = Annotated[str, Field(pattern=STORE_PATTERN)]


class _Handle(Protocol):
    """A store handle of the public API (session store or memory store)."""

    @property
    def name(self) -> Any: ...

    @property
    def create_time(self) -> Any: ...

    async def grant_permission(self, principal: str, permission: str) -> Grant: ...

    async def revoke_permission(self, principal: str) -> None: ...

    async def permissions(self) -> list[Grant]: ...


@dataclass(frozen=True)
class StoreKind:
    """One kind of store, as the routes see it: ``kind`` is its grant kind
    (``session_store``), from which its path, its words and its listing's field follow.

    ``stores(client)`` is the public API's collection (``client.session_stores``), whose
    ``get``, ``list_page`` and keyset ``list_after`` the routes call.
    """

    kind: str
    stores: Callable[[AsyncClient], Any]

    @property
    def collection(self) -> str:
        """The path segment of its collection: ``session-stores``."""
        return self.kind.replace("_", "-") + "s"

    @property
    def label(self) -> str:
        """How a message names one: ``session store``."""
        return self.kind.replace("_", " ")

    @property
    def list_field(self) -> str:
        """The field of a listing that holds the stores: ``session_stores``."""
        return self.kind + "s"


class CreateStore(StrictModel):
    name: StoreName
    index_items: bool | None = Field(default=None, description=(
        "Session stores only: False keeps its items out of item search (default True)."))


def _out(record: Any) -> StoreOut:
    return StoreOut(name=record.name, create_time=record.create_time)


async def _readable(client: AsyncClient, spec: StoreKind, names: set[str], limit: int,
                    after: str | None) -> list[Any]:
    """Up to ``limit`` records of the stores ``names``, named after ``after``, by name
    (code point order, as every backend lists them); a name whose store has gone since its
    grant was read is passed over."""
    pending = sorted(n for n in names if after is None or n > after)
    found: list[Any] = []

    async def record(name: str) -> Any:
        try:
            return await spec.stores(client).get(name)
        except NotFound:
            return None

    while pending and len(found) < limit:
        batch, pending = pending[:limit - len(found)], pending[limit - len(found):]
        found += [r for r in await asyncio.gather(*map(record, batch)) if r is not None]
    return found


def add_store_routes(router: APIRouter, spec: StoreKind) -> type[BaseModel]:
    """Add create, get, list, grant, revoke and list-permissions routes for ``spec`` to
    ``router``; returns the listing's response model."""
    base = f"/{spec.collection}"
    one = f"{base}/{{store}}"
    listing: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{spec.kind.title().replace('_', '')}sOut",
        **{spec.list_field: (list[StoreOut], ...), "next_page_token": (str | None, None)})

    async def create(body: CreateStore, caller: CallerDep) -> StoreOut:
        if body.index_items is None:
            store = await spec.stores(caller.client).create(body.name, owner=caller.principal)
        elif spec.kind == SESSION_STORE:
            store = await caller.client.session_stores.create(
                body.name, owner=caller.principal, index_items=body.index_items)
        else:
            raise InvalidInput("index_items is an option of session stores",
                               field="index_items")
        return _out(store)

    async def get(store: str, caller: CallerDep) -> StoreOut:
        await require(caller, spec.kind, store, "READ")
        return _out(await spec.stores(caller.client).get(store))

    async def list_stores(
        caller: CallerDep,
        page_size: PageSize = None,
        page_token: PageToken = None,
        after: Annotated[str | None, Query(max_length=MAX_STORE_NAME_CHARS, description=(
            "Keyset paging: stores named after this one (instead of page_token)."))] = None,
        limit: Annotated[int | None, Query(ge=1, le=1001, description=(
            "Keyset paging: at most this many stores, with no next_page_token."))] = None,
    ) -> BaseModel:
        client = caller.client
        visible = await visible_stores(caller, spec.kind)

        async def fetch(size: int, start: str | None) -> list[Any]:
            if visible is None:
                found: list[Any] = await spec.stores(client).list_after(after=start,
                                                                      limit=size)
                return found
            return await _readable(client, spec, visible, size, start)

        if after is not None or limit is not None:
            keyset_mode(page_size, page_token)
            # Not held to the server's max_page_size (the query bounds it): a client
            # configured with larger pages than the server's still lists its stores.
            records = await fetch(limit or client.limits.default_page_size, after)
            return listing(**{spec.list_field: [_out(r) for r in records]})
        if visible is None:
            page = await spec.stores(client).list_page(page_size=page_size,
                                                       page_token=page_token)
            return listing(**{spec.list_field: [_out(p) for p in page.items],
                              "next_page_token": page.next_page_token})
        # A principal's own listing: its tokens are refused by anyone else's.
        records, token = await page_by_name(
            client.limits, f"{spec.kind}s\x00{caller.tenant}\x00{caller.principal}",
            page_size, page_token, fetch)
        return listing(**{spec.list_field: [_out(r) for r in records],
                          "next_page_token": token})

    async def handle(caller: Caller, store: str, level: str) -> _Handle:
        await require(caller, spec.kind, store, level)
        found: _Handle = await spec.stores(caller.client).get(store)
        return found

    async def grant(store: str, body: GrantRequest, caller: CallerDep) -> Empty:
        found = await handle(caller, store, "MANAGE")
        await found.grant_permission(body.principal.name, permission_level(body.permission))
        return Empty()

    async def revoke(store: str, body: RevokeRequest, caller: CallerDep) -> Empty:
        found = await handle(caller, store, "MANAGE")
        await found.revoke_permission(body.principal.name)
        return Empty()

    async def permissions(store: str, caller: CallerDep) -> GrantsOut:
        found = await handle(caller, store, "READ")
        return grants_out(await found.permissions())

    what = spec.label
    name = spec.kind
    router.add_api_route(base, create, methods=["POST"], response_model=StoreOut,
                         name=f"create_{name}",
                         description=f"Create a {what} owned by the caller's principal.")
    router.add_api_route(base, list_stores, methods=["GET"], response_model=listing,
                         name=f"list_{name}s",
                         description=(f"The {what}s the caller may read (all of the "
                                      "tenant's for an admin, else those it owns or "
                                      "holds a grant on), by name, a page at a time."))
    router.add_api_route(one, get, methods=["GET"], response_model=StoreOut,
                         name=f"get_{name}", description=f"A {what} (READ).")
    router.add_api_route(f"{one}/permissions:grant", grant, methods=["POST"],
                         response_model=Empty, name=f"grant_{name}_permission",
                         description="Give a principal READ, WRITE or MANAGE on the store "
                                     "(MANAGE).")
    router.add_api_route(f"{one}/permissions:revoke", revoke, methods=["POST"],
                         response_model=Empty, name=f"revoke_{name}_permission",
                         description="Take a principal's grant on the store away (MANAGE); "
                                     "ownership stays.")
    router.add_api_route(f"{one}/permissions", permissions, methods=["GET"],
                         response_model=GrantsOut, name=f"list_{name}_permissions",
                         description="Every grant on the store (READ).")
    return listing
