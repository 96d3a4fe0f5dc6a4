"""Session stores, sessions and items in PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...errors import (
    AlreadyExists,
    HasChildren,
    IdempotencyKeyReused,
    ItemNotFound,
    LimitExceeded,
    SessionNotFound,
    StoreNotEmpty,
    StoreNotFound,
)
from ...model import Item, SessionRecord, SessionStoreRecord
from ..ports.sessions import NewItem, SessionOrder
from ._core import Cursor, PostgresCore

__all__ = ["SCHEMA", "SessionsInPostgres"]

SCHEMA: tuple[str, ...] = (
    """
    CREATE TABLE session_stores (
        tenant      text NOT NULL,
        name        text NOT NULL,
        create_time timestamptz NOT NULL,
        PRIMARY KEY (tenant, name)
    )
    """,
    """
    CREATE TABLE sessions (
        sid                bigserial PRIMARY KEY,
        tenant             text NOT NULL,
        store              text NOT NULL,
        session_id         text NOT NULL,
        actor_id           text NOT NULL,
        parent_session_id  text,
        root_session_id    text NOT NULL,
        metadata           jsonb NOT NULL DEFAULT '{}',
        create_time        timestamptz NOT NULL,
        last_activity_time timestamptz NOT NULL,
        item_count         bigint NOT NULL DEFAULT 0,
        UNIQUE (tenant, store, session_id),
        FOREIGN KEY (tenant, store) REFERENCES session_stores (tenant, name)
    )
    """,
    "CREATE INDEX sessions_by_store ON sessions (tenant, store, sid)",
    "CREATE INDEX sessions_by_actor ON sessions (tenant, store, actor_id, sid)",
    "CREATE INDEX sessions_by_activity ON sessions (tenant, store, last_activity_time, sid)",
    """CREATE INDEX sessions_by_parent ON sessions (tenant, store, parent_session_id)
       WHERE parent_session_id IS NOT NULL""",
    """
    CREATE TABLE items (
        id          bigserial PRIMARY KEY,
        sid         bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
        seq         bigint NOT NULL,
        tenant      text NOT NULL,
        item_id     text NOT NULL,
        create_time timestamptz NOT NULL,
        format      text NOT NULL,
        data        json NOT NULL,
        role        text,
        type        text,
        tool_name   text,
        model       text,
        in_tokens   bigint,
        out_tokens  bigint,
        UNIQUE (sid, seq)
    )
    """,
    "CREATE UNIQUE INDEX items_by_item_id ON items (tenant, item_id)",
    """
    CREATE TABLE idempotency_keys (
        sid          bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
        key          text NOT NULL,
        tenant       text NOT NULL,
        request_hash text NOT NULL,
        item_ids     jsonb NOT NULL,
        create_time  timestamptz NOT NULL,
        PRIMARY KEY (sid, key)
    )
    """,
    """
    CREATE VIEW session_items WITH (security_barrier) AS
    SELECT s.tenant, s.store, s.session_id, s.actor_id, i.seq, i.item_id,
           i.create_time, i.format, i.role, i.type, i.tool_name, i.model,
           i.in_tokens, i.out_tokens, i.data
    FROM items i JOIN sessions s ON s.sid = i.sid
    """,
)

#: Tables whose rows carry a tenant and get the row-level security policy.
TENANT_TABLES = ("session_stores", "sessions", "items", "idempotency_keys")

_SESSION_COLUMNS = (
    "session_id, actor_id, parent_session_id, root_session_id, metadata, create_time, "
    "last_activity_time, sid, store, tenant"
)
_ITEM_COLUMNS = (
    "item_id, seq, create_time, data, format, role, type, tool_name, model, in_tokens, "
    "out_tokens"
)


def _session_record(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        tenant=row[9], store=row[8], session_id=row[0], actor_id=row[1],
        parent_session_id=row[2], root_session_id=row[3], metadata=dict(row[4]),
        create_time=row[5], last_activity_time=row[6],
    )


def _items(rows: Sequence[Sequence[Any]], session_id: str) -> list[Item]:
    return [Item(r[0], session_id, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10])
            for r in rows]


def _not_found(store: str, session_id: str) -> SessionNotFound:
    return SessionNotFound(f"no session {session_id!r} in store {store!r}",
                           store=store, session_id=session_id)


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
                             lock: bool = False) -> SessionStoreRecord:
        await cur.execute(
            "SELECT create_time FROM session_stores WHERE tenant = %s AND name = %s"
            + (" FOR UPDATE" if lock else ""), (tenant, name))
        row = await cur.fetchone()
        if row is None:
            raise StoreNotFound(f"no session store {name!r}", store=name)
        return SessionStoreRecord(tenant=tenant, name=name, create_time=row[0])

    # session stores --------------------------------------------------------------------

    async def create_store(self, tenant: str, name: str, now: datetime) -> SessionStoreRecord:
        async def run(cur: Cursor) -> SessionStoreRecord:
            await cur.execute(
                "INSERT INTO session_stores (tenant, name, create_time) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING", (tenant, name, now))
            if cur.rowcount == 0:
                raise AlreadyExists(f"session store {name!r} already exists", store=name)
            return SessionStoreRecord(tenant=tenant, name=name, create_time=now)

        return await self._write(tenant, run)

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
            await self._require_store(cur, tenant, name, lock=True)
            await cur.execute("SELECT count(*) FROM sessions WHERE tenant = %s AND store = %s",
                              (tenant, name))
            row = await cur.fetchone()
            count = int(row[0]) if row else 0
            if count and not force:
                raise StoreNotEmpty(f"session store {name!r} holds {count} sessions",
                                    store=name, sessions=count)
            await cur.execute("DELETE FROM sessions WHERE tenant = %s AND store = %s",
                              (tenant, name))
            await cur.execute("DELETE FROM session_stores WHERE tenant = %s AND name = %s",
                              (tenant, name))
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
            "VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s) ON CONFLICT DO NOTHING "
            "RETURNING sid",
            (tenant, store, session_id, actor_id, parent, root,
             json.dumps(dict(metadata), ensure_ascii=False), now, now))
        row = await cur.fetchone()
        if row is None:
            raise AlreadyExists(f"session {session_id!r} already exists in store {store!r}",
                                store=store, session_id=session_id)
        return int(row[0])

    async def create_session(
        self, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], now: datetime,
    ) -> SessionRecord:
        async def run(cur: Cursor) -> SessionRecord:
            await self._require_store(cur, tenant, store)
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
        where = ["tenant = %s", "store = %s"]
        params: list[Any] = [tenant, store]
        if actor_id is not None:
            where.append("actor_id = %s")
            params.append(actor_id)
        if metadata:
            where.append("metadata @> %s::jsonb")
            params.append(json.dumps(dict(metadata)))
        compare = "<" if descending else ">"
        direction = "DESC" if descending else "ASC"
        if order == "create_time":
            if after is not None:
                where.append(f"sid {compare} %s")
                params.append(after[0])
            order_sql = f"sid {direction}"
        else:
            if after is not None:
                where.append(f"(last_activity_time, sid) {compare} (%s::timestamptz, %s)")
                params.extend(after[:2])
            order_sql = f"last_activity_time {direction}, sid {direction}"
        query = (f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE {' AND '.join(where)} "
                 f"ORDER BY {order_sql} LIMIT %s")
        params.append(limit + 1)

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
            labels: dict[str, str] = dict(row[4])
            for key, value in changes.items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
            if len(labels) > max_labels:
                raise LimitExceeded(f"at most {max_labels} metadata labels",
                                    field="metadata", limit=max_labels, actual=len(labels))
            row[4] = labels
            await cur.execute("UPDATE sessions SET metadata = %s::jsonb WHERE sid = %s",
                              (json.dumps(labels, ensure_ascii=False), row[7]))
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
                raise HasChildren(f"session {session_id!r} has forks; delete with force=True",
                                  store=store, session_id=session_id, children=children)
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
            parent_row = await self._session_row(cur, tenant, store, session_id, lock=True)
            parent, parent_sid = _session_record(parent_row), parent_row[7]
            last_seq = 2**62
            if up_to_item_id is not None:
                await cur.execute(
                    "SELECT seq FROM items WHERE tenant = %s AND item_id = %s AND sid = %s",
                    (tenant, up_to_item_id, parent_sid))
                row = await cur.fetchone()
                if row is None:
                    raise ItemNotFound(f"no item {up_to_item_id!r} in session {session_id!r}",
                                       session_id=session_id, item_id=up_to_item_id)
                last_seq = int(row[0])
            child_sid = await self._insert_session(
                cur, tenant, store, new_session_id, parent.actor_id, parent.metadata,
                session_id, parent.root_session_id, now)
            await cur.execute(
                "INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data, "
                "role, type, tool_name, model, in_tokens, out_tokens) "
                "SELECT %s, seq, tenant, 'itm_' || replace(gen_random_uuid()::text, '-', ''), "
                "create_time, format, data, role, type, tool_name, model, in_tokens, "
                "out_tokens FROM items WHERE sid = %s AND seq <= %s ORDER BY seq",
                (child_sid, parent_sid, last_seq))
            await cur.execute("UPDATE sessions SET item_count = %s WHERE sid = %s",
                              (cur.rowcount, child_sid))
            return SessionRecord(
                tenant=tenant, store=store, session_id=new_session_id,
                actor_id=parent.actor_id, parent_session_id=session_id,
                root_session_id=parent.root_session_id, metadata=parent.metadata,
                create_time=now, last_activity_time=now,
            )

        return await self._write(tenant, run)

    # items -----------------------------------------------------------------------------

    async def append_items(
        self, tenant: str, store: str, session_id: str, items: Sequence[NewItem],
        idempotency: tuple[str, str] | None, now: datetime,
    ) -> list[Item]:
        async def run(cur: Cursor) -> list[Item]:
            # The row lock on the session serialises appends, so seq stays gapless.
            await cur.execute(
                "SELECT sid, item_count FROM sessions "
                "WHERE tenant = %s AND store = %s AND session_id = %s FOR UPDATE",
                (tenant, store, session_id))
            row = await cur.fetchone()
            if row is None:
                raise _not_found(store, session_id)
            sid, count = int(row[0]), int(row[1])
            if idempotency is not None:
                earlier = await self._replayed(cur, sid, session_id, idempotency)
                if earlier is not None:
                    return earlier
            await cur.executemany(
                "INSERT INTO items (sid, seq, tenant, item_id, create_time, format, data, "
                "role, type, tool_name, model, in_tokens, out_tokens) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s::json, %s, %s, %s, %s, %s, %s)",
                [(sid, count + n, tenant, it.item_id, now, it.format, it.data_json,
                  it.role, it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
                 for n, it in enumerate(items, start=1)],
            )
            await cur.execute(
                "UPDATE sessions SET item_count = %s, last_activity_time = %s WHERE sid = %s",
                (count + len(items), now, sid))
            if idempotency is not None:
                await cur.execute(
                    "INSERT INTO idempotency_keys (sid, key, tenant, request_hash, item_ids, "
                    "create_time) VALUES (%s, %s, %s, %s, %s::jsonb, %s)",
                    (sid, idempotency[0], tenant, idempotency[1],
                     json.dumps([it.item_id for it in items]), now))
            loads = json.loads
            return [
                Item(it.item_id, session_id, count + n, now, loads(it.data_json), it.format,
                     it.role, it.type, it.tool_name, it.model, it.in_tokens, it.out_tokens)
                for n, it in enumerate(items, start=1)
            ]

        return await self._write(tenant, run)

    @staticmethod
    async def _replayed(cur: Cursor, sid: int, session_id: str,
                        idempotency: tuple[str, str]) -> list[Item] | None:
        key, request_hash = idempotency
        await cur.execute(
            "SELECT request_hash, item_ids FROM idempotency_keys WHERE sid = %s AND key = %s",
            (sid, key))
        seen = await cur.fetchone()
        if seen is None:
            return None
        if seen[0] != request_hash:
            raise IdempotencyKeyReused(
                f"idempotency key {key!r} was used with a different request",
                session_id=session_id, idempotency_key=key)
        await cur.execute(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = %s AND item_id = ANY(%s) "
            "ORDER BY seq", (sid, list(seen[1])))
        return _items(await cur.fetchall(), session_id)

    async def list_items(
        self, tenant: str, store: str, session_id: str, *, descending: bool, limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        if descending:
            query = (f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = %s AND seq < %s "
                     "ORDER BY seq DESC LIMIT %s")
            bound = after_seq if after_seq is not None else 2**62
        else:
            query = (f"SELECT {_ITEM_COLUMNS} FROM items WHERE sid = %s AND seq > %s "
                     "ORDER BY seq LIMIT %s")
            bound = after_seq if after_seq is not None else 0

        async def run(cur: Cursor) -> list[Item]:
            sid = await self._sid(cur, tenant, store, session_id)
            await cur.execute(query, (sid, bound, limit))
            return _items(await cur.fetchall(), session_id)

        return await self._read(tenant, run)

    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        async def run(cur: Cursor) -> Item:
            sid = await self._sid(cur, tenant, store, session_id)
            await cur.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items "
                "WHERE tenant = %s AND item_id = %s AND sid = %s", (tenant, item_id, sid))
            found = _items(await cur.fetchall(), session_id)
            if not found:
                raise ItemNotFound(f"no item {item_id!r} in session {session_id!r}",
                                   session_id=session_id, item_id=item_id)
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
