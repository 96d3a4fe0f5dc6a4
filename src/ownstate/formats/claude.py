"""Claude Agent SDK transcript entries (format ``claude.transcript``) to and from neutral
messages.

A ``claude.transcript`` item holds one transcript entry as the Claude Agent SDK mirrors
it to a ``SessionStore`` (:class:`~ownstate.adapters.claude_agent_sdk.OwnstateSessionStore`
stores them as given): the JSON lines Claude Code writes to its session files. Message
entries look like::

    {"type": "user" | "assistant", "uuid": "...", "parentUuid": "..." | null,
     "sessionId": "...", "timestamp": "2025-01-01T00:00:00.000Z", "isSidechain": false,
     "message": {"role": ..., "content": "text" | [block, ...],
                 # assistant only: "id": "msg_...", "model", "stop_reason", "usage"}, ...}

with content blocks ``text``, ``image``, ``document``, ``thinking`` (``thinking``,
``signature``), ``tool_use`` (``id``, ``name``, ``input``) and, in user entries,
``tool_result`` (``tool_use_id``, ``content``, ``is_error``). Other entry types
(``system``, ``summary``, ``progress``, ``attachment``, ``custom-title``, ``tag``,
``file-history-snapshot``, ...) are Claude Code's bookkeeping. Both functions work on
that JSON alone; neither imports the SDK.

Claude to neutral (:func:`to_neutral`)
--------------------------------------

- Claude Code writes one assistant entry per content block, each repeating the API
  message's ``message.id``; the entries of one ``message.id`` become one assistant
  message, also when tool results were written between them (parallel tools start
  before the response has finished streaming). ``message_id`` is ``message.id`` (the
  entry's ``uuid`` when there is none), ``model`` is ``message.model``, ``usage`` the
  last entry's ``input_tokens`` / ``output_tokens``.
- ``text`` blocks become text parts, ``thinking`` blocks ``reasoning`` parts (the
  signature stays in ``original``), ``tool_use`` blocks ``tool_calls`` (``input`` as
  ``arguments``); several calls in one response are parallel calls. ``image`` and
  ``document`` blocks become ``image`` / ``file`` parts (base64 sources as ``data:``
  URLs, URL sources as the URL, a document's ``title`` as ``name``).
  ``redacted_thinking``, server tool blocks and other blocks have no neutral form.
- A user entry's ``tool_result`` blocks become one ``role: "tool"`` message each
  (``tool_call_id``, ``name`` of the call when the call is in the history, ``content``
  as text or parts, ``is_error``); its other blocks then become one user message. A
  string content or a single text block becomes a plain string.
- Entries that are not user or assistant messages are not messages, nor are the
  messages of a sidechain kept inline (entries whose ``isSidechain`` differs from the
  transcript's first message: a subagent's turns, which its own transcript holds).
  A compaction's summary (``isCompactSummary``) is a user message like any other; the
  messages before it stay in the history.

Nothing is lost: the first message made from a run of entries carries
``original = {"format": "claude.transcript", "items": [entry, ...]}``, the entries
exactly as given (the split assistant entries of one response, the tool results written
among them, and the bookkeeping entries that follow, up to the next message); further
messages from those entries carry ``original = {"format": "claude.transcript",
"item": <entry uuid>}``. Bookkeeping before the first message rides with the first
message; a transcript without any message converts to no messages (its entries are
dropped).

Neutral to Claude (:func:`from_neutral`)
----------------------------------------

A message carrying a ``claude.transcript`` original gives back exactly the entries it
holds (the messages pointing into them give nothing more). Any other message is written
from its neutral fields as new entries, each with a fresh ``uuid``, ``parentUuid``
linking it to the entry before it (so that the SDK's and the CLI's ``parentUuid`` walk
reaches the whole history), ``isSidechain: false``, ``userType: "external"``, an ISO
``timestamp`` (increasing through the history: spaced between carried-over entries,
ending at the time of the conversion after the last of them) and ``sessionId`` when
``session_id`` is given. Where new entries precede carried-over ones, the first
carried-over entry is relinked to the last new entry; carried-over entries are
otherwise unchanged.

- ``user`` -> a ``user`` entry; string content stays a string, parts become blocks.
- ``assistant`` -> one ``assistant`` entry holding the whole response (Claude Code
  reads whole-message entries as well as split ones): ``message.id`` from
  ``message_id`` (or a new ``msg_...`` id), ``model`` (``"<synthetic>"``, Claude Code's
  marker for a message no model call produced, when the message names none; Claude Code
  and the SDK's parser expect one), ``usage``, text blocks, then one
  ``tool_use`` block per call (``arguments`` given as text become the parsed JSON object,
  or ``{"input": text}``). Call ids outside ``[A-Za-z0-9_-]`` (the API's pattern) have
  those characters replaced, consistently in the results. ``reasoning`` parts are left
  out: the API accepts a thinking block only with the signature it issued for it.
- ``tool`` -> the results for one assistant turn become one ``user`` entry of
  ``tool_result`` blocks, in the order of the calls, with ``sourceToolAssistantUUID``
  naming the assistant entry when it is new.
- ``system`` and ``developer`` messages are left out: the SDK takes its system prompt
  from its options, never from the transcript.
- Images: a ``data:`` URL becomes a base64 ``image`` block, an ``http(s)`` URL a ``url``
  one. Files: PDF becomes a ``document`` block (base64 or URL), ``text/*`` a ``text``
  document. Other media, media in assistant messages, and parts that refer to an
  ownstate asset (``{"$asset": ...}``, which a pure conversion cannot inline) become a
  short text note.
- Empty messages (and text without visible characters) are left out; the API refuses
  empty content.

Orphans, per the Messages API: every ``tool_result`` must answer a ``tool_use`` of the
assistant message just before it, and every ``tool_use`` must be answered in the user
message right after. For the entries it writes, this converter keeps a tool result only
while its call is open (the calls of the latest assistant message, until a user or
assistant message follows) and drops it otherwise; a call still unanswered when its
turn ends (or at the end of the history) gets a ``tool_result`` with ``is_error: true``
and the content ``"no result was recorded"``. Entries carried over verbatim are left as
Claude Code wrote them (it repairs its own interrupted turns when it resumes).

It may touch only the error tree and :mod:`._common`, never storage or the Claude Agent SDK.
"""

from __future__ import annotations

import base64
import copy
import re
import time
import urllib.parse
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidInput
from . import _common

__all__ = ["FORMAT", "NO_RESULT", "SYNTHETIC_MODEL", "from_neutral", "to_neutral"]

#: The item format this module converts.
FORMAT = "claude.transcript"
#: The content of the error result given to a call without a recorded result.
NO_RESULT = "no result was recorded"
#: The ``message.model`` of a new assistant entry whose message names no model: Claude
#: Code's own marker for an assistant message no model call of the session produced.
SYNTHETIC_MODEL = "<synthetic>"

# Entry types that take part in Claude Code's uuid / parentUuid chain.
_CHAIN_TYPES = frozenset({"user", "assistant", "progress", "system", "attachment"})
_TOOL_ID_BAD = re.compile(r"[^A-Za-z0-9_-]")
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# Spacing of the timestamps of new entries (seconds).


# Claude -> neutral ---------------------------------------------------------------------


def _media_part(block: dict[str, Any]) -> dict[str, Any] | None:
    """The neutral part for an ``image`` or ``document`` block, if it has one."""
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    kind = "image" if block.get("type") == "image" else "file"
    media = source.get("media_type")
    media_type = media if isinstance(media, str) and media else None
    source_type = source.get("type")
    if source_type == "base64" and isinstance(source.get("data"), str):
        url = f"data:{media_type or 'application/octet-stream'};base64,{source['data']}"
    elif source_type == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    elif source_type == "text" and isinstance(source.get("data"), str):
        media_type = media_type or "text/plain"
        url = (f"data:{media_type};base64,"
               f"{base64.b64encode(source['data'].encode()).decode()}")
    else:
        return None
    return _common.media_part(kind, url, media_type, block.get("title"))


def _neutral_part(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
        return {"type": "text", "text": block["text"]}
    if kind == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
        return {"type": "reasoning", "text": block["thinking"]}
    if kind in ("image", "document"):
        return _media_part(block)
    return None


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _tool_message(block: dict[str, Any], entry_id: Any,
                  names: dict[str, str]) -> dict[str, Any]:
    raw = block.get("content")
    content: str | list[dict[str, Any]]
    if isinstance(raw, str):
        content = raw
    else:
        content = _common.content([p for p in (_neutral_part(b) for b in _blocks(raw))
                            if p is not None])
    message: dict[str, Any] = {"type": "message", "role": "tool", "content": content}
    if isinstance(entry_id, str):
        message["message_id"] = entry_id
    call_id = block.get("tool_use_id")
    if isinstance(call_id, str):
        if call_id in names:
            message["name"] = names[call_id]
        message["tool_call_id"] = call_id
    if block.get("is_error") is True:
        message["is_error"] = True
    return message


def _usage(message: dict[str, Any]) -> dict[str, Any] | None:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    return {"input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens")}


@dataclass
class _Group:
    """Entries that convert together, and the messages they make."""

    items: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    response_id: str | None = None  # the message.id of its assistant response, if any


def _add_assistant_blocks(message: dict[str, Any], blocks: list[dict[str, Any]],
                          names: dict[str, str]) -> None:
    content = message["content"]
    parts: list[dict[str, Any]] = (
        [] if content == "" else [{"type": "text", "text": content}]
        if isinstance(content, str) else content)
    for block in blocks:
        if block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            call: dict[str, Any] = {"id": block.get("id"), "name": block["name"],
                                    "arguments": block.get("input", {})}
            if isinstance(call["id"], str):
                names[call["id"]] = block["name"]
            else:
                del call["id"]
            message.setdefault("tool_calls", []).append(call)
        elif (part := _neutral_part(block)) is not None:
            parts.append(part)
    message["content"] = _common.content(parts)


def to_neutral(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Neutral messages for Claude transcript entries (``claude.transcript`` item data),
    in order.

    Raises :class:`~ownstate.errors.InvalidInput` when an item is not a JSON object.
    """
    groups: list[_Group] = []
    leading: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool_use id -> tool name, to name the results
    side: bool | None = None  # isSidechain of the transcript's messages

    def start(entry: dict[str, Any], messages: list[dict[str, Any]],
              response_id: str | None = None) -> None:
        nonlocal leading
        groups.append(_Group([*leading, entry], messages, response_id))
        leading = []

    for index, entry in enumerate(items):
        if not isinstance(entry, dict):
            raise InvalidInput(f"item {index} is not a transcript entry (a JSON object)",
                               field="items")
        kind = entry.get("type")
        body = entry.get("message")
        current = groups[-1] if groups else None
        entry_id = entry.get("uuid")
        if kind in ("user", "assistant") and isinstance(body, dict):
            # The first message entry says which line this transcript follows; messages
            # of the other (a subagent's sidechain kept inline) are not its messages.
            if side is None:
                side = bool(entry.get("isSidechain"))
            elif bool(entry.get("isSidechain")) != side:
                kind = None
        if kind == "assistant" and isinstance(body, dict):
            response_id = body.get("id") if isinstance(body.get("id"), str) and body[
                "id"] else None
            blocks = _blocks(body.get("content"))
            if current is not None and response_id is not None \
                    and current.response_id == response_id:
                # Another block of the same response: merge it into its message.
                assistant = current.messages[0]
                _add_assistant_blocks(assistant, blocks, names)
                if (usage := _usage(body)) is not None:
                    assistant["usage"] = usage
                current.items.append(entry)
                continue
            message: dict[str, Any] = {"type": "message", "role": "assistant",
                                       "content": ""}
            message_id = response_id or entry_id
            if isinstance(message_id, str):
                message["message_id"] = message_id
            _add_assistant_blocks(message, blocks, names)
            if isinstance(body.get("model"), str) and body["model"]:
                message["model"] = body["model"]
            if (usage := _usage(body)) is not None:
                message["usage"] = usage
            start(entry, [message], response_id)
            continue
        if kind == "user" and isinstance(body, dict):
            blocks = _blocks(body.get("content"))
            results = [_tool_message(b, entry_id, names) for b in blocks
                       if b.get("type") == "tool_result"]
            parts = [p for p in (_neutral_part(b) for b in blocks
                                 if b.get("type") != "tool_result") if p is not None]
            messages = list(results)
            if parts:
                user: dict[str, Any] = {"type": "message", "role": "user",
                                        "content": _common.content(parts)}
                if isinstance(entry_id, str):
                    user["message_id"] = entry_id
                messages.append(user)
            if messages and not parts and current is not None \
                    and current.response_id is not None:
                # Results of the open response, possibly written between its blocks.
                current.messages.extend(messages)
                current.items.append(entry)
                continue
            if messages:
                start(entry, messages)
                continue
        # Not a message: bookkeeping that travels with the message before it.
        if current is not None:
            current.items.append(entry)
        else:
            leading.append(entry)
    out: list[dict[str, Any]] = []
    for group in groups:
        first, *rest = group.messages
        first["original"] = {"format": FORMAT, "items": copy.deepcopy(group.items)}
        for message in rest:
            # A later message of a group is a tool result or user message, whose
            # message_id is the uuid of the entry it came from.
            message["original"] = {"format": FORMAT, "item": message.get("message_id")}
        out.extend(group.messages)
    return out


# neutral -> Claude ---------------------------------------------------------------------


def _note(part: dict[str, Any], why: str) -> dict[str, Any]:
    """A text part standing in for media that cannot be carried."""
    return {"type": "text", "text": _common.note_text(part, why)}


def _claude_media(part: dict[str, Any]) -> dict[str, Any]:
    url = part.get("url")
    media = part.get("media_type")
    media_type = media.lower() if isinstance(media, str) and media else None
    if not isinstance(url, str) or not url:
        return _note(part, "not inlined")
    parsed = _common.parse_data_url(url)
    if url.startswith("data:") and parsed is None:
        return _note(part, "unreadable data URL")
    is_web = url.startswith(("https://", "http://"))
    if parsed is not None:
        media_type = media_type or (parsed[0] or "").lower() or None
    elif media_type is None and urllib.parse.urlsplit(url).path.lower().endswith(".pdf"):
        media_type = "application/pdf"
    block: dict[str, Any]
    if part.get("type") == "image" and (parsed is None or media_type in _IMAGE_TYPES):
        if parsed is not None:
            block = {"type": "image", "source": {
                "type": "base64", "media_type": media_type,
                "data": base64.b64encode(parsed[1]).decode()}}
            return block
        if is_web:
            return {"type": "image", "source": {"type": "url", "url": url}}
        return _note(part, "not inlined")
    if media_type == "application/pdf" and (parsed is not None or is_web):
        block = {"type": "document", "source": (
            {"type": "base64", "media_type": "application/pdf",
             "data": base64.b64encode(parsed[1]).decode()} if parsed is not None
            else {"type": "url", "url": url})}
    elif parsed is not None and media_type is not None and media_type.startswith("text/"):
        try:
            text = parsed[1].decode()
        except UnicodeDecodeError:
            return _note(part, "not included")
        block = {"type": "document",
                 "source": {"type": "text", "media_type": "text/plain", "data": text}}
    else:
        return _note(part, "not included")
    name = part.get("name")
    if isinstance(name, str) and name:
        block["title"] = name
    return block


def _claude_blocks(content: Any, *, media: bool = True) -> list[dict[str, Any]]:
    """Content blocks for neutral content; ``media=False`` notes media as text (for
    assistant messages, which cannot hold them)."""
    blocks: list[dict[str, Any]] = []
    for part in _common.neutral_parts(content):
        kind = part.get("type")
        # The API refuses text blocks without visible text.
        if kind == "text" and isinstance(part.get("text"), str) and part["text"].strip():
            blocks.append({"type": "text", "text": part["text"]})
        elif kind in ("image", "file"):
            blocks.append(_claude_media(part) if media else _note(part, "not included"))
    return blocks


def _tool_id(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return _TOOL_ID_BAD.sub("_", value)


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _seconds(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class _Turn(_common.Turn):
    source: str | None = None  # the uuid of the assistant entry, when written here


class _Writer(_common.TurnWriter):
    """Builds the entry list of :func:`from_neutral` (see :func:`._common.write_neutral`)."""

    id_key = "uuid"

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id
        self.entries: list[dict[str, Any]] = []
        self.fresh: list[bool] = []
        self.parent: str | None = None  # uuid of the last chain entry written
        self.parent_fresh = False
        self.turn: _Turn | None = None
        self.used: set[str] = set()  # message.id values already given to new entries

    def emit(self, kind: str, message: dict[str, Any], **extra: Any) -> str:
        entry_id = str(uuid.uuid4())
        entry: dict[str, Any] = {"parentUuid": self.parent, "isSidechain": False,
                                 "userType": "external"}
        if self.session_id is not None:
            entry["sessionId"] = self.session_id
        entry.update({"type": kind, "message": message, "uuid": entry_id, **extra})
        self.entries.append(entry)
        self.fresh.append(True)
        self.parent, self.parent_fresh = entry_id, True
        return entry_id

    def carry(self, items: list[Any]) -> None:
        self.flush()
        for item in items:
            entry = copy.deepcopy(item)
            if isinstance(entry, dict) and entry.get("type") in _CHAIN_TYPES \
                    and isinstance(entry.get("uuid"), str):
                if self.parent_fresh and entry.get("parentUuid") != self.parent:
                    # Link the history written here to the entries that follow it.
                    entry["parentUuid"] = self.parent
                self.parent, self.parent_fresh = entry["uuid"], False
            self.entries.append(entry)
            self.fresh.append(False)

    def write_results(self, results: list[dict[str, Any]]) -> None:
        source = self.turn.source if self.turn is not None else None
        extra = {"sourceToolAssistantUUID": source} if source else {}
        self.emit("user", {"role": "user", "content": results}, **extra)

    def unanswered(self, call_id: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": call_id, "content": NO_RESULT,
                "is_error": True}

    def tool_id(self, value: Any) -> str | None:
        return _tool_id(value)

    def result(self, message: dict[str, Any], call_id: str) -> dict[str, Any]:
        return _result_block(message, call_id)

    def user(self, message: dict[str, Any]) -> None:
        content = message.get("content")
        user_content: str | list[dict[str, Any]] = (
            content if isinstance(content, str) else _claude_blocks(content))
        if user_content if isinstance(user_content, list) else user_content.strip():
            self.emit("user", {"role": "user", "content": user_content})

    def assistant(self, message: dict[str, Any]) -> None:
        _assistant_entry(self, message, self.used)

    def carried_turn(self, message: dict[str, Any]) -> None:
        calls = _calls_of(message)
        self.turn = _Turn(calls, fresh=False, open=set(calls))

    def finish(self) -> list[dict[str, Any]]:
        self.close()
        stamps = [None if fresh or not isinstance(entry, dict)
                  else _seconds(entry.get("timestamp"))
                  for entry, fresh in zip(self.entries, self.fresh, strict=True)]
        for entry, fresh, stamp in zip(self.entries, self.fresh,
                                       _common.spread(stamps, time.time()), strict=True):
            if fresh:
                entry["timestamp"] = _iso(stamp)
        return self.entries


def _assistant_entry(writer: _Writer, message: dict[str, Any], used: set[str]) -> None:
    blocks = _claude_blocks(message.get("content"), media=False)
    calls: list[str] = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        call_id = _tool_id(call.get("id")) or f"toolu_{uuid.uuid4().hex[:24]}"
        calls.append(call_id)
        blocks.append({"type": "tool_use", "id": call_id, "name": call["name"],
                       "input": _common.arguments(call.get("arguments"))})
    writer.turn = _Turn(calls, fresh=True, open=set(calls))
    if not blocks:
        return
    response_id = message.get("message_id")
    if not isinstance(response_id, str) or not response_id or response_id in used:
        response_id = f"msg_{uuid.uuid4().hex[:24]}"
    used.add(response_id)
    model = message.get("model")
    body: dict[str, Any] = {
        "id": response_id, "type": "message", "role": "assistant",
        "model": model if isinstance(model, str) and model else SYNTHETIC_MODEL}
    body.update({"content": blocks, "stop_reason": "tool_use" if calls else "end_turn",
                 "stop_sequence": None})
    usage = message.get("usage")
    if isinstance(usage, dict):
        counts = {k: usage.get(k) for k in ("input_tokens", "output_tokens")}
        counts = {k: v for k, v in counts.items()
                  if isinstance(v, int) and not isinstance(v, bool)}
        if counts:
            body["usage"] = counts
    writer.turn.source = writer.emit("assistant", body)


def _calls_of(message: dict[str, Any]) -> list[str]:
    ids = (_tool_id(c.get("id")) for c in message.get("tool_calls") or []
           if isinstance(c, dict))
    return [i for i in ids if i is not None]


def _result_block(message: dict[str, Any], call_id: str) -> dict[str, Any]:
    content = message.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id,
                             "content": content if isinstance(content, str)
                             else _claude_blocks(content)}
    if message.get("is_error"):
        block["is_error"] = True
    return block


def from_neutral(messages: Sequence[dict[str, Any]], *,
                 session_id: str | None = None) -> list[dict[str, Any]]:
    """Claude transcript entries for neutral ``messages``, in order (see the module
    docstring).

    ``session_id`` is written as the ``sessionId`` of every new entry (left out when
    ``None``). Raises :class:`~ownstate.errors.InvalidInput` when a message is not a JSON
    object or ``session_id`` is not a non-empty string.
    """
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise InvalidInput("session_id must be a non-empty string", field="session_id")
    return _common.write_neutral(messages, _Writer(session_id), FORMAT)
