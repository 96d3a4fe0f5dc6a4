"""Benchmarks of ownstate's SQLite sessions against what an application would use instead.

Three workloads, each a subcommand; every run measures the competitor and ownstate in the
same process, on files in one temporary directory (one disk), and prints medians and
ratios as a Markdown table:

- ``turns``:  an agent conversation. Each turn loads the whole history in replay order,
  then appends one user and one assistant message (~400 bytes of varied text each).
  Competitor: the OpenAI Agents SDK's ``SQLiteSession`` on a file (``get_items()`` then
  ``add_items([user, assistant])``). ownstate: the sync and the async client.
- ``append``: 20,000 items appended in batches of 100 with ``append_items``, against raw
  ``sqlite3`` ``executemany`` into a plain (session_id, seq, data) table, one transaction
  per batch, WAL and ``synchronous=NORMAL`` as ownstate uses. ownstate's store does not
  index its items for search (``index_items=False``), as the raw table has no such index;
  a store that does (the default) is measured beside it.
- ``read``:   reading a 1,000-item session in replay order, against a raw
  ``SELECT data ... ORDER BY seq`` with ``json.loads`` of each row; ownstate with its
  replay cache (every read after the first) and without it (``replay_cache=0``: every
  read is a first read).

Run by hand (not in CI); ``all`` runs the three with their defaults::

    /work/venv/bin/python bench/sessions_sqlite.py turns --turns 200 500
    /work/venv/bin/python bench/sessions_sqlite.py append
    /work/venv/bin/python bench/sessions_sqlite.py read

The machine is assumed noisy: variants run in rotating order, several rounds each, and only
medians are reported. ``turns`` needs the ``bench`` extra (``openai-agents``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import ownstate

sys.path.append(str(Path(__file__).resolve().parent))  # after site-packages: see _workload
from _workload import (
    OwnstateAsyncTurns,
    OwnstateSyncTurns,
    Pair,
    conversation,
    flat_items,
    median_ms,
    print_table,
    print_turns_header,
    print_turns_table,
    rotate,
    turns_round,
    turns_rows,
)

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]

# --------------------------------------------------------------------------------------
# helpers


@contextlib.contextmanager
def scratch_dir(base: str | None) -> Iterator[Path]:
    """A fresh directory for this run's database files (all on one filesystem)."""
    path = Path(tempfile.mkdtemp(prefix="ownstate-bench-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def ownstate_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def environment() -> str:
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(
        os, "getloadavg") else ""
    return (f"{date.today().isoformat()}, Python {platform.python_version()}, SQLite "
            f"{sqlite3.sqlite_version}, {os.cpu_count()} CPUs, {platform.machine()}"
            f"{load}, ownstate from {Path(ownstate.__file__).parent}")


# --------------------------------------------------------------------------------------
# (a) conversation turns

class AgentsTurns:
    """The OpenAI Agents SDK's SQLiteSession on a file: get_items(), then add_items()."""

    name = "agents.SQLiteSession"

    async def open(self, path: Path) -> None:
        from agents import SQLiteSession

        self.session = SQLiteSession("bench-session", str(path))

    async def turn(self, user: dict[str, Any], assistant: dict[str, Any]) -> list[Any]:
        history = await self.session.get_items()
        await self.session.add_items([user, assistant])
        return history

    async def close(self) -> None:
        self.session.close()


TURN_VARIANTS = (AgentsTurns, OwnstateSyncTurns, OwnstateAsyncTurns)
TURN_BASELINE = AgentsTurns.name


def run_turns(tmp: Path, pairs: list[Pair], r: int) -> dict[str, list[float]]:
    """One round of ``turns_round``, each implementation on a database file of its own."""

    async def open_variant(v: Any) -> None:
        db = tmp / f"turns-{len(pairs)}-{r}-{v.name.replace(' ', '_')}.db"
        await (v.open(db) if isinstance(v, AgentsTurns) else v.open(ownstate_url(db)))

    return asyncio.run(turns_round([cls() for cls in TURN_VARIANTS], open_variant, pairs, r,
                                   clock=clock))


def bench_turns(args: argparse.Namespace) -> None:
    window = args.window
    names = [cls.name for cls in TURN_VARIANTS]
    print_turns_header(args.rounds, window)
    rows = []
    with scratch_dir(args.dir) as tmp:
        run_turns(tmp, conversation(10, seed=7), 0)  # warm-up
        for turns in args.turns:
            pairs = conversation(turns)
            rounds = []
            for r in range(args.rounds):
                gc.collect()
                rounds.append(run_turns(tmp, pairs, r))
            rows += turns_rows(turns, names, TURN_BASELINE, window, rounds)
    print_turns_table(rows, window, "SQLiteSession")


# --------------------------------------------------------------------------------------
# (b) bulk append


RAW_SCHEMA = ("CREATE TABLE items (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
              "data TEXT NOT NULL, PRIMARY KEY (session_id, seq))")


def raw_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def append_raw(path: Path, batches: list[list[dict[str, Any]]]) -> float:
    conn = raw_connect(path)
    try:
        conn.execute(RAW_SCHEMA)
        seq = 0
        dumps = json.dumps
        start = clock()
        for batch in batches:
            conn.execute("BEGIN IMMEDIATE")
            rows = []
            for item in batch:
                seq += 1
                rows.append(("bench-session", seq, dumps(item)))
            conn.executemany("INSERT INTO items (session_id, seq, data) VALUES (?, ?, ?)", rows)
            conn.execute("COMMIT")
        return clock() - start
    finally:
        conn.close()


def append_ownstate_sync(path: Path, batches: list[list[dict[str, Any]]], *,
                         index_items: bool = False) -> float:
    with ownstate.connect(ownstate_url(path)) as client:
        session = client.session_stores.create("bench-sessions", index_items=index_items).add(
            actor_id="bench-user", session_id="bench-session")
        start = clock()
        for batch in batches:
            session.append_items(batch)
        return clock() - start


def append_ownstate_indexed(path: Path, batches: list[list[dict[str, Any]]]) -> float:
    return append_ownstate_sync(path, batches, index_items=True)


def append_ownstate_async(path: Path, batches: list[list[dict[str, Any]]]) -> float:
    async def run() -> float:
        async with await ownstate.connect_async(ownstate_url(path)) as client:
            store = await client.session_stores.create("bench-sessions", index_items=False)
            session = await store.add(actor_id="bench-user", session_id="bench-session")
            start = clock()
            for batch in batches:
                await session.append_items(batch)
            return clock() - start

    return asyncio.run(run())


# The target compares a store that does not index its items for search (the raw table has
# no search index either); the store that does (the default) is reported beside it.
APPEND_VARIANTS: dict[str, Callable[[Path, list[list[dict[str, Any]]]], float]] = {
    "raw sqlite3 executemany": append_raw,
    "ownstate sync": append_ownstate_sync,
    "ownstate async": append_ownstate_async,
    "ownstate sync, items indexed for search": append_ownstate_indexed,
}
APPEND_BASELINE = "raw sqlite3 executemany"


def bench_append(args: argparse.Namespace) -> None:
    items = flat_items(args.items)
    batches = [items[i:i + args.batch] for i in range(0, len(items), args.batch)]
    print(f"## append: {args.items} items in batches of {args.batch} ({args.rounds} rounds, "
          f"median)\n")
    seconds: dict[str, list[float]] = {n: [] for n in APPEND_VARIANTS}
    with scratch_dir(args.dir) as tmp:
        for name, fn in APPEND_VARIANTS.items():  # warm-up
            fn(tmp / f"warm-{name.replace(' ', '_')}.db", batches[:5])
        for r in range(args.rounds):
            for name in rotate(list(APPEND_VARIANTS), r):
                db = tmp / f"append-{r}-{name.replace(' ', '_')}.db"
                gc.collect()
                seconds[name].append(APPEND_VARIANTS[name](db, batches))
                remove_db(db)
    base = len(items) / statistics.median(seconds[APPEND_BASELINE])
    rows = []
    for name, samples in seconds.items():
        rate = len(items) / statistics.median(samples)
        rows.append([name, f"{statistics.median(samples) * 1000:.0f}", f"{rate:,.0f}",
                     "100% (baseline)" if name == APPEND_BASELINE else f"{rate / base:.0%}"])
    print_table(["implementation", "total ms", "items/s", "share of raw"], rows)


# --------------------------------------------------------------------------------------
# (c) reading a session in replay order


def bench_read(args: argparse.Namespace) -> None:
    items = flat_items(args.items)
    print(f"## read: a {args.items}-item session in replay order ({args.reps} repetitions, "
          f"interleaved, median)\n")
    with scratch_dir(args.dir) as tmp:
        raw = raw_connect(tmp / "raw.db")
        raw.execute(RAW_SCHEMA)
        raw.execute("BEGIN")
        raw.executemany("INSERT INTO items VALUES (?, ?, ?)",
                        [("bench-session", n, json.dumps(it)) for n, it in enumerate(items, 1)])
        raw.execute("COMMIT")

        client = ownstate.connect(ownstate_url(tmp / "ownstate.db"))
        session = client.session_stores.create("bench-sessions").add(
            actor_id="bench-user", session_id="bench-session")
        for i in range(0, len(items), 500):
            session.append_items(items[i:i + 500])

        uncached = ownstate.connect(ownstate_url(tmp / "ownstate.db") + "?replay_cache=0")
        plain = uncached.session_stores.get("bench-sessions").get("bench-session")
        loop = asyncio.new_event_loop()
        aclient = loop.run_until_complete(
            ownstate.connect_async(ownstate_url(tmp / "ownstate.db") + "?replay_cache=0"))
        asession = loop.run_until_complete(
            loop.run_until_complete(aclient.session_stores.get("bench-sessions"))
            .get("bench-session"))

        def read_raw() -> list[Any]:
            loads = json.loads
            return [loads(row[0]) for row in raw.execute(
                "SELECT data FROM items WHERE session_id = ? ORDER BY seq", ("bench-session",))]

        def read_sync() -> list[Any]:
            return list(session.list_items(order_by="create_time asc"))

        def read_uncached() -> list[Any]:
            return list(plain.list_items(order_by="create_time asc"))

        async def read_async_coro() -> list[Any]:
            return [item async for item in asession.list_items(order_by="create_time asc")]

        def read_async() -> list[Any]:
            return loop.run_until_complete(read_async_coro())

        variants: dict[str, Callable[[], list[Any]]] = {
            "raw SELECT + json.loads": read_raw,
            "ownstate sync (replay cache)": read_sync,
            "ownstate sync, replay_cache=0": read_uncached,
            "ownstate async, replay_cache=0": read_async,
        }
        try:
            expected = read_raw()
            if any([i.data for i in read()] != expected for read in (read_sync, read_uncached)) \
                    or len(read_async()) != len(items):
                raise SystemExit("ownstate read a different history")
            for fn in variants.values():  # warm-up
                for _ in range(3):
                    fn()
            samples: dict[str, list[float]] = {n: [] for n in variants}
            for r in range(args.reps):
                for name in rotate(list(variants), r):
                    fn = variants[name]
                    start = clock()
                    fn()
                    samples[name].append(clock() - start)
        finally:
            loop.run_until_complete(aclient.close())
            loop.close()
            client.close()
            uncached.close()
            raw.close()
    base = statistics.median(samples["raw SELECT + json.loads"])
    rows = []
    for name, values in samples.items():
        rows.append([name, f"{median_ms(values):.2f}",
                     "1.00 (baseline)" if values is samples["raw SELECT + json.loads"]
                     else f"{statistics.median(values) / base:.2f}"])
    print_table(["implementation", "median ms", "ratio vs raw"], rows)


# --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: time.perf_counter (the default, and what docs/benchmarks.md "
                             "reports); cpu: time.process_time, this process's CPU time on "
                             "all its threads, steadier on a busy machine but blind to I/O "
                             "waits")
    parser.add_argument("--dir", default=None,
                        help="parent directory for the scratch databases (default: the "
                             "system temp dir); every variant uses the same one")
    sub = parser.add_subparsers(dest="bench", required=True)

    turns = sub.add_parser("turns", help="(a) load history + append a turn, vs SQLiteSession")
    turns.add_argument("--turns", type=int, nargs="+", default=[200, 500])
    turns.add_argument("--rounds", type=int, default=3)
    turns.add_argument("--window", type=int, default=20,
                       help="how many first and last turns the medians cover")

    append = sub.add_parser("append", help="(b) bulk append, vs raw sqlite3 executemany")
    append.add_argument("--items", type=int, default=20_000)
    append.add_argument("--batch", type=int, default=100)
    append.add_argument("--rounds", type=int, default=5)

    read = sub.add_parser("read", help="(c) read a session in replay order, vs raw SELECT")
    read.add_argument("--items", type=int, default=1000)
    read.add_argument("--reps", type=int, default=100)

    sub.add_parser("all", help="turns, append and read, each with its defaults")

    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    print(f"{environment()}, clock {args.clock}\n$ {Path(sys.executable)} {' '.join(sys.argv)}\n")
    runs = {"turns": bench_turns, "append": bench_append, "read": bench_read}
    if args.bench in runs:
        runs[args.bench](args)
        return
    for name, run in runs.items():
        run(parser.parse_args([*(["--dir", args.dir] if args.dir else []), "--clock",
                               args.clock, name]))


if __name__ == "__main__":
    main()
