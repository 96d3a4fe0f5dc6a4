"""The MCP tools: what each is called, the JSON schema of its arguments, what it tells an
agent, and what it does, through the public async API and nothing else.

A tool acts for a :class:`~ownstate.server.auth.Caller` (a principal of one tenant) with the
store permissions ``ownstate serve`` enforces (:mod:`ownstate.server.permissions`): READ to
read a store, WRITE to change it; a store the caller may not read is "not found". Arguments
are checked by the library itself, before anything is stored, so a refusal carries the
library's own typed error and message; this module checks only what MCP adds (argument
names, RFC 3339 text for times). It may touch the public API, the server's caller and
permissions (``ownstate.server.auth``, ``ownstate.server.permissions``), the search bounds
(``ownstate.backends.ports.search``), the error tree, the limits and the model; nothing of
the MCP SDK.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from typing_extensions import TypedDict

from ..api import AsyncClient, AsyncMemoryStore
from ..backends.ports.search import MAX_QUERY_CHARS, MAX_QUERY_TERMS
from ..errors import InvalidInput, ItemNotFound, NotFound, SessionNotFound
from ..limits import (
    MAX_LOOKUP_CHARS,
    MAX_NAME_CHARS,
    MAX_STORE_NAME_CHARS,
    NAME_PATTERN,
    SESSION_ID_RE,
    STORE_NAME_RE,
    Limits,
    anchored,
)
from ..model import (
    SOURCE_TYPES,
    Fact,
    FactExplanation,
    FactHit,
    Item,
    ItemHit,
    Run,
    SessionRecord,
)
from ..server.auth import Caller
from ..server.permissions import MEMORY_STORE, SESSION_STORE, require, visible_stores

__all__ = ["Tool", "ToolDefaults", "plain", "tools"]

JSONSchema = dict[str, Any]
Handler = Callable[[Caller, "Arguments"], Awaitable[dict[str, Any]]]
#: How long a forget reason may be (the library's own bound).
MAX_REASON_CHARS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class ToolDefaults:
    """The stores a tool acts on when its call names none (``--memory-store``,
    ``--session-store``); without one, the tool's ``store`` argument is required."""

    memory_store: str | None = None
    session_store: str | None = None


# What each tool answers, as records of :mod:`ownstate.model` in JSON (its output schema).


class FactOut(TypedDict):
    fact: Fact


class ClosedOut(TypedDict):
    fact: Fact | None


class FactsOut(TypedDict):
    facts: list[Fact]


class FactHitsOut(TypedDict):
    hits: list[FactHit]


class ItemHitsOut(TypedDict):
    hits: list[ItemHit]


class SessionOut(TypedDict):
    session: SessionRecord
    items: list[Item]
    next_after_seq: int | None


class RunsOut(TypedDict):
    runs: list[Run]


class StoresOut(TypedDict):
    memory_stores: list[str]
    session_stores: list[str]


@dataclasses.dataclass(frozen=True, slots=True)
class Tool:
    """One MCP tool: its name, title, description, argument schema, the type of its
    answer and its handler."""

    name: str
    title: str
    description: str
    input_schema: JSONSchema
    output: type[Any]
    handler: Handler
    #: Changes nothing stored (MCP's readOnlyHint).
    read_only: bool = True
    #: May close or remove what is stored (MCP's destructiveHint).
    destructive: bool = False


class Arguments:
    """A call's arguments, held to its schema's names; the values are the library's to
    check."""

    def __init__(self, tool: str, schema: JSONSchema, given: Mapping[str, Any] | None) -> None:
        values = dict(given or {})
        known = schema["properties"]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise InvalidInput(f"{tool} takes no argument {unknown[0]!r}; it takes "
                               f"{', '.join(sorted(known)) or 'none'}", field=unknown[0])
        for name in schema.get("required", ()):
            if name not in values:  # null is a value (of a fact, say) the library judges
                raise InvalidInput(f"{name} is required", field=name)
        for name, spec in known.items():
            if values.get(name) is None and "default" in spec:
                values[name] = spec["default"]
        self._values = values

    def get(self, name: str) -> Any:
        """The argument's value, its default, or None."""
        return self._values.get(name)

    def moment(self, name: str) -> datetime | None:
        """An RFC 3339 time argument (with a UTC offset) as an aware datetime."""
        value = self._values.get(name)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00")
                                                if value.endswith(("Z", "z")) else value)
            except ValueError:
                parsed = None
            if parsed is not None and parsed.tzinfo is not None:
                return parsed
        raise InvalidInput(f"{name} must be RFC 3339 text with a UTC offset, such as "
                           "2026-01-31T09:30:00Z", field=name)


def plain(value: Any) -> Any:
    """A record (a frozen dataclass of :mod:`ownstate.model`) as JSON: times as RFC 3339."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


# schemas ----------------------------------------------------------------------------------


def _text(description: str, *, longest: int = MAX_NAME_CHARS,
          pattern: str | None = NAME_PATTERN) -> JSONSchema:
    schema: JSONSchema = {"type": "string", "minLength": 1, "maxLength": longest,
                          "description": description}
    if pattern is not None:
        schema["pattern"] = pattern
    return schema


def _store(kind: str, default: str | None) -> JSONSchema:
    what = "memory store (of facts)" if kind == MEMORY_STORE else "session store"
    schema = _text(f"The {what} to act on; stores_list names those you may read.",
                   longest=MAX_STORE_NAME_CHARS, pattern=anchored(STORE_NAME_RE))
    schema["minLength"] = 3
    if default is not None:
        schema["default"] = default
        schema["description"] += f" Default: {default!r}."
    return schema


def _object(properties: dict[str, JSONSchema], required: list[str]) -> JSONSchema:
    schema: JSONSchema = {"type": "object", "properties": properties,
                          "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _with_store(kind: str, defaults: ToolDefaults, properties: dict[str, JSONSchema],
                required: list[str]) -> JSONSchema:
    default = defaults.memory_store if kind == MEMORY_STORE else defaults.session_store
    needed = required if default is not None else ["store", *required]
    return _object({"store": _store(kind, default), **properties}, needed)


def _limit(limits: Limits, default: int) -> JSONSchema:
    return {"type": "integer", "minimum": 1, "maximum": limits.max_page_size,
            "default": min(default, limits.max_page_size),
            "description": "At most this many results."}


def _query() -> JSONSchema:
    return _text(f"A question or words to find (at most {MAX_QUERY_TERMS} distinct terms).",
                 longest=MAX_QUERY_CHARS, pattern=None)


_SUBJECT = _text("Who or what the fact is about, as a typed id: user:8814, account:ACME, "
                 "project:apollo.")
_KEY = _text("The attribute of the subject, in snake_case: preferred_channel, timezone.")
_TIME = {"type": "string", "format": "date-time"}


# memory -------------------------------------------------------------------------------------


async def _memory(caller: Caller, store: str, level: str) -> AsyncMemoryStore:
    if not caller.admin:
        await require(caller, MEMORY_STORE, store, level)
    return await caller.client.memory_stores.get(store)


async def _readable(caller: Caller, store: str | None) -> bool:
    if store is None:
        return False
    if caller.admin:
        return True
    level = await caller.client.api_keys.permission_of(caller.principal, SESSION_STORE, store)
    return level is not None


async def _remember(caller: Caller, args: Arguments) -> dict[str, Any]:
    memory = await _memory(caller, args.get("store"), "WRITE")
    source = args.get("source")
    ref: tuple[str, str, str] | None = None
    if source is not None:
        if not isinstance(source, dict) or set(source) != {"store", "session_id", "item_id"}:
            raise InvalidInput("source must be an object with store, session_id and item_id",
                               field="source")
        ref = (source["store"], source["session_id"], source["item_id"])
        if not await _readable(caller, ref[0]):
            # The same error, with the same ids, as for an item that does not exist.
            raise ItemNotFound(session_id=ref[1], item_id=ref[2])
    fact = await memory.remember(
        args.get("subject"), args.get("key"), args.get("value"),
        confidence=args.get("confidence"), source=ref,
        source_type=args.get("source_type"), valid_from=args.moment("valid_from"))
    return {"fact": plain(fact)}


async def _recall(caller: Caller, args: Arguments) -> dict[str, Any]:
    memory = await _memory(caller, args.get("store"), "READ")
    facts = await memory.recall(args.get("subject"), args.get("keys"),
                                as_of=args.moment("as_of"), known_at=args.moment("known_at"))
    return {"facts": plain(facts)}


async def _search(caller: Caller, args: Arguments) -> dict[str, Any]:
    memory = await _memory(caller, args.get("store"), "READ")
    hits = await memory.search(args.get("query"), subject=args.get("subject"),
                               limit=args.get("limit"), as_of=args.moment("as_of"))
    return {"hits": plain(hits)}


async def _history(caller: Caller, args: Arguments) -> dict[str, Any]:
    memory = await _memory(caller, args.get("store"), "READ")
    return {"facts": plain(await memory.history(args.get("subject"), args.get("key")))}


async def _explain(caller: Caller, args: Arguments) -> dict[str, Any]:
    memory = await _memory(caller, args.get("store"), "READ")
    explained: dict[str, Any] = plain(await memory.explain(args.get("fact_id")))
    # The source item is shown only to a caller who may read its session store.
    if not await _readable(caller, explained["fact"]["source_store"]):
        explained["source_item"] = None
    return explained


async def _forget(caller: Caller, args: Arguments) -> dict[str, Any]:
    memory = await _memory(caller, args.get("store"), "WRITE")
    closed = await memory.forget(args.get("subject"), args.get("key"), args.get("reason"))
    return {"fact": plain(closed)}


def _memory_tools(limits: Limits, defaults: ToolDefaults) -> list[Tool]:
    def schema(properties: dict[str, JSONSchema], required: list[str]) -> JSONSchema:
        return _with_store(MEMORY_STORE, defaults, properties, required)

    source = _object({
        "store": _text("The session store of the item.", longest=MAX_STORE_NAME_CHARS,
                       pattern=anchored(STORE_NAME_RE)),
        "session_id": _text("The item's session.", pattern=anchored(SESSION_ID_RE)),
        "item_id": _text("The item's id (item_id of sessions_read).",
                         longest=MAX_LOOKUP_CHARS, pattern=None),
    }, ["store", "session_id", "item_id"])
    source["description"] = ("The conversation item the fact was learned from, so that "
                             "memory_explain can show it later.")
    return [
        Tool("memory_remember", "Remember a fact",
             "Record a durable fact about a subject: key of subject is value. It becomes the "
             "current fact for (subject, key); the one it replaces is closed, not lost "
             "(memory_history shows it). Remember what stays true across conversations "
             "(preferences, identifiers, decisions), not the conversation itself.",
             schema({
                 "subject": _SUBJECT, "key": _KEY,
                 "value": {"description": "The value: any JSON (text, number, object, "
                                          f"list), at most {limits.max_item_bytes} bytes."},
                 "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                                "description": "How sure you are, from 0 to 1."},
                 "source": source,
                 "source_type": {"type": "string", "enum": list(SOURCE_TYPES),
                                 "default": "agent",
                                 "description": "Who asserted it: agent (you), user, "
                                                "pipeline or import."},
                 "valid_from": {**_TIME, "description": (
                     "When it became true in the world, RFC 3339 (default: now); an earlier "
                     "time corrects the current value from then on.")},
             }, ["subject", "key", "value"]), FactOut, _remember, read_only=False),
        Tool("memory_recall", "Recall what is known about a subject",
             "The current facts about a subject, one per key, ordered by key. Give keys to "
             "read only those, as_of for what was true at another time, known_at for what "
             "was believed then.",
             schema({
                 "subject": _SUBJECT,
                 "keys": {"type": "array", "items": _KEY, "maxItems": limits.max_page_size,
                          "description": "Only these keys (default: every key)."},
                 "as_of": {**_TIME, "description": "Valid time, RFC 3339 (default: now)."},
                 "known_at": {**_TIME, "description": "Record time, RFC 3339 (default: "
                                                      "now)."},
             }, ["subject"]), FactsOut, _recall),
        Tool("memory_search", "Search facts",
             "Find the facts that best match a question or some words, best first, each "
             "with its relevance score, for when you do not know the subject or key: ask "
             "'When did Caroline go to the support group?' or 'preferred channel'. Case and "
             "accents do not matter; a fact's source_* fields name the conversation item "
             "it came from (read it with sessions_read).",
             schema({
                 "query": _query(),
                 "subject": {**_SUBJECT, "description": "Only facts about this subject."},
                 "as_of": {**_TIME, "description": "Search what was true then, RFC 3339 "
                                                   "(default: now)."},
                 "limit": _limit(limits, 10),
             }, ["query"]), FactHitsOut, _search),
        Tool("memory_history", "History of one fact",
             "Every value ever recorded for (subject, key), oldest first, current and closed "
             "ones alike, with when each was true and believed and why it was closed.",
             schema({"subject": _SUBJECT, "key": _KEY}, ["subject", "key"]), FactsOut,
             _history),
        Tool("memory_explain", "Explain a fact",
             "Why a fact is what it is: the fact, the fact it superseded, the one that "
             "superseded it, and the conversation item it was learned from (null when it "
             "has none or you may not read that session store).",
             schema({"fact_id": _text("The fact's fact_id.", longest=MAX_LOOKUP_CHARS,
                                      pattern=None)}, ["fact_id"]), FactExplanation,
             _explain),
        Tool("memory_forget", "Forget a fact",
             "Stop believing the current fact for (subject, key): it is closed, no longer "
             "recalled, and kept in memory_history with the reason. Returns the closed "
             "fact, or null when there was none.",
             schema({"subject": _SUBJECT, "key": _KEY,
                     "reason": _text("Why, for the history.", longest=MAX_REASON_CHARS,
                                     pattern=None)},
                    ["subject", "key"]), ClosedOut, _forget, read_only=False, destructive=True),
    ]


# sessions, runs, stores -----------------------------------------------------------------------


async def _read_session(caller: Caller, args: Arguments) -> dict[str, Any]:
    store = args.get("store")
    if not caller.admin:
        try:
            await require(caller, SESSION_STORE, store, "READ")
        except NotFound as exc:
            session_id = args.get("session_id")
            raise SessionNotFound(store=store, session_id=session_id) from exc
    session = await (await caller.client.session_stores.session(
        store, args.get("session_id"))).refresh()
    limit, most = args.get("limit"), caller.client.limits.max_page_size
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= most:
        raise InvalidInput(f"limit must be an integer from 1 to {most}", field="limit")
    items: list[Item] = await session.list_items_after(
        order_by="create_time asc", after_seq=args.get("after_seq"), limit=limit + 1)
    more = len(items) > limit
    shown = items[:limit]
    return {
        "session": plain(session.record),
        "items": plain(shown),
        "next_after_seq": shown[-1].seq if more else None,
    }


async def _search_sessions(caller: Caller, args: Arguments) -> dict[str, Any]:
    store = args.get("store")
    stores: list[str] | None = None
    if store is not None:
        await require(caller, SESSION_STORE, store, "READ")
    elif not caller.admin:
        stores = sorted(await visible_stores(caller, SESSION_STORE) or ())
    hits = await caller.client.session_stores.search_items(
        args.get("query"), store=store, stores=stores, actor_id=args.get("actor_id"),
        session_id=args.get("session_id"), limit=args.get("limit"))
    return {"hits": plain(hits)}


async def _outstanding(caller: Caller, args: Arguments) -> dict[str, Any]:
    visible = await visible_stores(caller, SESSION_STORE)
    runs = await caller.client.runs.outstanding(
        args.get("status"), framework=args.get("framework"),
        older_than=args.get("older_than"), stores=visible, limit=args.get("limit"))
    return {"runs": plain(runs)}


async def _names(client: AsyncClient, kind: str, limits: Limits) -> list[str]:
    stores = client.memory_stores if kind == MEMORY_STORE else client.session_stores
    names: list[str] = []
    after = None
    while True:
        page = await stores.list_after(after=after, limit=limits.max_page_size)
        names.extend(s.name for s in page)
        if len(page) < limits.max_page_size:
            return names
        after = names[-1]


async def _stores(caller: Caller, args: Arguments) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kind, field in ((MEMORY_STORE, "memory_stores"), (SESSION_STORE, "session_stores")):
        visible = await visible_stores(caller, kind)
        found[field] = (sorted(visible) if visible is not None else
                        await _names(caller.client, kind, caller.client.limits))
    return found


def _session_tools(limits: Limits, defaults: ToolDefaults) -> list[Tool]:
    return [
        Tool("sessions_search", "Search conversations",
             "Find the conversation items (messages, tool calls and their results) that "
             "best match a question or some words, best first, across the session stores "
             "you may read, each with its score, store, session_id and seq: read around a "
             "hit with sessions_read (after_seq = seq - 1).",
             _object({
                 "query": _query(),
                 "store": {**_store(SESSION_STORE, None), "description": (
                     "Only this session store (default: every one you may read).")},
                 "actor_id": _text("Only sessions of this actor (user:8814, ...).",
                                   longest=limits.max_actor_id_chars, pattern=None),
                 "session_id": _text("Only this session.", longest=MAX_LOOKUP_CHARS,
                                     pattern=None),
                 "limit": _limit(limits, 10),
             }, ["query"]), ItemHitsOut, _search_sessions),
        Tool("sessions_read", "Read a conversation",
             "The items of one session (conversation) in order: messages, tool calls and "
             "their results, each with its item_id and seq. Long sessions come a page at a "
             "time: call again with after_seq = next_after_seq until it is null.",
             _with_store(SESSION_STORE, defaults, {
                 "session_id": _text("The session to read.", longest=MAX_LOOKUP_CHARS,
                                     pattern=None),
                 "after_seq": {"type": "integer", "minimum": 0,
                               "description": "Start after the item with this seq "
                                              "(default: from the first item)."},
                 "limit": _limit(limits, 50),
             }, ["session_id"]), SessionOut, _read_session),
        Tool("runs_outstanding", "Outstanding runs",
             "Agent runs that wait on a human (status awaiting_human, the default) or are "
             "in flight (running), the longest waiting first, with what each awaits.",
             _object({
                 "status": {"type": "string", "enum": ["awaiting_human", "running"],
                            "default": "awaiting_human", "description": "Which runs."},
                 "framework": _text("Only runs of this framework (langgraph, "
                                    "openai.agents, ...).", longest=64,
                                    pattern="^[a-z0-9_.-]{1,64}$"),
                 "older_than": {"type": "number", "minimum": 0, "maximum": 1e9,
                                "description": "Only runs in the status for longer than "
                                               "this many seconds."},
                 "limit": _limit(limits, 100),
             }, []), RunsOut, _outstanding),
        Tool("stores_list", "List stores",
             "The memory stores and session stores you may read, by name: the values the "
             "store argument of the other tools takes.", _object({}, []), StoresOut, _stores),
    ]


def tools(limits: Limits, defaults: ToolDefaults | None = None) -> list[Tool]:
    """Every tool, with bounds from ``limits`` and default stores from ``defaults``."""
    chosen = defaults or ToolDefaults()
    return [*_memory_tools(limits, chosen), *_session_tools(limits, chosen)]
