"""Benchmarks of ownstate's framework adapters against the frameworks' own session stores.

The conversation-turn workload of ``_workload`` (each turn loads the whole history, then
appends one ~400-byte user message and one ~400-byte assistant message), driven through
each framework's session interface, so that what is measured is what an application using
the framework pays per turn:

- ``agents``: the OpenAI Agents SDK. ``ownstate.adapters.openai_agents.OwnstateSession``
  on SQLite (built with ``from_url``, which opens a sync client, and built from an
  ``AsyncClient``) against ``agents.SQLiteSession`` on a file in the same directory. A turn
  is ``await session.get_items()``, then ``await session.add_items([user, assistant])``.
  The plain async client, with no adapter, is shown for reference.
- ``adk-sqlite`` and ``adk-postgres``: Google ADK.
  ``ownstate.adapters.adk.OwnstateSessionService`` (sync client from ``from_url``, and an
  ``AsyncClient``) against ``google.adk.sessions.DatabaseSessionService``, on SQLite files
  in one directory (ADK's URL is ``sqlite+aiosqlite:///...``) and on PostgreSQL (ADK's URL
  is ``postgresql+asyncpg://...`` with ``search_path`` set to a fresh schema; ownstate's
  has ``?schema=`` of another fresh schema; both are dropped afterwards). A turn is
  ``get_session(...)``, then ``append_event`` of a user event and of a model event (each
  ~400 bytes of text; the model event carries ``state_delta={"turn": n}``) to the session
  ``get_session`` returned.

Implementations advance in lockstep, in rotating order; each table gives the median ms of
the first and last ``--window`` turns and the ratio of ownstate to the competitor over the
last ones. Run by hand (not in CI)::

    /work/venv/bin/python bench/adapter_sessions.py                   # all three, T=200,500
    /work/venv/bin/python bench/adapter_sessions.py agents --turns 500

PostgreSQL is ``OWNSTATE_BENCH_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Needs the ``bench`` extra:
``openai-agents``, ``google-adk`` (which brings ``aiosqlite``), ``sqlalchemy[asyncio]``
and ``asyncpg``; ``adk-postgres`` also needs ``psycopg`` (the ``postgres`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import date
from importlib.metadata import version
from pathlib import Path
from typing import Any

import ownstate

sys.path.append(str(Path(__file__).resolve().parent))  # after site-packages: see _workload
from _workload import (
    OwnstateAsyncTurns,
    Pair,
    conversation,
    print_turns_header,
    print_turns_table,
    turns_round,
    turns_rows,
)

POSTGRES_URL = os.environ.get("OWNSTATE_BENCH_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
SESSION_ID = "bench-session"
APP_NAME = "bench-app"
USER_ID = "bench-user"

# --------------------------------------------------------------------------------------
# helpers


@contextlib.contextmanager
def scratch_dir(base: str | None) -> Iterator[Path]:
    """A fresh directory for this run's database files (all on one filesystem)."""
    path = Path(tempfile.mkdtemp(prefix="ownstate-bench-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def postgres_url(schema: str) -> str:
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}schema={schema}"


@contextlib.asynccontextmanager
async def fresh_schema(prefix: str) -> AsyncIterator[str]:
    """A new, empty PostgreSQL schema, dropped (with everything in it) afterwards."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
    try:
        await conn.execute(f"CREATE SCHEMA {name}")
        yield name
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await conn.close()


def environment(parts: Sequence[str]) -> str:
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    server = ""
    if "adk-postgres" in parts:
        import psycopg

        with psycopg.connect(POSTGRES_URL) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        server = f", PostgreSQL {row[0] if row else '?'} on loopback"
    packages = ", ".join(f"{name} {version(name)}" for name in (
        "openai-agents", "google-adk", "sqlalchemy", "aiosqlite", "asyncpg"))
    return (f"{date.today().isoformat()}, Python {platform.python_version()}, SQLite "
            f"{sqlite3.sqlite_version}{server}, {packages}, {os.cpu_count()} CPUs, "
            f"{platform.machine()}, {load}, ownstate from {Path(ownstate.__file__).parent}")


def run_rounds(tables: Sequence[tuple[str, Callable[[list[Pair], int], Any]]],
               variants: Sequence[Any], baseline: str, competitor: str, target: str,
               args: argparse.Namespace) -> None:
    """Warm up, then run ``args.rounds`` rounds of every conversation length and print a
    table each. ``tables`` is (title, run) pairs: ``run(pairs, r)`` is one ``turns_round``
    (a coroutine) on databases of its own."""
    names = [cls.name for cls in variants]
    for title, run in tables:
        print(f"### {title}\n")
        rows = []
        asyncio.run(run(conversation(10, seed=7), -1))  # warm-up
        for turns in args.turns:
            pairs = conversation(turns)
            rounds = []
            for r in range(args.rounds):
                gc.collect()
                rounds.append(asyncio.run(run(pairs, r)))
            rows += turns_rows(turns, names, baseline, args.window, rounds)
        print_turns_table(rows, args.window, competitor)
        print(f"Target: {target}.\n")


# --------------------------------------------------------------------------------------
# (a) OpenAI Agents SDK


class AgentsTurns:
    """``agents.SQLiteSession`` on a file: get_items(), then add_items()."""

    name = "agents.SQLiteSession"
    session: Any  # SQLiteSession here, OwnstateSession in the subclasses

    async def open(self, path: Path) -> None:
        from agents import SQLiteSession

        self.session = SQLiteSession(SESSION_ID, str(path))

    async def turn(self, user: dict[str, Any], assistant: dict[str, Any]) -> list[Any]:
        history: list[Any] = await self.session.get_items()
        await self.session.add_items([user, assistant])
        return history

    async def close(self) -> None:
        self.session.close()


class OwnstateSessionSyncTurns(AgentsTurns):
    """``OwnstateSession.from_url``: the adapter over a sync client it opens."""

    name = "OwnstateSession (from_url, sync client)"

    async def open(self, path: Path) -> None:
        from ownstate.adapters.openai_agents import OwnstateSession

        self.session = OwnstateSession.from_url(SESSION_ID, sqlite_url(path))


class OwnstateSessionAsyncTurns(AgentsTurns):
    """``OwnstateSession`` built from an ``AsyncClient``."""

    name = "OwnstateSession (AsyncClient)"

    async def open(self, path: Path) -> None:
        from ownstate.adapters.openai_agents import OwnstateSession

        self.client = await ownstate.connect_async(sqlite_url(path))
        self.session = OwnstateSession(SESSION_ID, self.client)

    async def close(self) -> None:
        await self.client.close()


class PlainOwnstateTurns(OwnstateAsyncTurns):
    """The async client with no adapter, for reference: what the adapter adds to it."""

    name = "ownstate AsyncClient, no adapter (reference)"


AGENTS_VARIANTS = (AgentsTurns, OwnstateSessionSyncTurns, OwnstateSessionAsyncTurns,
                   PlainOwnstateTurns)


def bench_agents(args: argparse.Namespace, tmp: Path) -> None:
    async def run(pairs: list[Pair], r: int) -> dict[str, list[float]]:
        async def open_variant(v: Any) -> None:
            db = tmp / f"agents-{len(pairs)}-{r}-{type(v).__name__}.db"
            await (v.open(sqlite_url(db)) if isinstance(v, PlainOwnstateTurns)
                   else v.open(db))

        return await turns_round([cls() for cls in AGENTS_VARIANTS], open_variant, pairs, r)

    run_rounds([("OpenAI Agents SDK sessions on SQLite", run)], AGENTS_VARIANTS,
               AgentsTurns.name, "SQLiteSession",
               "OwnstateSession <= 1.0x SQLiteSession per turn", args)


# --------------------------------------------------------------------------------------
# (b) Google ADK


class Replayed:
    """The events a turn loaded. ``turns_round`` compares the last turn's history with the
    workload's items; the events are turned back into those items only then, so that the
    conversion is not timed."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def __eq__(self, other: object) -> bool:
        return [as_item(e) for e in self.events] == other

    __hash__ = None  # type: ignore[assignment]


def as_item(event: Any) -> dict[str, Any]:
    """The workload item an event was made from (see ``AdkTurns.turn``)."""
    text = event.content.parts[0].text
    if event.author == "user":
        return {"role": "user", "content": text}
    return {"id": event.id, "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


class AdkTurns:
    """ADK's ``DatabaseSessionService``: get_session(), then append_event() twice."""

    name = "DatabaseSessionService"

    def build(self, url: str, **options: Any) -> Any:
        from google.adk.sessions import DatabaseSessionService

        return DatabaseSessionService(url, **options)

    async def open(self, url: str, **options: Any) -> None:
        self.service = self.build(url, **options)
        await self.service.create_session(app_name=APP_NAME, user_id=USER_ID,
                                          session_id=SESSION_ID)

    async def turn(self, user: dict[str, Any], assistant: dict[str, Any]) -> Replayed:
        from google.adk.events import Event, EventActions
        from google.genai import types

        service = self.service
        session = await service.get_session(app_name=APP_NAME, user_id=USER_ID,
                                            session_id=SESSION_ID)
        history = Replayed(list(session.events))
        n = len(history.events) // 2
        if session.state.get("turn", -1) != n - 1:
            raise SystemExit(f"{self.name} lost the session state at turn {n}")
        asked = Event(invocation_id=f"inv-{n}", author="user", content=types.Content(
            role="user", parts=[types.Part(text=user["content"])]))
        await service.append_event(session, asked)
        # The model's event carries the assistant message's id, so that the history can be
        # checked against the workload's items exactly.
        answered = Event(
            id=assistant["id"], invocation_id=f"inv-{n}", author="bench_agent",
            content=types.Content(role="model",
                                  parts=[types.Part(text=assistant["content"][0]["text"])]),
            actions=EventActions(state_delta={"turn": n}))
        # Both services order events by timestamp: never let two of them tie.
        answered.timestamp = max(answered.timestamp, asked.timestamp + 1e-6)
        await service.append_event(session, answered)
        return history

    async def close(self) -> None:
        await self.service.close()


class OwnstateServiceSyncTurns(AdkTurns):
    """``OwnstateSessionService.from_url``: the adapter over a sync client it opens."""

    name = "OwnstateSessionService (from_url, sync client)"

    def build(self, url: str, **options: Any) -> Any:
        from ownstate.adapters.adk import OwnstateSessionService

        return OwnstateSessionService.from_url(url)

    async def close(self) -> None:
        self.service.close()


class OwnstateServiceAsyncTurns(AdkTurns):
    """``OwnstateSessionService`` built from an ``AsyncClient``."""

    name = "OwnstateSessionService (AsyncClient)"

    async def open(self, url: str, **options: Any) -> None:
        from ownstate.adapters.adk import OwnstateSessionService

        self.client = await ownstate.connect_async(url)
        self.service = OwnstateSessionService(self.client)
        await self.service.create_session(app_name=APP_NAME, user_id=USER_ID,
                                          session_id=SESSION_ID)

    async def close(self) -> None:
        await self.client.close()


ADK_VARIANTS = (AdkTurns, OwnstateServiceSyncTurns, OwnstateServiceAsyncTurns)
ADK_TARGET = "OwnstateSessionService <= 0.2x DatabaseSessionService per turn"


def bench_adk_sqlite(args: argparse.Namespace, tmp: Path) -> None:
    async def run(pairs: list[Pair], r: int) -> dict[str, list[float]]:
        async def open_variant(v: Any) -> None:
            db = (tmp / f"adk-{len(pairs)}-{r}-{type(v).__name__}.db").resolve()
            await v.open(f"sqlite+aiosqlite:///{db}" if type(v) is AdkTurns
                         else sqlite_url(db))

        return await turns_round([cls() for cls in ADK_VARIANTS], open_variant, pairs, r)

    run_rounds([("Google ADK session services on SQLite", run)], ADK_VARIANTS,
               AdkTurns.name, "DatabaseSessionService", ADK_TARGET, args)


def bench_adk_postgres(args: argparse.Namespace) -> None:
    adk_url = POSTGRES_URL.replace("postgresql://", "postgresql+asyncpg://", 1)

    async def run(pairs: list[Pair], r: int) -> dict[str, list[float]]:
        # Each implementation in a fresh schema of its own, dropped after the round.
        async with contextlib.AsyncExitStack() as stack:
            schemas = {cls.name: await stack.enter_async_context(fresh_schema("bench_adk"))
                       for cls in ADK_VARIANTS}

            async def open_variant(v: Any) -> None:
                schema = schemas[v.name]
                if type(v) is AdkTurns:
                    await v.open(adk_url, connect_args={
                        "server_settings": {"search_path": schema}})
                else:
                    await v.open(postgres_url(schema))

            return await turns_round([cls() for cls in ADK_VARIANTS], open_variant, pairs,
                                     r)

    run_rounds([("Google ADK session services on PostgreSQL", run)], ADK_VARIANTS,
               AdkTurns.name, "DatabaseSessionService", ADK_TARGET, args)


# --------------------------------------------------------------------------------------


PARTS = ("agents", "adk-sqlite", "adk-postgres")


def turn_counts(values: Sequence[str]) -> list[int]:
    """``--turns 200 500`` and ``--turns 200,500`` alike."""
    try:
        counts = [int(v) for value in values for v in value.split(",") if v]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--turns: {exc}") from exc
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("--turns wants positive integers")
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("parts", nargs="*", metavar="part",
                        help=f"which to run, of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--turns", nargs="+", default=["200,500"],
                        help="conversation lengths (default 200,500)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="conversations per length and implementation")
    parser.add_argument("--window", type=int, default=20,
                        help="how many first and last turns the medians cover")
    parser.add_argument("--dir", default=None,
                        help="parent of the scratch directory (default: the system temp dir)")
    args = parser.parse_args(argv)
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    parts = args.parts or list(PARTS)
    try:
        args.turns = turn_counts(args.turns)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))

    print(f"{environment(parts)}\n$ {Path(sys.executable)} {' '.join(sys.argv)}\n")
    print_turns_header(args.rounds, args.window)
    started = time.perf_counter()
    with scratch_dir(args.dir) as tmp:
        if "agents" in parts:
            bench_agents(args, tmp)
        if "adk-sqlite" in parts:
            bench_adk_sqlite(args, tmp)
    if "adk-postgres" in parts:
        bench_adk_postgres(args)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
