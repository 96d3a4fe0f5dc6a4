"""The operator's console against a full tenant: the inbox with 10,000 awaiting runs, and a
5,000-item transcript, as HTML pages beside the JSON API routes that carry the same data.

The server runs as its own process (``ownstate serve``) on a fresh SQLite or PostgreSQL
database, which the library fills directly first (``--runs`` sessions with one run awaiting
a human each, and one session of ``--items`` items). A browser-like client signs in once,
then each page is fetched ``--repeat`` times; the time of each request is what the client
sees on loopback (an upper bound on the server's time):

- **inbox**: ``GET /console/inbox`` (the page), ``/console/inbox/rows`` (what it polls),
  and the last of its pages reached by following the next-page links, against
  ``GET /runs:awaiting`` with the same page size (50).
- **transcript**: a 5,000-item session's page (its labels, fork tree, runs and first 100
  items) and the last slice the page loads as it is scrolled (``after_seq=4900``),
  against ``GET .../items`` for the same 100 items as JSON.

Run by hand (not in CI)::

    /work/venv/bin/python bench/console.py --db sqlite
    /work/venv/bin/python bench/console.py --db postgres
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

import ownstate

sys.path.append(str(Path(__file__).resolve().parent))
from decisions import _fill, p99
from http_service import database, environment, server

API = "/api/2.0/agents"


def _sign_in(base: str, token: str) -> httpx.Client:
    browser = httpx.Client(base_url=base, timeout=60)
    form = browser.get("/console/sign-in").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf is not None
    answer = browser.post("/console/sign-in", data={"csrf_token": csrf.group(1),
                                                     "api_key": token})
    assert answer.status_code == 303, answer.text
    return browser


def _times(fetch: Callable[[], httpx.Response], repeat: int) -> list[float]:
    fetch().raise_for_status()  # warm
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = fetch()
        times.append(time.perf_counter() - started)
        answer.raise_for_status()
    return times


def _last_inbox_page(browser: httpx.Client) -> tuple[str, int]:
    """The URL of the inbox's last page, and how many pages lead to it."""
    path, pages = "/console/inbox", 1
    while True:
        found = re.search(r'href="(/console/inbox\?[^"]*page_token=[^"]+)"',
                          browser.get(path).text)
        if found is None:
            return path, pages
        path, pages = found.group(1).replace("&amp;", "&"), pages + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with database(args.db) as url:
        asyncio.run(_fill(url, args.runs, "bench-console"))
        with ownstate.connect(url) as direct:
            long = direct.session_stores.get("bench-console").add(
                actor_id="customer-long", session_id="long")
            for start in range(0, args.items, 1000):
                long.append_items([{"type": "message", "role": ("user", "assistant")[n % 2],
                                    "content": f"message {n} " + "x" * 200}
                                   for n in range(start, min(args.items, start + 1000))],
                                  format="ownstate.message")
        with server(url) as (base, token):
            browser = _sign_in(base, token)
            api = httpx.Client(base_url=base, timeout=60,
                               headers={"authorization": f"Bearer {token}"})
            last, pages = _last_inbox_page(browser)
            session = "/console/sessions/bench-console/long"
            items = f"{API}/session-stores/bench-console/sessions/long/items"
            r = args.repeat
            rows = [
                ("inbox page (50 runs)", _times(lambda: browser.get("/console/inbox"), r),
                 _times(lambda: api.get(f"{API}/runs:awaiting",
                                        params={"page_size": 50}), r)),
                ("inbox rows (the poll)",
                 _times(lambda: browser.get("/console/inbox/rows"), r), None),
                (f"inbox last page (page {pages})", _times(lambda: browser.get(last), r),
                 None),
                (f"{args.items:,}-item session page (first 100 items)",
                 _times(lambda: browser.get(session), r),
                 _times(lambda: api.get(items, params={"page_size": 100,
                                                       "order_by": "create_time asc"}), r)),
                ("its last slice (100 items)",
                 _times(lambda: browser.get(f"{session}/items",
                                            params={"after_seq": args.items - 100}), r),
                 None),
            ]
    ms = 1000.0
    print(f"\n{environment()}, {args.db}; {args.runs:,} awaiting runs, one session of "
          f"{args.items:,} items; {args.repeat} requests each\n")
    print("| page | console median | p99 | JSON API median | console / API |")
    print("|---|---:|---:|---:|---:|")
    for name, console, json_api in rows:
        ratio = (f"{statistics.median(console) / statistics.median(json_api):.2f}x"
                 if json_api else "")
        api_median = f"{statistics.median(json_api) * ms:.1f} ms" if json_api else ""
        print(f"| {name} | {statistics.median(console) * ms:.1f} ms | "
              f"{p99(console) * ms:.1f} ms | {api_median} | {ratio} |")


if __name__ == "__main__":
    main()
