"""Sessions and their items, in the shape of the Databricks session-store API.

Listings answer in two modes. The public mode takes ``page_size`` and an opaque
``page_token`` and answers with ``next_page_token``, exactly as the library's ``*_page``
methods do. The keyset mode (``limit``, with ``after`` or ``after_seq``) hands out the
storage cursor itself; it is what ``ownstate.connect("http://...")`` uses, so that the
client's own page tokens keep working over HTTP.

It may touch the caller's client and the routing base, :mod:`._common` and the shared
schemas, derived item columns (``ownstate.formats.derive``), the error tree, the limits and
the model, and FastAPI and pydantic; never a backend.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import Path, Query, Response
from pydantic import BaseModel, Field
from pydantic_core import to_json

from ...api import AsyncSession, AsyncSessionStore
from ...errors import InvalidInput
from ...formats.derive import infer_format
from ...limits import FORMAT_RE, LABEL_KEY_RE, anchored
from ...model import Item, SessionRecord
from ..auth import Caller
from ..routing import CallerDep
from ..schemas import ItemOut, StrictModel
from ._common import (
    CHOSEN_ID_PATTERN,
    LOOKUP_ID_PATTERN,
    MAX_BIGINT,
    PageSize,
    PageToken,
    StorePath,
    api_router,
    item_json,
    keyset_mode,
    require_session,
    require_session_store,
)

__all__ = ["router"]

router = api_router("sessions")

_ID = LOOKUP_ID_PATTERN
_CHOSEN_ID = CHOSEN_ID_PATTERN
_FORMAT = anchored(FORMAT_RE)

SessionPath = Annotated[str, Path(pattern=_ID, description="The session's id.")]
ItemPath = Annotated[str, Path(pattern=_ID, description="The item's id.")]
Labels = dict[str, str]


class SessionOut(BaseModel):
    """A session: ``actor_id`` groups sessions and grants nothing; ``metadata`` labels
    are the only mutable part."""

    name: str = Field(description="session-stores/{store}/sessions/{session_id}")
    store: str
    session_id: str
    actor_id: str
    parent_session_id: str | None = None
    root_session_id: str
    metadata: Labels
    create_time: datetime
    last_activity_time: datetime


class CreateSession(StrictModel):
    actor_id: str = Field(min_length=1, description=(
        "Who the session belongs to (required, immutable; grants nothing). At most "
        "Limits.max_actor_id_chars (256) characters."))
    session_id: str | None = Field(default=None, pattern=_CHOSEN_ID, description=(
        "The session's id; generated when absent."))
    metadata: Labels | None = Field(default=None, description=(
        "String labels; at most Limits.max_metadata_labels (32), keys of "
        "[A-Za-z0-9_.:/-]{1,64}, values of at most 256 characters."))


class UpdateSession(StrictModel):
    metadata: dict[str, str | None] = Field(description=(
        "Labels to set; a null value removes that label. Others stay as they are."))


class ForkSession(StrictModel):
    source_session_id: str = Field(pattern=_ID, description="The session to copy.")
    up_to_item_id: str | None = Field(default=None, pattern=_ID, description=(
        "The last item to copy, inclusively; every item when absent."))
    session_id: str | None = Field(default=None, pattern=_CHOSEN_ID, description=(
        "The fork's id; generated when absent."))


class NewItemIn(StrictModel):
    data: dict[str, Any] = Field(description=(
        "The item, a JSON object stored exactly as given; at most Limits.max_item_bytes "
        "(1 MiB) of UTF-8 JSON."))
    format: str | None = Field(default=None, pattern=_FORMAT, description=(
        "The shape of data (openai.responses, langchain, adk.event, ...); inferred when "
        "absent. The items of one append share one format unless each is in the format "
        "it would be inferred as."))


class AppendItems(StrictModel):
    items: list[NewItemIn] = Field(min_length=1, description=(
        "Appended all or none, in this order; at most Limits.max_batch_items (1000) "
        "items and Limits.max_batch_bytes (16 MiB)."))
    idempotency_key: str | None = Field(default=None, min_length=1, description=(
        "A retry with the same key and items writes nothing and returns the first "
        "call's items; at most Limits.max_idempotency_key_chars (256) characters."))


class SessionsOut(BaseModel):
    sessions: list[SessionOut]
    next_page_token: str | None = None
    next_after: str | None = Field(default=None, description=(
        "Keyset mode: the cursor to send as `after` for the next page (JSON text); "
        "absent on the last page."))


class ItemsOut(BaseModel):
    session_items: list[ItemOut]
    next_page_token: str | None = None


class ForkOut(BaseModel):
    session: SessionOut


class PopOut(BaseModel):
    session_item: ItemOut | None = Field(description="The removed item; null when empty.")


class ClearedOut(BaseModel):
    items_cleared: int


class DeletedSessionsOut(BaseModel):
    sessions_deleted: int


class HistoryOut(BaseModel):
    as_format: str
    items: list[dict[str, Any]]
    next_page_token: str | None = None


def _session_out(record: SessionRecord) -> SessionOut:
    return SessionOut(
        name=f"session-stores/{record.store}/sessions/{record.session_id}",
        store=record.store, session_id=record.session_id, actor_id=record.actor_id,
        parent_session_id=record.parent_session_id, root_session_id=record.root_session_id,
        metadata=record.metadata, create_time=record.create_time,
        last_activity_time=record.last_activity_time)


def _item_out(item: Item) -> ItemOut:
    return ItemOut.model_validate(item_json(item))


def _items_response(items: list[Item], next_page_token: str | None = None) -> Response:
    """An :class:`ItemsOut` body, serialised straight from the items: a page holds up to a
    thousand of them, and building a model of each would cost more than the listing."""
    body: dict[str, Any] = {"session_items": [item_json(i) for i in items],
                            "next_page_token": next_page_token}
    return Response(to_json(body), media_type="application/json")


async def _store(caller: Caller, store: str, level: str) -> AsyncSessionStore:
    """The store, once the caller may act at ``level`` on it. Raises StoreNotFound,
    PermissionDenied."""
    await require_session_store(caller, store, level)
    return await caller.client.session_stores.get(store)


async def _session(caller: Caller, store: str, session_id: str, level: str) -> AsyncSession:
    """A handle on the session once the caller may act at ``level``: one permission
    lookup and no read of the session itself."""
    await require_session(caller, store, session_id, level)
    return await caller.client.session_stores.session(store, session_id)


_CLAUSE_RE = re.compile(
    rf'\s*(actor_id|metadata\.({LABEL_KEY_RE.pattern}))\s*=\s*("(?:[^"\\\x00-\x1f]|\\.)*")\s*')
_AND_RE = re.compile(r"AND\b", re.IGNORECASE)


def _filter(text: str | None) -> tuple[str | None, dict[str, str] | None]:
    """The actor and labels a filter expression names: clauses ``actor_id = "..."`` and
    ``metadata.KEY = "..."`` (values as JSON strings) joined by ``AND``."""
    if text is None or not text.strip():
        return None, None
    actor: str | None = None
    labels: dict[str, str] = {}
    position = 0
    while True:
        clause = _CLAUSE_RE.match(text, position)
        if clause is None:
            raise InvalidInput('filter must read actor_id = "..." AND metadata.KEY = "..."',
                               field="filter")
        try:
            value = json.loads(clause.group(3))
        except ValueError as exc:
            raise InvalidInput("filter holds a malformed string", field="filter") from exc
        key = clause.group(2)
        if (actor if key is None else labels.get(key)) is not None:
            raise InvalidInput(f"filter names {clause.group(1)} twice", field="filter")
        if key is None:
            actor = value
        else:
            labels[key] = value
        position = clause.end()
        if position == len(text):
            return actor, labels or None
        joined = _AND_RE.match(text, position)
        if joined is None:
            raise InvalidInput("filter clauses are joined by AND", field="filter")
        position = joined.end()


# sessions --------------------------------------------------------------------------------


@router.post("/session-stores/{store}/sessions", response_model=SessionOut)
async def create_session(store: StorePath, body: CreateSession,
                         caller: CallerDep) -> SessionOut:
    """Create a session for an actor (WRITE)."""
    found = await _store(caller, store, "WRITE")
    made = await found.add(actor_id=body.actor_id, session_id=body.session_id,
                           metadata=body.metadata)
    return _session_out(made.record)


@router.get("/session-stores/{store}/sessions/{session_id}", response_model=SessionOut)
async def get_session(store: StorePath, session_id: SessionPath,
                      caller: CallerDep) -> SessionOut:
    """A session (READ)."""
    session = await _session(caller, store, session_id, "READ")
    return _session_out((await session.refresh()).record)


@router.get("/session-stores/{store}/sessions", response_model=SessionsOut)
async def list_sessions(
    store: StorePath,
    caller: CallerDep,
    filter: Annotated[str | None, Query(max_length=16384, description=(
        'Only matching sessions: clauses actor_id = "..." and metadata.KEY = "..." '
        '(values as JSON strings) joined by AND, e.g. '
        'actor_id = "customer-123" AND metadata.channel = "web".'))] = None,
    order_by: Annotated[str, Query(max_length=64, description=(
        "create_time or last_activity_time, asc or desc."))] = "create_time desc",
    page_size: PageSize = None,
    page_token: PageToken = None,
    after: Annotated[str | None, Query(max_length=256, description=(
        "Keyset mode: the `next_after` of the previous page (instead of page_token)."))
    ] = None,
    limit: Annotated[int | None, Query(ge=1, le=1001, description=(
        "Keyset mode: at most this many sessions, with `next_after` instead of "
        "next_page_token."))] = None,
) -> SessionsOut:
    """The sessions of a store, filtered by actor and labels (READ)."""
    actor_id, metadata = _filter(filter)
    if after is None and limit is None:
        found = await _store(caller, store, "READ")
        page = await found.list_sessions_page(
            actor_id=actor_id, metadata=metadata, order_by=order_by,
            page_size=page_size, page_token=page_token)
        return SessionsOut(sessions=[_session_out(s.record) for s in page.items],
                           next_page_token=page.next_page_token)
    keyset_mode(page_size, page_token)
    found = await _store(caller, store, "READ")
    sessions, next_after = await found.list_sessions_after(
        actor_id=actor_id, metadata=metadata, order_by=order_by, after=after, limit=limit)
    return SessionsOut(sessions=[_session_out(s.record) for s in sessions],
                       next_after=next_after)


@router.patch("/session-stores/{store}/sessions/{session_id}", response_model=SessionOut)
async def update_session(
    store: StorePath,
    session_id: SessionPath,
    body: UpdateSession,
    caller: CallerDep,
    max_labels: Annotated[int | None, Query(ge=1, le=2**31, description=(
        "Refuse an update that would leave more labels than this: a client's own bound, "
        "applied with the server's (the smaller wins)."))] = None,
) -> SessionOut:
    """Set or remove metadata labels (WRITE); other fields are immutable."""
    session = await _session(caller, store, session_id, "WRITE")
    # The count after the update is only known where it is stored, so a client's
    # stricter bound travels with the request instead of being checked before it.
    updated = await session.update_metadata(body.metadata, max_labels=max_labels)
    return _session_out(updated.record)


@router.delete("/session-stores/{store}/sessions/{session_id}",
               response_model=DeletedSessionsOut)
async def delete_session(store: StorePath, session_id: SessionPath, caller: CallerDep,
                         force: bool = False) -> DeletedSessionsOut:
    """Delete a session and its items (WRITE); refused while forks of it exist unless
    ``force``, which deletes them too."""
    session = await _session(caller, store, session_id, "WRITE")
    return DeletedSessionsOut(sessions_deleted=await session.delete(force=force))


@router.post("/session-stores/{store}/sessions:fork", response_model=ForkOut)
async def fork_session(store: StorePath, body: ForkSession, caller: CallerDep) -> ForkOut:
    """Copy a session's items, up to and including one of them, into a new child
    session with the same actor and labels (WRITE)."""
    source = await _session(caller, store, body.source_session_id, "WRITE")
    child = await source.fork(up_to_item_id=body.up_to_item_id, session_id=body.session_id)
    return ForkOut(session=_session_out(child.record))


# items ---------------------------------------------------------------------------------


@router.post("/session-stores/{store}/sessions/{session_id}/items:append",
             response_model=ItemsOut)
async def append_items(store: StorePath, session_id: SessionPath, body: AppendItems,
                       caller: CallerDep) -> Response:
    """Append items, all or none, in order (WRITE)."""
    session = await _session(caller, store, session_id, "WRITE")
    data = [item.data for item in body.items]
    formats = {item.format for item in body.items}
    fixed = next(iter(formats)) if len(formats) == 1 else None
    if len(formats) > 1:
        # Items that each name the format they would be inferred as are stored exactly
        # as an append without formats would store them; others cannot be mixed.
        for index, item in enumerate(body.items):
            if item.format is not None and item.format != infer_format(item.data):
                raise InvalidInput("the items of one append share one format unless each "
                                   "is in the format it would be inferred as",
                                   field="items", index=index)
    appended = await session.append_items(data, idempotency_key=body.idempotency_key,
                                          format=fixed)
    return _items_response(appended)


@router.get("/session-stores/{store}/sessions/{session_id}/items", response_model=ItemsOut)
async def list_items(
    store: StorePath,
    session_id: SessionPath,
    caller: CallerDep,
    order_by: Annotated[str, Query(max_length=64, description=(
        "create_time desc (newest first, the default) or create_time asc (replay "
        "order)."))] = "create_time desc",
    page_size: PageSize = None,
    page_token: PageToken = None,
    after_seq: Annotated[int | None, Query(ge=0, le=MAX_BIGINT, description=(
        "Start after the item with this seq (instead of page_token)."))] = None,
    limit: Annotated[int | None, Query(ge=1, le=1001, description=(
        "Keyset mode: at most this many items from after_seq on, with no "
        "next_page_token."))] = None,
) -> Response:
    """A session's items, newest first unless ordered ``create_time asc`` (READ)."""
    session = await _session(caller, store, session_id, "READ")
    if limit is None:
        page = await session.list_items_page(order_by=order_by, page_size=page_size,
                                             page_token=page_token, after_seq=after_seq)
        return _items_response(page.items, page.next_page_token)
    keyset_mode(page_size, page_token, cursor="after_seq")
    return _items_response(await session.list_items_after(order_by=order_by,
                                                          after_seq=after_seq, limit=limit))


@router.get("/session-stores/{store}/sessions/{session_id}/items/{item_id}",
            response_model=ItemOut)
async def get_item(store: StorePath, session_id: SessionPath, item_id: ItemPath,
                   caller: CallerDep) -> ItemOut:
    """One item (READ)."""
    session = await _session(caller, store, session_id, "READ")
    return _item_out(await session.get_item(item_id))


@router.post("/session-stores/{store}/sessions/{session_id}/items:pop",
             response_model=PopOut)
async def pop_item(store: StorePath, session_id: SessionPath, caller: CallerDep) -> PopOut:
    """Remove and return the newest item; null when the session is empty (WRITE)."""
    session = await _session(caller, store, session_id, "WRITE")
    popped = await session.pop_item()
    return PopOut(session_item=_item_out(popped) if popped is not None else None)


@router.post("/session-stores/{store}/sessions/{session_id}/items:clear",
             response_model=ClearedOut)
async def clear_items(store: StorePath, session_id: SessionPath,
                      caller: CallerDep) -> ClearedOut:
    """Remove every item; the session stays (WRITE)."""
    session = await _session(caller, store, session_id, "WRITE")
    return ClearedOut(items_cleared=await session.clear())


@router.get("/session-stores/{store}/sessions/{session_id}/history",
            response_model=HistoryOut)
async def get_history(
    store: StorePath,
    session_id: SessionPath,
    caller: CallerDep,
    as_format: Annotated[str, Query(pattern=_FORMAT, description=(
        "openai.responses, langchain, adk.event, claude.transcript or ownstate.message "
        "(neutral messages)."))] = "ownstate.message",
    page_size: PageSize = None,
    page_token: PageToken = None,
) -> HistoryOut:
    """One page of the history, oldest first, converted to one framework's shape (READ).
    A page stops before the entry that would take it past ``Limits.max_page_bytes`` of
    JSON (always holding one); ``next_page_token`` asks for the next."""
    session = await _session(caller, store, session_id, "READ")
    page = await session.history_page(as_format, page_size=page_size, page_token=page_token)
    return HistoryOut(as_format=as_format, items=page.items,
                      next_page_token=page.next_page_token)
