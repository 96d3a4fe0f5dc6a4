"""The HTTP service against the library on the same database.

Two workloads, each a subcommand; the server runs as its own process (``ownstate serve``,
as in production), on the same database the library opens directly:

- ``turns``: the conversation-turn workload of the other session benchmarks (load the whole
  history in replay order, append one user and one assistant message), through the remote
  client (``ownstate.connect("http://...", token=...)``) and through the library directly,
  in lockstep; medians of the first and last turns and the ratio HTTP / direct.
- ``load``: 64 concurrent clients (asyncio tasks in one process, each its own
  ``connect_async`` client and session) doing turns for a fixed time: each turn appends a
  user and an assistant message and replays the session's newest 20 items. Throughput,
  latency percentiles and the number of errors (there should be none).

Run by hand (not in CI)::

    /work/venv/bin/python bench/http_service.py turns --turns 200 --db postgres
    /work/venv/bin/python bench/http_service.py turns --turns 200 --db sqlite
    /work/venv/bin/python bench/http_service.py load --clients 64 --seconds 20 --db postgres

PostgreSQL is ``OWNSTATE_BENCH_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), in a fresh schema dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import httpx

import ownstate

sys.path.append(str(Path(__file__).resolve().parent))  # after site-packages: see _workload
from _workload import (
    OwnstateAsyncTurns,
    OwnstateSyncTurns,
    conversation,
    print_table,
    print_turns_header,
    print_turns_table,
    turns_round,
    turns_rows,
)

POSTGRES = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL",
                          "postgresql://postgres@127.0.0.1:5432/test")


def environment() -> str:
    return (f"{date.today()}, Python {platform.python_version()}, {os.cpu_count()} cores, "
            f"ownstate {ownstate.__version__}")


@contextmanager
def database(kind: str) -> Iterator[str]:
    """A fresh database URL of ``kind`` (``postgres`` or ``sqlite``), removed afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="ownstate-http-bench-") as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    import psycopg

    schema = f"bench_http_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in POSTGRES else "?"
    try:
        yield f"{POSTGRES}{sep}schema={schema}"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(url: str) -> Iterator[tuple[str, str]]:
    """``ownstate serve`` on ``url`` in its own process: (base URL, an admin token)."""
    # The key acts for the default tenant, the one the library opens without being told.
    with ownstate.connect(url) as direct:  # migrates; then mint a key
        _, token = direct.api_keys.create("bench", admin=True)
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ownstate", "--url", url, "serve", "--port", str(port),
         "--no-bootstrap", "--log-level", "warning"],
        stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/api/2.0/agents/whoami",
                             headers={"authorization": f"Bearer {token}"}).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.1)
        yield base, token
    finally:
        process.terminate()
        process.wait(timeout=20)


# turns -----------------------------------------------------------------------------------


class DirectTurns(OwnstateSyncTurns):
    name = "library, direct (sync)"
    remote = False


class HttpTurns(OwnstateSyncTurns):
    name = "remote client, HTTP (sync)"
    remote = True


class DirectAsyncTurns(OwnstateAsyncTurns):
    name = "library, direct (async)"
    remote = False


class HttpAsyncTurns(OwnstateAsyncTurns):
    name = "remote client, HTTP (async)"
    remote = True


VARIANTS = [DirectTurns, HttpTurns, DirectAsyncTurns, HttpAsyncTurns]


def bench_turns(args: argparse.Namespace) -> None:
    window = 20
    print(f"# HTTP service vs the library ({environment()}; {args.db})\n")
    print_turns_header(args.rounds, window)
    rows = []
    names = [v.name for v in VARIANTS]
    for turns in args.turns:
        pairs = conversation(turns)
        rounds = []
        for r in range(args.rounds):
            with database(args.db) as url, server(url) as (base, token):
                remote = base.replace("http://", f"http://:{token}@")

                async def open_variant(v: Any, r: int = r, remote: str = remote,
                                       url: str = url) -> None:
                    where = "http" if v.remote else "lib"
                    await v.open(remote if v.remote else url, session_id=f"{v.tag}-{where}-{r}")

                rounds.append(asyncio.run(turns_round([v() for v in VARIANTS],
                                                      open_variant, pairs, r)))
        rows += turns_rows(turns, names, DirectTurns.name, window, rounds)
    print_turns_table(rows, window, "the library (sync)")
    print("HTTP / library, same client kind: " + "; ".join(
        f"T={row_sync[0]} sync {ratio(row_sync, row_http)}"
        for row_sync, row_http in zip(rows[0::4], rows[1::4], strict=True)) + "; " + "; ".join(
        f"T={row_a[0]} async {ratio(row_a, row_h)}"
        for row_a, row_h in zip(rows[2::4], rows[3::4], strict=True)))


def ratio(direct_row: list[str], http_row: list[str]) -> str:
    return f"{float(http_row[3]) / float(direct_row[3]):.2f}"


# load ------------------------------------------------------------------------------------


async def _load(base: str, token: str, clients: int, seconds: float
                ) -> tuple[list[float], int, list[str], float]:
    pairs = conversation(200, seed=7)
    latencies: list[float] = []
    errors: list[str] = []
    turns_done = 0
    setup = await ownstate.connect_async(base, token=token)
    try:
        store = await setup.session_stores.create("load")
    finally:
        await setup.close()
    start_gate = asyncio.Event()

    async def one(n: int) -> None:
        nonlocal turns_done
        client = await ownstate.connect_async(base, token=token)
        try:
            session = await (await client.session_stores.get(store.name)).add(
                actor_id=f"user-{n}", session_id=f"s-{n}")
            await start_gate.wait()
            stop = time.perf_counter() + seconds
            i = 0
            while time.perf_counter() < stop:
                user, assistant = pairs[i % len(pairs)]
                i += 1
                t0 = time.perf_counter()
                try:
                    await session.append_items([user, assistant])
                    page = await session.list_items_page(page_size=20)
                    assert page.items
                except Exception as exc:  # counted, not raised: the run reports them
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                latencies.append(time.perf_counter() - t0)
                turns_done += 1
        finally:
            await client.close()

    tasks = [asyncio.create_task(one(n)) for n in range(clients)]
    await asyncio.sleep(0.5)
    began = time.perf_counter()
    start_gate.set()
    await asyncio.gather(*tasks)
    return latencies, turns_done, errors, time.perf_counter() - began


def bench_load(args: argparse.Namespace) -> None:
    print(f"# HTTP service under load ({environment()}; {args.db})\n")
    with database(args.db) as url, server(url) as (base, token):
        latencies, turns, errors, elapsed = asyncio.run(
            _load(base, token, args.clients, args.seconds))
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    print(f"## {args.clients} concurrent clients for {args.seconds:.0f} s: each turn appends "
          "two items and reads the newest 20 (two requests)\n")
    print_table(["clients", "turns", "turns/s", "requests/s", "p50 ms", "p90 ms", "p99 ms",
                 "errors"],
                [[str(args.clients), str(turns), f"{turns / elapsed:.0f}",
                  f"{2 * turns / elapsed:.0f}", f"{q[49] * 1000:.1f}", f"{q[89] * 1000:.1f}",
                  f"{q[98] * 1000:.1f}", str(len(errors))]])
    for line in sorted(set(errors))[:10]:
        print(f"- error: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    turns = sub.add_parser("turns")
    turns.add_argument("--turns", type=int, nargs="+", default=[200])
    turns.add_argument("--rounds", type=int, default=3)
    turns.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    turns.set_defaults(run=bench_turns)
    load = sub.add_parser("load")
    load.add_argument("--clients", type=int, default=64)
    load.add_argument("--seconds", type=float, default=20.0)
    load.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    load.set_defaults(run=bench_load)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
