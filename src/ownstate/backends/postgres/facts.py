"""Memory stores and facts in PostgreSQL.

``facts`` holds every fact ever recorded, current or closed; a fact's row is written once
and later only closed (``superseded_at``, ``valid_to``, ``closed_reason`` set together).
The partial unique index ``facts_current`` lets at most one fact per (subject, key) be
current, so the rule holds even against writers that bypass ownstate. Writers of one
(subject, key) take a transaction-scoped advisory lock on it first, in a fixed order, so
each reads the fact the previous one wrote, and record times never go backwards.

Ranked search reads each fact's ``terms`` (``search.py`` describes them), written with
the fact in its transaction.

Text columns that listings order by use the ``C`` collation, so every backend orders names
and keys the same way (by code point).

It may touch PostgreSQL through ``_core``, the access, search and vector-row parts beside
it, the shared SQL (``backends._sql``), the fact and search ports, the clock
(``ownstate._ids``), JSON decoding (``ownstate._jsontext``), the model and errors.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ... import _ids
from ..._jsontext import decode_json
from ...errors import AlreadyExists, FactNotFound, ItemNotFound, StoreNotFound
from ...model import Fact, FactExplanation, FactHit, Item, MemoryStoreRecord
from .._sql import FACT_COLUMNS, believed_at
from ..ports.facts import NewFact
from ..ports.search import TextQuery
from ._core import Cursor, PostgresCore
from ._vector_rows import store_fact_vectors
from .access import drop_store, start_grants
from .search import add_counts, fact_vector, ranked, scope_prefix, term_counts_sql

__all__ = ["FactsInPostgres"]

_ITEM_COLUMNS = ("i.item_id, i.seq, i.create_time, i.data, i.format, i.role, i.type, "
                 "i.tool_name, i.model, i.in_tokens, i.out_tokens")


def _fact(row: Sequence[Any]) -> Fact:
    return Fact(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
                row[9], row[10], row[11], row[12], row[13], row[14], row[15])


def _lock_key(tenant: str, store: str, subject: str, key: str) -> int:
    """The advisory lock that serialises writers of one (subject, key)."""
    digest = hashlib.blake2b("\x00".join(("ownstate.fact", tenant, store, subject, key))
                             .encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _store_not_found(name: str) -> StoreNotFound:
    return StoreNotFound(store=name)


class FactsInPostgres(PostgresCore):
    """The facts port on PostgreSQL."""

    @staticmethod
    async def _require_memory_store(cur: Cursor, tenant: str, name: str,
                                    lock: str = "") -> MemoryStoreRecord:
        """The store, optionally locked (``FOR UPDATE`` to delete it, ``FOR KEY SHARE`` to
        add facts to it, so the two wait for each other)."""
        await cur.execute(
            "SELECT create_time FROM memory_stores WHERE tenant = %s AND name = %s " + lock,
            (tenant, name))
        row = await cur.fetchone()
        if row is None:
            raise _store_not_found(name)
        return MemoryStoreRecord(tenant=tenant, name=name, create_time=row[0])

    # memory stores ---------------------------------------------------------------------

    async def create_memory_store(self, tenant: str, name: str, now: datetime,
                                  owner: str | None = None) -> MemoryStoreRecord:
        async def run(cur: Cursor) -> MemoryStoreRecord:
            await cur.execute(
                "INSERT INTO memory_stores (tenant, name, create_time) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING", (tenant, name, now))
            if cur.rowcount == 0:
                raise AlreadyExists(store=name)
            await start_grants(cur, tenant, "memory_store", name, owner)
            return MemoryStoreRecord(tenant=tenant, name=name, create_time=now)

        return await self._write(tenant, run)

    async def get_memory_store(self, tenant: str, name: str) -> MemoryStoreRecord:
        return await self._read(tenant,
                                lambda cur: self._require_memory_store(cur, tenant, name))

    async def list_memory_stores(self, tenant: str, limit: int,
                                 after: str | None) -> list[MemoryStoreRecord]:
        async def run(cur: Cursor) -> list[MemoryStoreRecord]:
            await cur.execute(
                "SELECT name, create_time FROM memory_stores WHERE tenant = %s AND name > %s "
                "ORDER BY name LIMIT %s", (tenant, after or "", limit))
            return [MemoryStoreRecord(tenant=tenant, name=r[0], create_time=r[1])
                    for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def list_subjects(self, tenant: str, store: str, limit: int,
                            after: str | None) -> list[str]:
        async def run(cur: Cursor) -> list[str]:
            await self._require_memory_store(cur, tenant, store)
            await cur.execute(
                "SELECT DISTINCT subject FROM facts WHERE tenant = %s AND memory_store = %s "
                "AND subject > %s ORDER BY subject LIMIT %s",
                (tenant, store, after or "", limit))
            return [r[0] for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def delete_memory_store(self, tenant: str, name: str) -> int:
        async def run(cur: Cursor) -> int:
            await self._require_memory_store(cur, tenant, name, "FOR UPDATE")
            return await drop_store(cur, tenant, "memory_store", name)

        return await self._write(tenant, run)

    # facts -----------------------------------------------------------------------------

    @staticmethod
    async def _source_store(cur: Cursor, tenant: str,
                            source: tuple[str | None, str, str]) -> str:
        store, session_id, item_id = source
        await cur.execute(
            "SELECT s.store FROM items i JOIN sessions s ON s.sid = i.sid "
            "WHERE i.tenant = %s AND i.item_id = %s AND s.tenant = %s AND s.session_id = %s "
            "AND (%s::text IS NULL OR s.store = %s)",
            (tenant, item_id, tenant, session_id, store, store))
        row = await cur.fetchone()
        if row is None:
            raise ItemNotFound(session_id=session_id, item_id=item_id)
        return str(row[0])

    async def remember(self, tenant: str, store: str, facts: Sequence[NewFact],
                       now: datetime) -> list[Fact]:
        locks = sorted({_lock_key(tenant, store, f.subject, f.key) for f in facts})

        async def run(cur: Cursor) -> list[Fact]:
            await self._require_memory_store(cur, tenant, store, "FOR KEY SHARE")
            await cur.execute("SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) k",
                              (locks,))
            counts: Counter[str] = Counter()
            made = [await self._remember_one(cur, tenant, store, new, now, counts)
                    for new in facts]
            await store_fact_vectors(cur, tenant, store, [
                (new.fact_id, new.embedding) for new in facts if new.embedding is not None])
            await add_counts(cur, tenant, "fact", store, len(made), sum(f[1] for f in made),
                             counts)
            return [f[0] for f in made]

        return await self._write(tenant, run)

    async def _remember_one(self, cur: Cursor, tenant: str, store: str, new: NewFact,
                            now: datetime, counts: Counter[str]) -> tuple[Fact, int]:
        """The fact stored, and its length in search terms; its lexemes are added to
        ``counts``."""
        source_store = await self._source_store(cur, tenant, new.source) if new.source else None
        await cur.execute(
            "SELECT fid, fact_id, valid_from, recorded_at, superseded_at FROM facts "
            "WHERE tenant = %s AND subject = %s AND memory_store = %s AND key = %s "
            "ORDER BY fid DESC LIMIT 1", (tenant, new.subject, store, new.key))
        last = await cur.fetchone()
        moment = now if last is None else max(now, last[4] or last[3])
        valid_from = new.valid_from if new.valid_from is not None else moment
        supersedes = None
        if last is not None and last[4] is None:
            supersedes = last[1]
            await cur.execute(
                "UPDATE facts SET superseded_at = %s, valid_to = %s, "
                "closed_reason = 'superseded' WHERE fid = %s",
                (moment, max(valid_from, last[2]), last[0]))
        value = json.loads(new.value_json)
        vector, length, lexemes = fact_vector(tenant, store, new.key, value)
        counts.update(lexemes)
        session_id = new.source[1] if new.source else None
        item_id = new.source[2] if new.source else None
        await cur.execute(
            "INSERT INTO facts (tenant, memory_store, fact_id, subject, key, value, "
            "confidence, source_type, source_store, source_session_id, source_item_id, "
            "valid_from, recorded_at, supersedes, terms, terms_len) VALUES (%s, %s, %s, %s, "
            "%s, %s::json, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector, %s)",
            (tenant, store, new.fact_id, new.subject, new.key, new.value_json, new.confidence,
             new.source_type, source_store, session_id, item_id, valid_from, moment,
             supersedes, vector, length))
        return (Fact(
            fact_id=new.fact_id, memory_store=store, subject=new.subject, key=new.key,
            value=value, confidence=new.confidence, source_type=new.source_type,
            source_session_id=session_id, source_item_id=item_id, valid_from=valid_from,
            valid_to=None, recorded_at=moment, superseded_at=None, supersedes=supersedes,
            source_store=source_store,
        ), length)

    async def recall(self, tenant: str, store: str, subject: str, keys: Sequence[str] | None,
                     valid_at: datetime | None, known_at: datetime | None) -> list[Fact]:
        valid_at, known_at = _ids.now_unless(valid_at, known_at)
        # per key, of the facts that cover valid_at as believed at known_at, the one
        # recorded last
        # One statement answers both "which facts" and "does the store exist": the facts
        # are joined to a one-row probe of the store, so an empty answer still says which.
        key_filter = "" if keys is None else "AND key = ANY(%s) "
        query = (
            "SELECT f.* FROM (SELECT 1 FROM memory_stores WHERE tenant = %s AND name = %s) "
            "AS store LEFT JOIN LATERAL ("
            f"SELECT DISTINCT ON (key) {FACT_COLUMNS} FROM facts "
            "WHERE tenant = %s AND subject = %s AND memory_store = %s " + key_filter +
            "AND recorded_at <= %s AND valid_from <= %s "
            "AND (superseded_at IS NULL OR superseded_at > %s OR valid_to > %s) "
            "ORDER BY key, fid DESC) AS f ON true ORDER BY f.key"
        )
        params: list[Any] = [tenant, store, tenant, subject, store]
        if keys is not None:
            params.append(list(keys))
        params += [known_at, valid_at, known_at, valid_at]

        async def run(cur: Cursor) -> list[Fact]:
            await cur.execute(query, params)
            rows = await cur.fetchall()
            if not rows:
                raise _store_not_found(store)
            return [_fact(r) for r in rows if r[0] is not None]

        return await self._read(tenant, run)

    async def history(self, tenant: str, store: str, subject: str, key: str) -> list[Fact]:
        async def run(cur: Cursor) -> list[Fact]:
            await cur.execute(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = %s AND subject = %s "
                "AND memory_store = %s AND key = %s ORDER BY fid",
                (tenant, subject, store, key))
            found = [_fact(r) for r in await cur.fetchall()]
            if not found:
                await self._require_memory_store(cur, tenant, store)
            return found

        return await self._read(tenant, run)

    @staticmethod
    async def _fact_row(cur: Cursor, tenant: str, store: str, fact_id: str) -> Fact:
        await cur.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = %s AND fact_id = %s "
            "AND memory_store = %s", (tenant, fact_id, store))
        row = await cur.fetchone()
        if row is None:
            raise FactNotFound(store=store, fact_id=fact_id)
        return _fact(row)

    async def get_fact(self, tenant: str, store: str, fact_id: str) -> Fact:
        async def run(cur: Cursor) -> Fact:
            await self._require_memory_store(cur, tenant, store)
            return await self._fact_row(cur, tenant, store, fact_id)

        return await self._read(tenant, run)

    async def explain(self, tenant: str, store: str, fact_id: str) -> FactExplanation:
        async def run(cur: Cursor) -> FactExplanation:
            await self._require_memory_store(cur, tenant, store)
            fact = await self._fact_row(cur, tenant, store, fact_id)
            superseded = None
            if fact.supersedes is not None:
                superseded = await self._fact_row(cur, tenant, store, fact.supersedes)
            await cur.execute(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = %s AND subject = %s "
                "AND memory_store = %s AND key = %s AND supersedes = %s",
                (tenant, fact.subject, store, fact.key, fact_id))
            row = await cur.fetchone()
            source = await self._source_item(cur, tenant, fact)
            return FactExplanation(fact, superseded, _fact(row) if row else None, source)

        return await self._read(tenant, run, snapshot=True)  # one snapshot for every read

    @staticmethod
    async def _source_item(cur: Cursor, tenant: str, fact: Fact) -> Item | None:
        if fact.source_store is None or fact.source_item_id is None:
            return None
        session_id = fact.source_session_id or ""
        await cur.execute(
            f"SELECT {_ITEM_COLUMNS} FROM items i JOIN sessions s ON s.sid = i.sid "
            "WHERE i.tenant = %s AND i.item_id = %s AND s.tenant = %s AND s.store = %s "
            "AND s.session_id = %s",
            (tenant, fact.source_item_id, tenant, fact.source_store, session_id))
        row = await cur.fetchone()
        if row is None:
            return None
        return Item(row[0], session_id, row[1], row[2], row[3], row[4], row[5], row[6],
                    row[7], row[8], row[9], row[10])

    async def forget(self, tenant: str, store: str, subject: str, key: str, reason: str,
                     now: datetime) -> Fact | None:
        lock = _lock_key(tenant, store, subject, key)

        async def run(cur: Cursor) -> Fact | None:
            await self._require_memory_store(cur, tenant, store, "FOR KEY SHARE")
            await cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
            await cur.execute(
                f"SELECT {FACT_COLUMNS}, fid FROM facts WHERE tenant = %s AND subject = %s "
                "AND memory_store = %s AND key = %s AND superseded_at IS NULL",
                (tenant, subject, store, key))
            row = await cur.fetchone()
            if row is None:
                return None
            moment = max(now, row[11])
            valid_to = max(moment, row[9])
            await cur.execute(
                "UPDATE facts SET superseded_at = %s, valid_to = %s, closed_reason = %s "
                "WHERE fid = %s", (moment, valid_to, reason, row[16]))
            closed = list(row[:16])
            closed[10], closed[12], closed[14] = valid_to, moment, reason
            return _fact(closed)

        return await self._write(tenant, run)

    async def search(self, tenant: str, store: str, query: TextQuery, subject: str | None,
                     valid_at: datetime | None, limit: int) -> list[FactHit]:
        # the value as text: decoded for the hits only
        columns = ", ".join("f." + c + ("::text" if c == "value" else "")
                            for c in FACT_COLUMNS.split(", "))
        sql = (
            # from the ids, one row at a time by primary key (whatever the statistics say):
            # what scoring needs (the tie key, the length, the counts), not the facts, which
            # are read for the hits alone
            f"SELECT f.fid, f.fact_id, {term_counts_sql('f')} FROM "
            "unnest(%(ids)s::bigint[]) AS j (fid) CROSS JOIN LATERAL "
            "(SELECT * FROM facts f WHERE f.fid = j.fid OFFSET 0) AS f "
            "WHERE f.tenant = %(tenant)s AND f.memory_store = %(scope)s "
            "AND (%(subject)s::text IS NULL OR f.subject = %(subject)s) "
            f"AND {believed_at('%(at)s')}"
        )
        rows_of = (f"SELECT f.fid, {columns} FROM facts f WHERE f.fid = ANY(%(ids)s) "
                   "AND f.tenant = %(tenant)s")
        narrow = ("SELECT f.fid FROM facts f WHERE f.tenant = %(tenant)s "
                  "AND f.memory_store = %(scope)s AND f.subject = %(subject)s "
                  "AND f.terms @@ %(any)s::tsquery")
        params: dict[str, Any] = {"tenant": tenant, "scope": store, "subject": subject,
                                  "at": valid_at or _ids.now()}

        async def run(cur: Cursor) -> list[FactHit]:
            async def fetch(ids: list[int]) -> list[tuple[int, int, str, int, Any]]:
                await cur.execute(sql, {**params, "ids": ids}, binary=True)
                return [(r[0], r[0], r[1], r[2], r[3]) for r in await cur.fetchall()]

            hits = await ranked(cur, "facts", "fid", "fact", scope_prefix(tenant, store),
                                params, query, limit, fetch,
                                narrow if subject is not None else None)
            if not hits:  # a store that is missing has no documents either
                await self._require_memory_store(cur, tenant, store)
                return []
            await cur.execute(rows_of, {"ids": [fid for fid, _ in hits], "tenant": tenant},
                              binary=True)
            rows = {r[0]: r for r in await cur.fetchall()}
            # a hit deleted since it was scored (its subject erased) is left out
            return [FactHit(_fact((*r[1:5], decode_json(r[5]), *r[6:17])), score)
                    for fid, score in hits if (r := rows.get(fid)) is not None]

        return await self._read(tenant, run)

    async def subject_facts(self, tenant: str, subject: str) -> list[Fact]:
        async def run(cur: Cursor) -> list[Fact]:
            await cur.execute(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant = %s AND subject = %s "
                "ORDER BY memory_store, key, fid", (tenant, subject))
            return [_fact(r) for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def erase_subject(self, tenant: str, subject: str,
                            include_sessions: bool) -> dict[str, int]:
        async def run(cur: Cursor) -> dict[str, int]:
            await cur.execute("DELETE FROM facts WHERE tenant = %s AND subject = %s",
                              (tenant, subject))
            facts = int(cur.rowcount)
            sessions = 0
            if include_sessions:
                # items, idempotency keys, runs, checkpoints and assets go with each
                # session through foreign-key cascades
                await cur.execute(
                    "DELETE FROM sessions WHERE tenant = %s AND store IN "
                    "(SELECT name FROM session_stores WHERE tenant = %s) AND actor_id = %s",
                    (tenant, tenant, subject))
                sessions = int(cur.rowcount)
            return {"facts": facts, "sessions": sessions}

        return await self._write(tenant, run)
