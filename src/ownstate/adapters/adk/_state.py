"""How the ADK adapter names things in ownstate: ADK's app, user and session names
checked and turned into session ids, fact subjects and fact keys; the session-scoped state a
history folds to; the item formats and labels it stores. It may touch no storage (it reads
only a client's limits): only the public API's types, the error tree, the limits, the model,
neutral messages (``ownstate.formats.neutral``) and ADK's events and sessions."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions import State

from ... import limits as _limits
from ...api import AsyncClient
from ...errors import (
    InvalidInput,
    LimitExceeded,
)
from ...limits import CONTROL_RE
from ...model import Fact, Item

#: The item format of an ADK event: its JSON as ``Event.model_dump(mode="json",
#: exclude_none=True)`` writes it.
EVENT_FORMAT = "adk.event"
#: The item format of the session-scoped state a session was created with:
#: ``{"state": {...}}``.
STATE_FORMAT = "adk.state"

_LABEL_APP = "adk.app_name"
_LABEL_SESSION = "adk.session_id"
#: Set on a session once any of its items may carry session-scoped state; a session
#: without it is read without folding its whole history.
_LABEL_STATE = "adk.session_state"

#: ADK's DatabaseSessionService keeps app names, user ids and session ids in 128-char
#: columns; the same bound keeps every derived subject, key and label within ownstate's.
_MAX_NAME_CHARS = 128
_MAX_FACT_KEY_CHARS = 256
_STALE_MESSAGE = ("The session has been modified in storage since it was loaded. "
                  "Please reload the session before appending more events.")
_NOT_SCOPED = (State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)
#: How many times an append retries after finding that items appended at the same
#: revision were popped since (each pop at one revision costs one retry).
_MAX_POPPED_RETRIES = 64
#: The most sessions whose histories are kept between reads (see _Cached).
_MAX_CACHED_SESSIONS = 1024
_ADK_FORMATS = (EVENT_FORMAT, STATE_FORMAT)


# names and keys ------------------------------------------------------------------------


def _name(value: object, field: str) -> str:
    """An app name, user id or session id: non-blank printable text, at most 128 chars."""
    if (not isinstance(value, str) or not value.strip() or len(value) > _MAX_NAME_CHARS
            or CONTROL_RE.search(value)):
        raise InvalidInput(f"{field} must be a non-blank string of at most {_MAX_NAME_CHARS} "
                           "printable characters", field=field)
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} must be valid UTF-8 text", field=field) from exc
    return value


def _given_session_id(value: object) -> str | None:
    """A session id as ADK's in-memory and SQLite services take it: without surrounding
    whitespace (``"order-42\n"`` is ``"order-42"``); ``None`` when that leaves nothing."""
    if isinstance(value, str):
        return value.strip() or None
    return None if value is None else _name(value, "session_id")  # refused: not text


def ownstate_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The ownstate ``session_id`` of the ADK session ``(app_name, user_id, session_id)``.

    ADK names a session by all three, so the same ADK id may belong to several users;
    ownstate's id is a digest of the three (``adk-`` and 32 hex digits). Raises
    :class:`~ownstate.errors.InvalidInput` for a name that ADK's database service could not
    store either (blank, longer than 128 characters, or with control characters).
    """
    parts = [_name(app_name, "app_name"), _name(user_id, "user_id"),
             _name(session_id, "session_id")]
    digest = hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()
    return f"adk-{digest[:32]}"


def _escape(app_name: str) -> str:
    """The app name as a fact-key prefix: ``:`` (the separator) and ``%`` escaped."""
    return app_name.replace("%", "%25").replace(":", "%3A")


def _app_subject(app_name: str) -> str:
    return f"app:{app_name}"


def _state_prefix(app_name: str, scope: str) -> str:
    return f"{_escape(app_name)}:{scope}:"


def _scoped_values(facts: Iterable[Fact], prefix: str) -> dict[str, Any]:
    return {f.key[len(prefix):]: f.value for f in facts if f.key.startswith(prefix)}


def _merge_state(app_state: Mapping[str, Any], user_state: Mapping[str, Any],
                 session_state: Mapping[str, Any]) -> dict[str, Any]:
    """The state a session shows: its own, then ``app:`` and ``user:`` keys, as ADK merges
    them (a copy, so that changing it changes nothing stored or cached)."""
    merged = copy.deepcopy(dict(session_state))
    for key, value in app_state.items():
        merged[State.APP_PREFIX + key] = copy.deepcopy(value)
    for key, value in user_state.items():
        merged[State.USER_PREFIX + key] = copy.deepcopy(value)
    return merged


def _session_delta(delta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in delta.items() if not k.startswith(_NOT_SCOPED)}


def _fold_into(state: dict[str, Any], item: Item) -> None:
    data = item.data
    if item.format == EVENT_FORMAT:
        actions = data.get("actions")
        delta = actions.get("state_delta") if isinstance(actions, dict) else None
        if isinstance(delta, dict):
            state.update(_session_delta(delta))
    elif item.format == STATE_FORMAT and isinstance(data.get("state"), dict):
        state.update(data["state"])


def _fold_state(items: Iterable[Item]) -> dict[str, Any]:
    """The session-scoped state a history amounts to, in order."""
    state: dict[str, Any] = {}
    for item in items:
        _fold_into(state, item)
    return state


def _all_adk(items: Iterable[Item]) -> bool:
    return all(i.format in _ADK_FORMATS for i in items)


def _foreign_events(items: Sequence[Item]) -> list[Event]:
    """The events of a session part of which another framework wrote: every message
    item converted to ADK's shape (ADK's own events come back as stored)."""
    from ...formats.neutral import convert

    return [Event.model_validate(data) for data in convert(items, EVENT_FORMAT)]


def _timestamp(item: Item) -> float:
    value = item.data.get("timestamp")
    return float(value) if isinstance(value, (int, float)) else 0.0


def _carries_session_state(item: Item) -> bool:
    if item.format == STATE_FORMAT:
        return True
    if item.format != EVENT_FORMAT:
        return False
    actions = item.data.get("actions")
    delta = actions.get("state_delta") if isinstance(actions, dict) else None
    return isinstance(delta, dict) and bool(_session_delta(delta))



async def _run_all(inline: bool, *coros: Awaitable[Any]) -> list[Any]:
    """Await ``coros``: one after another on a backend that never waits (nothing to
    overlap, and tasks would only add cost), concurrently otherwise."""
    if inline:
        return [await c for c in coros]
    return list(await asyncio.gather(*coros))


def _check_fact(client: AsyncClient, key: str, value: Any, field: str) -> None:
    """Refuse, before anything is written, a state entry a fact could not hold."""
    if len(key) > _MAX_FACT_KEY_CHARS or CONTROL_RE.search(key):
        raise InvalidInput(f"{field} key {key!r} is too long or holds control characters "
                           f"(stored as a fact key of at most {_MAX_FACT_KEY_CHARS} "
                           "printable chars)", field=field)
    size = len(_limits.encode_json(value, field=field).encode())
    limit = client.limits.max_item_bytes
    if size > limit:
        raise LimitExceeded(f"{field} value of {key!r} is {size} bytes; the limit is {limit}",
                            field=field, limit=limit, actual=size)


def _state_facts(client: AsyncClient, app_name: str, user_id: str,
                 deltas: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The facts that record the ``app`` and ``user`` parts of ``deltas``, checked."""
    specs: list[dict[str, Any]] = []
    for scope, subject in (("app", _app_subject(app_name)), ("user", user_id)):
        prefix = _state_prefix(app_name, scope)
        for key, value in deltas[scope].items():
            fact_key = prefix + key
            _check_fact(client, fact_key, value, "state")
            specs.append({"subject": subject, "key": fact_key, "value": value})
    return specs


