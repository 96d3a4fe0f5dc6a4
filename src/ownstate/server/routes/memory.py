"""Memory stores, their permissions and the facts they hold; and the tenant-wide subject
operations (erase, export), which only admin keys may use.

Facts live under their store (``/memory-stores/{store}/facts/...``), so the permission on
the store covers every fact in it, addressed by id or by (subject, key).

Provenance points into session stores, which have permissions of their own. A caller may
only name a source item it could read (else the item is "not found", exactly as a missing
one), and ``explain`` shows the source item only to a caller who may read its session
store; to anyone else it reports ``source_item: null``, which reads exactly as an item that
has since been deleted. The fact's own source ids stay visible: they are part of the fact.

It may touch the caller's client (``ownstate.api.memory``) and the permission checks, the
routing base, :mod:`._common`, :mod:`._stores` and the shared schemas, the error tree, the
limits and the model, and FastAPI and pydantic; never a backend.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import AwareDatetime, BaseModel, BeforeValidator, Field, Strict
from pydantic_core import to_json

from ...api.memory import AsyncMemoryStore
from ...errors import InvalidInput, ItemNotFound, NotFound
from ...limits import MAX_NAME_CHARS, NAME_PATTERN
from ...model import JSON, SOURCE_TYPES, Fact, Item
from ..auth import Caller
from ..permissions import MEMORY_STORE, SESSION_STORE, require, visible_stores
from ..routing import CallerDep
from ..schemas import ItemOut, Score, SearchMode, StrictModel
from ._common import PageSize, PageToken, api_router, item_json, keyset_mode, require_admin
from ._stores import StoreKind, add_store_routes

__all__ = ["router"]

router = api_router("memory")

MEMORY_STORES = StoreKind(MEMORY_STORE, lambda client: client.memory_stores)
MemoryStoresOut = add_store_routes(router, MEMORY_STORES)

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=NAME_PATTERN)]
SourcePart = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
SourceType = Annotated[str, Field(pattern="^(" + "|".join(SOURCE_TYPES) + ")$")]
Confidence = Annotated[float, Field(ge=0, le=1)]


def _text_time(value: object) -> object:
    # JSON has no time type: a time is RFC 3339 text, never a bare number of seconds.
    if not isinstance(value, str):
        raise ValueError("must be RFC 3339 text with a UTC offset")
    return value


#: Request bodies are strict (no coercion), but a time can only arrive as text.
Moment = Annotated[AwareDatetime, Strict(False), BeforeValidator(_text_time)]
NameQuery = Annotated[str, Query(min_length=1, max_length=MAX_NAME_CHARS,
                                 pattern=NAME_PATTERN)]


# bodies ---------------------------------------------------------------------------------


class FactsDeletedOut(BaseModel):
    facts_deleted: int


class SourceIn(StrictModel):
    """The conversation item a fact was learned from. Without ``store``, the item is
    looked up by its ids among the session stores the caller may read."""

    store: SourcePart | None = None
    session_id: SourcePart
    item_id: SourcePart


class FactIn(StrictModel):
    subject: Name
    key: Name
    value: Any = Field(description="Any JSON value, stored exactly as given.")
    confidence: Confidence | None = None
    source: SourceIn | None = None
    source_type: SourceType = "agent"
    valid_from: Moment | None = Field(default=None, description=(
        "When the value became true in the world (default: the time it is recorded)."))


class FactsIn(StrictModel):
    facts: list[FactIn] = Field(description=(
        "Remembered in order, all or none; at most the server's batch limit (1000 by "
        "default)."))


class RecallIn(StrictModel):
    subject: Name
    keys: list[Name] | None = Field(default=None, description=(
        "Only these keys (at most the server's page limit, 1000 by default)."))
    as_of: Moment | None = Field(default=None, description="Valid time (default: now).")
    known_at: Moment | None = Field(default=None, description="Record time (default: now).")


class ForgetIn(StrictModel):
    subject: Name
    key: Name
    reason: str | None = Field(default=None, max_length=1000)


class SearchIn(StrictModel):
    query: str = Field(description=(
        "What to look for: at most 2,000 characters and 64 distinct terms; facts holding "
        "any of its words rank by BM25 relevance."))
    subject: Name | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    as_of: Moment | None = Field(default=None, description=(
        "Valid time: find the facts in force then (default now)."))
    mode: SearchMode = None


class SubjectIn(StrictModel):
    subject: Name
    include_sessions: bool = False


class FactOut(BaseModel):
    fact_id: str
    memory_store: str
    subject: str
    key: str
    value: Any
    confidence: float | None
    source_type: str
    source_store: str | None = None
    source_session_id: str | None
    source_item_id: str | None
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    superseded_at: datetime | None
    supersedes: str | None
    closed_reason: str | None = None


class FactsOut(BaseModel):
    facts: list[FactOut]


class ForgottenOut(BaseModel):
    fact: FactOut | None = Field(description="The fact closed, or null when none was current.")


class ExplanationOut(BaseModel):
    fact: FactOut
    superseded: FactOut | None
    superseded_by: FactOut | None
    source_item: ItemOut | None = Field(description=(
        "The item the fact was learned from; null when it has none, the item was deleted, "
        "or the caller may not read its session store."))


class ErasedOut(BaseModel):
    facts: int
    sessions: int


class SubjectExportOut(BaseModel):
    format: str
    version: int
    tenant: str
    subject: str
    exported_at: str
    facts: list[dict[str, Any]]
    sessions: list[dict[str, Any]]


# helpers --------------------------------------------------------------------------------


def _fact_json(fact: Fact) -> dict[str, Any]:
    """A fact as :class:`FactOut` describes it (the value left as it is)."""
    return {
        "fact_id": fact.fact_id, "memory_store": fact.memory_store, "subject": fact.subject,
        "key": fact.key, "value": fact.value, "confidence": fact.confidence,
        "source_type": fact.source_type, "source_store": fact.source_store,
        "source_session_id": fact.source_session_id, "source_item_id": fact.source_item_id,
        "valid_from": fact.valid_from, "valid_to": fact.valid_to,
        "recorded_at": fact.recorded_at, "superseded_at": fact.superseded_at,
        "supersedes": fact.supersedes, "closed_reason": fact.closed_reason,
    }


def _respond(payload: Any) -> Response:
    """The JSON answer, serialised straight from the records: building a response model
    of each fact would cost more than the read that found them."""
    return Response(to_json(payload), media_type="application/json")


def _facts_response(facts: list[Fact]) -> Response:
    return _respond({"facts": [_fact_json(f) for f in facts]})


async def _memory(caller: Caller, store: str, level: str) -> AsyncMemoryStore:
    """The store, once the caller may act at ``level`` on it. An admin may do anything, so
    its check would only read the store that is read here anyway.

    Raises StoreNotFound, PermissionDenied.
    """
    if not caller.admin:
        await require(caller, MEMORY_STORE, store, level)
    return await caller.client.memory_stores.get(store)


def _item_ref(session_id: str, item_id: str) -> Item:
    """The public API's way to say "this item, wherever it is in the tenant": an Item, of
    which only the ids are read."""
    return Item(item_id=item_id, session_id=session_id, seq=0,
                create_time=datetime(1970, 1, 1, tzinfo=UTC), data=None,
                format="ownstate.message")


def _item_not_found(session_id: str, item_id: str) -> ItemNotFound:
    # The same error, with the same ids, that a backend gives for an item it cannot find.
    return ItemNotFound(f"no item {item_id!r} in session {session_id!r}",
                        session_id=session_id, item_id=item_id)


async def _readable(caller: Caller, store: str) -> bool:
    """Whether the caller may read the session store (which may no longer exist)."""
    if caller.admin:
        return True
    level = await caller.client.api_keys.permission_of(caller.principal, SESSION_STORE, store)
    return level is not None


class _Sources:
    """Finds the session store of each source item among those the caller may read."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self._visible: list[str] | None = None
        self._readable: dict[str, bool] = {}

    async def resolve(self, source: SourceIn) -> Item | tuple[str, str, str]:
        caller = self.caller
        if source.store is not None:
            readable = self._readable.get(source.store)
            if readable is None:
                readable = self._readable[source.store] = await _readable(caller,
                                                                          source.store)
            if not readable:
                raise _item_not_found(source.session_id, source.item_id)
            return (source.store, source.session_id, source.item_id)
        if caller.admin:
            return _item_ref(source.session_id, source.item_id)
        if self._visible is None:
            self._visible = sorted(await visible_stores(caller, SESSION_STORE) or ())
        stores = caller.client.session_stores
        for store in self._visible:
            try:
                session = await stores.session(store, source.session_id)
                await session.get_item(source.item_id)
            except NotFound:
                continue
            return (store, source.session_id, source.item_id)
        raise _item_not_found(source.session_id, source.item_id)


async def _remember(memory: AsyncMemoryStore, specs: list[dict[str, JSON]]) -> list[Fact]:
    """``remember_many``, with text UTF-8 cannot carry (a lone surrogate, which JSON's
    ``\\ud800`` escapes can spell) refused as bad input rather than failing the server."""
    try:
        return await memory.remember_many(specs)
    except UnicodeEncodeError as exc:
        for index, spec in enumerate(specs):
            try:
                json.dumps(spec["value"], ensure_ascii=False).encode()
            except UnicodeEncodeError:
                raise InvalidInput("value must be UTF-8 text: it holds a lone surrogate",
                                   field="value", index=index) from exc
        raise


async def _spec(fact: FactIn, sources: _Sources) -> dict[str, JSON]:
    spec: dict[str, JSON] = {"subject": fact.subject, "key": fact.key, "value": fact.value,
                             "confidence": fact.confidence, "source_type": fact.source_type,
                             "valid_from": fact.valid_from}
    if fact.source is not None:
        spec["source"] = await sources.resolve(fact.source)
    return spec


# memory stores ---------------------------------------------------------------------------


@router.delete("/memory-stores/{store}", response_model=FactsDeletedOut)
async def delete_memory_store(store: str, caller: CallerDep) -> FactsDeletedOut:
    """Delete a memory store and every fact in it, history included (MANAGE)."""
    await require(caller, MEMORY_STORE, store, "MANAGE")
    return FactsDeletedOut(facts_deleted=await caller.client.memory_stores.delete(store))


# facts ------------------------------------------------------------------------------------


@router.post("/memory-stores/{store}/facts", response_model=FactOut)
async def remember_fact(store: str, body: FactIn, caller: CallerDep) -> Response:
    """Remember one fact (WRITE): it becomes the current fact for its (subject, key) and
    closes the one it replaces. A source item must be one the caller may read."""
    memory = await _memory(caller, store, "WRITE")
    try:
        (fact,) = await _remember(memory, [await _spec(body, _Sources(caller))])
    except InvalidInput as exc:
        exc.details.pop("index", None)  # there is no list here to point into
        raise
    return _respond(_fact_json(fact))


@router.post("/memory-stores/{store}/facts:batch", response_model=FactsOut)
async def remember_facts(store: str, body: FactsIn, caller: CallerDep) -> Response:
    """Remember several facts in order, all or none (WRITE); a later fact for the same
    (subject, key) supersedes an earlier one."""
    memory = await _memory(caller, store, "WRITE")
    sources = _Sources(caller)
    specs = []
    for fact in body.facts:
        specs.append(await _spec(fact, sources))
    return _facts_response(await _remember(memory, specs))


@router.post("/memory-stores/{store}/facts:recall", response_model=FactsOut)
async def recall_facts(store: str, body: RecallIn, caller: CallerDep) -> Response:
    """What is true of a subject (READ): per key, the fact in force at valid time
    ``as_of`` as believed at record time ``known_at``, ordered by key."""
    memory = await _memory(caller, store, "READ")
    found = await memory.recall(body.subject, body.keys, as_of=body.as_of,
                                known_at=body.known_at)
    return _facts_response(found)


@router.get("/memory-stores/{store}/facts:history", response_model=FactsOut)
async def fact_history(store: str, caller: CallerDep, subject: NameQuery,
                       key: NameQuery) -> Response:
    """Every fact ever recorded for (subject, key), current or closed, oldest first
    (READ)."""
    memory = await _memory(caller, store, "READ")
    return _facts_response(await memory.history(subject, key))


class SubjectsOut(BaseModel):
    subjects: list[str]
    next_page_token: str | None = None


@router.get("/memory-stores/{store}/subjects", response_model=SubjectsOut)
async def list_subjects(
    store: str, caller: CallerDep,
    page_size: PageSize = None,
    page_token: PageToken = None,
    after: Annotated[str | None, Query(max_length=MAX_NAME_CHARS, description=(
        "Keyset paging: subjects after this one (instead of page_token)."))] = None,
    limit: Annotated[int | None, Query(ge=1, le=1001, description=(
        "Keyset paging: at most this many subjects, with no next_page_token."))] = None,
) -> SubjectsOut:
    """The subjects that have facts in the store, forgotten ones included, in subject
    order (READ)."""
    memory = await _memory(caller, store, "READ")
    if after is not None or limit is not None:
        keyset_mode(page_size, page_token)
        return SubjectsOut(subjects=await memory.subjects_after(after=after, limit=limit))
    page = await memory.subjects(page_size=page_size, page_token=page_token)
    return SubjectsOut(subjects=page.items, next_page_token=page.next_page_token)


class FactHitOut(BaseModel):
    fact: FactOut
    score: Score


class FactHitsOut(BaseModel):
    hits: list[FactHitOut]


@router.post("/memory-stores/{store}/facts:search", response_model=FactHitsOut)
async def search_facts(store: str, body: SearchIn, caller: CallerDep) -> Response:
    """The facts in force (now, or at ``as_of``) that best match ``query``, best first,
    each with its score (READ)."""
    memory = await _memory(caller, store, "READ")
    found = await memory.search(body.query, subject=body.subject, limit=body.limit,
                                as_of=body.as_of, mode=body.mode)
    return _respond({"hits": [{"fact": _fact_json(h.fact), "score": h.score}
                              for h in found]})


@router.post("/memory-stores/{store}/facts:forget", response_model=ForgottenOut)
async def forget_fact(store: str, body: ForgetIn, caller: CallerDep) -> Response:
    """Close the current fact for (subject, key), keeping it in the history (WRITE)."""
    memory = await _memory(caller, store, "WRITE")
    closed = await memory.forget(body.subject, body.key, body.reason)
    return _respond({"fact": _fact_json(closed) if closed is not None else None})


@router.get("/memory-stores/{store}/facts/{fact_id}", response_model=FactOut)
async def get_fact(store: str, fact_id: str, caller: CallerDep) -> Response:
    """One fact by id, current or closed (READ)."""
    memory = await _memory(caller, store, "READ")
    return _respond(_fact_json(await memory.get(fact_id)))


@router.get("/memory-stores/{store}/facts/{fact_id}/explanation",
            response_model=ExplanationOut)
async def explain_fact(store: str, fact_id: str, caller: CallerDep) -> Response:
    """Why a fact is what it is (READ): the fact, the fact it superseded, the fact that
    superseded it, and the item it was learned from when the caller may read that item's
    session store."""
    memory = await _memory(caller, store, "READ")
    explained = await memory.explain(fact_id)
    source_store = explained.fact.source_store
    item = explained.source_item
    if item is not None and (source_store is None or not await _readable(caller, source_store)):
        item = None
    return _respond({
        "fact": _fact_json(explained.fact),
        "superseded": _fact_json(explained.superseded) if explained.superseded else None,
        "superseded_by": (_fact_json(explained.superseded_by) if explained.superseded_by
                          else None),
        "source_item": item_json(item) if item is not None else None,
    })


# subjects, tenant-wide ---------------------------------------------------------------------


@router.post("/subjects:erase", response_model=ErasedOut)
async def erase_subject(body: SubjectIn, caller: CallerDep) -> ErasedOut:
    """Hard-delete every fact about a subject in every memory store of the tenant, and with
    ``include_sessions`` every session whose actor_id is the subject (admin)."""
    require_admin(caller, "erase a subject")
    counts = await caller.client.memory_stores.erase_subject(
        body.subject, include_sessions=body.include_sessions)
    return ErasedOut(facts=counts["facts"], sessions=counts["sessions"])


@router.get("/subjects:export", response_model=SubjectExportOut)
async def export_subject(
    caller: CallerDep, subject: NameQuery,
) -> Response:
    """Everything the tenant stores about a subject, as one document (admin)."""
    require_admin(caller, "export a subject")
    return _respond(await caller.client.memory_stores.export_subject(subject))


@router.get("/subjects:facts", response_model=FactsOut)
async def subject_facts(
    caller: CallerDep, subject: NameQuery,
) -> Response:
    """Every fact about a subject, history included, in every memory store of the tenant,
    by store, key and record order (admin)."""
    require_admin(caller, "read a subject across memory stores")
    return _facts_response(await caller.client.memory_stores.subject_facts(subject))
