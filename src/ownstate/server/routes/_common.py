"""What several route modules share: the router's shape and error responses, path
parameters, permission checks, keyset paging and the Unicode checks of JSON bodies. It may
touch the caller and the permission checks, the routing base and the shared schemas, the
wire form of errors (``ownstate._wire``), the error tree, the limits and the model, and
FastAPI; never a backend."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from ..._wire import PROBLEM_MEDIA_TYPE
from ...errors import InvalidInput, PermissionDenied, SessionNotFound, StoreNotFound
from ...limits import (
    MAX_LOOKUP_CHARS,
    SESSION_ID_RE,
    STORE_NAME_RE,
    anchored,
    encode_json,
    printable,
)
from ...model import JSON, Grant, Item
from ..auth import Caller
from ..permissions import SESSION_STORE, require
from ..routing import BoundedRoute
from ..schemas import GrantOut, GrantsOut, Problem

__all__ = [
    "CHOSEN_ID_PATTERN",
    "ERRORS",
    "LOOKUP_ID_PATTERN",
    "MAX_BIGINT",
    "STORE_PATTERN",
    "PageSize",
    "PageToken",
    "StorePath",
    "api_router",
    "grants_out",
    "item_json",
    "json_utf8",
    "keyset_mode",
    "require_admin",
    "require_session",
    "require_session_store",
    "utf8_text",
]

_PROBLEM: dict[str, Any] = {"model": Problem, "content": {PROBLEM_MEDIA_TYPE: {}}}

#: Every route may answer with these (documented once, shared by every route).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: dict(_PROBLEM, description=text) for code, text in (
        (400, "The request is malformed or crosses a documented bound."),
        (401, "No API key, or an unknown or revoked one."),
        (403, "The key's principal may see the store but not do this."),
        (404, "No such thing in the key's tenant, or one the principal may not see."),
        (409, "The request clashes with what is stored."),
        (413, "The request body is larger than the server accepts."),
        (431, "The request carries more header fields than the server accepts."),
        (503, "The database could not be reached."),
    )
}

#: The largest value a stored integer (seq, cursor, fencing token) may hold.
MAX_BIGINT = 2**63 - 1
# Every pattern below is built from the library's own rules (ownstate.limits), so that
# whatever the library accepts the server accepts too.
STORE_PATTERN = anchored(STORE_NAME_RE)
#: A session id or run id to create: the library's rule for chosen ids.
CHOSEN_ID_PATTERN = anchored(SESSION_ID_RE)
#: An id to look up: any text but control characters, as in the library, where an id no
#: session, item or run can have is simply not found.
LOOKUP_ID_PATTERN = printable(MAX_LOOKUP_CHARS)
StorePath = Annotated[str, Path(pattern=STORE_PATTERN, description="The store's name.")]
#: The query parameters of a token-paged listing: how many per page, and where to go on.
PageSize = Annotated[int | None, Query(ge=1, le=1000)]
PageToken = Annotated[str | None, Query(max_length=2048)]


def api_router(tag: str) -> APIRouter:
    """A router for one kind of state, under the API's prefix, documenting :data:`ERRORS`,
    whose routes hold request bodies to their own bounds (see ``routing.BoundedRoute``)."""
    return APIRouter(prefix="/api/2.0/agents", tags=[tag], responses=ERRORS,
                     route_class=BoundedRoute)


def grants_out(grants: list[Grant]) -> GrantsOut:
    return GrantsOut(grants=[GrantOut(kind=g.kind, store=g.store, principal=g.principal,
                                      level=g.level) for g in grants])


def require_admin(caller: Caller, what: str) -> None:
    """Pass for an admin key. Raises :class:`~ownstate.errors.PermissionDenied`."""
    if not caller.admin:
        raise PermissionDenied(f"only an admin key may {what}")


async def require_session_store(caller: Caller, store: str, level: str) -> None:
    """Pass when the caller may act at ``level`` on the session store.

    An admin passes without a lookup: it may do anything, so the check would only ask
    whether the store exists, which the operation that follows answers itself.
    Raises :class:`~ownstate.errors.StoreNotFound`, :class:`~ownstate.errors.PermissionDenied`.
    """
    if not caller.admin:
        await require(caller, SESSION_STORE, store, level)


async def require_session(caller: Caller, store: str, session_id: str, level: str) -> None:
    """Pass when the caller may act at ``level`` on the session's store.

    A session of a missing or unreadable store is a missing session, as in the library,
    and reads exactly like one. Raises :class:`~ownstate.errors.SessionNotFound`,
    :class:`~ownstate.errors.PermissionDenied`.
    """
    try:
        await require_session_store(caller, store, level)
    except StoreNotFound as exc:
        raise SessionNotFound(f"no session {session_id!r} in store {store!r}",
                              store=store, session_id=session_id) from exc


def keyset_mode(page_size: int | None, page_token: str | None, *,
                cursor: str = "after") -> None:
    """Pass unless a keyset listing (``limit`` and ``cursor``) is also given token paging
    (``page_size``, ``page_token``). Raises :class:`~ownstate.errors.InvalidInput`."""
    if page_token is not None or page_size is not None:
        raise InvalidInput(f"give page_size/page_token or {cursor}/limit, not both",
                           field="limit")


def utf8_text(value: str) -> str:
    """A pydantic validator: JSON bodies may carry lone surrogates (``\\ud800``), which no
    datastore can store."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode text") from exc
    return value


def json_utf8(value: JSON, field: str) -> JSON:
    """``value`` when its JSON text is valid UTF-8. Raises
    :class:`~ownstate.errors.InvalidInput` naming ``field``."""
    try:
        encode_json(value, field=field).encode()
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} holds text that is not valid Unicode", field=field) from exc
    except InvalidInput:
        pass  # the public API reports what JSON cannot hold, with its own message
    return value


def item_json(item: Item) -> dict[str, Any]:
    """An item as :class:`~ownstate.server.schemas.ItemOut` describes it, ready for the
    JSON encoder (the data left as it is)."""
    return {"item_id": item.item_id, "session_id": item.session_id, "seq": item.seq,
            "create_time": item.create_time, "data": item.data, "format": item.format,
            "role": item.role, "type": item.type, "tool_name": item.tool_name,
            "model": item.model, "in_tokens": item.in_tokens, "out_tokens": item.out_tokens}
