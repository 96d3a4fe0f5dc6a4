"""One conversation moves through four frameworks and loses nothing.

It starts in LangGraph (a tool call, then an approval that waits for a human), is approved
from another client, leaves facts in memory with their provenance, continues in the OpenAI
Agents SDK's ``Runner``, then in ADK's ``Runner``, and comes back to LangGraph. Every
framework runs for real, with a scripted model (no network); each model checks that it was
shown the whole conversation, in its own framework's shape, and the facts.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner as AdkRunner
from google.genai import types
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from pydantic import Field

import ownstate
from ownstate.adapters.adk import OwnstateRunPlugin, OwnstateSessionService
from ownstate.adapters.langgraph import OwnstateSaver, catch_up
from ownstate.adapters.openai_agents import OwnstateSession
from ownstate.testing import Target

STORE = "conversations"
THREAD = "case-7"
CUSTOMER = "customer-42"


@pytest.fixture
def make_saver(target: Target) -> Iterator[Any]:
    """Savers as separate processes would open them (each its own client), closed after."""
    made: list[OwnstateSaver] = []

    def make() -> OwnstateSaver:
        made.append(OwnstateSaver.from_url(target.url, store=STORE))
        return made[-1]

    yield make
    for saver in made:
        saver.close()


def facts_text(client: ownstate.Client) -> str:
    """What each framework's agent is told it remembers about the customer."""
    memory = client.memory_stores.get("support-memory")
    return "; ".join(f"{f.key}={f.value}" for f in memory.recall(CUSTOMER))


# -- LangGraph ---------------------------------------------------------------------------


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return json.dumps({"order_id": order_id, "total": 40, "status": "damaged"})


def support_graph(saver: OwnstateSaver, seen: list[list[Any]]) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        seen.append(list(state["messages"]))
        last = state["messages"][-1]
        if last.type == "human" and "broken" in str(last.content):
            return {"messages": [AIMessage("", id="lg-call", tool_calls=[
                {"name": "lookup_order", "args": {"order_id": "A1"}, "id": "call_lookup"}])]}
        if last.type == "tool":
            return {"messages": [AIMessage("Order A1 cost 40. I can refund it once a "
                                           "supervisor approves.", id="lg-ask")]}
        return {"messages": [AIMessage(f"Back in LangGraph: I see {len(state['messages'])} "
                                       "messages.", id=f"lg-{len(state['messages'])}")]}

    def approve(state: MessagesState) -> dict[str, Any]:
        decision = interrupt({"tool": "refund", "order_id": "A1", "amount": 40})
        return {"messages": [AIMessage(f"Refund of 40 for A1: {decision}.", id="lg-done")]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        if getattr(last, "tool_calls", None):
            return "tools"
        if last.id == "lg-ask":
            return "approve"
        return "__end__"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup_order]))
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", "approve", "__end__"])
    builder.add_edge("tools", "agent")
    builder.add_edge("approve", "__end__")
    return builder.compile(checkpointer=saver)


# -- OpenAI Agents SDK ---------------------------------------------------------------------


class ScriptedModel(Model):
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.inputs: list[Any] = []
        self.instructions: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                           previous_response_id: Any, conversation_id: Any,
                           prompt: Any) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input))
        self.instructions.append(system_instructions)
        message = ResponseOutputMessage(
            id="msg_oa", type="message", role="assistant", status="completed",
            content=[ResponseOutputText(text=self.reply, type="output_text", annotations=[],
                                        logprobs=[])])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError
        yield  # pragma: no cover


# -- ADK -----------------------------------------------------------------------------------


class ScriptedLlm(BaseLlm):
    reply: str
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(content=types.Content(role="model",
                                                parts=[types.Part(text=self.reply)]))


def adk_texts(request: LlmRequest) -> list[str]:
    out = []
    for content in request.contents:
        for part in content.parts or []:
            if part.text:
                out.append(part.text)
            elif part.function_call:
                out.append(f"call:{part.function_call.name}")
            elif part.function_response:
                out.append(f"result:{part.function_response.name}")
    return out


# -- the move ------------------------------------------------------------------------------


def test_a_conversation_moves_through_four_frameworks(client: ownstate.Client,
                                                      make_saver: Any) -> None:
    config = {"configurable": {"thread_id": THREAD, "user_id": CUSTOMER}}

    # 1. LangGraph: a tool call, then an interrupt waiting for approval.
    lg_seen: list[list[Any]] = []
    graph = support_graph(make_saver(), lg_seen)
    paused = graph.invoke({"messages": [HumanMessage("My order A1 arrived broken",
                                                     id="u-1")]}, config)
    assert paused["__interrupt__"][0].value["amount"] == 40
    (waiting,) = client.runs.outstanding()
    assert (waiting.framework, waiting.thread_key) == ("langgraph", THREAD)

    # 2. The approval comes from another client, knowing only the thread key.
    approver = support_graph(make_saver(), [])
    done = approver.invoke(Command(resume="approved by a supervisor"),
                           {"configurable": {"thread_id": waiting.thread_key}})
    assert done["messages"][-1].content == "Refund of 40 for A1: approved by a supervisor."

    # 3. Facts, each naming the item it was learnt from.
    session = client.session_stores.get(STORE).get(THREAD)
    items = list(session.list_items(order_by="create_time asc"))
    by_text = {str(i.data.get("content")): i for i in items}
    memory = client.memory_stores.create("support-memory")
    memory.remember(CUSTOMER, "order", "A1", source=by_text["My order A1 arrived broken"])
    memory.remember(CUSTOMER, "refund", "40 approved",
                    source=by_text["Refund of 40 for A1: approved by a supervisor."])
    assert {f.source_item_id for f in memory.recall(CUSTOMER)} == {
        by_text["My order A1 arrived broken"].item_id,
        by_text["Refund of 40 for A1: approved by a supervisor."].item_id}

    # 4. The OpenAI Agents SDK continues the same session.
    oa_model = ScriptedModel("The refund reaches your card in 3 days.")
    oa_session = OwnstateSession(THREAD, client, store=STORE)
    oa_agent = Agent(name="support", model=oa_model,
                     instructions=lambda ctx, agent: f"Known: {facts_text(client)}")
    result = asyncio.run(Runner.run(oa_agent, "When do I get the money?", session=oa_session,
                                    hooks=oa_session.run_hooks(),
                                    run_config=RunConfig(tracing_disabled=True)))
    assert result.final_output == "The refund reaches your card in 3 days."
    shown = oa_model.inputs[0]
    kinds = [i.get("type") or "message" for i in shown]
    assert "function_call" in kinds
    assert "function_call_output" in kinds
    texts = json.dumps(shown)
    for said in ("My order A1 arrived broken", "I can refund it once a supervisor approves",
                 "Refund of 40 for A1", "When do I get the money?"):
        assert said in texts
    assert "order=A1" in oa_model.instructions[0]
    assert "refund=40 approved" in oa_model.instructions[0]

    # 5. ADK continues it.
    service = OwnstateSessionService(client, store=STORE,
                                     session_ids=lambda app, user, sid: sid)
    adk_model = ScriptedLlm(model="scripted", reply="I have emailed you the confirmation.")

    def adk_instruction(ctx: Any) -> str:
        return f"Known: {facts_text(client)}"

    adk_agent = LlmAgent(name="support", model=adk_model, instruction=adk_instruction)
    app = App(name="support", root_agent=adk_agent, plugins=[OwnstateRunPlugin(service)])
    runner = AdkRunner(app=app, session_service=service)

    async def adk_turn() -> list[Any]:
        events = [e async for e in runner.run_async(
            user_id=CUSTOMER, session_id=THREAD,
            new_message=types.Content(role="user",
                                      parts=[types.Part(text="Please confirm by email")]))]
        await runner.close()
        return events

    events = asyncio.run(adk_turn())
    assert events[-1].content.parts[0].text == "I have emailed you the confirmation."
    # ADK shows another agent's turns (and tool calls) to its model as quoted context.
    seen = "\n".join(adk_texts(adk_model.requests[0]))
    for said in ("My order A1 arrived broken", "lookup_order",
                 "Refund of 40 for A1: approved by a supervisor.",
                 "When do I get the money?", "The refund reaches your card in 3 days.",
                 "Please confirm by email"):
        assert said in seen
    system = adk_model.requests[0].config.system_instruction
    assert "order=A1" in str(system)

    # 6. Back in LangGraph: it catches up with what the others added, and goes on.
    back = support_graph(make_saver(), lg_seen)
    catch_up(back, config, as_node="agent")
    final = back.invoke({"messages": [HumanMessage("Thanks, all good", id="u-last")]},
                        config)
    history = lg_seen[-1]
    contents = [str(m.content) for m in history]
    for said in ("My order A1 arrived broken", "Refund of 40 for A1: approved by a supervisor.",
                 "When do I get the money?", "The refund reaches your card in 3 days.",
                 "Please confirm by email", "I have emailed you the confirmation.",
                 "Thanks, all good"):
        assert any(said in c for c in contents), said
    assert final["messages"][-1].content.startswith("Back in LangGraph")

    # Every run, with its framework, in one place.
    runs = list(client.runs.list(session=session))
    assert sorted({r.framework for r in runs}) == ["adk", "langgraph", "openai.agents"]
    assert all(r.status == "done" for r in runs)
    assert client.runs.outstanding() == []
    # The session is the whole conversation, each message once.
    texts = [json.dumps(i.data) for i in session.list_items(order_by="create_time asc")]
    assert sum("My order A1 arrived broken" in t for t in texts) == 1
    assert sum("Thanks, all good" in t for t in texts) == 1
