"""LangGraph and human decisions: a graph paused at ``interrupt()`` waits in the inbox,
a human decides, and a worker resumes the thread to completion with the decision as the
interrupt's answer; of two workers one resumes it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt

import ownstate
from ownstate.adapters.langgraph import (
    OwnstateSaver,
    aresume_decided,
    resume_command,
    resume_decided,
)
from ownstate.errors import InvalidInput, RunClosed
from ownstate.testing import Target


@pytest.fixture
def make_saver(target: Target) -> Iterator[Callable[[], OwnstateSaver]]:
    made: list[OwnstateSaver] = []

    def make() -> OwnstateSaver:
        saver = OwnstateSaver.from_url(target.url)
        made.append(saver)
        return saver

    yield make
    for saver in made:
        saver.close()


def refund_graph(saver: Any) -> Any:
    """Asks a human before refunding; answers with what the human decided."""
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("", id="call-msg", tool_calls=[
            {"name": "refund", "args": {"amount": 40}, "id": "call-1"}])]}

    def approve(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"tool": "refund", "amount": 40})
        verdict = "refunded" if answer["approved"] else "declined"
        return {"messages": [AIMessage(f"{verdict}: {answer['comment']}", id="final")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "approve")
    return builder.compile(checkpointer=saver)


def start(graph: Any, thread: str) -> None:
    result = graph.invoke({"messages": [HumanMessage("refund please", id=f"h-{thread}")]},
                          {"configurable": {"thread_id": thread}})
    assert result["__interrupt__"][0].value == {"tool": "refund", "amount": 40}


def test_a_decided_interrupt_is_resumed_to_completion(
        make_saver: Callable[[], OwnstateSaver], client: ownstate.Client) -> None:
    start(refund_graph(make_saver()), "case-1")
    start(refund_graph(make_saver()), "case-2")
    first, second = client.runs.outstanding_page().items
    assert (first.thread_key, second.thread_key) == ("case-1", "case-2")
    client.runs.decide(first.run_id, "approve", comment="within policy")
    client.runs.decide(second.run_id, "reject", comment="no receipt")

    worker = refund_graph(make_saver())  # another process, knowing only the database
    resumed = resume_decided(worker, client)
    assert [r.run.run_id for r in resumed] == [first.run_id, second.run_id]
    assert [r.result["messages"][-1].content for r in resumed] == [
        "refunded: within policy", "declined: no receipt"]
    for run_id, outcome in ((first.run_id, "approve"), (second.run_id, "reject")):
        done = client.runs.get(run_id)
        assert done.status == "done"
        assert done.decision is not None
        assert done.decision.outcome == outcome
    assert client.runs.decided().items == []
    assert resume_decided(worker, client) == []  # nothing left to resume
    state = worker.get_state({"configurable": {"thread_id": "case-1"}})
    assert state.values["messages"][-1].content == "refunded: within policy"


def test_only_one_of_two_workers_resumes_a_decided_run(
        make_saver: Callable[[], OwnstateSaver], client: ownstate.Client) -> None:
    start(refund_graph(make_saver()), "case-3")
    (run,) = client.runs.outstanding()
    client.runs.decide(run.run_id, "approve", comment="ok")
    winner, loser = refund_graph(make_saver()), refund_graph(make_saver())
    # the loser listed the run before the winner claimed it
    listed = client.runs.decided().items
    assert resume_decided(winner, client)[0].run.run_id == run.run_id
    with pytest.raises(RunClosed):  # what the loser's claim meets
        client.runs.resume(listed[0].run_id, loser.checkpointer.owner)
    assert resume_decided(loser, client) == []
    assert client.runs.get(run.run_id).status == "done"


def test_async_resume_and_several_interrupts(make_saver: Callable[[], OwnstateSaver],
                                             client: ownstate.Client, target: Target) -> None:
    start(refund_graph(make_saver()), "case-4")
    (run,) = client.runs.outstanding()
    client.runs.decide(run.run_id, "approve", comment="fine")

    async def main() -> Any:
        aclient = await ownstate.connect_async(target.url)
        try:
            return await aresume_decided(refund_graph(make_saver()), aclient)
        finally:
            await aclient.close()

    (resumed,) = asyncio.run(main())
    assert resumed.result["messages"][-1].content == "refunded: fine"
    assert resumed.decision.approved
    decided = client.runs.get(run.run_id)
    many = dataclasses.replace(decided, awaiting={"interrupts": [{"id": "a"}, {"id": "b"}]})
    assert resume_command(many).resume == {"a": resume_command(decided).resume,
                                           "b": resume_command(decided).resume}


def test_a_graph_without_an_ownstate_saver_is_refused(client: ownstate.Client) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    with pytest.raises(InvalidInput):
        resume_decided(refund_graph(InMemorySaver()), client)
