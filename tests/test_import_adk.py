"""``ownstate import adk``: databases written by ADK's own ``DatabaseSessionService``, in
each schema version it has shipped (1: JSON events; 0: pickled actions, its tables made
from ADK's own v0 models, which the service then detects and writes to), on SQLite and
PostgreSQL, read back through :class:`OwnstateSessionService` as ADK reads them, on every
backend."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import DatabaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.schemas import v0
from google.genai import types

import ownstate
from ownstate.adapters.adk import OwnstateSessionService, ownstate_session_id
from ownstate.cli import cli
from ownstate.importers import get, run_import, sources
from ownstate.importers.cli import EXIT_DIFFERENT, EXIT_FAILED_UNITS

#: (app, user, session id) of every session the fixture writes
SESSIONS = [("shop", "u1", "a"), ("shop", "u2", "b"), ("other", "u1", "a")]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def text(role: str, words: str) -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=words)])


async def _write(service: DatabaseSessionService) -> None:
    """Sessions as an agent leaves them: create-time state of every scope, events with
    text, tool calls, state deltas (temp: among them, which ADK never stores)."""
    a = await service.create_session(app_name="shop", user_id="u1", session_id="a", state={
        "topic": "refund ☃", "app:currency": "EUR", "user:tier": "gold", "temp:x": 1})
    base = 1_700_000_000.0
    events = [
        Event(author="user", invocation_id="inv-1", timestamp=base + 1,
              content=text("user", "I want a refund")),
        Event(author="agent", invocation_id="inv-1", timestamp=base + 2,
              content=types.Content(role="model", parts=[types.Part(
                  function_call=types.FunctionCall(id="fc-1", name="refund",
                                                   args={"order": 7}))]),
              long_running_tool_ids={"fc-1"}),
        Event(author="agent", invocation_id="inv-1", timestamp=base + 3,
              content=text("model", "Refunded."),
              actions=EventActions(state_delta={"step": 2, "app:currency": "USD",
                                                "user:last_order": 7, "temp:scratch": 3})),
    ]
    for event in events:
        await service.append_event(a, event)
    await service.create_session(app_name="shop", user_id="u2", session_id="b")
    c = await service.create_session(app_name="other", user_id="u1", session_id="a",
                                     state={"app:region": "eu"})
    await service.append_event(c, Event(author="user", invocation_id="inv-9",
                                        timestamp=base + 5, content=text("user", "hello")))


@dataclass
class Source:
    """A DatabaseSessionService database the fixture filled, and its URL."""

    url: str
    version: str

    def service(self) -> DatabaseSessionService:
        return DatabaseSessionService(self.url)

    def call(self, fn: Any) -> Any:
        async def go() -> Any:
            service = self.service()
            try:
                return await fn(service)
            finally:
                await service.close()
        return run(go())

    def expected(self, app: str, user: str, sid: str,
                 config: GetSessionConfig | None = None) -> Session | None:
        return self.call(lambda s: s.get_session(  # type: ignore[no-any-return]
            app_name=app, user_id=user, session_id=sid, config=config))

    def execute(self, sql: str, **params: Any) -> Any:
        from sqlalchemy import text as sql_text
        from sqlalchemy.ext.asyncio import create_async_engine

        async def go() -> Any:
            engine = create_async_engine(self.url)
            try:
                async with engine.begin() as conn:
                    result = await conn.execute(sql_text(sql), params)
                    return result.all() if result.returns_rows else None
            finally:
                await engine.dispose()
        return run(go())

    def state(self) -> Any:
        """What the source holds: the SQLite file's bytes and mtime, or every row."""
        if self.url.startswith("sqlite"):
            path = Path(self.url.split(":///", 1)[1])
            return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
        # rows ordered by their text: a table's leading columns may be json, which has no
        # ordering (ADK 2.15's app_states)
        return [self.execute(f"SELECT * FROM {t} AS r ORDER BY r::text") for t in
                ("sessions", "events", "app_states", "user_states")]


def _make(url: str, version: str) -> Source:
    if version == "0":
        from sqlalchemy import create_engine

        # The tables of ADK's v0 models, as ADK 1.19-1.21 made them; the service finds
        # the v0 layout and writes to it with those models (pickled actions).
        sync = create_engine(url.replace("+aiosqlite", "").replace("+asyncpg", "+psycopg"))
        v0.Base.metadata.create_all(sync)
        sync.dispose()
    made = Source(url, version)
    made.call(_write)
    return made


@pytest.fixture(params=["sqlite-1", "sqlite-0", "postgres-1", "postgres-0"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Source:
    where, version = request.param.split("-")
    if where == "sqlite":
        return _make(f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}", version)
    return _make(request.getfixturevalue("scratch_postgres"), version)


@pytest.fixture
def sqlite_source(tmp_path: Path) -> Source:
    return _make(f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}", "1")


def read_back(client: ownstate.Client, app: str, user: str, sid: str,
              config: GetSessionConfig | None = None) -> Session | None:
    service = OwnstateSessionService(client)
    return run(service.get_session(app_name=app, user_id=user, session_id=sid,
                                   config=config))


def same(mine: Session | None, theirs: Session | None) -> None:
    assert mine is not None
    assert theirs is not None
    assert (mine.id, mine.app_name, mine.user_id) == (theirs.id, theirs.app_name,
                                                      theirs.user_id)
    assert mine.state == theirs.state
    assert mine.events == theirs.events


def rows(client: ownstate.Client, store: str) -> list[tuple[Any, ...]]:
    out = []
    for session in client.session_stores.get(store).list_sessions(order_by="create_time asc"):
        out.append((session.session_id, session.actor_id, session.metadata,
                    [(i.format, i.data, i.role, i.type, i.tool_name, i.model)
                     for i in session.list_items(order_by="create_time asc")]))
    return sorted(out, key=lambda r: r[0])


def facts(client: ownstate.Client, store: str = "adk-state", sessions: str = "adk"
          ) -> dict[tuple[str, str], Any]:
    """Every current fact of the state store: its value and the event its source item
    (in the session store ``sessions``) holds."""
    memory = client.memory_stores.get(store)
    out = {}
    for subject in ("app:shop", "app:other", "u1", "u2"):
        for fact in memory.recall(subject):
            source = None
            if fact.source_item_id is not None:
                assert fact.source_session_id is not None
                session = client.session_stores.get(sessions).get(fact.source_session_id)
                source = session.get_item(fact.source_item_id).data["id"]
            out[subject, fact.key] = (fact.value, source)
    return out


def test_the_source_is_listed() -> None:
    assert "adk" in sources()
    assert get("adk").name == "adk"


def test_imported_reads_back_as_adk_wrote_it(client: ownstate.Client, source: Source) -> None:
    before = source.state()
    report = run_import("adk", client, source.url, verify=True)
    assert source.state() == before
    assert report.ok, report.summary()
    # three sessions, then one app-state unit per app and one user-state unit per user,
    # two of which hold nothing
    assert (report.units, report.imported, report.already, report.failed) == (
        3 + 2 + 3, 6, 2, 0)
    assert report.written == {"sessions": 3, "items": 4, "facts": 4}
    for app, user, sid in SESSIONS:
        same(read_back(client, app, user, sid), source.expected(app, user, sid))
        recent = GetSessionConfig(num_recent_events=1)
        same(read_back(client, app, user, sid, recent),
             source.expected(app, user, sid, recent))
    service = OwnstateSessionService(client)
    for app, user in (("shop", "u1"), ("shop", "u2")):
        assert run(service.get_user_state(app_name=app, user_id=user)) == source.call(
            lambda s, app=app, user=user: s.get_user_state(app_name=app, user_id=user))
    listed = run(service.list_sessions(app_name="shop"))
    theirs = source.call(lambda s: s.list_sessions(app_name="shop"))
    assert sorted(((s.id, s.user_id), s.state) for s in listed.sessions) == sorted(
        ((s.id, s.user_id), s.state) for s in theirs.sessions)


def test_the_adapter_would_have_written_the_same(client: ownstate.Client,
                                                 sqlite_source: Source) -> None:
    """Replaying the same sessions through OwnstateSessionService (create with the
    create-time state, then each event as ADK returns it) stores the same sessions,
    items and current facts, each naming the same event as its source."""
    run_import("adk", client, sqlite_source.url)
    adapter = OwnstateSessionService(client, store="by-adapter", state_store="by-adapter-state")

    sessions = {key: sqlite_source.expected(*key) for key in SESSIONS}

    async def replay() -> None:
        created = {("shop", "u1", "a"): {"topic": "refund ☃", "app:currency": "EUR",
                                         "user:tier": "gold"},
                   ("other", "u1", "a"): {"app:region": "eu"}}
        for app, user, sid in SESSIONS:
            theirs = sessions[app, user, sid]
            assert theirs is not None
            mine = await adapter.create_session(app_name=app, user_id=user, session_id=sid,
                                                state=created.get((app, user, sid)))
            for event in theirs.events:
                await adapter.append_event(mine, event)
    run(replay())
    assert rows(client, "adk") == rows(client, "by-adapter")
    assert facts(client) == facts(client, "by-adapter-state", "by-adapter")


def test_a_second_run_writes_nothing(client: ownstate.Client, sqlite_source: Source) -> None:
    run_import("adk", client, sqlite_source.url)
    before = rows(client, "adk"), facts(client)
    again = run_import("adk", client, sqlite_source.url, verify=True)
    assert (again.already, again.imported, sum(again.written.values())) == (8, 0, 0)
    assert again.ok, again.summary()
    assert (rows(client, "adk"), facts(client)) == before


def test_what_was_added_since_is_picked_up(client: ownstate.Client,
                                           sqlite_source: Source) -> None:
    run_import("adk", client, sqlite_source.url)

    async def more(service: DatabaseSessionService) -> None:
        session = await service.get_session(app_name="shop", user_id="u2", session_id="b")
        await service.append_event(session, Event(
            author="user", invocation_id="inv-3", content=text("user", "still there?"),
            actions=EventActions(state_delta={"mood": "impatient", "app:currency": "GBP"})))
    sqlite_source.call(more)
    report = run_import("adk", client, sqlite_source.url, verify=True)
    assert report.ok, report.summary()
    assert report.written == {"items": 1, "facts": 1}
    for app, user, sid in SESSIONS:
        same(read_back(client, app, user, sid), sqlite_source.expected(app, user, sid))
    history = client.memory_stores.get("adk-state").history("app:shop", "shop:app:currency")
    assert [f.value for f in history] == ["USD", "GBP"]


def test_an_undecodable_row_skips_its_session_only(client: ownstate.Client,
                                                   source: Source) -> None:
    [(event_id,)] = source.execute(
        "SELECT id FROM events WHERE app_name = 'shop' AND author = 'agent' "
        "ORDER BY timestamp LIMIT 1" if source.version == "0" else
        "SELECT id FROM events WHERE app_name = 'shop' ORDER BY timestamp LIMIT 1 OFFSET 1")
    if source.version == "0":  # a pickle ADK's restricted unpickler refuses
        source.execute("UPDATE events SET actions = :bad WHERE id = :id",
                       bad=b"\x80\x04cos\nsystem\n.", id=event_id)
    elif source.url.startswith("sqlite"):
        source.execute("UPDATE events SET event_data = '{\"author\": ' WHERE id = :id",
                       id=event_id)
    else:  # JSONB holds only JSON: a value the Event model refuses
        source.execute("UPDATE events SET event_data = '{\"author\": [1]}' WHERE id = :id",
                       id=event_id)
    before = source.state()
    report = run_import("adk", client, source.url)
    assert source.state() == before
    assert report.failed == 1
    [failure] = report.failures
    assert failure.stage == "decode"
    assert failure.ids == {"app_name": "shop", "user_id": "u1", "session_id": "a",
                           "event_id": event_id}
    assert read_back(client, "shop", "u1", "a") is None  # nothing of it
    same(read_back(client, "other", "u1", "a"), source.expected("other", "u1", "a"))
    # The state units still ran; the key the unread event set has no source then.
    assert client.memory_stores.get("adk-state").recall(
        "app:shop", ["shop:app:currency"])[0].source_item_id is None


def test_bad_session_state_is_reported(client: ownstate.Client,
                                       sqlite_source: Source) -> None:
    sqlite_source.execute("UPDATE sessions SET state = '{\"topic' WHERE id = 'b'")
    report = run_import("adk", client, sqlite_source.url)
    [failure] = report.failures
    assert (failure.stage, failure.ids) == ("decode", {"app_name": "shop", "user_id": "u2",
                                                       "session_id": "b"})
    assert (report.imported, report.already) == (5, 2)


def test_dry_run_writes_nothing(client: ownstate.Client, sqlite_source: Source) -> None:
    report = run_import("adk", client, sqlite_source.url, dry_run=True)
    assert (report.dry_run, report.imported) == (True, 6)
    assert report.written == {"sessions": 3, "items": 4, "facts": 4}
    assert list(client.session_stores.list()) == []
    assert list(client.memory_stores.list()) == []


def test_verify_finds_a_difference(client: ownstate.Client, sqlite_source: Source) -> None:
    run_import("adk", client, sqlite_source.url)
    client.session_stores.get("adk").get(ownstate_session_id("shop", "u1", "a")).pop_item()
    client.memory_stores.get("adk-state").remember("u2", "shop:user:extra", 1)
    report = run_import("adk", client, sqlite_source.url, dry_run=True, verify=True)
    assert not report.ok
    assert [(f.unit, f.stage) for f in report.failures] == [
        ("shop/u1/a", "verify"), ("user-state shop/u2", "verify")]


def test_cli(tmp_path: Path, sqlite_source: Source) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["--url", url, "migrate"]).exit_code == 0
    path = sqlite_source.url.split(":///", 1)[1]
    dry = runner.invoke(cli, ["--url", url, "import", "adk", "--from", path, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "6 to import, 2 already imported, 0 failed; would write 4 facts, 4 items, " \
        "3 sessions" in dry.output
    done = runner.invoke(cli, ["--url", url, "import", "adk", "--from", sqlite_source.url,
                               "--verify", "--state-store", "states"])
    assert done.exit_code == 0, done.output
    assert "verified 8 units" in done.output
    with ownstate.connect(url) as client:
        assert client.memory_stores.get("states").recall("app:other")[0].value == "eu"
        client.session_stores.get("adk").get(ownstate_session_id("shop", "u1", "a")).pop_item()
    differs = runner.invoke(cli, ["--url", url, "import", "adk", "--from", path,
                                  "--dry-run", "--verify", "--state-store", "states"])
    assert differs.exit_code == EXIT_DIFFERENT, differs.output
    assert "verify failed for shop/u1/a" in differs.output
    sqlite_source.execute("UPDATE sessions SET state = 'nope' WHERE id = 'b'")
    broken = runner.invoke(cli, ["--url", url, "import", "adk", "--from", path,
                                 "--state-store", "states"])
    assert broken.exit_code == EXIT_FAILED_UNITS, broken.output
    assert "decode failed for shop/u2/b (app_name='shop' user_id='u2' session_id='b')" \
        in broken.output
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    for wrong, says in [(str(other), "has no table 'app_states'"),
                        (str(tmp_path / "nowhere.db"), "is not a file")]:
        refused = runner.invoke(cli, ["--url", url, "import", "adk", "--from", wrong])
        assert refused.exit_code == 1, refused.output
        assert says in refused.output


def test_a_layout_older_than_schema_0_is_refused(client: ownstate.Client,
                                                 tmp_path: Path) -> None:
    """Before ADK 1.19 the events table lacked columns schema 0 has; ADK no longer reads
    such a database, and neither does the import: it says so and writes nothing."""
    path = tmp_path / "old.db"
    _make(f"sqlite+aiosqlite:///{path}", "0")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE events DROP COLUMN input_transcription")
    conn.close()
    with pytest.raises(ValueError, match="no column 'input_transcription'"):
        run_import("adk", client, str(path))
    assert list(client.session_stores.list()) == []
