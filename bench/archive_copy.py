"""Benchmarks of ``ownstate copy`` and of archive export and import.

Two subcommands; each measures ownstate and the competitor in the same process, on the
same server, in fresh schemas (dropped afterwards), and prints a Markdown table:

- ``copy``: ``ownstate copy`` of a SQLite database holding ``--items`` items (default
  1,000,000, in sessions of ``--per-session``) into PostgreSQL, against PostgreSQL
  ``COPY ... FROM STDIN`` (psycopg's ``copy.write_row``, the rows already in memory) of
  the same rows as ownstate stores them, search terms included (computed before the
  clock starts, as ``tsvector`` in binary): once into a plain table with the same columns
  and no index, once into ownstate's own ``items`` table (its indexes, the GIN index on
  the terms among them, its sessions already there), both in binary format (the faster
  one) with the rows already typed. The copy is
  timed whole (reading SQLite included), then ``--verify`` separately. With ``--roles
  superuser,app`` the copy is also run as the application role (a schema owned by a role
  of its own, migrated with ``--app-role``): row-level security binds that role, so its
  items go through a temporary table; ``superuser-temp`` runs the superuser's copy
  through that temporary table too (what it costs, without the policies' checks). Rounds
  rotate the order; medians are reported.
- ``rates``: export to an archive and import from it, items per second, for every
  backend that transfers (memory, SQLite, PostgreSQL, Redis; ``--backends`` picks some),
  on ``--items`` items (default 200,000).

The SQLite source is built once through the public API and kept in ``--dir`` (default:
the system temp dir) between runs. Run by hand (not in CI)::

    /work/venv/bin/python bench/archive_copy.py copy
    /work/venv/bin/python bench/archive_copy.py rates

The servers are ``OWNSTATE_BENCH_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``) and ``OWNSTATE_BENCH_REDIS_URL`` (default
``redis://127.0.0.1:6379/0``; each round under a prefix of its own, deleted afterwards).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/redis.py is named like the redis package: keep this directory off the import path
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from datetime import date, datetime  # noqa: E402
from typing import Any  # noqa: E402

import psycopg  # noqa: E402

import ownstate  # noqa: E402
from ownstate import archive  # noqa: E402
from ownstate.backends.ports.search import item_text, terms  # noqa: E402
from ownstate.backends.postgres._tsvector import item_vector_binary  # noqa: E402

PG = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("OWNSTATE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
KINDS = ("memory", "sqlite", "postgres", "redis")
_COLUMNS = ("sid, seq, tenant, item_id, create_time, format, data, role, type, tool_name, "
            "model, in_tokens, out_tokens, terms, terms_len")
#: the competitor at its best: binary COPY, the client's rows already typed, the search
#: terms already computed (in tsvector's binary form, sent as bytea)
_TYPES = ["int8", "int8", "text", "text", "timestamptz", "text", "text", "text", "text",
          "text", "text", "int8", "int8", "bytea", "int4"]


def _message(n: int) -> dict[str, Any]:
    role = "user" if n % 2 == 0 else "assistant"
    return {"type": "message", "role": role,
            "content": [{"type": "input_text" if role == "user" else "output_text",
                         "text": f"turn {n}: " + "the quick brown fox jumps over " * 5}]}


def source_db(directory: Path, items: int, per_session: int) -> str:
    """A SQLite database of ``items`` items, built once and kept."""
    path = directory / f"ownstate-copy-{items}-{per_session}.db"
    url = f"sqlite:///{path}"
    if path.exists():
        return url
    partial = path.with_suffix(".partial")
    for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
        leftover.unlink(missing_ok=True)
    started = time.perf_counter()
    with ownstate.connect(f"sqlite:///{partial}") as client:
        store = client.session_stores.create("bench")
        for s in range(0, items, per_session):
            session = store.add(actor_id=f"user:{s // per_session % 100}",
                                session_id=f"session-{s // per_session:06d}")
            count = min(per_session, items - s)
            for first in range(0, count, 1000):
                session.append_items([_message(n) for n in range(first, min(count,
                                                                            first + 1000))])
    partial.rename(path)
    print(f"built {path} in {time.perf_counter() - started:.0f} s")
    return url


def _schema_url(schema: str) -> str:
    return f"{PG}{'&' if '?' in PG else '?'}schema={schema}"


def _drop_prefix(prefix: str) -> None:
    import redis

    server = redis.Redis.from_url(REDIS)
    batch = []
    for key in server.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            server.delete(*batch)
            batch = []
    if batch:
        server.delete(*batch)
    server.close()


def _drop(schema: str) -> None:
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _rows(url: str) -> tuple[list[tuple[Any, ...]], list[tuple[str, str]]]:
    """The source's item rows as COPY sends them (session key in place of sid), and its
    sessions."""
    import sqlite3

    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        sessions = [(r[0], r[1]) for r in conn.execute(
            "SELECT store, session_id FROM sessions ORDER BY sid")]
        rows = list(conn.execute(
            "SELECT i.sid, i.seq, i.tenant, i.item_id, i.create_time, i.format, i.data, "
            "i.role, i.type, i.tool_name, i.model, i.in_tokens, i.out_tokens "
            "FROM items i ORDER BY i.sid, i.seq"))
    stamps: dict[str, datetime] = {}
    # the rows as ownstate stores them: with each item's search terms (the store indexes
    # its items), computed here, before the clock starts
    typed = [(*r[:4], stamps.setdefault(r[4], datetime.fromisoformat(r[4])), *r[5:],
              *item_vector_binary(r[2], terms(item_text(json.loads(r[6])))))
             for r in rows]
    return typed, sessions


async def _copy_plain(rows: list[tuple[Any, ...]]) -> float:
    schema = f"b_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
        await conn.execute(
            f"CREATE TABLE {schema}.items (sid bigint, seq bigint, tenant text, item_id text, "
            "create_time timestamptz, format text, data json, role text, type text, "
            "tool_name text, model text, in_tokens bigint, out_tokens bigint, "
            "terms tsvector, terms_len integer)")
        started = time.perf_counter()
        async with conn.transaction(), conn.cursor() as cur, cur.copy(
                f"COPY {schema}.items ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_TYPES)
            for row in rows:
                await copy.write_row(row)
        took = time.perf_counter() - started
    _drop(schema)
    return took


async def _copy_own_table(rows: list[tuple[Any, ...]], sessions: list[tuple[str, str]]) -> float:
    schema = f"b_{uuid.uuid4().hex[:10]}"
    client = await ownstate.connect_async(_schema_url(schema))
    try:
        store = await client.session_stores.create("bench")
        for _, session_id in sessions:
            await store.add(actor_id="user:0", session_id=session_id)
    finally:
        await client.close()
    async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as conn:
        # SQLite's sids are 1..S in session order, and so are a fresh schema's
        started = time.perf_counter()
        async with conn.transaction(), conn.cursor() as cur, cur.copy(
                f"COPY {schema}.items ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_TYPES)
            for row in rows:
                await copy.write_row(row)
        took = time.perf_counter() - started
    _drop(schema)
    return took


def _as_role(url: str, role: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[-1]}"


class _Roles:
    """An owner role and an application role made for the run (as the URL's superuser),
    dropped afterwards with everything they own."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.owner, self.app = f"ob_owner_{tag}", f"ob_app_{tag}"

    def __enter__(self) -> _Roles:
        with psycopg.connect(PG, autocommit=True) as conn:
            for role in (self.owner, self.app):
                conn.execute(f"CREATE ROLE {role} LOGIN")
        return self

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(PG, autocommit=True) as conn:
            for role in (self.app, self.owner):
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")


async def _target(schema: str, roles: _Roles | None) -> ownstate.AsyncClient:
    """A client on a new schema: as the URL's role, or (``roles``) as the application
    role of a schema its owner role migrated."""
    if roles is None:
        return await ownstate.connect_async(_schema_url(schema))
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {roles.owner}")
    owner = await ownstate.connect_async(_as_role(_schema_url(schema), roles.owner))
    try:
        await owner.grant_app_role(roles.app)
    finally:
        await owner.close()
    return await ownstate.connect_async(_as_role(_schema_url(schema), roles.app),
                                        migrate=False)


async def _never(cursor: Any, table: str) -> bool:
    return False


async def _ownstate_copy(source: str, verify: bool, roles: _Roles | None = None, *,
                         through_temp: bool = False) -> tuple[float, float]:
    if through_temp:  # as if row-level security bound the role
        from ownstate.backends.postgres._core import Cursor

        bypasses = Cursor._bypasses
        Cursor._bypasses = _never  # type: ignore[method-assign]
        try:
            return await _ownstate_copy(source, verify, roles)
        finally:
            Cursor._bypasses = bypasses  # type: ignore[method-assign]
    schema = f"b_{uuid.uuid4().hex[:10]}"
    src = await ownstate.connect_async(source, migrate=False)
    dst = await _target(schema, roles)
    try:
        started = time.perf_counter()
        report = await archive.acopy(src, dst)
        took = time.perf_counter() - started
        checked = 0.0
        if verify:
            started = time.perf_counter()
            differences = await archive.compare(src.backend, dst.backend,
                                                tenants=report.tenants,
                                                parts=list(report.rows))
            checked = time.perf_counter() - started
            assert not differences, differences[:5]
    finally:
        await src.close()
        await dst.close()
    _drop(schema)
    return took, checked


def _copy_rounds(args: argparse.Namespace, source: str, rows: list[tuple[Any, ...]],
                 sessions: list[tuple[str, str]], kinds: list[str],
                 roles: _Roles | None) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        "plain": [], "own": [], "ownstate": [], "verify": [], "ownstate-temp": [],
        "verify-temp": [], "ownstate-app": [], "verify-app": []}
    variants: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("plain", lambda: _copy_plain(rows)),
        ("own", lambda: _copy_own_table(rows, sessions)),
    ]
    if "superuser" in kinds:
        variants.append(("ownstate", lambda: _ownstate_copy(source, args.verify)))
    if "superuser-temp" in kinds:
        variants.append(("ownstate-temp", lambda: _ownstate_copy(source, args.verify,
                                                                 through_temp=True)))
    if roles is not None:
        variants.append(("ownstate-app", lambda: _ownstate_copy(source, args.verify, roles)))
    for round_ in range(args.rounds):
        turn = round_ % len(variants)
        for name, run in variants[turn:] + variants[:turn]:
            result = asyncio.run(run())
            if name.startswith("ownstate"):
                times[name].append(result[0])
                if args.verify:
                    times[name.replace("ownstate", "verify")].append(result[1])
            else:
                times[name].append(result)
            print(f"round {round_ + 1} {name}: {result}", flush=True)
    return times


def copy_command(args: argparse.Namespace) -> None:
    source = source_db(Path(args.dir), args.items, args.per_session)
    rows, sessions = _rows(source)
    assert len(rows) == args.items
    load = os.getloadavg()
    kinds = args.roles.split(",")
    with contextlib.ExitStack() as stack:
        roles = stack.enter_context(_Roles()) if "app" in kinds else None
        times = _copy_rounds(args, source, rows, sessions, kinds, roles)
    median = {k: statistics.median(v) for k, v in times.items() if v}
    rate = {k: args.items / v for k, v in median.items()}
    print(f"\n{args.items:,} items, {len(sessions):,} sessions, {args.rounds} rounds, "
          f"{date.today()}, load {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"(at the start: {' '.join(f'{x:.1f}' for x in load)}), "
          f"Python {platform.python_version()}")
    ours = [k for k in ("ownstate", "ownstate-temp", "ownstate-app") if k in median]
    print(f"\n| what | median s ({args.rounds} rounds) | items/s | ownstate copy as a share "
          f"({' / '.join(ours)}) |")
    print("|---|---|---|---|")
    for key, label in (("plain", "PostgreSQL COPY into a plain table (no index)"),
                       ("own", "PostgreSQL COPY into ownstate's items table (its indexes)"),
                       ("ownstate", "ownstate copy SQLite → PostgreSQL"),
                       ("ownstate-temp", "the same through the temporary table"),
                       ("ownstate-app", "ownstate copy SQLite → PostgreSQL, as the app role")):
        if key in median:
            shares = " / ".join(f"{rate[k] / rate[key]:.0%}" for k in ours)
            print(f"| {label} | {median[key]:.2f} | {rate[key]:,.0f} | {shares} |")
    for key in ("verify", "verify-temp", "verify-app"):
        if key in median:
            print(f"| --verify afterwards ({key}; both sides read again) | "
                  f"{median[key]:.2f} | {rate[key]:,.0f} | |")


async def _rates(source: str, kind: str, directory: Path) -> tuple[float, float]:
    """Seconds to import the source's archive into a new ``kind`` database, and to export
    that database again."""
    first = directory / "rates-source.tar"
    if not first.exists():
        src = await ownstate.connect_async(source, migrate=False)
        try:
            await archive.aexport(src, first)
        finally:
            await src.close()
    schema = f"b_{uuid.uuid4().hex[:10]}"
    url = {"memory": f"memory://{schema}", "sqlite": f"sqlite:///{directory}/{schema}.db",
           "postgres": _schema_url(schema),
           "redis": f"{REDIS}{'&' if '?' in REDIS else '?'}prefix={schema}"}[kind]
    client = await ownstate.connect_async(url)
    try:
        started = time.perf_counter()
        await archive.aimport_archive(client, first)
        imported = time.perf_counter() - started
        started = time.perf_counter()
        await archive.aexport(client, directory / f"rates-{kind}.tar")
        exported = time.perf_counter() - started
    finally:
        await client.close()
    if kind == "postgres":
        _drop(schema)
    if kind == "redis":
        _drop_prefix(schema)
    return imported, exported


def rates_command(args: argparse.Namespace) -> None:
    source = source_db(Path(args.dir), args.items, args.per_session)
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        results = {kind: [asyncio.run(_rates(source, kind, Path(scratch)))
                          for _ in range(args.rounds)]
                   for kind in args.backends.split(",")}
    print(f"\n{args.items:,} items, {args.rounds} rounds, {date.today()}, "
          f"load {os.getloadavg()[0]:.1f}")
    print("\n| backend | import items/s | export items/s |")
    print("|---|---|---|")
    for kind, runs in results.items():
        imported = statistics.median(r[0] for r in runs)
        exported = statistics.median(r[1] for r in runs)
        print(f"| {kind} | {args.items / imported:,.0f} | {args.items / exported:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir())
    sub = parser.add_subparsers(required=True)
    copy = sub.add_parser("copy")
    copy.add_argument("--items", type=int, default=1_000_000)
    copy.add_argument("--per-session", type=int, default=1_000)
    copy.add_argument("--rounds", type=int, default=3)
    copy.add_argument("--verify", action="store_true")
    copy.add_argument("--roles", default="superuser",
                      help="whose copy to time, comma-separated: superuser (the URL's role), "
                           "superuser-temp (the same through the temporary table a role "
                           "bound by row-level security loads through), app (the "
                           "application role; the URL's role must be a superuser)")
    copy.set_defaults(run=copy_command)
    rates = sub.add_parser("rates")
    rates.add_argument("--items", type=int, default=200_000)
    rates.add_argument("--per-session", type=int, default=1_000)
    rates.add_argument("--rounds", type=int, default=1)
    rates.add_argument("--backends", default=",".join(KINDS),
                       help="which backends, comma-separated (default: all four)")
    rates.set_defaults(run=rates_command)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
