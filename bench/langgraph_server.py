"""What a LangGraph turn costs the PostgreSQL server, late in a thread: ``OwnstateSaver``
against ``PostgresSaver`` on ``bench/langgraph_savers.py``'s graph and conversation.

Each saver runs one thread of ``--turns`` turns, the savers in turn, ``--rounds`` times.
Over the last ``--window`` turns of each thread it reports, a turn: the CPU time of the
server processes that served the saver's connections (``utime`` + ``stime`` from
``/proc/<pid>/stat``, found by the ``application_name`` the saver's connections carry, so
the server must run on this machine), the client process's CPU time and the wall clock.
CPU times are what the other jobs on a loaded machine inflate least; the wall clock is
what ``langgraph_savers.py`` compares. Run by hand (not in CI)::

    PYTHONPATH=src /work/venv/bin/python bench/langgraph_server.py --turns 500 --rounds 3

Needs the ``bench`` extra and a PostgreSQL server at ``OWNSTATE_BENCH_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``) on this machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from ownstate.adapters.langgraph import OwnstateSaver

sys.path.append(str(Path(__file__).resolve().parent))
from _workload import conversation, print_table, server_cpu_seconds
from langgraph_savers import POSTGRES_URL, build_graph


def one_thread(name: str, turns: int, window: int) -> tuple[float, float, float]:
    """Server CPU, client CPU and wall ms a turn over the last ``window`` of ``turns``."""
    pairs = conversation(turns)
    answers = [p[1]["content"][0]["text"] for p in pairs]
    schema = f"bench_srv_{uuid.uuid4().hex[:8]}"
    application = f"ownstate-bench-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    closers: list[Any] = []
    try:
        if name == "OwnstateSaver":
            saver: Any = OwnstateSaver.from_url(
                f"{POSTGRES_URL}?schema={schema}&application_name={application}")
            closers.append(saver.close)
        else:
            conn = psycopg.connect(POSTGRES_URL, autocommit=True, prepare_threshold=0,
                                   row_factory=dict_row, application_name=application,
                                   options=f"-c search_path={schema}")
            closers.append(conn.close)
            saver = PostgresSaver(conn)  # type: ignore[arg-type]
            saver.setup()
        graph = build_graph(saver, answers)
        config = {"configurable": {"thread_id": "bench-thread"}}
        for turn in range(turns):
            if turn == turns - window:
                server = server_cpu_seconds(POSTGRES_URL, application)
                client, wall = time.process_time(), time.perf_counter()
            graph.invoke({"messages": [HumanMessage(pairs[turn][0]["content"])]}, config)
        server = server_cpu_seconds(POSTGRES_URL, application) - server
        client, wall = time.process_time() - client, time.perf_counter() - wall
        return server * 1e3 / window, client * 1e3 / window, wall * 1e3 / window
    finally:
        for close in closers:
            close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = ["OwnstateSaver", "PostgresSaver"]
    seen: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            seen[name].append(one_thread(name, args.turns, args.window))
            print(f"  round {round_ + 1}: {name} done, load "
                  f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
    print(f"\nT = {args.turns} turns; ms a turn over the last {args.window}, "
          f"medians of {args.rounds} rounds\n")
    med = {n: [statistics.median(r[k] for r in seen[n]) for k in range(3)] for n in names}
    base = med["PostgresSaver"]
    rows = [[n, *(f"{v:.2f}" for v in med[n]),
             f"{(med[n][0] + med[n][1]) / (base[0] + base[1]):.3f}",
             f"{med[n][2] / base[2]:.3f}"] for n in names]
    print_table(["saver", "server CPU", "client CPU", "wall", "CPU vs PostgresSaver",
                 "wall vs PostgresSaver"], rows)


if __name__ == "__main__":
    main()
