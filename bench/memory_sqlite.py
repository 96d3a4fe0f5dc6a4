"""Benchmarks of ownstate's SQLite memory: recall at a million facts, and remember throughput.

One database file in a temporary directory is loaded with ``--facts`` facts (1,000,000 by
default) about ``--subjects`` subjects through the public API, in ``remember_many``
batches of 1,000. Each subject has ``--keys`` keys; the facts beyond one per key are later
versions, so about a third of the stored facts are superseded history, as in a store that
has been corrected for a while. Then, on the loaded file:

- ``remember_many``: facts/s of the load itself (one transaction per batch of 1,000);
- ``remember``: facts/s of single ``remember`` calls, one transaction each;
- ``recall``: latency of ``recall(subject)`` for random subjects through the sync client
  (p50 and p99 over ``--recalls`` calls), against the same question asked of the same
  file with raw ``sqlite3``: the identical bitemporal query, and the plain "current facts"
  query an application without history would run (``superseded_at IS NULL``), both with
  ``json.loads`` of each value;
- ``search``: latency of ``search(word, subject=...)`` through the sync client.

Run by hand (not in CI)::

    /work/venv/bin/python bench/memory_sqlite.py                  # 1,000,000 facts
    /work/venv/bin/python bench/memory_sqlite.py --facts 100000   # a quicker look

The figures are medians and 99th percentiles of single calls on one machine; they say how
the costs compare, not what another machine will see.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import ownstate
from ownstate import _ids

perf_counter = time.perf_counter
TENANT = "default"
STORE = "bench-memory"
KEY_NAMES = ["preferred_channel", "timezone", "language", "plan", "city", "company",
             "role", "nickname", "last_topic", "sentiment", "device", "budget"]
CHANNELS = ["email", "sms", "phone", "chat", "post"]
WORDS = ["refund", "invoice", "shipping", "upgrade", "billing", "password", "delivery",
         "discount", "warranty", "account"]


def subject_name(n: int) -> str:
    return f"user:{n:07d}"


def value_for(rng: random.Random, key: str) -> Any:
    if key == "preferred_channel":
        return rng.choice(CHANNELS)
    if key == "budget":
        return {"amount": rng.randint(10, 5000), "currency": "EUR"}
    if key == "last_topic":
        return f"{rng.choice(WORDS)} question about order {rng.randint(1000, 9999)}"
    return f"{key}-{rng.randint(0, 999)}"


def plan(facts: int, subjects: int, keys: int, seed: int) -> Iterator[dict[str, Any]]:
    """The facts to load, as remember_many specs: first one fact per (subject, key), then
    later versions of random (subject, key)s until ``facts`` in all."""
    rng = random.Random(seed)
    names = KEY_NAMES[:keys]
    first = min(facts, subjects * keys)
    for n in range(first):
        key = names[n % keys]
        yield {"subject": subject_name(n // keys), "key": key, "value": value_for(rng, key),
               "confidence": round(rng.random(), 2), "source_type": "pipeline"}
    for _ in range(facts - first):
        key = rng.choice(names)
        yield {"subject": subject_name(rng.randrange(subjects)), "key": key,
               "value": value_for(rng, key), "confidence": round(rng.random(), 2),
               "source_type": "pipeline"}


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def timed(calls: Sequence[Callable[[], object]]) -> list[float]:
    samples = []
    for call in calls:
        started = perf_counter()
        call()
        samples.append(perf_counter() - started)
    return samples


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        cells = [c.rjust(w) if c[:1].isdigit() else c.ljust(w)
                 for c, w in zip(row, widths, strict=True)]
        print("| " + " | ".join(cells) + " |")
    print()


def environment() -> str:
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(
        os, "getloadavg") else ""
    return (f"{date.today().isoformat()}, Python {platform.python_version()}, SQLite "
            f"{sqlite3.sqlite_version}, {os.cpu_count()} CPUs, {platform.machine()}{load}")


@contextlib.contextmanager
def scratch_dir(base: str | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ownstate-bench-memory-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# the raw sqlite3 comparisons read the same file, with the statements written out here

RAW_BITEMPORAL = (
    "SELECT key, value, max(fid) FROM facts "
    "WHERE tenant = ? AND subject = ? AND memory_store = ? "
    "AND recorded_at <= ? AND valid_from <= ? "
    "AND (superseded_at IS NULL OR superseded_at > ? OR valid_to > ?) "
    "GROUP BY key ORDER BY key"
)
RAW_CURRENT = (
    "SELECT key, value FROM facts WHERE tenant = ? AND memory_store = ? AND subject = ? "
    "AND superseded_at IS NULL ORDER BY key"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--subjects", type=int, default=None,
                        help="default: facts / 15 (10 keys each, a third superseded)")
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--recalls", type=int, default=1000)
    parser.add_argument("--remembers", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where to put the database file")
    args = parser.parse_args()
    subjects = args.subjects or max(1, args.facts // 15)
    keys = min(args.keys, len(KEY_NAMES))
    rng = random.Random(args.seed + 1)

    with scratch_dir(args.dir) as directory:
        path = directory / "memory.db"
        client = ownstate.connect(f"sqlite:///{path}")
        memory = client.memory_stores.create(STORE)

        # load through the public API, in batches
        started = perf_counter()
        batch: list[dict[str, Any]] = []
        loaded = 0
        for spec in plan(args.facts, subjects, keys, args.seed):
            batch.append(spec)
            if len(batch) == args.batch:
                memory.remember_many(batch)
                loaded += len(batch)
                batch = []
        if batch:
            memory.remember_many(batch)
            loaded += len(batch)
        load_seconds = perf_counter() - started

        # single remembers, one transaction each
        singles = [(subject_name(rng.randrange(subjects)), rng.choice(KEY_NAMES[:keys]))
                   for _ in range(args.remembers)]
        started = perf_counter()
        for subject, key in singles:
            memory.remember(subject, key, value_for(rng, key))
        single_seconds = perf_counter() - started

        raw = sqlite3.connect(path)
        stored, current = raw.execute(
            "SELECT count(*), count(*) FILTER (WHERE superseded_at IS NULL) FROM facts"
        ).fetchone()

        picks = [subject_name(rng.randrange(subjects)) for _ in range(args.recalls)]
        for subject in picks[:50]:  # warm the page cache the same way for every variant
            memory.recall(subject)

        def api_recall(subject: str) -> Callable[[], object]:
            return lambda: memory.recall(subject)

        def raw_bitemporal(subject: str) -> Callable[[], object]:
            def call() -> object:
                stamp = _ids.format_time(_ids.now())
                rows = raw.execute(RAW_BITEMPORAL, (TENANT, subject, STORE, stamp, stamp,
                                                    stamp, stamp))
                return [(k, json.loads(v)) for k, v, _ in rows]
            return call

        def raw_current(subject: str) -> Callable[[], object]:
            def call() -> object:
                rows = raw.execute(RAW_CURRENT, (TENANT, STORE, subject))
                return [(k, json.loads(v)) for k, v in rows]
            return call

        # all variants must answer the same
        for subject in picks[:20]:
            want = [(f.key, f.value) for f in memory.recall(subject)]
            assert raw_bitemporal(subject)() == want
            assert raw_current(subject)() == want

        results: dict[str, list[float]] = {"api": [], "raw_bitemporal": [], "raw_current": []}
        makers = {"api": api_recall, "raw_bitemporal": raw_bitemporal,
                  "raw_current": raw_current}
        chunk = 100
        for start in range(0, len(picks), chunk):  # interleave variants, in rotating order
            names = list(makers)
            names = names[start // chunk % 3:] + names[: start // chunk % 3]
            for name in names:
                results[name] += timed([makers[name](s) for s in picks[start:start + chunk]])

        searches = [(rng.choice(WORDS), subject_name(rng.randrange(subjects)))
                    for _ in range(args.recalls)]
        search_samples = timed([lambda w=w, s=s: memory.search(w, subject=s)
                                for w, s in searches])
        store_search = timed([lambda w=w: memory.search(w, limit=20)
                              for w, _ in searches[:100]])
        size_mb = sum(p.stat().st_size for p in directory.iterdir()) / 1e6
        raw.close()
        client.close()

    print(f"{environment()}\n")
    print(f"{stored:,} facts ({current:,} current, {stored - current:,} superseded) about "
          f"{subjects:,} subjects, {keys} keys each; database {size_mb:,.0f} MB\n")
    ms = 1000
    print_table(
        ["operation", "p50 ms", "p99 ms"],
        [
            ["recall(subject), sync client",
             f"{statistics.median(results['api']) * ms:.3f}",
             f"{percentile(results['api'], 0.99) * ms:.3f}"],
            ["same bitemporal query, raw sqlite3",
             f"{statistics.median(results['raw_bitemporal']) * ms:.3f}",
             f"{percentile(results['raw_bitemporal'], 0.99) * ms:.3f}"],
            ["current facts only (no history), raw sqlite3",
             f"{statistics.median(results['raw_current']) * ms:.3f}",
             f"{percentile(results['raw_current'], 0.99) * ms:.3f}"],
            ["search(word, subject=...), sync client",
             f"{statistics.median(search_samples) * ms:.3f}",
             f"{percentile(search_samples, 0.99) * ms:.3f}"],
            ["search(word) over the whole store, limit 20",
             f"{statistics.median(store_search) * ms:.3f}",
             f"{percentile(store_search, 0.99) * ms:.3f}"],
        ],
    )
    print_table(
        ["write", "facts", "seconds", "facts/s"],
        [
            [f"remember_many, batches of {args.batch}", f"{loaded:,}", f"{load_seconds:.1f}",
             f"{loaded / load_seconds:,.0f}"],
            ["remember, one call per fact", f"{args.remembers:,}", f"{single_seconds:.1f}",
             f"{args.remembers / single_seconds:,.0f}"],
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
