"""``openai-agents``: the OpenAI Agents SDK's ``SQLiteSession`` files and
``SQLAlchemySession`` tables into ownstate.

``--from`` is a SQLite file written by ``SQLiteSession`` (a path), or the database of
``SQLAlchemySession`` as a SQLAlchemy URL (``sqlite+aiosqlite:///app.db``,
``postgresql+asyncpg://.../app``; an async driver is chosen for a URL that names a
synchronous one). ``--sessions-table`` and ``--messages-table`` name the tables when the
SDK was given other names. Each SDK session is one unit: its rows in the messages table, in the
order the SDK reads them (by row id for ``SQLiteSession``; by ``created_at``, then row id
for ``SQLAlchemySession``), each decoded as the SDK decodes it (``json.loads`` of the
stored text). A session with a row the SDK would skip as corrupt is not imported at all
and is reported with its session and message ids.

What is written is what :class:`~ownstate.adapters.openai_agents.OwnstateSession` writes
for the same conversation: one ownstate session per SDK session (same session id, actor
``openai-agents`` unless ``--actor-id`` says otherwise, in store ``openai-agents``), each
item stored exactly as the SDK holds it, format ``openai.responses``, so
``OwnstateSession(session_id, client).get_items()`` returns what the SDK's session did.

A conversation already stored is compared with the source item by item: the missing tail
is appended (an import cut short is finished; each append's idempotency key is derived
from the ids of the rows it holds), one that has gone on since is left alone, and one
that differs is reported, never overwritten.

It may touch the public API, the importer loop, :mod:`._shared`, the error tree, the limits
and the model, and, imported when used, the OpenAI Agents adapter's item format and
SQLAlchemy: the SDK's tables are read with SQL, not through the SDK.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import limits as _validate
from ...api import AsyncClient
from ...errors import AlreadyExists, Conflict, SessionNotFound
from ...model import JSON
from ..base import DecodeError, Importer, ImportOption, Unit, Written, canonical_digest
from ._shared import batches, derived_key, readonly_engine, redacted, session_store

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, TableClause
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ...api.aio import AsyncSession

__all__ = ["IMPORTER", "OpenAIAgentsImporter"]


@dataclass(frozen=True, slots=True)
class _Conversation:
    session_id: str
    rows: list[tuple[int, dict[str, Any]]]  # (message row id, item), in the SDK's order

    @property
    def items(self) -> list[dict[str, Any]]:
        return [item for _, item in self.rows]


class OpenAIAgentsImporter(Importer[_Conversation]):
    """OpenAI Agents SDK sessions (SQLiteSession, SQLAlchemySession) into the adapter's
    store (see the module)."""

    name = "openai-agents"
    default_store = "openai-agents"
    options = (
        ImportOption("sessions-table", "The SDK's sessions table.", "agent_sessions"),
        ImportOption("messages-table", "The SDK's messages table.", "agent_messages"),
        ImportOption("actor-id", "The actor of each new session (the adapter's actor_id).",
                     "openai-agents"),
    )

    async def open(self) -> None:
        from sqlalchemy import column, inspect, table
        from sqlalchemy.exc import SQLAlchemyError

        from ...adapters.openai_agents import FORMAT

        self._format = FORMAT
        _validate.store_name(self.store)
        self._engine: AsyncEngine = readonly_engine(self.source)
        # A path is SQLiteSession's file; a URL is SQLAlchemySession's database.
        self._by_row_id = "://" not in self.source
        self._sessions: TableClause = table(self.settings["sessions-table"],
                                            column("session_id"))
        self._messages: TableClause = table(self.settings["messages-table"], column("id"),
                                            column("session_id"), column("message_data"),
                                            column("created_at"))
        try:
            async with self._engine.connect() as conn:
                names = set(await conn.run_sync(
                    lambda sync: inspect(sync).get_table_names()))
        except (SQLAlchemyError, OSError) as exc:
            await self._engine.dispose()
            raise ValueError(f"cannot read {redacted(self.source)}: {exc}") from exc
        missing = [t for t in (self.settings["sessions-table"],
                               self.settings["messages-table"]) if t not in names]
        if missing:
            await self._engine.dispose()
            raise ValueError(f"{redacted(self.source)} has no table {missing[0]!r}: not an "
                             "OpenAI Agents SDK session database (or give "
                             "--sessions-table/--messages-table)")

    async def close(self) -> None:
        await self._engine.dispose()

    def _session_ids(self) -> Any:
        from sqlalchemy import select, union

        # Rows in either table: the SDK reads messages whatever its sessions table holds.
        return union(select(self._sessions.c.session_id),
                     select(self._messages.c.session_id)).subquery()

    async def count(self) -> int | None:
        from sqlalchemy import func, select

        async with self._engine.connect() as conn:
            found = await conn.scalar(select(func.count()).select_from(self._session_ids()))
        return int(found or 0)

    async def units(self) -> AsyncIterator[Unit]:
        from sqlalchemy import select

        ids = self._session_ids()
        async with self._engine.connect() as conn:
            found = (await conn.execute(select(ids.c.session_id).order_by(
                ids.c.session_id))).scalars().all()
        for session_id in found:
            yield Unit(str(session_id), {"session_id": str(session_id)})

    def _order(self) -> list[ColumnElement[Any]]:
        m = self._messages.c
        return [m.id.asc()] if self._by_row_id else [m.created_at.asc(), m.id.asc()]

    async def decode(self, unit: Unit) -> _Conversation:
        from sqlalchemy import select

        session_id = unit.ids["session_id"]
        m = self._messages.c
        async with self._engine.connect() as conn:
            result = await conn.execute(select(m.id, m.message_data).where(
                m.session_id == session_id).order_by(*self._order()))
            found = result.all()
        rows = []
        for message_id, text in found:
            try:
                item = json.loads(text)
            except (json.JSONDecodeError, TypeError) as exc:
                raise DecodeError(f"message {message_id} of session {session_id!r} is not "
                                  f"JSON ({exc}); the SDK skips it", session_id=session_id,
                                  message_id=message_id) from exc
            if not isinstance(item, dict):
                raise DecodeError(f"message {message_id} of session {session_id!r} is not a "
                                  "JSON object", session_id=session_id, message_id=message_id)
            rows.append((int(message_id), item))
        return _Conversation(session_id, rows)

    async def _stored(self, client: AsyncClient, session_id: str
                      ) -> tuple[AsyncSession | None, list[tuple[str, dict[str, JSON]]]]:
        store = await session_store(client, self.store, create=False)
        if store is None:
            return None, []
        try:
            handle = await store.get(session_id)
            items = [(i.format, i.data) async for i in handle.list_items(
                order_by="create_time asc")]
        except SessionNotFound:
            return None, []
        return handle, items

    async def write(self, client: AsyncClient, unit: Unit, decoded: _Conversation, *,
                    dry_run: bool) -> Written:
        session_id = _validate.session_id(decoded.session_id)
        actor = client.limits.actor_id(self.settings["actor-id"])
        handle, stored_items = await self._stored(client, session_id)
        stored = [data for _, data in stored_items]
        source = decoded.items
        if stored == source[:len(stored)]:
            missing = decoded.rows[len(stored):]
        elif source == stored[:len(source)]:
            missing = []  # it has gone on since: the source is in it
        else:
            raise Conflict(f"the stored session {session_id!r} differs from the source; it "
                           "was left as it is", session_id=session_id)
        written = Written()
        appends = list(batches(missing, client.limits))  # refuse what cannot be stored first
        if handle is None:
            written.counts["sessions"] += 1
        if missing:
            written.counts["items"] += len(missing)
        written.already = not written.counts
        if dry_run or written.already:
            return written
        if handle is None:
            store = await session_store(client, self.store, create=True)
            assert store is not None
            try:
                handle = await store.add(actor_id=actor, session_id=session_id)
            except AlreadyExists:  # made since it was looked up
                handle = await store.get(session_id)
        for batch in appends:
            await handle.append_items(
                [item for _, item in batch], format=self._format,
                idempotency_key=derived_key(self.name, session_id, batch[0][0], batch[-1][0]))
        return written

    async def digest(self, client: AsyncClient, unit: Unit, decoded: _Conversation
                     ) -> tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]:
        handle, stored = await self._stored(client, decoded.session_id)
        source = [[self._format, item] for item in decoded.items]
        source_counts = Counter(sessions=1, items=len(source))
        stored_counts = (Counter(sessions=1, items=len(stored)) if handle is not None
                         else Counter[str]())
        return ((canonical_digest([decoded.session_id, source]), source_counts),
                (canonical_digest([decoded.session_id, [list(i) for i in stored]]),
                 stored_counts))


IMPORTER = OpenAIAgentsImporter
