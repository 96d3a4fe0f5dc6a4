"""Benchmark of ownstate's SQLite checkpoints against raw sqlite3 on the same bytes.

For each payload size (2 KB, 50 KB and 1 MB of incompressible bytes) it stores a run's
worth of checkpoints one at a time, then reads each back by id:

- ``raw sqlite3``: ``INSERT`` into a plain (run_id, checkpoint_id, payload) table, one
  ``BEGIN IMMEDIATE`` ... ``COMMIT`` per put, and a ``SELECT payload`` by primary key per get;
  WAL and ``synchronous=NORMAL``, as ownstate uses.
- ``ownstate sync``: ``client.checkpoints.put(scope, ...)`` and ``client.checkpoints.get(scope,
  checkpoint_id)`` through the sync client, every checkpoint in the same run.

Each round uses fresh database files in one temporary directory (one disk); variants run in
rotating order, and only medians are reported: the median time of one call, and calls per
second from the median round. Run by hand (not in CI)::

    /work/venv/bin/python bench/checkpoints_sqlite.py
    /work/venv/bin/python bench/checkpoints_sqlite.py --rounds 7 --sizes 2048 51200
"""

from __future__ import annotations

import argparse
import contextlib
import gc
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

import ownstate
from ownstate.limits import Limits
from ownstate.model import CheckpointScope

perf_counter = time.perf_counter

#: payload size -> checkpoints stored (and read back) per round
DEFAULT_COUNTS = {2 * 1024: 2000, 50 * 1024: 500, 1024 * 1024: 60}

RAW_SCHEMA = ("CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, "
              "checkpoint_id TEXT NOT NULL, payload BLOB NOT NULL, "
              "UNIQUE (run_id, checkpoint_id))")

#: (seconds per put, seconds per get), one entry per call
Timings = tuple[list[float], list[float]]


def payloads(size: int, count: int, *, seed: int = 4321) -> list[bytes]:
    rng = random.Random(seed + size)
    return [rng.randbytes(size) for _ in range(count)]


def checkpoint_ids(count: int) -> list[str]:
    return [f"1ef{n:012d}-0000-6000-8000-000000000000" for n in range(count)]


@contextlib.contextmanager
def scratch_dir(base: str | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ownstate-bench-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def rotate(names: Sequence[str], r: int) -> list[str]:
    order = list(names[r % len(names):]) + list(names[: r % len(names)])
    return order[::-1] if (r // len(names)) % 2 else order


# --------------------------------------------------------------------------------------
# the two variants


def raw_sqlite(path: Path, blobs: list[bytes]) -> Timings:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(RAW_SCHEMA)
    ids = checkpoint_ids(len(blobs))
    puts: list[float] = []
    gets: list[float] = []
    try:
        for checkpoint_id, blob in zip(ids, blobs, strict=True):
            start = perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO checkpoints (run_id, checkpoint_id, payload) "
                         "VALUES (?, ?, ?)", ("bench-run", checkpoint_id, blob))
            conn.execute("COMMIT")
            puts.append(perf_counter() - start)
        for checkpoint_id, blob in zip(ids, blobs, strict=True):
            start = perf_counter()
            (got,) = conn.execute("SELECT payload FROM checkpoints WHERE run_id = ? "
                                  "AND checkpoint_id = ?", ("bench-run", checkpoint_id)).fetchone()
            gets.append(perf_counter() - start)
            if got != blob:
                raise SystemExit("raw sqlite3 read different bytes")
    finally:
        conn.close()
    return puts, gets


def ownstate_sync(path: Path, blobs: list[bytes]) -> Timings:
    ids = checkpoint_ids(len(blobs))
    puts: list[float] = []
    gets: list[float] = []
    limits = Limits(max_checkpoint_bytes=max(len(b) for b in blobs))
    with ownstate.connect(f"sqlite:///{path.resolve()}", limits=limits) as client:
        session = client.session_stores.create("bench-sessions").add(
            actor_id="bench-user", session_id="bench-session")
        run = client.runs.open_run(session, "langgraph", "bench-thread")
        scope: CheckpointScope = run.checkpoint_scope()
        put, get = client.checkpoints.put, client.checkpoints.get
        parent = None
        for checkpoint_id, blob in zip(ids, blobs, strict=True):
            start = perf_counter()
            put(scope, checkpoint_id, type_tag="msgpack", payload=blob,
                parent_checkpoint_id=parent)
            puts.append(perf_counter() - start)
            parent = checkpoint_id
        for checkpoint_id, blob in zip(ids, blobs, strict=True):
            start = perf_counter()
            record = get(scope, checkpoint_id)
            gets.append(perf_counter() - start)
            if record is None or record.payload != blob:
                raise SystemExit("ownstate read different bytes")
    return puts, gets


VARIANTS: dict[str, Callable[[Path, list[bytes]], Timings]] = {
    "raw sqlite3": raw_sqlite,
    "ownstate sync": ownstate_sync,
}
BASELINE = "raw sqlite3"


# --------------------------------------------------------------------------------------
# report


def label(size: int) -> str:
    return f"{size // (1024 * 1024)} MB" if size >= 1024 * 1024 else f"{size // 1024} KB"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        cells = [c.rjust(w) if c[:1].isdigit() else c.ljust(w)
                 for c, w in zip(row, widths, strict=True)]
        print("| " + " | ".join(cells) + " |")
    print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=sorted(DEFAULT_COUNTS),
                        help="payload sizes in bytes")
    parser.add_argument("--count", type=int, default=None,
                        help="checkpoints per round (default: depends on the size)")
    parser.add_argument("--dir", default=None, help="where to put the database files")
    args = parser.parse_args(argv)

    print(f"# checkpoints: put and get through the sync client vs raw sqlite3\n\n"
          f"{date.today().isoformat()}, Python {platform.python_version()}, SQLite "
          f"{sqlite3.sqlite_version}, {os.cpu_count()} CPUs, {platform.machine()}, "
          f"ownstate {ownstate.__version__}; {args.rounds} rounds, medians\n")
    rows: list[list[str]] = []
    with scratch_dir(args.dir) as tmp:
        for name, fn in VARIANTS.items():  # warm up imports, code paths and the page cache
            fn(tmp / f"warm-{name.replace(' ', '_')}.db", payloads(2048, 50))
        for size in args.sizes:
            count = args.count or DEFAULT_COUNTS.get(size, 200)
            blobs = payloads(size, count)
            per_put: dict[str, list[float]] = {n: [] for n in VARIANTS}
            per_get: dict[str, list[float]] = {n: [] for n in VARIANTS}
            round_put: dict[str, list[float]] = {n: [] for n in VARIANTS}
            round_get: dict[str, list[float]] = {n: [] for n in VARIANTS}
            for r in range(args.rounds):
                for name in rotate(list(VARIANTS), r):
                    db = tmp / f"{size}-{r}-{name.replace(' ', '_')}.db"
                    gc.collect()
                    puts, gets = VARIANTS[name](db, blobs)
                    remove_db(db)
                    per_put[name] += puts
                    per_get[name] += gets
                    round_put[name].append(sum(puts))
                    round_get[name].append(sum(gets))
            base_put = count / statistics.median(round_put[BASELINE])
            base_get = count / statistics.median(round_get[BASELINE])
            for name in VARIANTS:
                put_rate = count / statistics.median(round_put[name])
                get_rate = count / statistics.median(round_get[name])
                baseline = name == BASELINE
                rows.append([
                    label(size), str(count), name,
                    f"{statistics.median(per_put[name]) * 1e6:,.0f}", f"{put_rate:,.0f}",
                    "100% (baseline)" if baseline else f"{put_rate / base_put:.0%}",
                    f"{statistics.median(per_get[name]) * 1e6:,.0f}", f"{get_rate:,.0f}",
                    "100% (baseline)" if baseline else f"{get_rate / base_get:.0%}",
                ])
    print_table(["payload", "n", "implementation", "put µs (median)", "puts/s",
                 "put share of raw", "get µs (median)", "gets/s", "get share of raw"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
