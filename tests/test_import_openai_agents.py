"""``ownstate import openai-agents``: sessions written by the OpenAI Agents SDK's own
``SQLiteSession`` and ``SQLAlchemySession`` (SQLite through aiosqlite, and PostgreSQL),
read back through :class:`OwnstateSession` as the SDK reads them, on every backend."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from agents.memory import Session as SDKSession
from click.testing import CliRunner

import ownstate
from ownstate.adapters.openai_agents import OwnstateSession
from ownstate.cli import cli
from ownstate.importers import run_import, sources
from ownstate.importers.cli import EXIT_DIFFERENT, EXIT_FAILED_UNITS


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def conversation(n: int) -> list[dict[str, Any]]:
    """A turn with a tool call, as the SDK keeps Responses items."""
    call = f"call_{n}"
    return [
        {"role": "user", "content": f"refund order {n} ☃"},
        {"type": "function_call", "call_id": call, "name": "refund",
         "arguments": f'{{"order": {n}}}', "id": f"fc_{n}", "status": "completed"},
        {"type": "function_call_output", "call_id": call, "output": "done"},
        {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": f"Refunded {n}.", "annotations": []}]},
    ]


@dataclass
class Source:
    """SDK sessions written by the SDK itself into one database, and how to open them."""

    kind: str
    from_: str  # what --from takes
    opener: Any  # session id -> an SDK session on that database
    sids: list[str] = field(default_factory=lambda: ["s-1", "s-2", "s-3"])

    def open(self, sid: str) -> SDKSession:
        return self.opener(sid)  # type: ignore[no-any-return]

    def expected(self, sid: str, limit: int | None = None) -> list[Any]:
        async def read() -> list[Any]:
            session = self.open(sid)
            try:
                return await session.get_items(limit)
            finally:
                await _close(session)
        return run(read())  # type: ignore[no-any-return]

    def fill(self) -> None:
        async def write() -> None:
            for n, sid in enumerate(self.sids):
                session = self.open(sid)
                try:
                    await session.add_items(conversation(n))
                    if n == 1:
                        await session.add_items([{"role": "user", "content": "and then?"}])
                        await session.pop_item()
                    if n == 2:  # emptied: its sessions row stays, with no messages
                        while await session.pop_item() is not None:
                            pass
                finally:
                    await _close(session)
        run(write())


async def _close(session: SDKSession) -> None:
    if isinstance(session, SQLiteSession):
        session.close()
    elif isinstance(session, SQLAlchemySession):
        await session._engine.dispose()


def _sqlite_session(tmp: Path) -> Source:
    path = tmp / "sdk.db"
    return Source("sqlite-session", str(path), lambda sid: SQLiteSession(sid, path))


def _sqlalchemy_sqlite(tmp: Path) -> Source:
    url = f"sqlite+aiosqlite:///{tmp / 'sa.db'}"
    return Source("sqlalchemy-sqlite", url, lambda sid: SQLAlchemySession.from_url(
        sid, url=url, create_tables=True))


def _sqlalchemy_postgres(url: str) -> Source:
    return Source("sqlalchemy-postgres", url, lambda sid: SQLAlchemySession.from_url(
        sid, url=url, create_tables=True))


@pytest.fixture(params=["sqlite-session", "sqlalchemy-sqlite", "sqlalchemy-postgres"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Source:
    if request.param == "sqlite-session":
        made = _sqlite_session(tmp_path)
    elif request.param == "sqlalchemy-sqlite":
        made = _sqlalchemy_sqlite(tmp_path)
    else:
        made = _sqlalchemy_postgres(request.getfixturevalue("scratch_postgres"))
    made.fill()
    return made


def rows(client: ownstate.Client, store: str) -> list[tuple[Any, ...]]:
    out = []
    for session in client.session_stores.get(store).list_sessions(order_by="create_time asc"):
        out.append((session.session_id, session.actor_id, session.metadata,
                    [(i.seq, i.format, i.data, i.role, i.type, i.tool_name, i.model)
                     for i in session.list_items(order_by="create_time asc")]))
    return sorted(out, key=lambda r: r[0])


def source_state(source: Source) -> Any:
    """What the source holds, to show that an import left it alone: the SQLite file's
    bytes and mtime, or every row of the SDK's tables."""
    if "://" not in source.from_ or source.from_.startswith("sqlite"):
        path = Path(source.from_.split(":///", 1)[-1])
        return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def read() -> Any:
        engine = create_async_engine(source.from_)
        try:
            async with engine.connect() as conn:
                return [(await conn.execute(text(f"SELECT * FROM {t} ORDER BY 1"))).all()
                        for t in ("agent_sessions", "agent_messages")]
        finally:
            await engine.dispose()
    return run(read())


def corrupt(source: Source, sid: str) -> int:
    """Break one stored row of ``sid`` as a bad write would; returns its message id."""
    sql_find = f"SELECT min(id) FROM agent_messages WHERE session_id = '{sid}'"
    if "://" not in source.from_ or source.from_.startswith("sqlite"):
        path = source.from_.split(":///", 1)[-1]
        conn = sqlite3.connect(path)
        try:
            (message_id,) = conn.execute(sql_find).fetchone()
            conn.execute("UPDATE agent_messages SET message_data = '{\"role\": \"us' "
                         "WHERE id = ?", (message_id,))
            conn.commit()
        finally:
            conn.close()
        return int(message_id)
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def write() -> int:
        engine = create_async_engine(source.from_)
        try:
            async with engine.begin() as conn:
                message_id = await conn.scalar(text(sql_find))
                await conn.execute(text("UPDATE agent_messages SET message_data = '{\"ro' "
                                        "WHERE id = :id"), {"id": message_id})
                return int(message_id)
        finally:
            await engine.dispose()
    return run(write())  # type: ignore[no-any-return]


def read_back(client: ownstate.Client, sid: str, limit: int | None = None) -> list[Any]:
    return run(OwnstateSession(sid, client).get_items(limit))  # type: ignore[no-any-return]


def test_the_source_is_listed() -> None:
    assert "openai-agents" in sources()


def test_imported_reads_back_as_the_sdk_wrote_it(client: ownstate.Client,
                                                 source: Source) -> None:
    before = source_state(source)
    report = run_import("openai-agents", client, source.from_, verify=True)
    assert source_state(source) == before
    assert report.ok, report.summary()
    assert (report.units, report.imported, report.failed) == (3, 3, 0)
    assert report.written == {"sessions": 3, "items": 8}
    for sid in source.sids:
        assert read_back(client, sid) == source.expected(sid)
        assert read_back(client, sid, 2) == source.expected(sid, 2)
    assert read_back(client, "s-3") == []
    # The adapter, given the same conversations, stores the very same sessions and items.
    for sid in source.sids:
        run(OwnstateSession(sid, client, store="by-adapter").add_items(source.expected(sid)))
    assert rows(client, "openai-agents") == [
        r for r in rows(client, "by-adapter") if r[0] != "s-3"] + [
        ("s-3", "openai-agents", {}, [])]


def test_a_second_run_writes_nothing(client: ownstate.Client, source: Source) -> None:
    run_import("openai-agents", client, source.from_)
    before = rows(client, "openai-agents")
    again = run_import("openai-agents", client, source.from_, verify=True)
    assert (again.already, again.imported, sum(again.written.values())) == (3, 0, 0)
    assert again.ok
    assert rows(client, "openai-agents") == before


def test_an_import_cut_short_is_finished(client: ownstate.Client, tmp_path: Path) -> None:
    source = _sqlite_session(tmp_path)
    source.fill()
    run(OwnstateSession("s-1", client).add_items(source.expected("s-1")[:2]))
    report = run_import("openai-agents", client, source.from_)
    assert report.failed == 0
    assert report.written["items"] == 6
    for sid in source.sids:
        assert read_back(client, sid) == source.expected(sid)


def test_a_session_that_went_on_is_left_and_one_that_differs_is_reported(
        client: ownstate.Client, tmp_path: Path) -> None:
    source = _sqlite_session(tmp_path)
    source.fill()
    went_on = [*source.expected("s-1"), {"role": "user", "content": "later"}]
    run(OwnstateSession("s-1", client).add_items(went_on))
    mine = [{"role": "user", "content": "something else"}]
    run(OwnstateSession("s-2", client).add_items(mine))
    report = run_import("openai-agents", client, source.from_)
    assert (report.already, report.imported, report.failed) == (1, 1, 1)
    [failure] = report.failures
    assert (failure.stage, failure.ids["session_id"]) == ("write", "s-2")
    assert read_back(client, "s-1") == went_on
    assert read_back(client, "s-2") == mine


def test_an_undecodable_row_skips_its_session_only(client: ownstate.Client,
                                                   source: Source) -> None:
    message_id = corrupt(source, "s-1")
    expected = source.expected("s-2")
    before = source_state(source)
    report = run_import("openai-agents", client, source.from_)
    assert source_state(source) == before
    assert (report.imported, report.failed) == (2, 1)
    [failure] = report.failures
    assert (failure.stage, failure.ids) == ("decode", {"session_id": "s-1",
                                                       "message_id": message_id})
    assert "s-1" not in [r[0] for r in rows(client, "openai-agents")]
    assert read_back(client, "s-2") == expected


def test_dry_run_writes_nothing(client: ownstate.Client, tmp_path: Path) -> None:
    source = _sqlite_session(tmp_path)
    source.fill()
    report = run_import("openai-agents", client, source.from_, dry_run=True)
    assert (report.dry_run, report.imported) == (True, 3)
    assert report.written == {"sessions": 3, "items": 8}
    assert list(client.session_stores.list()) == []


def test_other_table_names_and_actor(client: ownstate.Client, tmp_path: Path) -> None:
    path = tmp_path / "named.db"

    async def write() -> None:
        session = SQLiteSession("t-1", path, sessions_table="conv", messages_table="msgs")
        await session.add_items(conversation(7))
        session.close()
    run(write())
    report = run_import("openai-agents", client, str(path), **{
        "sessions-table": "conv", "messages-table": "msgs", "actor-id": "customer-9"})
    assert (report.imported, report.failed) == (1, 0)
    session = client.session_stores.get("openai-agents").get("t-1")
    assert session.actor_id == "customer-9"
    assert read_back(client, "t-1") == conversation(7)


def test_cli(tmp_path: Path) -> None:
    source = _sqlite_session(tmp_path)
    source.fill()
    url = f"sqlite:///{tmp_path / 'o.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["--url", url, "migrate"]).exit_code == 0
    dry = runner.invoke(cli, ["--url", url, "import", "openai-agents", "--from",
                              source.from_, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "3 to import, 0 already imported, 0 failed; would write 8 items, 3 sessions" \
        in dry.output
    done = runner.invoke(cli, ["--url", url, "import", "openai-agents", "--from",
                               source.from_, "--verify"])
    assert done.exit_code == 0, done.output
    assert "verified 3 units" in done.output
    with ownstate.connect(url) as client:
        client.session_stores.get("openai-agents").get("s-1").pop_item()
    differs = runner.invoke(cli, ["--url", url, "import", "openai-agents", "--from",
                                  source.from_, "--dry-run", "--verify"])
    assert differs.exit_code == EXIT_DIFFERENT, differs.output
    assert "verify failed for s-1" in differs.output
    corrupt(source, "s-2")
    broken = runner.invoke(cli, ["--url", url, "import", "openai-agents", "--from",
                                 source.from_])
    assert broken.exit_code == EXIT_FAILED_UNITS, broken.output
    assert "decode failed for s-2 (session_id='s-2' message_id=" in broken.output
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    for wrong, says in [(str(other), "has no table 'agent_sessions'"),
                        (str(tmp_path / "nowhere.db"), "is not a file")]:
        refused = runner.invoke(cli, ["--url", url, "import", "openai-agents", "--from",
                                      wrong])
        assert refused.exit_code == 1, refused.output
        assert says in refused.output


@pytest.mark.parametrize("where", ["path", "sqlite-url", "postgres"])
def test_the_source_database_refuses_writes(request: pytest.FixtureRequest, tmp_path: Path,
                                            where: str) -> None:
    """The engine the sources read through cannot write, whatever a bug might send it."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from ownstate.importers.sources._shared import readonly_engine

    async def attempt(url: str) -> None:
        engine = readonly_engine(url)
        try:
            async with engine.begin() as conn:
                assert (await conn.execute(text("SELECT count(*) FROM agent_messages"))
                        ).scalar() == 8
                with pytest.raises(DBAPIError, match=r"read-only|readonly"):
                    await conn.execute(text("DELETE FROM agent_messages"))
        finally:
            await engine.dispose()

    if where == "postgres":
        url = request.getfixturevalue("scratch_postgres")
        made = _sqlalchemy_postgres(url)
        made.fill()
        run(attempt(url))  # asyncpg
        run(attempt(url.replace("+asyncpg", "")))  # SQLAlchemy's default driver
        assert len(made.expected("s-1")) == 4
        return
    made = _sqlite_session(tmp_path)
    made.fill()
    run(attempt(made.from_ if where == "path" else f"sqlite:///{made.from_}"))
    assert len(made.expected("s-1")) == 4
