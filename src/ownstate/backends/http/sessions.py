"""Session stores, sessions and items, over HTTP.

It may touch the server through the transport of ``_base``, the replay cache
(``backends._replay``), the session and search ports, the wire format (``ownstate._wire``),
the model and errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ... import _wire
from ...errors import BackendUnavailable, ItemNotFound
from ...model import Item, ItemHit, SessionRecord, SessionStoreRecord, build_item, build_items
from .._replay import Meta, Replay
from ..ports.search import TextQuery
from ..ports.sessions import NewItem, SessionOrder
from ._base import API, SESSION_STORES, HttpBase, addressable, not_found, segment, session_path

__all__ = ["SessionsOverHttp"]

#: The shape of an id the client API made up itself (``new_id("ses")``). The server
#: refuses a chosen id with an underscore, so such an id is left for the server to make.
_GENERATED_SESSION_ID = re.compile(r"ses_[0-9a-f]{32}")
_JSON_HEADERS = {"content-type": "application/json"}


def _sessions(store: str) -> str:
    return f"{SESSION_STORES}/{store}/sessions"


def _no_item(session_id: str, item_id: str) -> ItemNotFound:
    return not_found(ItemNotFound(session_id=session_id, item_id=item_id))


def _chosen(session_id: str) -> str | None:
    return None if _GENERATED_SESSION_ID.fullmatch(session_id) else session_id


def _item(data: Any) -> Item:
    """An item from its JSON; the hot path of every replay, so built field by field."""
    try:
        return build_item(
            data["item_id"], data["session_id"], data["seq"],
            datetime.fromisoformat(data["create_time"]), data["data"], data["format"],
            data.get("role"), data.get("type"), data.get("tool_name"), data.get("model"),
            data.get("in_tokens"), data.get("out_tokens"))
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendUnavailable(
            f"the server sent an item this client cannot read: {exc!r}") from exc


def _meta(item: Item) -> Meta:
    return (item.item_id, item.seq, item.create_time, item.format, item.role, item.type,
            item.tool_name, item.model, item.in_tokens, item.out_tokens)


def _items(body: Any) -> list[Item]:
    return [_item(i) for i in body["session_items"]]


def _append_body(items: Sequence[NewItem], key: str | None) -> bytes:
    """The append request, spliced from each item's JSON text as the client encoded it
    (decoding it only to encode it again would cost as much as the rest of the call)."""
    parts = [f'{{"data":{it.data_json},"format":{json.dumps(it.format)}}}' for it in items]
    tail = f',"idempotency_key":{json.dumps(key, ensure_ascii=False)}' if key is not None else ""
    return f'{{"items":[{",".join(parts)}]{tail}}}'.encode()


class SessionsOverHttp(HttpBase):
    """The sessions port as calls to the server's routes."""

    async def create_store(self, tenant: str, name: str, now: datetime,
                           owner: str | None = None, index_items: bool = True,
                           ) -> SessionStoreRecord:
        # The server creates the store and makes the key's principal its owner, in one
        # call of its own backend (a server's client is a principal, not an operator).
        made: dict[str, object] = {"name": name}
        if not index_items:
            made["index_items"] = False
        body = await self._http.call("POST", SESSION_STORES, json=made)
        return _wire.load(SessionStoreRecord, body, tenant=tenant)

    async def get_store(self, tenant: str, name: str) -> SessionStoreRecord:
        body = await self._http.call("GET", f"{SESSION_STORES}/{name}")
        return _wire.load(SessionStoreRecord, body, tenant=tenant)

    async def list_stores(
        self, tenant: str, limit: int, after: str | None
    ) -> list[SessionStoreRecord]:
        body = await self._http.call("GET", SESSION_STORES, params={"limit": limit, "after": after})
        return [_wire.load(SessionStoreRecord, r, tenant=tenant) for r in body["session_stores"]]

    async def delete_store(self, tenant: str, name: str, force: bool) -> int:
        body = await self._http.call("DELETE", f"{SESSION_STORES}/{name}", params={"force": force})
        return int(body["sessions_deleted"])

    async def create_session(
        self,
        tenant: str,
        store: str,
        session_id: str,
        actor_id: str,
        metadata: Mapping[str, str],
        now: datetime,
    ) -> SessionRecord:
        payload: dict[str, Any] = {"actor_id": actor_id, "metadata": dict(metadata)}
        chosen = _chosen(session_id)
        if chosen is not None:
            payload["session_id"] = chosen
        body = await self._http.call("POST", _sessions(store), json=payload)
        return _wire.load(SessionRecord, body, tenant=tenant)

    async def get_session(self, tenant: str, store: str, session_id: str) -> SessionRecord:
        body = await self._http.call("GET", session_path(store, session_id))
        return _wire.load(SessionRecord, body, tenant=tenant)

    async def list_sessions(
        self,
        tenant: str,
        store: str,
        *,
        actor_id: str | None,
        metadata: Mapping[str, str],
        order: SessionOrder,
        descending: bool,
        limit: int,
        after: Sequence[Any] | None,
    ) -> tuple[list[SessionRecord], list[Any] | None]:
        clauses = [f"actor_id = {json.dumps(actor_id)}"] if actor_id is not None else []
        clauses.extend(f"metadata.{k} = {json.dumps(v)}" for k, v in metadata.items())
        body = await self._http.call("GET", _sessions(store), params={
            "order_by": f"{order} {'desc' if descending else 'asc'}",
            "limit": limit,
            "filter": " AND ".join(clauses) or None,
            "after": json.dumps(list(after)) if after is not None else None,
        })
        records = [_wire.load(SessionRecord, r, tenant=tenant) for r in body["sessions"]]
        cursor = json.loads(body["next_after"]) if body.get("next_after") else None
        return records, cursor

    async def update_metadata(
        self, tenant: str, store: str, session_id: str, changes: Mapping[str, str | None],
        max_labels: int,
    ) -> SessionRecord:
        body = await self._http.call("PATCH", session_path(store, session_id),
                                     params={"max_labels": max_labels},
                                     json={"metadata": dict(changes)})
        return _wire.load(SessionRecord, body, tenant=tenant)

    async def delete_session(self, tenant: str, store: str, session_id: str, force: bool) -> int:
        body = await self._http.call("DELETE", session_path(store, session_id),
                                     params={"force": force})
        return int(body["sessions_deleted"])

    async def fork_session(
        self,
        tenant: str,
        store: str,
        session_id: str,
        new_session_id: str,
        up_to_item_id: str | None,
        now: datetime,
    ) -> SessionRecord:
        session_path(store, session_id)  # raises SessionNotFound for an impossible id
        if up_to_item_id is not None and not addressable(up_to_item_id):
            await self.get_session(tenant, store, session_id)
            raise _no_item(session_id, up_to_item_id)
        payload: dict[str, Any] = {"source_session_id": session_id}
        chosen = _chosen(new_session_id)
        if chosen is not None:
            payload["session_id"] = chosen
        if up_to_item_id is not None:
            payload["up_to_item_id"] = up_to_item_id
        body = await self._http.call("POST", f"{_sessions(store)}:fork", json=payload)
        return _wire.load(SessionRecord, body["session"], tenant=tenant)

    async def append_items(
        self,
        tenant: str,
        store: str,
        session_id: str,
        items: Sequence[NewItem],
        idempotency: tuple[str, str] | None,
        now: datetime,
    ) -> list[Item]:
        # The server derives the columns, makes the ids and hashes the request itself.
        content = _append_body(items, idempotency[0] if idempotency is not None else None)
        body = await self._http.call("POST", f"{session_path(store, session_id)}/items:append",
                                     content=content, headers=_JSON_HEADERS)
        return _items(body)

    async def list_items(
        self,
        tenant: str,
        store: str,
        session_id: str,
        *,
        descending: bool,
        limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        if descending or self._replay is None:
            return await self._fetch_items(store, session_id, descending, limit, after_seq)
        return await self._replay_items(tenant, store, session_id, limit, after_seq or 0)

    async def _fetch_items(self, store: str, session_id: str, descending: bool, limit: int,
                           after_seq: int | None) -> list[Item]:
        body = await self._http.call(
            "GET", f"{session_path(store, session_id)}/items",
            params={"order_by": "create_time desc" if descending else "create_time asc",
                    "limit": limit, "after_seq": after_seq})
        return _items(body)

    async def _replay_items(self, tenant: str, store: str, session_id: str, limit: int,
                            after: int) -> list[Item]:
        """Items in replay order after seq ``after``, taking from the replay cache what it
        holds and asking the server only for the rest, starting at the last item served
        from the cache, whose id proves the cached ones are still the session's (see
        :mod:`ownstate.backends._replay`): a replay moves only what is new."""
        assert self._replay is not None
        key = (tenant, store, session_id)
        # The lock: a sync client running inline calls this from several threads at once.
        held = None
        with self._replay_lock:
            entry = self._replay.get(key)
            if entry is not None and 0 <= after < entry.last_seq:
                columns, data = entry.slice(after, after + limit)
                anchor = after + len(data)
                held = entry.item_id(anchor)
        if entry is not None and held is not None:
            # At least one item comes from the cache (after < last_seq), so the anchored
            # request asks for at most ``limit`` items, as any other listing does.
            rows = await self._fetch_items(store, session_id, False,
                                           limit - len(data) + 1, anchor - 1)
            if rows and rows[0].seq == anchor and rows[0].item_id == held:
                added = rows[1:]
                # The cache keeps copies, so handing out these objects is safe.
                with self._replay_lock:
                    self._replay.extend(key, entry, [_meta(i) for i in added],
                                        [i.data for i in added])
                return build_items(session_id, data, *columns) + added
            with self._replay_lock:
                self._replay.drop(key)
        found = await self._fetch_items(store, session_id, False, limit, after)
        if after == 0 and found:
            replay = Replay(0, [_meta(i) for i in found], [i.data for i in found])
            with self._replay_lock:
                self._replay.put(key, replay)
        return found

    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        if not addressable(item_id):
            await self.get_session(tenant, store, session_id)
            raise _no_item(session_id, item_id)
        body = await self._http.call(
            "GET", f"{session_path(store, session_id)}/items/{segment(item_id)}")
        return _item(body)

    async def pop_item(self, tenant: str, store: str, session_id: str,
                       now: datetime) -> Item | None:
        body = await self._http.call("POST", f"{session_path(store, session_id)}/items:pop")
        popped = body.get("session_item")
        return _item(popped) if popped is not None else None

    async def clear_items(self, tenant: str, store: str, session_id: str, now: datetime) -> int:
        body = await self._http.call("POST", f"{session_path(store, session_id)}/items:clear")
        return int(body["items_cleared"])

    async def search_items(
        self, tenant: str, query: TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int,
    ) -> list[ItemHit]:
        return await self.ranked_items(tenant, query, stores=stores, actor_id=actor_id,
                                       session_id=session_id, limit=limit, mode="lexical")

    async def ranked_items(
        self, tenant: str, query: TextQuery, *, stores: Sequence[str] | None,
        actor_id: str | None, session_id: str | None, limit: int, mode: str | None,
    ) -> list[ItemHit]:
        body = await self._http.call("POST", f"{API}/items:search", json={
            "query": query.text, "stores": list(stores) if stores is not None else None,
            "actor_id": actor_id, "session_id": session_id, "limit": limit, "mode": mode})
        return [ItemHit(h["store"], h["actor_id"], _item(h["item"]), float(h["score"]))
                for h in body["hits"]]
