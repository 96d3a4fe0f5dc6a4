"""LangChain messages to and from ownstate's neutral message items, without loss.

A neutral message item is a JSON object that any framework adapter can read::

    {"type": "message", "role": "user" | "assistant" | "system" | "tool" | ...,
     "content": "text" or [content blocks],
     "message_id": "...",                       # the framework's own message id, if any
     "name": "...",                             # if the message has one
     "tool_calls": [{"id": ..., "name": ..., "arguments": {...}}],   # assistant only
     "tool_call_id": "...",                     # tool results only
     "model": "...", "usage": {"input_tokens": n, "output_tokens": n},
     "original": {"format": "langchain", "type": "ai", "fields": {...}}}

``original`` keeps whatever the LangChain message carries beyond the neutral fields
(``additional_kwargs``, ``response_metadata``, ``artifact``, ...; it is left out when there
is nothing beyond them), so
:func:`item_to_message` rebuilds an equal message. :func:`message_to_item` checks that
before it answers: a message it cannot carry exactly is refused with
:class:`~ownstate.errors.InvalidInput`, never stored with a loss.

Needs ``langchain-core`` (installed with the ``langgraph`` extra).

It may touch the error tree, :mod:`.neutral`, ``ownstate._extras`` (to name the extra) and
LangChain's messages (``langchain_core``), never storage.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .._extras import requires
from ..errors import InvalidInput
from .neutral import FORMAT

with requires("langgraph", "the LangChain message format"):
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

__all__ = ["FORMAT", "from_neutral", "item_to_message", "message_to_item", "to_messages",
           "to_neutral"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
          "function": "function", "developer": "developer"}
_TYPES = {role: kind for kind, role in _ROLES.items()}
# Fields the neutral part carries; ``original`` keeps the rest.
_NEUTRAL = ("content", "id", "name", "tool_calls", "tool_call_id", "type")


def _role(message: BaseMessage) -> str:
    if message.type == "chat":  # ChatMessage names its own role
        # (asked only here: a field a message lacks is a slow miss in pydantic)
        role = getattr(message, "role", None)
        if isinstance(role, str) and role:
            return role
    return _ROLES.get(message.type, message.type)


def message_to_item(message: BaseMessage) -> dict[str, Any]:
    """The neutral item for ``message``.

    Raises :class:`~ownstate.errors.InvalidInput` when the message is not a LangChain
    message, holds values that are not JSON, or would not come back equal.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidInput(f"expected a LangChain message, got {type(message).__name__}",
                           field="message")
    fields = message.model_dump(exclude_defaults=True)
    item: dict[str, Any] = {"type": "message", "role": _role(message),
                            "content": message.content}
    if message.id is not None:
        item["message_id"] = message.id
    if message.name is not None:
        item["name"] = message.name
    calls = getattr(message, "tool_calls", None)
    if calls:
        item["tool_calls"] = [{"id": c.get("id"), "name": c["name"], "arguments": c["args"]}
                              for c in calls]
    call_id = getattr(message, "tool_call_id", None)
    if call_id is not None:
        item["tool_call_id"] = call_id
    usage = getattr(message, "usage_metadata", None)
    if usage:
        item["usage"] = {"input_tokens": usage.get("input_tokens"),
                         "output_tokens": usage.get("output_tokens")}
    model = message.response_metadata.get("model_name") or message.response_metadata.get(
        "model")
    if isinstance(model, str) and model:
        item["model"] = model
    rest = {k: v for k, v in fields.items() if k not in _NEUTRAL}
    if rest or _TYPES.get(item["role"]) != message.type:
        item["original"] = {"format": "langchain", "type": message.type, "fields": rest}
    try:
        json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"message holds a value that is not JSON: {exc}",
                           field="message") from exc
    if item_to_message(item) != message:
        raise InvalidInput("message does not survive conversion unchanged", field="message")
    return item


def item_to_message(data: dict[str, Any]) -> BaseMessage:
    """The LangChain message a neutral item stands for (made by :func:`message_to_item`,
    or written by hand with at least ``role`` and ``content``).

    Raises :class:`~ownstate.errors.InvalidInput` for an item that is not a message.
    """
    if not isinstance(data, dict) or "content" not in data:
        raise InvalidInput("a message item needs role and content", field="item")
    original = data.get("original")
    if isinstance(original, dict) and original.get("format") == "langchain":
        kind = original.get("type")
        fields = dict(original.get("fields") or {})
    else:
        role = data.get("role")
        kind = _TYPES.get(role) if isinstance(role, str) else None
        fields = {}
        if kind is None:
            kind, fields = "chat", {"role": role}
    fields["content"] = data["content"]
    if "message_id" in data:
        fields["id"] = data["message_id"]
    if "name" in data:
        fields["name"] = data["name"]
    if "tool_calls" in data:
        fields["tool_calls"] = [{"id": c.get("id"), "name": c["name"],
                                 "args": c.get("arguments") or {}, "type": "tool_call"}
                                for c in data["tool_calls"]]
    if "tool_call_id" in data:
        fields["tool_call_id"] = data["tool_call_id"]
    try:
        return messages_from_dict([{"type": kind, "data": fields}])[0]
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidInput(f"item is not a message LangChain can build: {exc}",
                           field="item") from exc


# -- whole histories (the ``langchain`` format: ``message_to_dict`` objects) ----------------

_NO_RESULT = "[no result was recorded]"


def to_neutral(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Neutral messages for LangChain message dicts (``{"type": "ai", "data": {...}}``, as
    ``langchain_core.messages.message_to_dict`` writes them). Raises
    :class:`~ownstate.errors.InvalidInput` for a dict LangChain cannot load."""
    out = []
    for data in items:
        try:
            (message,) = messages_from_dict([data])
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidInput(f"not a LangChain message dict: {exc}", field="item") from exc
        out.append(message_to_item(message))
    return out


def to_messages(messages: Sequence[dict[str, Any]], *, calls: Iterable[str] = ()
                ) -> list[BaseMessage]:
    """LangChain messages for a neutral history, ready for a chat model: a tool result
    whose call is not in the history (nor among ``calls``, the ids of calls made earlier,
    when this is the rest of a history) is dropped, and a call that never got a result is
    answered with a ``ToolMessage`` saying so (chat model APIs reject both otherwise)."""
    built = [item_to_message(m) for m in messages]
    calls_seen: set[str] = set(calls)
    out: list[BaseMessage] = []
    open_calls: list[str] = []
    for message in built:
        if message.type == "tool":
            call_id = getattr(message, "tool_call_id", None)
            if call_id not in calls_seen:
                continue  # orphaned result
            if call_id in open_calls:
                open_calls.remove(call_id)
            out.append(message)
            continue
        out.extend(_unanswered(open_calls))
        open_calls = []
        for call in getattr(message, "tool_calls", None) or []:
            if call.get("id"):
                calls_seen.add(call["id"])
                open_calls.append(call["id"])
        out.append(message)
    out.extend(_unanswered(open_calls))
    return out


def _unanswered(call_ids: list[str]) -> list[BaseMessage]:
    from langchain_core.messages import ToolMessage

    return [ToolMessage(_NO_RESULT, tool_call_id=call_id, status="error")
            for call_id in call_ids]


def from_neutral(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """LangChain message dicts for a neutral history (orphans handled as
    :func:`to_messages` does)."""
    return [message_to_dict(m) for m in to_messages(messages)]
