"""Memory: the memory stores the caller may read, the subjects of each (a page at a time),
a subject's facts (now, or as of a past
moment) with their confidence and provenance, each fact's versions, forgetting a fact, and
erasing a subject.

READ to look, WRITE to forget, an admin key to erase (as ``POST /subjects:erase``); checks
are the API's (``permissions.require``), and every change goes through the caller's client.

It may touch the caller's client, the console's base (:mod:`._web`), the permission checks,
the routes' shared pieces (``ownstate.server.routes._common``), the error tree and the
model, and FastAPI.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import Form, Query, Request
from fastapi.responses import Response

from ...errors import InvalidInput
from ...model import Fact
from ..permissions import MEMORY_STORE, require
from ..routes._common import require_admin
from ._web import (
    CONSOLE,
    ConsoleCaller,
    console_router,
    may,
    memory_levels,
    moment,
    redirect,
    render,
    store_index,
)

__all__ = ["router"]

router = console_router()

#: subjects shown on a memory store's page at a time
_SUBJECTS_PAGE = 50


@router.get("/memory")
async def memory_stores(request: Request, signed: ConsoleCaller) -> Response:
    """The memory stores the caller may read, by name."""
    return await store_index(request, signed, MEMORY_STORE, "memory_stores.html")


@router.get("/memory/{store}")
async def subject_facts(
    request: Request, store: str, signed: ConsoleCaller,
    subject: Annotated[str | None, Query(max_length=256)] = None,
    as_of: Annotated[str | None, Query(max_length=40)] = None,
    q: Annotated[str | None, Query(max_length=512)] = None,
    subjects_page: Annotated[str | None, Query(max_length=2048)] = None,
) -> Response:
    """A subject's facts in force (now, or at ``as_of``), or the current facts a search
    finds, each with its source; with neither, the store's subjects, a page at a time."""
    caller = signed.caller
    await require(caller, MEMORY_STORE, store, "READ")
    memory = await caller.client.memory_stores.get(store)
    subject = (subject or "").strip() or None
    when = moment(as_of, "as_of")
    facts: list[Fact] = []
    if q and q.strip():  # ranked: the best match first
        facts = [hit.fact for hit in await memory.search(q, subject=subject, limit=100,
                                                          as_of=when)]
    elif subject is not None:
        facts = await memory.recall(subject, as_of=when)
    subjects = None
    if subject is None and not (q and q.strip()):
        subjects = await memory.subjects(page_size=_SUBJECTS_PAGE, page_token=subjects_page)
    return render(request, "memory.html", signed, store=store, subject=subject or "",
                  as_of=as_of or "", q=q or "", facts=facts, subjects=subjects,
                  may_forget=when is None and may(await memory_levels(caller), store,
                                                    "WRITE"))


@router.get("/memory/{store}/facts/{fact_id}")
async def fact_page(request: Request, store: str, fact_id: str,
                    signed: ConsoleCaller) -> Response:
    """One fact: why it is what it is (what it superseded, its source item) and every
    version of its (subject, key)."""
    caller = signed.caller
    await require(caller, MEMORY_STORE, store, "READ")
    memory = await caller.client.memory_stores.get(store)
    explained = await memory.explain(fact_id)
    versions = await memory.history(explained.fact.subject, explained.fact.key)
    return render(request, "fact.html", signed, store=store, explained=explained,
                  fact=explained.fact, versions=list(reversed(versions)))


@router.post("/memory/{store}/forget")
async def forget(store: str, signed: ConsoleCaller,
                 subject: Annotated[str, Form(max_length=256)],
                 key: Annotated[str, Form(max_length=256)],
                 reason: Annotated[str, Form(max_length=1000)] = "") -> Response:
    """Stop believing a subject's current fact for a key, with a reason (WRITE)."""
    caller = signed.caller
    await require(caller, MEMORY_STORE, store, "WRITE")
    memory = await caller.client.memory_stores.get(store)
    await memory.forget(subject, key, reason.strip() or None)
    return redirect(f"{CONSOLE}/memory/{store}?{urlencode({'subject': subject})}")


@router.post("/memory/erase")
async def erase(request: Request, signed: ConsoleCaller,
                subject: Annotated[str, Form(max_length=256)],
                confirm: Annotated[str, Form(max_length=256)] = "",
                include_sessions: Annotated[bool, Form()] = False) -> Response:
    """Hard-delete everything about a subject across the tenant (admin), once the subject
    has been typed again to confirm."""
    caller = signed.caller
    require_admin(caller, "erase a subject")
    if confirm.strip() != subject.strip():
        raise InvalidInput("type the subject again to confirm the erasure", field="confirm")
    counts = await caller.client.memory_stores.erase_subject(
        subject.strip(), include_sessions=include_sessions)
    return render(request, "erased.html", signed, subject=subject.strip(), counts=counts)
