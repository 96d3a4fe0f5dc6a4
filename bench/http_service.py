"""The HTTP service against the library on the same database.

Two workloads, each a subcommand; the server runs as its own process (``ownstate serve``,
as in production), on the same database the library opens directly:

- ``turns``: the conversation-turn workload of the other session benchmarks (load the whole
  history in replay order, append one user and one assistant message), through the remote
  client (``ownstate.connect("http://...", token=...)``) and through the library directly,
  in lockstep; medians of the first and last turns and the ratio HTTP / direct.
- ``requests``: one request at a time through the remote sync client, 1,000 of each kind
  (a one-store page, an append of two items, a replay of a 400-item session): the median
  wall time, and the server's and the client's CPU per request.
- ``load``: 64 concurrent clients (asyncio tasks in one process, each its own
  ``connect_async`` client and session) doing turns for a fixed time: each turn appends a
  user and an assistant message and replays the session's newest 20 items. Throughput,
  latency percentiles and the number of errors (there should be none).

Run by hand (not in CI)::

    /work/venv/bin/python bench/http_service.py turns --turns 200 --db postgres
    /work/venv/bin/python bench/http_service.py turns --turns 200 --db sqlite
    /work/venv/bin/python bench/http_service.py requests --db sqlite
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
    cpu_seconds,
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


def _start(url: str, token: str, *, migrate: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    """One ``ownstate serve`` process on a free port, answering: (process, base URL)."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ownstate", "--url", url, "serve", "--port", str(port),
         "--no-bootstrap", "--log-level", "warning", *([] if migrate else ["--no-migrate"])],
        stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/api/2.0/agents/whoami",
                         headers={"authorization": f"Bearer {token}"}).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.terminate()
            raise SystemExit("the server did not start")
        time.sleep(0.1)


@contextmanager
def servers(url: str, count: int = 1) -> Iterator[tuple[list[subprocess.Popen[bytes]],
                                                         list[str], str]]:
    """``count`` ``ownstate serve`` processes on ``url``, each on its own port (the first
    migrates, the others only verify, as replicas do): (processes, base URLs, an admin
    token)."""
    # The key acts for the default tenant, the one the library opens without being told.
    with ownstate.connect(url) as direct:  # migrates; then mint a key
        _, token = direct.api_keys.create("bench", admin=True)
    processes: list[subprocess.Popen[bytes]] = []
    bases: list[str] = []
    try:
        for n in range(count):
            process, base = _start(url, token, migrate=n == 0)
            processes.append(process)
            bases.append(base)
        yield processes, bases, token
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)


@contextmanager
def server(url: str) -> Iterator[tuple[str, str]]:
    """``ownstate serve`` on ``url`` in its own process: (base URL, an admin token)."""
    with servers(url) as (_, bases, token):
        yield bases[0], token


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


# requests --------------------------------------------------------------------------------


def bench_requests(args: argparse.Namespace) -> None:
    print(f"# HTTP requests one at a time ({environment()}; {args.db})\n")
    pairs = conversation(200)
    with database(args.db) as url, servers(url) as (processes, bases, token):
        pid = processes[0].pid
        client = ownstate.connect(bases[0], token=token)
        try:
            store = client.session_stores.create("requests")
            history = store.add(actor_id="bench", session_id="history")
            for user, assistant in pairs:  # 400 items, in the replay caches of both sides
                list(history.list_items(order_by="create_time asc"))
                history.append_items([user, assistant])
            appended = store.add(actor_id="bench", session_id="appended")
            kinds = {
                "one-store page": lambda: client.session_stores.list_page(page_size=1),
                "append of two items": lambda: appended.append_items(list(pairs[0])),
                "replay of 400 items": lambda: list(history.list_items(
                    order_by="create_time asc")),
            }
            rows = []
            for name, call in kinds.items():
                for _ in range(50):
                    call()
                walls = []
                server0, client0 = cpu_seconds([pid]), time.process_time()
                for _ in range(args.calls):
                    t0 = time.perf_counter()
                    call()
                    walls.append(time.perf_counter() - t0)
                server_cpu = (cpu_seconds([pid]) - server0) / args.calls
                client_cpu = (time.process_time() - client0) / args.calls
                rows.append([name, f"{statistics.median(walls) * 1000:.3f}",
                             f"{server_cpu * 1000:.3f}", f"{client_cpu * 1000:.3f}"])
        finally:
            client.close()
    print_table(["request", "wall ms (median)", "server CPU ms", "client CPU ms"], rows)
    print(f"load average {os.getloadavg()[0]:.1f}")


# load ------------------------------------------------------------------------------------


async def _load(bases: list[str], token: str, store: str, first: int, clients: int,
                seconds: float, ready: Any, start: Any) -> dict[str, Any]:
    """Clients ``first`` to ``first + clients - 1``, client ``n`` on server ``n % len(bases)``:
    each makes its client and session, puts one token on ``ready``, and once every client
    of every process is ready (``start``, a shared value, holds the wall-clock start time)
    does turns from that time for ``seconds``."""
    pairs = conversation(200, seed=7)
    latencies: list[float] = []
    errors: list[str] = []
    turns_done = 0
    late = 0

    async def one(n: int) -> None:
        nonlocal turns_done, late
        client = await ownstate.connect_async(bases[n % len(bases)], token=token)
        try:
            session = await (await client.session_stores.get(store)).add(
                actor_id=f"user-{n}", session_id=f"s-{n}")
            ready.put(n)
            start_at = await started
            late += time.time() > start_at
            await asyncio.sleep(max(0.0, start_at - time.time()))
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

    async def wait_start() -> float:
        while not start.value:
            await asyncio.sleep(0.05)
        return float(start.value)

    started = asyncio.ensure_future(wait_start())
    tasks = [asyncio.create_task(one(n)) for n in range(first, first + clients)]
    start_at = await started
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0 = time.process_time()
    await asyncio.gather(*tasks)
    return {"latencies": latencies, "turns": turns_done, "errors": errors,
            "cpu": time.process_time() - cpu0, "late": late}


def _load_worker(bases: list[str], token: str, store: str, first: int, clients: int,
                 seconds: float, ready: Any, start: Any) -> dict[str, Any]:
    """One load-generator process (see ``_load``)."""
    return asyncio.run(_load(bases, token, store, first, clients, seconds, ready, start))


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK"), sum(values) / os.sysconf(
        "SC_CLK_TCK")


def _database_pids(kind: str) -> list[int]:
    """The PostgreSQL backends serving the benchmark's servers (by application name)."""
    if kind != "postgres":
        return []
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        return [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (_APP_NAME,))]


_APP_NAME = "ownstate-bench-http"


def bench_load(args: argparse.Namespace) -> None:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    print(f"# HTTP service under load ({environment()}; {args.db})\n")
    procs = max(1, min(args.client_processes, args.clients))
    with database(args.db) as url:
        if args.db == "postgres":
            url += f"&pool_max={args.pool_max}&application_name={_APP_NAME}"
        context = get_context("spawn")
        with servers(url, args.servers) as (processes, bases, token), ProcessPoolExecutor(
                procs, mp_context=context) as pool, context.Manager() as manager:
            setup = ownstate.connect(bases[0], token=token)
            try:
                store = setup.session_stores.create("load").name
            finally:
                setup.close()
            # every client is made and has its session before the clock starts
            ready, start = manager.Queue(), manager.Value("d", 0.0)
            shares = [args.clients // procs + (1 if p < args.clients % procs else 0)
                      for p in range(procs)]
            futures = [pool.submit(_load_worker, bases, token, store, sum(shares[:p]),
                                   shares[p], args.seconds, ready, start)
                       for p in range(procs)]
            for _ in range(args.clients):
                ready.get(timeout=600)
            start_at = time.time() + 1
            start.value = start_at
            time.sleep(max(0.0, start_at - time.time()))
            server_pids = [p.pid for p in processes]
            db_pids = _database_pids(args.db)
            s0, d0, (b0, t0) = cpu_seconds(server_pids), cpu_seconds(db_pids), _machine_busy()
            load0 = os.getloadavg()[0]
            time.sleep(args.seconds)
            s1, d1, (b1, t1) = cpu_seconds(server_pids), cpu_seconds(db_pids), _machine_busy()
            load1 = os.getloadavg()[0]
            results = [f.result() for f in futures]
    latencies = [x for r in results for x in r["latencies"]]
    errors = [e for r in results for e in r["errors"]]
    turns = sum(r["turns"] for r in results)
    client_cpu = sum(r["cpu"] for r in results)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    elapsed = args.seconds
    print(f"## {args.clients} concurrent clients in {procs} process(es), {args.servers} "
          f"server process(es), for {args.seconds:.0f} s: each turn appends two items and "
          "reads the newest 20 (two requests)\n")
    print_table(["servers", "clients", "turns", "turns/s", "requests/s", "p50 ms", "p90 ms",
                 "p99 ms", "errors"],
                [[str(args.servers), str(args.clients), str(turns), f"{turns / elapsed:.0f}",
                  f"{2 * turns / elapsed:.0f}", f"{q[49] * 1000:.1f}", f"{q[89] * 1000:.1f}",
                  f"{q[98] * 1000:.1f}", str(len(errors))]])
    cores = (t1 - t0) / elapsed
    print(f"CPU over the {elapsed:.0f} s (cores busy; the machine has {cores:.1f}): servers "
          f"{(s1 - s0) / elapsed:.2f}, load generator {client_cpu / elapsed:.2f}, PostgreSQL "
          f"backends of the servers {(d1 - d0) / elapsed:.2f}, whole machine "
          f"{(b1 - b0) / elapsed:.2f}; per turn: servers {1000 * (s1 - s0) / max(turns, 1):.2f} "
          f"ms, load generator {1000 * client_cpu / max(turns, 1):.2f} ms, PostgreSQL "
          f"{1000 * (d1 - d0) / max(turns, 1):.2f} ms; load average {load0:.1f} -> "
          f"{load1:.1f}\n")
    late = sum(r["late"] for r in results)
    if late:
        print(f"- {late} clients were not ready when the clock started (the figures are "
              "not comparable)")
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
    requests = sub.add_parser("requests")
    requests.add_argument("--calls", type=int, default=1000)
    requests.add_argument("--db", choices=["postgres", "sqlite"], default="sqlite")
    requests.set_defaults(run=bench_requests)
    load = sub.add_parser("load")
    load.add_argument("--clients", type=int, default=64)
    load.add_argument("--seconds", type=float, default=20.0)
    load.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    load.add_argument("--servers", type=int, default=1,
                      help="ownstate serve processes, each on its own port; client n uses "
                           "server n mod this")
    load.add_argument("--client-processes", type=int, default=1,
                      help="load-generator processes the clients are spread over")
    load.add_argument("--pool-max", type=int, default=10,
                      help="PostgreSQL connections per server process (pool_max)")
    load.set_defaults(run=bench_load)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
