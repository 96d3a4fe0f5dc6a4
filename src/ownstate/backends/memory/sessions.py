"""Session stores, sessions and items, in memory.

It may touch the in-memory data (``_data``) and its vector check (``_admit``), the session
and search ports, ids and times (``ownstate._ids``), an item's derived columns
(``formats.derive``), the model and errors, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ... import errors
from ..._ids import format_time, new_id
from ...formats.derive import DerivedColumns
from ...model import Item, ItemHit, SessionRecord, SessionStoreRecord
from ..ports.search import TextQuery, rank, terms
from ..ports.sessions import NewItem, SessionOrder, changed_labels
from ._admit import admit_item_vectors
from ._data import MemoryBase, _StoredItem, _StoredSession

__all__ = ["SessionsInMemory"]


class SessionsInMemory(MemoryBase):
    # helpers ---------------------------------------------------------------------------

    def _store(self, tenant: str, name: str) -> SessionStoreRecord:
        record = self._data.stores.get((tenant, name))
        if record is None:
            raise errors.StoreNotFound(store=name)
        return record

    def _session(self, tenant: str, store: str, session_id: str) -> _StoredSession:
        stored = self._data.sessions.get((tenant, store, session_id))
        if stored is None:
            raise errors.SessionNotFound(store=store, session_id=session_id)
        return stored

    def _item_count(self, tenant: str, store: str, session_id: str) -> int:
        """How many items the session holds (its next seq is one more)."""
        return len(self._session(tenant, store, session_id).items)

    def _touch(self, stored: _StoredSession, now: datetime) -> None:
        stored.record = replace(stored.record, last_activity_time=now)

    # session stores --------------------------------------------------------------------

    async def create_store(self, tenant: str, name: str, now: datetime,
                           owner: str | None = None, index_items: bool = True,
                           ) -> SessionStoreRecord:
        with self._data.lock:
            if (tenant, name) in self._data.stores:
                raise errors.AlreadyExists(store=name)
            record = SessionStoreRecord(tenant=tenant, name=name, create_time=now)
            self._start_grants(tenant, "session_store", name, owner)
            self._data.stores[(tenant, name)] = record
            if index_items:
                self._data.unindexed.discard((tenant, name))
            else:
                self._data.unindexed.add((tenant, name))
            return record

    async def get_store(self, tenant: str, name: str) -> SessionStoreRecord:
        with self._data.lock:
            return self._store(tenant, name)

    async def list_stores(
        self, tenant: str, limit: int, after: str | None
    ) -> list[SessionStoreRecord]:
        with self._data.lock:
            names = sorted(
                name for (t, name) in self._data.stores
                if t == tenant and (after is None or name > after)
            )
            return [self._data.stores[(tenant, name)] for name in names[:limit]]

    async def delete_store(self, tenant: str, name: str, force: bool) -> int:
        with self._data.lock:
            self._store(tenant, name)
            keys = [k for k in self._data.sessions if k[0] == tenant and k[1] == name]
            if keys and not force:
                raise errors.StoreNotEmpty(store=name, sessions=len(keys))
            self._drop_grants(tenant, "session_store", name)
            for key in keys:
                del self._data.sessions[key]
            self._on_sessions_deleted(tenant, name, [key[2] for key in keys])
            del self._data.stores[(tenant, name)]
            return len(keys)

    # sessions --------------------------------------------------------------------------

    async def create_session(
        self, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: Mapping[str, str], now: datetime,
    ) -> SessionRecord:
        with self._data.lock:
            self._store(tenant, store)
            return self._insert_session(tenant, store, session_id, actor_id, dict(metadata),
                                        None, session_id, now).record

    def _insert_session(
        self, tenant: str, store: str, session_id: str, actor_id: str,
        metadata: dict[str, str], parent: str | None, root: str, now: datetime,
    ) -> _StoredSession:
        key = (tenant, store, session_id)
        if key in self._data.sessions:
            raise errors.AlreadyExists(store=store, session_id=session_id)
        record = SessionRecord(
            tenant=tenant, store=store, session_id=session_id, actor_id=actor_id,
            parent_session_id=parent, root_session_id=root, metadata=metadata,
            create_time=now, last_activity_time=now,
        )
        stored = _StoredSession(record=record, ordinal=self._data.next_ordinal)
        self._data.next_ordinal += 1
        self._data.sessions[key] = stored
        return stored

    async def get_session(self, tenant: str, store: str, session_id: str) -> SessionRecord:
        with self._data.lock:
            return self._session(tenant, store, session_id).record

    async def list_sessions(
        self, tenant: str, store: str, *, actor_id: str | None, metadata: Mapping[str, str],
        order: SessionOrder, descending: bool, limit: int, after: Sequence[Any] | None,
    ) -> tuple[list[SessionRecord], list[Any] | None]:
        def position(s: _StoredSession) -> tuple[Any, ...]:
            if order == "create_time":
                return (s.ordinal,)
            return (format_time(s.record.last_activity_time), s.ordinal)

        with self._data.lock:
            self._store(tenant, store)
            chosen = [
                s for (t, st, _), s in self._data.sessions.items()
                if t == tenant and st == store
                and (actor_id is None or s.record.actor_id == actor_id)
                and all(s.record.metadata.get(k) == v for k, v in metadata.items())
            ]
            if after is not None:
                cursor = tuple(after)
                chosen = [s for s in chosen
                          if (position(s) < cursor if descending else position(s) > cursor)]
            chosen.sort(key=position, reverse=descending)
            page = chosen[:limit]
            last = list(position(page[-1])) if len(chosen) > limit else None
            return [s.record for s in page], last

    async def update_metadata(
        self, tenant: str, store: str, session_id: str, changes: Mapping[str, str | None],
        max_labels: int,
    ) -> SessionRecord:
        with self._data.lock:
            stored = self._session(tenant, store, session_id)
            labels = changed_labels(stored.record.metadata, changes, max_labels)
            stored.record = replace(stored.record, metadata=labels)
            return stored.record

    def _children(self, tenant: str, store: str, session_id: str) -> list[str]:
        return [s.record.session_id for (t, st, _), s in self._data.sessions.items()
                if t == tenant and st == store and s.record.parent_session_id == session_id]

    async def delete_session(self, tenant: str, store: str, session_id: str, force: bool) -> int:
        with self._data.lock:
            self._session(tenant, store, session_id)
            children = self._children(tenant, store, session_id)
            if children and not force:
                raise errors.HasChildren(store=store, session_id=session_id, children=children)
            doomed = [session_id]
            index = 0
            while index < len(doomed):
                doomed.extend(self._children(tenant, store, doomed[index]))
                index += 1
            for doomed_id in doomed:
                del self._data.sessions[(tenant, store, doomed_id)]
            self._on_sessions_deleted(tenant, store, doomed)
            return len(doomed)

    async def fork_session(
        self, tenant: str, store: str, session_id: str, new_session_id: str,
        up_to_item_id: str | None, now: datetime,
    ) -> SessionRecord:
        with self._data.lock:
            parent = self._session(tenant, store, session_id)
            items = parent.items
            if up_to_item_id is not None:
                cut = next((i for i, it in enumerate(items) if it.item_id == up_to_item_id), None)
                if cut is None:
                    raise errors.ItemNotFound(session_id=session_id, item_id=up_to_item_id)
                items = items[: cut + 1]
            child = self._insert_session(
                tenant, store, new_session_id, parent.record.actor_id,
                dict(parent.record.metadata), session_id, parent.record.root_session_id, now,
            )
            child.items = [replace(it, item_id=new_id("itm")) for it in items]
            return child.record

    # items -----------------------------------------------------------------------------

    async def append_items(
        self, tenant: str, store: str, session_id: str, items: Sequence[NewItem],
        idempotency: tuple[str, str] | None, now: datetime,
    ) -> list[Item]:
        with self._data.lock:
            stored = self._session(tenant, store, session_id)
            if idempotency is not None:
                key, request_hash = idempotency
                seen = stored.idempotency.get(key)
                if seen is not None:
                    if seen[0] != request_hash:
                        raise errors.IdempotencyKeyReused(
                            session_id=session_id, idempotency_key=key)
                    wanted = set(seen[1])
                    return [it.to_item(session_id) for it in stored.items
                            if it.item_id in wanted]
            first = len(stored.items) + 1
            indexed = (tenant, store) not in self._data.unindexed
            if indexed:
                admit_item_vectors(self._data, tenant, store, [it.embedding for it in items])
            new = [
                _StoredItem(
                    item_id=it.item_id, seq=first + n, create_time=now, data_json=it.data_json,
                    format=it.format,
                    columns=DerivedColumns(it.role, it.type, it.tool_name, it.model,
                                           it.in_tokens, it.out_tokens),
                    terms=tuple(terms(it.text)) if indexed else (),
                    embedding=it.embedding if indexed else None,
                )
                for n, it in enumerate(items)
            ]
            stored.items.extend(new)
            if idempotency is not None:
                stored.idempotency[idempotency[0]] = (idempotency[1], [it.item_id for it in new])
            self._touch(stored, now)
            return [it.to_item(session_id) for it in new]

    async def list_items(
        self, tenant: str, store: str, session_id: str, *, descending: bool, limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        with self._data.lock:
            items = self._session(tenant, store, session_id).items
            if descending:
                end = len(items) if after_seq is None else max(0, min(after_seq - 1, len(items)))
                chosen = items[max(0, end - limit):end][::-1]
            else:
                start = 0 if after_seq is None else max(0, after_seq)
                chosen = items[start:start + limit]
            return [it.to_item(session_id) for it in chosen]

    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        with self._data.lock:
            for it in self._session(tenant, store, session_id).items:
                if it.item_id == item_id:
                    return it.to_item(session_id)
            raise errors.ItemNotFound(session_id=session_id, item_id=item_id)

    async def pop_item(self, tenant: str, store: str, session_id: str,
                       now: datetime) -> Item | None:
        with self._data.lock:
            stored = self._session(tenant, store, session_id)
            if not stored.items:
                return None
            popped = stored.items.pop()
            self._touch(stored, now)
            return popped.to_item(session_id)

    async def clear_items(self, tenant: str, store: str, session_id: str, now: datetime) -> int:
        with self._data.lock:
            stored = self._session(tenant, store, session_id)
            count = len(stored.items)
            stored.items.clear()
            self._touch(stored, now)
            return count

    async def search_items(
        self, tenant: str, query: TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        with self._data.lock:
            chosen = None if stores is None else set(stores)
            collection = [
                ((store, sid, stored, it), it.terms)
                for (t, store, sid), stored in sorted(self._data.sessions.items())
                if t == tenant for it in stored.items
            ]

            def wanted(doc: tuple[str, str, _StoredSession, _StoredItem]) -> bool:
                store, sid, stored, _ = doc
                return ((chosen is None or store in chosen)
                        and (actor_id is None or stored.record.actor_id == actor_id)
                        and (session_id is None or sid == session_id))

            hits = rank(query.terms, collection, wanted)[:limit]
            return [ItemHit(store, stored.record.actor_id, it.to_item(sid), score)
                    for (store, sid, stored, it), score in hits]
