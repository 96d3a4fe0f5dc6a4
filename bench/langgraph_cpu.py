"""Where a LangGraph turn's CPU goes: ``bench/langgraph_savers.py``'s graph on one saver,
every thread profiled (cProfile on each thread's own CPU clock), the time split by kind.

LangGraph runs a step's checkpoint puts and writes on threads it makes for each
invocation, and a PostgreSQL client runs ownstate's calls on its event-loop thread, so a
profile of the calling thread alone misses most of a turn. Here each thread gets a
profiler of its own (``threading.setprofile`` for the threads started during the turns,
and the client's loop thread), and the merged profile is split into the categories of the
table in docs/benchmarks.md. Time spent in builtins and the standard library is charged
to whoever called them (by the time of each call edge), so ``isinstance`` inside
LangGraph counts as LangGraph's and inside the saver as the saver's.

A profiler costs most where there are most Python calls, so profiled times are about
three to five times the real ones and inflate call-heavy code more: read the shares,
and take the time a turn really takes from ``langgraph_savers.py`` (its CPU column).
Run by hand::

    PYTHONPATH=src /work/venv/bin/python bench/langgraph_cpu.py --saver ownstate-sqlite

``--warmup N`` runs N turns before the profiled ones (450, with ``--turns 50``, profiles
the turns of a long thread).

``--saver`` is ``ownstate-sqlite``, ``sqlite`` (``SqliteSaver``), ``ownstate-postgres`` or
``postgres`` (``PostgresSaver``, at ``OWNSTATE_BENCH_POSTGRES_URL``).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import gc
import pstats
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg.rows import dict_row

from ownstate.adapters.langgraph import OwnstateSaver

sys.path.append(str(Path(__file__).resolve().parent))
from _workload import conversation, print_table
from langgraph_savers import POSTGRES_URL, build_graph

Key = tuple[str, int, str]
WARMUP = 2

# (path fragment or builtin-name fragment, category); the first that matches wins
_FILES = [
    ("/ownstate/adapters/langgraph/_history", "saver: message references"),
    ("/ownstate/adapters/", "saver: its own work"),
    ("/ownstate/formats/", "message -> item conversion"),
    ("_tsvector", "search terms"), ("/ownstate/search", "search terms"),
    ("/ownstate/backends/", "backend (Python)"),
    ("/ownstate/", "API: validation, encoding, model, ids"),
    ("/psycopg", "psycopg"), ("/asyncio/", "asyncio (client's loop)"),
    ("selectors.py", "asyncio (client's loop)"),
    ("/langgraph/checkpoint/serde", "serializer (LangGraph's, msgpack, zlib)"),
    ("/langgraph/checkpoint/sqlite", "LangGraph's saver"),
    ("/langgraph/checkpoint/postgres", "LangGraph's saver"),
    ("/langgraph/", "LangGraph, LangChain (shared)"),
    ("/langchain_core/", "LangGraph, LangChain (shared)"),
    ("pydantic", "LangGraph, LangChain (shared)"),
    ("langgraph_savers.py", "LangGraph, LangChain (shared)"),
    ("/json/", "json (stdlib)"),
    ("concurrent/futures", "threads (LangGraph's executors, shared)"),
]
_BUILTINS = [
    ("sqlite3", "sqlite3 (C calls)"), ("zlib", "serializer (LangGraph's, msgpack, zlib)"),
    ("ormsgpack", "serializer (LangGraph's, msgpack, zlib)"),
    ("pydantic", "LangGraph, LangChain (shared)"), ("psycopg", "psycopg"),
]


def _category(key: Key) -> str | None:
    path, _, name = key
    for fragment, category in _BUILTINS if path == "~" else _FILES:
        if fragment in (name if path == "~" else path):
            return category
    return None  # the standard library or a builtin: charged to its callers


def categories(stats: dict[Key, Any]) -> collections.Counter[str]:
    """Seconds per category; uncategorised functions split over their callers' categories
    by the time of each call edge."""
    @functools.cache
    def shares(key: Key, depth: int = 0) -> dict[str, float]:
        category = _category(key)
        if category is not None:
            return {category: 1.0}
        edges = {k: v[2] for k, v in stats[key][4].items() if k in stats and k != key}
        total = sum(edges.values())
        if depth > 6 or not total:
            return {"other (standard library, threads)": 1.0}
        out: collections.Counter[str] = collections.Counter()
        for caller, seconds in edges.items():
            for category, share in shares(caller, depth + 1).items():
                out[category] += share * seconds / total
        return dict(out)

    spent: collections.Counter[str] = collections.Counter()
    for key, row in stats.items():
        if key[2] == "<method 'enable' of '_lsprof.Profiler' objects>":
            continue  # the profiler starting
        for category, share in shares(key).items():
            spent[category] += row[2] * share
    return spent


def make_saver(kind: str, tmp: Path, closers: list[Any]) -> tuple[Any, Any]:
    """The saver, and the sync client whose loop thread runs its calls (or None)."""
    if kind == "sqlite":
        conn = sqlite3.connect(tmp / "langgraph.db", check_same_thread=False)
        closers.append(conn.close)
        return SqliteSaver(conn), None
    schema = f"bench_cpu_{uuid.uuid4().hex[:8]}"
    if kind == "postgres":
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, prepare_threshold=0,
                               row_factory=dict_row, options=f"-c search_path={schema}")
        closers.append(conn.close)
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
    else:
        url = (f"sqlite:///{tmp}/ownstate.db" if kind == "ownstate-sqlite"
               else f"{POSTGRES_URL}?schema={schema}")
        saver = OwnstateSaver.from_url(url)
        closers.append(saver.close)
    if kind != "ownstate-sqlite":
        def drop() -> None:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        closers.insert(0, drop)
    loop_client = saver._bridge.given if kind == "ownstate-postgres" else None
    return saver, loop_client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saver", default="ownstate-sqlite",
                        choices=["ownstate-sqlite", "sqlite", "ownstate-postgres", "postgres"])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=WARMUP,
                        help="turns run before the profiled ones (a late turn: 450)")
    args = parser.parse_args()
    pairs = conversation(args.turns + args.warmup)
    questions = [p[0]["content"] for p in pairs]
    answers = [p[1]["content"][0]["text"] for p in pairs]
    closers: list[Any] = []
    try:
        saver, loop_client = make_saver(args.saver, Path(tempfile.mkdtemp()), closers)
        graph = build_graph(saver, answers)
        config = {"configurable": {"thread_id": "bench-thread"}}
        for turn in range(args.warmup):
            graph.invoke({"messages": [HumanMessage(questions[turn])]}, config)
        profiles: list[cProfile.Profile] = []

        def start() -> None:
            profile = cProfile.Profile(time.thread_time)
            profiles.append(profile)
            profile.enable()

        async def start_on_loop() -> None:
            start()

        async def stop_on_loop() -> None:
            for profile in profiles:
                profile.disable()  # only this thread's: the loop's

        threading.setprofile(lambda *_: start())  # threads started from now on
        if loop_client is not None:
            loop_client.run_coroutine(start_on_loop())
        start()
        gc.disable()
        began = time.process_time()
        for turn in range(args.warmup, args.warmup + args.turns):
            graph.invoke({"messages": [HumanMessage(questions[turn])]}, config)
        spent = time.process_time() - began
        gc.enable()
        threading.setprofile(None)  # type: ignore[arg-type]
        if loop_client is not None:  # the loop's profiler stops on the loop's thread
            loop_client.run_coroutine(stop_on_loop())
        for profile in profiles:
            profile.disable()
        merged = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            merged.add(profile)
        found = categories(merged.stats)  # type: ignore[attr-defined]
        total = sum(found.values())
        print(f"\n{args.saver}: {args.turns} turns, {len(profiles)} threads profiled, "
              f"{1e3 * spent / args.turns:.2f} ms of process CPU a turn while profiled\n")
        print_table(["category", "ms a turn (profiled)", "share"], [
            [name, f"{1e3 * seconds / args.turns:.2f}", f"{100 * seconds / total:.0f}%"]
            for name, seconds in found.most_common()])
    finally:
        for close in reversed(closers):
            close()


if __name__ == "__main__":
    main()
