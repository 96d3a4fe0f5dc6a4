"""Session stores, sessions and items in PostgreSQL.

It may touch PostgreSQL through ``_core``, the access, search, item search, vector-row and
statistics (its logger) parts beside it, the replay cache
(``backends._replay``), the shared SQL (``backends._sql``), the session and search ports,
JSON decoding (``ownstate._jsontext``), the model and errors.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ... import errors
from ..._jsontext import decode_json
from ...model import Item, SessionRecord, SessionStoreRecord, build_item, build_items
from .._replay import Meta, Replay
from .._sql import FORK_VECTORS, item_page, session_listing
from ..ports.sessions import NewItem, SessionOrder, changed_labels, forked_record
from . import items_search
from ._arrays import bigints, texts
from ._core import Cursor, PostgresCore
from ._statistics import LOG
from ._vector_rows import store_item_vectors
from .access import drop_store, start_grants
from .items_search import QUEUE, QUEUED_SPAN, index_queued
from .search import add_counts

__all__ = ["LOADED_ITEM_COLUMNS", "IndexingChanged", "SessionsInPostgres", "append_ctes",
           "appended"]

_SESSION_COLUMNS = (
    "session_id, actor_id, parent_session_id, root_session_id, metadata, create_time, "
    "last_activity_time, sid, store, tenant"
)
_ITEM_COLUMNS = (
    "item_id, seq, create_time, data::text, format, role, type, tool_name, model, "
    "in_tokens, out_tokens"
)

#: The columns of an item as bulk loads write them (``Cursor.load_rows``): every column but
#: the row's own id; ``terms`` as the bytes of its binary ``tsvector`` (``_tsvector``).
LOADED_ITEM_COLUMNS = ("sid", "seq", "tenant", "item_id", "create_time", "format", "data",
                       "role", "type", "tool_name", "model", "in_tokens", "out_tokens",
                       "terms", "terms_len")

#: Appends a batch in one statement: the update of the session's row takes its lock (so
#: appends to one session queue up and seq stays gapless) and yields the seq to number
#: from; the batch arrives as one array per column, sent in binary (no quoting to do).
#: The update matches only if the store indexes its items as ``indexed`` says (the terms
#: sent are NULL when it does not), so a statement made for the other flag changes
#: nothing; the items' terms arrive as binary tsvectors; the log of their counts comes
#: last, after the statistics (``search.py``). Deferred (``append_items``), the items
#: arrive without terms, and the range of their ids is queued for the next search to index
#: (``items_search.py``) when the store indexes its items.
def append_ctes(gate: str = "") -> str:
    """The ``WITH`` entries of an append (``s``: the session's row, ``added``: the items,
    then ``queued``: their range, queued for indexing when the store indexes its items;
    ``items_search``). ``gate`` adds conditions (``AND ...``) to the session's update, and
    nothing is written unless they hold."""
    return (
        "s AS (UPDATE sessions SET item_count = item_count + %(n)s, "
        "last_activity_time = %(now)s WHERE tenant = %(tenant)s AND store = %(store)s "
        "AND session_id = %(session_id)s AND (SELECT index_items FROM session_stores "
        f"WHERE tenant = %(tenant)s AND name = %(store)s) = %(indexed)s {gate}"
        "RETURNING sid, item_count - %(n)s AS base), "
        "added AS (INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data, "
        "role, type, tool_name, model, in_tokens, out_tokens) SELECT s.sid, "
        "s.base + u.ord, %(tenant)s, u.item_id, %(now)s, u.format, u.data::json, u.role, "
        "u.type, u.tool_name, u.model, u.in_tokens, u.out_tokens "
        "FROM s, unnest(%(ids)b::text[], "
        "%(formats)b::text[], %(data)b::text[], %(roles)b::text[], %(types)b::text[], "
        "%(tools)b::text[], %(models)b::text[], %(ins)b::bigint[], %(outs)b::bigint[]) "
        "WITH ORDINALITY AS u (item_id, format, data, role, type, tool_name, model, "
        "in_tokens, out_tokens, ord) RETURNING id, terms_len), "
        + QUEUE.format(added="added", indexed="%(indexed)s"))


#: An append by ``append_items``: the session's base seq, and the span of the ids its
#: tenant had queued before it (``items_search.QUEUED_SPAN``).
_APPEND_WITH_KEY = (
    "WITH " + append_ctes() + ", k AS (INSERT INTO idempotency_keys (sid, key, "
    "tenant, request_hash, item_ids, create_time) SELECT s.sid, %(key)s, %(tenant)s, "
    "%(hash)s, %(item_ids)s::jsonb, %(now)s FROM s) SELECT base, " + QUEUED_SPAN
    + " FROM s")
_APPEND = "WITH " + append_ctes() + " SELECT base, " + QUEUED_SPAN + " FROM s"


def _labels_json(labels: Mapping[str, str]) -> str:
    """How session labels are stored: ``json`` text as ``json.dumps`` writes it (``json``
    keeps escapes such as ``\\u0000``, which ``jsonb`` and ``text`` cannot hold)."""
    return json.dumps(dict(labels), ensure_ascii=False)


def _label_text(label: str, value: str) -> str:
    """The text of one label as it appears in ``_labels_json``: ``"label": "value"``.

    It occurs in stored labels exactly when they hold that label with that value: a quote
    that is not escaped only ever opens or closes a key or a value, and after a key comes
    ``": "``, after a value ``,`` or ``}``.
    """
    return json.dumps({label: value}, ensure_ascii=False)[1:-1]


#: The internal id of a session named by (tenant, store, session_id), as a subquery.
_SID_OF = "(SELECT sid FROM sessions WHERE tenant = %s AND store = %s AND session_id = %s)"


def _session_record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        tenant=row[9], store=row[8], session_id=row[0], actor_id=row[1],
        parent_session_id=row[2], root_session_id=row[3], metadata=dict(row[4]),
        create_time=row[5], last_activity_time=row[6],
    )


def _items(rows: Sequence[Sequence[Any]], session_id: str) -> list[Item]:
    """Items of rows selected as ``_ITEM_COLUMNS`` (``data`` as text, parsed here: faster
    than the driver's json loader), built a column at a time."""
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    return build_items(session_id, list(map(decode_json, columns[3])), *columns[:3],
                       *columns[4:11])


def _meta(row: Sequence[Any]) -> Meta:
    """A row selected as ``_ITEM_COLUMNS``, without its data."""
    return (row[0], row[1], row[2], row[4], row[5], row[6], row[7], row[8], row[9], row[10])


class IndexingChanged(Exception):
    """The store indexes its items otherwise than an append assumed (the argument: how)."""


def appended(items: Sequence[NewItem], session_id: str, base: int, now: datetime) -> list[Item]:
    """The items of an append numbered from ``base + 1``, as stored."""
    return [build_item(it.item_id, session_id, base + n, now, it.data, it.format, it.role,
                       it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
            for n, it in enumerate(items, start=1)]


def _not_found(store: str, session_id: str) -> errors.SessionNotFound:
    return errors.SessionNotFound(store=store, session_id=session_id)


class SessionsInPostgres(PostgresCore):
    """The sessions port on PostgreSQL."""

    @staticmethod
    async def _session_row(cur: Cursor, tenant: str, store: str, session_id: str,
                           lock: bool = False) -> tuple[Any, ...]:
        await cur.execute(
            f"SELECT {_SESSION_COLUMNS}, item_count FROM sessions "
            "WHERE tenant = %s AND store = %s AND session_id = %s"
            + (" FOR UPDATE" if lock else ""),
            (tenant, store, session_id))
        row = await cur.fetchone()
        if row is None:
            raise _not_found(store, session_id)
        return tuple(row)

    @staticmethod
    async def _sid(cur: Cursor, tenant: str, store: str, session_id: str,
                   lock: bool = False) -> int:
        await cur.execute(
            "SELECT sid FROM sessions WHERE tenant = %s AND store = %s AND session_id = %s"
            + (" FOR UPDATE" if lock else ""), (tenant, store, session_id))
        row = await cur.fetchone()
        if row is None:
            raise _not_found(store, session_id)
        return int(row[0])

    @staticmethod
    async def _require_store(cur: Cursor, tenant: str, name: str,
                             lock: str = "") -> SessionStoreRecord:
        """The store, optionally locked: ``"FOR UPDATE"`` to delete it, ``"FOR KEY SHARE"``
        to add a session to it (taken before any session lock, so that adding and deleting
        wait for each other instead of deadlocking)."""
        await cur.execute(
            "SELECT create_time FROM session_stores WHERE tenant = %s AND name = %s " + lock,
            (tenant, name))
        row = await cur.fetchone()
        if row is None:
            raise errors.StoreNotFound(store=name)
        return SessionStoreRecord(tenant=tenant, name=name, create_time=row[0])

    # session stores --------------------------------------------------------------------

    async def create_store(self, tenant: str, name: str, now: datetime,
                           owner: str | None = None, index_items: bool = True,
                           ) -> SessionStoreRecord:
        async def run(cur: Cursor) -> SessionStoreRecord:
            await cur.execute(
                "INSERT INTO session_stores (tenant, name, create_time, index_items) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (tenant, name, now, index_items))
            if cur.rowcount == 0:
                raise errors.AlreadyExists(store=name)
            await start_grants(cur, tenant, "session_store", name, owner)
            return SessionStoreRecord(tenant=tenant, name=name, create_time=now)

        made = await self._write(tenant, run)
        self._remember_indexing(tenant, name, index_items)
        return made

    async def get_store(self, tenant: str, name: str) -> SessionStoreRecord:
        return await self._read(tenant, lambda cur: self._require_store(cur, tenant, name))

    async def list_stores(self, tenant: str, limit: int,
                          after: str | None) -> list[SessionStoreRecord]:
        async def run(cur: Cursor) -> list[SessionStoreRecord]:
            await cur.execute(
                "SELECT name, create_time FROM session_stores WHERE tenant = %s "
                "AND name COLLATE \"C\" > %s "
                "ORDER BY name COLLATE \"C\" LIMIT %s", (tenant, after or "", limit))
            return [SessionStoreRecord(tenant=tenant, name=r[0], create_time=r[1])
                    for r in await cur.fetchall()]

        return await self._read(tenant, run)

    async def delete_store(self, tenant: str, name: str, force: bool) -> int:
        async def run(cur: Cursor) -> int:
            await self._require_store(cur, tenant, name, lock="FOR UPDATE")
            await cur.execute("SELECT count(*) FROM sessions WHERE tenant = %s AND store = %s",
                              (tenant, name))
            row = await cur.fetchone()
            count = int(row[0]) if row else 0
            if count and not force:
                raise errors.StoreNotEmpty(store=name, sessions=count)
            await drop_store(cur, tenant, "session_store", name)
            return count

        return await self._write(tenant, run)

    # sessions --------------------------------------------------------------------------

    @staticmethod
    async def _insert_session(
        cur: Cursor, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], parent: str | None, root: str, now: datetime,
    ) -> int:
        await cur.execute(
            "INSERT INTO sessions (tenant, store, session_id, actor_id, parent_session_id, "
            "root_session_id, metadata, create_time, last_activity_time) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s::json, %s, %s) ON CONFLICT DO NOTHING "
            "RETURNING sid",
            (tenant, store, session_id, actor_id, parent, root, _labels_json(metadata), now,
             now))
        row = await cur.fetchone()
        if row is None:
            raise errors.AlreadyExists(store=store, session_id=session_id)
        return int(row[0])

    async def create_session(
        self, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], now: datetime,
    ) -> SessionRecord:
        async def run(cur: Cursor) -> SessionRecord:
            await self._require_store(cur, tenant, store, lock="FOR KEY SHARE")
            await self._insert_session(cur, tenant, store, session_id, actor_id, metadata,
                                       None, session_id, now)
            return SessionRecord(
                tenant=tenant, store=store, session_id=session_id, actor_id=actor_id,
                parent_session_id=None, root_session_id=session_id, metadata=dict(metadata),
                create_time=now, last_activity_time=now,
            )

        return await self._write(tenant, run)

    async def get_session(self, tenant: str, store: str, session_id: str) -> SessionRecord:
        async def run(cur: Cursor) -> SessionRecord:
            return _session_record(await self._session_row(cur, tenant, store, session_id))

        return await self._read(tenant, run)

    async def list_sessions(
        self, tenant: str, store: str, *, actor_id: str | None, metadata: Mapping[str, str],
        order: SessionOrder, descending: bool, limit: int, after: Sequence[Any] | None,
    ) -> tuple[list[SessionRecord], list[Any] | None]:
        query, params = session_listing(
            "%s", _SESSION_COLUMNS, tenant, store, actor_id,
            [("strpos(metadata::text, %s) > 0", [_label_text(label, value)])
             for label, value in metadata.items()],
            order, descending, after, limit, "%s::timestamptz")

        async def run(cur: Cursor) -> tuple[list[SessionRecord], list[Any] | None]:
            await self._require_store(cur, tenant, store)
            await cur.execute(query, params)
            rows = await cur.fetchall()
            page = rows[:limit]
            cursor: list[Any] | None = None
            if len(rows) > limit:
                last = page[-1]
                cursor = ([last[7]] if order == "create_time"
                          else [last[6].isoformat(), last[7]])
            return [_session_record(r) for r in page], cursor

        return await self._read(tenant, run)

    async def update_metadata(
        self, tenant: str, store: str, session_id: str, changes: Mapping[str, str | None],
        max_labels: int,
    ) -> SessionRecord:
        async def run(cur: Cursor) -> SessionRecord:
            row = list(await self._session_row(cur, tenant, store, session_id, lock=True))
            labels = changed_labels(row[4], changes, max_labels)
            row[4] = labels
            await cur.execute("UPDATE sessions SET metadata = %s::json WHERE sid = %s",
                              (_labels_json(labels), row[7]))
            return _session_record(row)

        return await self._write(tenant, run)

    async def delete_session(self, tenant: str, store: str, session_id: str, force: bool) -> int:
        async def run(cur: Cursor) -> int:
            await self._sid(cur, tenant, store, session_id, lock=True)
            await cur.execute(
                "SELECT session_id FROM sessions WHERE tenant = %s AND store = %s "
                "AND parent_session_id = %s ORDER BY sid", (tenant, store, session_id))
            children = [r[0] for r in await cur.fetchall()]
            if children and not force:
                raise errors.HasChildren(store=store, session_id=session_id, children=children)
            await cur.execute(
                "WITH RECURSIVE tree (session_id) AS ("
                " SELECT %s::text UNION"
                " SELECT s.session_id FROM sessions s JOIN tree t"
                " ON s.parent_session_id = t.session_id"
                " WHERE s.tenant = %s AND s.store = %s)"
                " DELETE FROM sessions WHERE tenant = %s AND store = %s"
                " AND session_id IN (SELECT session_id FROM tree)",
                (session_id, tenant, store, tenant, store))
            return int(cur.rowcount)

        return await self._write(tenant, run)

    async def fork_session(
        self, tenant: str, store: str, session_id: str, new_session_id: str,
        up_to_item_id: str | None, now: datetime,
    ) -> SessionRecord:
        async def run(cur: Cursor) -> SessionRecord:
            try:
                await self._require_store(cur, tenant, store, lock="FOR KEY SHARE")
            except errors.StoreNotFound:  # what is missing is the session to fork, as
                # every backend says: a session cannot outlive its store
                raise errors.SessionNotFound(store=store, session_id=session_id) from None
            parent_row = await self._session_row(cur, tenant, store, session_id, lock=True)
            parent, parent_sid = _session_record(parent_row), parent_row[7]
            last_seq = 2**62
            if up_to_item_id is not None:
                await cur.execute(
                    "SELECT seq FROM items WHERE tenant = %s AND item_id = %s AND sid = %s",
                    (tenant, up_to_item_id, parent_sid))
                row = await cur.fetchone()
                if row is None:
                    raise errors.ItemNotFound(session_id=session_id, item_id=up_to_item_id)
                last_seq = int(row[0])
            child_sid = await self._insert_session(
                cur, tenant, store, new_session_id, parent.actor_id, parent.metadata,
                session_id, parent.root_session_id, now)
            await cur.execute(
                "WITH added AS (INSERT INTO items (sid, seq, tenant, item_id, create_time, "
                "format, data, role, type, tool_name, model, in_tokens, out_tokens, terms, "
                "terms_len) "
                "SELECT %(child)s, seq, tenant, "
                "'itm_' || replace(gen_random_uuid()::text, '-', ''), create_time, format, "
                "data, role, type, tool_name, model, in_tokens, out_tokens, terms, "
                "terms_len FROM items WHERE sid = %(parent)s AND seq <= %(last)s "
                "ORDER BY seq RETURNING id, terms, terms_len), "
                + QUEUE.format(added="added", indexed="(SELECT index_items FROM "
                               "session_stores WHERE tenant = %(tenant)s "
                               "AND name = %(store)s)") + ", "
                "counted AS (SELECT u.lexeme, count(*) AS docs FROM added a "
                "CROSS JOIN LATERAL unnest(a.terms) AS u GROUP BY u.lexeme) "
                "SELECT count(*), count(terms_len), coalesce(sum(terms_len), 0), "
                "(SELECT array_agg(lexeme ORDER BY lexeme COLLATE \"C\") FROM counted), "
                "(SELECT array_agg(docs ORDER BY lexeme COLLATE \"C\") FROM counted) "
                "FROM added", {"child": child_sid, "parent": parent_sid, "last": last_seq,
                               "tenant": tenant, "store": store})
            copied = await cur.fetchone()
            assert copied is not None
            await cur.execute("UPDATE sessions SET item_count = %s WHERE sid = %s",
                              (copied[0], child_sid))
            await add_counts(cur, tenant, "item", "", copied[1], copied[2],
                             Counter(dict(zip(copied[3] or (), copied[4] or (), strict=True))))
            await cur.execute(FORK_VECTORS.format(p="%s"), (parent_sid, child_sid))
            return forked_record(parent, new_session_id, now)

        return await self._write(tenant, run)

    # items -----------------------------------------------------------------------------

    async def append_items(
        self, tenant: str, store: str, session_id: str, items: Sequence[NewItem],
        idempotency: tuple[str, str] | None, now: datetime,
    ) -> list[Item]:
        params = self._append_params(tenant, store, session_id, items, now)
        if idempotency is not None:
            params.update(key=idempotency[0], hash=idempotency[1],
                          item_ids=json.dumps([it.item_id for it in items]))

        embedded = any(it.embedding is not None for it in items)
        span = 0  # of the ids queued before this append

        async def run(cur: Cursor) -> list[Item]:
            nonlocal span
            if idempotency is not None:
                # The row lock makes a retry wait for the first use of its key. The key is
                # read by a second statement, whose snapshot is taken once the lock is
                # held: a join in the locking statement would not see a key committed by
                # the transaction it waited for.
                await cur.execute(
                    "SELECT s.sid FROM sessions s "
                    "WHERE s.tenant = %s AND s.store = %s AND s.session_id = %s "
                    "FOR UPDATE OF s", (tenant, store, session_id))
                locked = await cur.fetchone()
                if locked is None:
                    raise _not_found(store, session_id)
                await cur.execute(
                    "SELECT request_hash, item_ids, sid FROM idempotency_keys "
                    "WHERE sid = %s AND key = %s", (locked[0], idempotency[0]))
                seen = await cur.fetchone()
                if seen is not None:
                    return await self._replayed(cur, seen, session_id, idempotency)
            # with vectors to write, the transaction stays open for them
            await cur.execute(_APPEND_WITH_KEY if idempotency else _APPEND, params,
                              last=not embedded)
            row = await cur.fetchone()
            if row is None:
                await cur.execute(
                    "SELECT t.index_items FROM sessions s JOIN session_stores t "
                    "ON t.tenant = s.tenant AND t.name = s.store WHERE s.tenant = %s "
                    "AND s.store = %s AND s.session_id = %s", (tenant, store, session_id))
                found = await cur.fetchone()
                if found is None or bool(found[0]) == params["indexed"]:
                    raise _not_found(store, session_id)
                raise IndexingChanged(bool(found[0]))  # nothing was written
            span = int(row[1] or 0)
            if embedded:
                await store_item_vectors(cur, tenant, store, items)
            return appended(items, session_id, int(row[0]), now)

        while True:
            try:
                made = await self._write(tenant, run)
            except IndexingChanged as changed:
                self._remember_indexing(tenant, store, changed.args[0])
                params["indexed"] = changed.args[0]
                continue
            await self._index_if_due(tenant, params, span + len(items))
            return made

    async def _index_if_due(self, tenant: str, params: dict[str, Any], span: int) -> None:
        """After an append that queued its items for indexing (``params`` its parameters),
        index the tenant's queue at once when its ids span :data:`PENDING_LIMIT` or more
        (``span``, with the append's): what a search may find to index stays bounded."""
        if not params["indexed"] or span < items_search.PENDING_LIMIT:
            return
        try:
            await self._write(tenant, lambda cur: index_queued(cur, tenant))
        except errors.OwnstateError as exc:  # the items are stored; a search indexes them
            LOG.warning("indexing the items queued for search failed: %s", exc)

    def _append_params(self, tenant: str, store: str, session_id: str,
                       items: Sequence[NewItem], now: datetime) -> dict[str, Any]:
        """The parameters of :func:`append_ctes` for ``items``, for a store known (or
        taken) to index its items or not."""
        return {
            "tenant": tenant, "store": store, "session_id": session_id, "n": len(items),
            "now": now, "ids": texts([it.item_id for it in items]),
            "formats": texts([it.format for it in items]),
            "data": texts([it.data_json for it in items]),
            "roles": texts([it.role for it in items]), "types": texts([it.type for it in items]),
            "tools": texts([it.tool_name for it in items]),
            "models": texts([it.model for it in items]),
            "ins": bigints([it.in_tokens for it in items]),
            "outs": bigints([it.out_tokens for it in items]),
            "indexed": self._indexes_items.get((tenant, store), True),
        }

    def _remember_indexing(self, tenant: str, store: str, indexed: bool) -> None:
        if len(self._indexes_items) >= 10_000:
            self._indexes_items.clear()
        self._indexes_items[(tenant, store)] = indexed

    @staticmethod
    async def _replayed(cur: Cursor, seen: Sequence[Any], session_id: str,
                        idempotency: tuple[str, str]) -> list[Item]:
        """The items a key's first use appended, or IdempotencyKeyReused."""
        key, request_hash = idempotency
        if seen[0] != request_hash:
            raise errors.IdempotencyKeyReused(
                session_id=session_id, idempotency_key=key)
        await cur.execute(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = %s AND item_id = ANY(%s) "
            "ORDER BY seq", (seen[2], list(seen[1])))
        return _items(await cur.fetchall(), session_id)

    async def list_items(
        self, tenant: str, store: str, session_id: str, *, descending: bool, limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        if not descending and self._replay.max_items > 0:
            return await self._replay_items(tenant, store, session_id, limit, after_seq or 0)
        query, bound = item_page("%s", _ITEM_COLUMNS, _SID_OF, descending, after_seq)

        async def run(cur: Cursor) -> list[Item]:
            await cur.execute(query, (tenant, store, session_id, bound, limit), binary=True)
            found = _items(await cur.fetchall(), session_id)
            if not found:
                await self._sid(cur, tenant, store, session_id)  # an empty page, or none?
            return found

        return await self._read(tenant, run)

    async def _replay_items(self, tenant: str, store: str, session_id: str, limit: int,
                            after: int) -> list[Item]:
        """Items in replay order after seq ``after``, served from the replay cache as far
        as it holds them and is still right (see ``_replay``)."""
        key = (tenant, store, session_id)

        async def cached(cur: Cursor, entry: Replay, columns: list[list[Any]],
                         data: list[Any]) -> list[Item] | None:
            anchor = after + len(data)  # the last seq served, checked to be unchanged
            await cur.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = %s AND sid = {_SID_OF} "
                "AND seq >= %s ORDER BY seq LIMIT %s",
                (entry.sid, tenant, store, session_id, anchor, limit - len(data) + 1),
                binary=True)
            rows = await cur.fetchall()
            if not rows or rows[0][1] != anchor or rows[0][0] != entry.item_id(anchor):
                return None
            found = build_items(session_id, data, *columns)
            if len(rows) > 1:
                added = _items(rows[1:], session_id)
                self._replay.extend(key, entry, [_meta(r) for r in rows[1:]],
                                    [i.data for i in added])
                found += added
            return found

        async def run(cur: Cursor) -> list[Item]:
            held = self._replay.held(key, after, after + limit)
            if held is not None:
                found = await cached(cur, *held)
                if found is not None:
                    return found
                self._replay.drop(key)
            await cur.execute(
                f"SELECT {_ITEM_COLUMNS}, sid FROM items WHERE sid = {_SID_OF} AND seq > %s "
                "ORDER BY seq LIMIT %s", (tenant, store, session_id, after, limit),
                binary=True)
            rows = await cur.fetchall()
            if not rows:
                await self._sid(cur, tenant, store, session_id)  # an empty page, or none?
                return []
            found = _items(rows, session_id)
            if after == 0:
                self._replay.put(key, Replay(int(rows[0][11]), [_meta(r) for r in rows],
                                             [i.data for i in found]))
            return found

        return await self._read(tenant, run)

    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        async def run(cur: Cursor) -> Item:
            await cur.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items "
                f"WHERE tenant = %s AND item_id = %s AND sid = {_SID_OF}",
                (tenant, item_id, tenant, store, session_id))
            found = _items(await cur.fetchall(), session_id)
            if not found:
                await self._sid(cur, tenant, store, session_id)
                raise errors.ItemNotFound(session_id=session_id, item_id=item_id)
            return found[0]

        return await self._read(tenant, run)

    async def pop_item(self, tenant: str, store: str, session_id: str,
                       now: datetime) -> Item | None:
        async def run(cur: Cursor) -> Item | None:
            row = await self._session_row(cur, tenant, store, session_id, lock=True)
            sid, count = row[7], row[10]
            if count == 0:
                return None
            await cur.execute(
                f"DELETE FROM items WHERE sid = %s AND seq = %s RETURNING {_ITEM_COLUMNS}",
                (sid, count))
            found = _items(await cur.fetchall(), session_id)
            await cur.execute(
                "UPDATE sessions SET item_count = %s, last_activity_time = %s WHERE sid = %s",
                (count - 1, now, sid))
            return found[0]

        return await self._write(tenant, run)

    async def clear_items(self, tenant: str, store: str, session_id: str, now: datetime) -> int:
        async def run(cur: Cursor) -> int:
            sid = await self._sid(cur, tenant, store, session_id, lock=True)
            await cur.execute("DELETE FROM items WHERE sid = %s", (sid,))
            deleted = int(cur.rowcount)
            await cur.execute(
                "UPDATE sessions SET item_count = 0, last_activity_time = %s WHERE sid = %s",
                (now, sid))
            return deleted

        return await self._write(tenant, run)
