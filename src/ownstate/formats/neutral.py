"""The neutral message: one shape every framework's history converts to and from.

A session may hold items written by several frameworks, each in its own shape (its
``format``): OpenAI Responses items, LangChain messages, ADK events, Claude transcript
entries. To hand a history to another framework, items are converted to neutral
messages, then from neutral messages to the target shape. A neutral message is a JSON
object::

    {"type": "message",
     "role": "user" | "assistant" | "system" | "developer" | "tool",
     "content": "text" | [part, ...],
     "message_id": "...",          # the source's own id for the message, if any
     "name": "...",                # a participant name, if any
     "tool_calls": [{"id": "call_1", "name": "refund", "arguments": {...} | "raw text"}],
     "tool_call_id": "call_1",     # role "tool" only: the call this result answers
     "is_error": true,             # role "tool" only, when the tool failed
     "model": "gpt-4.1",
     "usage": {"input_tokens": 812, "output_tokens": 19},
     "original": {"format": "openai.responses", ...}}

Content parts::

    {"type": "text", "text": "..."}
    {"type": "image", "url": "https://..." | "data:...", "media_type": "image/png"}
    {"type": "image", "asset": {"$asset": "ast_...", "media_type": ..., "size": ...}}
    {"type": "file", "url" | "asset": ..., "media_type": "application/pdf", "name": "..."}
    {"type": "reasoning", "text": "..."}       # a model's reasoning (summary), assistant only

Rules every converter follows:

- **Tool calls ride on assistant messages**; each result is its own ``role: "tool"``
  message naming the call. Parallel calls are one assistant message with several calls.
- **Nothing is lost.** Where a source carries more than the neutral fields, ``original``
  keeps the source's own data (``{"format": ..., ...}``), so converting back to the same
  format gives exactly what was stored. Converting to another format uses the neutral
  fields only.
- **Orphans never crash the next run.** A tool result whose call is not in the history,
  and a call that never got a result, are handled the way the target framework expects
  (dropped, or given a placeholder result); each converter documents which.

``to_neutral`` and ``from_neutral`` below work on whole histories (lists), because a
message in one shape can be several items in another (an OpenAI Responses assistant turn
is a message item plus one item per tool call).

It may touch only the error tree and the model, never storage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

from ..errors import InvalidInput
from ..model import Item

__all__ = ["FORMAT", "FORMATS", "check_format", "convert", "from_neutral", "to_neutral"]

#: The format tag of neutral message items.
FORMAT = "ownstate.message"

# format -> module defining to_neutral(list[dict]) and from_neutral(list[dict]); imported
# only when a history in that format is converted.
_MODULES = {
    "openai.responses": "ownstate.formats.openai_responses",
    "langchain": "ownstate.formats.langchain",
    "adk.event": "ownstate.formats.adk",
    "claude.transcript": "ownstate.formats.claude",
}
#: The formats a history can be converted to and from.
FORMATS = frozenset({FORMAT, *_MODULES})

Converter = Callable[[Sequence[dict[str, Any]]], list[dict[str, Any]]]


def _converter(fmt: str, direction: str) -> Converter:
    module = import_module(_MODULES[fmt])
    function: Converter = getattr(module, direction)
    return function


def _is_message(data: Any) -> bool:
    return isinstance(data, dict) and "role" in data and "content" in data


def check_format(value: object) -> str:
    """``value`` when it names a format a history can be converted to, else
    :class:`~ownstate.errors.InvalidInput` (``field="as_format"``)."""
    if not isinstance(value, str) or value not in FORMATS:
        raise InvalidInput(f"cannot convert a history to {value!r}; known formats: "
                           f"{', '.join(sorted(FORMATS))}", field="as_format")
    return value


def to_neutral(items: Sequence[Item]) -> list[dict[str, Any]]:
    """Neutral messages for a session's items, in order.

    Consecutive items of one format are converted together (so a turn split over several
    items becomes one message). Items whose format has no converter are taken as neutral
    when they have ``role`` and ``content``, and left out otherwise (a framework's own
    bookkeeping, such as ADK's ``adk.state`` records).
    """
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    run_format: str | None = None

    def flush() -> None:
        if run and run_format is not None:
            out.extend(_converter(run_format, "to_neutral")(run))
        run.clear()

    for item in items:
        fmt = item.format
        if fmt in _MODULES:
            if fmt != run_format:
                flush()
                run_format = fmt
            run.append(item.data)
            continue
        flush()
        run_format = None
        if fmt == FORMAT or _is_message(item.data):
            out.append(item.data)
    flush()
    return out


def from_neutral(messages: Sequence[dict[str, Any]], to: str) -> list[dict[str, Any]]:
    """``messages`` in the shape of format ``to``. Raises
    :class:`~ownstate.errors.InvalidInput` for a format ownstate cannot produce."""
    if check_format(to) == FORMAT:
        return [dict(m) for m in messages]
    return _converter(to, "from_neutral")(messages)


def convert(items: Sequence[Item], to: str) -> list[dict[str, Any]]:
    """A session's items as a history in format ``to``.

    Items already in that format come back exactly as stored; the others go through the
    neutral message. Raises :class:`~ownstate.errors.InvalidInput` for an unknown format.
    """
    if check_format(to) != FORMAT and items and all(item.format == to for item in items):
        return [item.data for item in items]
    return from_neutral(to_neutral(items), to)
