"""Human decisions over HTTP: the inbox with 10,000 awaiting runs, and how long a decision
takes to reach a waiting worker.

The server runs as its own process (``ownstate serve``) on a fresh SQLite or PostgreSQL
database, which the library fills directly first (``--runs`` sessions, each with one run
awaiting a human). Then:

- **inbox**: every page of ``GET /runs:awaiting`` (the undecided runs, oldest first,
  ``--page-size`` a page), first page to last by page token; the time of each request as
  the client sees it on loopback (an upper bound on the server's time), median and p99,
  and the first page alone.
- **wake**: ``--decisions`` times over, a worker in this process waits with the remote
  client (``client.runs.wait_for_decision(run_id)``, a long poll) while a reviewer
  decides through the server (``POST /runs/{id}:decide``, another client) after a
  random 0.2-1.7 s; the time from
  sending the decision to the worker holding the decided run. The same again with the
  decision written by another process straight into the database (the library, not the
  server): on PostgreSQL the server hears it through ``NOTIFY``, on SQLite by re-checking
  within a second. And the baseline a worker would otherwise write: polling
  ``GET /runs/{id}`` every ``--poll`` seconds.

Run by hand (not in CI)::

    /work/venv/bin/python bench/decisions.py --db sqlite
    /work/venv/bin/python bench/decisions.py --db postgres

PostgreSQL is ``OWNSTATE_BENCH_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), in a fresh schema dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

import ownstate

sys.path.append(str(Path(__file__).resolve().parent))
from http_service import database, environment, server

RUNS = "/api/2.0/agents/runs"


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def _fill(url: str, runs: int, store_name: str) -> list[str]:
    """``runs`` sessions of a fresh store, each with one run awaiting a human."""
    client = await ownstate.connect_async(url)
    try:
        store = await client.session_stores.create(store_name)
        made: list[str] = []
        lock = asyncio.Semaphore(16)

        async def one(n: int) -> str:
            async with lock:
                session = await store.add(actor_id=f"customer-{n % 500}",
                                          session_id=f"case-{n:05d}")
                run = await client.runs.open_run(session, "langgraph", f"case-{n:05d}")
                await client.runs.mark_awaiting(run.run_id, {
                    "kind": "approval", "tool": "refund", "payload": {"amount": n % 300}})
                return run.run_id

        for start in range(0, runs, 500):  # in order of age, a batch at a time
            made += await asyncio.gather(*(one(n) for n in range(start, min(runs, start
                                                                              + 500))))
        return made
    finally:
        await client.close()


def inbox(base: str, token: str, page_size: int) -> tuple[list[float], int]:
    """Seconds per page, paging through the whole inbox; and how many runs it held."""
    times: list[float] = []
    seen = 0
    with httpx.Client(base_url=base, timeout=60,
                      headers={"authorization": f"Bearer {token}"}) as http:
        http.get(f"{RUNS}:awaiting", params={"page_size": 1})  # warm the connection
        page_token: str | None = None
        while True:
            params: dict[str, Any] = {"page_size": page_size}
            if page_token is not None:
                params["page_token"] = page_token
            started = time.perf_counter()
            answer = http.get(f"{RUNS}:awaiting", params=params)
            times.append(time.perf_counter() - started)
            answer.raise_for_status()
            body = answer.json()
            seen += len(body["runs"])
            page_token = body.get("next_page_token")
            if page_token is None:
                return times, seen


def _wait_and_time(base: str, token: str, run_id: str, ready: threading.Event,
                   out: dict[str, float]) -> None:
    with ownstate.connect(base, token=token) as remote:
        remote.runs.get(run_id)  # the connection is open before the clock starts
        ready.set()
        got = remote.runs.wait_for_decision(run_id, timeout=30)
        out["at"] = time.perf_counter()
        out["ok"] = float(got is not None and got.decision is not None)


def _poll_and_time(base: str, token: str, run_id: str, every: float, ready: threading.Event,
                   out: dict[str, float]) -> None:
    with httpx.Client(base_url=base, timeout=30,
                      headers={"authorization": f"Bearer {token}"}) as http:
        ready.set()
        while True:
            if http.get(f"{RUNS}/{run_id}").json().get("decision") is not None:
                out["at"] = time.perf_counter()
                out["ok"] = 1.0
                return
            time.sleep(every)


_DIRECT_DECIDER = """
import sys, ownstate
client = ownstate.connect(sys.argv[1])
client.runs.get(sys.argv[2])
print("ready", flush=True)
for line in sys.stdin:
    client.runs.decide(line.strip(), "approve", comment="direct")
    print("done", flush=True)
client.close()
"""


def wake(base: str, token: str, url: str, run_ids: list[str], how: str,
         poll: float) -> list[float]:
    """Seconds from a decision to the worker holding it, once per run in ``run_ids``."""
    latencies: list[float] = []
    rng = random.Random(len(run_ids))
    direct = None
    if how == "direct":
        direct = subprocess.Popen([sys.executable, "-c", _DIRECT_DECIDER, url, run_ids[0]],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert direct.stdout is not None
        assert direct.stdin is not None
        assert direct.stdout.readline().strip() == "ready"
    with httpx.Client(base_url=base, timeout=30,
                      headers={"authorization": f"Bearer {token}"}) as reviewer:
        reviewer.get(f"{RUNS}/{run_ids[0]}")
        for run_id in run_ids:
            ready, out = threading.Event(), {}
            target = (_poll_and_time, (base, token, run_id, poll, ready, out)) if (
                how == "poll") else (_wait_and_time, (base, token, run_id, ready, out))
            worker = threading.Thread(target=target[0], args=target[1])
            worker.start()
            ready.wait(30)
            # the worker has waited a while, for a time that falls anywhere in a polling
            # period (or a re-check's pause), as a human's decision would
            time.sleep(0.2 + rng.random() * 1.5)
            sent = time.perf_counter()
            if direct is not None:
                assert direct.stdin is not None
                assert direct.stdout is not None
                direct.stdin.write(run_id + "\n")
                direct.stdin.flush()
                direct.stdout.readline()
            else:
                reviewer.post(f"{RUNS}/{run_id}:decide",
                              json={"outcome": "approve"}).raise_for_status()
            worker.join(60)
            if out.get("ok") != 1.0:
                raise SystemExit(f"the worker did not receive the decision on {run_id}")
            latencies.append(out["at"] - sent)
    if direct is not None:
        assert direct.stdin is not None
        direct.stdin.close()
        direct.wait(30)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--decisions", type=int, default=40)
    parser.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args()
    with database(args.db) as url:
        started = time.perf_counter()
        run_ids = asyncio.run(_fill(url, args.runs, "bench-decisions"))
        filled = time.perf_counter() - started
        with server(url) as (base, token):
            pages, seen = inbox(base, token, args.page_size)
            assert seen == args.runs, seen
            n = args.decisions
            served = wake(base, token, url, run_ids[:n], "server", args.poll)
            direct = wake(base, token, url, run_ids[n:2 * n], "direct", args.poll)
            polled = wake(base, token, url, run_ids[2 * n:3 * n], "poll", args.poll)
            after, _ = inbox(base, token, args.page_size)
    ms = 1000.0
    print(f"\n{environment()}, {args.db}; {args.runs:,} awaiting runs filled in "
          f"{filled:.0f} s\n")
    print("| measurement | median | p99 | max |")
    print("|---|---:|---:|---:|")
    print(f"| inbox page of {args.page_size} ({len(pages)} pages, first to last) | "
          f"{statistics.median(pages) * ms:.1f} ms | {p99(pages) * ms:.1f} ms | "
          f"{max(pages) * ms:.1f} ms |")
    print(f"| inbox first page | {pages[0] * ms:.1f} ms | | |")
    print(f"| inbox page after {3 * n} decisions | {statistics.median(after) * ms:.1f} ms | "
          f"{p99(after) * ms:.1f} ms | {max(after) * ms:.1f} ms |")
    for name, values in (("decision through the server -> waiting worker", served),
                         ("decision by another process on the database -> worker", direct),
                         (f"baseline: worker polling every {args.poll:g} s", polled)):
        print(f"| {name} ({len(values)}) | {statistics.median(values) * ms:.1f} ms | "
              f"{p99(values) * ms:.1f} ms | {max(values) * ms:.1f} ms |")
    print(f"\nlong poll vs polling every {args.poll:g} s, medians: "
          f"{statistics.median(polled) / statistics.median(served):.0f}x sooner")


if __name__ == "__main__":
    main()
