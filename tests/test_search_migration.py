"""Ranked search over data written before it existed: ``ownstate migrate`` indexes it.

A SQLite file is made at schema version 3 with plain SQL, as an earlier ownstate left
it (facts, closed ones among them, and items); migrating it to the current version
makes every fact and item findable, and the migrated file searches as a new one does.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

import ownstate
from ownstate.backends.sqlite.schema import MIGRATIONS

T0 = "2026-01-01T00:00:00.000000Z"
T1 = "2026-02-01T00:00:00.000000Z"


def _version_3(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE ownstate_schema (version INTEGER PRIMARY KEY, "
                 "description TEXT NOT NULL, applied_at TEXT NOT NULL)")
    for migration in MIGRATIONS[:3]:
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute("INSERT INTO ownstate_schema VALUES (?, ?, ?)",
                     (migration.version, migration.description, T0))
    conn.execute("INSERT INTO session_stores VALUES ('default', 'chats', ?)", (T0,))
    conn.execute("INSERT INTO sessions (tenant, store, session_id, actor_id, root_session_id, "
                 "create_time, last_activity_time, item_count) VALUES "
                 "('default', 'chats', 's1', 'user:1', 's1', ?, ?, 2)", (T0, T0))
    for seq, text in ((1, "Where is my Café order?"), (2, "It ships from 東京 tomorrow")):
        conn.execute("INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data) "
                     "VALUES (1, ?, 'default', ?, ?, 'ownstate.message', ?)",
                     (seq, f"itm_{seq}", T0, f'{{"role": "user", "content": "{text}"}}'))
    conn.execute("INSERT INTO memory_stores VALUES ('default', 'mem', ?)", (T0,))
    conn.execute("INSERT INTO facts (tenant, memory_store, fact_id, subject, key, value, "
                 "source_type, valid_from, valid_to, recorded_at, superseded_at, "
                 "closed_reason) VALUES ('default', 'mem', 'fct_1', 'user:1', 'channel', "
                 "'\"email\"', 'agent', ?, ?, ?, ?, 'superseded')", (T0, T1, T0, T1))
    conn.execute("INSERT INTO facts (tenant, memory_store, fact_id, subject, key, value, "
                 "source_type, source_store, source_session_id, source_item_id, valid_from, "
                 "recorded_at, supersedes) VALUES ('default', 'mem', 'fct_2', 'user:1', "
                 "'channel', '\"SMS, never email\"', 'agent', 'chats', 's1', 'itm_1', ?, ?, "
                 "'fct_1')", (T1, T1))
    conn.close()


def test_migrate_indexes_what_was_written_before(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_3(path)
    with ownstate.connect(f"sqlite:///{path}") as client:  # migrates an embedded file
        assert client.check() == (MIGRATIONS[-1].version, MIGRATIONS[-1].version)
        memory = client.memory_stores.get("mem")
        assert [h.fact.fact_id for h in memory.search("email sms")] == ["fct_2"]
        (hit,) = memory.search("email", as_of=datetime(2026, 1, 15, tzinfo=UTC))
        assert hit.fact.fact_id == "fct_1"  # the closed fact, as of when it held
        hits = client.session_stores.search_items("cafe")
        assert [(h.store, h.item.session_id, h.item.seq) for h in hits] == [("chats", "s1", 1)]
        assert [h.item.item_id for h in client.session_stores.search_items("東京")] == ["itm_2"]
        # and what is written after the migration is found beside it
        session = client.session_stores.get("chats").get("s1")
        session.append_items([{"role": "user", "content": "café again"}])
        assert sorted(h.item.seq for h in client.session_stores.search_items("cafe")) == [1, 3]


def test_postgres_migrate_indexes_what_was_written_before(
        caplog: pytest.LogCaptureFixture) -> None:
    from conftest import POSTGRES_URL, _require

    _require("postgres")
    import uuid

    import psycopg

    from ownstate.backends.postgres.schema import MIGRATIONS as PG

    schema = f"t_old_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL search_path TO {schema}, public")
                conn.execute("SET LOCAL ownstate.tenant = 'default'")
                conn.execute("CREATE TABLE ownstate_schema (version integer PRIMARY KEY, "
                             "description text NOT NULL, applied_at timestamptz NOT NULL "
                             "DEFAULT now())")
                for migration in PG[:4]:
                    conn.execute(";\n".join(migration.statements))
                    conn.execute("INSERT INTO ownstate_schema (version, description) "
                                 "VALUES (%s, %s)", (migration.version, migration.description))
                conn.execute("INSERT INTO session_stores VALUES ('default', 'chats', now())")
                conn.execute(
                    "INSERT INTO sessions (tenant, store, session_id, actor_id, "
                    "root_session_id, create_time, last_activity_time, item_count) VALUES "
                    "('default', 'chats', 's1', 'user:1', 's1', now(), now(), 1) RETURNING sid")
                conn.execute(
                    "INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data) "
                    "SELECT sid, 1, 'default', 'itm_1', now(), 'ownstate.message', "
                    "'{\"role\": \"user\", \"content\": \"Where is my Café order?\"}' "
                    "FROM sessions")
                conn.execute("INSERT INTO memory_stores VALUES ('default', 'mem', now())")
                conn.execute(
                    "INSERT INTO facts (tenant, memory_store, fact_id, subject, key, value, "
                    "source_type, valid_from, recorded_at) VALUES ('default', 'mem', 'fct_1', "
                    "'user:1', 'channel', '\"email\"', 'agent', now(), now())")
            with caplog.at_level(logging.INFO, logger="ownstate.migrate"):
                ownstate.connect(f"{POSTGRES_URL}?schema={schema}").close()
            # it said each migration it ran, and how many rows it indexed
            told = [r.getMessage() for r in caplog.records if r.name == "ownstate.migrate"]
            assert [m for m in told if m.startswith("migration ")] == [
                f"migration {m.version} of {PG[-1].version}: {m.description}" for m in PG[4:]]
            for table in ("facts", "items"):
                assert any(re.fullmatch(rf"indexing {table} for search: 1 of 1 \([\d,]+/s\)",
                                        m) for m in told), told
            with ownstate.connect(f"{POSTGRES_URL}?schema={schema}") as client:
                assert client.check() == (PG[-1].version, PG[-1].version)
                memory = client.memory_stores.get("mem")
                assert [h.fact.fact_id for h in memory.search("email")] == ["fct_1"]
                hits = client.session_stores.search_items("cafe")
                assert [h.item.item_id for h in hits] == ["itm_1"]
                memory.remember("user:2", "channel", "email too")
                assert len(memory.search("email")) == 2
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_migrate_counts_the_terms_of_what_was_indexed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_3(path)
    with ownstate.connect(f"sqlite:///{path}") as client:
        client.check()
    conn = sqlite3.connect(path)
    for kind in ("fact", "item"):
        want: dict[str, list[int]] = {}
        for (text,) in conn.execute(f"SELECT terms FROM {kind}_search"):
            found = text.split(" ")
            for term in set(found):
                want.setdefault(term, [0, 0])[0] += 1
            want[found[0]][1] += len(found) - 1
        got = {t: [d, s] for t, d, s in conn.execute(
            f"SELECT term, docs, size FROM {kind}_term_counts")}
        assert got == want
        assert got  # the data written before is counted
    conn.close()


def test_a_long_migration_step_logs_its_count_rate_and_time_left(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from ownstate.backends import _migrations

    clock = [100.0]
    monkeypatch.setattr(_migrations.time, "monotonic", lambda: clock[0])
    with caplog.at_level(logging.INFO, logger="ownstate.migrate"):
        progress = _migrations.Progress("indexing facts for search", 1_000_000)
        progress.advance(2_000)  # within the first 5 seconds: nothing yet
        clock[0] += 6
        progress.advance(58_000)  # 60,000 in 6 s: 10,000/s, 940,000 to go
        clock[0] += 2
        progress.advance(4_000)  # 2 s after the last line: nothing
        clock[0] += 92
        progress.advance(930_000)
        clock[0] += 0.5
        progress.advance(6_000)
        progress.finish()  # the last count, once
        progress.finish()
        _migrations.Progress("indexing items for search", 0).finish()  # nothing to do
        stuck = _migrations.Progress("indexing items for search", 5)
        stuck.finish()  # counted work that did not happen is said
    assert [r.getMessage() for r in caplog.records] == [
        "indexing facts for search: 60,000 of 1,000,000 (10,000/s, about 1m34s left)",
        "indexing facts for search: 994,000 of 1,000,000 (9,940/s, about 0s left)",
        "indexing facts for search: 1,000,000 of 1,000,000 (9,950/s)",
        "indexing items for search: 0 of 5 (0/s)",
    ]
