"""What indexing items for search costs PostgreSQL per item, where the work happens: in
``append_items`` and in the first search after the appends (which indexes what they
queued, where the backend defers it), by the wall clock, this process's CPU time and the
server's (the CPU time of the backends this client connected, found by their
``application_name``, read from ``/proc``: the server must run on this machine).

The 2,760 LoCoMo turns are appended in batches of 20 to a fresh schema, once into a store
that indexes its items and once into one made with ``index_items=False``, alternating
which goes first; each figure is the median over the rounds, in µs per item. Run by hand
(not in CI)::

    python bench/item_indexing.py --data ../shared/data/locomo/locomo-dev.json --rounds 3
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

import ownstate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workload import server_cpu_seconds
from search_locomo import POSTGRES, load

perf = time.perf_counter


def _costs(texts: list[str], indexed: bool) -> list[float]:
    """µs per item: the appends' wall, client CPU and server CPU, then the first search's."""
    schema = f"bench_indexing_{uuid.uuid4().hex[:10]}"
    url = f"{POSTGRES}?schema={schema}&application_name={schema}"
    try:
        with ownstate.connect(url) as client:
            client.migrate()
            session = client.session_stores.create("writes", index_items=indexed).add(
                actor_id="writes")
            items = [{"role": "user", "content": t} for t in texts]
            marks = [(perf(), time.process_time(), server_cpu_seconds(POSTGRES, schema))]
            for start in range(0, len(items), 20):
                session.append_items(items[start:start + 20])
            marks.append((perf(), time.process_time(), server_cpu_seconds(POSTGRES, schema)))
            client.session_stores.search_items("what")
            marks.append((perf(), time.process_time(), server_cpu_seconds(POSTGRES, schema)))
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return [(b[k] - a[k]) / len(texts) * 1e6 for a, b in itertools.pairwise(marks)
            for k in range(3)]



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the LoCoMo JSON file")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    texts = [t for c in load(args.data) for s in c["sessions"] for _, t in s]
    found: dict[bool, list[list[float]]] = {True: [], False: []}
    for n in range(args.rounds):
        for indexed in (n % 2 == 0, n % 2 == 1):
            found[indexed].append(_costs(texts, indexed))
    print("| store | append wall | client CPU | server CPU | first search wall | "
          "client CPU | server CPU |")
    for indexed in (True, False):
        m = [statistics.median(r[j] for r in found[indexed]) for j in range(6)]
        print(f"| {'indexed' if indexed else 'index_items=False'} | "
              + " | ".join(f"{v:.1f} µs" for v in m) + f" | (median of {args.rounds})")


if __name__ == "__main__":
    main()
