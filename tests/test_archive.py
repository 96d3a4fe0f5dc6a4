"""Archives: export, import into another backend, export again gives the same parts, on
every pair of backends that transfer; archives that are not whole are refused before
anything is written; an import killed part-way and run again leaves one copy."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from transfer_support import KINDS, Maker, filled, parts

import ownstate
from ownstate import archive
from ownstate.backends import Capability
from ownstate.backends.ports.transfer import PARTS
from ownstate.cli import cli
from ownstate.errors import InvalidInput, SchemaVersion
from ownstate.testing.transfer import fill_every_kind, first_items, part_rows


@pytest.mark.parametrize("source", KINDS)
@pytest.mark.parametrize("target", KINDS)
def test_round_trip_gives_the_sameparts(source: str, target: str, make_url: Maker,
                                         tmp_path: Path) -> None:
    first, second = tmp_path / "first.tar", tmp_path / "second.tar"
    with filled(make_url(source)) as client:
        made = archive.export(client, first, include_keys=True)
    assert made.tenants == ["acme", "default"]
    assert all(made.rows[part] > 0 for part in PARTS), made.rows
    with ownstate.connect(make_url(target)) as copy:
        restored = archive.import_archive(copy, first)
        assert restored.rows == made.rows
        archive.export(copy, second, include_keys=True)
        # what was restored behaves: the paused run is outstanding with its token, the
        # fact history is whole, the next item takes the next seq
        waiting = copy.runs.outstanding()
        assert [r.fencing_token for r in waiting] == [1]
        assert len(copy.memory_stores.get("mem").history("user:1", "k")) == 2
        assert copy.memory_stores.get("mem").search("nested")
        # the search indexes came with the rows: restored facts and items are found,
        # and the items of a store that does not index them are not
        hits = copy.session_stores.search_items("hi")
        assert {h.store for h in hits} == {"st-one"}
        assert copy.session_stores.search_items("whispered") == []
        hush = copy.session_stores.get("st-quiet").get("hush")
        assert [i.data["content"] for i in hush.list_items()] == ["whispered secret"]
        decided = copy.runs.decided().items
        assert [(r.decision.outcome, r.decision.comment, r.decision.decided_by)
                for r in decided if r.decision] == [("approve", "fine ✓", "alice")]
        assert [d.payload for d in decided[0].decisions] == [{"amount": 4}]
        # the store still does not index what is appended to it after the restore
        hush.append_items([{"type": "message", "role": "user", "content": "whispered"}])
        assert copy.session_stores.search_items("whispered") == []
        session = copy.session_stores.get("st-one").get("s0")
        assert session.append_items([{"type": "message", "role": "user",
                                      "content": "next"}])[0].seq == 8
        # an append retried after the move is recognised by its idempotency key: it
        # returns what the first call stored and writes nothing
        retried = copy.session_stores.get("st-one").get("s1")
        again_items = retried.append_items(first_items(), idempotency_key="fill-1")
        assert [i.seq for i in again_items] == list(range(1, 8))
        assert len(list(retried.list_items())) == 7
        with pytest.raises(ownstate.IdempotencyKeyReused):
            retried.append_items(first_items(2), idempotency_key="fill-1")
        again = archive.import_archive(copy, first)
        assert sum(again.rows.values()) == 0
        assert again.skipped == made.rows
    assert parts(first) == parts(second)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres", "redis"])
def test_pages_of_three_rows_read_what_one_page_does(kind: str, make_url: Maker) -> None:
    with filled(make_url(kind)) as client:
        small, large = part_rows(client, page=3), part_rows(client, page=10_000)
    assert small == large
    assert len(small["items"]) == 3 * 7 + 7 + 1  # the fork's copies, the quiet store's


def test_keys_only_when_asked(make_url: Maker, tmp_path: Path) -> None:
    with filled(make_url("memory")) as client:
        made = archive.export(client, tmp_path / "a.tar", tenants=["default"])
    assert "api_keys" not in made.rows
    manifest = archive.verify(tmp_path / "a.tar")
    assert "api_keys" not in manifest.parts
    assert manifest.raw["tenants"] == ["default"]


# refused archives -----------------------------------------------------------------------


def _rewrite(source: Path, target: Path, *, manifest: Callable[[dict], None] | None = None,
             part: str | None = None, change: Callable[[bytes], bytes] | None = None) -> None:
    """Copy an archive, changing its manifest or one part (a well-formed tar still)."""
    with tarfile.open(source) as old, tarfile.open(target, "w") as new:
        for member in old.getmembers():
            data = old.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == "manifest.json" and manifest is not None:
                raw = json.loads(data)
                manifest(raw)
                data = json.dumps(raw).encode()
            if part is not None and change is not None and member.name == f"parts/{part}.jsonl":
                data = change(data)
            member.size = len(data)
            new.addfile(member, io.BytesIO(data))


def _flip(data: bytes) -> bytes:
    at = data.index(b"hi 1")
    return data[:at] + b"HI 1" + data[at + 4:]


def _refused_cases(good: Path, tmp: Path) -> dict[str, Path]:
    cases = {name: tmp / f"{name}.tar" for name in
             ("future", "corrupted", "truncated", "resized", "undecodable", "no-manifest")}

    def future(raw: dict) -> None:
        raw["format_version"] = archive.FORMAT_VERSION + 1

    _rewrite(good, cases["future"], manifest=future)
    _rewrite(good, cases["corrupted"], part="items", change=_flip)
    whole = good.read_bytes()
    cases["truncated"].write_bytes(whole[:len(whole) * 2 // 3])
    _rewrite(good, cases["resized"], part="items", change=lambda d: d + d.splitlines()[0]
             + b"\n")

    bad_line = b'{"tenant":"default","name":7,"create_time":"x"}\n'

    def matching(raw: dict) -> None:  # the hash and size agree: only decoding finds it
        raw["parts"]["session_stores"].update(
            rows=1, bytes=len(bad_line), sha256=hashlib.sha256(bad_line).hexdigest())

    _rewrite(good, cases["undecodable"], manifest=matching, part="session_stores",
             change=lambda _: bad_line)
    with tarfile.open(good) as old, tarfile.open(cases["no-manifest"], "w") as new:
        for member in old.getmembers()[1:]:
            new.addfile(member, old.extractfile(member))
    return cases


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres", "redis"])
def test_an_archive_not_whole_is_refused_before_anything_is_written(
        kind: str, make_url: Maker, tmp_path: Path) -> None:
    good = tmp_path / "good.tar"
    with filled(make_url("memory")) as client:
        archive.export(client, good)
    cases = _refused_cases(good, tmp_path)
    with ownstate.connect(make_url(kind)) as target:
        for name, path in cases.items():
            expected = SchemaVersion if name == "future" else InvalidInput
            with pytest.raises(expected) as caught:
                archive.import_archive(target, path)
            assert "nothing was written" in str(caught.value), name
            assert _tenants(target) == [], name


def _tenants(client: ownstate.Client) -> list[str]:
    """Every tenant holding anything in the client's database."""
    found: list[str] = client._portal.call(client.backend.transfer_tenants())
    return found


def test_the_corrupted_part_is_named(tmp_path: Path, make_url: Maker) -> None:
    good = tmp_path / "good.tar"
    with filled(make_url("memory")) as client:
        archive.export(client, good)
    cases = _refused_cases(good, tmp_path)
    with pytest.raises(InvalidInput, match=r"SHA-256 of items"):
        archive.verify(cases["corrupted"])
    with pytest.raises(InvalidInput, match=r"session_stores\.jsonl line 1"):
        archive.verify(cases["undecodable"])
    with pytest.raises(SchemaVersion, match="format version 2"):
        archive.verify(cases["future"])


def test_a_remote_server_cannot_export(tmp_path: Path) -> None:
    from ownstate.backends.http import HttpBackend

    assert Capability.TRANSFER not in HttpBackend.capabilities


# interrupted import ---------------------------------------------------------------------


def test_an_import_killed_part_way_then_run_again_leaves_one_copy(
        tmp_path: Path, make_url: Maker) -> None:
    big = tmp_path / "big.tar"
    with ownstate.connect(make_url("memory")) as client:
        fill_every_kind(client, sessions=20, items=600)
        archive.export(client, big)
    db = tmp_path / "target.db"
    url = f"sqlite:///{db}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "ownstate", "--url", url, "import",
                                "archive", "--from", str(big)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    import sqlite3

    while time.monotonic() < deadline and process.poll() is None:
        try:
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT count(*) FROM items").fetchone()[0] > 0:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.005)
    killed = process.poll() is None
    print("killed mid-import:", killed)
    if killed:
        process.send_signal(signal.SIGKILL)
    process.wait()
    with ownstate.connect(url) as target:
        if killed:
            partial = part_rows(target, page=10_000)
            assert 0 < len(partial["items"]) < 20 * 600
        archive.import_archive(target, big)
        archive.export(target, tmp_path / "after.tar")
    assert parts(big) == parts(tmp_path / "after.tar")


# the CLI --------------------------------------------------------------------------------


def test_cli_exit_codes(tmp_path: Path, make_url: Maker) -> None:
    source = f"sqlite:///{tmp_path}/source.db"
    with filled(source):
        pass
    runner = CliRunner()
    out = tmp_path / "cli.tar"
    done = runner.invoke(cli, ["--url", source, "export", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "items: 34 rows" in done.output
    one = runner.invoke(cli, ["--url", source, "--tenant", "acme", "export", "--out",
                              str(tmp_path / "acme.tar")])
    assert one.exit_code == 0
    assert archive.verify(tmp_path / "acme.tar").raw["tenants"] == ["acme"]
    target = f"sqlite:///{tmp_path}/target.db"
    cases = _refused_cases(out, tmp_path)
    refused = runner.invoke(cli, ["--url", target, "import", "archive", "--from",
                                  str(cases["corrupted"])])
    assert refused.exit_code == 1
    assert "nothing was written" in refused.output
    imported = runner.invoke(cli, ["import", "archive", "--from", str(out), "--url", target,
                                   "--tenant", "acme"])
    assert imported.exit_code == 0, imported.output
    with ownstate.connect(target, tenant="acme") as acme:
        assert _tenants(acme) == ["acme"]
    imported = runner.invoke(cli, ["--url", target, "import", "archive", "--from", str(out)])
    assert imported.exit_code == 0, imported.output
    assert "items: 29 rows (5 already there)" in imported.output
    missing = runner.invoke(cli, ["--url", target, "import", "archive", "--from",
                                  str(tmp_path / "none.tar")])
    assert missing.exit_code == 1
    assert "archive" in runner.invoke(cli, ["import", "--help"]).output


def test_a_compressed_archive_round_trips(make_url: Maker, tmp_path: Path) -> None:
    with filled(make_url("memory")) as client:
        archive.export(client, tmp_path / "state.tgz")
        archive.export(client, tmp_path / "state.tar")
    with tarfile.open(tmp_path / "state.tgz", "r:gz"):
        pass  # gzip indeed
    with ownstate.connect(make_url("sqlite")) as target:
        archive.import_archive(target, tmp_path / "state.tgz")
        archive.export(target, tmp_path / "again.tar")
    assert parts(tmp_path / "again.tar") == parts(tmp_path / "state.tar")
