"""``ownstate copy``: every row from one backend into another, resumable and verified."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner
from transfer_support import KINDS, Maker, filled

import ownstate
from ownstate import archive
from ownstate.backends.ports.transfer import PARTS
from ownstate.cli import cli
from ownstate.errors import InvalidInput
from ownstate.testing.transfer import part_rows


@pytest.mark.parametrize("source", KINDS)
@pytest.mark.parametrize("target", KINDS)
def test_copy_then_verify_finds_both_equal(source: str, target: str, make_url: Maker) -> None:
    if source == "memory" and target == "memory":
        pytest.skip("the same pair is covered by the archive round trip")
    src, dst = make_url(source), make_url(target)
    with filled(src) as client:
        expected = part_rows(client)
    report = archive.copy(src, dst, include_keys=True, verify=True)
    assert report.verified
    assert report.ok, report.differences
    assert all(report.rows[part] > 0 for part in PARTS)
    with ownstate.connect(dst) as copied:
        assert part_rows(copied) == expected
    again = archive.copy(src, dst, include_keys=True, verify=True)
    assert sum(again.rows.values()) == 0
    assert again.ok


def test_verify_names_the_session_that_differs(make_url: Maker) -> None:
    src, dst = make_url("sqlite"), make_url("sqlite")
    with filled(src):
        pass
    assert archive.copy(src, dst).ok
    with ownstate.connect(dst) as copied:
        copied.session_stores.get("st-one").get("s1").append_items(
            [{"type": "message", "role": "user", "content": "only here"}])
        copied.memory_stores.get("mem").remember("user:2", "k", "only here")
    report = archive.copy(src, dst, verify=True)
    # the session too: its last activity moved
    assert report.differences == ["default:sessions", "default:items:st-one/s1",
                                  "default:facts"]
    assert not report.ok


def test_copy_continues_where_it_stopped(make_url: Maker) -> None:
    """A copy that stopped part-way (here: only the first part) is finished by running it
    again; rows already there are counted as skipped, none is stored twice."""
    src, dst = make_url("sqlite"), make_url("postgres")
    with filled(src) as client:
        expected = part_rows(client)

    async def first_part_only() -> None:
        source = await ownstate.connect_async(src)
        target = await ownstate.connect_async(dst)
        try:
            rows, _ = await source.backend.export_rows("default", "session_stores", None, 100)
            await target.backend.restore_rows("default", "session_stores", rows)
            rows, _ = await source.backend.export_rows("default", "sessions", None, 100)
            await target.backend.restore_rows("default", "sessions", rows)
            rows, _ = await source.backend.export_rows("default", "items", None, 10)
            await target.backend.restore_rows("default", "items", rows)
        finally:
            await source.close()
            await target.close()

    asyncio.run(first_part_only())
    report = archive.copy(src, dst, include_keys=True, verify=True)
    assert report.ok
    assert report.skipped["items"] == 10
    assert report.skipped["sessions"] == 6
    with ownstate.connect(dst) as copied:
        assert part_rows(copied) == expected


def test_a_restore_refuses_rows_of_a_missing_session(make_url: Maker) -> None:
    for kind in ("memory", "sqlite", "postgres", "redis"):
        src, dst = make_url("memory"), make_url(kind)
        with filled(src) as client:
            items = part_rows(client)["items"][:3]
        with ownstate.connect(dst) as target:
            with pytest.raises(ownstate.NotFound):
                target._portal.call(target.backend.restore_rows("default", "items", items))
            assert part_rows(target)["items"] == []


def test_copy_refuses_a_remote_server(tmp_path: Path) -> None:
    from conftest import _live_server

    server = _live_server()
    remote = server.url_with(server.mint_key(tenant="remote", principal="p", admin=True))
    with pytest.raises(InvalidInput, match="cannot export or restore"):
        archive.copy("memory://", remote)
    with ownstate.connect(remote) as client, pytest.raises(InvalidInput):
        archive.export(client, tmp_path / "x.tar")
    assert not (tmp_path / "x.tar").exists()


def test_cli_copy(tmp_path: Path, make_url: Maker) -> None:
    src, dst = make_url("sqlite"), make_url("sqlite")
    with filled(src):
        pass
    runner = CliRunner()
    done = runner.invoke(cli, ["copy", src, dst, "--verify"])
    assert done.exit_code == 0, done.output
    assert "verified: equal" in done.output
    with ownstate.connect(dst) as copied:
        copied.session_stores.get("st-one").get("s1").append_items(
            [{"type": "message", "role": "user", "content": "only here"}])
    different = runner.invoke(cli, ["copy", src, dst, "--verify"])
    assert different.exit_code == 3
    assert "st-one/s1" in different.output
    bad = runner.invoke(cli, ["copy", src, "nosuch://x"])
    assert bad.exit_code == 1


#: items whose text goes through every branch of the terms: accents, full-width and
#: ligature forms, scripts written without spaces, emoji, punctuation, repeats past the
#: positions a lexeme keeps, a term long enough to be stored as its hash, tool arguments
SEARCHED = [
    "Crème brûlée à la façon de Zoë; naïve café",
    "東京都の天気は晴れです 明日も晴れ",
    "ภาษาไทยไม่มีช่องว่าง and ﬁnance ＡＢＣ",  # noqa: RUF001 - full-width on purpose
    "emoji 🎉🎉 party, snake_case and C++; x=1",
    " ".join(["again"] * 300) + " café",
    "x" * 260 + " tail words",
    "gothic " + "\U00010330\U00010331\U00010332" * 20 + " stored as its hash",
    "plain ascii words about the quick brown fox",
]


def _searched_items() -> list[dict[str, object]]:
    items: list[dict[str, object]] = [{"type": "message", "role": "user", "content": t}
                                      for t in SEARCHED]
    items.append({"type": "function_call", "call_id": "c1", "name": "lookup_weather",
                  "arguments": '{"city": "Zürich", "days": 3}'})
    return items


def test_search_after_a_copy_finds_what_appends_would(make_url: Maker) -> None:
    """A copy into PostgreSQL stores the terms an append stores there: the same rows
    rank the same for every query."""
    import psycopg
    from conftest import POSTGRES_URL

    src, appended, copied = make_url("sqlite"), make_url("postgres"), make_url("postgres")
    for url in (src, appended):
        with ownstate.connect(url) as client:
            session = client.session_stores.create("searched").add(actor_id="user:1",
                                                                    session_id="s")
            for item in _searched_items():  # one append each, as a conversation goes
                session.append_items([item])
    assert archive.copy(src, copied, verify=True).ok
    queries = ["creme", "CAFÉ", "晴れ", "ไทย", "finance abc", "party", "again",
               "\U00010330\U00010331\U00010332" * 20,
               "zurich", "lookup_weather", "fox words", "tail"]

    def found(url: str) -> list[list[tuple[int, float]]]:
        with ownstate.connect(url) as client:
            return [[(h.item.seq, round(h.score, 9))
                     for h in client.session_stores.search_items(q, limit=20)]
                    for q in queries]

    expected = found(appended)
    assert all(expected), expected
    assert found(copied) == expected

    def stored(url: str) -> list[tuple[object, ...]]:
        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(POSTGRES_URL) as conn:
            return conn.execute(f"SELECT seq, terms::text, terms_len FROM {schema}.items "
                                "ORDER BY seq").fetchall()

    assert stored(copied) == stored(appended)


@pytest.mark.parametrize("kind", KINDS)
def test_a_row_naming_what_is_not_stored_is_refused_in_the_same_words(
        kind: str, make_url: Maker) -> None:
    """A restore batch whose rows name a memory store or a run the target does not hold is
    refused, on every backend, naming the part, what is missing and one of its names."""
    src, dst = make_url("memory"), make_url(kind)
    with filled(src):
        pass
    missing = {"facts": ("memory store", "memory_store"), "effects": ("run", "run_id"),
               "checkpoints": ("run", "run_id")}

    async def refusals() -> None:
        source = await ownstate.connect_async(src)
        target = await ownstate.connect_async(dst)
        try:
            for part, (what, column) in missing.items():
                rows, _ = await source.backend.export_rows("default", part, None, 100)
                assert rows
                with pytest.raises(InvalidInput) as refused:
                    await target.backend.restore_rows("default", part, rows)
                named = {f"a row of {part} names the missing {what} {r[column]!r}"
                         for r in rows}
                assert str(refused.value) in named
                assert refused.value.details == {"field": part}
                exported, _ = await target.backend.export_rows("default", part, None, 100)
                assert exported == []
        finally:
            await source.close()
            await target.close()

    asyncio.run(refusals())
