"""``OwnstateMemoryService``: ADK's ``BaseMemoryService`` over an ownstate memory store,
one fact per remembered event, searched by words as ADK's ``InMemoryMemoryService`` does.
Writes only its memory store; reads the session store for the events' items. It may touch
the public API through the adapters' bridge and kernel, the adapter's naming
(:mod:`._state`), the error tree, the limits and the model, and ADK's memory service and
``google.genai`` types; never a backend."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import Session
from google.genai import types

from ... import limits as _limits
from ...api import AsyncClient, Client
from ...api.memory import AsyncMemoryStore
from ...errors import (
    InvalidInput,
    SessionNotFound,
    StoreNotFound,
)
from ...model import Fact, Item
from .._bridge import Bridge, BridgedAdapter
from .._kernel import ensure_store
from ._state import (
    EVENT_FORMAT,
    _check_fact,
    _escape,
    _name,
    ownstate_session_id,
)

_WORD_RE = re.compile(r"\w+")


def _is_latin(char: str) -> bool:
    if char.isascii():
        return char.isalnum() or char == "_"
    return unicodedata.name(char, "").startswith("LATIN")


def _query_words(text: str) -> set[str]:
    """The words of a query as ADK's InMemoryMemoryService reads them: ``\\w+`` runs of the
    NFC-normalized text (so a decomposed accent is the composed one), lowercased."""
    return {w.lower() for w in _WORD_RE.findall(unicodedata.normalize("NFC", text))}


def _event_words(text: str) -> set[str]:
    """The words an event can be found by, as InMemoryMemoryService finds them: the query
    words of its text, plus each single-script run of a word mixing Latin and other
    scripts (``私はPythonで`` gives ``python``)."""
    words = _query_words(text)
    for word in list(words):
        if not word.isascii():
            words.update("".join(run) for _, run in itertools.groupby(word, _is_latin))
    return words


def _memory_score(query: set[str], text: str) -> int:
    """How many query words the event text holds: whole words, and for a word that is
    not ASCII (scripts written without spaces) anywhere in the text."""
    words = _event_words(text)
    if not words:
        return 0
    lowered = unicodedata.normalize("NFC", text).lower()
    return sum(1 for w in query if w in words or (not w.isascii() and w in lowered))


def _memory_prefix(app_name: str, session_id: str | None) -> str:
    """The fact-key prefix of an app's memories from one session (``""``: no session)."""
    return f"{_escape(app_name)}:{_escape(session_id or '')}:"


def _text(content: Mapping[str, Any] | None) -> str:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    if not isinstance(parts, list):
        return ""
    return " ".join(p["text"] for p in parts
                    if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"])



class OwnstateMemoryService(BridgedAdapter, BaseMemoryService):
    """ADK's ``BaseMemoryService`` over an ownstate memory store.

    Each event with text becomes one fact: subject the ADK ``user_id``, key
    ``<app>:<session id>:<event id>`` (the session id empty for events given without
    one), value ``{"author", "content", "timestamp"}``, valid from the event's time, and,
    when the session is stored by :class:`OwnstateSessionService` in ``session_store``,
    the event's item as its source. As in ADK, memories are kept per session: an event id
    remembered from two sessions is two memories. Adding a session again adds only its
    new events. :meth:`search_memory` finds the events that share the most words with the
    query, matched and ranked as ADK's ``InMemoryMemoryService`` does, at most
    ``max_results``.

    Raises :class:`~ownstate.errors.InvalidInput` for bad names or values ownstate cannot
    store (nothing is stored then), :class:`~ownstate.errors.BackendUnavailable`.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        memory_store: str = "adk-memory",
        session_store: str | None = "adk",
        max_results: int = 10,
    ) -> None:
        self._setup(Bridge(client), memory_store, session_store, max_results)

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        memory_store: str = "adk-memory",
        session_store: str | None = "adk",
        max_results: int = 10,
    ) -> OwnstateMemoryService:
        """A service over a client it opens on ``url`` and closes with :meth:`close`.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.SchemaVersion`,
        :class:`~ownstate.errors.BackendUnavailable`.
        """
        service = cls.__new__(cls)
        bridge = Bridge.from_url(url)
        try:
            service._setup(bridge, memory_store, session_store, max_results)
        except BaseException:
            bridge.close()
            raise
        return service

    def _setup(self, bridge: Bridge, memory_store: str, session_store: str | None,
               max_results: int) -> None:
        if (isinstance(max_results, bool) or not isinstance(max_results, int)
                or not 1 <= max_results <= bridge.client.limits.max_page_size):
            raise InvalidInput("max_results must be an integer from 1 to "
                               f"{bridge.client.limits.max_page_size}", field="max_results")
        self._bridge = bridge
        self._memory_name = _limits.store_name(memory_store)
        self._session_name = (_limits.store_name(session_store) if session_store is not None
                              else None)
        self._max_results = max_results
        self._store: AsyncMemoryStore | None = None

    async def _ready(self) -> AsyncMemoryStore:
        if self._store is None:
            self._store = await ensure_store(self._bridge.client.memory_stores,
                                             self._memory_name)
        return self._store

    async def add_session_to_memory(self, session: Session) -> None:
        """Remember the session's events that hold text; events already remembered are
        skipped. Raises :class:`~ownstate.errors.InvalidInput`."""
        await self.add_events_to_memory(app_name=session.app_name, user_id=session.user_id,
                                        events=session.events, session_id=session.id)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Remember ``events`` (those holding text), skipping any already remembered.
        ``custom_metadata`` is not used. Raises :class:`~ownstate.errors.InvalidInput`."""
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        source_session = (ownstate_session_id(app_name, user_id, session_id)
                          if session_id is not None and self._session_name else None)
        client = self._bridge.client
        # Memories are kept per session, as ADK keeps them: the same event id remembered
        # from two sessions is two memories.
        prefix = _memory_prefix(app_name, session_id)
        specs: dict[str, dict[str, Any]] = {}
        now = datetime.now(UTC)
        for event in events:
            if not isinstance(event, Event):
                raise InvalidInput("events must be ADK Event objects", field="events")
            content = (event.content.model_dump(mode="json", exclude_none=True)
                       if event.content is not None else None)
            if not _text(content) or not event.id:
                continue
            key = prefix + event.id
            value = {"author": event.author, "content": content, "timestamp": event.timestamp}
            _check_fact(client, key, value, "events")
            # Valid from when it was said; never in the future, where recall would not
            # see it yet.
            valid_from = min(datetime.fromtimestamp(event.timestamp, UTC), now)
            specs.setdefault(key, {"subject": user_id, "key": key, "value": value,
                                   "valid_from": valid_from, "event_id": event.id})
        if specs:
            await self._bridge.acall(self._add(user_id, list(specs.values()), source_session))

    async def _add(self, user_id: str, specs: list[dict[str, Any]],
                   source_session: str | None) -> None:
        store = await self._ready()
        limits = self._bridge.client.limits
        known: set[str] = set()
        for start in range(0, len(specs), limits.max_page_size):
            keys = [s["key"] for s in specs[start:start + limits.max_page_size]]
            known.update(f.key for f in await store.recall(user_id, keys))
        new = [s for s in specs if s["key"] not in known]
        if not new:
            return
        sources: dict[str, Item] = {}
        if source_session is not None and self._session_name is not None:
            sources = await self._event_items(source_session)
        facts = []
        for spec in new:
            fact = {k: v for k, v in spec.items() if k != "event_id"}
            item = sources.get(spec["event_id"])
            if item is not None:
                fact["source"] = item
            facts.append(fact)
        for start in range(0, len(facts), limits.max_batch_items):
            await store.remember_many(facts[start:start + limits.max_batch_items])

    async def _event_items(self, key: str) -> dict[str, Item]:
        """The items of a session stored by OwnstateSessionService, by event id."""
        assert self._session_name is not None
        client = self._bridge.client
        try:
            session = await (await client.session_stores.get(self._session_name)).get(key)
            return {i.data["id"]: i async for i in session.list_items(
                order_by="create_time asc")
                if i.format == EVENT_FORMAT and isinstance(i.data.get("id"), str)}
        except (StoreNotFound, SessionNotFound):
            return {}

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """The remembered events of this app and user sharing the most words with
        ``query``, best first, at most ``max_results``: the matching and ranking of ADK's
        ``InMemoryMemoryService``. Among equals the oldest memory comes first: in the
        order they were remembered, and by event time within one call.

        Words are ``\\w+`` runs of the NFC-normalized text, compared lowercased; an event
        is also found by each single-script run of a word mixing Latin and other scripts,
        and a query word that is not ASCII (Japanese, Chinese: scripts written without
        spaces) anywhere in its text. Every memory of the user is read and scored. Raises
        :class:`~ownstate.errors.InvalidInput`.
        """
        app_name = _name(app_name, "app_name")
        user_id = _name(user_id, "user_id")
        if not isinstance(query, str):
            raise InvalidInput("query must be a string", field="query")
        words = _query_words(query)
        if not words:
            return SearchMemoryResponse()
        found = await self._bridge.acall(self._memories(user_id))
        prefix = _escape(app_name) + ":"
        scored: list[tuple[int, float, datetime, MemoryEntry]] = []  # score, time, recorded
        for fact in found:
            value = fact.value
            if not fact.key.startswith(prefix) or not isinstance(value, dict):
                continue
            matched = _memory_score(words, _text(value.get("content")))
            if not matched:
                continue
            timestamp = value.get("timestamp")
            when = float(timestamp) if isinstance(timestamp, (int, float)) else 0.0
            try:
                content = types.Content.model_validate(value["content"])
            except (KeyError, ValueError):  # not written by this service
                continue
            author = value.get("author")
            scored.append((matched, when, fact.recorded_at, MemoryEntry(
                id=fact.key[len(prefix):].partition(":")[2], content=content,
                author=author if isinstance(author, str) else None,
                timestamp=datetime.fromtimestamp(when).isoformat())))
        # Equal scores in the order remembered, as InMemoryMemoryService keeps its
        # insertion order: by record time, and by event time within one call.
        scored.sort(key=lambda s: (-s[0], s[2], s[1]))
        return SearchMemoryResponse(memories=[m for *_, m in scored[:self._max_results]])

    async def _memories(self, user_id: str) -> list[Fact]:
        """Every current memory of the user."""
        return await (await self._ready()).recall(user_id)
