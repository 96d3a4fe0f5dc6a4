"""The writes that open runs keep the statistics of the tables runs grow current
(``backends/postgres/_statistics.py``): the run whose ``rid`` is a power of two from
``FIRST_CHECKED`` analyzes those tables that doubled since their statistics or have none,
whatever their size, so that the generic plans of the checkpoint operations are made for
the tables as they are (on a server whose autovacuum is off, or has not come round)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from conftest import POSTGRES_URL, _require  # noqa: E402

from ownstate.backends.ports.checkpoints import NewCheckpoint  # noqa: E402
from ownstate.backends.postgres import PostgresBackend, _statistics  # noqa: E402
from ownstate.errors import BackendUnavailable  # noqa: E402
from ownstate.model import CheckpointScope  # noqa: E402

_NOW = datetime(2030, 1, 1, tzinfo=UTC)
_TABLES = ("runs", "sessions", "checkpoints")


@pytest.fixture
def schema() -> Iterator[str]:
    """A schema name nobody uses yet; dropped after the test."""
    _require("postgres")
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _counted(schema: str) -> dict[str, float]:
    """``pg_class.reltuples`` of the tables: -1 for one never analyzed."""
    with psycopg.connect(POSTGRES_URL) as conn:
        return {r[0]: r[1] for r in conn.execute(
            "SELECT c.relname, c.reltuples FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (schema, list(_TABLES)))}


Opener = Callable[[PostgresBackend, int], Awaitable[str]]


async def _open_run(backend: PostgresBackend, n: int) -> str:
    await backend.create_session("default", "lg", f"s{n}", "a", {}, _NOW)
    run = await backend.open_run("default", "lg", f"s{n}", f"r{n}", "langgraph", None,
                                 "me", 60.0, _NOW)
    return run.run_id


async def _put_opening_run(backend: PostgresBackend, n: int) -> str:
    await backend.create_session("default", "lg", f"s{n}", "a", {}, _NOW)
    run, stored = await backend.put_checkpoint_opening_run(
        "default", CheckpointScope("a", "lg", f"s{n}", f"r{n}"),
        NewCheckpoint("", f"c{n}", None, "t", b"x" * 200, "{}"), f"r{n}", "langgraph", None,
        "me", 60.0, _NOW)
    assert stored.checkpoint_id == f"c{n}"
    return run.run_id


def _scenario(schema: str, steps: Callable[[PostgresBackend], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        backend = PostgresBackend(POSTGRES_URL, schema=schema)
        await backend.setup(migrate=True)
        try:
            await backend.create_store("default", "lg", _NOW)
            return await steps(backend)
        finally:
            await backend.close()

    return asyncio.run(main())


@pytest.mark.parametrize("open_one", [_open_run, _put_opening_run],
                         ids=["open_run", "put_opening_run"])
def test_the_run_opened_at_a_power_of_two_analyzes_the_tables_runs_grow(
        schema: str, open_one: Opener) -> None:
    assert _statistics.FIRST_CHECKED == 32

    async def steps(backend: PostgresBackend) -> list[dict[str, float]]:
        seen = []
        for n in range(1, 64):
            await open_one(backend, n)
            if n in (31, 32, 63):
                seen.append(_counted(schema))
        return seen

    before, at, after = _scenario(schema, steps)
    assert set(before.values()) == {-1}  # never analyzed, whatever was stored
    assert at["runs"] == at["sessions"] == 32
    # the checkpoints too, where the opening write stored them; an empty table is left
    assert at["checkpoints"] == (32 if open_one is _put_opening_run else -1)
    assert after == at  # nothing analyzed between powers of two


def test_an_analyze_that_fails_leaves_the_run_opened(
        schema: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def refused(*args: Any) -> list[str]:
        raise BackendUnavailable("the server went away")

    monkeypatch.setattr(_statistics, "analyze_grown", refused)

    async def steps(backend: PostgresBackend) -> tuple[str, str]:
        for n in range(1, 32):
            await _open_run(backend, n)
        opened = await _put_opening_run(backend, 32)
        return opened, (await backend.get_run("default", opened)).status

    with caplog.at_level(logging.WARNING, logger="ownstate.postgres"):
        assert _scenario(schema, steps) == ("r32", "running")
    assert "analyzing the tables runs grew failed" in caplog.text
    assert _counted(schema)["runs"] == -1
