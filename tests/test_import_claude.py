"""``ownstate import claude``: transcripts on disk, as the Claude Agent SDK writes them,
into the Claude adapter's store, on every backend; and the import framework around it
(resuming, dry run, verify, undecodable input, the CLI)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    ClaudeAgentOptions,
    InMemorySessionStore,
    SessionKey,
    import_session_to_store,
    project_key_for_directory,
)
from claude_agent_sdk._internal.session_resume import materialize_resume_session
from click.testing import CliRunner

import ownstate
from ownstate.adapters.claude_agent_sdk import OwnstateSessionStore
from ownstate.cli import cli
from ownstate.importers import get, run_import, sources
from ownstate.importers.cli import EXIT_DIFFERENT, EXIT_FAILED_UNITS


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def transcript(sid: str, cwd: str, turns: int = 3, *, sidechain: bool = False
               ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parent = None
    for n in range(turns):
        for role in ("user", "assistant"):
            uid = str(uuid.uuid4())
            out.append({"type": role, "uuid": uid, "parentUuid": parent, "sessionId": sid,
                        "cwd": cwd, "isSidechain": sidechain,
                        "timestamp": f"2025-01-01T00:00:{len(out):02d}.000Z",
                        "message": {"role": role, "content": [
                            {"type": "text", "text": f"{role} {n} ☃"}]}})
            parent = uid
    out.append({"type": "summary", "summary": "a refund", "leafUuid": parent})
    return out


class Written:
    """Sessions put on disk by the SDK's own writer: the in-memory store it ships, turned
    into a ``~/.claude`` tree by the SDK's resume materialisation."""

    def __init__(self, tmp: Path, count: int = 2) -> None:
        self.cwd = tmp / "work"
        self.cwd.mkdir()
        self.project = project_key_for_directory(str(self.cwd))
        self.reference = InMemorySessionStore()
        self.sids = [str(uuid.uuid4()) for _ in range(count)]
        self.config = tmp / "claude"
        (self.config / "projects").mkdir(parents=True)
        run(self._write())

    def key(self, sid: str, subpath: str | None = None) -> SessionKey:
        key: SessionKey = {"project_key": self.project, "session_id": sid}
        if subpath is not None:
            key["subpath"] = subpath
        return key

    async def _write(self) -> None:
        for n, sid in enumerate(self.sids):
            await self.reference.append(self.key(sid), transcript(sid, str(self.cwd), 2 + n))
            if n == 0:  # a subagent, with its metadata sidecar
                sub = self.key(sid, "subagents/agent-a1")
                await self.reference.append(sub, transcript(sid, str(self.cwd), 1,
                                                            sidechain=True))
                await self.reference.append(sub, [{"type": "agent_metadata",
                                                   "agentType": "researcher"}])
            made = await materialize_resume_session(ClaudeAgentOptions(
                cwd=str(self.cwd), session_store=self.reference, resume=sid))
            assert made is not None
            try:
                src = made.config_dir / "projects" / self.project
                dst = self.config / "projects" / self.project
                for path in sorted(src.rglob("*")):
                    if path.is_file():
                        target = dst / path.relative_to(src)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(path.read_bytes())
            finally:
                await made.cleanup()

    def transcripts(self) -> list[SessionKey]:
        return [self.key(self.sids[0]), self.key(self.sids[0], "subagents/agent-a1"),
                *(self.key(sid) for sid in self.sids[1:])]

    def main_file(self, sid: str) -> Path:
        return self.config / "projects" / self.project / f"{sid}.jsonl"


@pytest.fixture
def disk(tmp_path: Path) -> Written:
    return Written(tmp_path)


def loaded(client: ownstate.Client, key: SessionKey, store: str = "claude-agent-sdk"
           ) -> list[Any] | None:
    return run(OwnstateSessionStore(client, store=store).load(key))


def rows(client: ownstate.Client, store: str) -> list[tuple[Any, ...]]:
    out = []
    for session in client.session_stores.get(store).list_sessions(order_by="create_time asc"):
        out.append((session.session_id, session.actor_id, session.metadata,
                    [(i.seq, i.format, i.data, i.role, i.type, i.tool_name, i.model)
                     for i in session.list_items(order_by="create_time asc")]))
    return sorted(out, key=lambda r: r[0])


def test_sources_are_found_by_module() -> None:
    assert "claude" in sources()
    assert get("claude").name == "claude"
    with pytest.raises(ValueError, match=r"there are: .*claude"):
        get("nope")


def test_imported_reads_back_as_the_sdk_wrote_it(client: ownstate.Client, disk: Written,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    report = run_import("claude", client, str(disk.config), verify=True)
    assert report.ok, report.summary()
    assert (report.units, report.imported, report.failed) == (2, 2, 0)
    assert report.written["sessions"] == 3
    for key in disk.transcripts():
        assert loaded(client, key) == disk.reference.get_entries(key)
    # The SDK's own importer into the adapter writes the very same sessions and items.
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(disk.config))
    for sid in disk.sids:
        run(import_session_to_store(sid, OwnstateSessionStore(client, store="by-the-sdk"),
                                    directory=str(disk.cwd)))
    assert rows(client, "claude-agent-sdk") == rows(client, "by-the-sdk")


def test_import_from_a_project_directory(client: ownstate.Client, disk: Written) -> None:
    report = run_import("claude", client, str(disk.config / "projects" / disk.project))
    assert (report.units, report.imported) == (2, 2)
    first = disk.transcripts()[0]
    assert loaded(client, first) == disk.reference.get_entries(first)


def test_a_second_run_writes_nothing(client: ownstate.Client, disk: Written) -> None:
    run_import("claude", client, str(disk.config))
    before = rows(client, "claude-agent-sdk")
    again = run_import("claude", client, str(disk.config), verify=True)
    assert (again.already, again.imported, sum(again.written.values())) == (2, 0, 0)
    assert again.ok
    assert rows(client, "claude-agent-sdk") == before


def test_an_import_cut_short_is_finished(client: ownstate.Client, disk: Written) -> None:
    """A run killed between two appends left a prefix (the metadata entry, which has no
    uuid, not yet written): running again appends exactly the rest."""
    adapter = OwnstateSessionStore(client)
    sub = disk.transcripts()[1]
    run(adapter.append(sub, disk.reference.get_entries(sub)[:2]))
    report = run_import("claude", client, str(disk.config))
    assert report.failed == 0
    for key in disk.transcripts():
        assert loaded(client, key) == disk.reference.get_entries(key)


def test_a_transcript_that_differs_is_reported_and_kept(client: ownstate.Client,
                                                        disk: Written) -> None:
    key = disk.key(disk.sids[1])
    mine = [{"type": "user", "uuid": "other", "message": {"role": "user", "content": "x"}}]
    run(OwnstateSessionStore(client).append(key, mine))
    report = run_import("claude", client, str(disk.config))
    assert (report.imported, report.failed) == (1, 1)
    [failure] = report.failures
    assert failure.stage == "write"
    assert failure.ids["session_id"] == disk.sids[1]
    assert loaded(client, key) == mine


def test_an_undecodable_line_skips_its_session_only(client: ownstate.Client,
                                                    disk: Written) -> None:
    bad = disk.main_file(disk.sids[0])
    lines = bad.read_text().splitlines()
    lines[2] = lines[2][:-5]
    bad.write_text("\n".join(lines) + "\n")
    report = run_import("claude", client, str(disk.config))
    assert (report.imported, report.failed) == (1, 1)
    [failure] = report.failures
    assert (failure.stage, failure.ids["session_id"], failure.ids["line"]) == (
        "decode", disk.sids[0], 3)
    for key in disk.transcripts()[:2]:  # nothing of it: neither the main nor the subagent
        assert loaded(client, key) is None
    assert loaded(client, disk.key(disk.sids[1])) == disk.reference.get_entries(
        disk.key(disk.sids[1]))


def test_dry_run_writes_nothing(client: ownstate.Client, disk: Written) -> None:
    report = run_import("claude", client, str(disk.config), dry_run=True)
    assert report.dry_run
    assert report.imported == 2
    assert report.written["sessions"] == 3
    assert report.written["items"] == sum(len(disk.reference.get_entries(k))
                                          for k in disk.transcripts())
    assert list(client.session_stores.list()) == []


def test_verify_finds_a_tampered_item(client: ownstate.Client, disk: Written) -> None:
    run_import("claude", client, str(disk.config))
    session = client.session_stores.get("claude-agent-sdk").get(
        OwnstateSessionStore(client).session_id_for(disk.key(disk.sids[1])))
    session.pop_item()
    report = run_import("claude", client, str(disk.config), dry_run=True, verify=True)
    assert not report.ok
    [failure] = report.failures
    assert (failure.stage, failure.ids["session_id"]) == ("verify", disk.sids[1])
    assert report.source_counts["items"] == report.stored_counts["items"] + 1


def test_cli(tmp_path: Path, disk: Written) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["--url", url, "migrate"]).exit_code == 0  # a dry run runs no DDL
    dry = runner.invoke(cli, ["--url", url, "import", "claude", "--from", str(disk.config),
                              "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "2 to import, 0 already imported, 0 failed; would write 16 items, 3 sessions" \
        in dry.output
    done = runner.invoke(cli, ["import", "claude", "--url", url, "--from", str(disk.config),
                               "--verify"])
    assert done.exit_code == 0, done.output
    assert "2 imported" in done.output
    assert "verified 2 units" in done.output
    with ownstate.connect(url) as client:
        first = disk.transcripts()[0]
        assert loaded(client, first) == disk.reference.get_entries(first)
        client.session_stores.get("claude-agent-sdk").get(
            OwnstateSessionStore(client).session_id_for(disk.transcripts()[0])).pop_item()
    differs = runner.invoke(cli, ["--url", url, "import", "claude", "--from",
                                  str(disk.config), "--dry-run", "--verify"])
    assert differs.exit_code == EXIT_DIFFERENT, differs.output
    assert f"verify failed for {disk.project}/{disk.sids[0]}" in differs.output
    disk.main_file(disk.sids[1]).write_text("{not json\n")
    broken = runner.invoke(cli, ["--url", url, "import", "claude", "--from",
                                 str(disk.config)])
    assert broken.exit_code == EXIT_FAILED_UNITS, broken.output
    assert "decode failed" in broken.output
    assert "line=1" in broken.output
    missing = runner.invoke(cli, ["--url", url, "import", "claude", "--from",
                                  str(tmp_path / "nowhere")])
    assert missing.exit_code == 1
    assert "is not a directory" in missing.output


def test_shards_split_the_units_between_them(client: ownstate.Client, tmp_path: Path) -> None:
    disk = Written(tmp_path, count=6)
    parts = [run_import("claude", client, str(disk.config), shard=(i, 3)) for i in range(3)]
    assert sum(p.units for p in parts) == 6
    assert all(p.failed == 0 for p in parts)
    for key in disk.transcripts():
        assert loaded(client, key) == disk.reference.get_entries(key)
    with pytest.raises(ValueError, match="shard 3/3"):
        run_import("claude", client, str(disk.config), shard=(3, 3))
    bad = CliRunner().invoke(cli, ["import", "claude", "--from", str(disk.config),
                                   "--shard", "0/2"])
    assert bad.exit_code == 2
    assert "I must be from 1 to N" in bad.output


def test_progress_lines_and_bar() -> None:
    import io

    from ownstate.importers.progress import PlainProgress, for_stream

    out = io.StringIO()
    plain = for_stream("import x", out)
    assert isinstance(plain, PlainProgress)  # not a terminal
    plain.start(4)
    plain.advance()
    plain.advance(failed=True)
    plain.finish()
    line = out.getvalue().strip()
    assert line.startswith("import x: 2/4 units (")
    assert "/s, ETA " in line
    assert line.endswith("1 failed")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = for_stream("import x", screen)
    assert not isinstance(bar, PlainProgress)
    bar.start(2)
    bar.advance()
    bar.advance(failed=True)
    bar.finish()
    assert "2/2" in screen.getvalue()
    assert "1 failed" in screen.getvalue()


def test_listing_sources_loads_no_framework() -> None:
    import subprocess
    import sys

    code = ("import sys, ownstate.importers as i; [i.get(s) for s in i.sources()]; "
            "from ownstate.cli import cli; "
            "bad = {m.split('.')[0] for m in sys.modules} & {'langgraph', 'langchain_core', "
            "'claude_agent_sdk', 'psycopg', 'aiosqlite', 'rich'}; "
            "print(sorted(bad)); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
