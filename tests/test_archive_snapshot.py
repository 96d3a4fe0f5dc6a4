"""An export reads one snapshot (SQLite, PostgreSQL): what other writers commit while it
runs is in none of its parts; and idempotency keys travel with the items they name."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from transfer_support import Maker, filled, parts

import ownstate
from ownstate import archive
from ownstate.archive import _stream
from ownstate.testing.transfer import first_items


class _WriteOnce:
    """A progress report that, after the export's first page, has another client write
    to the same database: new items in a session, a new session, a new fact version."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.wrote = False

    def start(self, total: int | None) -> None:
        pass

    def advance(self, *, failed: bool = False, by: int = 1) -> None:
        if self.wrote:
            return
        self.wrote = True
        with ownstate.connect(self.url) as other:
            store = other.session_stores.get("st-one")
            store.get("s1").append_items([{"type": "message", "role": "user",
                                            "content": "during the export"}])
            store.add(actor_id="user:late", session_id="late").append_items(
                [{"type": "message", "role": "user", "content": "late"}])
            other.memory_stores.get("mem").remember("user:1", "k", "during")

    def finish(self) -> None:
        pass


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_an_export_reads_one_point_in_time(kind: str, make_url: Maker, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "PAGE_ROWS", 2)  # many pages: writes land between them
    url = make_url(kind)
    before, during = tmp_path / "before.tar", tmp_path / "during.tar"
    with filled(url) as client:
        made = archive.export(client, before)
        writer = _WriteOnce(url)
        report = archive.export(client, during, progress=writer)
        assert writer.wrote
        assert report.rows == made.rows
        assert parts(during) == parts(before)
        manifest = archive.verify(during)
        assert {p: manifest.rows(p) for p in manifest.parts} == made.rows
        # the writes did happen: the next export has them
        after = archive.export(client, tmp_path / "after.tar")
    assert after.rows["items"] == made.rows["items"] + 2
    assert after.rows["sessions"] == made.rows["sessions"] + 1
    assert after.rows["facts"] == made.rows["facts"] + 1


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_copy_reads_one_point_in_time(kind: str, make_url: Maker, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from ownstate.archive import _copy

    monkeypatch.setattr(_copy, "COPY_ROWS", 2)
    src, dst = make_url(kind), make_url("memory")
    with filled(src) as client:
        expected = archive.export(client, tmp_path / "before.tar")
    writer = _WriteOnce(src)
    report = archive.copy(src, dst, progress=writer)
    assert writer.wrote
    assert report.rows == expected.rows


def _without(source: Path, target: Path, part: str) -> None:
    """The archive as a version that did not know ``part`` wrote it."""
    with tarfile.open(source) as old, tarfile.open(target, "w") as new:
        for member in old.getmembers():
            if member.name == f"parts/{part}.jsonl":
                continue
            data = old.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == "manifest.json":
                raw = json.loads(data)
                del raw["parts"][part]
                data = json.dumps(raw).encode()
            member.size = len(data)
            new.addfile(member, io.BytesIO(data))


def test_an_archive_without_idempotency_keys_still_imports(make_url: Maker,
                                                          tmp_path: Path) -> None:
    whole, older = tmp_path / "whole.tar", tmp_path / "older.tar"
    with filled(make_url("memory")) as client:
        made = archive.export(client, whole)
    assert made.rows["idempotency_keys"] == 4  # one per session's first append
    _without(whole, older, "idempotency_keys")
    with ownstate.connect(make_url("sqlite")) as target:
        restored = archive.import_archive(target, older)
        assert "idempotency_keys" not in restored.rows
        assert restored.rows["items"] == made.rows["items"]
        # without the key the retry is a new append, as before keys travelled
        session = target.session_stores.get("st-one").get("s1")
        assert session.append_items(first_items(), idempotency_key="fill-1")[0].seq == 8
