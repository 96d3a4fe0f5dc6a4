"""The inbox: runs awaiting a human's decision across the tenant, oldest first, and the
decision on one of them.

It lists with ``client.runs.outstanding_page`` over the stores the caller may read (as
``GET /runs:awaiting`` does) and decides with ``client.runs.decide`` as the key's
principal once the caller may write the run's store (as ``POST /runs/{run_id}:decide``
does).

It may touch the caller's client, the console's base (:mod:`._web`), the permission checks,
the error tree, the limits and the model, and FastAPI.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Form, Query, Request
from fastapi.responses import Response

from ...errors import InvalidInput
from ...limits import FRAMEWORK_RE
from ...model import JSON, Run
from ..permissions import SESSION_STORE, require_run, visible_stores
from ._web import CONSOLE, ConsoleCaller, console_router, may, redirect, render, store_levels

__all__ = ["asked", "router"]

router = console_router()

#: How many awaiting runs a page of the inbox shows.
PAGE = 50


def _arguments(value: JSON) -> JSON:
    """Tool arguments as a JSON value (frameworks often hand them over as JSON text)."""
    if isinstance(value, str):
        try:
            parsed: JSON = json.loads(value)
        except ValueError:
            return value
        return parsed
    return value


def asked(awaiting: dict[str, Any] | None) -> list[dict[str, JSON]]:
    """What a paused run asks, one entry per request: ``tool``, ``arguments`` and ``agent``
    where the framework said them, whichever framework wrote the description."""
    if not awaiting:
        return []
    out: list[dict[str, JSON]] = []
    requests = awaiting.get("requests")
    interrupts = awaiting.get("interrupts")
    if isinstance(requests, list):  # the OpenAI Agents SDK's tool approvals
        for one in requests:
            if isinstance(one, dict):
                out.append({"tool": one.get("tool"), "arguments": _arguments(
                    one.get("arguments")), "agent": one.get("agent")})
    elif isinstance(interrupts, list):  # LangGraph's interrupt() values
        for one in interrupts:
            value = one.get("value") if isinstance(one, dict) else one
            if isinstance(value, dict) and ("tool" in value or "name" in value):
                args = next((value[k] for k in ("arguments", "args", "tool_input", "input")
                             if k in value), {k: v for k, v in value.items()
                                              if k not in ("tool", "name")})
                out.append({"tool": value.get("tool", value.get("name")),
                            "arguments": _arguments(args), "agent": None})
            else:
                out.append({"tool": None, "arguments": value, "agent": None})
    else:
        args = next((awaiting[k] for k in ("arguments", "payload", "args") if k in awaiting),
                    None)
        out.append({"tool": awaiting.get("tool"), "arguments": _arguments(args),
                    "agent": None})
    return out


def _framework(value: str | None) -> str | None:
    if value in (None, ""):
        return None
    if not FRAMEWORK_RE.fullmatch(value or ""):
        raise InvalidInput("framework must be 1-64 chars of [a-z0-9_.-]", field="framework")
    return value


async def _rows(signed: ConsoleCaller, framework: str | None,
                page_token: str | None) -> dict[str, Any]:
    caller = signed.caller
    visible = await visible_stores(caller, SESSION_STORE)
    page = await caller.client.runs.outstanding_page(
        framework=framework, stores=visible, page_size=PAGE, page_token=page_token or None)
    query = {"framework": framework or ""}
    return {"runs": [(run, asked(run.awaiting)) for run in page.items],
            "framework": framework or "", "page_token": page_token or "",
            "next_url": (f"?{urlencode({**query, 'page_token': page.next_page_token})}"
                         if page.next_page_token else None),
            "poll": f"{CONSOLE}/inbox/rows?{urlencode({**query, 'page_token': page_token or ''})}"}


_Token = Annotated[str | None, Query(max_length=2048)]


@router.get("/inbox")
async def inbox(request: Request, signed: ConsoleCaller,
                framework: Annotated[str | None, Query(max_length=64)] = None,
                page_token: _Token = None) -> Response:
    """Runs awaiting a human's decision, the longest-waiting first; the list refreshes
    itself."""
    context = await _rows(signed, _framework(framework), page_token)
    return render(request, "inbox.html", signed, **context)


@router.get("/inbox/rows")
async def inbox_rows(request: Request, signed: ConsoleCaller,
                     framework: Annotated[str | None, Query(max_length=64)] = None,
                     page_token: _Token = None) -> Response:
    """The inbox's rows alone: what the page polls for."""
    context = await _rows(signed, _framework(framework), page_token)
    return render(request, "_inbox_rows.html", signed, **context)


async def _may_decide(signed: ConsoleCaller, run: Run) -> bool:
    return may(await store_levels(signed.caller), run.store, "WRITE")


@router.get("/inbox/{run_id}")
async def awaiting_run(request: Request, run_id: str, signed: ConsoleCaller) -> Response:
    """One awaiting run: everything it asks, and (WRITE) the approve or reject form."""
    run = await require_run(signed.caller, run_id, "READ")
    return render(request, "inbox_run.html", signed, run=run, asked=asked(run.awaiting),
                  may_decide=await _may_decide(signed, run),
                  decision=run.decision)


@router.post("/inbox/{run_id}/decide")
async def decide(request: Request, run_id: str, signed: ConsoleCaller,
                 outcome: Annotated[str, Form(max_length=16)],
                 comment: Annotated[str, Form(max_length=4000)] = "") -> Response:
    """Approve or reject the run (WRITE on its store), recorded as the key's principal;
    a second decision is a conflict and changes nothing."""
    caller = signed.caller
    await require_run(caller, run_id, "WRITE")
    await caller.client.runs.decide(run_id, outcome, comment=comment.strip() or None,
                                    decided_by=caller.principal)
    return redirect(f"{CONSOLE}/inbox/{run_id}")
