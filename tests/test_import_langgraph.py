"""``ownstate import langgraph``: threads that real graphs wrote with LangGraph's
PostgresSaver and SqliteSaver, imported and then continued on OwnstateSaver."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command
from test_langgraph import approval_graph, nested_graph

import ownstate
from ownstate.adapters.langgraph import OwnstateSaver
from ownstate.cli import cli
from ownstate.formats.langchain import FORMAT as ITEM_FORMAT
from ownstate.importers import run_import
from ownstate.importers.cli import EXIT_DIFFERENT, EXIT_FAILED_UNITS

SRC = Path(__file__).resolve().parents[1] / "src"


# -- graphs -----------------------------------------------------------------------------


def tool_graph(saver: Any) -> Any:
    """An agent that calls a tool, reads its result and answers."""
    def agent(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        n = len(state["messages"])
        if isinstance(last, HumanMessage):
            return {"messages": [AIMessage("", id=f"call-{n}", tool_calls=[
                {"name": "lookup", "args": {"q": last.content}, "id": f"tc-{n}"}])]}
        return {"messages": [AIMessage(f"found: {last.content}", id=f"ans-{n}")]}

    def tools(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
        return {"messages": [ToolMessage(f"{call['args']['q']}!", tool_call_id=call["id"],
                                         name="lookup", id=f"tool-{call['id']}")]}

    def route(state: MessagesState) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else "__end__"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


GRAPHS = {"tools": tool_graph, "approval": approval_graph, "nested": nested_graph}


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "user_id": f"user-{thread}"},
            "metadata": {"channel": "web"}}


def fill(saver: Any, threads: int = 1) -> dict[str, str]:
    """Threads of every shape: ``tools-N`` done after two turns, ``approval-N`` and
    ``nested-N`` paused at an interrupt. Returns thread id -> graph name."""
    made = {}
    for n in range(threads):
        graph = tool_graph(saver)
        for text in ("order 42", "order 43"):
            graph.invoke({"messages": [HumanMessage(text, id=f"h-{n}-{text}")]},
                         cfg(f"tools-{n}"))
        made[f"tools-{n}"] = "tools"
        for name in ("approval", "nested"):
            GRAPHS[name](saver).invoke({"messages": [HumanMessage("hi", id=f"h-{n}")]},
                                       cfg(f"{name}-{n}"))
            made[f"{name}-{n}"] = name
    return made


# -- sources ----------------------------------------------------------------------------


class Source:
    def __init__(self, url: str, open_saver: Any) -> None:
        self.url = url
        self._open = open_saver

    def saver(self) -> AbstractContextManager[Any]:
        return self._open()  # type: ignore[no-any-return]


def sqlite_source(tmp: Path) -> Source:
    path = tmp / "lg.sqlite"

    def open_saver() -> Any:
        return SqliteSaver.from_conn_string(str(path))

    return Source(f"sqlite:///{path}", open_saver)


@pytest.fixture(params=["sqlite", "postgres"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Source:
    if request.param == "sqlite":
        return sqlite_source(tmp_path)
    url = request.getfixturevalue("new_database")("lg")
    with PostgresSaver.from_conn_string(url) as setup:
        setup.setup()
    return Source(url, lambda: PostgresSaver.from_conn_string(url))


@pytest.fixture
def sqlite(tmp_path: Path) -> Source:
    return sqlite_source(tmp_path)


def state_of(graph: Any, thread: str) -> Any:
    snapshot = graph.get_state(cfg(thread), subgraphs=True)
    return snapshot.values, snapshot.next, [t.interrupts for t in snapshot.tasks]


# -- tests ------------------------------------------------------------------------------


def test_import_then_resume_on_ownstate(client: ownstate.Client, source: Source) -> None:
    with source.saver() as theirs:
        made = fill(theirs)
        before = {t: state_of(GRAPHS[g](theirs), t) for t, g in made.items()}
    report = run_import("langgraph", client, source.url, verify=True)
    assert report.ok, report.summary()
    assert (report.units, report.imported) == (3, 3)
    assert report.source_counts["awaiting"] == 2

    ours = OwnstateSaver(client)
    for thread, name in made.items():
        assert state_of(GRAPHS[name](ours), thread) == before[thread]
    waiting = {r.thread_key: r for r in client.runs.outstanding()}
    assert set(waiting) == {"approval-0", "nested-0"}
    assert waiting["approval-0"].awaiting["interrupts"][0]["value"] == {  # type: ignore[index]
        "tool": "refund", "amount": 40}
    store = client.session_stores.get("langgraph")
    session = store.get("tools-0")
    assert session.actor_id == "user-tools-0"
    assert session.metadata["channel"] == "web"
    assert session.metadata["langgraph.thread_id"] == "tools-0"
    items = list(session.list_items(order_by="create_time asc"))
    # as OwnstateSaver stores messages: its item format, derived columns filled
    assert [(i.format, i.role) for i in items][:3] == [
        (ITEM_FORMAT, "user"), (ITEM_FORMAT, "assistant"), (ITEM_FORMAT, "tool")]
    assert any(i.tool_name == "lookup" for i in items)

    assert run_import("langgraph", client, source.url).already == 3
    # The paused threads finish on OwnstateSaver as they would have on LangGraph's.
    with source.saver() as theirs:
        for thread in ("approval-0", "nested-0"):
            graph = GRAPHS[made[thread]]
            mine = graph(ours).invoke(Command(resume="yes"), cfg(thread))
            expected = graph(theirs).invoke(Command(resume="yes"), cfg(thread))
            assert mine == expected
            assert "approved: yes" in str(mine) or "inner yes" in str(mine)
    assert client.runs.outstanding() == []

    # Both went on since: the threads that differ now are reported, not overwritten.
    again = run_import("langgraph", client, source.url)
    assert (again.already, again.failed) == (1, 2)
    assert {f.unit for f in again.failures} == {"approval-0", "nested-0"}
    assert all("left as it is" in f.reason for f in again.failures)


def test_a_second_run_duplicates_nothing(client: ownstate.Client, sqlite: Source) -> None:
    with sqlite.saver() as theirs:
        fill(theirs, 2)
    run_import("langgraph", client, sqlite.url)
    snapshot = dump(client)
    again = run_import("langgraph", client, sqlite.url, verify=True)
    assert (again.already, again.imported, sum(again.written.values())) == (6, 0, 0)
    assert again.ok, again.summary()
    assert dump(client) == snapshot


def dump(client: ownstate.Client) -> Any:
    out = []
    for s in client.session_stores.get("langgraph").list_sessions(order_by="create_time asc"):
        items = [(i.seq, i.data) for i in s.list_items(order_by="create_time asc")]
        runs = [(r.run_id, r.status) for r in client.runs.list(session=s)]
        out.append((s.session_id, s.metadata, items, runs))
    return sorted(out, key=lambda r: r[0])


@pytest.mark.parametrize("mode", ["all", "none"])
def test_every_checkpoint_or_none(client: ownstate.Client, sqlite: Source, mode: str) -> None:
    with sqlite.saver() as theirs:
        made = fill(theirs)
        history = {t: [s.config["configurable"]["checkpoint_id"]
                       for s in GRAPHS[g](theirs).get_state_history(cfg(t))]
                   for t, g in made.items()}
        latest = {t: GRAPHS[g](theirs).get_state(cfg(t)).values for t, g in made.items()}
    report = run_import("langgraph", client, sqlite.url, checkpoints=mode, verify=True)
    assert report.ok, report.summary()
    ours = OwnstateSaver(client)
    for thread, name in made.items():
        graph = GRAPHS[name](ours)
        if mode == "all":
            assert [s.config["configurable"]["checkpoint_id"]
                    for s in graph.get_state_history(cfg(thread))] == history[thread]
            assert graph.get_state(cfg(thread)).values == latest[thread]
        else:
            assert graph.get_state(cfg(thread)).values == {}
            assert [m.content for m in ours.history(cfg(thread))] == [
                m.content for m in latest[thread]["messages"]]
    if mode == "all":  # each invocation was a run, the paused ones still wait
        assert {r.thread_key for r in client.runs.outstanding()} == {"approval-0", "nested-0"}
        tools = client.session_stores.get("langgraph").get("tools-0")
        assert [r.status for r in client.runs.list(session=tools)] == ["done", "done"]
    assert run_import("langgraph", client, sqlite.url, checkpoints=mode).already == 3


def corrupt(source: Source, thread: str) -> None:
    path = source.url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE checkpoints SET checkpoint = x'c1c1c1' WHERE thread_id = ?",
                     (thread,))


def test_an_undecodable_row_skips_its_thread(client: ownstate.Client, sqlite: Source,
                                             tmp_path: Path) -> None:
    with sqlite.saver() as theirs:
        fill(theirs)
    corrupt(sqlite, "tools-0")
    report = run_import("langgraph", client, sqlite.url)
    assert (report.imported, report.failed) == (2, 1)
    [failure] = report.failures
    assert (failure.stage, failure.ids["thread_id"], failure.ids["checkpoint_ns"]) == (
        "decode", "tools-0", "")
    with pytest.raises(ownstate.SessionNotFound):
        client.session_stores.get("langgraph").get("tools-0")
    url = f"sqlite:///{tmp_path / 'o.db'}"
    result = CliRunner().invoke(cli, ["--url", url, "import", "langgraph", "--from",
                                      sqlite.url])
    assert result.exit_code == EXIT_FAILED_UNITS, result.output
    assert "thread_id='tools-0'" in result.output


def test_dry_run_writes_nothing_and_the_source_is_untouched(client: ownstate.Client,
                                                            sqlite: Source) -> None:
    with sqlite.saver() as theirs:
        fill(theirs)
    path = Path(sqlite.url.removeprefix("sqlite:///"))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    report = run_import("langgraph", client, sqlite.url, dry_run=True)
    assert report.imported == 3
    assert report.written["sessions"] == 3
    assert report.written["checkpoints"] == 4  # the nested thread's subgraph has its own
    assert list(client.session_stores.list()) == []
    run_import("langgraph", client, sqlite.url)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_verify_finds_a_tampered_item(client: ownstate.Client, sqlite: Source,
                                      tmp_path: Path) -> None:
    with sqlite.saver() as theirs:
        fill(theirs)
    url = f"sqlite:///{tmp_path / 'o.db'}"
    runner = CliRunner()
    done = runner.invoke(cli, ["--url", url, "import", "langgraph", "--from", sqlite.url,
                               "--verify"])
    assert done.exit_code == 0, done.output
    with ownstate.connect(url) as other:
        other.session_stores.get("langgraph").get("tools-0").pop_item()
    result = runner.invoke(cli, ["--url", url, "import", "langgraph", "--from", sqlite.url,
                                 "--dry-run", "--verify"])
    assert result.exit_code == EXIT_DIFFERENT, result.output
    assert "verify failed for tools-0" in result.output


def test_killed_then_run_again_leaves_one_copy(tmp_path: Path, sqlite: Source) -> None:
    with sqlite.saver() as theirs:
        made = fill(theirs, 25)
    db = tmp_path / "o.db"
    url = f"sqlite:///{db}"
    command = [sys.executable, "-m", "ownstate", "--url", url, "import", "langgraph",
               "--from", sqlite.url, "--concurrency", "2"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with ExitStack() as stack:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        stack.callback(process.wait)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sessions(db) < 10:
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
    assert 0 < sessions(db) < len(made)
    finished = subprocess.run([*command, "--verify"], env=env, capture_output=True, text=True,
                              check=False)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    with ownstate.connect(url) as client:
        store = client.session_stores.get("langgraph")
        assert len(list(store.list_sessions())) == len(made)
        ours = OwnstateSaver(client)
        for thread in made:
            ids = [m.id for m in ours.history(cfg(thread))]
            assert len(ids) == len(set(ids))
        assert {r.thread_key for r in client.runs.outstanding()} == {
            t for t in made if not t.startswith("tools")}


def sessions(db: Path) -> int:
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_a_source_that_cannot_be_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    runner = CliRunner()
    unreachable = runner.invoke(cli, ["--url", url, "import", "langgraph", "--from",
                                      "postgresql://nobody@127.0.0.1:1/none"])
    assert unreachable.exit_code == 1
    assert "cannot open langgraph source" in unreachable.output
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    no_tables = runner.invoke(cli, ["--url", url, "import", "langgraph", "--from", str(empty)])
    assert no_tables.exit_code == 1
    assert "no such table: checkpoints" in no_tables.output


def test_a_thread_cut_short_is_written_again_once(client: ownstate.Client,
                                                   sqlite: Source) -> None:
    """What a run killed inside one thread leaves: its session, some of its messages, no
    checkpoint yet (or the checkpoint without its pending writes)."""
    with sqlite.saver() as theirs:
        made = fill(theirs)
        before = {t: state_of(GRAPHS[g](theirs), t) for t, g in made.items()}
    store = client.session_stores.create("langgraph")
    store.add(actor_id="user-tools-0", session_id="tools-0").append_items(
        [{"type": "message", "role": "user", "content": "order 42"}])
    full = run_import("langgraph", client, sqlite.url)
    assert full.failed == 0
    holder = next(r for r in client.runs.list(session=store.get("approval-0")))
    for record in client.checkpoints.list(holder.checkpoint_scope()):
        client.checkpoints.delete(holder.checkpoint_scope(), [record.checkpoint_id],
                                  namespace=record.namespace)
    again = run_import("langgraph", client, sqlite.url, verify=True)
    assert again.ok, again.summary()
    assert (again.imported, again.already) == (1, 2)
    ours = OwnstateSaver(client)
    for thread, name in made.items():
        assert state_of(GRAPHS[name](ours), thread) == before[thread]
        ids = [m.id for m in ours.history(cfg(thread))]
        assert len(ids) == len(set(ids)), thread
