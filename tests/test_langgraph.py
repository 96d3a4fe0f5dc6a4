"""OwnstateSaver with real LangGraph graphs, on every backend.

LangGraph's own conformance package checks the checkpointer contract; the rest runs real
compiled graphs and compares what they see with LangGraph's ``InMemorySaver`` doing the
same thing, so "reads back exactly what LangGraph wrote" is checked against LangGraph
itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import pickle
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

import ownstate
import ownstate.api.checkpoints
import ownstate.api.runs
import ownstate.api.session
from ownstate import _ids
from ownstate.adapters.langgraph import OwnstateSaver, rebuild
from ownstate.adapters.langgraph.saver import TYPE_TAG
from ownstate.backends import Capability
from ownstate.errors import Conflict, InvalidInput, LeaseHeld, StaleLease
from ownstate.testing import Target


@pytest.fixture
def make_saver(target: Target) -> Iterator[Callable[..., OwnstateSaver]]:
    made: list[OwnstateSaver] = []

    def make(**options: Any) -> OwnstateSaver:
        saver = OwnstateSaver.from_url(target.url, **options)
        made.append(saver)
        return saver

    yield make
    for saver in made:
        saver.close()


@pytest.fixture
def saver(make_saver: Callable[..., OwnstateSaver]) -> OwnstateSaver:
    return make_saver()


def config(thread: str = "t-1", **extra: Any) -> Any:
    return {"configurable": {"thread_id": thread, **extra}}


def echo_graph(saver: Any) -> Any:
    """One node that answers every human message with a message naming it."""
    def chatbot(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    return builder.compile(checkpointer=saver)


def approval_graph(saver: Any, gate: threading.Event | None = None) -> Any:
    """A tool call, then a human approval, then an answer."""
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("", id="call-msg", tool_calls=[
            {"name": "refund", "args": {"amount": 40}, "id": "call-1"}])]}

    def approve(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"tool": "refund", "amount": 40})
        if gate is not None:
            gate.wait(10)
        return {"messages": [AIMessage(f"approved: {answer}", id="final")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "approve")
    return builder.compile(checkpointer=saver)


def human(text: str) -> HumanMessage:
    return HumanMessage(text, id=f"h-{text}")


def history_values(graph: Any, cfg: Any) -> list[Any]:
    return [(s.metadata["source"], s.metadata["step"], s.values.get("messages"), s.next)
            for s in graph.get_state_history(cfg)]


# -- LangGraph's conformance suite ----------------------------------------------------------


def test_langgraph_conformance_suite_passes_with_every_capability(target: Target) -> None:
    @checkpointer_test(name=f"OwnstateSaver on {target.name}")
    async def factory() -> Any:
        saver = OwnstateSaver.from_url(target.url)
        yield saver
        saver.close()

    report = asyncio.run(validate(factory))
    failures = {name: result.failures for name, result in report.results.items()
                if result.passed is not True}
    assert failures == {}
    assert set(report.results) == {"put", "put_writes", "get_tuple", "list", "delete_thread",
                                   "delete_for_runs", "copy_thread", "prune"}


# -- history by reference --------------------------------------------------------------------


def test_conversation_reads_back_as_langgraph_wrote_it(saver: OwnstateSaver) -> None:
    ours, theirs = echo_graph(saver), echo_graph(InMemorySaver())
    for n in range(6):
        for graph in (ours, theirs):
            graph.invoke({"messages": [human(f"q{n}")]}, config())
    assert history_values(ours, config()) == history_values(theirs, config())


def test_each_message_is_stored_once_and_checkpoints_stay_small(
        saver: OwnstateSaver, client: ownstate.Client) -> None:
    graph = echo_graph(saver)
    sizes = []
    for n in range(30):
        graph.invoke({"messages": [human(f"question {n} " + "x" * 400)]}, config())
        holder = client.runs.get(_holder(client))
        (latest,) = client.checkpoints.list(holder.checkpoint_scope(), limit=1)
        sizes.append(len(latest.payload))
    session = client.session_stores.get("langgraph").get("t-1")
    items = list(session.list_items(order_by="create_time asc"))
    assert len(items) == 60
    assert [i.role for i in items[:2]] == ["user", "assistant"]
    assert items[1].data["content"] == "re: question 0 " + "x" * 400
    assert max(sizes) - min(sizes[1:]) < 64, sizes  # flat, whatever the history's length


@pytest.mark.parametrize("together", [True, False])
def test_a_steps_messages_are_stored_with_its_checkpoint_where_the_backend_can(
        make_saver: Callable[..., OwnstateSaver], client: ownstate.Client, target: Target,
        monkeypatch: pytest.MonkeyPatch, together: bool) -> None:
    calls = {"append": 0, "put_with_items": 0}
    for cls, name, counted in ((ownstate.api.session.AsyncSession, "append_items", "append"),
                               (ownstate.api.checkpoints.AsyncCheckpoints, "put_with_items",
                                "put_with_items")):
        def wrap(original: Any, counted: str = counted) -> Any:
            async def call(*args: Any, **kwargs: Any) -> Any:
                calls[counted] += 1
                return await original(*args, **kwargs)
            return call
        monkeypatch.setattr(cls, name, wrap(getattr(cls, name)))
    ours = echo_graph(make_saver(items_with_checkpoints=together))
    theirs = echo_graph(InMemorySaver())
    ours.invoke({"messages": [human("q0")]}, config())
    theirs.invoke({"messages": [human("q0")]}, config())
    first = dict(calls)
    for n in range(1, 4):
        for graph in (ours, theirs):
            graph.invoke({"messages": [human(f"q{n}")]}, config())
    later = {k: v - first[k] for k, v in calls.items()}
    if together and target.has(Capability.CHECKPOINT_ITEMS):
        assert later == {"append": 0, "put_with_items": 6}  # two steps a turn
    else:  # (over HTTP the server's own appends are counted too)
        assert later["put_with_items"] == 0
        assert later["append"] in (6, 12)
    assert history_values(ours, config()) == history_values(theirs, config())
    session = client.session_stores.get("langgraph").get("t-1")
    assert [(i.seq, i.role, i.data["content"]) for i in session.list_items(
        order_by="create_time asc")] == [
        (2 * n + k + 1, role, text) for n in range(4)
        for k, (role, text) in enumerate((("user", f"q{n}"), ("assistant", f"re: q{n}")))]


def test_messages_appended_by_another_writer_meanwhile_are_not_overwritten(
        make_saver: Callable[..., OwnstateSaver], client: ownstate.Client) -> None:
    ours, theirs = echo_graph(make_saver()), echo_graph(InMemorySaver())
    for n in range(2):
        for graph in (ours, theirs):
            graph.invoke({"messages": [human(f"q{n}")]}, config())
    session = client.session_stores.get("langgraph").get("t-1")
    session.append_items([{"type": "message", "role": "user", "content": "from elsewhere"}])
    for n in range(2, 4):
        for graph in (ours, theirs):
            graph.invoke({"messages": [human(f"q{n}")]}, config())
    assert history_values(ours, config()) == history_values(theirs, config())
    texts = [i.data["content"] for i in session.list_items(order_by="create_time asc")]
    assert texts == ["q0", "re: q0", "q1", "re: q1", "from elsewhere", "q2", "re: q2", "q3",
                     "re: q3"]
    # a saver that has cached nothing reads every checkpoint back the same
    assert history_values(echo_graph(make_saver()), config()) == history_values(theirs,
                                                                               config())


def _holder(client: ownstate.Client, thread: str = "t-1") -> str:
    runs = [r for r in client.runs.list(framework="langgraph") if r.thread_key == thread]
    return runs[-1].run_id  # the thread's first run holds its checkpoints


def test_removals_replacements_and_summaries_keep_every_version(saver: OwnstateSaver) -> None:
    ours, theirs = echo_graph(saver), echo_graph(InMemorySaver())
    for graph in (ours, theirs):
        for n in range(3):
            graph.invoke({"messages": [human(f"q{n}")]}, config())
        graph.update_state(config(), {"messages": [RemoveMessage(id="h-q0")]})
        graph.update_state(config(), {"messages": [AIMessage("edited", id="ai-h-q1")]})
        graph.invoke({"messages": [human("q3")]}, config())
        state = graph.get_state(config())
        summary = [RemoveMessage(id=m.id) for m in state.values["messages"]]
        graph.update_state(config(), {"messages": [*summary, AIMessage("summary", id="sum")]})
        graph.invoke({"messages": [human("q4")]}, config())
    expected = history_values(theirs, config())
    assert history_values(ours, config()) == expected
    latest = ours.get_state(config()).values["messages"]
    assert [m.content for m in latest] == ["summary", "q4", "re: q4"]
    # Every earlier version is still readable, from the checkpoint that had it.
    versions = [v[2] for v in expected if v[2]]
    assert any(m.content == "re: q1" for v in versions for m in v)
    assert any(m.content == "edited" for v in versions for m in v)


def test_the_session_keeps_the_conversation_as_it_happened(
        saver: OwnstateSaver, client: ownstate.Client) -> None:
    graph = echo_graph(saver)
    for n in range(2):
        graph.invoke({"messages": [human(f"q{n}")]}, config())
    graph.update_state(config(), {"messages": [RemoveMessage(id="h-q0")]})
    graph.update_state(config(), {"messages": [AIMessage("edited", id="ai-h-q1")]})
    session = client.session_stores.get("langgraph").get("t-1")
    texts = [i.data["content"] for i in session.list_items(order_by="create_time asc")]
    assert texts == ["q0", "re: q0", "q1", "re: q1"]  # the edit lives in its checkpoint


# -- time travel -------------------------------------------------------------------------------


def test_time_travel_history_update_and_fork(saver: OwnstateSaver) -> None:
    ours, theirs = echo_graph(saver), echo_graph(InMemorySaver())
    for graph in (ours, theirs):
        for n in range(3):
            graph.invoke({"messages": [human(f"q{n}")]}, config())
        after_first = next(s for s in graph.get_state_history(config())
                           if s.metadata["source"] == "loop"
                           and len(s.values["messages"]) == 2)
        forked = graph.update_state(after_first.config,
                                    {"messages": [AIMessage("other answer", id="ai-h-q0")]})
        graph.invoke({"messages": [human("branch")]}, forked)
    assert [m.content for m in ours.get_state(config()).values["messages"]] == [
        "q0", "other answer", "branch", "re: branch"]
    assert history_values(ours, config()) == history_values(theirs, config())
    # The original line is untouched: its last checkpoint still reads the same.
    original = [s for s in ours.get_state_history(config())
                if len(s.values.get("messages", [])) == 6]
    assert [m.content for m in original[0].values["messages"]] == [
        "q0", "re: q0", "q1", "re: q1", "q2", "re: q2"]


# -- runs ----------------------------------------------------------------------------------


def test_interrupt_awaits_a_human_and_another_replica_resumes(
        make_saver: Callable[..., OwnstateSaver], client: ownstate.Client) -> None:
    first = approval_graph(make_saver())
    result = first.invoke({"messages": [human("refund please")]}, config("case-1"))
    assert result["__interrupt__"][0].value == {"tool": "refund", "amount": 40}
    (waiting,) = client.runs.outstanding()
    assert (waiting.framework, waiting.thread_key, waiting.status) == (
        "langgraph", "case-1", "awaiting_human")
    assert waiting.awaiting is not None
    assert waiting.awaiting["interrupts"][0]["value"] == {"tool": "refund", "amount": 40}

    second = approval_graph(make_saver())  # another process, knowing only the thread key
    done = second.invoke(Command(resume="yes"), config(waiting.thread_key))
    assert [m.content for m in done["messages"]][-1] == "approved: yes"
    assert client.runs.outstanding() == []
    run = client.runs.get(waiting.run_id)
    assert run.status == "done"
    assert run.awaiting is None


def test_each_invocation_is_a_run_and_completion_closes_it(
        saver: OwnstateSaver, client: ownstate.Client) -> None:
    graph = echo_graph(saver)
    for n in range(3):
        graph.invoke({"messages": [human(f"q{n}")]}, config())
    runs = list(client.runs.list(framework="langgraph"))
    assert len(runs) == 3
    assert {(r.status, r.thread_key, r.step_count) for r in runs} == {("done", "t-1", 2)}
    assert client.runs.outstanding(status="running") == []


def test_an_invocations_run_opens_and_ends_with_its_checkpoints_where_the_backend_can(
        saver: OwnstateSaver, client: ownstate.Client, target: Target,
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"open_run": 0, "close_run": 0, "put_opening_run": 0, "end_run": 0, "put": 0,
             "put_with_items": 0}

    def counting(original: Any, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            calls["end_run"] += kwargs.get("end_run") is not None
            return await original(*args, **kwargs)
        return call

    for cls, name in ((ownstate.api.runs.AsyncRuns, "open_run"),
                      (ownstate.api.runs.AsyncRuns, "close_run"),
                      (ownstate.api.checkpoints.AsyncCheckpoints, "put_opening_run"),
                      (ownstate.api.checkpoints.AsyncCheckpoints, "put"),
                      (ownstate.api.checkpoints.AsyncCheckpoints, "put_with_items")):
        monkeypatch.setattr(cls, name, counting(getattr(cls, name), name))
    graph = echo_graph(saver)
    graph.invoke({"messages": [human("q0")]}, config())  # opens the thread's first run
    first = {k: v for k, v in calls.items() if k in ("open_run", "put_opening_run", "end_run",
                                                     "close_run")}
    for n in range(1, 4):
        graph.invoke({"messages": [human(f"q{n}")]}, config())
    later = {k: calls[k] - first[k] for k in first}
    runs = list(client.runs.list(framework="langgraph"))
    assert {(r.status, r.thread_key, r.step_count) for r in runs} == {("done", "t-1", 2)}
    assert len(runs) == 4
    opens = target.has(Capability.CHECKPOINT_OPENS_RUN)
    ends = target.has(Capability.CHECKPOINT_ENDS_RUN)
    # (over HTTP the server's own calls are counted too)
    assert later["open_run"] == 0 if opens else later["open_run"] in (3, 6)
    assert later["put_opening_run"] == (3 if opens else 0)
    assert later["close_run"] == 0 if ends else later["close_run"] in (3, 6)
    assert later["end_run"] == (3 if ends else 0)
    # a late write for the last checkpoint is still stored, unfenced
    last = graph.get_state(config()).config
    saver.put_writes(last, [("late", "value")], "task-late")
    tuple_ = saver.get_tuple(last)
    assert tuple_ is not None
    assert ("task-late", "late", "value") in tuple_.pending_writes


def test_two_replicas_resuming_one_interrupt_only_one_wins(
        make_saver: Callable[..., OwnstateSaver], client: ownstate.Client) -> None:
    gate = threading.Event()
    winner = approval_graph(make_saver(), gate)
    winner.invoke({"messages": [human("refund please")]}, config("case-2"))
    outcome: dict[str, Any] = {}

    def resume_first() -> None:
        outcome["first"] = winner.invoke(Command(resume="first"), config("case-2"))

    worker = threading.Thread(target=resume_first)
    worker.start()
    for _ in range(500):  # until the first replica holds the run
        (run,) = client.runs.list(framework="langgraph")
        if run.lease_owner is not None:
            break
        threading.Event().wait(0.01)
    loser = approval_graph(make_saver())
    with pytest.raises(LeaseHeld):
        loser.invoke(Command(resume="second"), config("case-2"))
    gate.set()
    worker.join(10)
    assert outcome["first"]["messages"][-1].content == "approved: first"
    (run,) = client.runs.list(framework="langgraph")
    assert run.status == "done"


def test_a_replica_that_lost_its_run_cannot_overwrite_its_checkpoints(
        make_saver: Callable[..., OwnstateSaver], client: ownstate.Client,
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate, busy = threading.Event(), threading.Event()

    def chatbot(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        if last.content == "slow":
            busy.set()
            gate.wait(10)
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    graph = builder.compile(checkpointer=make_saver(lease_ttl=30))
    graph.invoke({"messages": [human("first")]}, config())  # the thread's first run: done
    holder = client.runs.get(_holder(client)).checkpoint_scope()
    first = len(client.checkpoints.list(holder))
    outcome: dict[str, Any] = {}

    def invoke() -> None:
        try:
            graph.invoke({"messages": [human("slow")]}, config())
        except StaleLease as exc:
            outcome["refused"] = exc

    worker = threading.Thread(target=invoke)
    worker.start()
    assert busy.wait(10)
    for _ in range(500):  # until its run and input checkpoint are stored (LangGraph
        running = client.runs.outstanding(status="running")  # stores in the background)
        if running and len(client.checkpoints.list(holder)) > first:
            break
        threading.Event().wait(0.01)
    (run,) = running
    later = _ids.now() + timedelta(seconds=31)  # the worker stalls past its lease
    monkeypatch.setattr(_ids, "now", lambda: later)
    lease = client.runs.resume(run.run_id, owner="replica-2")
    stored = client.checkpoints.list(holder)
    gate.set()
    worker.join(10)
    assert outcome["refused"].details == {"run_id": run.run_id, "fencing_token": 1,
                                          "current": lease.fencing_token}
    assert client.checkpoints.list(holder) == stored
    assert client.runs.get(run.run_id).lease_owner == "replica-2"


def test_a_thread_busy_in_another_framework_is_refused(
        saver: OwnstateSaver, client: ownstate.Client) -> None:
    graph = echo_graph(saver)
    graph.invoke({"messages": [human("q0")]}, config())
    session = client.session_stores.get("langgraph").get("t-1")
    client.runs.open_run(session, "openai.agents")
    before = len(list(graph.get_state_history(config())))
    with pytest.raises(Conflict):
        graph.invoke({"messages": [human("q1")]}, config())
    assert len(list(graph.get_state_history(config()))) == before


# -- rebuild and safety --------------------------------------------------------------------


def test_rebuild_after_every_checkpoint_is_dropped(
        saver: OwnstateSaver, client: ownstate.Client) -> None:
    graph = echo_graph(saver)
    for n in range(3):
        graph.invoke({"messages": [human(f"q{n}")]}, config())
    saver.delete_thread("t-1")
    assert graph.get_state(config()).values == {}
    rebuild(graph, config())
    seen: list[BaseMessage] = graph.get_state(config()).values["messages"]
    assert [m.content for m in seen] == ["q0", "re: q0", "q1", "re: q1", "q2", "re: q2"]
    result = graph.invoke({"messages": [human("q3")]}, config())
    assert [m.content for m in result["messages"]][-2:] == ["q3", "re: q3"]
    session = client.session_stores.get("langgraph").get("t-1")
    assert len(list(session.list_items())) == 8  # nothing appended twice
    with pytest.raises(Conflict):
        rebuild(graph, config())


def test_rebuild_needs_an_ownstate_graph() -> None:
    with pytest.raises(InvalidInput):
        rebuild(echo_graph(InMemorySaver()), config())


class _Tripwire:
    fired = False

    def __reduce__(self) -> Any:
        return (_fire, ())


def _fire() -> None:
    _Tripwire.fired = True


def test_payloads_are_never_unpickled(saver: OwnstateSaver, client: ownstate.Client) -> None:
    graph = echo_graph(saver)
    graph.invoke({"messages": [human("q0")]}, config())
    holder = client.runs.get(_holder(client))
    envelope = {"checkpoint": {"v": 4, "id": "evil", "ts": "", "channel_versions": {},
                               "versions_seen": {}},
                "values": {"x": ["v", "pickle", pickle.dumps(_Tripwire())]}}
    client.checkpoints.put(holder.checkpoint_scope(), "evil", type_tag=TYPE_TAG,
                           payload=b"m" + saver.serde.dumps_typed(envelope)[1])
    with pytest.raises(InvalidInput):
        saver.get_tuple(config(checkpoint_id="evil"))
    assert _Tripwire.fired is False


def test_bad_configs_are_refused(saver: OwnstateSaver, client: ownstate.Client) -> None:
    with pytest.raises(InvalidInput):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(InvalidInput):
        saver.prune(["t-1"], strategy="sideways")
    assert saver.get_tuple(config("nobody")) is None
    assert list(saver.list(config("nobody"))) == []
    assert list(client.session_stores.list()) == []


# -- async ------------------------------------------------------------------------------------


def test_async_graph_interrupt_and_resume(saver: OwnstateSaver, client: ownstate.Client
                                          ) -> None:
    graph = approval_graph(saver)

    async def go() -> tuple[Any, list[Any]]:
        await graph.ainvoke({"messages": [human("refund please")]}, config("a-1"))
        assert len(client.runs.outstanding()) == 1
        result = await graph.ainvoke(Command(resume="ok"), config("a-1"))
        return result, [s async for s in graph.aget_state_history(config("a-1"))]

    result, states = asyncio.run(go())
    assert result["messages"][-1].content == "approved: ok"
    assert client.runs.outstanding() == []
    assert [s.values for s in states] == [
        s.values for s in graph.get_state_history(config("a-1"))]


# -- other channels, stored once per version -------------------------------------------------


class DocState(MessagesState):
    document: str


# Text that does not compress away: ~5 KB of hex words.
DOCUMENT = " ".join(hashlib.sha256(str(n).encode()).hexdigest()[:8] for n in range(600))


def doc_graph(saver: Any) -> Any:
    def read(state: DocState) -> dict[str, Any]:
        if not state.get("document"):
            return {"document": DOCUMENT,
                    "messages": [AIMessage("loaded", id="ai-load")]}
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(DocState)
    builder.add_node("read", read)
    builder.add_edge(START, "read")
    return builder.compile(checkpointer=saver)


def test_a_large_channel_is_stored_once_per_version_and_survives_pruning(
        saver: OwnstateSaver, client: ownstate.Client) -> None:
    graph = doc_graph(saver)
    for n in range(4):
        graph.invoke({"messages": [human(f"q{n}")]}, config())
    holder = client.runs.get(_holder(client)).checkpoint_scope()
    sizes = [len(r.payload) for r in client.checkpoints.list(holder)]
    assert max(sizes) > 3000          # the checkpoint that gave the document its version
    assert sorted(sizes)[-2] < 1000   # every other one refers to it
    assert graph.get_state(config()).values["document"] == DOCUMENT
    history = list(graph.get_state_history(config()))
    assert all(s.values["document"] == DOCUMENT
               for s in history if s.metadata["step"] >= 1)

    saver.prune(["t-1"], strategy="keep_latest")
    (kept,) = client.checkpoints.list(holder)
    assert len(kept.payload) > 3000   # the value moved into the checkpoint that keeps it
    assert graph.get_state(config()).values["document"] == DOCUMENT
    result = graph.invoke({"messages": [human("after")]}, config())
    assert result["document"] == DOCUMENT
    assert result["messages"][-1].content == "re: after"


# -- subgraphs ----------------------------------------------------------------------------------


def nested_graph(saver: Any) -> Any:
    """An outer graph whose second node is a subgraph that keeps its own checkpoints and
    stops for a human."""
    def inner(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("ok?")
        return {"messages": [AIMessage(f"inner {answer}", id="in")]}

    sub = StateGraph(MessagesState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")

    def outer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("outer", id="out")]}

    builder = StateGraph(MessagesState)
    builder.add_node("outer", outer)
    builder.add_node("sub", sub.compile(checkpointer=True))
    builder.add_edge(START, "outer")
    builder.add_edge("outer", "sub")
    return builder.compile(checkpointer=saver)


def test_a_subgraph_interrupt_and_its_namespaces(saver: OwnstateSaver,
                                                 client: ownstate.Client) -> None:
    ours, theirs = nested_graph(saver), nested_graph(InMemorySaver())
    for graph in (ours, theirs):
        graph.invoke({"messages": [human("hi")]}, config())
        if graph is ours:
            (waiting,) = client.runs.outstanding()
            assert waiting.awaiting is not None
            assert waiting.awaiting["interrupts"][0]["value"] == "ok?"
        result = graph.invoke(Command(resume="yes"), config())
        assert [m.content for m in result["messages"]] == ["hi", "outer", "inner yes"]
    assert history_values(ours, config()) == history_values(theirs, config())
    holder = client.runs.get(_holder(client)).checkpoint_scope()
    assert {r.namespace for r in client.checkpoints.list(holder)} - {""}  # the subgraph's own
    assert [r.status for r in client.runs.list(framework="langgraph")] == ["done"]
