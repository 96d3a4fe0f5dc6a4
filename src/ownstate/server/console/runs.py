"""Runs: the runs the caller may read by status and framework, with their steps, cost,
lease and checkpoint storage; one run in full; and (admin) a retention policy previewed
before it is applied.

Listings pass over the runs of stores the caller may not read, as ``GET /runs`` does; a
run's page needs READ on its store (``permissions.require_run``); retention is tenant-wide,
so for admin keys only, as ``POST /checkpoints:apply_retention`` is.

It may touch the caller's client, the console's base (:mod:`._web`) and :mod:`.inbox`, the
permission checks, the routes' shared pieces, the error tree, the limits and the model, and
FastAPI.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import Form, Query, Request
from fastapi.responses import Response

from ...errors import InvalidInput, NotFound
from ...limits import FRAMEWORK_RE
from ...model import CLOSED_RUN_STATUSES, RetentionPolicy, RunUsage
from ..auth import Caller
from ..permissions import SESSION_STORE, require_run, visible_stores
from ..routes._common import require_admin
from ._web import ConsoleCaller, console_router, render
from .inbox import asked

__all__ = ["router"]

router = console_router()

PAGE = 50
#: The most runs a retention preview reads the checkpoints of (the largest first).
PREVIEW_RUNS = 200
_Status = Literal["", "running", "awaiting_human", "done", "failed", "cancelled"]


async def _usage(caller: Caller, run_id: str) -> RunUsage | None:
    found = await caller.client.checkpoints.usage(run_id)
    return found[0] if found else None


@router.get("/runs")
async def runs_page(
    request: Request, signed: ConsoleCaller,
    status: Annotated[_Status, Query()] = "",
    framework: Annotated[str, Query(max_length=64)] = "",
    after: Annotated[int | None, Query()] = None,
) -> Response:
    """The runs the caller may read, newest first, by status and framework."""
    caller = signed.caller
    if framework and not FRAMEWORK_RE.fullmatch(framework):
        raise InvalidInput("framework must be 1-64 chars of [a-z0-9_.-]", field="framework")
    visible = await visible_stores(caller, SESSION_STORE)
    runs, cursor = await caller.client.runs.list_after(
        stores=visible, status=status or None, framework=framework or None, after=after,
        limit=PAGE)
    rows = [(run, await _usage(caller, run.run_id)) for run in runs]
    next_url = (f"?{urlencode({'status': status, 'framework': framework, 'after': cursor})}"
                if cursor is not None else None)
    return render(request, "runs.html", signed, rows=rows, status=status,
                  framework=framework, next_url=next_url)


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str, signed: ConsoleCaller) -> Response:
    """One run: status, what it awaits, decisions, steps, cost, lease and checkpoints."""
    caller = signed.caller
    run = await require_run(caller, run_id, "READ")
    return render(request, "run.html", signed, run=run, asked=asked(run.awaiting),
                  usage=await _usage(caller, run_id),
                  decisions=run.decisions)


@dataclass(frozen=True, slots=True)
class _Dropped:
    run_id: str
    store: str
    status: str
    checkpoints: int
    dropped: int
    bytes_freed: int


def _policy(keep_last: str, max_age_hours: str, drop_when_run_ends: bool) -> RetentionPolicy:
    try:
        keep = int(keep_last) if keep_last.strip() else None
        age = float(max_age_hours) * 3600 if max_age_hours.strip() else None
    except ValueError as exc:
        raise InvalidInput("keep last and max age are numbers", field="policy") from exc
    if (keep is not None and keep < 0) or (age is not None and not 0 <= age < 1e12):
        raise InvalidInput("keep last and max age are not negative", field="policy")
    return RetentionPolicy(keep_last=keep, max_age_seconds=age,
                           drop_when_run_ends=drop_when_run_ends)


async def _preview(caller: Caller, policy: RetentionPolicy) -> list[_Dropped]:
    """What ``policy`` would drop from the runs holding the most checkpoint bytes: the
    rule ``apply_retention`` states (all but the newest ``keep_last`` per run and
    namespace, older than the maximum age, all of an ended run), read off each run's
    checkpoints."""
    now = datetime.now(UTC)
    oldest = (now - timedelta(seconds=policy.max_age_seconds)
              if policy.max_age_seconds is not None else None)
    out = []
    for usage in (await caller.client.checkpoints.usage())[:PREVIEW_RUNS]:
        try:
            run = await caller.client.runs.get(usage.run_id)
            records = await caller.client.checkpoints.list(run.checkpoint_scope())
        except NotFound:
            continue
        ended = policy.drop_when_run_ends and run.status in CLOSED_RUN_STATUSES
        seen: dict[str, int] = {}
        dropped = freed = 0
        for record in records:  # newest first
            rank = seen[record.namespace] = seen.get(record.namespace, 0) + 1
            if (ended or (policy.keep_last is not None and rank > policy.keep_last)
                    or (oldest is not None and record.create_time < oldest)):
                dropped += 1
                freed += len(record.payload)
        out.append(_Dropped(run.run_id, run.store, run.status, len(records), dropped, freed))
    return out


@router.get("/retention")
async def retention_page(request: Request, signed: ConsoleCaller) -> Response:
    """The retention form: a policy to preview (admin)."""
    require_admin(signed.caller, "apply retention across the tenant")
    return render(request, "retention.html", signed, preview=None, policy=None, report=None)


@router.post("/retention")
async def retention(
    request: Request, signed: ConsoleCaller,
    action: Annotated[Literal["preview", "apply"], Form()],
    keep_last: Annotated[str, Form(max_length=20)] = "",
    max_age_hours: Annotated[str, Form(max_length=20)] = "",
    drop_when_run_ends: Annotated[bool, Form()] = False,
) -> Response:
    """Preview what a policy would drop, or apply it (admin)."""
    caller = signed.caller
    require_admin(caller, "apply retention across the tenant")
    policy = _policy(keep_last, max_age_hours, drop_when_run_ends)
    form = {"keep_last": keep_last, "max_age_hours": max_age_hours,
            "drop_when_run_ends": drop_when_run_ends}
    if action == "apply":
        report = await caller.client.checkpoints.apply_retention(policy)
        return render(request, "retention.html", signed, preview=None, policy=form,
                      report=report)
    preview = await _preview(caller, policy)
    return render(request, "retention.html", signed, preview=preview, policy=form,
                  report=None, total=sum(p.dropped for p in preview),
                  freed=sum(p.bytes_freed for p in preview))
