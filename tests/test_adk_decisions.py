"""Google ADK and human decisions: a tool that requires confirmation pauses the
invocation, the plugin marks its run awaiting with what it asks, a human decides, and a
worker answers with ADK's ``ToolConfirmation`` so that the tool runs (or does not) and the
agent finishes (a scripted model, no network)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.models._capabilities import LlmCapabilities
from google.adk.runners import Runner
from google.adk.tools import FunctionTool, ToolContext
from google.genai import types
from pydantic import Field

import ownstate
from ownstate.adapters.adk import (
    OwnstateRunPlugin,
    OwnstateSessionService,
    confirmation_message,
    resume_decided,
)
from ownstate.errors import InvalidInput
from ownstate.testing import Target

APP = "support"


class ToolCallingModel(BaseLlm):
    """Asks for a refund first; once the tool has answered, says what it answered."""

    seen: list[list[Any]] = Field(default_factory=list)

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        parts = [p for c in llm_request.contents for p in c.parts or []]
        self.seen.append(parts)
        answered = [p.function_response for p in parts
                    if p.function_response is not None and p.function_response.name == "refund"]
        if answered:
            text = f"done: {answered[-1].response}"
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
        else:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(
                function_call=types.FunctionCall(id="call-1", name="refund",
                                                 args={"amount": 40}))]))


def build(service: OwnstateSessionService, refunds: list[Any]) -> tuple[Runner,
                                                                         OwnstateRunPlugin]:
    def refund(amount: int, tool_context: ToolContext) -> dict[str, Any]:
        """Refund an amount to the customer."""
        confirmation = tool_context.tool_confirmation
        refunds.append((amount, confirmation.payload if confirmation else None))
        return {"refunded": amount}

    agent = LlmAgent(name="helper", model=ToolCallingModel(model="scripted"),
                     instruction="Refund when asked.",
                     tools=[FunctionTool(refund, require_confirmation=True)])
    plugin = OwnstateRunPlugin(service)
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]),
                    session_service=service)
    return runner, plugin


async def ask(runner: Runner, session_id: str) -> None:
    async for _ in runner.run_async(
            user_id="u1", session_id=session_id,
            new_message=types.Content(role="user", parts=[types.Part(text="refund 40")])):
        pass


def test_a_decided_confirmation_runs_the_tool_and_finishes(target: Target) -> None:
    async def main() -> None:
        client = await ownstate.connect_async(target.url)
        refunds: list[Any] = []
        service = OwnstateSessionService(client)
        runner, _ = build(service, refunds)
        yes = await service.create_session(app_name=APP, user_id="u1")
        no = await service.create_session(app_name=APP, user_id="u1")
        await ask(runner, yes.id)
        await ask(runner, no.id)
        assert refunds == []
        waiting = (await client.runs.outstanding_page(framework="adk")).items
        assert [r.thread_key for r in waiting] == [yes.id, no.id]
        request = waiting[0].awaiting
        assert request is not None
        assert request["kind"] == "tool_confirmation"
        assert [(r["tool"], r["call_id"], r["args"]) for r in request["requests"]] == [
            ("refund", "call-1", {"amount": 40})]
        await client.runs.decide(waiting[0].run_id, "approve", payload={"note": "vip"})
        await client.runs.decide(waiting[1].run_id, "reject", comment="no receipt")
        await runner.close()

        # another worker, with its own service and runner on the same database
        other = await ownstate.connect_async(target.url)
        worker_service = OwnstateSessionService(other)
        worker, plugin = build(worker_service, refunds)
        resumed = await resume_decided(worker, plugin)
        assert [r.run.run_id for r in resumed] == [w.run_id for w in waiting]
        assert refunds == [(40, {"note": "vip"})]  # the rejected call never ran
        texts = [[p.text for e in r.result if e.content for p in e.content.parts or []
                  if p.text] for r in resumed]
        assert texts[0] == ["done: {'refunded': 40}"]
        assert "rejected" in texts[1][0]
        for run in waiting:
            done = await client.runs.get(run.run_id)
            assert done.status == "done"
            assert done.decision is not None
        assert await resume_decided(worker, plugin) == []
        await worker.close()
        await other.close()
        await client.close()

    asyncio.run(main())


def test_a_run_without_a_confirmation_request_is_refused(client: ownstate.Client) -> None:
    session = client.session_stores.create("elsewhere").add(actor_id="u1")
    run = client.runs.open_run(session, "adk")
    run = client.runs.mark_awaiting(run.run_id, {"kind": "approval"})
    decided = client.runs.decide(run.run_id, "approve")
    assert decided.decision is not None
    with pytest.raises(InvalidInput):
        confirmation_message(decided, decided.decision)
