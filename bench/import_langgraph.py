"""``ownstate import langgraph --verify`` on a PostgresSaver deployment of 80,000 threads.

The source is a database (``bench_lg_import`` by default) holding LangGraph's own
PostgresSaver tables. They are produced by LangGraph itself: a few hundred template
threads of each shape are run through a real graph (human turns, a tool call every third
turn, some paused at ``interrupt()``) on ``PostgresSaver``, then replicated in SQL under
new thread ids until there are ``--threads`` of them. Shapes: turns uniform in 2..10
(median 6) for most; 5% with 41..60 turns; 1% with 200; ``--paused`` paused at an
interrupt after 2..10 turns. The fixture is kept between runs (rebuilt when its
parameters change, or with ``--rebuild``).

The target is a fresh database (``bench_lg_ownstate``), dropped and created every run.
The import runs as the CLI does (``arun`` with the same options), with ``--verify``, and
the script checks that every unit was imported and verified. Run by hand::

    /work/venv/bin/python bench/import_langgraph.py                  # the full 80,000
    /work/venv/bin/python bench/import_langgraph.py --threads 2000   # a quick look
    /work/venv/bin/python bench/import_langgraph.py --sample 40 --profile out.html
    /work/venv/bin/python bench/import_langgraph.py --sample 40 --profile out.txt  # as text

``OWNSTATE_BENCH_LG_SOURCE_DB`` and ``OWNSTATE_BENCH_LG_TARGET_DB`` name the two
databases (default ``bench_lg_import`` and ``bench_lg_ownstate``).

Needs the ``bench`` extra and a PostgreSQL server at ``OWNSTATE_BENCH_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``; its databases are created next to
that one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import _lg_prefill
import psycopg
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt

import ownstate
from ownstate.importers import ImportReport, arun
from ownstate.importers.progress import for_stream

POSTGRES_URL = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
SOURCE_DB = os.environ.get("OWNSTATE_BENCH_LG_SOURCE_DB", "bench_lg_import")
TARGET_DB = os.environ.get("OWNSTATE_BENCH_LG_TARGET_DB", "bench_lg_ownstate")
TEXT = ("Could you check the status of my order and tell me when it ships? I ordered it "
        "last week and the tracking page has not changed since. ")


def url_of(database: str) -> str:
    return POSTGRES_URL.rsplit("/", 1)[0] + f"/{database}"


def graph(saver: Any) -> Any:
    """An agent that calls a tool on every third turn and may stop for an approval."""
    def agent(state: MessagesState) -> dict[str, Any]:
        msgs = state["messages"]
        last = msgs[-1]
        if isinstance(last, HumanMessage) and last.content.startswith("approve"):
            answer = interrupt({"tool": "refund", "amount": len(msgs)})
            return {"messages": [AIMessage(f"approved: {answer}")]}
        if isinstance(last, HumanMessage) and len(msgs) % 3 == 0:
            return {"messages": [AIMessage("", tool_calls=[
                {"name": "lookup_order", "args": {"order": len(msgs)}, "id": f"c{len(msgs)}"}])]}
        return {"messages": [AIMessage(TEXT[: 60 + len(msgs) % 80])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
        return {"messages": [ToolMessage(json.dumps({"status": "shipped", **call["args"]}),
                                         tool_call_id=call["id"], name=call["name"])]}

    def route(state: MessagesState) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else "__end__"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def shapes(threads: int, paused: int) -> dict[str, int]:
    huge, long = threads // 100, threads * 5 // 100
    return {"huge": huge, "long": long, "paused": paused,
            "short": threads - huge - long - paused}


def template_turns(shape: str, rng: random.Random) -> int:
    if shape == "huge":
        return 200
    if shape == "long":
        return rng.randint(41, 60)
    return rng.randint(2, 10)


def build_fixture(threads: int, paused: int, templates: int) -> None:
    params = {"threads": threads, "paused": paused, "templates": templates, "v": 1}
    with psycopg.connect(url_of("postgres"), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                               (SOURCE_DB,)).fetchone()
        if exists:
            with psycopg.connect(url_of(SOURCE_DB)) as conn:
                try:
                    row = conn.execute("SELECT params FROM bench_fixture").fetchone()
                except psycopg.Error:
                    row = None
            if row is not None and row[0] == params:
                print(f"fixture {SOURCE_DB} is current: {params}", file=sys.stderr)
                return
            admin.execute(f"DROP DATABASE {SOURCE_DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {SOURCE_DB}")
    rng = random.Random(7)
    began = time.monotonic()
    counts = shapes(threads, paused)
    made: dict[str, list[str]] = {}
    with PostgresSaver.from_conn_string(url_of(SOURCE_DB)) as saver:
        saver.setup()
        app = graph(saver)
        for shape, wanted in counts.items():
            size = min(wanted, {"huge": max(templates // 40, 2), "long": templates // 4}.get(
                shape, templates))
            made[shape] = []
            for n in range(size):
                thread = f"tpl-{shape}-{n}"
                config = {"configurable": {"thread_id": thread, "user_id": f"user-{n % 97}"},
                          "metadata": {"channel": "web", "shape": shape}}
                for turn in range(template_turns(shape, rng)):
                    app.invoke({"messages": [HumanMessage(f"{TEXT} (turn {turn})")]}, config)
                if shape == "paused":
                    app.invoke({"messages": [HumanMessage("approve the refund")]}, config)
                made[shape].append(thread)
            print(f"{shape}: {size} template threads run through LangGraph "
                  f"({time.monotonic() - began:.0f}s)", file=sys.stderr)
    with psycopg.connect(url_of(SOURCE_DB)) as conn:
        conn.execute("CREATE TEMP TABLE bench_map (thread_id text, template text)")
        rows = []
        for shape, wanted in counts.items():
            pool = made[shape]
            rows += [(f"{shape}-{n:06d}", pool[n % len(pool)]) for n in range(wanted)]
        with conn.cursor().copy("COPY bench_map FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        for table, columns in (
                ("checkpoints", "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
                                "checkpoint, metadata"),
                ("checkpoint_blobs", "checkpoint_ns, channel, version, type, blob"),
                ("checkpoint_writes", "checkpoint_ns, checkpoint_id, task_id, idx, channel, "
                                      "type, blob, task_path")):
            copied = ", ".join("t." + c.strip() for c in columns.split(","))
            conn.execute(f"INSERT INTO {table} (thread_id, {columns}) "
                         f"SELECT m.thread_id, {copied} "
                         f"FROM bench_map m JOIN {table} t ON t.thread_id = m.template")
            conn.execute(f"DELETE FROM {table} WHERE thread_id LIKE 'tpl-%%'")
            print(f"{table} replicated ({time.monotonic() - began:.0f}s)", file=sys.stderr)
        conn.execute("CREATE TABLE bench_fixture (params jsonb)")
        conn.execute("INSERT INTO bench_fixture VALUES (%s)", (json.dumps(params),))
    with psycopg.connect(url_of(SOURCE_DB), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def describe_source() -> dict[str, Any]:
    with psycopg.connect(url_of(SOURCE_DB)) as conn:
        threads = conn.execute("SELECT count(DISTINCT thread_id) FROM checkpoints").fetchone()
        checkpoints = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))"
                            ).fetchone()
    if not (threads and checkpoints and size):
        raise SystemExit(f"{SOURCE_DB} holds no PostgresSaver tables")
    return {"threads": threads[0], "checkpoints": checkpoints[0], "size": size[0]}


async def run_import(concurrency: int | None, shard: tuple[int, int] = (0, 1),
                     target: str | None = None) -> ImportReport:
    client = await ownstate.connect_async(target or url_of(TARGET_DB))
    try:
        label = "import langgraph" + (f" [{shard[0] + 1}/{shard[1]}]" if shard[1] > 1 else "")
        return await arun("langgraph", client, url_of(SOURCE_DB), verify=True,
                          concurrency=concurrency, shard=shard,
                          progress=for_stream(label, sys.stderr))
    finally:
        await client.close()


def one_shard(concurrency: int | None, shard: tuple[int, int]) -> ImportReport:
    return asyncio.run(run_import(concurrency, shard))


def import_seed(target: str) -> None:
    report = asyncio.run(run_import(None, target=target))
    if not report.ok:
        raise SystemExit("the seed import failed")


def migrate(target: str) -> None:
    async def run() -> None:
        await (await ownstate.connect_async(target)).close()

    asyncio.run(run())


class ServerCPU(threading.Thread):
    """The CPU time of the PostgreSQL processes serving ``databases``, read from ``/proc``
    every 0.2 s while the import runs (a backend's last 0.2 s before it exits is lost;
    the importer's connections live as long as it does)."""

    def __init__(self, databases: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.databases = set(databases)
        self.seen: dict[int, float] = {}
        self.done = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    # "postgres: [cluster:] user database host(port) state"
                    words = f.read().replace(b"\0", b" ").decode().split()
                if not words or words[0] != "postgres:" or not self.databases.intersection(
                        words[2:4]):
                    continue
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, UnicodeDecodeError, IndexError):
                continue
            self.seen[int(pid)] = (int(fields[11]) + int(fields[12])) / self.tick

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.sample()

    def stop(self) -> float:
        self.done.set()
        self.join()
        self.sample()
        return sum(self.seen.values())


def import_all(concurrency: int | None, processes: int, sample: int) -> ImportReport:
    """The import as ``processes`` processes side by side, one shard each (what running
    ``ownstate import ... --shard I/N`` N times does), their reports added up; with
    ``sample``, only one shard in ``sample`` of the threads, in this process."""
    if sample > 1:
        return one_shard(concurrency, (0, sample))
    if processes == 1:
        return one_shard(concurrency, (0, 1))
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
        parts = list(pool.map(one_shard, [concurrency] * processes,
                              [(i, processes) for i in range(processes)]))
    total = ImportReport(parts[0].source)
    for part in parts:
        for name in ("units", "imported", "already", "failed", "verified"):
            setattr(total, name, getattr(total, name) + getattr(part, name))
        for name in ("written", "source_counts", "stored_counts"):
            getattr(total, name).update(getattr(part, name))
        total.failures += part.failures
    return total


def items_stored() -> int:
    with psycopg.connect(url_of(TARGET_DB)) as conn:
        found = conn.execute("SELECT to_regclass('ownstate.items') IS NOT NULL").fetchone()
        if not (found and found[0]):
            return 0
        count = conn.execute("SELECT count(*) FROM ownstate.items").fetchone()
    return count[0] if count else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=80_000)
    parser.add_argument("--paused", type=int, default=500)
    parser.add_argument("--templates", type=int, default=300,
                        help="template threads of the common shapes run through LangGraph")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="threads in flight per process (default: the importer's)")
    parser.add_argument("--processes", type=int, default=2,
                        help="processes side by side, one shard each")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--sample", type=int, default=1, metavar="N",
                        help="import one thread in N (one shard, in this process: for "
                             "--profile)")
    parser.add_argument("--profile", metavar="HTML", help="profile with pyinstrument")
    parser.add_argument("--prefill", type=int, default=0, metavar="COPIES",
                        help="import into a target already holding COPIES copies of the "
                             "source's threads (a template database, kept between runs)")
    parser.add_argument("--analyze", action="store_true",
                        help="with --prefill: analyze the target before the import")
    args = parser.parse_args()
    if args.rebuild:
        with psycopg.connect(url_of("postgres"), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {SOURCE_DB} WITH (FORCE)")
    build_fixture(args.threads, min(args.paused, args.threads // 10), args.templates)
    source = describe_source()
    with psycopg.connect(url_of("postgres"), autocommit=True) as admin:
        if args.prefill:
            template = f"{TARGET_DB}_prefill"
            _lg_prefill.build_template(admin, template, url_of, args.prefill, import_seed,
                                       migrate)
            _lg_prefill.clone(admin, template, TARGET_DB, url_of(TARGET_DB),
                              analyze=args.analyze)
        else:
            admin.execute(f"DROP DATABASE IF EXISTS {TARGET_DB} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {TARGET_DB}")
        admin.execute("CHECKPOINT")
    stored = items_stored()
    load_before = os.getloadavg()
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
        profiler.start()
    server = ServerCPU((SOURCE_DB, TARGET_DB))
    server.start()
    began = time.monotonic()
    cpu = time.process_time()
    report = import_all(args.concurrency, args.processes, args.sample)
    elapsed = time.monotonic() - began
    server_cpu = server.stop()
    if profiler is not None:
        profiler.stop()
        with open(args.profile, "w") as out:  # a .txt path: the text rendering
            out.write(profiler.output_text(unicode=False) if args.profile.endswith(".txt")
                      else profiler.output_html())
    print(report.summary())
    print(f"\nsource: {source['threads']} threads, {source['checkpoints']} checkpoints, "
          f"{source['size']}")
    print(f"imported and verified in {elapsed:.0f}s ({report.units / elapsed:.0f} threads/s); "
          f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} "
          f"(1 min) on {os.cpu_count()} cores")
    print(f"target held {stored} items before; PostgreSQL CPU (backends of both "
          f"databases) {1000 * server_cpu / max(report.units, 1):.1f} ms per thread")
    if args.sample > 1 or args.processes == 1:  # the import ran in this process
        print(f"client CPU {1000 * (time.process_time() - cpu) / max(report.units, 1):.1f} ms "
              "per thread")
    if not report.ok or report.verified != report.units or (
            args.sample == 1 and report.units != source["threads"]):
        raise SystemExit("the import does not match the source")


if __name__ == "__main__":
    main()
