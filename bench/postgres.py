"""Benchmarks of ownstate's PostgreSQL backend against what an application would use instead.

Four workloads, each a subcommand; every run measures the competitors and ownstate in the
same process, on the same server, each in a fresh schema (dropped afterwards), and prints
medians and ratios as a Markdown table:

- ``append``: 20,000 items appended in batches of 100 with ``append_items``, against raw
  ``executemany`` into a plain (session_id, seq, data) table, one transaction per batch,
  with psycopg 3 (async, the driver ownstate uses) and with asyncpg; ownstate into a
  store that indexes its items for search (the default) and into one that does not.
- ``read``:   reading a 1,000-item session in replay order, against a raw
  ``SELECT data ... ORDER BY seq`` with psycopg and ``json.loads`` of each row.
- ``turns``:  an agent conversation. Each turn loads the whole history in replay order,
  then appends one user and one assistant message (~400 bytes of varied text each).
  Competitor: the OpenAI Agents SDK's ``SQLAlchemySession`` (SQLAlchemy with asyncpg).
- ``concurrent``: 32 sessions, each appended to by its own task (one turn, two items, per
  append) through one async client and its pool: throughput and latency percentiles.

Run by hand (not in CI); ``all`` runs the four with their defaults::

    /work/venv/bin/python bench/postgres.py append
    /work/venv/bin/python bench/postgres.py read
    /work/venv/bin/python bench/postgres.py turns --turns 500
    /work/venv/bin/python bench/postgres.py concurrent

The server is ``OWNSTATE_BENCH_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). ``append`` needs ``asyncpg``; ``turns``
needs ``openai-agents``, ``sqlalchemy[asyncio]`` and ``asyncpg``. The machine is assumed
noisy: variants run in rotating order, several rounds each, and only medians are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import date
from pathlib import Path
from typing import Any

import psycopg

import ownstate

sys.path.append(str(Path(__file__).resolve().parent))  # after site-packages: see _workload
from _workload import (
    OwnstateAsyncTurns,
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

perf_counter = time.perf_counter
POSTGRES_URL = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")


def environment() -> str:
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        server = row[0] if row else "?"
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    return (f"{date.today().isoformat()}, Python {platform.python_version()}, PostgreSQL "
            f"{server} on loopback, psycopg {psycopg.__version__}, {os.cpu_count()} CPUs, "
            f"{platform.machine()}, {load}")


def url_for(schema: str, **options: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **options}.items())
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}{query}"


@asynccontextmanager
async def fresh_schema(prefix: str) -> AsyncIterator[str]:
    """A new, empty schema, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
    try:
        await conn.execute(f"CREATE SCHEMA {name}")
        yield name
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await conn.close()


RAW_TABLE = ("CREATE TABLE {schema}.items (session_id text NOT NULL, seq bigint NOT NULL, "
             "data text NOT NULL, PRIMARY KEY (session_id, seq))")
RAW_INSERT = "INSERT INTO {schema}.items (session_id, seq, data) VALUES (%s, %s, %s)"


# --------------------------------------------------------------------------------------
# (a) bulk append


async def append_psycopg(batches: list[list[dict[str, Any]]]) -> float:
    async with fresh_schema("bench_raw") as schema:
        conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
        try:
            await conn.execute(RAW_TABLE.format(schema=schema))
            insert = RAW_INSERT.format(schema=schema)
            seq, dumps = 0, json.dumps
            start = perf_counter()
            for batch in batches:
                rows = []
                for item in batch:
                    seq += 1
                    rows.append(("bench-session", seq, dumps(item)))
                async with conn.transaction(), conn.cursor() as cur:
                    await cur.executemany(insert, rows)
            return perf_counter() - start
        finally:
            await conn.close()


async def append_asyncpg(batches: list[list[dict[str, Any]]]) -> float:
    import asyncpg

    async with fresh_schema("bench_apg") as schema:
        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            await conn.execute(RAW_TABLE.format(schema=schema))
            insert = f"INSERT INTO {schema}.items (session_id, seq, data) VALUES ($1, $2, $3)"
            seq, dumps = 0, json.dumps
            start = perf_counter()
            for batch in batches:
                rows = []
                for item in batch:
                    seq += 1
                    rows.append(("bench-session", seq, dumps(item)))
                async with conn.transaction():
                    await conn.executemany(insert, rows)
            return perf_counter() - start
        finally:
            await conn.close()


async def append_ownstate(batches: list[list[dict[str, Any]]], *,
                          index_items: bool = True) -> float:
    async with fresh_schema("bench_own") as schema, \
            await ownstate.connect_async(url_for(schema)) as client:
        store = await client.session_stores.create("bench-sessions", index_items=index_items)
        session = await store.add(actor_id="bench-user", session_id="bench-session")
        start = perf_counter()
        for batch in batches:
            await session.append_items(batch)
        return perf_counter() - start


async def append_ownstate_unindexed(batches: list[list[dict[str, Any]]]) -> float:
    return await append_ownstate(batches, index_items=False)


APPEND_VARIANTS: dict[str, Callable[[list[list[dict[str, Any]]]], Awaitable[float]]] = {
    "raw psycopg executemany": append_psycopg,
    "raw asyncpg executemany": append_asyncpg,
    "ownstate async": append_ownstate,
    "ownstate async, index_items=False": append_ownstate_unindexed,
}
APPEND_BASELINE = "raw psycopg executemany"


def bench_append(args: argparse.Namespace) -> None:
    items = flat_items(args.items)
    batches = [items[i:i + args.batch] for i in range(0, len(items), args.batch)]
    print(f"## append: {args.items} items in batches of {args.batch}, one transaction per "
          f"batch ({args.rounds} rounds, median)\n")
    seconds: dict[str, list[float]] = {n: [] for n in APPEND_VARIANTS}

    async def run() -> None:
        for fn in APPEND_VARIANTS.values():  # warm-up
            await fn(batches[:5])
        for r in range(args.rounds):
            for name in rotate(list(APPEND_VARIANTS), r):
                gc.collect()
                seconds[name].append(await APPEND_VARIANTS[name](batches))

    asyncio.run(run())
    base = len(items) / statistics.median(seconds[APPEND_BASELINE])
    rows = []
    for name, samples in seconds.items():
        rate = len(items) / statistics.median(samples)
        rows.append([name, f"{statistics.median(samples) * 1000:.0f}", f"{rate:,.0f}",
                     "100% (baseline)" if name == APPEND_BASELINE else f"{rate / base:.0%}"])
    print_table(["implementation", "total ms", "items/s", "share of raw psycopg"], rows)


# --------------------------------------------------------------------------------------
# (b) reading a session in replay order


def bench_read(args: argparse.Namespace) -> None:
    items = flat_items(args.items)
    print(f"## read: a {args.items}-item session in replay order ({args.reps} repetitions, "
          f"interleaved, median)\n")

    async def run() -> dict[str, list[float]]:
        async with fresh_schema("bench_raw") as schema, \
                fresh_schema("bench_own") as own_schema:
            raw = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
            await raw.execute(RAW_TABLE.format(schema=schema))
            async with raw.cursor() as cur:
                await cur.executemany(RAW_INSERT.format(schema=schema), [
                    ("bench-session", n, json.dumps(it)) for n, it in enumerate(items, 1)])
            select = f"SELECT data FROM {schema}.items WHERE session_id = %s ORDER BY seq"
            client = await ownstate.connect_async(url_for(own_schema))
            store = await client.session_stores.create("bench-sessions")
            session = await store.add(actor_id="bench-user", session_id="bench-session")
            for i in range(0, len(items), 500):
                await session.append_items(items[i:i + 500])
            uncached = await ownstate.connect_async(url_for(own_schema, replay_cache=0))
            plain = await (await uncached.session_stores.get("bench-sessions")).get(
                "bench-session")

            async def read_raw() -> list[Any]:
                loads = json.loads
                cur = await raw.execute(select, ("bench-session",))
                return [loads(row[0]) for row in await cur.fetchall()]

            async def read_ownstate() -> list[Any]:
                return [item async for item in session.list_items(order_by="create_time asc")]

            async def read_uncached() -> list[Any]:
                return [item async for item in plain.list_items(order_by="create_time asc")]

            variants: dict[str, Callable[[], Awaitable[list[Any]]]] = {
                "raw SELECT + json.loads (psycopg)": read_raw,
                "ownstate async (replay cache)": read_ownstate,
                "ownstate async, replay_cache=0": read_uncached,
            }
            try:
                for read in (read_ownstate, read_uncached):
                    if [i.data for i in await read()] != await read_raw():
                        raise SystemExit("ownstate read a different history")
                for fn in variants.values():  # warm-up (and prepared statements)
                    for _ in range(6):
                        await fn()
                samples: dict[str, list[float]] = {n: [] for n in variants}
                for r in range(args.reps):
                    for name in rotate(list(variants), r):
                        start = perf_counter()
                        await variants[name]()
                        samples[name].append(perf_counter() - start)
                return samples
            finally:
                await client.close()
                await uncached.close()
                await raw.close()

    samples = asyncio.run(run())
    names = list(samples)
    base = statistics.median(samples[names[0]])
    rows = [[name, f"{median_ms(values):.2f}",
             "1.00 (baseline)" if name == names[0] else f"{statistics.median(values) / base:.2f}"]
            for name, values in samples.items()]
    print_table(["implementation", "median ms", "ratio vs raw"], rows)


# --------------------------------------------------------------------------------------
# (c) conversation turns


class AgentsTurns:
    """The OpenAI Agents SDK's SQLAlchemySession (asyncpg): get_items(), then add_items()."""

    name = "agents.SQLAlchemySession"

    async def open(self, schema: str, session_id: str) -> None:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(
            POSTGRES_URL.replace("postgresql://", "postgresql+asyncpg://", 1),
            connect_args={"server_settings": {"search_path": schema}})
        self.session = SQLAlchemySession(session_id, engine=self.engine, create_tables=True)

    async def turn(self, user: dict[str, Any], assistant: dict[str, Any]) -> list[Any]:
        history = await self.session.get_items()
        await self.session.add_items([user, assistant])  # type: ignore[list-item]
        return history

    async def close(self) -> None:
        await self.engine.dispose()


TURN_VARIANTS = (AgentsTurns, OwnstateAsyncTurns)
TURN_BASELINE = AgentsTurns.name


async def run_turns(schema: str, pairs: list[Pair], r: int) -> dict[str, list[float]]:
    """One round of ``turns_round``, on a session of its own in ``schema``."""
    session_id = f"turns-{len(pairs)}-{r}"

    async def open_variant(v: Any) -> None:
        if isinstance(v, AgentsTurns):
            await v.open(schema, session_id)
        else:
            await v.open(url_for(schema), session_id)

    return await turns_round([cls() for cls in TURN_VARIANTS], open_variant, pairs, r)


def bench_turns(args: argparse.Namespace) -> None:
    window = args.window
    names = [cls.name for cls in TURN_VARIANTS]
    print_turns_header(args.rounds, window)
    rows = []

    async def run() -> None:
        async with fresh_schema("bench_turns") as schema:
            await run_turns(schema, conversation(10, seed=7), -1)  # warm-up
            for turns in args.turns:
                pairs = conversation(turns)
                rounds = []
                for r in range(args.rounds):
                    gc.collect()
                    rounds.append(await run_turns(schema, pairs, r))
                rows.extend(turns_rows(turns, names, TURN_BASELINE, window, rounds))

    asyncio.run(run())
    print_turns_table(rows, window, "SQLAlchemySession")


# --------------------------------------------------------------------------------------
# (d) concurrent sessions through one pool


def bench_concurrent(args: argparse.Namespace) -> None:
    pairs = conversation(args.appends)
    print(f"## concurrent: {args.sessions} sessions, each appended to by its own task "
          f"({args.appends} appends of 2 items each) through one client with a pool of "
          f"{args.pool} connections ({args.rounds} rounds, median)\n")
    rows = []

    async def run() -> None:
        async with fresh_schema("bench_conc") as schema:
            client = await ownstate.connect_async(url_for(schema, pool_min=args.pool,
                                                          pool_max=args.pool))
            try:
                store = await client.session_stores.create("bench-sessions")
                for r in range(-1, args.rounds):  # round -1 warms up
                    sessions = [await store.add(actor_id="bench-user") for _ in
                                range(args.sessions)]
                    latencies: list[float] = []

                    async def writer(session: Any, latencies: list[float] = latencies) -> None:
                        for user, assistant in pairs:
                            start = perf_counter()
                            await session.append_items([user, assistant])
                            latencies.append(perf_counter() - start)

                    gc.collect()
                    start = perf_counter()
                    await asyncio.gather(*(writer(s) for s in sessions))
                    elapsed = perf_counter() - start
                    if r < 0:
                        continue
                    latencies.sort()
                    appends = len(latencies)
                    rows.append([str(r + 1), f"{appends / elapsed:,.0f}",
                                 f"{2 * appends / elapsed:,.0f}",
                                 f"{latencies[len(latencies) // 2] * 1000:.2f}",
                                 f"{latencies[int(len(latencies) * 0.99)] * 1000:.2f}"])
            finally:
                await client.close()

    asyncio.run(run())
    print_table(["round", "appends/s", "items/s", "p50 ms", "p99 ms"], rows)


# --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="bench", required=True)

    append = sub.add_parser("append", help="(a) bulk append, vs raw executemany")
    append.add_argument("--items", type=int, default=20_000)
    append.add_argument("--batch", type=int, default=100)
    append.add_argument("--rounds", type=int, default=3)

    read = sub.add_parser("read", help="(b) read a session in replay order, vs raw SELECT")
    read.add_argument("--items", type=int, default=1000)
    read.add_argument("--reps", type=int, default=100)

    turns = sub.add_parser("turns", help="(c) load history + append a turn, vs "
                                         "SQLAlchemySession")
    turns.add_argument("--turns", type=int, nargs="+", default=[500])
    turns.add_argument("--rounds", type=int, default=3)
    turns.add_argument("--window", type=int, default=20,
                       help="how many first and last turns the medians cover")

    concurrent = sub.add_parser("concurrent", help="(d) 32 sessions appending at once")
    concurrent.add_argument("--sessions", type=int, default=32)
    concurrent.add_argument("--appends", type=int, default=50)
    concurrent.add_argument("--pool", type=int, default=16)
    concurrent.add_argument("--rounds", type=int, default=3)

    sub.add_parser("all", help="append, read, turns and concurrent, each with its defaults")

    args = parser.parse_args(argv)
    print(f"{environment()}\n$ {Path(sys.executable)} {' '.join(sys.argv)}\n")
    runs = {"append": bench_append, "read": bench_read, "turns": bench_turns,
            "concurrent": bench_concurrent}
    if args.bench in runs:
        runs[args.bench](args)
        return
    for name, run in runs.items():
        run(parser.parse_args([name]))


if __name__ == "__main__":
    main()
