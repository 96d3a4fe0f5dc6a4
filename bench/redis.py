"""Benchmarks of ownstate's Redis backend against what an application would use instead.

Three workloads, each a subcommand; every run measures the competitors and ownstate in the
same process, against the same Redis, and prints medians and ratios as a Markdown table:

- ``turns``:  an agent conversation. Each turn loads the whole history in replay order,
  then appends one user and one assistant message (~400 bytes of varied text each, the
  conversation of ``_workload.py``). Competitor: the OpenAI Agents SDK's
  ``RedisSession`` (``get_items()`` then ``add_items([user, assistant])``). ownstate: the
  sync and the async client.
- ``append``: 20,000 items appended in batches of 100, against a raw redis-py pipeline
  (``RPUSH`` of the JSON of each item, one round trip per batch) and ``RedisSession``.
- ``read``:   reading a 1,000-item session in replay order, against a raw ``LRANGE`` with
  ``json.loads`` of each element and ``RedisSession.get_items()``.

Run by hand (not in CI); ``all`` runs the three with their defaults::

    /work/venv/bin/python bench/redis.py turns --turns 500
    /work/venv/bin/python bench/redis.py append
    /work/venv/bin/python bench/redis.py read

``--url`` (default ``$OWNSTATE_BENCH_REDIS_URL``, else ``redis://127.0.0.1:6379/0``)
picks the Redis; every run writes under a key prefix of its own and deletes it afterwards.
The machine is assumed noisy: variants run in rotating order, several rounds each, and
only medians are reported. ``turns`` and the ``RedisSession`` rows need the ``bench``
extra (``openai-agents``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named like the redis package: keep its directory off the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
# ... and put it back at the end, after site-packages, for the shared _workload module.
sys.path.append(str(_HERE))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from datetime import date  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402
import redis.asyncio as redis_async  # noqa: E402
from _workload import (  # noqa: E402
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

import ownstate  # noqa: E402

perf_counter = time.perf_counter


def default_url() -> str:
    return os.environ.get("OWNSTATE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def with_prefix(url: str, prefix: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


def drop_prefix(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url) as raw:
        keys = list(raw.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 1000):
            raw.delete(*keys[start:start + 1000])


def environment(url: str) -> str:
    with redis.Redis.from_url(url) as raw:
        info = raw.info("server")
        persistence = raw.info("persistence")
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(
        os, "getloadavg") else ""
    return (f"{date.today().isoformat()}, Python {platform.python_version()}, Redis "
            f"{info['redis_version']} (appendonly={persistence.get('aof_enabled')}), "
            f"redis-py {redis.__version__}, {os.cpu_count()} CPUs, {platform.machine()}{load}")


# --------------------------------------------------------------------------------------
# (a) conversation turns


class AgentsTurns:
    """The OpenAI Agents SDK's RedisSession: get_items(), then add_items()."""

    name = "agents.RedisSession"

    async def open(self, url: str, prefix: str) -> None:
        from agents.extensions.memory.redis_session import RedisSession

        self.session = RedisSession.from_url("bench-session", url=url,
                                             key_prefix=f"{prefix}agents")

    async def turn(self, user: dict[str, Any], assistant: dict[str, Any]) -> list[Any]:
        history = await self.session.get_items()
        await self.session.add_items([user, assistant])  # type: ignore[list-item]
        return history

    async def close(self) -> None:
        await self.session.close()


TURN_VARIANTS = (AgentsTurns, OwnstateSyncTurns, OwnstateAsyncTurns)
TURN_BASELINE = AgentsTurns.name


async def run_turns(url: str, pairs: list[Pair], r: int) -> dict[str, list[float]]:
    """One round of ``turns_round``, under a key prefix of its own (deleted afterwards)."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}-"

    async def open_variant(v: Any) -> None:
        if isinstance(v, AgentsTurns):
            await v.open(url, prefix)
        else:
            await v.open(with_prefix(url, f"{prefix}{v.tag}"))

    try:
        return await turns_round([cls() for cls in TURN_VARIANTS], open_variant, pairs, r)
    finally:
        drop_prefix(url, prefix)


def bench_turns(args: argparse.Namespace) -> None:
    window = args.window
    names = [cls.name for cls in TURN_VARIANTS]
    print_turns_header(args.rounds, window)
    asyncio.run(run_turns(args.url, conversation(10, seed=7), 0))  # warm-up
    rows = []
    for turns in args.turns:
        pairs = conversation(turns)
        rounds = []
        for r in range(args.rounds):
            gc.collect()
            rounds.append(asyncio.run(run_turns(args.url, pairs, r)))
        rows += turns_rows(turns, names, TURN_BASELINE, window, rounds)
    print_turns_table(rows, window, "RedisSession")


# --------------------------------------------------------------------------------------
# (b) bulk append

Batches = list[list[dict[str, Any]]]


async def append_raw(url: str, prefix: str, batches: Batches) -> float:
    client = redis_async.Redis.from_url(url)
    try:
        dumps = json.dumps
        start = perf_counter()
        for batch in batches:
            pipe = client.pipeline(transaction=False)
            pipe.rpush(f"{prefix}raw", *[dumps(item) for item in batch])
            await pipe.execute()
        return perf_counter() - start
    finally:
        await client.aclose()


async def append_agents(url: str, prefix: str, batches: Batches) -> float:
    from agents.extensions.memory.redis_session import RedisSession

    session = RedisSession.from_url("bench-session", url=url, key_prefix=f"{prefix}agents")
    try:
        start = perf_counter()
        for batch in batches:
            await session.add_items(batch)  # type: ignore[arg-type]
        return perf_counter() - start
    finally:
        await session.close()


async def append_ownstate_async(url: str, prefix: str, batches: Batches) -> float:
    async with await ownstate.connect_async(with_prefix(url, prefix)) as client:
        store = await client.session_stores.create("bench-sessions")
        session = await store.add(actor_id="bench-user", session_id="bench-session")
        start = perf_counter()
        for batch in batches:
            await session.append_items(batch)
        return perf_counter() - start


async def append_ownstate_sync(url: str, prefix: str, batches: Batches) -> float:
    with ownstate.connect(with_prefix(url, prefix)) as client:
        session = client.session_stores.create("bench-sessions").add(
            actor_id="bench-user", session_id="bench-session")
        start = perf_counter()
        for batch in batches:
            session.append_items(batch)
        return perf_counter() - start


APPEND_VARIANTS: dict[str, Callable[[str, str, Batches], Awaitable[float]]] = {
    "raw redis-py pipeline RPUSH": append_raw,
    "agents.RedisSession": append_agents,
    "ownstate sync": append_ownstate_sync,
    "ownstate async": append_ownstate_async,
}
APPEND_BASELINE = "raw redis-py pipeline RPUSH"


def bench_append(args: argparse.Namespace) -> None:
    items = flat_items(args.items)
    batches = [items[i:i + args.batch] for i in range(0, len(items), args.batch)]
    print(f"## append: {args.items} items in batches of {args.batch} ({args.rounds} rounds, "
          f"median)\n")
    seconds: dict[str, list[float]] = {n: [] for n in APPEND_VARIANTS}
    for fn in APPEND_VARIANTS.values():  # warm-up
        prefix = f"bench-{uuid.uuid4().hex[:8]}-"
        asyncio.run(fn(args.url, prefix, batches[:5]))
        drop_prefix(args.url, prefix)
    for r in range(args.rounds):
        for name in rotate(list(APPEND_VARIANTS), r):
            prefix = f"bench-{uuid.uuid4().hex[:8]}-"
            gc.collect()
            try:
                seconds[name].append(asyncio.run(APPEND_VARIANTS[name](args.url, prefix,
                                                                       batches)))
            finally:
                drop_prefix(args.url, prefix)
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
    prefix = f"bench-{uuid.uuid4().hex[:8]}-"

    async def run() -> dict[str, list[float]]:
        from agents.extensions.memory.redis_session import RedisSession

        raw = redis_async.Redis.from_url(args.url)
        await raw.rpush(f"{prefix}raw", *[json.dumps(item) for item in items])
        agents = RedisSession.from_url("bench-session", url=args.url,
                                       key_prefix=f"{prefix}agents")
        for i in range(0, len(items), 500):
            await agents.add_items(items[i:i + 500])  # type: ignore[arg-type]
        aclient = await ownstate.connect_async(with_prefix(args.url, prefix))
        asession = await (await aclient.session_stores.create("bench-sessions")).add(
            actor_id="bench-user", session_id="bench-session")
        for i in range(0, len(items), 500):
            await asession.append_items(items[i:i + 500])
        sclient = ownstate.connect(with_prefix(args.url, prefix))
        ssession = sclient.session_stores.get("bench-sessions").get("bench-session")

        async def read_raw() -> list[Any]:
            loads = json.loads
            return [loads(m) for m in await raw.lrange(f"{prefix}raw", 0, -1)]

        async def read_agents() -> list[Any]:
            return await agents.get_items()

        async def read_sync() -> list[Any]:
            return [i.data for i in ssession.list_items(order_by="create_time asc")]

        async def read_async() -> list[Any]:
            return [i.data async for i in asession.list_items(order_by="create_time asc")]

        readers: dict[str, Callable[[], Awaitable[list[Any]]]] = {
            "raw LRANGE + json.loads": read_raw,
            "agents.RedisSession": read_agents,
            "ownstate sync": read_sync,
            "ownstate async": read_async,
        }
        samples: dict[str, list[float]] = {n: [] for n in readers}
        try:
            for name, reader in readers.items():
                if await reader() != items:
                    raise SystemExit(f"{name} read a different history")
            for r in range(args.reps):
                for name in rotate(list(readers), r):
                    start = perf_counter()
                    await readers[name]()
                    samples[name].append(perf_counter() - start)
        finally:
            sclient.close()
            await aclient.close()
            await agents.close()
            await raw.aclose()
        return samples

    try:
        samples = asyncio.run(run())
    finally:
        drop_prefix(args.url, prefix)
    base = statistics.median(samples["raw LRANGE + json.loads"])
    rows = [[name, f"{median_ms(s):.2f}",
             "1.00 (baseline)" if name == "raw LRANGE + json.loads"
             else f"{statistics.median(s) / base:.2f}",
             f"{len(items) / statistics.median(s):,.0f}"]
            for name, s in samples.items()]
    print_table(["implementation", "ms", "ratio to raw", "items/s"], rows)


# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=default_url(),
                        help="the Redis to measure on (default: %(default)s)")
    commands = parser.add_subparsers(dest="command", required=True)
    turns = commands.add_parser("turns", help="conversation turns vs RedisSession")
    turns.add_argument("--turns", type=int, nargs="+", default=[500])
    turns.add_argument("--rounds", type=int, default=3)
    turns.add_argument("--window", type=int, default=50)
    append = commands.add_parser("append", help="bulk append vs raw RPUSH")
    append.add_argument("--items", type=int, default=20_000)
    append.add_argument("--batch", type=int, default=100)
    append.add_argument("--rounds", type=int, default=5)
    read = commands.add_parser("read", help="replay a session vs raw LRANGE")
    read.add_argument("--items", type=int, default=1000)
    read.add_argument("--reps", type=int, default=60)
    commands.add_parser("all", help="the three, with their defaults")
    args = parser.parse_args(argv)
    if args.command == "all":
        for command in ("turns", "append", "read"):
            main(["--url", args.url, command])
        return
    print(f"_{environment(args.url)}_\n")
    {"turns": bench_turns, "append": bench_append, "read": bench_read}[args.command](args)


if __name__ == "__main__":
    main()
