"""What is particular to the SQLite backend: its file, its schema, its migrations."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

import pytest

import ownstate
from ownstate.backends.sqlite._core import SqliteCore, write
from ownstate.backends.sqlite.schema import SCHEMA_VERSION


def url(path: Path) -> str:
    return f"sqlite:///{path}"


def test_schema_is_plain_queryable_sql(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    with ownstate.connect(url(db)) as client:
        session = client.session_stores.create("support").add(actor_id="u1", session_id="s1")
        session.append_items([
            {"role": "user", "content": "hi"},
            {"type": "function_call", "name": "refund", "arguments": "{}", "call_id": "c"},
        ])
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT session_id, seq, role, type, tool_name, json_extract(data, '$.content') "
        "FROM session_items WHERE tenant = 'default' AND store = 'support' ORDER BY seq"
    ).fetchall()
    assert rows == [("s1", 1, "user", "message", None, "hi"),
                    ("s1", 2, None, "function_call", "refund", None)]
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()


def test_a_batch_of_mixed_shapes_is_stored_in_order_with_every_column(
        tmp_path: Path) -> None:
    # the append writes the derived columns an item leaves empty as NULL, one statement
    # per run of items alike: runs of each shape, in and out of order, store every column
    # and keep the rows in seq order
    db = tmp_path / "o.db"
    shapes = [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "again"},
        {"type": "function_call", "name": "refund", "arguments": "{}", "call_id": "c"},
        {"role": "assistant", "content": "ok", "model": "gpt-4.1",
         "usage": {"input_tokens": 7, "output_tokens": 0}},
        {"kind": "note"},
        {"role": "assistant", "content": "ok", "usage": {"output_tokens": 3}},
        {"role": "user", "content": "last"},
    ]
    with ownstate.connect(url(db)) as client:
        session = client.session_stores.create("support", index_items=False).add(
            actor_id="u1", session_id="s1")
        appended = session.append_items(shapes)
        read = list(session.list_items(order_by="create_time asc"))
    assert read == appended
    assert [(i.seq, i.role, i.type, i.tool_name, i.model, i.in_tokens, i.out_tokens)
            for i in appended] == [
        (1, "user", "message", None, None, None, None),
        (2, "user", "message", None, None, None, None),
        (3, None, "function_call", "refund", None, None, None),
        (4, "assistant", "message", None, "gpt-4.1", 7, 0),
        (5, None, None, None, None, None, None),
        (6, "assistant", "message", None, None, None, 3),
        (7, "user", "message", None, None, None, None),
    ]
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT seq FROM items ORDER BY id")] == list(
        range(1, 8))
    conn.close()


def test_data_survives_reopening(tmp_path: Path) -> None:
    with ownstate.connect(url(tmp_path / "o.db")) as client:
        client.session_stores.create("keep").add(actor_id="a", session_id="s").append_items(
            [{"role": "user", "content": "persisted"}])
    with ownstate.connect(url(tmp_path / "o.db"), migrate=False) as client:
        items = list(client.session_stores.get("keep").get("s").list_items())
        assert [i.data["content"] for i in items] == ["persisted"]


def test_verify_only_refuses_an_unmigrated_database_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()  # an existing, empty file (a missing one is the next test)
    with pytest.raises(ownstate.SchemaVersion) as err:
        ownstate.connect(url(db), migrate=False)
    assert (err.value.found, err.value.expected) == (0, SCHEMA_VERSION)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    conn.close()


def test_verify_only_does_not_create_a_missing_file(tmp_path: Path) -> None:
    db = tmp_path / "missing.db"
    with pytest.raises(ownstate.SchemaVersion):
        ownstate.connect(url(db), migrate=False)
    assert not db.exists()


@pytest.mark.parametrize("migrate", [True, False], ids=["migrate", "verify"])
@pytest.mark.parametrize("parent", ["no/such/dir", "a-file"])
def test_a_missing_directory_is_named_not_taken_for_an_old_schema(
    tmp_path: Path, migrate: bool, parent: str
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    db = tmp_path / parent / "x.db"
    with pytest.raises(ownstate.InvalidInput) as err:
        ownstate.connect(url(db), migrate=migrate)
    assert err.value.field == "url"
    assert str(db.parent) in str(err.value)
    assert "does not exist" in str(err.value) or "is not a directory" in str(err.value)
    assert "migrate" not in str(err.value)
    assert not (tmp_path / "no").exists()
    assert (tmp_path / "a-file").read_text() == "not a directory"


def test_migrate_then_check(tmp_path: Path) -> None:
    with ownstate.connect(url(tmp_path / "o.db"), migrate=True) as client:
        assert client.check() == (SCHEMA_VERSION, SCHEMA_VERSION)
        assert client.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    ownstate.connect(url(db)).close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO ownstate_schema VALUES (?, 'from the future', 'now')",
                 (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    for migrate in (True, False):
        with pytest.raises(ownstate.SchemaVersion) as err:
            ownstate.connect(url(db), migrate=migrate)
        assert err.value.found == SCHEMA_VERSION + 1


def test_a_locked_database_is_backend_unavailable(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    with ownstate.connect(url(db) + "?busy_timeout=0.2") as client:
        session = client.session_stores.create("locked").add(actor_id="a")
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(ownstate.BackendUnavailable) as err:
                session.append_items([{"role": "user", "content": "waits"}])
            assert isinstance(err.value.__cause__, sqlite3.OperationalError)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert list(session.list_items()) == []
        session.append_items([{"role": "user", "content": "now it goes"}])


def _open_files(path: Path) -> int:
    fds = Path("/proc/self/fd")
    found = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            found += fd.readlink() == path
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_threads_that_come_and_go_share_the_connections(tmp_path: Path) -> None:
    # A sync client is called inline on its caller's threads; short-lived ones (LangGraph
    # runs each step's writes on threads of its own) must not each leave a connection open.
    db = tmp_path / "o.db"
    with ownstate.connect(url(db)) as client:
        session = client.session_stores.create("threads").add(actor_id="a")
        before = _open_files(db.resolve())
        for n in range(20):
            worker = threading.Thread(target=session.append_items,
                                      args=([{"role": "user", "content": f"m{n}"}],))
            worker.start()
            worker.join()
        assert _open_files(db.resolve()) - before <= 1
        assert [i.data["content"] for i in session.list_items(order_by="create_time asc")
                ] == [f"m{n}" for n in range(20)]
    assert _open_files(db.resolve()) == 0


def _hold_a_write(core: SqliteCore, events: list[tuple[str, str]], inside: threading.Event,
                  release: threading.Event) -> None:
    def hold(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(lambda sql: events.append(("a", sql)))
        try:
            with write(conn):
                conn.execute("INSERT INTO t VALUES (1)")
                inside.set()
                release.wait(10)
        finally:
            conn.set_trace_callback(None)

    core._call(hold)


def test_writers_of_one_process_queue_for_the_file_before_they_begin(tmp_path: Path) -> None:
    # A writer waiting for another writer of its process (here of another backend on the
    # same file) waits on the process's lock and begins once the other has committed,
    # instead of starting its BEGIN IMMEDIATE and polling SQLite's busy handler, which
    # sleeps a millisecond or more between tries.
    db = tmp_path / "o.db"
    first, second = SqliteCore(db), SqliteCore(db)
    first._call(lambda conn: conn.execute("CREATE TABLE t (x)"))
    events: list[tuple[str, str]] = []
    inside, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_a_write, args=(first, events, inside, release))
    holder.start()
    assert inside.wait(10)

    def insert(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(lambda sql: events.append(("b", sql)))
        try:
            with write(conn):
                conn.execute("INSERT INTO t VALUES (2)")
        finally:
            conn.set_trace_callback(None)

    waiter = threading.Thread(target=second._call, args=(insert,))
    waiter.start()
    waiter.join(0.3)  # time for it to reach its write, which it must not begin
    assert waiter.is_alive()
    release.set()
    holder.join(10)
    waiter.join(10)
    assert [e for e in events if e[1] in ("BEGIN IMMEDIATE", "COMMIT")] == [
        ("a", "BEGIN IMMEDIATE"), ("a", "COMMIT"), ("b", "BEGIN IMMEDIATE"), ("b", "COMMIT")]
    assert first._call(lambda conn: conn.execute("SELECT x FROM t ORDER BY x").fetchall()
                       ) == [(1,), (2,)]
    for core in (first, second):
        asyncio.run(core.close())


def test_overlapping_writes_take_the_writing_connection_in_turn(tmp_path: Path) -> None:
    # Each connection has a page cache of its own, which SQLite empties when another
    # connection has committed since: a write that waits for another of its backend then
    # takes the connection the other wrote on (its cache current), not an idle one of its
    # own, and a call made after them takes that connection too.
    core = SqliteCore(tmp_path / "o.db")
    core._call(lambda conn: conn.execute("CREATE TABLE t (x)"))
    core._call(lambda conn: core._call(lambda other: None))  # two connections, both idle
    used: list[sqlite3.Connection] = []
    inside, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        used.append(conn)
        with write(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            inside.set()
            release.wait(10)

    def insert(conn: sqlite3.Connection) -> None:
        used.append(conn)
        with write(conn):
            conn.execute("INSERT INTO t VALUES (2)")

    holder = threading.Thread(target=asyncio.run, args=(core._run_write(hold),))
    holder.start()
    assert inside.wait(10)
    waiter = threading.Thread(target=asyncio.run, args=(core._run_write(insert),))
    waiter.start()
    waiter.join(0.3)  # it waits for the first write before it takes a connection
    assert waiter.is_alive()
    assert len(used) == 1
    release.set()
    holder.join(10)
    waiter.join(10)
    assert len(used) == 2
    assert used[1] is used[0]
    assert core._call(lambda conn: (conn is used[0],
                                    conn.execute("SELECT x FROM t ORDER BY x").fetchall())
                      ) == (True, [(1,), (2,)])
    asyncio.run(core.close())


def test_a_writer_kept_waiting_past_the_busy_timeout_fails_and_stores_nothing(
        tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    with ownstate.connect(f"{url(db)}?busy_timeout=0.2") as client:
        session = client.session_stores.create("waits").add(actor_id="a", session_id="s1")
        holder_core = SqliteCore(db)
        holder_core._call(lambda conn: conn.execute("CREATE TABLE t (x)"))
        inside, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold_a_write,
                                  args=(holder_core, [], inside, release))
        holder.start()
        assert inside.wait(10)
        try:
            with pytest.raises(ownstate.BackendUnavailable, match="locked"):
                session.append_items([{"role": "user", "content": "late"}])
        finally:
            release.set()
            holder.join(10)
        assert list(session.list_items()) == []
        session.append_items([{"role": "user", "content": "in time"}])
        assert [i.data["content"] for i in session.list_items()] == ["in time"]
    asyncio.run(holder_core.close())


@pytest.mark.parametrize("bad", ["sqlite://", "sqlite://host/x.db", "mysql://x",
                                 "sqlite:///x.db?busy_timeout=soon",
                                 "sqlite:///x.db?synchronous=sometimes"])
def test_bad_urls(bad: str) -> None:
    with pytest.raises(ownstate.InvalidInput):
        ownstate.connect(bad)


def test_default_url_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with ownstate.connect() as client:
        client.session_stores.create("default-db")
    assert (tmp_path / "ownstate.db").exists()
    monkeypatch.setenv("OWNSTATE_URL", url(tmp_path / "from-env.db"))
    with ownstate.connect() as client:
        assert list(client.session_stores.list()) == []
    assert (tmp_path / "from-env.db").exists()
