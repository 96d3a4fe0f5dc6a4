"""Runs, their leases and the effects ledger.

A run is opened under its session (``/session-stores/{store}/sessions/{session_id}/runs``)
and then addressed by its id alone (``/runs/{run_id}``): every route finds the run first
and needs a permission on its session store, and a run the caller may not read answers
exactly as a run that does not exist. Listings and ``runs:outstanding`` show a non-admin
caller only the runs of the stores it may read.

A human's decision is ``POST /runs/{run_id}:decide`` (WRITE, recorded as the key's
principal); ``GET /runs:awaiting`` lists the inbox (undecided) or, with ``decided=true``,
the runs a worker should resume, and with ``wait`` holds the request open until one is
there (a long poll); ``GET /runs/{run_id}/decision?wait=`` does the same for one run.

It may touch the caller's client and the permission checks, the routing base,
:mod:`._common` and the shared schemas, the error tree, the limits and the model, and
FastAPI and pydantic; never a backend.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)

from ...api import keyset_page
from ...errors import InvalidInput, PermissionDenied
from ...limits import FRAMEWORK_RE, MAX_NAME_CHARS, anchored, printable
from ...model import Decision, Effect, Lease, Run
from ..auth import Caller
from ..permissions import SESSION_STORE, require, require_run, visible_stores
from ..routing import CallerDep
from ..schemas import StrictModel
from ._common import (
    CHOSEN_ID_PATTERN,
    LOOKUP_ID_PATTERN,
    MAX_BIGINT,
    STORE_PATTERN,
    PageSize,
    PageToken,
    StorePath,
    api_router,
    json_utf8,
    keyset_mode,
    require_session,
    utf8_text,
)

__all__ = ["router"]

router = api_router("runs")

_FRAMEWORK = anchored(FRAMEWORK_RE)
_STATUSES = Literal["running", "awaiting_human", "done", "failed", "cancelled"]


_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d{1,9})?([Zz]|[+-]\d\d:\d\d)")


def _rfc3339(value: object) -> object:
    # A bare number would be read as seconds since 1970; a moment is RFC 3339 text only.
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("must be RFC 3339 text with a UTC offset")
    return value


Text = Annotated[str, Field(pattern=printable(MAX_NAME_CHARS)), AfterValidator(utf8_text)]
Framework = Annotated[str, Field(pattern=_FRAMEWORK)]
RunId = Annotated[str, Field(pattern=CHOSEN_ID_PATTERN)]
Ttl = Annotated[float, Field(strict=True, gt=0, le=86_400, allow_inf_nan=False,
                             description="Seconds the lease lasts (at most a day).")]
FencingToken = Annotated[int, Field(strict=True, ge=0, le=MAX_BIGINT)]


#: The longest a long poll holds a request open; a client waiting longer asks again.
MAX_WAIT_SECONDS = 60.0
Wait = Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False, description=(
    "Hold the request open up to this many seconds until there is something to return."))]


class DecisionOut(BaseModel):
    """A human's answer to a run awaiting them: who, what, when, and what with."""

    model_config = ConfigDict(from_attributes=True)

    outcome: Literal["approve", "reject"]
    decided_by: str | None
    decided_at: datetime
    comment: str | None
    payload: Any


class RunOut(BaseModel):
    """A run: its session, status, what it awaits, its counters and its lease; the
    decision on its current request and every decision it received."""

    model_config = ConfigDict(from_attributes=True)

    run_id: str
    store: str
    session_id: str
    actor_id: str
    framework: str
    thread_key: str | None
    status: _STATUSES
    awaiting: dict[str, Any] | None
    step_count: int
    usd_cost: float
    started_at: datetime
    ended_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    fencing_token: int
    decision: DecisionOut | None = None
    decisions: list[DecisionOut] = Field(default_factory=list)


class OutstandingOut(BaseModel):
    runs: list[RunOut]


class _RunsPage(BaseModel):
    """A page of runs, paged by token or (``next_after``, typed by the listing) by keyset."""

    runs: list[RunOut]
    next_page_token: str | None = Field(default=None, description=(
        "Token mode: the token of the next page, absent on the last."))


_NEXT_AFTER = "Keyset mode: pass as `after` for the next page; absent when no run remains."


class RunsOut(_RunsPage):
    next_after: int | None = Field(default=None, description=_NEXT_AFTER)


class AwaitingOut(_RunsPage):
    next_after: str | None = Field(default=None, description=_NEXT_AFTER)


class Decide(StrictModel):
    outcome: Literal["approve", "reject"]
    comment: Annotated[str, Field(max_length=4096), AfterValidator(utf8_text)] | None = None
    payload: Any = Field(default=None, description=(
        "Any JSON for the framework that resumes the run (edited arguments, an answer)."))
    decided_by: Text | None = Field(default=None, description=(
        "The key's principal is recorded; naming anyone else is refused."))


class LeaseOut(BaseModel):
    """A claim on a run: who holds it, until when, and the fencing token to write with."""

    model_config = ConfigDict(from_attributes=True)

    run_id: str
    owner: str
    fencing_token: int
    expires_at: datetime


class EffectOut(BaseModel):
    """A recorded tool result; ``recorded`` is false when an earlier record won."""

    model_config = ConfigDict(from_attributes=True)

    run_id: str
    tool_call_id: str
    result: Any
    recorded_at: datetime
    recorded: bool


class EffectLookup(BaseModel):
    effect: EffectOut | None


class OpenRun(StrictModel):
    framework: Framework
    thread_key: Text | None = None
    run_id: RunId | None = Field(default=None, description="Generated (run_...) when absent.")
    owner: Text | None = Field(default=None, description=(
        "Take the lease for this owner at once (fencing token 1)."))
    ttl: Ttl = 30.0


class MarkAwaiting(StrictModel):
    awaiting: dict[str, Any] = Field(description=(
        "What the run waits for (kind, tool, payload, ...); requested_at is set by the "
        "server."))
    requested_by: Text | None = None
    fencing_token: FencingToken | None = None


class Resume(StrictModel):
    owner: Text
    ttl: Ttl = 30.0


class Heartbeat(StrictModel):
    fencing_token: FencingToken
    ttl: Ttl = 30.0


class CloseRun(StrictModel):
    status: Literal["done", "failed", "cancelled"]
    usd_cost: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="Added to the run's total.")
    step_count: Annotated[int, Field(strict=True, ge=0, le=MAX_BIGINT)] | None = Field(
        default=None, description="Replaces the stored count.")
    fencing_token: FencingToken | None = None


class RecordEffect(StrictModel):
    result: Any = Field(description="Any JSON value, null included.")
    fencing_token: FencingToken | None = None


def _run_out(run: Run) -> RunOut:
    return RunOut.model_validate(run)


def _lease_out(lease: Lease) -> LeaseOut:
    return LeaseOut.model_validate(lease)


def _effect_out(effect: Effect) -> EffectOut:
    return EffectOut.model_validate(effect)


async def _authorize(caller: Caller, run_id: str, level: str) -> None:
    # An admin may do anything in its tenant, and the operation itself reports a missing
    # run with the same not-found: one round trip instead of three on the hot paths.
    if not caller.admin:
        await require_run(caller, run_id, level)


@router.post("/session-stores/{store}/sessions/{session_id}/runs", response_model=RunOut)
async def open_run(store: StorePath, session_id: str, body: OpenRun,
                   caller: CallerDep) -> RunOut:
    """Start a run of a framework in the session, in status running (WRITE)."""
    await require_session(caller, store, session_id, "WRITE")
    # Opening finds the session itself (SessionNotFound), so the handle reads nothing.
    session = await caller.client.session_stores.session(store, session_id)
    run = await caller.client.runs.open_run(session, body.framework, body.thread_key,
                                            run_id=body.run_id, owner=body.owner,
                                            ttl=body.ttl)
    return _run_out(run)


@router.get("/runs/{run_id}", response_model=RunOut)
async def get_run(run_id: str, caller: CallerDep) -> RunOut:
    """A run (READ on its session store)."""
    if caller.admin:
        return _run_out(await caller.client.runs.get(run_id))
    return _run_out(await require_run(caller, run_id, "READ"))


@router.get("/runs", response_model=RunsOut)
async def list_runs(
    caller: CallerDep,
    store: Annotated[str | None, Query(pattern=STORE_PATTERN)] = None,
    session_id: Annotated[str | None, Query(pattern=LOOKUP_ID_PATTERN, description=(
        "Only this session's runs (needs store)."))] = None,
    status: Annotated[_STATUSES | None, Query()] = None,
    framework: Annotated[str | None, Query(pattern=_FRAMEWORK)] = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
    after: Annotated[int | None, Query(ge=-MAX_BIGINT - 1, le=MAX_BIGINT, description=(
        "Keyset paging: runs after this cursor (a `next_after`), instead of page_token."))
    ] = None,
    limit: Annotated[int | None, Query(ge=1, le=1001, description=(
        "Keyset paging: at most this many runs; `next_after` says where to go on."))
    ] = None,
) -> RunsOut:
    """The runs the caller may read, newest first, filtered by store, session, status
    and framework (all given must match).

    A non-admin caller sees the runs of the stores it may read; a page may then hold
    fewer runs than asked for while a token (or cursor) still leads on.
    """
    s = caller.client
    if session_id is not None and store is None:
        raise InvalidInput("session_id needs store", field="session_id")
    visible: set[str] | None = None
    if store is not None:
        await require(caller, SESSION_STORE, store, "READ")
    else:
        visible = await visible_stores(caller, SESSION_STORE)
    # The store was checked above; the listing of a session that does not exist is empty.
    handle = (await s.session_stores.session(store, session_id)
              if store is not None and session_id is not None else None)
    if after is not None or limit is not None:
        keyset_mode(page_size, page_token)
        runs, cursor = await s.runs.list_after(store=store, session=handle, stores=visible,
                                               status=status, framework=framework,
                                               after=after, limit=limit)
        return RunsOut(runs=[_run_out(r) for r in runs], next_after=cursor)
    if visible is None and (store is None or session_id is not None):
        page = await s.runs.list_page(session=handle, status=status, framework=framework,
                                      page_size=page_size, page_token=page_token)
        return RunsOut(runs=[_run_out(r) for r in page.items],
                       next_page_token=page.next_page_token)
    # A listing the public API's tokens cannot name (one store, or only the visible
    # stores): the same order, paged by a token of its own over the keyset listing.
    listing = "\x00".join(["http-runs", s.tenant, caller.principal, store or "",
                           session_id or "", status or "", framework or ""])

    async def fetch(size: int, start: int | None) -> tuple[list[Run], int | None]:
        return await s.runs.list_after(store=store, session=handle, stores=visible,
                                       status=status, framework=framework, after=start,
                                       limit=size)

    runs, token = await keyset_page(s.limits, listing, page_size, page_token, fetch,
                                    cursor=int)
    return RunsOut(runs=[_run_out(r) for r in runs], next_page_token=token)


@router.get("/runs:outstanding", response_model=OutstandingOut)
async def outstanding_runs(
    caller: CallerDep,
    status: Annotated[Literal["running", "awaiting_human"], Query()] = "awaiting_human",
    framework: Annotated[str | None, Query(pattern=_FRAMEWORK)] = None,
    older_than: Annotated[float | None, Query(ge=0, le=1e9, allow_inf_nan=False,
                                              description=(
        "Only runs in the status for longer than this many seconds."))] = None,
    entered_before: Annotated[AwareDatetime | None, BeforeValidator(_rfc3339), Query(
        description=(
        "Only runs that entered the status before this moment (instead of older_than)."))
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> OutstandingOut:
    """Runs in a status (awaiting_human by default, or running) across the stores the
    caller may read, the longest-waiting first."""
    visible = await visible_stores(caller, SESSION_STORE)
    runs = await caller.client.runs.outstanding(
        status, framework=framework, older_than=older_than, entered_before=entered_before,
        stores=visible, limit=limit)
    return OutstandingOut(runs=[_run_out(r) for r in runs])


@router.post("/runs/{run_id}:await", response_model=RunOut)
async def mark_run_awaiting(run_id: str, body: MarkAwaiting, caller: CallerDep) -> RunOut:
    """Pause the run for a human: status awaiting_human, with what it awaits; its lease
    is released (WRITE)."""
    await _authorize(caller, run_id, "WRITE")
    run = await caller.client.runs.mark_awaiting(
        run_id, json_utf8(body.awaiting, "awaiting"), requested_by=body.requested_by,
        fencing_token=body.fencing_token)
    return _run_out(run)


@router.post("/runs/{run_id}:resume", response_model=LeaseOut)
async def resume_run(run_id: str, body: Resume, caller: CallerDep) -> LeaseOut:
    """Claim the run's lease for an owner; of concurrent claimers exactly one wins, the
    others get 409 lease_held (WRITE)."""
    await _authorize(caller, run_id, "WRITE")
    return _lease_out(await caller.client.runs.resume(run_id, body.owner, ttl=body.ttl))


@router.post("/runs/{run_id}:heartbeat", response_model=LeaseOut)
async def heartbeat_run(run_id: str, body: Heartbeat, caller: CallerDep) -> LeaseOut:
    """Extend the lease held with a fencing token (WRITE)."""
    await _authorize(caller, run_id, "WRITE")
    lease = await caller.client.runs.heartbeat(run_id, body.fencing_token, ttl=body.ttl)
    return _lease_out(lease)


@router.post("/runs/{run_id}:close", response_model=RunOut)
async def close_run(run_id: str, body: CloseRun, caller: CallerDep) -> RunOut:
    """End the run as done, failed or cancelled; its lease is released (WRITE)."""
    await _authorize(caller, run_id, "WRITE")
    run = await caller.client.runs.close_run(run_id, body.status, usd_cost=body.usd_cost,
                                             step_count=body.step_count,
                                             fencing_token=body.fencing_token)
    return _run_out(run)


@router.put("/runs/{run_id}/effects/{tool_call_id:path}", response_model=EffectOut)
async def record_effect(run_id: str, tool_call_id: str, body: RecordEffect,
                        caller: CallerDep) -> EffectOut:
    """Record a side-effecting tool call's result once: a later record stores nothing and
    returns the first, with recorded false (WRITE). The tool call id is the rest of the
    path, percent-encoded."""
    await _authorize(caller, run_id, "WRITE")
    effect = await caller.client.runs.record_effect(
        run_id, tool_call_id, json_utf8(body.result, "result"),
        fencing_token=body.fencing_token)
    return _effect_out(effect)


@router.get("/runs/{run_id}/effects/{tool_call_id:path}", response_model=EffectLookup)
async def get_effect(run_id: str, tool_call_id: str, caller: CallerDep) -> EffectLookup:
    """The recorded result of a tool call, or ``effect: null`` when none was recorded
    (READ)."""
    await _authorize(caller, run_id, "READ")
    effect = await caller.client.runs.get_effect(run_id, tool_call_id)
    return EffectLookup(effect=_effect_out(effect) if effect is not None else None)



def _decision_out(decision: Decision) -> DecisionOut:
    return DecisionOut.model_validate(decision)


@router.post("/runs/{run_id}:decide", response_model=RunOut)
async def decide_run(run_id: str, body: Decide, caller: CallerDep) -> RunOut:
    """Record a human's decision on a run awaiting one, exactly once: a second decision,
    or one on a run that does not await a human, is 409 and changes nothing (WRITE). The
    key's principal is recorded as who decided."""
    await _authorize(caller, run_id, "WRITE")
    if body.decided_by is not None and body.decided_by != caller.principal:
        raise PermissionDenied("a key decides as its own principal", field="decided_by")
    run = await caller.client.runs.decide(
        run_id, body.outcome, comment=body.comment,
        payload=json_utf8(body.payload, "payload"), decided_by=caller.principal)
    return _run_out(run)


@router.get("/runs/{run_id}/decision", response_model=RunOut)
async def wait_for_run_decision(run_id: str, caller: CallerDep, wait: Wait = 0.0) -> RunOut:
    """The run, once it no longer awaits an undecided request, or as it is after ``wait``
    seconds (READ)."""
    await _authorize(caller, run_id, "READ")
    run = await caller.client.runs.wait_for_decision(run_id, timeout=wait)
    return _run_out(run if run is not None else await caller.client.runs.get(run_id))


@router.get("/runs:awaiting", response_model=AwaitingOut)
async def awaiting_runs(
    caller: CallerDep,
    decided: Annotated[bool, Query(description=(
        "false: the inbox (undecided); true: decided runs a worker should resume."))] = False,
    framework: Annotated[str | None, Query(pattern=_FRAMEWORK)] = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
    after: Annotated[str | None, Query(max_length=64, description=(
        "Keyset paging: runs after this cursor (a `next_after`), instead of page_token."))
    ] = None,
    limit: Annotated[int | None, Query(ge=1, le=1001)] = None,
    stores: Annotated[str | None, Query(pattern=r"^([a-z0-9_-]{3,55}(,[a-z0-9_-]{3,55})*)?$",
                                        description=(
        "Only the runs of these session stores (comma-separated), among those the caller "
        "may read."))] = None,
    wait: Wait = 0.0,
) -> AwaitingOut:
    """Runs awaiting a human across the stores the caller may read, oldest request first:
    undecided (the inbox), or decided and not yet resumed. With ``wait``, an empty first
    page holds the request open until a run appears or the time passes."""
    s = caller.client.runs
    visible = await visible_stores(caller, SESSION_STORE)
    if stores is not None:
        wanted = set(filter(None, stores.split(",")))
        visible = wanted if visible is None else visible & wanted

    async def listing() -> AwaitingOut:
        if after is not None or limit is not None:
            keyset_mode(page_size, page_token)
            runs, cursor = await s.awaiting_after(decided=decided, framework=framework,
                                                  stores=visible, after=after, limit=limit)
            return AwaitingOut(runs=[_run_out(r) for r in runs], next_after=cursor)
        pick = s.decided if decided else s.outstanding_page
        page = await pick(framework=framework, stores=visible, page_size=page_size,
                          page_token=page_token)
        return AwaitingOut(runs=[_run_out(r) for r in page.items],
                           next_page_token=page.next_page_token)

    found = await listing()
    if found.runs or wait <= 0 or after is not None or page_token is not None:
        return found
    if decided:
        await s.wait_for_decision(framework=framework, stores=visible, timeout=wait)
    return await listing()
