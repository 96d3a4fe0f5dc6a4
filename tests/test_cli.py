"""The ``ownstate`` command, through click's runner and as a real process."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import ownstate
from ownstate.cli import cli


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads OWNSTATE_URL from the caller or writes ownstate.db outside tmp_path,
    and transcripts wrap at 100 columns whatever terminal (or test worker) runs the tests."""
    monkeypatch.delenv("OWNSTATE_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "x.db"


@pytest.fixture
def url(db: Path) -> str:
    return f"sqlite:///{db}"


def run(url: str | None, *args: str, env: dict[str, str] | None = None) -> Result:
    prefix = ["--url", url] if url is not None else []
    return _runner().invoke(cli, [*prefix, *args], env=env)


def tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]


CONVERSATION = [
    {"type": "message", "role": "user", "content": "Where is my parcel?"},
    {"type": "function_call", "call_id": "c1", "name": "track_parcel",
     "arguments": '{"id": "P-77"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "out for delivery"},
    {"type": "message", "role": "assistant", "model": "gpt-test",
     "usage": {"input_tokens": 50, "output_tokens": 9},
     "content": [{"type": "output_text", "text": "It arrives today."}]},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "t1", "type": "function",
                     "function": {"name": "refund", "arguments": '{"amount": 5}'}}]},
    {"kind": "custom-event", "payload": "x" * 500},
]


@pytest.fixture
def seeded(url: str) -> str:
    with ownstate.connect(url) as client:
        support = client.session_stores.create("support")
        session = support.add(actor_id="customer-123", session_id="case-456")
        session.append_items(CONVERSATION)
        support.add(actor_id="customer-999", session_id="case-789")
        client.session_stores.create("billing").add(actor_id="customer-123",
                                                     session_id="inv-1")
    return url


# schema ----------------------------------------------------------------------------------


def test_migrate_then_check(url: str, db: Path) -> None:
    first = run(url, "migrate")
    assert first.exit_code == 0, first.output
    migrated = re.fullmatch(r"migrated \S+ from schema version 0 to (\d+)\n", first.stdout)
    assert migrated is not None, first.stdout
    version = int(migrated[1])
    assert version >= 1
    # each step says what it does, on stderr
    from ownstate.backends.sqlite.schema import MIGRATIONS
    assert first.stderr.splitlines() == [
        f"migration {m.version} of {version}: {m.description}" for m in MIGRATIONS]
    again = run(url, "migrate")
    assert again.exit_code == 0
    assert again.stdout == f"schema is already at version {version}; nothing to do\n"
    assert again.stderr == ""
    checked = run(url, "check")
    assert checked.exit_code == 0, checked.output
    assert checked.stdout == f"schema is at version {version}\n"
    assert "ownstate_schema" in tables(db)


@pytest.mark.parametrize("existing", [True, False], ids=["empty-file", "no-file"])
def test_check_on_an_empty_database_fails_and_writes_nothing(
    url: str, db: Path, existing: bool
) -> None:
    if existing:
        db.touch()
    result = run(url, "check")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert re.search(r"schema is version 0, expected \d+", result.stderr)
    assert "ownstate migrate" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert tables(db) == []


# sessions ---------------------------------------------------------------------------------


def test_sessions_list_shows_every_store(seeded: str) -> None:
    result = run(seeded, "sessions", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["STORE", "SESSION", "ACTOR", "PARENT", "CREATED", "(UTC)",
                                "LAST", "ACTIVITY", "(UTC)"]
    rows = [line.split()[:4] for line in lines[1:]]
    assert rows == [  # newest first, across stores
        ["billing", "inv-1", "customer-123", "-"],
        ["support", "case-789", "customer-999", "-"],
        ["support", "case-456", "customer-123", "-"],
    ]


def test_sessions_list_filters_and_limits(seeded: str) -> None:
    by_store = run(seeded, "sessions", "list", "--store", "support")
    assert {line.split()[1] for line in by_store.stdout.splitlines()[1:]} == {
        "case-456", "case-789"}
    by_actor = run(seeded, "sessions", "list", "--actor", "customer-123")
    assert [line.split()[1] for line in by_actor.stdout.splitlines()[1:]] == [
        "inv-1", "case-456"]
    limited = run(seeded, "sessions", "list", "--limit", "1")
    assert limited.exit_code == 0
    assert len(limited.stdout.splitlines()) == 2
    assert "raise --limit" in limited.stderr
    nothing = run(seeded, "sessions", "list", "--actor", "nobody")
    assert nothing.exit_code == 0
    assert nothing.stdout == ""
    assert "no sessions" in nothing.stderr


def test_sessions_show_renders_the_transcript_in_replay_order(seeded: str) -> None:
    result = run(seeded, "sessions", "show", "case-456")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.splitlines()[0] == "session support/case-456 (actor customer-123)"
    expected_in_order = [
        "1", "user", "Where is my parcel?",
        "2", "function_call", 'track_parcel({"id": "P-77"})',
        "3", "function_call_output", "out for delivery",
        "4", "assistant", "It arrives today.", "gpt-test · 50 in / 9 out tokens",
        "5", "assistant", 'refund({"amount": 5})',
        "6", "json", '{"kind":"custom-event","payload":"xxx',
    ]
    position = 0
    for text in expected_in_order:
        position = out.index(text, position) + len(text)
    assert "x" * 200 not in out  # unknown shapes are truncated
    assert "…" in out


def test_sessions_show_with_store_and_across_stores(seeded: str) -> None:
    in_store = run(seeded, "sessions", "show", "inv-1", "--store", "billing")
    assert in_store.exit_code == 0, in_store.output
    assert "(no items)" in in_store.stdout
    assert run(seeded, "sessions", "show", "inv-1").stdout == in_store.stdout


def test_sessions_show_asks_for_a_store_when_the_id_is_in_several(seeded: str) -> None:
    with ownstate.connect(seeded) as client:
        client.session_stores.get("billing").add(actor_id="someone", session_id="case-456")
    result = run(seeded, "sessions", "show", "case-456")
    assert result.exit_code == 2
    assert "billing, support" in result.stderr
    assert "--store" in result.stderr
    chosen = run(seeded, "sessions", "show", "case-456", "--store", "support")
    assert chosen.exit_code == 0
    assert "Where is my parcel?" in chosen.stdout


@pytest.mark.parametrize("store", [None, "support", "no-such-store"])
def test_sessions_show_unknown_session_exits_1(seeded: str, store: str | None) -> None:
    args = ["sessions", "show", "nope"] + (["--store", store] if store else [])
    result = run(seeded, *args)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert ("nope" in result.stderr) or ("no-such-store" in result.stderr)
    assert "Traceback" not in result.output


def test_fork_shows_its_parent(seeded: str) -> None:
    with ownstate.connect(seeded) as client:
        session = client.session_stores.get("support").get("case-456")
        session.fork(session_id="case-456-b")
    result = run(seeded, "sessions", "show", "case-456-b")
    assert "forked from case-456" in result.stdout.splitlines()[0]
    listed = run(seeded, "sessions", "list", "--store", "support")
    assert ["case-456-b", "customer-123", "case-456"] in [
        line.split()[1:4] for line in listed.stdout.splitlines()]


# errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["--url", "bogus://nowhere", "sessions", "list"],
    ["--tenant", "bad tenant!", "demo"],
    ["sessions", "list", "--store", "NO"],
    ["sessions", "list", "--store", "missing"],
])
def test_ownstate_errors_are_one_line_and_exit_1(url: str, args: list[str]) -> None:
    assert run(url, "migrate").exit_code == 0
    result = run(None if args[0] == "--url" else url, *args)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["check", "migrate", "demo"])
def test_a_sqlite_url_in_a_missing_directory_says_so(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    result = run(f"sqlite:///{missing}/x.db", command)
    assert result.exit_code == 1
    assert result.stderr == (f"Error: cannot open the SQLite database {missing}/x.db: the "
                             f"directory {missing} does not exist\n")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", [
    ["migrate"],
    ["check"],
    ["sessions", "list"],
    ["sessions", "show", "case-456"],
    ["memory", "show", "user:1"],
    ["runs", "outstanding"],
    ["gc", "--drop-ended"],
    ["keys", "list"],
], ids=lambda c: "-".join(c[:2]))
def test_url_and_tenant_may_follow_the_command(seeded: str, command: list[str]) -> None:
    before = _runner().invoke(cli, ["--url", seeded, "--tenant", "default", *command])
    after = _runner().invoke(cli, [*command, "--url", seeded, "--tenant", "default"])
    assert before.exit_code == 0, before.output
    assert (after.exit_code, after.stdout, after.stderr) == (
        before.exit_code, before.stdout, before.stderr)


def test_options_after_the_command_win(seeded: str, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    listed = _runner().invoke(cli, ["--url", f"sqlite:///{other}", "sessions", "list",
                                    "--url", seeded])
    assert listed.exit_code == 0, listed.output
    assert "case-456" in listed.stdout
    assert not other.exists()
    created = _runner().invoke(cli, ["--tenant", "acme", "keys", "create", "--url", seeded,
                                     "--tenant", "beta", "--principal", "p"])
    assert created.exit_code == 0, created.output
    assert "of tenant 'beta'" in created.stderr
    with ownstate.connect(seeded, tenant="beta") as client:
        assert [k.principal for k in client.api_keys.list()] == ["p"]
    with ownstate.connect(seeded, tenant="acme") as client:
        assert client.api_keys.list() == []
    # the hints of `ownstate demo` repeat the URL that was used, wherever it was given
    demo = _runner().invoke(cli, ["demo", "--url", seeded])
    assert f"ownstate --url {seeded} sessions list --store demo" in demo.stdout


def test_keys_need_a_tenant_before_or_after_the_command(url: str) -> None:
    refused = run(url, "keys", "create", "--principal", "p")
    assert refused.exit_code == 2
    assert "--tenant" in refused.stderr
    before = run(url, "--tenant", "acme", "keys", "create", "--principal", "p")
    assert before.exit_code == 0, before.output
    assert "of tenant 'acme'" in before.stderr


def test_app_roles_are_for_postgresql(url: str) -> None:
    from ownstate.backends.sqlite.schema import MIGRATIONS

    result = run(url, "migrate", "--app-role", "app")
    assert result.exit_code == 1
    # the schema is migrated, step by step, before the role is refused
    assert result.stderr.splitlines() == [
        *(f"migration {m.version} of {MIGRATIONS[-1].version}: {m.description}"
          for m in MIGRATIONS),
        "Error: SqliteBackend has no database roles; an app role is for PostgreSQL"]
    with ownstate.connect(url) as client:
        assert client.isolation_bypass() is None
    assert run(url, "check").exit_code == 0  # nothing to say about isolation here


def test_url_comes_from_the_environment(url: str, db: Path) -> None:
    result = run(None, "migrate", env={"OWNSTATE_URL": url})
    assert result.exit_code == 0
    assert url in result.stdout
    assert "ownstate_schema" in tables(db)


# demo -------------------------------------------------------------------------------------


def test_demo_runs_twice_on_the_same_file(url: str) -> None:
    for _ in range(2):
        result = run(url, "demo")
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert out.count("Is it warm enough for the beach in Lisbon today?") == 2
        assert "get_weather" in out
        assert "Take sunscreen." in out
        assert "wetsuit" in out
        assert "forked from ses_" in out
        assert "gpt-4.1-mini · 412 in / 23 out tokens" in out
        assert f"ownstate --url {url} sessions show ses_" in out
    listed = run(url, "sessions", "list", "--store", "demo")
    assert len(listed.stdout.splitlines()) == 1 + 4


def test_demo_on_memory() -> None:
    result = run("memory://", "demo")
    assert result.exit_code == 0, result.output
    assert "forked from" in result.stdout


# real processes ----------------------------------------------------------------------------


def _process(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60,
                          check=False)


def test_console_script_runs_migrate_check_and_demo(tmp_path: Path, url: str) -> None:
    script = Path(sysconfig.get_path("scripts")) / "ownstate"
    if not script.exists():
        pytest.skip(f"the ownstate console script is not installed at {script}")
    check = _process(str(script), "--url", url, "check", cwd=tmp_path)
    assert check.returncode == 1
    assert "run `ownstate migrate`" in check.stderr
    assert "Traceback" not in check.stderr
    assert _process(str(script), "--url", url, "migrate", cwd=tmp_path).returncode == 0
    check = _process(str(script), "--url", url, "check", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert re.fullmatch(r"schema is at version \d+\n", check.stdout)
    for _ in range(2):
        demo = _process(str(script), "--url", url, "demo", cwd=tmp_path)
        assert demo.returncode == 0, demo.stderr
        assert "forked from" in demo.stdout


def test_python_dash_m_ownstate_uses_the_default_database(tmp_path: Path) -> None:
    demo = _process(sys.executable, "-m", "ownstate", "demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert "sqlite:///ownstate.db" in demo.stdout
    assert "ownstate sessions show ses_" in demo.stdout
    assert (tmp_path / "ownstate.db").exists()
    unknown = _process(sys.executable, "-m", "ownstate", "sessions", "show", "nope",
                       cwd=tmp_path)
    assert unknown.returncode == 1
    assert unknown.stderr == "Error: no session 'nope' in any session store\n"


# runs and checkpoints -------------------------------------------------------------------


@pytest.fixture
def paused(url: str) -> str:
    with ownstate.connect(url) as client:
        session = client.session_stores.create("approvals").add(actor_id="customer-7",
                                                                session_id="case-9")
        run = client.runs.open_run(session, "langgraph", "thread-9", run_id="run-9")
        client.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "refund",
                                               "requested_by": "agent"})
        other = client.session_stores.get("approvals").add(actor_id="c8", session_id="case-10")
        client.runs.open_run(other, "openai-agents", run_id="run-10")
    return url


def test_runs_outstanding_lists_what_waits(paused: str) -> None:
    result = run(paused, "runs", "outstanding")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["RUN", "SESSION", "FRAMEWORK"]
    assert len(lines) == 2
    assert "run-9" in lines[1]
    assert "approvals/case-9" in lines[1]
    assert "approval refund" in lines[1]
    assert "agent" in lines[1]
    running = run(paused, "runs", "outstanding", "--status", "running")
    assert "run-10" in running.stdout
    assert "run-9" not in running.stdout
    assert run(paused, "runs", "outstanding", "--framework", "adk").stderr == (
        "no runs awaiting human\n")
    assert "run-9" not in run(paused, "runs", "outstanding", "--older-than", "1d").stdout


def test_runs_outstanding_refuses_a_bad_duration(paused: str) -> None:
    result = run(paused, "runs", "outstanding", "--older-than", "soon")
    assert result.exit_code == 2
    assert "not a duration" in result.stderr


def test_gc_applies_retention_and_leaves_the_rest(paused: str) -> None:
    with ownstate.connect(paused) as client:
        run_record = client.runs.get("run-10")
        scope = run_record.checkpoint_scope()
        for n in range(5):
            client.checkpoints.put(scope, f"cp-{n}", type_tag="bytes", payload=b"x" * 100)
    assert run(paused, "gc").exit_code == 2
    result = run(paused, "gc", "--keep-last", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout == "deleted 3 checkpoints, freed 300 bytes\n"
    with ownstate.connect(paused) as client:
        kept = client.checkpoints.list(client.runs.get("run-10").checkpoint_scope())
        assert [c.checkpoint_id for c in kept] == ["cp-4", "cp-3"]
        assert [r.run_id for r in client.runs.outstanding()] == ["run-9"]
    assert run(paused, "gc", "--drop-ended").stdout == "deleted 0 checkpoints, freed 0 bytes\n"


# memory -------------------------------------------------------------------------------


def test_memory_show_lists_current_facts_with_provenance(url: str) -> None:
    with ownstate.connect(url) as client:
        session = client.session_stores.create("support").add(actor_id="user:8814",
                                                              session_id="chat-1")
        (said,) = session.append_items([{"role": "user", "content": "email me please"}])
        mem = client.memory_stores.create("support-memory")
        mem.remember("user:8814", "preferred_channel", "sms", source_type="import")
        mem.remember("user:8814", "preferred_channel", "email", confidence=0.9, source=said)
        mem.remember("user:8814", "timezone", "Europe/Lisbon")
        mem.forget("user:8814", "timezone", reason="user asked")
        mem.remember("user:9", "preferred_channel", "fax")
    result = run(url, "memory", "show", "user:8814")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[1].split()[:5] == ["support-memory", "preferred_channel", '"email"', "0.9",
                                    "agent"]
    assert f"support/chat-1#{said.item_id}" in lines[1]
    history = run(url, "memory", "show", "user:8814", "--history")
    assert [line.split()[2] for line in history.stdout.splitlines()[1:]] == ['"sms"',
                                                                             '"email"']
    assert "superseded" in history.stdout
    assert run(url, "memory", "show", "user:0").stderr == "no facts about 'user:0'\n"
    assert run(url, "memory", "show", "user:8814", "--store", "nope").exit_code == 1


# the HTTP server and its keys ---------------------------------------------------------------


def test_keys_are_created_listed_and_revoked(url: str) -> None:
    created = run(url, "keys", "create", "--tenant", "acme", "--principal", "billing")
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert re.fullmatch(r"osk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", token)
    key_id = token.split("_")[1]
    assert "not stored" in created.stderr
    admin = run(url, "keys", "create", "--tenant", "acme", "--principal", "ops", "--admin")
    assert admin.exit_code == 0
    with ownstate.connect(url, tenant="acme") as client:
        assert client.api_keys.authenticate(token).principal == "billing"
    listed = run(url, "keys", "list", "--tenant", "acme")
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [(key_id, "billing"),
                                            (admin.stdout.strip().split("_")[1], "ops")]
    assert run(url, "keys", "list", "--tenant", "other").stdout.splitlines()[1:] == []
    # Another tenant cannot revoke the key; its own tenant can, and then it is refused.
    refused = run(url, "keys", "revoke", key_id, "--tenant", "other")
    assert refused.exit_code == 1
    assert run(url, "keys", "revoke", key_id, "--tenant", "acme").exit_code == 0
    with ownstate.connect(url, tenant="acme") as client, \
            pytest.raises(ownstate.Unauthenticated):
        client.api_keys.authenticate(token)
    assert run(url, "keys", "create", "--tenant", "acme", "--principal",
               "bad name!").exit_code == 1


def test_serve_prints_a_first_admin_key_and_serves_with_it(tmp_path: Path, url: str) -> None:
    import socket
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "ownstate", "--url", url, "serve", "--port", str(port),
         "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        lines = []
        while not any("Serving" in line for line in lines):
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else ""
            lines.append(line)
        token = next(w for line in lines for w in line.split() if w.startswith("osk_"))
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/2.0/agents/whoami",
                                   headers={"authorization": f"Bearer {token}"})
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert answer.status_code == 200
        assert answer.json()["tenant"] == "default"
        assert answer.json()["admin"] is True
    finally:
        process.terminate()
        process.communicate(timeout=20)
    # A second start finds the key and makes no other.
    with ownstate.connect(url) as client:
        assert len(client.api_keys.list()) == 1
