"""Ranked search measured on LoCoMo: retrieval recall against BM25, query latency at
100,000 facts, and what indexing costs writes.

``recall`` loads each LoCoMo conversation (``--data``, the dataset's JSON; it is read
from where it lies, never copied) twice per backend: as a session store with one session
per LoCoMo session and one item per turn, and as a memory store with one fact per turn
whose source is that turn's item. Each turn's text is its speaker, a colon and its text,
with the image caption appended where the turn has one. Each conversation has a database
of its own (``--shared`` puts all five in one, each in a tenant of its own), so every
search ranks within one conversation's statistics, as the baseline does. For
each answerable question (categories 1-4) it takes the top 10 of
``session_stores.search_items`` and of ``memory.search``, and counts a hit at k when one
of the question's evidence turns is among the first k (an item hit is its turn; a fact
hit is its source item's turn). The baseline is ``rank_bm25.BM25Okapi`` over the same
turns, lowercased ``\\w+`` tokens, one corpus per conversation, in the same run.

``latency`` loads ``--facts`` facts (100,000 by default: the LoCoMo turns again and
again, each copy about another subject) into one memory store through ``remember_many``
and times ``memory.search(question, limit=10)`` for LoCoMo questions through the sync
client; then ``--items`` items (100,000 by default, the turns again, 1,000 per session)
and ``session_stores.search_items``: p50 and p95 of the wall-clock time, and the p50 of
the process's CPU time (the search runs in process on SQLite, so on a shared machine it
is the part the load does not inflate). Each search is timed after a warm-up pass of 20
questions (the first run of a query reads pages not cached yet, about 1.7 ms more on
PostgreSQL).

On PostgreSQL the load leaves dead tuples behind (about 75,000 after the facts: 67,000
old versions of facts, since remembering a subject's key again closes the fact it
replaces by an update, and the ``search_terms`` rows the folds updated), and the local
test server runs with ``autovacuum = off``. A server with default settings would vacuum
and analyze those tables soon after such a load (autovacuum's thresholds are 20% of a
table's rows dead, 10% changed), and a search's candidates and postings are read
through the dead versions until then. So after each load the bench runs ``VACUUM
ANALYZE`` on the tables of its schema, as autovacuum would, and prints the figures after
it; the row marked ``before VACUUM`` is the same search just before it, and the row
after names the dead tuples it found.

``writes`` times ``remember_many`` (batches of 100 facts) and ``append_items`` (batches
of 20 items) of the 2,760 LoCoMo turns on a fresh database, with search indexing and
without (items: a store made with ``index_items=False``; facts: see
:func:`facts_unindexed`), alternating the two in one run, and prints the medians of
facts/s and items/s and what indexing costs. Where a backend indexes at the next search
(SQLite; PostgreSQL's ``append_items``), the last columns add the first search after the
writes, which indexes what they queued, to the writes' time (this process's CPU time
only: ``bench/item_indexing.py`` also counts the server's).

Run by hand (not in CI)::

    python bench/search_locomo.py recall --data ../shared/data/locomo/locomo-dev.json
    python bench/search_locomo.py latency --data ../shared/data/locomo/locomo-dev.json
    python bench/search_locomo.py writes --data ../shared/data/locomo/locomo-dev.json

Backends: ``--backends memory,sqlite,postgres,redis`` (PostgreSQL and Redis at
``OWNSTATE_BENCH_POSTGRES_URL`` / ``OWNSTATE_BENCH_REDIS_URL``, by default the local
servers; each run uses a schema or key prefix of its own and removes it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# This directory holds a redis.py of its own: keep it from shadowing the redis package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import ownstate  # noqa: E402

perf_counter = time.perf_counter
POSTGRES = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL",
                          "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("OWNSTATE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
_TOKEN_RE = re.compile(r"\w+")


# data --------------------------------------------------------------------------------------


def load(path: str) -> list[dict[str, Any]]:
    """Per conversation: its id, its sessions (each a list of (dia_id, text)) and its
    answerable questions (question, evidence dia_ids)."""
    found = []
    for sample in json.loads(Path(path).read_text()):
        conv = sample["conversation"]
        sessions = []
        n = 1
        while f"session_{n}" in conv:
            turns = []
            for turn in conv[f"session_{n}"]:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [image: {turn['blip_caption']}]"
                turns.append((turn["dia_id"], text))
            sessions.append(turns)
            n += 1
        questions = [(q["question"], set(q["evidence"])) for q in sample["qa"]
                     if q["category"] in (1, 2, 3, 4) and q.get("evidence")]
        found.append({"id": sample["sample_id"], "sessions": sessions,
                      "questions": questions})
    return found


@contextlib.contextmanager
def database(backend: str) -> Iterator[str]:
    """A URL of an empty database of ``backend``, removed afterwards."""
    tag = uuid.uuid4().hex[:10]
    if backend == "memory":
        yield f"memory://bench-{tag}"
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"
    elif backend == "postgres":
        schema = f"bench_search_{tag}"
        try:
            yield f"{POSTGRES}?schema={schema}"
        finally:
            import psycopg
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    elif backend == "redis":
        prefix = f"benchsearch{tag}"
        try:
            yield f"{REDIS}?prefix={prefix}"
        finally:
            import redis
            r = redis.Redis.from_url(REDIS)
            for key in r.scan_iter(f"{prefix}*", count=1000):
                r.delete(key)
    else:
        raise SystemExit(f"unknown backend {backend!r}")


# recall ------------------------------------------------------------------------------------


def _hits(ranked: list[set[str]], evidence: set[str]) -> tuple[int, int, int]:
    first = next((i for i, turns in enumerate(ranked) if turns & evidence), None)
    return tuple(int(first is not None and first < k) for k in (1, 5, 10))  # type: ignore[return-value]


def baseline(convs: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    from rank_bm25 import BM25Okapi

    scores = []
    for conv in convs:
        turns = [t for s in conv["sessions"] for t in s]
        bm25 = BM25Okapi([_TOKEN_RE.findall(text.lower()) for _, text in turns])
        for question, evidence in conv["questions"]:
            got = bm25.get_scores(_TOKEN_RE.findall(question.lower()))
            order = sorted(range(len(turns)), key=lambda i: -got[i])[:10]
            scores.append(_hits([{turns[i][0]} for i in order], evidence))
    return scores


def ownstate_recall(backend: str, convs: list[dict[str, Any]], shared: bool
                    ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]], float]:
    items_scores: list[tuple[int, int, int]] = []
    fact_scores: list[tuple[int, int, int]] = []
    times: list[float] = []
    if shared:
        with database(backend) as url:
            for conv in convs:
                _conversation(url, conv, items_scores, fact_scores, times)
    else:
        for conv in convs:
            with database(backend) as url:
                _conversation(url, conv, items_scores, fact_scores, times)
    return items_scores, fact_scores, statistics.median(times) * 1000


def _conversation(url: str, conv: dict[str, Any], items_scores: list[tuple[int, int, int]],
                  fact_scores: list[tuple[int, int, int]], times: list[float]) -> None:
    tenant = re.sub(r"[^a-z0-9-]", "-", conv["id"].lower())
    with ownstate.connect(url, tenant=tenant) as client:
        client.migrate()
        store = client.session_stores.create("locomo")
        memory = client.memory_stores.create("locomo-facts")
        turn_of: dict[tuple[str, int], str] = {}
        item_turn: dict[str, str] = {}
        for n, turns in enumerate(conv["sessions"], start=1):
            session = store.add(actor_id="locomo", session_id=f"session-{n}")
            items = session.append_items(
                [{"role": "user", "content": text} for _, text in turns])
            for (dia, _), item in zip(turns, items, strict=True):
                turn_of[(session.session_id, item.seq)] = dia
                item_turn[item.item_id] = dia
            facts = [{"subject": "locomo", "key": dia, "value": text, "source": item}
                     for (dia, text), item in zip(turns, items, strict=True)]
            for start in range(0, len(facts), 100):
                memory.remember_many(facts[start:start + 100])
        for question, evidence in conv["questions"]:
            started = perf_counter()
            hits = client.session_stores.search_items(question, store="locomo", limit=10)
            times.append(perf_counter() - started)
            items_scores.append(_hits(
                [{turn_of[(h.item.session_id, h.item.seq)]} for h in hits], evidence))
            found = memory.search(question, limit=10)
            fact_scores.append(_hits(
                [{item_turn.get(h.fact.source_item_id or "", "")} for h in found],
                evidence))


def _rates(scores: list[tuple[int, int, int]]) -> list[float]:
    return [round(sum(s[i] for s in scores) / len(scores), 3) for i in range(3)]


def run_recall(args: argparse.Namespace) -> None:
    convs = load(args.data)
    questions = sum(len(c["questions"]) for c in convs)
    print(f"LoCoMo: {len(convs)} conversations, "
          f"{sum(len(t) for c in convs for t in c['sessions'])} turns, {questions} questions")
    started = perf_counter()
    base = _rates(baseline(convs))
    print(f"| rank_bm25 (BM25Okapi, lowercased \\w+) | {base[0]} | {base[1]} | {base[2]} | "
          f"{(perf_counter() - started):.1f} s |")
    for backend in args.backends.split(","):
        started = perf_counter()
        items, facts, median_ms = ownstate_recall(backend, convs, args.shared)
        took = perf_counter() - started
        i, f = _rates(items), _rates(facts)
        print(f"| {backend} search_items | {i[0]} | {i[1]} | {i[2]} | "
              f"median query {median_ms:.2f} ms |")
        print(f"| {backend} memory.search | {f[0]} | {f[1]} | {f[2]} | load+queries "
              f"{took:.1f} s |")
        sys.stdout.flush()


# latency -----------------------------------------------------------------------------------


def _vacuum(url: str) -> int:
    """``VACUUM ANALYZE`` every table of the PostgreSQL schema of ``url``, as autovacuum
    would after a load; the dead tuples found before it."""
    import psycopg
    schema = url.rsplit("?schema=", 1)[1]
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))]
        dead = conn.execute(
            "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables "
            "WHERE schemaname = %s", (schema,)).fetchone()
        for table in tables:
            conn.execute(f'VACUUM ANALYZE "{schema}"."{table}"')
    return int(dead[0]) if dead else 0


def _latency_rows(backend: str, url: str, search: Any, chosen: list[str], what: str,
                  size: str, load: str, profile: bool) -> None:
    """The latency row of ``search``: on PostgreSQL, before and after ``VACUUM ANALYZE``
    of what the load left (see the module's docstring)."""
    note = ""
    if backend == "postgres":
        p50, p95, cpu = _timed(search, chosen, False)
        print(f"| {backend} (before VACUUM) | {what} | {size} | {len(chosen)} | "
              f"{p50:.2f} ms | {p95:.2f} ms | {cpu:.2f} ms | {load} |")
        note = f", then VACUUM ANALYZE ({_vacuum(url):,} dead tuples)"
        sys.stdout.flush()
    p50, p95, cpu = _timed(search, chosen, profile)
    print(f"| {backend} | {what} | {size} | {len(chosen)} | {p50:.2f} ms | {p95:.2f} ms | "
          f"{cpu:.2f} ms | {load}{note} |")
    sys.stdout.flush()


def _timed(search: Any, chosen: list[str], profile: bool) -> tuple[float, float, float]:
    """p50 and p95 of wall-clock time, and the p50 of process CPU time, in ms."""
    times, cpu = [], []
    profiler = None
    if profile:
        from pyinstrument import Profiler
        profiler = Profiler()
        profiler.start()
    for q in chosen:
        started, started_cpu = perf_counter(), time.process_time()
        search(q, limit=10)
        times.append(perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    times.sort()
    return (statistics.median(times) * 1000, times[int(len(times) * 0.95) - 1] * 1000,
            statistics.median(cpu) * 1000)


def run_latency(args: argparse.Namespace) -> None:
    convs = load(args.data)
    turns = [t for c in convs for s in c["sessions"] for t in s]
    questions = [q for c in convs for q, _ in c["questions"]]
    chosen = questions[:: max(1, len(questions) // args.queries)][:args.queries]
    for backend in args.backends.split(","):
        with database(backend) as url, ownstate.connect(url) as client:
            client.migrate()
            memory = client.memory_stores.create("latency")
            started = perf_counter()
            batch: list[dict[str, Any]] = []
            for n in range(args.facts):
                dia, text = turns[n % len(turns)]
                batch.append({"subject": f"user:{n // len(turns)}", "key": dia, "value": text})
                if len(batch) == 1000:
                    memory.remember_many(batch)
                    batch = []
            if batch:
                memory.remember_many(batch)
            load_s = perf_counter() - started
            for q in questions[:20]:  # warm up
                memory.search(q)
            _latency_rows(backend, url, memory.search, chosen, "memory.search",
                          f"{args.facts:,}", f"load {args.facts / load_s:,.0f} facts/s",
                          args.profile)
            if not args.items:
                continue
            store = client.session_stores.create("latency")
            started = perf_counter()
            for start in range(0, args.items, 1000):
                session = store.add(actor_id=f"user:{start // 10_000}")
                session.append_items([{"role": "user", "content": turns[n % len(turns)][1]}
                                      for n in range(start, min(start + 1000, args.items))])
            load_s = perf_counter() - started
            search = client.session_stores.search_items
            for q in questions[:20]:
                search(q)
            _latency_rows(backend, url, search, chosen, "search_items", f"{args.items:,}",
                          f"load {args.items / load_s:,.0f} items/s", args.profile)


# writes ------------------------------------------------------------------------------------


@contextlib.contextmanager
def facts_unindexed(backend: str) -> Iterator[None]:
    """Facts written without search terms: the backend's term function patched to give
    none (SQLite: an empty ``fact_search`` row and no term statistics; PostgreSQL: an
    empty ``terms`` and no ``search_terms`` rows), so the rest of ``remember_many`` is the
    same. Facts have no switch of their own, as items have ``index_items=False``."""
    from unittest import mock
    if backend == "sqlite":
        from ownstate.backends.sqlite import facts
        if hasattr(facts, "defer"):  # facts queued for the next search to index
            with mock.patch.object(facts, "defer", return_value=None):
                yield
            return
        with mock.patch.object(facts, "fact_terms", return_value=""), \
                mock.patch.object(facts, "count_terms", return_value=None):
            yield
    elif backend == "postgres":
        from ownstate.backends.postgres import facts as pg_facts
        from ownstate.backends.postgres.search import Vector
        with mock.patch.object(pg_facts, "fact_vector", return_value=Vector("", 0, ())):
            yield
    else:
        raise SystemExit(f"writes compares indexing on SQLite and PostgreSQL, not {backend}")


def _write_rates(backend: str, turns: list[tuple[str, str]], indexed: bool
                 ) -> tuple[float, ...]:
    """facts/s and items/s by the wall clock, then by this process's CPU time, then by CPU
    time with the first search after the writes (``memory.search``, ``search_items``)."""
    with database(backend) as url, ownstate.connect(url) as client:
        client.migrate()
        memory = client.memory_stores.create("writes")
        store = client.session_stores.create("writes", index_items=indexed)
        facts = [{"subject": f"user:{n // len(turns)}", "key": dia, "value": text}
                 for n, (dia, text) in enumerate(turns)]
        with contextlib.nullcontext() if indexed else facts_unindexed(backend):
            started, cpu = perf_counter(), time.process_time()
            for start in range(0, len(facts), 100):
                memory.remember_many(facts[start:start + 100])
            fact_s, fact_cpu = perf_counter() - started, time.process_time() - cpu
        session = store.add(actor_id="writes")
        items = [{"role": "user", "content": text} for _, text in turns]
        started, cpu = perf_counter(), time.process_time()
        for start in range(0, len(items), 20):
            session.append_items(items[start:start + 20])
        item_s, item_cpu = perf_counter() - started, time.process_time() - cpu
        cpu = time.process_time()
        memory.search("what")
        fact_search = time.process_time() - cpu
        cpu = time.process_time()
        client.session_stores.search_items("what")
        item_search = time.process_time() - cpu
        return (len(facts) / fact_s, len(items) / item_s, len(facts) / fact_cpu,
                len(items) / item_cpu, len(facts) / (fact_cpu + fact_search),
                len(items) / (item_cpu + item_search))


def run_writes(args: argparse.Namespace) -> None:
    convs = load(args.data)
    turns = [t for c in convs for s in c["sessions"] for t in s]
    for backend in args.backends.split(","):
        rates: dict[bool, list[tuple[float, ...]]] = {True: [], False: []}
        for n in range(args.rounds):
            for indexed in (n % 2 == 0, n % 2 == 1):  # alternate which goes first
                rates[indexed].append(_write_rates(backend, turns, indexed))
        for what, i in (("remember_many", 0), ("append_items", 1)):
            on, off, on_cpu, off_cpu, on_all = (
                statistics.median(r[j] for r in rates[k]) for j, k in (
                    (i, True), (i, False), (i + 2, True), (i + 2, False), (i + 4, True)))
            unit = "facts" if i == 0 else "items"
            print(f"| {backend} | {what} | {on:,.0f} {unit}/s | {off:,.0f} {unit}/s | "
                  f"{1 - on / off:.0%} | {on_cpu:,.0f} / {off_cpu:,.0f} per CPU-s | "
                  f"{1 - on_cpu / off_cpu:.0%} | with the first search {on_all:,.0f} "
                  f"per CPU-s, {1 - on_all / off_cpu:.0%} | median of {args.rounds} |")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("recall", "latency", "writes"):
        p = sub.add_parser(name)
        p.add_argument("--data", required=True, help="path of LoCoMo's JSON")
        p.add_argument("--backends", default={"recall": "memory,sqlite,postgres,redis"}.get(
            name, "sqlite,postgres"))
        if name == "recall":
            p.add_argument("--shared", action="store_true",
                           help="all conversations in one database, a tenant each")
        if name == "latency":
            p.add_argument("--facts", type=int, default=100_000)
            p.add_argument("--queries", type=int, default=300)
            p.add_argument("--items", type=int, default=100_000,
                           help="items searched after the facts (0: none)")
            p.add_argument("--profile", action="store_true",
                           help="profile the timed queries with pyinstrument")
        if name == "writes":
            p.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    {"recall": run_recall, "latency": run_latency, "writes": run_writes}[args.command](args)


if __name__ == "__main__":
    main()
