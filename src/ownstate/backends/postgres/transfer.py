"""Exact export and restore of every row, in PostgreSQL (the transfer port).

Pages are keyset queries of :mod:`ownstate.backends._transfer_sql`, ordered by code point
(``COLLATE "C"``). Items are read for a run of sessions at once: the sessions of a page
go in as an array ``WITH ORDINALITY`` and their items come back in that order, so a page
costs one query however small the sessions are.

A restore batch is one transaction. Items go in with ``COPY ... FROM STDIN`` (through a
temporary table where row-level security binds the role, see ``Cursor.load_rows``): a
session's items are restored in ``seq`` order, batch after batch, each batch whole or
not at all, so the rows at or below a session's item count are exactly those already
stored and are left out; what remains cannot clash and is copied without a check per
row. The other parts are ``executemany`` inserts that do nothing for a stored key.
Facts, and the items of a store that indexes them, get their ``terms`` as the backend's
own writes compute them (``search.py``), and ``search_stats`` and ``search_terms`` gain
what they add (no trigger does that on INSERT; triggers subtract on DELETE only).

It may touch PostgreSQL through ``_core`` (an export's snapshot held on a connection of
its own, which ``_core`` makes) and psycopg's errors; also the search and
``_tsvector`` parts beside it, the item columns bulk loads write (``sessions``), the
shared transfer SQL (``backends._transfer_sql``), the transfer and search ports, the clock
(``ownstate._ids``), JSON decoding (``ownstate._jsontext``) and errors.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from ..._extras import requires
from ..._ids import now as _clock
from ..._jsontext import decode_json
from ...errors import SessionNotFound
from .. import _transfer_sql as shared
from ..ports.search import item_text, terms
from ..ports.transfer import Cursor, Row, missing_parent
from ._core import EXPORT_SNAPSHOT, PostgresCore
from ._core import Cursor as Sql
from ._tsvector import item_vector_binary
from .search import add_counts, fact_vector
from .sessions import LOADED_ITEM_COLUMNS

with requires("postgres", "the PostgreSQL backend"):
    import psycopg

__all__ = ["TransferInPostgres"]


def _same(value: Any) -> Any:
    return value


DIALECT = shared.Dialect(p="%s", collate=' COLLATE "C"', json_out="{}::text", json_in="%s::json",
                  bytes_in="%b", time_out=_same, time_in=_same)
_SESSION_CHUNK = 512
_ITEMS = ("SELECT b.pos, i.seq, i.item_id, i.create_time, i.format, i.data::text, i.role, "
          "i.type, i.tool_name, i.model, i.in_tokens, i.out_tokens "
          "FROM unnest(%s::bigint[], %s::bigint[]) WITH ORDINALITY AS b(sid, after_seq, pos) "
          "JOIN items i ON i.sid = b.sid AND i.seq > b.after_seq "
          "ORDER BY b.pos, i.seq LIMIT %s")
#: binary COPY: ``data`` goes as the JSON text as stored (the server's ``json`` reads it,
#: and checks it), ``terms`` as the bytes of the ``tsvector`` an append writes (psycopg has
#: no dumper for that type, see ``_tsvector``)
_COPY_TYPES = ("int8", "int8", "text", "text", "timestamptz", "text", "text", "text", "text",
               "text", "text", "int8", "int8", "bytea", "int4")


class TransferInPostgres(PostgresCore):
    """The transfer port over the PostgreSQL tables."""

    @contextlib.asynccontextmanager
    async def export_snapshot(self) -> AsyncIterator[None]:
        """A REPEATABLE READ transaction held open on a connection of its own (outside
        the pool, which the pages use), whose snapshot (``pg_export_snapshot()``) every
        page of the export adopts."""
        await self._open()
        holder: Any = await self._connect(inline=self.runs_inline)
        if holder is None:  # a pool that makes its settings on demand: one of its own
            holder = self._pool.connection()
        async with holder as conn:
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                found = await (await conn.execute("SELECT pg_export_snapshot()")).fetchone()
                assert found is not None
                token = EXPORT_SNAPSHOT.set((self, str(found[0])))
                try:
                    yield
                finally:
                    EXPORT_SNAPSHOT.reset(token)
            finally:
                with contextlib.suppress(psycopg.Error):  # a lost connection ends it too
                    await conn.execute("ROLLBACK")

    def _exporting(self) -> bool:
        held = EXPORT_SNAPSHOT.get()
        return held is not None and held[0] is self

    async def transfer_tenants(self) -> list[str]:
        async def run(cur: Sql) -> list[str]:
            await cur.execute(shared.TENANTS)
            return [r[0] for r in await cur.fetchall()]

        return await self._read(None, run, snapshot=self._exporting())

    async def export_rows(self, tenant: str, part: str, after: Cursor | None,
                          limit: int) -> tuple[list[Row], Cursor | None]:
        limit = min(limit, shared.LARGE_ROWS.get(part, limit))
        if part == "items":
            return await self._read(tenant, lambda cur: _item_page(cur, tenant, after, limit),
                                    snapshot=True)
        if part == "checkpoints":
            return await self._read(tenant, lambda cur: _checkpoint_page(
                cur, tenant, after, limit), snapshot=True)

        async def run(cur: Sql) -> tuple[list[Row], Cursor | None]:
            sql, params = shared.export_query(DIALECT, part, after, limit + 1)
            await cur.execute(sql, [tenant, *params])
            found = await cur.fetchall()
            width = len(shared.EXPORTS[part].columns)
            rows = [shared.make_row(DIALECT, part, r[:width]) for r in found[:limit]]
            return rows, (tuple(found[limit - 1][width:]) if len(found) > limit else None)

        return await self._read(tenant, run, snapshot=self._exporting())

    async def restore_rows(self, tenant: str, part: str, rows: Sequence[Row]) -> int:
        async def run(cur: Sql) -> int:
            if part == "items":
                return await _restore_items(cur, tenant, rows)
            if part == "facts":
                return await _restore_facts(cur, tenant, rows)
            if part == "checkpoints":
                return await _restore_checkpoints(cur, tenant, rows)
            await _check_refs(cur, tenant, part, rows)
            restore = shared.RESTORES[part][1]
            params = [restore(tenant, {**shared.stored_row(DIALECT, part, r), "_now": now})
                      for r in rows]
            await cur.executemany(shared.restore_sql(DIALECT, part), params)
            return int(cur.rowcount)

        now = _clock()
        if not rows:
            return 0
        return await self._write(tenant, run)


async def _sids(cur: Sql, tenant: str, keys: set[tuple[str, str]]) -> dict[tuple[str, str],
                                                                           tuple[int, int]]:
    """``(sid, item_count)`` of each (store, session_id); SessionNotFound for one missing."""
    ordered = sorted(keys)
    await cur.execute(
        "SELECT s.store, s.session_id, s.sid, s.item_count FROM sessions s "
        "JOIN unnest(%s::text[], %s::text[]) AS k(store, session_id) "
        "ON s.store = k.store AND s.session_id = k.session_id WHERE s.tenant = %s "
        "FOR UPDATE OF s",
        ([k[0] for k in ordered], [k[1] for k in ordered], tenant))
    found = {(r[0], r[1]): (int(r[2]), int(r[3])) for r in await cur.fetchall()}
    for key in ordered:
        if key not in found:
            raise SessionNotFound(store=key[0], session_id=key[1])
    return found


async def _check_refs(cur: Sql, tenant: str, part: str, rows: Sequence[Row]) -> None:
    if part in ("runs", "assets", "idempotency_keys"):
        keys = {(r["store"], r["session_id"]) for r in rows if r["store"] is not None}
        if keys:
            await _sids(cur, tenant, keys)
    if part == "effects":
        await _require_stored(cur, tenant, "effects", "run", "runs", "run_id",
                              {r["run_id"] for r in rows})


async def _require_stored(cur: Sql, tenant: str, part: str, what: str, table: str,
                          column: str, names: set[str]) -> None:
    """Refuse a batch of ``part`` when one of the ``names`` it refers to has no row in
    ``table`` (by ``column``); the first missing one, by code point, is named."""
    wanted = sorted(names)
    await cur.execute(f"SELECT {column} FROM {table} WHERE tenant = %s AND {column} = ANY(%s)",
                      (tenant, wanted))
    missing = set(wanted) - {r[0] for r in await cur.fetchall()}
    if missing:
        raise missing_parent(part, what, min(missing))


async def _item_page(cur: Sql, tenant: str, after: Cursor | None,
                     limit: int) -> tuple[list[Row], Cursor | None]:
    store, session_id = (after[0], after[1]) if after is not None else ("", "")
    last_seq = int(after[2]) if after is not None else 0
    rows: list[Row] = []
    while True:
        await cur.execute(
            'SELECT sid, store, session_id, item_count FROM sessions WHERE tenant = %s AND '
            '(store COLLATE "C", session_id COLLATE "C") >= (%s, %s) '
            'ORDER BY store COLLATE "C", session_id COLLATE "C" LIMIT %s',
            (tenant, store, session_id, _SESSION_CHUNK))
        sessions = await cur.fetchall()
        picked: list[tuple[int, str, str, int]] = []
        budget = 0
        examined = 0
        for sid, st, sess, count in sessions:
            examined += 1
            first = last_seq if (st, sess) == (store, session_id) else 0
            if count > first:
                picked.append((sid, st, sess, first))
                budget += count - first
                if budget >= limit - len(rows):
                    break
        if picked:
            await cur.execute(_ITEMS, ([p[0] for p in picked], [p[3] for p in picked],
                                       limit - len(rows)), binary=True)
            for r in await cur.fetchall():
                _, st, sess, _ = picked[r[0] - 1]
                rows.append({"store": st, "session_id": sess, "seq": r[1], "item_id": r[2],
                             "create_time": r[3], "format": r[4], "data": r[5],
                             "role": r[6], "type": r[7], "tool_name": r[8], "model": r[9],
                             "in_tokens": r[10], "out_tokens": r[11]})
        if len(rows) >= limit:
            tail = rows[-1]
            return rows, (tail["store"], tail["session_id"], tail["seq"])
        if examined == len(sessions) and len(sessions) < _SESSION_CHUNK:
            return rows, None
        last = sessions[examined - 1]
        store, session_id, last_seq = last[1], last[2] + "\x00", 0


async def _restore_items(cur: Sql, tenant: str, rows: Sequence[Row]) -> int:
    sids = await _sids(cur, tenant, {(r["store"], r["session_id"]) for r in rows})
    stores = sorted({r["store"] for r in rows})
    await cur.execute("SELECT name FROM session_stores WHERE tenant = %s AND name = ANY(%s) "
                      "AND index_items", (tenant, stores))
    indexed = {r[0] for r in await cur.fetchall()}
    # the rows at or below a session's item count were stored by an earlier batch
    fresh = [r for r in rows if r["seq"] > sids[(r["store"], r["session_id"])][1]]
    if not fresh:
        return 0
    highest: dict[int, int] = {}
    docs: list[int] = []  # the terms_len of each indexed item
    seen: Counter[bytes] = Counter()  # the documents per lexeme (with its NUL)

    def made() -> Iterator[tuple[Any, ...]]:
        # made while the COPY streams, so the server stores a row while the next is made
        for r in fresh:
            sid, seq = sids[(r["store"], r["session_id"])][0], r["seq"]
            # the search terms as an append writes them; none in a store that does not
            # index its items
            vector: bytes | None = None
            size: int | None = None
            if r["store"] in indexed:
                vector, size = item_vector_binary(
                    tenant, terms(item_text(decode_json(r["data"]))), seen)
                docs.append(size)
            if highest.get(sid, 0) < seq:
                highest[sid] = seq
            yield (sid, seq, tenant, r["item_id"], r["create_time"], r["format"], r["data"],
                   r["role"], r["type"], r["tool_name"], r["model"], r["in_tokens"],
                   r["out_tokens"], vector, size)

    await cur.load_rows("items", LOADED_ITEM_COLUMNS, made(), _COPY_TYPES)
    await cur.execute(
        "UPDATE sessions s SET item_count = greatest(s.item_count, h.seq) "
        "FROM unnest(%s::bigint[], %s::bigint[]) AS h(sid, seq) WHERE s.sid = h.sid",
        (list(highest), list(highest.values())))
    await add_counts(cur, tenant, "item", "", len(docs), sum(docs),
                     Counter({lex[:-1].decode(): n for lex, n in seen.items()}))
    return len(fresh)


_FACT_FIELDS = ("memory_store", "fact_id", "subject", "key", "value", "confidence",
                "source_type", "source_store", "source_session_id", "source_item_id",
                "valid_from", "valid_to", "recorded_at", "superseded_at", "supersedes",
                "closed_reason")
_FACT_TYPES = ("text", "text", "text", "text", "text", "float8", "text", "text", "text",
               "text", "timestamptz", "timestamptz", "timestamptz", "timestamptz", "text",
               "text")
_RESTORE_FACTS = (
    "INSERT INTO facts (tenant, " + ", ".join(_FACT_FIELDS) + ", terms, terms_len) "
    "SELECT %(tenant)s, u.memory_store, u.fact_id, u.subject, u.key, u.value::json, "
    "u.confidence, u.source_type, u.source_store, u.source_session_id, u.source_item_id, "
    "u.valid_from, u.valid_to, u.recorded_at, u.superseded_at, u.supersedes, "
    "u.closed_reason, u.terms::tsvector, u.terms_len FROM unnest("
    + ", ".join(f"%({n})s::{t}[]" for n, t in zip(_FACT_FIELDS, _FACT_TYPES, strict=True))
    + ", %(terms)s::text[], %(terms_len)s::int[]) WITH ORDINALITY AS u ("
    + ", ".join(_FACT_FIELDS) + ", terms, terms_len, ord) ORDER BY u.ord "
    "ON CONFLICT DO NOTHING RETURNING memory_store, terms_len, fact_id")


async def _restore_facts(cur: Sql, tenant: str, rows: Sequence[Row]) -> int:
    await _require_stored(cur, tenant, "facts", "memory store", "memory_stores", "name",
                          {r["memory_store"] for r in rows})
    # every fact is indexed, closed ones too, as a remember writes it; the stats of each
    # store gain the facts stored (a fact stored before is left, and not counted)
    columns: dict[str, list[Any]] = {name: [] for name in _FACT_FIELDS}
    columns["terms"], columns["terms_len"] = [], []
    lexemes: dict[str, Iterable[str]] = {}
    for r in rows:
        for name in _FACT_FIELDS:
            columns[name].append(r[name])
        vector = fact_vector(tenant, r["memory_store"], r["key"], json.loads(r["value"]))
        columns["terms"].append(vector.text)
        columns["terms_len"].append(vector.length)
        lexemes[r["fact_id"]] = vector.lexemes
    await cur.execute(_RESTORE_FACTS, {"tenant": tenant, **columns})
    added = await cur.fetchall()
    per_store: dict[str, tuple[list[int], Counter[str]]] = {}
    for store, length, fact_id in added:
        held = per_store.setdefault(store, ([0, 0], Counter()))
        held[0][0] += 1
        held[0][1] += int(length)
        held[1].update(lexemes[fact_id])
    for store, ((docs, total), counts) in sorted(per_store.items()):
        await add_counts(cur, tenant, "fact", store, docs, total, counts)
    return len(added)


async def _checkpoint_page(cur: Sql, tenant: str, after: Cursor | None,
                           limit: int) -> tuple[list[Row], Cursor | None]:
    sql, params = shared.export_query(DIALECT, "checkpoints", after, limit + 1)
    await cur.execute(sql, [tenant, *params])
    found = await cur.fetchall()
    page = found[:limit]
    writes: list[Any] = []
    if page:
        await cur.execute(f"{shared.CHECKPOINT_WRITES} WHERE cid = ANY(%s) ORDER BY wid",
                          ([r[9] for r in page],))
        writes = await cur.fetchall()
    return shared.checkpoint_page(DIALECT, found, limit, writes)


async def _restore_checkpoints(cur: Sql, tenant: str, rows: Sequence[Row]) -> int:
    stored = 0
    for r in rows:
        await cur.execute("SELECT rid FROM runs WHERE tenant = %s AND run_id = %s",
                          (tenant, r["run_id"]))
        run = await cur.fetchone()
        if run is None:
            raise missing_parent("checkpoints", "run", r["run_id"])
        await cur.execute(
            "INSERT INTO checkpoints (rid, tenant, namespace, checkpoint_id, "
            "parent_checkpoint_id, type_tag, metadata, create_time, size, payload) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s::json, %s, %s, %b) ON CONFLICT DO NOTHING "
            "RETURNING cid",
            (run[0], tenant, r["namespace"], r["checkpoint_id"], r["parent_checkpoint_id"],
             r["type_tag"], r["metadata"], r["create_time"], len(r["payload"]), r["payload"]))
        made = await cur.fetchone()
        if made is None:
            continue
        stored += 1
        if r["writes"]:
            await cur.executemany(
                "INSERT INTO checkpoint_writes (cid, tenant, task_id, idx, channel, type_tag, "
                "task_path, size, payload) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %b)",
                [(made[0], tenant, w["task_id"], w["index"], w["channel"], w["type_tag"],
                  w["task_path"], len(w["payload"]), w["payload"]) for w in r["writes"]])
    return stored
