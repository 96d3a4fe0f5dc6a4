"""Bundles of new sessions in one transaction, in PostgreSQL (the bulk port).

One batch is one transaction of a fixed number of statements, however many sessions it
holds: the sessions in one ``INSERT ... SELECT FROM unnest(...)`` that returns those it
made (a session already stored is skipped, and so is everything of its bundle); their
items with ``COPY`` (through a temporary table where row-level security binds the role,
see ``Cursor.load_rows``); the runs and checkpoints as ``unnest`` inserts; the pending
writes with ``executemany`` (pipelined). Items get the search terms, ``search_stats`` and
``search_terms`` an append gives them, and each session the item count and activity time
its appends leave. After it commits, the tables it grew are analyzed when they have
doubled since their statistics were taken (``_statistics``): the reads that follow a bulk
load (an import's verification) are planned from them.

It may touch PostgreSQL through ``_core``, the search, session and statistics parts beside
it, the bulk port and errors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...errors import AlreadyExists, StoreNotFound
from ..ports.bulk import NewSessionBundle
from ._core import Cursor
from ._statistics import Analyzing
from .search import Vector, add_counts, item_vector
from .sessions import LOADED_ITEM_COLUMNS, _labels_json

__all__ = ["BulkInPostgres"]

_SESSIONS = (
    "INSERT INTO sessions (tenant, store, session_id, actor_id, parent_session_id, "
    "root_session_id, metadata, create_time, last_activity_time, item_count) "
    "SELECT %s, %s, u.session_id, u.actor_id, NULL, u.session_id, u.metadata::json, %s, %s, "
    "u.items FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[]) WITH ORDINALITY "
    "AS u (session_id, actor_id, metadata, items, ord) ORDER BY u.ord "
    "ON CONFLICT DO NOTHING RETURNING session_id, sid")
_RUNS = (
    "INSERT INTO runs (sid, tenant, run_id, store, session_id, actor_id, framework, "
    "thread_key, status, status_since, awaiting, step_count, usd_cost, started_at, ended_at, "
    "lease_owner, lease_expires_at, fencing_token) "
    "SELECT u.sid, %s, u.run_id, %s, u.session_id, u.actor_id, u.framework, u.thread_key, "
    "u.status, u.status_since, u.awaiting::json, u.step_count, 0, u.started_at, u.ended_at, "
    "NULL, NULL, u.token FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::text[], %s::bigint[], "
    "%s::timestamptz[], %s::timestamptz[], %s::bigint[]) WITH ORDINALITY AS u (sid, run_id, "
    "session_id, actor_id, framework, thread_key, status, status_since, awaiting, "
    "step_count, started_at, ended_at, token, ord) ORDER BY u.ord ON CONFLICT DO NOTHING "
    "RETURNING run_id, rid")
_CHECKPOINTS = (
    "INSERT INTO checkpoints (rid, tenant, namespace, checkpoint_id, parent_checkpoint_id, "
    "type_tag, metadata, create_time, size, payload) "
    "SELECT u.rid, %s, u.namespace, u.checkpoint_id, u.parent, u.type_tag, u.metadata::json, "
    "%s, length(u.payload), u.payload FROM unnest(%s::bigint[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::bytea[]) WITH ORDINALITY AS u (rid, namespace, "
    "checkpoint_id, parent, type_tag, metadata, payload, ord) ORDER BY u.ord "
    "RETURNING rid, namespace, checkpoint_id, cid")
#: what a batch grows
_GROWN = ("checkpoint_writes", "checkpoints", "items", "runs", "sessions")
_WRITES = ("INSERT INTO checkpoint_writes (cid, tenant, task_id, idx, channel, type_tag, "
           "task_path, size, payload) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %b)")


class BulkInPostgres(Analyzing):
    """The bulk port over the PostgreSQL tables."""

    async def create_sessions(self, tenant: str, store: str,
                              bundles: Sequence[NewSessionBundle], now: datetime
                              ) -> list[bool]:
        if not bundles:
            return []
        # the search terms an append stores, made before the transaction opens when the
        # store is known to index its items (and kept only if it does)
        vectors = ([[item_vector(tenant, it.text) for it in b.items] for b in bundles]
                   if self._indexes_items.get((tenant, store), True) else None)

        async def run(cur: Cursor) -> list[bool]:
            nonlocal vectors
            await cur.execute("SELECT index_items FROM session_stores WHERE tenant = %s AND "
                              "name = %s FOR KEY SHARE", (tenant, store))
            found = await cur.fetchone()
            if found is None:
                raise StoreNotFound(store=store)
            indexed = bool(found[0])
            if indexed and vectors is None:
                vectors = [[item_vector(tenant, it.text) for it in b.items] for b in bundles]
            await cur.execute(_SESSIONS, (
                tenant, store, now, now, [b.session_id for b in bundles],
                [b.actor_id for b in bundles], [_labels_json(b.metadata) for b in bundles],
                [len(b.items) for b in bundles]))
            sids = {r[0]: int(r[1]) for r in await cur.fetchall()}
            made = [n for n, b in enumerate(bundles) if b.session_id in sids]
            if made:
                docs, length, counts = await _items(cur, tenant, [
                    (bundles[n], vectors[n] if indexed and vectors is not None else None)
                    for n in made], sids, now)
                await _runs(cur, tenant, store, [bundles[n] for n in made], sids, now)
                # last, so that the rows counted into are held for the shortest time
                await add_counts(cur, tenant, "item", "", docs, length, counts)
            return [b.session_id in sids for b in bundles]

        made = await self._write(tenant, run)
        if any(made):
            await self._analyze_grown(_GROWN, "a bulk write")
        return made


async def _items(cur: Cursor, tenant: str,
                 made: Sequence[tuple[NewSessionBundle, list[Vector] | None]],
                 sids: dict[str, int], now: datetime) -> tuple[int, int, Counter[str]]:
    """Copy the bundles' items; returns the number of indexed ones, their length in
    terms and the documents per lexeme, for ``add_counts``."""
    rows: list[tuple[Any, ...]] = []
    docs = length = 0
    counts: Counter[str] = Counter()
    for bundle, vectors in made:
        sid = sids[bundle.session_id]
        for seq, it in enumerate(bundle.items, start=1):
            terms: str | None = None
            size: int | None = None
            if vectors is not None:  # a store that indexes its items
                terms, size, lexemes = vectors[seq - 1]
                counts.update(lexemes)
                docs += 1
                length += size
            rows.append((sid, seq, tenant, it.item_id, now, it.format, it.data_json, it.role,
                         it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens, terms,
                         size))
    if rows:
        await cur.load_rows("items", LOADED_ITEM_COLUMNS, rows)
    return docs, length, counts


async def _runs(cur: Cursor, tenant: str, store: str, made: Sequence[NewSessionBundle],
                sids: dict[str, int], now: datetime) -> None:
    with_run = [b for b in made if b.run is not None]
    if not with_run:
        return
    runs = [b.run for b in with_run if b.run is not None]
    await cur.execute(_RUNS, (
        tenant, store, [sids[b.session_id] for b in with_run], [r.run_id for r in runs],
        [b.session_id for b in with_run], [b.actor_id for b in with_run],
        [r.framework for r in runs], [r.thread_key for r in runs], [r.status for r in runs],
        [r.status_since for r in runs], [r.awaiting_json for r in runs],
        [r.step_count for r in runs], [r.started_at for r in runs],
        [r.ended_at for r in runs], [r.fencing_token for r in runs]))
    rids = {r[0]: int(r[1]) for r in await cur.fetchall()}
    for r in runs:
        if r.run_id not in rids:  # as open_run refuses a taken run id
            raise AlreadyExists(f"run {r.run_id!r} already exists", run_id=r.run_id)
    pairs = [(rids[b.run.run_id], c) for b in with_run if b.run is not None
             for c in b.checkpoints]
    if not pairs:
        return
    await cur.execute(_CHECKPOINTS, (
        tenant, now, [p[0] for p in pairs], [c.namespace for _, c in pairs],
        [c.checkpoint_id for _, c in pairs], [c.parent_checkpoint_id for _, c in pairs],
        [c.type_tag for _, c in pairs], [c.metadata_json for _, c in pairs],
        [c.payload for _, c in pairs]))
    cids = {(int(r[0]), r[1], r[2]): int(r[3]) for r in await cur.fetchall()}
    writes = [(cids[(rid, c.namespace, c.checkpoint_id)], tenant, w.task_id, w.index,
               w.channel, w.type_tag, w.task_path, len(w.payload), w.payload)
              for rid, c in pairs for w in c.writes]
    if writes:
        await cur.executemany(_WRITES, writes)
