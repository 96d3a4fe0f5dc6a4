"""The OpenAI Agents SDK and human decisions: a run held for tool approval waits in the
inbox, a human decides, and a worker approves or rejects the interrupted tool call in the
restored ``RunState`` and carries the run on with the real ``Runner`` (a local scripted
model, no network)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from test_openai_agents import CONFIG, CannedModel, call, interrupted, say, support_agent, texts

import ownstate
from ownstate.adapters.openai_agents import OwnstateSession, apply_decision, resume_decided
from ownstate.errors import InvalidInput


def hold(client: ownstate.Client, session_id: str, refunds: list[int], *calls: Any) -> Any:
    session = OwnstateSession(session_id, client, actor_id="customer-7")

    async def main() -> Any:
        return await session.hold_for_approval(await interrupted(session, refunds, *calls))

    return asyncio.run(main())


def test_decided_tool_approvals_are_resumed_with_the_runner(
        client: ownstate.Client, target: Any) -> None:
    refunds: list[int] = []
    approved = hold(client, "case-1", refunds, call("refund", {"amount": 40}, "call_1"))
    rejected = hold(client, "case-2", refunds, call("refund", {"amount": 900}, "call_2"))
    assert [r.run_id for r in client.runs.outstanding_page().items] == [
        approved.run_id, rejected.run_id]
    client.runs.decide(approved.run_id, "approve", comment="fine")
    client.runs.decide(rejected.run_id, "reject", comment="too much, ask a manager")
    models: list[CannedModel] = []

    def agent_for(run: ownstate.Run) -> Any:
        answer = "Refunded 40." if run.run_id == approved.run_id else "I cannot refund that."
        models.append(CannedModel(say(answer, f"msg-{len(models)}")))
        return support_agent(models[-1], refunds)

    async def worker() -> Any:
        other = ownstate.connect(target.url)  # another process, knowing only the database
        try:
            return await resume_decided(other, agent_for, run_config=CONFIG)
        finally:
            other.close()

    resumed = asyncio.run(worker())
    assert [r.run.run_id for r in resumed] == [approved.run_id, rejected.run_id]
    assert [r.result.final_output for r in resumed] == ["Refunded 40.",
                                                       "I cannot refund that."]
    assert refunds == [40]  # the rejected call never ran
    assert "refunded 40" in texts(models[0].inputs[0])
    assert any("too much, ask a manager" in t for t in texts(models[1].inputs[0]))
    for run in (approved, rejected):
        done = client.runs.get(run.run_id)
        assert done.status == "done"
        assert done.decision is not None
    assert asyncio.run(resume_decided(client, agent_for, run_config=CONFIG)) == []
    assert refunds == [40]


def test_a_decision_can_choose_per_tool_call(client: ownstate.Client) -> None:
    refunds: list[int] = []
    held = hold(client, "case-3", refunds, call("refund", {"amount": 40}, "call_1"))
    session = OwnstateSession(held.session_id, client, store=held.store)
    approval = asyncio.run(session.load_approval(held.run_id, support_agent(CannedModel(),
                                                                            refunds)))
    decided = client.runs.decide(held.run_id, "approve", payload={"calls": {"call_1": "reject"}})
    assert decided.decision is not None
    apply_decision(approval, decided.decision)
    # the SDK's own record of the call's approval in the run state's context
    context = approval.state._context
    assert context is not None
    assert context.is_tool_approved("refund", "call_1") is False
    for bad in ({"calls": {"call_9": "approve"}}, {"calls": {"call_1": "maybe"}}):
        with pytest.raises(InvalidInput):
            apply_decision(approval, dataclasses.replace(decided.decision, payload=bad))
