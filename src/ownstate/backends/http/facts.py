"""Memory stores and facts, over HTTP.

The server makes what the client API would otherwise make itself: fact ids and record
times. A :class:`NewFact` travels without its id (the server's public API gives each fact
a new one, and the facts that come back carry it), and ``now`` is not sent: a system of
record stamps writes with its own clock, not with its clients'. Explicit times
(``valid_from``, ``valid_at``, ``known_at``) travel as given.

It may touch the server through the transport of ``_base``, the fact and search ports, the
wire format (``ownstate._wire``), the model and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ... import _wire
from ...errors import FactNotFound, InvalidInput
from ...model import Fact, FactExplanation, FactHit, MemoryStoreRecord
from ..ports.facts import NewFact
from ..ports.search import TextQuery
from ._base import API, HttpBase, addressable, json_object, not_found, segment

__all__ = ["FactsOverHttp"]

STORES = f"{API}/memory-stores"
_FORGOTTEN = "forgotten"


def _new_fact_json(new: NewFact) -> str:
    """One fact of a remember request, its value spliced in as it was encoded."""
    source: dict[str, Any] | None = None
    if new.source is not None:
        store, session_id, item_id = new.source
        source = {"session_id": session_id, "item_id": item_id}
        if store is not None:
            source["store"] = store
    fields = {
        "subject": new.subject,
        "key": new.key,
        "confidence": new.confidence,
        "source_type": new.source_type,
        "source": source,
        "valid_from": new.valid_from.isoformat() if new.valid_from is not None else None,
    }
    return json_object(fields, {"value": new.value_json})


def _facts(body: Any) -> list[Fact]:
    return [_wire.load(Fact, f) for f in body["facts"]]


def _reason(closed_reason: str) -> str | None:
    """The user's reason inside the closed reason the client API makes of it; the server's
    API makes the same closed reason again."""
    if closed_reason == _FORGOTTEN:
        return None
    prefix = f"{_FORGOTTEN}: "
    if closed_reason.startswith(prefix) and len(closed_reason) > len(prefix):
        return closed_reason[len(prefix):]
    raise InvalidInput("over HTTP a closed reason is 'forgotten' or 'forgotten: <reason>'",
                       field="reason")


class FactsOverHttp(HttpBase):
    """The facts port as calls to the server's routes."""

    async def create_memory_store(self, tenant: str, name: str, now: datetime,
                                  owner: str | None = None) -> MemoryStoreRecord:
        # As create_store: the server makes the key's principal the owner, in one call.
        body = await self._http.call("POST", STORES, json={"name": name})
        return _wire.load(MemoryStoreRecord, body, tenant=tenant)

    async def get_memory_store(self, tenant: str, name: str) -> MemoryStoreRecord:
        body = await self._http.call("GET", f"{STORES}/{name}")
        return _wire.load(MemoryStoreRecord, body, tenant=tenant)

    async def list_memory_stores(self, tenant: str, limit: int,
                                 after: str | None) -> list[MemoryStoreRecord]:
        body = await self._http.call("GET", STORES, params={"limit": limit, "after": after})
        return [_wire.load(MemoryStoreRecord, r, tenant=tenant) for r in body["memory_stores"]]

    async def list_subjects(self, tenant: str, store: str, limit: int,
                            after: str | None) -> list[str]:
        body = await self._http.call("GET", f"{STORES}/{store}/subjects",
                                     params={"limit": limit, "after": after})
        return [str(s) for s in body["subjects"]]

    async def delete_memory_store(self, tenant: str, name: str) -> int:
        body = await self._http.call("DELETE", f"{STORES}/{name}")
        return int(body["facts_deleted"])

    async def remember(self, tenant: str, store: str, facts: Sequence[NewFact],
                       now: datetime) -> list[Fact]:
        content = '{"facts":[' + ",".join(_new_fact_json(f) for f in facts) + "]}"
        body = await self._http.call("POST", f"{STORES}/{store}/facts:batch",
                                     content=content.encode(),
                                     headers={"content-type": "application/json"})
        return _facts(body)

    async def recall(self, tenant: str, store: str, subject: str, keys: Sequence[str] | None,
                     valid_at: datetime | None, known_at: datetime | None) -> list[Fact]:
        body = await self._http.call("POST", f"{STORES}/{store}/facts:recall", json={
            "subject": subject, "keys": list(keys) if keys is not None else None,
            "as_of": valid_at.isoformat() if valid_at is not None else None,
            "known_at": known_at.isoformat() if known_at is not None else None})
        return _facts(body)

    async def history(self, tenant: str, store: str, subject: str, key: str) -> list[Fact]:
        body = await self._http.call("GET", f"{STORES}/{store}/facts:history",
                                     params={"subject": subject, "key": key})
        return _facts(body)

    async def _fact_path(self, tenant: str, store: str, fact_id: str) -> str:
        """Where a fact lives. An id no path can carry names no fact; it gets the answer
        the server would give, the store's absence first."""
        if not addressable(fact_id):
            await self.get_memory_store(tenant, store)
            raise not_found(FactNotFound(store=store, fact_id=fact_id))
        return f"{STORES}/{store}/facts/{segment(fact_id)}"

    async def get_fact(self, tenant: str, store: str, fact_id: str) -> Fact:
        path = await self._fact_path(tenant, store, fact_id)
        return _wire.load(Fact, await self._http.call("GET", path))

    async def explain(self, tenant: str, store: str, fact_id: str) -> FactExplanation:
        path = await self._fact_path(tenant, store, fact_id)
        return _wire.load(FactExplanation, await self._http.call("GET", f"{path}/explanation"))

    async def forget(self, tenant: str, store: str, subject: str, key: str, reason: str,
                     now: datetime) -> Fact | None:
        body = await self._http.call("POST", f"{STORES}/{store}/facts:forget", json={
            "subject": subject, "key": key, "reason": _reason(reason)})
        closed = body["fact"]
        return _wire.load(Fact, closed) if closed is not None else None

    async def search(self, tenant: str, store: str, query: TextQuery, subject: str | None,
                     valid_at: datetime | None, limit: int) -> list[FactHit]:
        return await self.ranked_facts(tenant, store, query, subject, valid_at, limit,
                                       "lexical")

    async def ranked_facts(self, tenant: str, store: str, query: TextQuery,
                           subject: str | None, valid_at: datetime | None, limit: int,
                           mode: str | None) -> list[FactHit]:
        body = await self._http.call("POST", f"{STORES}/{store}/facts:search", json={
            "query": query.text, "subject": subject, "limit": limit, "mode": mode,
            "as_of": valid_at.isoformat() if valid_at is not None else None})
        return [FactHit(_wire.load(Fact, h["fact"]), float(h["score"])) for h in body["hits"]]

    async def subject_facts(self, tenant: str, subject: str) -> list[Fact]:
        body = await self._http.call("GET", f"{API}/subjects:facts",
                                     params={"subject": subject})
        return _facts(body)

    async def erase_subject(self, tenant: str, subject: str,
                            include_sessions: bool) -> dict[str, int]:
        body = await self._http.call("POST", f"{API}/subjects:erase", json={
            "subject": subject, "include_sessions": include_sessions})
        return {"facts": int(body["facts"]), "sessions": int(body["sessions"])}
