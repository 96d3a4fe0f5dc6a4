"""``adk``: Google ADK ``DatabaseSessionService`` databases into ownstate.

``--from`` is the database's SQLAlchemy URL (``sqlite+aiosqlite:///sessions.db``,
``postgresql+asyncpg://.../app``; an async driver is chosen for a URL that names a
synchronous one) or a SQLite file's path. Its schema version is read the way ADK reads
it (``adk_internal_metadata``, else the shape of the ``events`` table): ``1``, events as
JSON, or ``0``, the earlier schema whose event actions are pickled. Rows are decoded with
that version's own ADK models (``StorageEvent.to_event``, the restricted unpickler of
``0``), in ADK's order (by timestamp, then event id), so each event is the ``Event``
``DatabaseSessionService.get_session`` returns.

What is written is what :class:`~ownstate.adapters.adk.OwnstateSessionService` writes:

- each ADK session is one unit, one ownstate session in store ``adk``
  (:func:`~ownstate.adapters.adk.ownstate_session_id`, actor the ADK user id, the
  ``adk.*`` labels), its events as ``adk.event`` items (the event's JSON, ``temp:`` keys
  left out), preceded by an ``adk.state`` item with the session state its events do not
  set (what ``create_session`` was given), so that reading the session folds to the state
  ADK holds; should the events not explain that state, an ``adk.state`` item after them
  says the rest;
- each row of ``app_states`` and of ``user_states`` is one unit: its keys as facts in
  memory store ``adk-state`` (``--state-store``), the adapter's subjects and keys, each
  naming as its source the item of the newest event that set it to that value. These
  units are imported after every session, so that the items they name are stored.

A session already stored is compared with the source event by event: the missing events
are appended (keys derived from their event ids), a session that has gone on since is
left alone, one that differs is reported. A state key whose stored value differs from the
source is remembered anew (the fact it supersedes stays in its history).

It may touch the public API, the importer loop (:mod:`ownstate.importers.base`),
:mod:`._shared`, the error tree and the model, and, imported when used, the ADK adapter's
naming and kernel, the limits, ADK's session schemas and SQLAlchemy.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...api import AsyncClient
from ...errors import AlreadyExists, Conflict, SessionNotFound, StoreNotFound
from ...model import JSON, Item
from ..base import DecodeError, Importer, ImportOption, Unit, Written, canonical_digest
from ._shared import batches, derived_key, readonly_engine, redacted, session_store

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ...api.aio import AsyncSession

__all__ = ["IMPORTER", "AdkImporter"]

_MISSING = object()


@dataclass(frozen=True, slots=True)
class _Session:
    app_name: str
    user_id: str
    session_id: str
    events: list[tuple[str, dict[str, JSON]]]  # (event id, item data), in ADK's order
    state: dict[str, Any]  # the session-scoped state ADK holds for it


@dataclass(frozen=True, slots=True)
class _State:
    app_name: str
    user_id: str | None  # None: the app's state
    state: dict[str, Any]


def _event_data(event: Event) -> dict[str, JSON]:
    """The item data of an event, as OwnstateSessionService.append_event stores it."""
    from google.adk.sessions import State

    data: dict[str, JSON] = event.model_dump(exclude_none=True, mode="json")
    actions = data.get("actions")
    if isinstance(actions, dict) and isinstance(actions.get("state_delta"), dict):
        actions["state_delta"] = {k: v for k, v in actions["state_delta"].items()
                                  if not k.startswith(State.TEMP_PREFIX)}
    return data


def _delta(data: dict[str, JSON]) -> dict[str, JSON]:
    actions = data.get("actions")
    delta = actions.get("state_delta") if isinstance(actions, dict) else None
    return delta if isinstance(delta, dict) else {}


def _fold(items: Sequence[tuple[str, dict[str, JSON]]]) -> dict[str, Any]:
    """The session state ``(format, data)`` items fold to, as the adapter folds them."""
    from ...adapters.adk._state import EVENT_FORMAT, STATE_FORMAT, _session_delta

    state: dict[str, Any] = {}
    for fmt, data in items:
        if fmt == EVENT_FORMAT:
            state.update(_session_delta(_delta(data)))
        elif fmt == STATE_FORMAT and isinstance(data.get("state"), dict):
            state.update(data["state"])
    return state


class AdkImporter(Importer[_Session | _State]):
    """ADK DatabaseSessionService databases (schema 0 and 1) into the ADK adapter's
    stores (see the module)."""

    name = "adk"
    default_store = "adk"
    options = (ImportOption("state-store", "The memory store of app: and user: state "
                            "(the adapter's state_store).", "adk-state"),)

    async def open(self) -> None:
        from google.adk.sessions.migration import _schema_check_utils as checks
        from google.adk.sessions.schemas import v0, v1
        from sqlalchemy import inspect
        from sqlalchemy.exc import SQLAlchemyError

        from ... import limits

        limits.store_name(self.store)
        limits.store_name(self.settings["state-store"])
        self._engine: AsyncEngine = readonly_engine(self.source)

        def look(sync: Any) -> tuple[str, set[str], set[str]]:
            found = inspect(sync)
            tables = set(found.get_table_names())
            columns = ({c["name"] for c in found.get_columns("events")} if "events" in tables
                       else set())
            return checks.get_db_schema_version_from_connection(sync), tables, columns

        try:
            async with self._engine.connect() as conn:
                version, tables, columns = await conn.run_sync(look)
        except (SQLAlchemyError, OSError, ValueError) as exc:
            await self._engine.dispose()
            raise ValueError(f"cannot read {redacted(self.source)}: {exc}") from exc
        wanted = {"sessions", "events", "app_states", "user_states"}
        schemas = {checks.SCHEMA_VERSION_0_PICKLE: v0, checks.SCHEMA_VERSION_1_JSON: v1}
        if not wanted <= tables or version not in schemas:
            await self._engine.dispose()
            found = (f"schema version {version!r}" if wanted <= tables
                     else f"no table {sorted(wanted - tables)[0]!r}")
            raise ValueError(f"{redacted(self.source)} has {found}: not an ADK "
                             "DatabaseSessionService database this importer reads")
        self._schema: Any = schemas[version]
        lacking = set(self._schema.StorageEvent.__table__.columns.keys()) - columns
        if lacking:
            await self._engine.dispose()
            raise ValueError(f"{redacted(self.source)}: its events table has no column "
                             f"{sorted(lacking)[0]!r}, a layout older than ADK's schema "
                             f"{version}; bring it up to date with ADK's migration first")
        self.schema_version = version
        # Sessions still being imported: the state units wait for them (see units).
        self._pending = 0
        self._settled = asyncio.Event()
        # (app, scope, user, key) -> ((timestamp, event id), value, source item) of the
        # newest event seen to set that app: or user: key.
        self._setters: dict[tuple[str, str, str, str],
                            tuple[tuple[float, str], JSON, tuple[str, str, str]]] = {}

    async def close(self) -> None:
        await self._engine.dispose()

    async def count(self) -> int | None:
        from sqlalchemy import func, select

        s = self._schema
        async with self._engine.connect() as conn:
            total = 0
            for model in (s.StorageSession, s.StorageAppState, s.StorageUserState):
                total += int(await conn.scalar(select(func.count()).select_from(model)) or 0)
        return total

    async def units(self) -> AsyncIterator[Unit]:
        from sqlalchemy import select

        s = self._schema
        S, A, U = s.StorageSession, s.StorageAppState, s.StorageUserState
        async with self._engine.connect() as conn:
            sessions = (await conn.execute(select(S.app_name, S.user_id, S.id).order_by(
                S.app_name, S.user_id, S.id))).all()
        self._pending = len(sessions)
        if not sessions:
            self._settled.set()
        for app, user, sid in sessions:
            yield Unit(f"{app}/{user}/{sid}",
                       {"app_name": app, "user_id": user, "session_id": sid})
        # The facts of app: and user: state name the items that set them: wait until
        # every session is written (or has failed) before handing out the state units.
        await self._settled.wait()
        async with self._engine.connect() as conn:
            apps = (await conn.execute(select(A.app_name).order_by(A.app_name))).all()
            users = (await conn.execute(select(U.app_name, U.user_id).order_by(
                U.app_name, U.user_id))).all()
        for (app,) in apps:
            yield Unit(f"app-state {app}", {"app_name": app})
        for app, user in users:
            yield Unit(f"user-state {app}/{user}", {"app_name": app, "user_id": user})

    def _settle(self, unit: Unit) -> None:
        if "session_id" in unit.ids:
            self._pending -= 1
            if self._pending <= 0:
                self._settled.set()

    # decode ------------------------------------------------------------------------------

    async def decode(self, unit: Unit) -> _Session | _State:
        try:
            if "session_id" in unit.ids:
                return await self._decode_session(unit)
            return await self._decode_state(unit)
        except BaseException:
            self._settle(unit)  # write will not be called for it
            raise

    async def _decode_state(self, unit: Unit) -> _State:
        from sqlalchemy.exc import DBAPIError
        from sqlalchemy.ext.asyncio import AsyncSession as SQLSession

        s = self._schema
        app, user = unit.ids["app_name"], unit.ids.get("user_id")
        model, key = ((s.StorageAppState, app) if user is None
                      else (s.StorageUserState, (app, user)))
        async with SQLSession(self._engine) as sql:
            try:
                row = await sql.get(model, key)
            except DBAPIError:
                raise
            except Exception as exc:  # what ADK's JSON column raises on bad text
                raise DecodeError(f"the state cannot be decoded: {exc}", **unit.ids) from exc
        if row is None:
            raise DecodeError("the state row is gone from the source", **unit.ids)
        return _State(app, user, dict(row.state or {}))

    async def _decode_session(self, unit: Unit) -> _Session:
        from sqlalchemy import select
        from sqlalchemy.exc import DBAPIError
        from sqlalchemy.ext.asyncio import AsyncSession as SQLSession

        S, E = self._schema.StorageSession, self._schema.StorageEvent
        app, user, sid = unit.ids["app_name"], unit.ids["user_id"], unit.ids["session_id"]
        of_session = (E.app_name == app, E.user_id == user, E.session_id == sid)
        async with SQLSession(self._engine) as sql:
            try:
                row = await sql.get(S, (app, user, sid))
            except DBAPIError:
                raise
            except Exception as exc:
                raise DecodeError(f"the session's state cannot be decoded: {exc}",
                                  **unit.ids) from exc
            if row is None:
                raise DecodeError("the session is gone from the source", **unit.ids)
            state = dict(row.state or {})
            try:
                stored = (await sql.execute(select(E).where(*of_session).order_by(
                    E.timestamp.asc(), E.id.asc()))).scalars().all()
            except DBAPIError:
                raise
            except Exception as exc:
                ids = (await sql.execute(select(E.id).where(*of_session))).scalars().all()
                raise await self._undecodable(unit, sorted(ids), exc) from exc
        events = []
        for storage_event in stored:
            try:
                event = storage_event.to_event()
            except Exception as exc:  # pydantic's ValidationError, a bad pickle, ...
                raise DecodeError(f"event {storage_event.id!r} cannot be decoded: {exc}",
                                  **unit.ids, event_id=storage_event.id) from exc
            events.append((storage_event.id, _event_data(event)))
        return _Session(app, user, sid, events, state)

    async def _undecodable(self, unit: Unit, event_ids: list[str], error: Exception
                           ) -> DecodeError:
        """Which event of a session whose events could not be read is the bad one: each
        is read alone (only when reading them all failed)."""
        from sqlalchemy import select
        from sqlalchemy.ext.asyncio import AsyncSession as SQLSession

        E = self._schema.StorageEvent
        for event_id in event_ids:
            async with SQLSession(self._engine) as sql:
                try:
                    (await sql.execute(select(E).where(
                        E.app_name == unit.ids["app_name"], E.user_id == unit.ids["user_id"],
                        E.session_id == unit.ids["session_id"], E.id == event_id))).scalars().all()
                except Exception as exc:
                    return DecodeError(f"event {event_id!r} cannot be decoded: {exc}",
                                       **unit.ids, event_id=event_id)
        return DecodeError(f"the session's events cannot be decoded: {error}", **unit.ids)

    # write -------------------------------------------------------------------------------

    async def write(self, client: AsyncClient, unit: Unit, decoded: _Session | _State, *,
                    dry_run: bool) -> Written:
        if isinstance(decoded, _State):
            return await self._write_state(client, decoded, dry_run=dry_run)
        try:
            return await self._write_session(client, decoded, dry_run=dry_run)
        finally:
            self._settle(unit)

    async def _stored(self, client: AsyncClient, key: str
                      ) -> tuple[AsyncSession | None, list[Item]]:
        store = await session_store(client, self.store, create=False)
        if store is None:
            return None, []
        try:
            handle = await store.get(key)
            return handle, [i async for i in handle.list_items(order_by="create_time asc")]
        except SessionNotFound:
            return None, []

    async def _write_session(self, client: AsyncClient, d: _Session, *, dry_run: bool
                             ) -> Written:
        from ...adapters.adk._state import (
            _LABEL_APP,
            _LABEL_SESSION,
            _LABEL_STATE,
            EVENT_FORMAT,
            STATE_FORMAT,
            _carries_session_state,
            _session_delta,
            ownstate_session_id,
        )

        key = ownstate_session_id(d.app_name, d.user_id, d.session_id)
        handle, stored = await self._stored(client, key)
        stored_events = [i for i in stored if i.format == EVENT_FORMAT]
        have = [i.data for i in stored_events]
        source = [data for _, data in d.events]
        went_on = False
        if have == source[:len(have)]:
            missing = d.events[len(have):]
        elif source == have[:len(source)]:
            missing, went_on = [], True  # it has gone on since: the source is in it
        else:
            raise Conflict(f"the stored session {key!r} differs from the source; it was left "
                           "as it is", session_id=key)
        ids = (d.app_name, d.user_id, d.session_id)
        planned: list[tuple[str, list[dict[str, JSON]], str]] = []  # (format, items, key)
        if not stored:
            set_by_events = {k for _, data in d.events for k in _session_delta(_delta(data))}
            initial = {k: v for k, v in d.state.items() if k not in set_by_events}
            if initial:
                planned.append((STATE_FORMAT, [{"state": initial}],
                                derived_key(self.name, *ids, "state")))
        for batch in batches(missing, client.limits):
            planned.append((EVENT_FORMAT, [data for _, data in batch],
                            derived_key(self.name, *ids, batch[0][0], batch[-1][0])))
        if not went_on:
            folded = _fold([(i.format, i.data) for i in stored]
                           + [(fmt, data) for fmt, datas, _ in planned for data in datas])
            rest = {k: v for k, v in d.state.items() if folded.get(k, _MISSING) != v}
            if rest:  # session state the events do not explain
                after = d.events[-1][0] if d.events else ""
                planned.append((STATE_FORMAT, [{"state": rest}],
                                derived_key(self.name, *ids, "state-after", after)))
        written = Written()
        if handle is None:
            written.counts["sessions"] += 1
        if missing:
            written.counts["items"] += len(missing)
        written.already = not planned and handle is not None
        appended: list[Item] = []
        if not dry_run and (planned or handle is None):
            carries = any(_carries_session_state(i) for i in stored) or any(
                fmt == STATE_FORMAT or _session_delta(_delta(data))
                for fmt, datas, _ in planned for data in datas)
            if handle is None:
                labels = {_LABEL_APP: d.app_name, _LABEL_SESSION: d.session_id}
                if carries:
                    labels[_LABEL_STATE] = "1"
                store = await session_store(client, self.store, create=True)
                assert store is not None
                try:
                    handle = await store.add(actor_id=d.user_id, session_id=key,
                                             metadata=labels)
                except AlreadyExists:  # made since it was looked up
                    handle = await store.get(key)
            if carries and _LABEL_STATE not in handle.metadata:
                await handle.update_metadata({_LABEL_STATE: "1"})  # before the items
            for fmt, datas, idempotency_key in planned:
                made = await handle.append_items(datas, format=fmt,
                                                 idempotency_key=idempotency_key)
                appended += [i for i in made if i.format == EVENT_FORMAT]
        self._note_setters(d, key, stored_events + appended)
        return written

    def _note_setters(self, d: _Session, key: str, items: list[Item]) -> None:
        """Remember, per app: and user: key, the newest event of ``d`` that set it."""
        from google.adk.sessions import State

        for (event_id, data), item in zip(d.events, items, strict=False):
            stamp = data.get("timestamp")
            when = (float(stamp) if isinstance(stamp, (int, float)) else 0.0, event_id)
            source = (self.store, key, item.item_id)
            for name, value in _delta(data).items():
                if name.startswith(State.APP_PREFIX):
                    found = (d.app_name, "app", "", name[len(State.APP_PREFIX):])
                elif name.startswith(State.USER_PREFIX):
                    found = (d.app_name, "user", d.user_id, name[len(State.USER_PREFIX):])
                else:
                    continue
                known = self._setters.get(found)
                if known is None or known[0] <= when:
                    self._setters[found] = (when, value, source)

    async def _facts(self, client: AsyncClient, *, create: bool) -> Any:
        from ...adapters._kernel import ensure_store

        if create:
            return await ensure_store(client.memory_stores, self.settings["state-store"])
        try:
            return await client.memory_stores.get(self.settings["state-store"])
        except StoreNotFound:
            return None

    @staticmethod
    def _specs(client: AsyncClient, d: _State) -> list[dict[str, Any]]:
        """The facts the adapter keeps for this state (checked: raises InvalidInput)."""
        from ...adapters.adk._state import _state_facts

        scopes = {"app": d.state, "user": {}} if d.user_id is None else {
            "app": {}, "user": d.state}
        return _state_facts(client, d.app_name, d.user_id or "-", scopes)

    async def _current(self, client: AsyncClient, subject: str, keys: list[str]
                       ) -> dict[str, Any]:
        facts = await self._facts(client, create=False)
        if facts is None:
            return {}
        current: dict[str, Any] = {}
        size = client.limits.max_page_size
        for start in range(0, len(keys), size):
            for fact in await facts.recall(subject, keys[start:start + size]):
                current[fact.key] = fact.value
        return current

    async def _write_state(self, client: AsyncClient, d: _State, *, dry_run: bool
                           ) -> Written:
        specs = self._specs(client, d)
        written = Written(already=True)
        if not specs:
            return written
        subject = specs[0]["subject"]
        current = await self._current(client, subject, [s["key"] for s in specs])
        scope, user = ("app", "") if d.user_id is None else ("user", d.user_id)
        changed = []
        for spec, name in zip(specs, d.state, strict=True):
            if current.get(spec["key"], _MISSING) == spec["value"]:
                continue
            setter = self._setters.get((d.app_name, scope, user, name))
            if setter is not None and setter[1] == spec["value"]:
                spec = {**spec, "source": setter[2]}
            changed.append(spec)
        if not changed:
            return written
        written = Written()
        written.counts["facts"] += len(changed)
        if not dry_run:
            facts = await self._facts(client, create=True)
            size = client.limits.max_batch_items
            for start in range(0, len(changed), size):
                await facts.remember_many(changed[start:start + size])
        return written

    # verify ------------------------------------------------------------------------------

    async def digest(self, client: AsyncClient, unit: Unit, decoded: _Session | _State
                     ) -> tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]:
        if isinstance(decoded, _State):
            from ...adapters.adk._state import _app_subject, _state_prefix

            source = sorted([s["key"], s["value"]] for s in self._specs(client, decoded))
            subject, scope = ((_app_subject(decoded.app_name), "app")
                              if decoded.user_id is None else (decoded.user_id, "user"))
            prefix = _state_prefix(decoded.app_name, scope)
            facts = await self._facts(client, create=False)
            current = await facts.recall(subject) if facts is not None else []
            stored = sorted([f.key, f.value] for f in current if f.key.startswith(prefix))
            return ((canonical_digest(source), Counter(facts=len(source))),
                    (canonical_digest(stored), Counter(facts=len(stored))))
        from ...adapters.adk._state import (
            _LABEL_APP,
            _LABEL_SESSION,
            EVENT_FORMAT,
            ownstate_session_id,
        )

        d = decoded
        handle, items = await self._stored(
            client, ownstate_session_id(d.app_name, d.user_id, d.session_id))
        events = [data for _, data in d.events]
        source_digest = canonical_digest([d.app_name, d.user_id, d.session_id, events, d.state])
        if handle is None:
            return (source_digest, Counter(sessions=1, items=len(events))), (
                canonical_digest([]), Counter[str]())
        have = [i.data for i in items if i.format == EVENT_FORMAT]
        labels = handle.metadata
        stored_digest = canonical_digest([
            labels.get(_LABEL_APP), handle.actor_id, labels.get(_LABEL_SESSION), have,
            _fold([(i.format, i.data) for i in items])])
        return ((source_digest, Counter(sessions=1, items=len(events))),
                (stored_digest, Counter(sessions=1, items=len(have))))


IMPORTER = AdkImporter
