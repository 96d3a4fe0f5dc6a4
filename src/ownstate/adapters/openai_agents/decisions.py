"""Human decisions carried back into the OpenAI Agents SDK: each decided run held for tool
approval (:meth:`~.session.OwnstateSession.hold_for_approval`) has its interrupted tool
calls approved or rejected in its restored ``RunState`` and is carried on with the real
``Runner`` (:meth:`~.session.OwnstateSession.resume_from_approval`, which claims the run,
so of several workers one resumes it). It may touch runs through the public API only (the
bridge and the shared ``_decided`` loop), this package's session and approvals, and the
SDK's ``Runner`` (``agents``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agents import Agent

from ...api import AsyncClient, Client
from ...errors import InvalidInput
from ...model import Decision, Run
from .._bridge import Bridge
from .._decided import Resumed, decision_of, each_decided
from .approvals import FRAMEWORK, PendingApproval
from .session import OwnstateSession

__all__ = ["apply_decision", "resume_decided"]


def apply_decision(approval: PendingApproval, decision: Decision) -> None:
    """Approve or reject the approval's waiting tool calls as ``decision`` says: every call
    takes its outcome, except those the decision's ``payload["calls"]`` (a mapping of call
    id to ``"approve"`` or ``"reject"``) names otherwise. A rejection tells the model the
    decision's comment, when it has one.

    Raises :class:`~ownstate.errors.InvalidInput` for a call id the run does not wait for,
    or an outcome that is neither.
    """
    payload = decision.payload
    calls = payload.get("calls") if isinstance(payload, Mapping) else None
    chosen: dict[str, str] = {}
    if isinstance(calls, Mapping):
        for call_id, outcome in calls.items():
            if outcome not in ("approve", "reject"):
                raise InvalidInput(f"call {call_id!r}: outcome must be approve or reject",
                                   field="payload")
            chosen[str(call_id)] = outcome
    waiting = {item.call_id for item in approval.interruptions}
    unknown = set(chosen) - waiting
    if unknown:
        raise InvalidInput(f"run {approval.run_id!r} waits for no tool call "
                           f"{sorted(unknown)[0]!r}", field="payload")
    for call_id in sorted(c for c in waiting if isinstance(c, str)):
        if chosen.get(call_id, decision.outcome) == "approve":
            approval.approve(call_id)
        else:
            approval.reject(call_id, message=decision.comment)


async def resume_decided(
    client: Client | AsyncClient,
    agent: Agent[Any] | Callable[[Run], Agent[Any]],
    *,
    limit: int = 100,
    lease_ttl: float = 60.0,
    **run_options: Any,
) -> list[Resumed]:
    """Resume every decided ``openai.agents`` run (up to ``limit``, oldest first): load its
    approval with ``agent`` (the interrupted run's starting agent, or a function of the
    run that builds it), :func:`apply_decision`, then carry it on with ``Runner.run``
    (``run_options`` go to it, e.g. ``run_config``). Returns the runs resumed, each with
    its ``RunResult``; a run another worker resumed first is passed over.

    Raises whatever loading the state or the agent's run raises.
    """
    bridge = Bridge(client)

    async def resume(run: Run) -> Any:
        session = OwnstateSession(run.session_id, client, store=run.store)
        starting = agent if isinstance(agent, Agent) else agent(run)
        approval = await session.load_approval(run.run_id, starting)
        apply_decision(approval, decision_of(run))
        return await session.resume_from_approval(approval, lease_ttl=lease_ttl,
                                                  **run_options)

    return await each_decided(bridge, FRAMEWORK, resume, limit=limit)
