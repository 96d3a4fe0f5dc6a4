"""SQLite indexes what writes queue at the next search: the term statistics then equal a
recount of the index, whatever was appended, remembered, forked, deleted, imported or
migrated, and every item of a store that indexes its items is indexed once, or queued.
A write that fails, and an indexing that fails, leave the index, the statistics and the
queue as they were."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import ownstate
from ownstate import archive
from ownstate.backends.sqlite import search as sqlite_search
from ownstate.backends.sqlite.schema import MIGRATIONS
from ownstate.errors import NotFound


def recount(conn: sqlite3.Connection, kind: str) -> dict[str, tuple[int, int]]:
    """What ``{kind}_term_counts`` must hold, counted from the index's texts."""
    want: dict[str, list[int]] = {}
    for (text,) in conn.execute(f"SELECT terms FROM {kind}_search"):
        found = text.split(" ")
        for term in set(found):
            want.setdefault(term, [0, 0])[0] += 1
        want[found[0]][1] += len(found) - 1
    return {t: (d, s) for t, (d, s) in want.items()}


def counted(conn: sqlite3.Connection, kind: str) -> dict[str, tuple[int, int]]:
    # a term whose documents were all deleted keeps a row of zeros
    return {t: (d, s) for t, d, s in conn.execute(
        f"SELECT term, docs, size FROM {kind}_term_counts") if (d, s) != (0, 0)}


def state(path: Path) -> tuple[object, ...]:
    """Everything indexing writes: the index texts, the statistics and the queues."""
    with sqlite3.connect(path) as conn:
        return tuple(sorted(conn.execute(f"SELECT * FROM {table}").fetchall()) for table in (
            "fact_search_content", "item_search_content", "fact_term_counts",
            "item_term_counts", "fact_index_queue", "item_index_queue"))


def check(path: Path) -> None:
    """The statistics equal a recount; every item of an indexing store is indexed or
    queued, and no other item is indexed."""
    with sqlite3.connect(path) as conn:
        for kind in ("fact", "item"):
            assert counted(conn, kind) == recount(conn, kind), kind
        queued = "EXISTS (SELECT 1 FROM item_index_queue q WHERE i.id BETWEEN q.first AND q.last)"
        indexed = "EXISTS (SELECT 1 FROM item_search_content c WHERE c.id = i.id)"
        rows = conn.execute(
            f"SELECT t.index_items, {indexed}, {queued} FROM items i "
            "JOIN sessions s ON s.sid = i.sid "
            "JOIN session_stores t ON t.tenant = s.tenant AND t.name = s.store").fetchall()
        assert all(bool(i) or q if x else not i for x, i, q in rows), rows
        assert conn.execute("SELECT count(*) FROM item_search_content c "
                            "WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.id = c.id)"
                            ).fetchone() == (0,)


def queued(path: Path, kind: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {kind}_index_queue").fetchone()[0])


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Path, ownstate.Client]]:
    path = tmp_path / "os.db"
    with ownstate.connect(f"sqlite:///{path}") as client:
        yield path, client


def test_a_search_indexes_what_writes_queued(db: tuple[Path, ownstate.Client]) -> None:
    path, client = db
    session = client.session_stores.create("chats").add(actor_id="u")
    session.append_items([{"role": "user", "content": "the red kettle"}])
    session.append_items([{"role": "user", "content": "a blue kettle"}])
    memory = client.memory_stores.create("mem")
    memory.remember_many([{"subject": "u", "key": "colour", "value": "red"},
                          {"subject": "u", "key": "drink", "value": "tea kettle"}])
    assert queued(path, "item") == 2
    assert queued(path, "fact") == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM item_search_content").fetchone() == (0,)
    assert [h.item.seq for h in client.session_stores.search_items("red")] == [1]
    assert queued(path, "item") == 0
    assert queued(path, "fact") == 1  # each kind is indexed by its own search
    assert [h.fact.key for h in memory.search("kettle")] == ["drink"]
    assert queued(path, "fact") == 0
    check(path)
    # indexed once: a second search finds nothing more to do
    assert len(client.session_stores.search_items("kettle")) == 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM item_search_content").fetchone() == (2,)


def test_counts_match_a_recount_after_writes_and_deletes(
        db: tuple[Path, ownstate.Client]) -> None:
    path, client = db
    stores = client.session_stores
    chats, quiet = stores.create("chats"), stores.create("quiet", index_items=False)
    memory = client.memory_stores.create("mem")
    one = chats.add(actor_id="u", session_id="one")
    one.append_items([{"role": "user", "content": f"note {n} about tea"} for n in range(5)])
    memory.remember("u", "drink", "tea")
    memory.remember("u", "drink", "coffee")  # closes the first; both stay indexed
    stores.search_items("tea")
    memory.search("tea")
    check(path)
    child = one.fork()
    one.append_items([{"role": "user", "content": "queued tea, then popped"}])
    one.pop_item()  # queued, never indexed
    one.pop_item()  # indexed: uncounted
    # the popped rows' ids are reused by a store that does not index its items
    quiet.add(actor_id="u").append_items([{"role": "user", "content": "quiet tea"}] * 3)
    check(path)
    assert sorted(h.item.seq for h in stores.search_items("tea")
                  if h.item.session_id == child.session_id) == [1, 2, 3, 4, 5]
    assert all(h.store == "chats" for h in stores.search_items("quiet"))
    check(path)
    child.clear()
    memory.forget("u", "drink")
    memory.remember_many([{"subject": "v", "key": f"k{n}", "value": "tea"} for n in range(3)])
    one.delete(force=True)
    client.memory_stores.delete("mem")
    check(path)
    assert stores.search_items("tea") == []
    check(path)


def test_an_import_queues_what_it_restores(db: tuple[Path, ownstate.Client],
                                           tmp_path: Path) -> None:
    _, client = db
    session = client.session_stores.create("chats").add(actor_id="u")
    session.append_items([{"role": "user", "content": f"exported tea {n}"} for n in range(4)])
    client.session_stores.create("quiet", index_items=False).add(actor_id="u").append_items(
        [{"role": "user", "content": "quiet tea"}])
    client.memory_stores.create("mem").remember("u", "drink", "tea")
    archive.export(client, tmp_path / "a.tar")
    target = tmp_path / "target.db"
    with ownstate.connect(f"sqlite:///{target}") as copy:
        copy.session_stores.create("chats").add(actor_id="u").append_items(
            [{"role": "user", "content": "already here, tea"}])
        copy.session_stores.search_items("tea")
        archive.import_archive(copy, tmp_path / "a.tar")
        check(target)
        assert len(copy.session_stores.search_items("tea")) == 5
        assert len(copy.memory_stores.get("mem").search("tea")) == 1
        check(target)
        archive.import_archive(copy, tmp_path / "a.tar")  # again: nothing new to index
        assert len(copy.session_stores.search_items("tea")) == 5
        check(target)


def test_a_write_that_fails_leaves_index_counts_and_queue_as_they_were(
        db: tuple[Path, ownstate.Client]) -> None:
    path, client = db
    memory = client.memory_stores.create("mem")
    memory.remember("u", "drink", "tea")
    session = client.session_stores.create("chats").add(actor_id="u")
    session.append_items([{"role": "user", "content": "tea"}])
    before = state(path)
    with pytest.raises(NotFound):  # the second fact's source item does not exist
        memory.remember_many([
            {"subject": "u", "key": "food", "value": "toast"},
            {"subject": "u", "key": "snack", "value": "tea cake",
             "source": ("chats", session.session_id, "itm_missing")}])
    assert state(path) == before
    memory.search("tea")
    indexed = state(path)
    assert indexed != before
    check(path)


def test_an_indexing_that_fails_leaves_everything_queued(
        db: tuple[Path, ownstate.Client], monkeypatch: pytest.MonkeyPatch) -> None:
    path, client = db
    session = client.session_stores.create("chats").add(actor_id="u")
    session.append_items([{"role": "user", "content": "tea"}])
    client.session_stores.search_items("tea")
    session.append_items([{"role": "user", "content": "more tea"}])
    before = state(path)

    def broken(*args: object) -> None:
        raise RuntimeError("disk full, say")

    monkeypatch.setattr(sqlite_search, "count_terms", broken)
    with pytest.raises(Exception, match="disk full"):
        client.session_stores.search_items("tea")
    assert state(path) == before
    monkeypatch.undo()
    assert len(client.session_stores.search_items("tea")) == 2
    check(path)


def test_a_write_indexes_a_long_queue_itself(db: tuple[Path, ownstate.Client],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path, client = db
    monkeypatch.setattr(sqlite_search, "PENDING_LIMIT", 10)
    session = client.session_stores.create("chats").add(actor_id="u")
    for n in range(5):
        session.append_items([{"role": "user", "content": f"tea {n}"}] * 3)
    # the write that brought the queue to 10 ids or more indexed them all
    assert queued(path, "item") == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM item_search_content").fetchone() == (12,)
    check(path)
    memory = client.memory_stores.create("mem")
    memory.remember_many([{"subject": "u", "key": f"k{n}", "value": "tea"} for n in range(12)])
    assert queued(path, "fact") == 0
    check(path)


def test_migrating_from_the_previous_version_keeps_the_counts(tmp_path: Path) -> None:
    from test_search_migration import _version_3

    path = tmp_path / "old.db"
    _version_3(path)
    conn = sqlite3.connect(path, isolation_level=None)
    sqlite_search.register_functions(conn)
    previous = [m for m in MIGRATIONS if m.version < 9]
    for migration in previous[3:]:
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute("INSERT INTO ownstate_schema VALUES (?, ?, ?)",
                     (migration.version, migration.description, "2026-03-01T00:00:00.000Z"))
    conn.close()
    with ownstate.connect(f"sqlite:///{path}") as client:
        assert client.check() == (MIGRATIONS[-1].version, MIGRATIONS[-1].version)
        check(path)
        session = client.session_stores.get("chats").get("s1")
        session.append_items([{"role": "user", "content": "café again"}])
        assert sorted(h.item.seq for h in client.session_stores.search_items("cafe")) == [1, 3]
        check(path)
