"""ownstate at scale: the same operations on a big database and on an almost empty one.

The big database holds ``--items`` items (10,000,000 by default) over ``--sessions``
sessions (100,000), ``--facts`` facts (1,000,000: per subject nine current facts and one
superseded version) and one run per session, ``--awaiting`` of them (10,000) awaiting a
human, the rest done, all in one tenant and one session store, the worst case for one
tenant's indexes. The almost empty one holds 200 sessions with as many items each as the
big one's, 2,000 facts and 150 awaiting runs, so that every measured call returns the
same amount of data from both.

Both are bulk-loaded, not written through the API (that would take a day): a few items,
facts and runs are written through the public API first, the generated rows are checked
against them (derived columns, search terms) and copy the rest of their shape from them;
then the named indexes are dropped, the rows inserted (``COPY`` on PostgreSQL,
``executemany`` in large transactions on SQLite), the indexes made again and the
statistics gathered (``ANALYZE``; on PostgreSQL ``VACUUM ANALYZE``, as autovacuum would
have). A database already holding the wanted counts is reused: SQLite files live in
``--cache`` (default ``~/.cache/ownstate-bench``), PostgreSQL schemas in the database
``ownstate_scale`` (made if missing) of ``OWNSTATE_BENCH_POSTGRES_URL``'s server, both
named after the counts, so a quick run never replaces the full one.

Then, through the sync client, in interleaved rounds (big and small in rotating order),
each call on a random session or subject:

- ``append``: one user message appended to an existing session (p50 and p99; the item is
  popped again after, untimed, so the database keeps its counts);
- ``replay``: a whole 100-item session in replay order (``list_items(order_by="create_time
  asc")``; the replay cache is off, ``replay_cache=0``, so both read the database: the
  small database's 20,000 items would all fit in the cache, the big one's not);
- ``recall``: ``recall(subject)``, nine current facts;
- ``outstanding``: ``runs.outstanding()``, the first page (100) of the awaiting runs.

It reports each median, the ratio big/small, the bytes stored per item against its JSON
size, and the size of each table and index. Run by hand (not in CI)::

    /work/venv/bin/python bench/scale.py                                  # both, full size
    /work/venv/bin/python bench/scale.py --db sqlite --items 100000 --sessions 1000 \\
        --facts 10000 --awaiting 100                                      # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent))  # _workload, _scale_rows (at the end)

import _scale_rows as rows
from _scale_rows import FRAMEWORK, KEY_NAMES, MEMORY, STORE, TENANT, Payload, Spec
from _workload import print_table, rotate

import ownstate

perf = time.perf_counter
PG_URL = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
PG_DB = "ownstate_scale"
SEED_ITEMS = 10  # one of each position of rows.PATTERN
TABLES = ("sessions", "items", "facts", "runs")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --------------------------------------------------------------------------------------
# the seed: a few rows through the public API, whose shape the bulk rows copy


def seed(url: str, pool: Sequence[Payload]) -> None:
    with ownstate.connect(url) as client:
        store = client.session_stores.create(STORE)
        memory = client.memory_stores.create(MEMORY)
        waiting = store.add(actor_id="user:seed", session_id="seed")
        waiting.append_items([p.data for p in pool[:SEED_ITEMS]])
        done = store.add(actor_id="user:seed", session_id="seed-done")
        memory.remember("user:seed", KEY_NAMES[0], "email", confidence=0.9)
        memory.remember("user:seed", KEY_NAMES[0], "sms", confidence=0.8)
        run = client.runs.open_run(waiting, FRAMEWORK, thread_key="t-seed")
        client.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "refund",
                                               "payload": {"order": "order-4471",
                                                           "amount": 49.99}},
                                  requested_by="agent")
        other = client.runs.open_run(done, FRAMEWORK, thread_key="t-seed-done")
        client.runs.close_run(other.run_id, "done", usd_cost=0.0123, step_count=5)
        # a search indexes what a backend queued for its next search, so the seed's
        # search rows exist for the fill to copy
        client.session_stores.search_items("seed", store=STORE)
        memory.search("seed")


def _awaiting_json(template: str, since: str) -> str:
    """The seed run's ``awaiting`` text with another request time, as stored."""
    old = json.loads(template).get("requested_at")
    return template if old is None else template.replace(json.dumps(old), json.dumps(since))


def _check(what: str, got: Any, wanted: Any) -> None:
    if got != wanted:
        raise SystemExit(f"the bulk rows do not match the API's {what}: {got!r} != {wanted!r}")


# --------------------------------------------------------------------------------------
# SQLite


def sqlite_path(cache: Path, spec: Spec) -> Path:
    return cache / f"scale-{spec.tag}.db"


def _sqlite_filled(path: Path, spec: Spec) -> bool:
    if not path.exists():
        return False
    try:
        with sqlite3.connect(path) as conn:
            found = conn.execute("SELECT spec FROM bench_scale").fetchone()
    except sqlite3.Error:
        return False
    return found is not None and found[0] == spec.tag


def fill_sqlite(path: Path, spec: Spec, pool: list[Payload]) -> None:
    if _sqlite_filled(path, spec):
        log(f"sqlite: reusing {path}")
        return
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    seed(f"sqlite:///{path}", pool)
    started = perf()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -1000000")
    conn.execute("PRAGMA temp_store = MEMORY")

    def template(table: str, where: str) -> list[dict[str, Any]]:
        cur = conn.execute(f"SELECT * FROM {table} WHERE {where}")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    seeded = template("items", "1 ORDER BY id")
    for got, want in zip(seeded, pool, strict=False):
        _check("item", (got["format"], got["data"], got["role"], got["type"], got["tool_name"],
                        got["model"], got["in_tokens"], got["out_tokens"]),
               (want.format, want.data_json, *want.columns))
        (terms,) = conn.execute("SELECT terms FROM item_search WHERE rowid = ?",
                                (got["id"],)).fetchone()
        _check("item terms", terms, want.sqlite_terms)
    (session_t,) = template("sessions", "session_id = 'seed'")
    closed_t, current_t = template("facts", "1 ORDER BY fid")
    _check("fact terms", conn.execute("SELECT terms FROM fact_search WHERE rowid = ?",
                                      (current_t["fid"],)).fetchone()[0],
           rows.fact_terms(TENANT, MEMORY, current_t["key"], current_t["value"]))
    awaiting_t, done_t = template("runs", "1 ORDER BY rid")
    ids = rows.Ids(*(conn.execute(f"SELECT max({c}) FROM {t}").fetchone()[0] + 1
                     for c, t in (("sid", "sessions"), ("id", "items"), ("fid", "facts"),
                                  ("rid", "runs"))))
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
        f"AND tbl_name IN {TABLES}").fetchall()
    for name, _ in indexes:
        conn.execute(f"DROP INDEX {name}")

    def insert(table: str, template_row: dict[str, Any], made: Iterator[dict[str, Any]],
               search: list[tuple[int, str]] | None = None) -> None:
        """Insert rows, each the template row with changes; with ``search``, also the
        FTS rows the changes append to it."""
        names = list(template_row)
        sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        batch: list[tuple[Any, ...]] = []
        conn.execute("BEGIN")
        for changes in made:
            batch.append(tuple({**template_row, **changes}[n] for n in names))
            if len(batch) == 100_000:
                conn.executemany(sql, batch)
                batch.clear()
                if search:
                    conn.executemany(f"INSERT INTO {table[:-1]}_search (rowid, terms) "
                                     "VALUES (?, ?)", search)
                    search.clear()
        conn.executemany(sql, batch)
        if search:
            conn.executemany(f"INSERT INTO {table[:-1]}_search (rowid, terms) VALUES (?, ?)",
                             search)
        conn.execute("COMMIT")

    insert("sessions", session_t, rows.sessions(spec, ids))
    log(f"sqlite: {spec.sessions} sessions")

    fact_search: list[tuple[int, str]] = []

    def fact_changes() -> Iterator[dict[str, Any]]:
        for f in rows.facts(spec, ids):
            base = closed_t if f.superseded_at else current_t
            fact_search.append((f.fid, f.sqlite_terms))
            yield {**base, "fid": f.fid, "fact_id": f.fact_id, "subject": f.subject,
                   "key": f.key, "value": f.value_json, "confidence": f.confidence,
                   "valid_from": f.valid_from, "recorded_at": f.recorded_at,
                   "superseded_at": f.superseded_at, "valid_to": f.superseded_at,
                   "supersedes": f.supersedes}

    insert("facts", current_t, fact_changes(), fact_search)
    log(f"sqlite: {spec.facts} facts")

    def run_changes() -> Iterator[dict[str, Any]]:
        for r in rows.runs(spec, ids):
            base = awaiting_t if r["status"] == "awaiting_human" else done_t
            since = r.pop("awaiting_since")
            changes = {**base, **r}
            if base["awaiting"] is not None:
                changes["awaiting"] = _awaiting_json(base["awaiting"], since)
            yield changes

    insert("runs", awaiting_t, run_changes())
    log(f"sqlite: {spec.sessions} runs")
    item_sql = ("INSERT INTO items (id, sid, seq, tenant, item_id, create_time, format, data, "
                "role, type, tool_name, model, in_tokens, out_tokens) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    batch: list[tuple[Any, ...]] = []
    terms_batch: list[tuple[int, str]] = []
    conn.execute("BEGIN")
    for n, (rowid, sid, seq, item_id, stamp, p) in enumerate(rows.items(spec, ids, pool), 1):
        batch.append((rowid, sid, seq, TENANT, item_id, stamp, p.format, p.data_json,
                      *p.columns))
        terms_batch.append((rowid, p.sqlite_terms))
        if len(batch) == 100_000:
            conn.executemany(item_sql, batch)
            conn.executemany("INSERT INTO item_search (rowid, terms) VALUES (?, ?)",
                             terms_batch)
            batch.clear()
            terms_batch.clear()
            if n % 1_000_000 == 0:
                conn.execute("COMMIT")
                log(f"sqlite: {n} items")
                conn.execute("BEGIN")
    conn.executemany(item_sql, batch)
    conn.executemany("INSERT INTO item_search (rowid, terms) VALUES (?, ?)", terms_batch)
    conn.execute("COMMIT")
    log("sqlite: making the indexes again")
    for _, sql in indexes:
        conn.execute(sql)
    conn.execute("ANALYZE")
    conn.execute("CREATE TABLE bench_scale (spec TEXT NOT NULL)")
    conn.execute("INSERT INTO bench_scale VALUES (?)", (spec.tag,))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    log(f"sqlite: filled {path} in {perf() - started:.0f} s")


def sqlite_sizes(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))


# --------------------------------------------------------------------------------------
# PostgreSQL


def pg_url(spec: Spec) -> str:
    base = PG_URL.rsplit("/", 1)[0]
    return f"{base}/{PG_DB}?schema=scale_{spec.tag}&replay_cache=0"


def _copy_text(value: Any) -> str:
    if value is None:
        return "\\N"
    text = str(value)
    return (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def _pg_connect(dbname: str) -> Any:
    import psycopg

    base = PG_URL.rsplit("/", 1)[0]
    return psycopg.connect(f"{base}/{dbname}", autocommit=True)


def fill_postgres(spec: Spec, pool: list[Payload]) -> None:
    from psycopg import sql

    schema = f"scale_{spec.tag}"
    with _pg_connect(PG_URL.rsplit("/", 1)[1].split("?")[0]) as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DB,)).fetchone() \
                is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DB)))
    conn = _pg_connect(PG_DB)
    found = conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                         "AND table_name = 'bench_scale'", (schema,)).fetchone()
    if found is not None:
        log(f"postgres: reusing schema {schema}")
        conn.close()
        return
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    seed(pg_url(spec), pool)
    started = perf()
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.execute("SET session_replication_role = replica")  # no FK checks during the load
    conn.execute("SET maintenance_work_mem = '1GB'")

    def columns(table: str) -> list[str]:
        return [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position", (schema, table))]

    def template(table: str, where: str) -> list[dict[str, str]]:
        names = columns(table)
        with conn.cursor().copy(f"COPY (SELECT * FROM {table} WHERE {where}) TO STDOUT") as cp:
            lines = b"".join(bytes(b) for b in cp).decode().splitlines()
        return [dict(zip(names, line.split("\t"), strict=True)) for line in lines]

    seeded = template("items", "true ORDER BY id")
    for got, want in zip(seeded, pool, strict=False):
        _check("item", (got["format"], got["role"], got["type"], got["tool_name"]),
               (want.format, *(_copy_text(c) for c in want.columns[:3])))
        _check("item data", json.loads(got["data"].replace("\\\\", "\\")), want.data)
        same = conn.execute("SELECT %s::tsvector = %s::tsvector",
                            (got["terms"], want.pg_terms)).fetchone()[0]
        _check("item terms", (same, int(got["terms_len"])), (True, want.pg_terms_len))
    (session_t,) = template("sessions", "session_id = 'seed'")
    closed_t, current_t = template("facts", "true ORDER BY fid")
    awaiting_t, done_t = template("runs", "true ORDER BY rid")
    ids = rows.Ids(*(conn.execute(f"SELECT max({c}) + 1 FROM {t}").fetchone()[0]
                     for c, t in (("sid", "sessions"), ("id", "items"), ("fid", "facts"),
                                  ("rid", "runs"))))
    indexes = conn.execute(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = %s "
        "AND i.tablename = ANY(%s) AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
        "WHERE c.conindid = (quote_ident(i.schemaname) || '.' || quote_ident(i.indexname))"
        "::regclass)", (schema, list(TABLES))).fetchall()
    for name, _ in indexes:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))

    def copy(table: str, names: list[str],
             made: Iterator[tuple[dict[str, str], dict[str, Any]]]) -> None:
        """COPY rows, each a template row (COPY text) with changes (values)."""
        with conn.transaction(), conn.cursor().copy(
                f"COPY {table} ({', '.join(names)}) FROM STDIN") as cp:
            chunk: list[str] = []
            for template_row, changes in made:
                line = {**template_row, **{k: _copy_text(v) for k, v in changes.items()}}
                chunk.append("\t".join(line[n] for n in names))
                if len(chunk) == 20_000:
                    cp.write("\n".join(chunk) + "\n")
                    chunk.clear()
            if chunk:
                cp.write("\n".join(chunk) + "\n")

    copy("sessions", list(session_t), ((session_t, r) for r in rows.sessions(spec, ids)))
    log(f"postgres: {spec.sessions} sessions")

    def fact_changes() -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
        for f in rows.facts(spec, ids):
            closed = f.superseded_at is not None
            yield closed_t if closed else current_t, {
                   "fid": f.fid, "fact_id": f.fact_id, "subject": f.subject, "key": f.key,
                   "value": f.value_json, "confidence": f.confidence,
                   "valid_from": f.valid_from, "recorded_at": f.recorded_at,
                   "superseded_at": f.superseded_at, "valid_to": f.superseded_at,
                   "supersedes": f.supersedes, "terms": f.pg_terms,
                   "terms_len": f.pg_terms_len}

    copy("facts", list(current_t), fact_changes())
    log(f"postgres: {spec.facts} facts")
    awaiting_json = awaiting_t["awaiting"].replace("\\\\", "\\")

    def run_changes() -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
        for r in rows.runs(spec, ids):
            waiting = r["status"] == "awaiting_human"
            since = r.pop("awaiting_since")
            if waiting:
                r["awaiting"] = _awaiting_json(awaiting_json, since)
            yield awaiting_t if waiting else done_t, r

    copy("runs", list(awaiting_t), run_changes())
    log(f"postgres: {spec.sessions} runs")
    item_names = columns("items")
    _check("item columns", item_names,
           ["id", "sid", "seq", "tenant", "item_id", "create_time", "format", "data", "role",
            "type", "tool_name", "model", "in_tokens", "out_tokens", "terms", "terms_len"])
    tails = {id(p): "\t".join([_copy_text(p.format), _copy_text(p.data_json),
                               *(_copy_text(c) for c in p.columns), p.pg_terms,
                               str(p.pg_terms_len)]) for p in pool}
    with conn.transaction(), conn.cursor().copy("COPY items FROM STDIN") as cp:
        chunk: list[str] = []
        for n, (rowid, sid, seq, item_id, stamp, p) in enumerate(rows.items(spec, ids, pool), 1):
            chunk.append(f"{rowid}\t{sid}\t{seq}\t{TENANT}\t{item_id}\t{stamp}\t{tails[id(p)]}")
            if len(chunk) == 20_000:
                cp.write("\n".join(chunk) + "\n")
                chunk.clear()
                if n % 1_000_000 == 0:
                    log(f"postgres: {n} items")
        if chunk:
            cp.write("\n".join(chunk) + "\n")
    log("postgres: making the indexes again")
    for name, definition in indexes:
        index_started = perf()
        conn.execute(definition)
        log(f"postgres: {name} in {perf() - index_started:.0f} s")
    for table, column in (("sessions", "sid"), ("items", "id"), ("facts", "fid"),
                          ("runs", "rid")):
        conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                     f"(SELECT max({column}) FROM {table}))")
    # search statistics as the appends would have left them (in shard 0)
    conn.execute("DELETE FROM search_stats")
    conn.execute("INSERT INTO search_stats (tenant, kind, scope, shard, docs, length) "
                 "SELECT tenant, 'item', '', 0, count(*), sum(terms_len) FROM items "
                 "WHERE terms_len IS NOT NULL GROUP BY tenant")
    conn.execute("INSERT INTO search_stats (tenant, kind, scope, shard, docs, length) "
                 "SELECT tenant, 'fact', memory_store, 0, count(*), sum(terms_len) FROM facts "
                 "WHERE terms_len IS NOT NULL GROUP BY tenant, memory_store")
    conn.execute("SET session_replication_role = DEFAULT")
    log("postgres: VACUUM ANALYZE")
    for table in (*TABLES, "search_stats", "session_stores", "memory_stores"):
        conn.execute(f"VACUUM ANALYZE {table}")
    conn.execute("CREATE TABLE bench_scale (spec text NOT NULL)")
    conn.execute("INSERT INTO bench_scale VALUES (%s)", (spec.tag,))
    conn.close()
    log(f"postgres: filled schema {schema} in {perf() - started:.0f} s")


def postgres_sizes(spec: Spec) -> dict[str, int]:
    schema = f"scale_{spec.tag}"
    with _pg_connect(PG_DB) as conn:
        found = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid), "
            "pg_table_size(c.oid) - pg_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'i')", (schema,)).fetchall()
    sizes = {name: int(main) for name, main, _ in found}
    sizes.update({f"{name} (TOAST)": int(extra) for name, _, extra in found if extra})
    return sizes


# --------------------------------------------------------------------------------------
# measuring


class Target:
    """One database, its client, and the calls measured on it."""

    def __init__(self, label: str, url: str, spec: Spec, pool: list[Payload],
                 seed_value: int) -> None:
        self.label, self.spec = label, spec
        self.client = ownstate.connect(url)
        self.store = self.client.session_stores.get(STORE)
        self.memory = self.client.memory_stores.get(MEMORY)
        self.rng = random.Random(seed_value)
        self.messages = [p.data for p in pool if p.data.get("role") == "user"][:100]

    def _session(self) -> Any:
        return self.store.get(rows.session_id(self.rng.randrange(self.spec.sessions)))

    def append(self) -> float:
        session = self._session()
        message = self.rng.choice(self.messages)
        started = perf()
        session.append_items([message])
        took = perf() - started
        session.pop_item()
        return took

    def replay(self) -> float:
        session = self._session()
        started = perf()
        found = list(session.list_items(order_by="create_time asc"))
        took = perf() - started
        assert len(found) == self.spec.per_session, len(found)
        return took

    def recall(self) -> float:
        who = rows.subject(self.rng.randrange(self.spec.subjects))
        started = perf()
        found = self.memory.recall(who)
        took = perf() - started
        assert len(found) == len(KEY_NAMES), len(found)
        return took

    def outstanding(self) -> float:
        started = perf()
        found = self.client.runs.outstanding()
        took = perf() - started
        assert len(found) == min(100, self.spec.awaiting), len(found)
        return took


OPERATIONS = ("append", "replay", "recall", "outstanding")


def measure(big: Target, small: Target, rounds: int,
            warmup: int) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {
        op: {big.label: [], small.label: []} for op in OPERATIONS}
    for r in range(warmup + rounds):
        for op in OPERATIONS:
            for target in rotate([big, small], r):
                took: float = getattr(target, op)()
                if r >= warmup:
                    samples[op][target.label].append(took)
    return samples


def p99(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def report(backend: str, spec: Spec, small: Spec, samples: dict[str, dict[str, list[float]]],
           sizes: dict[str, int], raw_json: int, loads: tuple[str, str],
           out: dict[str, Any]) -> None:
    print(f"\n### {backend}: {spec.items:,} items, {spec.sessions:,} sessions, "
          f"{spec.facts:,} facts, {spec.awaiting:,} awaiting runs vs {small.items:,} items\n")
    print(f"load average (1, 5, 15 min) before: {loads[0]}; after: {loads[1]}\n")
    table = []
    figures: dict[str, Any] = {}
    for op in OPERATIONS:
        b, s = samples[op]["big"], samples[op]["small"]
        stats = [("p50", statistics.median)] + ([("p99", p99)] if op == "append" else [])
        for name, fn in stats:
            fb, fs = fn(b) * 1000, fn(s) * 1000
            table.append([f"{op} {name}", f"{fb:.3f}", f"{fs:.3f}", f"{fb / fs:.2f}x",
                          "yes" if fb / fs <= 1.25 else "no"])
            figures[f"{op} {name}"] = {"big_ms": fb, "small_ms": fs, "ratio": fb / fs}
    print_table(["operation", "big (ms)", "almost empty (ms)", "ratio", "within 1.25x"],
                table)
    if sizes:
        print_table(["table or index", "bytes", "per item"],
                    [[name, f"{size:,}", f"{size / spec.items:.1f}"]
                     for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])
                     if size >= 65536])
    per_item = sum(v for k, v in sizes.items() if _is_item_storage(k)) / spec.items
    if sizes:
        print(f"items: {per_item:.0f} bytes stored per item (table, TOAST, indexes and "
              f"search terms) for {raw_json / spec.items:.0f} bytes of JSON "
              f"({per_item / (raw_json / spec.items):.2f}x)\n")
    out[backend] = {"spec": spec.__dict__, "small": small.__dict__, "figures": figures,
                    "sizes": sizes, "raw_json_bytes": raw_json, "bytes_per_item": per_item,
                    "load_average": loads}


def _is_item_storage(name: str) -> bool:
    return name.startswith(("items", "item_search", "sqlite_autoindex_items"))


def raw_json_bytes(spec: Spec, pool: list[Payload]) -> int:
    sizes = [len(p.data_json.encode()) for p in pool]
    full, rest = divmod(spec.items, len(pool))
    return full * sum(sizes) + sum(sizes[:rest])


def small_spec(spec: Spec) -> Spec:
    return Spec(items=200 * spec.per_session, sessions=200, facts=2000, awaiting=150)


def run(backend: str, spec: Spec, args: argparse.Namespace, pool: list[Payload],
        out: dict[str, Any]) -> None:
    small = small_spec(spec)
    cache = Path(args.cache).expanduser()
    if backend == "sqlite":
        for s in (spec, small):
            fill_sqlite(sqlite_path(cache, s), s, pool)
        urls = [f"sqlite:///{sqlite_path(cache, s)}?replay_cache=0" for s in (spec, small)]
    else:
        for s in (spec, small):
            fill_postgres(s, pool)
        urls = [pg_url(s) for s in (spec, small)]
    if args.fill_only:
        return
    before = load_average()
    big_t = Target("big", urls[0], spec, pool, 1)
    small_t = Target("small", urls[1], small, pool, 2)
    log(f"{backend}: measuring {args.rounds} rounds")
    samples = measure(big_t, small_t, args.rounds, args.warmup)
    big_t.client.close()
    small_t.client.close()
    loads = (before, load_average())
    sizes: dict[str, int] = {}
    if args.sizes:
        log(f"{backend}: sizing tables and indexes")
        sizes = (sqlite_sizes(sqlite_path(cache, spec)) if backend == "sqlite"
                 else postgres_sizes(spec))
    report(backend, spec, small, samples, sizes, raw_json_bytes(spec, pool), loads, out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", choices=("sqlite", "postgres"),
                        default=["sqlite", "postgres"])
    parser.add_argument("--items", type=int, default=10_000_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--awaiting", type=int, default=10_000)
    parser.add_argument("--cache", default="~/.cache/ownstate-bench",
                        help="where the SQLite files are kept between runs")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--fill-only", action="store_true")
    parser.add_argument("--no-sizes", dest="sizes", action="store_false",
                        help="skip sizing tables (SQLite reads every page for it)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    spec = Spec(args.items, args.sessions, args.facts, args.awaiting)
    spec.check()
    pool = rows.payloads()
    print(f"ownstate {ownstate.__version__}, Python {platform.python_version()}, "
          f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs")
    out: dict[str, Any] = {}
    for backend in args.db:
        run(backend, spec, args, pool, out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
