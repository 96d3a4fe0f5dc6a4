"""Many stored sessions read back whole, in PostgreSQL (the bulk port's reads).

An import verifying a batch of a hundred threads would otherwise read each one as a
handful of transactions (the session, its items, its newest run, each checkpoint). Here
the batch is one snapshot and five queries, whatever its size: the sessions by id, their
items (``sid = ANY``), the newest run of each (``DISTINCT ON``), the checkpoints asked for
(``unnest`` of the keys, each scoped to its session's store, id and actor as
``get_checkpoint`` scopes it) and their pending writes. Rows are decoded by the same
functions the per-session reads use, so each part is what those reads return.

It may touch PostgreSQL through ``_core``, the checkpoint, run and session parts beside it,
the shared SQL (``backends._sql``), the bulk port, the model and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import StoreNotFound
from ...model import CheckpointRecord, Item, PendingWrite, Run
from .._sql import CHECKPOINT_COLUMNS, RUN_COLUMNS, WRITE_COLUMNS
from ..ports.bulk import CheckpointKey, StoredSessionBundle
from ._core import Cursor, PostgresCore
from .checkpoints import _write
from .runs import _run
from .sessions import _ITEM_COLUMNS, _SESSION_COLUMNS, _items, _session_record

__all__ = ["BulkReadsInPostgres"]

_SESSIONS = (f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE tenant = %s AND store = %s "
             "AND session_id = ANY(%s)")
_ITEMS = (f"SELECT {_ITEM_COLUMNS}, sid FROM items WHERE tenant = %s AND sid = ANY(%s) "
          "ORDER BY sid, seq")
_NEWEST_RUNS = (f"SELECT DISTINCT ON (sid) {RUN_COLUMNS}, sid FROM runs WHERE tenant = %s "
                "AND sid = ANY(%s) ORDER BY sid, rid DESC")
_CHECKPOINTS = (
    f"SELECT k.ord, {CHECKPOINT_COLUMNS} FROM unnest(%s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[]) WITH ORDINALITY AS k (session_id, actor_id, run_id, namespace, "
    "checkpoint_id, ord) JOIN runs r ON r.tenant = %s AND r.run_id = k.run_id "
    "AND r.store = %s AND r.session_id = k.session_id AND r.actor_id = k.actor_id "
    "JOIN checkpoints c ON c.rid = r.rid AND c.tenant = %s AND c.namespace = k.namespace "
    "AND c.checkpoint_id = k.checkpoint_id")
_WRITES = (f"SELECT {WRITE_COLUMNS}, cid FROM checkpoint_writes WHERE tenant = %s "
           "AND cid = ANY(%s) ORDER BY wid")


class BulkReadsInPostgres(PostgresCore):
    """The bulk port's reads over the PostgreSQL tables."""

    async def read_sessions(self, tenant: str, store: str,
                            wanted: Sequence[tuple[str, Sequence[CheckpointKey]]]
                            ) -> list[StoredSessionBundle | None]:
        if not wanted:
            return []

        async def run(cur: Cursor) -> list[StoredSessionBundle | None]:
            await cur.execute("SELECT 1 FROM session_stores WHERE tenant = %s AND name = %s",
                              (tenant, store))
            if await cur.fetchone() is None:
                raise StoreNotFound(store=store)
            await cur.execute(_SESSIONS, (tenant, store, [w[0] for w in wanted]))
            sessions = {r[0]: r for r in await cur.fetchall()}
            sids = [int(r[7]) for r in sessions.values()]
            rows_of: dict[int, list[Any]] = {}
            runs: dict[int, Run] = {}
            if sids:
                await cur.execute(_ITEMS, (tenant, sids), binary=True)
                for item in await cur.fetchall():
                    rows_of.setdefault(int(item[11]), []).append(item)
                await cur.execute(_NEWEST_RUNS, (tenant, sids))
                runs = {int(r[17]): _run(r) for r in await cur.fetchall()}
            asked = [(w[0], sessions[w[0]][1], key) for w in wanted if w[0] in sessions
                     for key in w[1]]
            found = await _checkpoints(cur, tenant, store, asked)
            out: list[StoredSessionBundle | None] = []
            place = 0
            for session_id, keys in wanted:
                row = sessions.get(session_id)
                if row is None:
                    out.append(None)
                    continue
                sid = int(row[7])
                items: list[Item] = _items(rows_of.get(sid, []), session_id)
                out.append(StoredSessionBundle(
                    _session_record(row), items, runs.get(sid),
                    [found.get(place + n) for n in range(len(keys))]))
                place += len(keys)
            return out

        return await self._read(tenant, run, snapshot=True)


async def _checkpoints(cur: Cursor, tenant: str, store: str,
                       asked: Sequence[tuple[str, str, CheckpointKey]]
                       ) -> dict[int, CheckpointRecord]:
    """The checkpoints found of ``asked`` (session id, its actor, key), by place in it."""
    if not asked:
        return {}
    await cur.execute(_CHECKPOINTS, (
        [a[0] for a in asked], [a[1] for a in asked], [a[2].run_id for a in asked],
        [a[2].namespace for a in asked], [a[2].checkpoint_id for a in asked],
        tenant, store, tenant))
    rows = await cur.fetchall()
    writes: dict[int, list[PendingWrite]] = {}
    holders = [int(r[1]) for r in rows if r[9]]
    if holders:
        await cur.execute(_WRITES, (tenant, holders))
        for w in await cur.fetchall():
            writes.setdefault(int(w[6]), []).append(_write(w))
    return {int(r[0]) - 1: CheckpointRecord(
        run_id=asked[int(r[0]) - 1][2].run_id, namespace=r[2], checkpoint_id=r[3],
        parent_checkpoint_id=r[4], type_tag=r[5], payload=bytes(r[8]), metadata=r[6],
        create_time=r[7], pending_writes=tuple(writes.get(int(r[1]), ())))
        for r in rows}
