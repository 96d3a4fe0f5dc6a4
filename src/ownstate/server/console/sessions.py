"""Sessions: the session stores the caller may read, their sessions (by actor, labels and
time), a session's transcript, its fork tree and its runs, and the images its items hold.

Every page needs READ on the store (``permissions.require``), as the API's routes do, and
reads through the caller's client.

It may touch the caller's client, the console's base (:mod:`._web`) and :mod:`.transcript`,
the permission checks, the error tree and the model, and FastAPI.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Query, Request
from fastapi.responses import Response

from ...errors import InvalidInput, NotFound
from ...model import Item
from ..permissions import SESSION_STORE, require
from ._web import (
    CONSOLE,
    ConsoleCaller,
    console_router,
    moment,
    redirect,
    render,
    security_headers,
    store_index,
)
from .transcript import entries

__all__ = ["router"]

router = console_router()

#: Items per transcript slice: the page loads the next slice as it is scrolled to.
SLICE = 100
#: Sessions per page of a store's listing.
SESSIONS_PAGE = 50
#: How many sessions of the actor are read to draw a fork tree.
TREE_SCAN = 500


def _labels(text: str | None) -> dict[str, str]:
    """``key=value, key=value`` as labels."""
    labels: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInput("labels are key=value pairs, separated by commas",
                               field="labels")
        labels[key.strip()] = value.strip()
    return labels


@router.get("/sessions")
async def stores(request: Request, signed: ConsoleCaller) -> Response:
    """The session stores the caller may read, by name."""
    return await store_index(request, signed, SESSION_STORE, "stores.html")


@router.get("/sessions/{store}")
async def store_sessions(
    request: Request, store: str, signed: ConsoleCaller,
    actor_id: Annotated[str | None, Query(max_length=256)] = None,
    labels: Annotated[str | None, Query(max_length=2048)] = None,
    since: Annotated[str | None, Query(max_length=40)] = None,
    until: Annotated[str | None, Query(max_length=40)] = None,
    order: Annotated[str, Query(pattern="^(create_time|last_activity_time)$")] = "create_time",
    page_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> Response:
    """A store's sessions, newest first, by actor, labels and activity time."""
    caller = signed.caller
    await require(caller, SESSION_STORE, store, "READ")
    handle = await caller.client.session_stores.get(store)
    start, end = moment(since, "since"), moment(until, "until")
    page = await handle.list_sessions_page(
        actor_id=actor_id or None, metadata=_labels(labels), order_by=f"{order} desc",
        page_size=SESSIONS_PAGE, page_token=page_token or None)
    # The listing filters by actor and labels; time narrows the page it returns.
    shown = [s for s in page.items if (start is None or s.last_activity_time >= start)
             and (end is None or s.create_time <= end)]
    query = {"actor_id": actor_id or "", "labels": labels or "", "since": since or "",
             "until": until or "", "order": order}
    next_url = (f"?{urlencode({**query, 'page_token': page.next_page_token})}"
                if page.next_page_token else None)
    return render(request, "sessions.html", signed, store=store, sessions=shown,
                  next_url=next_url, query=query)


def _tree(current: Any, relatives: list[Any]) -> list[dict[str, Any]]:
    """The fork tree holding ``current``, from its root: nested ``{session, children}``."""
    by_parent: dict[str | None, list[Any]] = {}
    known = {s.session_id: s for s in relatives}
    known[current.session_id] = current
    for one in known.values():
        by_parent.setdefault(one.parent_session_id, []).append(one)

    def grow(session: Any, depth: int) -> dict[str, Any]:
        kids = sorted(by_parent.get(session.session_id, []), key=lambda s: s.create_time)
        return {"session": session,
                "children": [grow(k, depth + 1) for k in kids] if depth < 20 else []}

    root = known.get(current.root_session_id)
    if root is None:
        return [grow(current, 0)]
    return [grow(root, 0)]


async def _slice(session: Any, after_seq: int | None) -> tuple[list[Item], int | None]:
    items = await session.list_items_after(order_by="create_time asc", after_seq=after_seq,
                                           limit=SLICE + 1)
    more = len(items) > SLICE
    del items[SLICE:]
    return items, (items[-1].seq if more and items else None)


@router.get("/sessions/{store}/{session_id}")
async def session_page(
    request: Request, store: str, session_id: str, signed: ConsoleCaller,
    after_seq: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    """A session: its labels, fork tree and runs, and its transcript from ``after_seq``
    on (the rest loads as the page is scrolled)."""
    caller = signed.caller
    await require(caller, SESSION_STORE, store, "READ")
    session = await caller.client.session_stores.session(store, session_id)
    await session.refresh()
    handle = await caller.client.session_stores.get(store)
    # Three independent reads: on a pooled database they overlap.
    (relatives, _), (runs, _), (items, next_seq) = await asyncio.gather(
        handle.list_sessions_after(actor_id=session.actor_id, limit=TREE_SCAN),
        caller.client.runs.list_after(store=store, session=session, limit=50),
        _slice(session, after_seq))
    relatives = [s for s in relatives if s.root_session_id == session.root_session_id]
    return render(request, "session.html", signed, store=store, session=session,
                  tree=_tree(session, relatives), runs=runs, entries=entries(items),
                  next_seq=next_seq, after_seq=after_seq)


@router.get("/sessions/{store}/{session_id}/items")
async def transcript_slice(
    request: Request, store: str, session_id: str, signed: ConsoleCaller,
    after_seq: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    """The next slice of a transcript, for the page to append."""
    caller = signed.caller
    await require(caller, SESSION_STORE, store, "READ")
    session = await caller.client.session_stores.session(store, session_id)
    items, next_seq = await _slice(session, after_seq)
    return render(request, "_transcript.html", signed, store=store, session_id=session_id,
                  entries=entries(items), next_seq=next_seq)


@router.get("/sessions/{store}/{session_id}/items/{item_id}")
async def item_in_transcript(store: str, session_id: str, item_id: str,
                             signed: ConsoleCaller) -> Response:
    """The transcript, opened at one item (what a fact's provenance links to)."""
    caller = signed.caller
    await require(caller, SESSION_STORE, store, "READ")
    session = await caller.client.session_stores.session(store, session_id)
    item = await session.get_item(item_id)
    start = f"?after_seq={item.seq - 1}" if item.seq > 1 else ""
    return redirect(f"{CONSOLE}/sessions/{store}/{session_id}{start}#item-{item.item_id}")


@router.get("/assets/{asset_id}")
async def asset(asset_id: str, signed: ConsoleCaller) -> Response:
    """An image an item refers to (READ on the asset's store); any other media type is
    sent as a download, never rendered as a page of this origin."""
    caller = signed.caller
    try:
        ref = await caller.client.assets.get_ref(asset_id)
    except NotFound as exc:
        raise NotFound(f"no asset {asset_id!r}") from exc
    if ref.store is None or ref.session_id is None:
        if not caller.admin:
            raise NotFound(f"no asset {asset_id!r}")
    else:
        try:
            await require(caller, SESSION_STORE, ref.store, "READ")
        except NotFound as exc:
            raise NotFound(f"no asset {asset_id!r}") from exc
    data = await caller.client.assets.get(asset_id)
    image = ref.media_type in ("image/png", "image/jpeg", "image/gif", "image/webp")
    response = Response(data, media_type=ref.media_type if image
                        else "application/octet-stream")
    if not image:
        response.headers["content-disposition"] = "attachment"
    response.headers["cache-control"] = "private, max-age=300"
    return security_headers(response)
