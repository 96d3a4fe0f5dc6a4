"""Runs, leases, effects and decisions, over HTTP.

Waiting for a decision is a long poll: each request asks the server to hold it open for
up to :data:`_POLL_SECONDS`, and the client asks again until its own timeout passes.

It may touch the server through the transport of ``_base``, the wire format
(``ownstate._wire``), the limits, the model and errors.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ... import _wire
from ...errors import LeaseHeld, RunNotFound
from ...limits import SESSION_ID_RE
from ...model import Decision, Effect, Lease, Run
from ._base import API, HttpBase, json_object, not_found, segment, session_path

__all__ = ["RunsOverHttp", "missing_run", "run_path"]

RUNS = f"{API}/runs"
_JSON_HEADERS = {"content-type": "application/json"}
#: How long one long-poll request asks the server to wait (its limit is 60 s), and how
#: much longer the client waits for the answer before taking the server for gone.
_POLL_SECONDS = 25.0
_POLL_GRACE = 10.0


def missing_run(run_id: str) -> RunNotFound:
    """The not-found the server gives for ``run_id``, made here without asking it."""
    return not_found(RunNotFound(run_id=run_id))


def run_path(run_id: str) -> str:
    """The path of the run ``run_id``.

    Every run id was checked as a session-like id when the run was opened, so an id that
    could not have been names no run: it raises :class:`~ownstate.errors.RunNotFound`
    here, exactly as the server would, rather than being sent, where a ``/`` or ``?`` in
    it would change the route.
    """
    if not SESSION_ID_RE.fullmatch(run_id):
        raise missing_run(run_id)
    return f"{RUNS}/{run_id}"


def _store_list(stores: frozenset[str] | None) -> str | None:
    return ",".join(sorted(stores)) if stores is not None else None


class RunsOverHttp(HttpBase):
    """The runs port as calls to the server's routes."""

    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        body = await self._http.call("POST", f"{session_path(store, session_id)}/runs", json={
            "framework": framework, "thread_key": thread_key, "run_id": run_id,
            "owner": owner, "ttl": ttl_seconds})
        return _wire.load(Run, body)

    async def get_run(self, tenant: str, run_id: str) -> Run:
        return _wire.load(Run, await self._http.call("GET", run_path(run_id)))

    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        body = await self._http.call("GET", RUNS, params={
            "store": store, "session_id": session_id, "status": status,
            "framework": framework, "limit": limit,
            "after": after[0] if after is not None else None})
        cursor = body.get("next_after")
        return ([_wire.load(Run, r) for r in body["runs"]],
                [cursor] if cursor is not None else None)

    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        # The description already holds requested_by; the server sets requested_at by its
        # own clock.
        text = json_object({"fencing_token": fencing_token}, {"awaiting": awaiting_json})
        body = await self._http.call("POST", f"{run_path(run_id)}:await",
                                     content=text.encode(), headers=_JSON_HEADERS)
        return _wire.load(Run, body)

    async def resume(self, tenant: str, run_id: str, owner: str, ttl_seconds: float,
                     now: datetime) -> Lease:
        try:
            body = await self._http.call("POST", f"{run_path(run_id)}:resume",
                                         json={"owner": owner, "ttl": ttl_seconds})
        except LeaseHeld as exc:
            # Details travel as JSON: give the holder's expiry back its type.
            expires = exc.details.get("expires_at")
            if isinstance(expires, str):
                with contextlib.suppress(ValueError):
                    exc.details["expires_at"] = datetime.fromisoformat(expires)
            raise
        return _wire.load(Lease, body)

    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        body = await self._http.call("POST", f"{run_path(run_id)}:heartbeat",
                                     json={"fencing_token": fencing_token,
                                           "ttl": ttl_seconds})
        return _wire.load(Lease, body)

    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        body = await self._http.call("POST", f"{run_path(run_id)}:close", json={
            "status": status, "usd_cost": usd_cost, "step_count": step_count,
            "fencing_token": fencing_token})
        return _wire.load(Run, body)

    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        body = await self._http.call("GET", f"{RUNS}:outstanding", params={
            "status": status, "framework": framework, "limit": limit,
            "entered_before": (entered_before.isoformat() if entered_before is not None
                               else None)})
        return [_wire.load(Run, r) for r in body["runs"]]

    async def record_effect(self, tenant: str, run_id: str, tool_call_id: str,
                            result_json: str, fencing_token: int | None,
                            now: datetime) -> Effect:
        text = json_object({"fencing_token": fencing_token}, {"result": result_json})
        body = await self._http.call(
            "PUT", f"{run_path(run_id)}/effects/{segment(tool_call_id)}",
            content=text.encode(), headers=_JSON_HEADERS)
        return _wire.load(Effect, body)

    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        body = await self._http.call("GET",
                                     f"{run_path(run_id)}/effects/{segment(tool_call_id)}")
        found = body.get("effect")
        return _wire.load(Effect, found) if found is not None else None

    async def decide(self, tenant: str, run_id: str, decision: Decision) -> Run:
        # The server records the key's principal and its own clock.
        text = json_object({"outcome": decision.outcome, "comment": decision.comment,
                            "decided_by": decision.decided_by},
                           {"payload": json.dumps(decision.payload, separators=(",", ":"))})
        body = await self._http.call("POST", f"{run_path(run_id)}:decide",
                                     content=text.encode(), headers=_JSON_HEADERS)
        return _wire.load(Run, body)

    async def list_awaiting(self, tenant: str, *, decided: bool, framework: str | None,
                            stores: frozenset[str] | None, limit: int,
                            after: Sequence[Any] | None
                            ) -> tuple[list[Run], list[Any] | None]:
        # The server shows only the stores the key may read; ``stores`` narrows that.
        body = await self._http.call("GET", f"{RUNS}:awaiting", params={
            "decided": decided, "framework": framework, "limit": limit,
            "after": f"{after[0]}/{after[1]}" if after is not None else None,
            "stores": _store_list(stores)})
        runs = [_wire.load(Run, r) for r in body["runs"]]
        cursor = body.get("next_after")
        if cursor is None:
            return runs, None
        entered, _, ordinal = cursor.rpartition("/")
        return runs, [entered, int(ordinal)]

    async def wait_for_decision(self, tenant: str, run_id: str | None,
                                framework: str | None, stores: frozenset[str] | None,
                                timeout: float) -> Run | None:
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, min(_POLL_SECONDS, deadline - time.monotonic()))
            if run_id is not None:
                body = await self._http.call("GET", f"{run_path(run_id)}/decision",
                                             params={"wait": wait},
                                             timeout=wait + _POLL_GRACE)
                run = _wire.load(Run, body)
                if run.status != "awaiting_human" or run.decision is not None:
                    return run
            else:
                body = await self._http.call("GET", f"{RUNS}:awaiting", params={
                    "decided": True, "framework": framework, "limit": 1, "wait": wait,
                    "stores": _store_list(stores)}, timeout=wait + _POLL_GRACE)
                if body["runs"]:
                    return _wire.load(Run, body["runs"][0])
            if time.monotonic() >= deadline:
                return None
