"""LangGraph checkpointers on the conversation-turn workload: ``OwnstateSaver`` against
LangGraph's own ``SqliteSaver`` and ``PostgresSaver``, on the same databases.

The graph is a compiled one-node ``MessagesState`` graph. Each turn invokes it on one
thread with one ~400-byte human message; the node answers with one ~400-byte AI message.
The four savers advance in lockstep (turn ``t`` of every saver before turn ``t + 1`` of
any), in an order that rotates every turn, so machine noise falls on all of them alike.

Reported per saver: stored bytes after the last turn (SQLite: the database's used pages;
PostgreSQL: ``pg_total_relation_size`` of every table of the saver's schema), the median
milliseconds of the first and of the last 20 turns, and the median process CPU time of
the first 20 (``time.process_time``: every thread of the process, LangGraph's background
writers and the client's event loop too, during the turn). Run by hand (not in CI)::

    /work/venv/bin/python bench/langgraph_savers.py --turns 500

``--separate-appends`` adds ``OwnstateSaver`` on SQLite and on PostgreSQL made with
``items_with_checkpoints=False``: a step's new messages appended in a call of their own
before its checkpoint is put, as before the two were stored in one transaction.

``--databases sqlite`` (or ``postgres``) runs only the savers of that database (the
comparison each ratio makes is within one database, so the figures of the other are not
needed; fewer savers make a run shorter and its lockstep tighter).

``--synchronous-checkpoints`` adds a saver: ``OwnstateSaver`` on PostgreSQL with
``synchronous_checkpoints=true``, whose checkpoint writes wait for their WAL flush like
every other write (the default does not), in the same lockstep.

Needs the ``bench`` extra (``langgraph-checkpoint-sqlite``, ``langgraph-checkpoint-postgres``)
and a PostgreSQL server at ``OWNSTATE_BENCH_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from psycopg.rows import dict_row

from ownstate.adapters.langgraph import OwnstateSaver

sys.path.append(str(Path(__file__).resolve().parent))
from _workload import conversation, median_ms, print_table, rotate

POSTGRES_URL = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
WINDOW = 20


def build_graph(saver: Any, answers: list[str]) -> Any:
    def chatbot(state: MessagesState) -> dict[str, Any]:
        turn = sum(1 for m in state["messages"] if m.type == "human") - 1
        return {"messages": [AIMessage(answers[turn])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    return builder.compile(checkpointer=saver)


def sqlite_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def postgres_bytes(schema: str) -> int:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p')", (schema,)).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--synchronous-checkpoints", action="store_true",
                        help="also OwnstateSaver on PostgreSQL with synchronous_checkpoints")
    parser.add_argument("--separate-appends", action="store_true",
                        help="also OwnstateSaver on both databases with "
                             "items_with_checkpoints=False")
    parser.add_argument("--databases", choices=["both", "sqlite", "postgres"],
                        default="both", help="run only the savers of one database")
    args = parser.parse_args()
    lite, pg = args.databases != "postgres", args.databases != "sqlite"
    pairs = conversation(args.turns)
    questions = [p[0]["content"] for p in pairs]
    answers = [p[1]["content"][0]["text"] for p in pairs]

    tmp = Path(tempfile.mkdtemp(prefix="ownstate-bench-lg-"))
    suffix = uuid.uuid4().hex[:8]
    schemas = {"OwnstateSaver (postgres)": f"bench_os_{suffix}",
               "PostgresSaver": f"bench_lg_{suffix}"} if pg else {}
    synchronous = "OwnstateSaver (postgres, synchronous checkpoints)"
    if args.synchronous_checkpoints and pg:
        schemas[synchronous] = f"bench_oss_{suffix}"
    separate = {"sqlite": "OwnstateSaver (sqlite, separate appends)",
                "postgres": "OwnstateSaver (postgres, separate appends)"}
    if args.separate_appends and pg:
        schemas[separate["postgres"]] = f"bench_osa_{suffix}"
    closers: list[Any] = []
    try:
        graphs = {}
        if lite:
            lite_conn = sqlite3.connect(tmp / "langgraph.db", check_same_thread=False)
            closers.append(lite_conn.close)
            own_lite = OwnstateSaver.from_url(f"sqlite:///{tmp}/ownstate.db")
            closers.append(own_lite.close)
            graphs["OwnstateSaver (sqlite)"] = build_graph(own_lite, answers)
            graphs["SqliteSaver"] = build_graph(SqliteSaver(lite_conn), answers)
        if pg:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schemas['PostgresSaver']}")
            pg_conn = psycopg.connect(
                POSTGRES_URL, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                options=f"-c search_path={schemas['PostgresSaver']}")
            closers.append(pg_conn.close)
            pg_saver = PostgresSaver(pg_conn)  # type: ignore[arg-type]
            pg_saver.setup()
            own_pg = OwnstateSaver.from_url(
                f"{POSTGRES_URL}?schema={schemas['OwnstateSaver (postgres)']}")
            closers.append(own_pg.close)
            graphs["OwnstateSaver (postgres)"] = build_graph(own_pg, answers)
            graphs["PostgresSaver"] = build_graph(pg_saver, answers)
        if args.synchronous_checkpoints and pg:
            own_sync = OwnstateSaver.from_url(
                f"{POSTGRES_URL}?schema={schemas[synchronous]}&synchronous_checkpoints=true")
            closers.append(own_sync.close)
            graphs[synchronous] = build_graph(own_sync, answers)
        if args.separate_appends and lite:
            own_lite_apart = OwnstateSaver.from_url(f"sqlite:///{tmp}/ownstate-apart.db",
                                                    items_with_checkpoints=False)
            closers.append(own_lite_apart.close)
            graphs[separate["sqlite"]] = build_graph(own_lite_apart, answers)
        if args.separate_appends and pg:
            own_pg_apart = OwnstateSaver.from_url(
                f"{POSTGRES_URL}?schema={schemas[separate['postgres']]}",
                items_with_checkpoints=False)
            closers.append(own_pg_apart.close)
            graphs[separate["postgres"]] = build_graph(own_pg_apart, answers)
        names = list(graphs)
        times: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        config = {"configurable": {"thread_id": "bench-thread"}}
        gc.disable()
        for turn in range(args.turns):
            for name in rotate(names, turn):
                start, start_cpu = time.perf_counter(), time.process_time()
                graphs[name].invoke({"messages": [HumanMessage(questions[turn])]}, config)
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
            if turn % 50 == 49:
                gc.collect()
                print(f"  turn {turn + 1}/{args.turns}", file=sys.stderr)
        gc.enable()
        for name in names:  # every saver kept the whole conversation
            state = graphs[name].get_state(config)
            assert len(state.values["messages"]) == 2 * args.turns, name

        stored: dict[str, int] = {}
        if lite:
            stored["OwnstateSaver (sqlite)"] = sqlite_bytes(tmp / "ownstate.db")
            stored["SqliteSaver"] = sqlite_bytes(tmp / "langgraph.db")
            if args.separate_appends:
                stored[separate["sqlite"]] = sqlite_bytes(tmp / "ownstate-apart.db")
        for name, schema in schemas.items():
            stored[name] = postgres_bytes(schema)
        # stored bytes are compared with PostgresSaver's, last turns with its last turns
        base = "PostgresSaver" if pg else "SqliteSaver"
        window = min(WINDOW, args.turns)
        first = {n: median_ms(times[n][:window]) for n in names}
        last = {n: median_ms(times[n][-window:]) for n in names}
        first_cpu = {n: median_ms(cpu[n][:window]) for n in names}
        print(f"\nT = {args.turns} turns; medians of the first and last {window} turns\n")
        rows = []
        for name in names:
            own = "SqliteSaver" if "sqlite" in name or name == "SqliteSaver" else "PostgresSaver"
            rows.append([
                name, f"{stored[name] / 1e6:.2f} MB",
                f"{stored[name] / stored[base]:.4f}",
                f"{first[name]:.2f}", f"{last[name]:.2f}",
                f"{last[name] / first[name]:.2f}",
                f"{last[name] / last[base]:.3f}",
                f"{first[name] / first[own]:.2f} / {last[name] / last[own]:.3f} ({own})",
                f"{first_cpu[name]:.2f}", f"{first_cpu[name] / first_cpu[own]:.2f}"])
        print_table(["saver", "stored", f"stored / {base}", "first 20 ms",
                     "last 20 ms", "last / first", f"last / {base} last",
                     "first / last vs its database's LangGraph saver",
                     "first 20 CPU ms", "first 20 CPU vs it"], rows)
    finally:
        for close in reversed(closers):
            close()
        if schemas:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                for schema in schemas.values():
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    main()
