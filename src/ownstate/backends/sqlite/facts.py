"""Memory stores and facts in SQLite.

``facts`` holds every fact ever recorded, current or closed; a fact's row is written once
and later only closed (``superseded_at``, ``valid_to``, ``closed_reason`` set together).
The partial unique index ``facts_current`` lets at most one fact per (subject, key) be
current, so the rule holds even against writers that bypass ownstate.

``fact_search`` is the FTS5 index ranked search reads (``search.py`` describes it); a
fact's id enters ``fact_index_queue`` in the fact's own transaction, and the next
search indexes it.

It may touch the SQLite connections of ``_core``, the access, search and vector-row parts
beside it, the shared SQL (``backends._sql``), the fact and search ports, the clock
(``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ... import _ids
from ..._ids import format_time, parse_time
from ...errors import AlreadyExists, FactNotFound, ItemNotFound, StoreNotFound
from ...model import Fact, FactExplanation, FactHit, Item, MemoryStoreRecord
from .._sql import F_FACT_COLUMNS, FACT_COLUMNS, believed_at
from ..ports.facts import NewFact
from ..ports.search import TextQuery
from ._core import ITEM_COLUMNS, SqliteCore, to_items, write
from ._vector_rows import store_fact_vector
from .access import drop_grants, start_grants
from .search import defer, fact_prefix, ranked

__all__ = ["FactsInSqlite"]



def _fact(row: Sequence[Any]) -> Fact:
    return Fact(
        row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], row[6], row[7], row[8],
        parse_time(row[9]), parse_time(row[10]) if row[10] is not None else None,
        parse_time(row[11]), parse_time(row[12]) if row[12] is not None else None,
        row[13], row[14], row[15],
    )


class FactsInSqlite(SqliteCore):
    """Memory stores and facts in the ``memory_stores``, ``facts`` and ``fact_search`` tables."""

    @staticmethod
    def _require_memory_store(conn: sqlite3.Connection, tenant: str,
                              name: str) -> MemoryStoreRecord:
        row = conn.execute(
            "SELECT create_time FROM memory_stores WHERE tenant = ? AND name = ?",
            (tenant, name)).fetchone()
        if row is None:
            raise StoreNotFound(store=name)
        return MemoryStoreRecord(tenant=tenant, name=name, create_time=parse_time(row[0]))

    # memory stores ---------------------------------------------------------------------

    async def create_memory_store(self, tenant: str, name: str, now: datetime,
                                  owner: str | None = None) -> MemoryStoreRecord:
        def run(conn: sqlite3.Connection) -> MemoryStoreRecord:
            with write(conn):
                inserted = conn.execute(
                    "INSERT INTO memory_stores (tenant, name, create_time) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING", (tenant, name, format_time(now)))
                if inserted.rowcount == 0:
                    raise AlreadyExists(store=name)
                start_grants(conn, tenant, "memory_store", name, owner)
            return MemoryStoreRecord(tenant=tenant, name=name, create_time=now)

        return await self._run_write(run)

    async def get_memory_store(self, tenant: str, name: str) -> MemoryStoreRecord:
        return await self._run(lambda conn: self._require_memory_store(conn, tenant, name))

    async def list_memory_stores(self, tenant: str, limit: int,
                                 after: str | None) -> list[MemoryStoreRecord]:
        return await self._list_named("memory_stores", MemoryStoreRecord, tenant, limit, after)

    async def list_subjects(self, tenant: str, store: str, limit: int,
                            after: str | None) -> list[str]:
        def run(conn: sqlite3.Connection) -> list[str]:
            self._require_memory_store(conn, tenant, store)
            rows = conn.execute(
                "SELECT DISTINCT subject FROM facts WHERE tenant = ? AND memory_store = ? "
                "AND subject > ? ORDER BY subject LIMIT ?", (tenant, store, after or "", limit))
            return [r[0] for r in rows]

        return await self._run(run)

    async def delete_memory_store(self, tenant: str, name: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with write(conn):
                self._require_memory_store(conn, tenant, name)
                deleted = conn.execute(
                    "DELETE FROM facts WHERE tenant = ? AND memory_store = ?", (tenant, name))
                conn.execute("DELETE FROM memory_stores WHERE tenant = ? AND name = ?",
                             (tenant, name))
                drop_grants(conn, tenant, "memory_store", name)
                return int(deleted.rowcount)

        return await self._run_write(run)

    # facts -----------------------------------------------------------------------------

    @staticmethod
    def _source_store(conn: sqlite3.Connection, tenant: str,
                      source: tuple[str | None, str, str]) -> str:
        store, session_id, item_id = source
        row = conn.execute(
            "SELECT s.store FROM items i JOIN sessions s ON s.sid = i.sid "
            "WHERE i.tenant = ? AND i.item_id = ? AND s.tenant = ? AND s.session_id = ? "
            "AND (? IS NULL OR s.store = ?)",
            (tenant, item_id, tenant, session_id, store, store)).fetchone()
        if row is None:
            raise ItemNotFound(session_id=session_id, item_id=item_id)
        return str(row[0])

    async def remember(self, tenant: str, store: str, facts: Sequence[NewFact],
                       now: datetime) -> list[Fact]:
        stamp = format_time(now)

        def run(conn: sqlite3.Connection) -> list[Fact]:
            made: list[Fact] = []
            indexed: list[int] = []
            with write(conn):
                self._require_memory_store(conn, tenant, store)
                for new in facts:
                    made.append(self._remember_one(conn, tenant, store, new, stamp, indexed))
                defer(conn, "fact", "SELECT value AS id FROM json_each(?)", (json.dumps(indexed),))
            return made

        return await self._run(run)

    def _remember_one(self, conn: sqlite3.Connection, tenant: str, store: str, new: NewFact,
                      stamp: str, indexed: list[int]) -> Fact:
        """The fact stored; its ``fid`` is added to ``indexed``, for ``defer``."""
        source_store = self._source_store(conn, tenant, new.source) if new.source else None
        last = conn.execute(
            "SELECT fid, fact_id, valid_from, recorded_at, superseded_at FROM facts "
            "WHERE tenant = ? AND subject = ? AND memory_store = ? AND key = ? "
            "ORDER BY fid DESC LIMIT 1", (tenant, new.subject, store, new.key)).fetchone()
        moment = stamp if last is None else max(stamp, last[4] or last[3])
        valid_from = format_time(new.valid_from) if new.valid_from is not None else moment
        supersedes = None
        if last is not None and last[4] is None:
            supersedes = last[1]
            conn.execute(
                "UPDATE facts SET superseded_at = ?, valid_to = ?, closed_reason = 'superseded' "
                "WHERE fid = ?", (moment, max(valid_from, last[2]), last[0]))
        session_id = new.source[1] if new.source else None
        item_id = new.source[2] if new.source else None
        inserted = conn.execute(
            "INSERT INTO facts (tenant, memory_store, fact_id, subject, key, value, confidence, "
            "source_type, source_store, source_session_id, source_item_id, valid_from, "
            "recorded_at, supersedes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (tenant, store, new.fact_id, new.subject, new.key, new.value_json, new.confidence,
             new.source_type, source_store, session_id, item_id, valid_from, moment,
             supersedes))
        if new.embedding is not None:
            store_fact_vector(conn, tenant, store, int(inserted.lastrowid or 0), new.embedding)
        value = json.loads(new.value_json)
        indexed.append(int(inserted.lastrowid or 0))
        return Fact(
            fact_id=new.fact_id, memory_store=store, subject=new.subject, key=new.key,
            value=value, confidence=new.confidence, source_type=new.source_type,
            source_session_id=session_id, source_item_id=item_id,
            valid_from=parse_time(valid_from), valid_to=None, recorded_at=parse_time(moment),
            superseded_at=None, supersedes=supersedes, source_store=source_store,
        )

    async def recall(self, tenant: str, store: str, subject: str, keys: Sequence[str] | None,
                     valid_at: datetime | None, known_at: datetime | None) -> list[Fact]:
        valid_at, known_at = _ids.now_unless(valid_at, known_at)
        # SQLite returns the bare columns of the row that holds max(fid) in each group:
        # per key, the covering fact recorded last.
        key_filter = "" if keys is None else "AND key IN (SELECT value FROM json_each(?)) "
        sql = (
            f"SELECT {FACT_COLUMNS}, max(fid) FROM facts "
            "WHERE tenant = ? AND subject = ? AND memory_store = ? " + key_filter +
            "AND recorded_at <= ? AND valid_from <= ? "
            "AND (superseded_at IS NULL OR superseded_at > ? OR valid_to > ?) "
            "GROUP BY key ORDER BY key"
        )
        valid, known = format_time(valid_at), format_time(known_at)
        params: list[Any] = [tenant, subject, store]
        if keys is not None:
            params.append(json.dumps(list(keys)))
        params += [known, valid, known, valid]

        def run(conn: sqlite3.Connection) -> list[Fact]:
            found = [_fact(r) for r in conn.execute(sql, params)]
            if not found:  # the store is only looked up when it might be missing
                self._require_memory_store(conn, tenant, store)
            return found

        return await self._run(run)

    async def history(self, tenant: str, store: str, subject: str, key: str) -> list[Fact]:
        def run(conn: sqlite3.Connection) -> list[Fact]:
            self._require_memory_store(conn, tenant, store)
            rows = conn.execute(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = ? AND subject = ? "
                "AND memory_store = ? AND key = ? ORDER BY fid", (tenant, subject, store, key))
            return [_fact(r) for r in rows]

        return await self._run(run)

    @staticmethod
    def _fact_row(conn: sqlite3.Connection, tenant: str, store: str, fact_id: str) -> Fact:
        row = conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = ? AND fact_id = ? "
            "AND memory_store = ?", (tenant, fact_id, store)).fetchone()
        if row is None:
            raise FactNotFound(store=store, fact_id=fact_id)
        return _fact(row)

    async def get_fact(self, tenant: str, store: str, fact_id: str) -> Fact:
        def run(conn: sqlite3.Connection) -> Fact:
            self._require_memory_store(conn, tenant, store)
            return self._fact_row(conn, tenant, store, fact_id)

        return await self._run(run)

    async def explain(self, tenant: str, store: str, fact_id: str) -> FactExplanation:
        def run(conn: sqlite3.Connection) -> FactExplanation:
            conn.execute("BEGIN")  # one snapshot for the four reads
            try:
                self._require_memory_store(conn, tenant, store)
                fact = self._fact_row(conn, tenant, store, fact_id)
                superseded = None
                if fact.supersedes is not None:
                    superseded = self._fact_row(conn, tenant, store, fact.supersedes)
                row = conn.execute(
                    f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = ? AND subject = ? "
                    "AND memory_store = ? AND key = ? AND supersedes = ?",
                    (tenant, fact.subject, store, fact.key, fact_id)).fetchone()
                source = self._source_item(conn, tenant, fact)
            finally:
                conn.execute("COMMIT")
            return FactExplanation(fact, superseded, _fact(row) if row else None, source)

        return await self._run(run)

    @staticmethod
    def _source_item(conn: sqlite3.Connection, tenant: str, fact: Fact) -> Item | None:
        if fact.source_store is None or fact.source_item_id is None:
            return None
        session_id = fact.source_session_id or ""
        found = to_items(conn.execute(
            f"SELECT {', '.join('i.' + c for c in ITEM_COLUMNS.split(', '))} "
            "FROM items i JOIN sessions s ON s.sid = i.sid "
            "WHERE i.tenant = ? AND i.item_id = ? AND s.tenant = ? AND s.store = ? "
            "AND s.session_id = ?",
            (tenant, fact.source_item_id, tenant, fact.source_store, session_id)), session_id)
        return found[0] if found else None

    async def forget(self, tenant: str, store: str, subject: str, key: str, reason: str,
                     now: datetime) -> Fact | None:
        stamp = format_time(now)

        def run(conn: sqlite3.Connection) -> Fact | None:
            with write(conn):
                self._require_memory_store(conn, tenant, store)
                row = conn.execute(
                    f"SELECT {FACT_COLUMNS}, fid FROM facts WHERE tenant = ? AND subject = ? "
                    "AND memory_store = ? AND key = ? AND superseded_at IS NULL",
                    (tenant, subject, store, key)).fetchone()
                if row is None:
                    return None
                moment = max(stamp, row[11])
                valid_to = max(moment, row[9])
                conn.execute(
                    "UPDATE facts SET superseded_at = ?, valid_to = ?, closed_reason = ? "
                    "WHERE fid = ?", (moment, valid_to, reason, row[16]))
                closed = list(row[:16])
                closed[10], closed[12], closed[14] = valid_to, moment, reason
                return _fact(closed)

        return await self._run_write(run)

    async def search(self, tenant: str, store: str, query: TextQuery, subject: str | None,
                     valid_at: datetime | None, limit: int) -> list[FactHit]:
        moment = format_time(valid_at) if valid_at is not None else None
        sql = (
            # CROSS JOIN keeps SQLite from reading the store's facts by index for the ids
            f"SELECT {F_FACT_COLUMNS}, c.c0 FROM json_each(?) j "
            "CROSS JOIN facts f ON f.fid = j.value "
            "CROSS JOIN fact_search_content c ON c.id = f.fid "
            "WHERE f.tenant = ? AND f.memory_store = ? "
            f"AND (? IS NULL OR f.subject = ?) AND {believed_at('?')}"
        )

        def run(conn: sqlite3.Connection) -> list[FactHit]:
            self._require_memory_store(conn, tenant, store)
            at = moment or format_time(_ids.now())

            def fetch(ids: list[int]) -> list[tuple[Fact, str, str]]:
                rows = conn.execute(sql, (json.dumps(ids), tenant, store, subject, subject,
                                          at, at, at, at))
                return [(_fact(r), r[16], r[0]) for r in rows]

            def narrow() -> list[int]:
                return [r[0] for r in conn.execute(
                    "SELECT fid FROM facts WHERE tenant = ? AND memory_store = ? "
                    "AND subject = ?", (tenant, store, subject))]

            hits = ranked(conn, "fact", fact_prefix(tenant, store), query, limit, fetch,
                          narrow if subject is not None else None)
            return [FactHit(fact, score) for fact, score in hits]

        return await self._run(run)

    async def subject_facts(self, tenant: str, subject: str) -> list[Fact]:
        def run(conn: sqlite3.Connection) -> list[Fact]:
            rows = conn.execute(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = ? AND subject = ? "
                "ORDER BY memory_store, key, fid", (tenant, subject))
            return [_fact(r) for r in rows]

        return await self._run(run)

    async def erase_subject(self, tenant: str, subject: str,
                            include_sessions: bool) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            with write(conn):
                facts = conn.execute("DELETE FROM facts WHERE tenant = ? AND subject = ?",
                                     (tenant, subject)).rowcount
                sessions = 0
                if include_sessions:
                    # items, idempotency keys and everything else a session owns go with it
                    # through foreign-key cascades
                    sessions = conn.execute(
                        "DELETE FROM sessions WHERE tenant = ? AND store IN "
                        "(SELECT name FROM session_stores WHERE tenant = ?) AND actor_id = ?",
                        (tenant, tenant, subject)).rowcount
                return {"facts": int(facts), "sessions": int(sessions)}

        return await self._run_write(run)
