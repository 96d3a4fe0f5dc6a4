"""Google ADK events (format ``adk.event``) to and from neutral messages.

An ``adk.event`` item holds an ADK ``Event`` as JSON, the way
:class:`~ownstate.adapters.adk.OwnstateSessionService` stores it:
``Event.model_dump(mode="json", exclude_none=True)``, snake_case field names, bytes as
base64. Its ``content`` is a ``google.genai`` ``Content``: ``role`` ``"user"`` or
``"model"`` and a list of parts. Both functions work on that JSON alone; neither imports
ADK.

ADK to neutral (:func:`to_neutral`)
-----------------------------------

- An event whose content has parts is one message: ``"assistant"`` when the content role
  is ``"model"`` (or it holds function calls), ``"user"`` otherwise. ``message_id`` is
  the event id; an assistant message's ``name`` is the event's ``author`` (the agent),
  ``model`` its ``model_version``, ``usage`` its ``usage_metadata`` token counts.
- Parts: ``text`` becomes a text part, ``text`` with ``thought: true`` a ``reasoning``
  part, ``inline_data`` a ``data:`` URL and ``file_data`` its ``file_uri`` (``image``
  for ``image/*`` media types, ``file`` otherwise, ``display_name`` as ``name``).
  Content that is a single text part becomes a plain string.
- ``function_call`` parts become the message's ``tool_calls``; several in one event are
  parallel calls. ``id`` and ``name`` are kept, ``args`` become ``arguments``.
- Each ``function_response`` part becomes its own ``role: "tool"`` message (ADK puts
  them in a role-``"user"`` event authored by the agent; parallel results share one
  event): ``tool_call_id`` is the response id, ``name`` the function name, and
  ``content`` the response as text: the string itself for ADK's ``{"result": "..."}``
  wrapping of a plain return value, the JSON text of the dict otherwise. A response that
  is only ``{"error": ...}`` (ADK's convention for a failed or rejected tool) is marked
  ``is_error``. Media a tool returned (``function_response.parts``) follow as parts.
  In a role-``"user"`` event the tool messages come before the event's other parts, as
  the model must see results right after their calls.
- Parts with nothing neutral to say (code execution, a bare ``thought_signature``) are
  left out of the neutral fields.

Nothing is lost: the first message made from an event carries
``original = {"format": "adk.event", "items": [event, ...]}``, the event's JSON exactly
as given; further messages made from the same event carry
``original = {"format": "adk.event", "item": <event id>}``. Events that hold no message
(no content, as for a pure ``state_delta``, an error or an escalation; or only parts
without a neutral form) are not messages: they ride in the
``items`` of the message before them (or, at the very start, the first message), so an
ADK history converted to neutral and back gives the same events, state changes
included. A history with no message at all converts to no messages, and its events are
then dropped.

Neutral to ADK (:func:`from_neutral`)
-------------------------------------

A message carrying an ``adk.event`` original gives back exactly the events it holds
(and the messages that point into them give nothing more). Any other message is written
from its neutral fields as a new event that ``google.adk.events.Event.model_validate``
accepts and ADK's ``BaseSessionService.append_event`` stores:

- ``user`` -> ``author: "user"``, ``content.role: "user"``; each such message starts a
  new ``invocation_id``, which the events after it share, as in an ADK run.
- ``assistant`` -> ``author: agent_name`` (default :data:`DEFAULT_AUTHOR`),
  ``content.role: "model"``: text parts, then one ``function_call`` part per tool call
  (``arguments`` given as text become the parsed JSON object, or ``{"input": text}``).
  ``reasoning`` parts are left out: ADK sends an event's ``thought`` parts back to the
  model, and a model takes its reasoning back only with the signature it issued for it
  (Gemini's ``thought_signature``), which reasoning from elsewhere does not have.
  ``model`` and ``usage`` become ``model_version`` and ``usage_metadata``.
- ``tool`` -> consecutive results for one assistant turn become one event, as ADK merges
  parallel results: ``author: agent_name``, ``content.role: "user"``, one
  ``function_response`` part per result in the order of the calls, named after its call.
  The response is the content's JSON object when the content is one, ``{"result":
  text}`` otherwise, and ``{"error": text}`` when ``is_error``. Media in a tool result
  are not carried (noted in the text).
- ``system`` and ``developer`` messages are left out: an ADK agent takes its
  instructions from its own configuration, not from the session's events.
- Images and files: a ``data:`` URL becomes ``inline_data``, any other URL ``file_data``
  (with the media type given, else guessed from the URL). A part that refers to an
  ownstate asset (``{"$asset": ...}``) cannot be inlined by a pure conversion: it becomes
  a short text note naming the asset (resolve assets to ``data:`` URLs first to send
  the bytes).
- Empty messages (no parts, no calls) are left out; Gemini refuses empty contents.
- Each new event gets a fresh ``id`` and a ``timestamp``; timestamps increase through
  the history: new events between carried-over events are spaced between their times,
  new events after the last carried-over one end at the time of the conversion.

Orphans. Gemini wants each function-call turn answered by a turn with one response per
call, and ADK's request builder (``google.adk.flows.llm_flows.contents``) drops
function responses whose call it cannot find and, in recent versions, calls without a
response, so a history is never refused for an orphan, but a dropped call vanishes
from what the model sees. For the events it writes, this converter makes the pairing
explicit: a tool result is kept only while its call is open (the calls of the latest
assistant message, until a user or assistant message follows), otherwise it is dropped;
a call still unanswered when its turn ends (or at the end of the history) gets a
response ``{"error": "no result was recorded"}``, so the model sees that the call was
made and produced nothing. Calls and results carried over verbatim from ADK originals
are left as ADK wrote them (ADK reads its own events back).

It may touch only the error tree and :mod:`._common`, never storage.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import mimetypes
import time
import urllib.parse
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput
from . import _common

__all__ = ["DEFAULT_AUTHOR", "FORMAT", "NO_RESULT", "from_neutral", "to_neutral"]

#: The item format this module converts.
FORMAT = "adk.event"
#: The ``author`` of assistant and tool events written from neutral messages, unless
#: ``agent_name`` names another. ADK shows the model the events of its own agent as its
#: own turns, and another author's as quoted context.
DEFAULT_AUTHOR = "assistant"
#: The error a call without a recorded result is answered with.
NO_RESULT = "no result was recorded"

# Spacing of the timestamps of new events (seconds).


# ADK -> neutral ------------------------------------------------------------------------


def _media_part(blob: dict[str, Any], uri_key: str) -> dict[str, Any] | None:
    """The neutral image or file part for an ``inline_data`` or ``file_data`` dict."""
    media_type = blob.get("mime_type")
    media = media_type if isinstance(media_type, str) and media_type else None
    if uri_key == "data":
        raw = blob.get("data")
        if not isinstance(raw, str):
            return None
        try:
            encoded = base64.b64encode(_common.b64_to_bytes(raw)).decode()
        except (binascii.Error, ValueError):
            return None
        url = f"data:{media or 'application/octet-stream'};base64,{encoded}"
    else:
        uri = blob.get("file_uri")
        if not isinstance(uri, str) or not uri:
            return None
        url = uri
    kind = "image" if (media or "").startswith("image/") else "file"
    return _common.media_part(kind, url, media, blob.get("display_name"))


def _neutral_part(part: dict[str, Any]) -> dict[str, Any] | None:
    text = part.get("text")
    if isinstance(text, str):
        if not text:
            return None
        return {"type": "reasoning" if part.get("thought") else "text", "text": text}
    if isinstance(part.get("inline_data"), dict):
        return _media_part(part["inline_data"], "data")
    if isinstance(part.get("file_data"), dict):
        return _media_part(part["file_data"], "file_uri")
    return None


def _response_text(response: Any) -> tuple[str, bool]:
    """A function response as text, and whether it reports an error."""
    if isinstance(response, dict):
        if set(response) == {"error"}:
            error = response["error"]
            return (error if isinstance(error, str)
                    else json.dumps(error, ensure_ascii=False)), True
        if set(response) == {"result"} and isinstance(response["result"], str):
            return response["result"], False
    if response is None:
        return "", False
    return json.dumps(response, ensure_ascii=False), False


def _tool_message(response: dict[str, Any], event_id: Any) -> dict[str, Any]:
    text, is_error = _response_text(response.get("response"))
    media = [p for p in (_neutral_part(x) for x in response.get("parts") or []
                         if isinstance(x, dict)) if p is not None]
    message: dict[str, Any] = {"type": "message", "role": "tool",
                               "content": [{"type": "text", "text": text}, *media]
                               if media else text}
    if isinstance(event_id, str):
        message["message_id"] = event_id
    if isinstance(response.get("name"), str):
        message["name"] = response["name"]
    if isinstance(response.get("id"), str):
        message["tool_call_id"] = response["id"]
    if is_error:
        message["is_error"] = True
    return message


def _event_messages(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The neutral messages one event holds, without ``original``."""
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(content, dict) or not isinstance(parts, list):
        return []
    shown: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    event_id = event.get("id")
    for part in parts:
        if not isinstance(part, dict):
            continue
        call, response = part.get("function_call"), part.get("function_response")
        if isinstance(call, dict):
            entry: dict[str, Any] = {"id": call.get("id"), "name": call.get("name"),
                                     "arguments": call.get("args") or {}}
            if not isinstance(entry["id"], str):
                del entry["id"]
            calls.append(entry)
        elif isinstance(response, dict):
            results.append(_tool_message(response, event_id))
        elif (neutral := _neutral_part(part)) is not None:
            shown.append(neutral)
    if not shown and not calls:
        return results
    assistant = content.get("role") == "model" or bool(calls)
    message: dict[str, Any] = {"type": "message", "role": "assistant" if assistant else "user",
                               "content": _common.content(shown)}
    if isinstance(event_id, str):
        message["message_id"] = event_id
    if assistant:
        author = event.get("author")
        if isinstance(author, str) and author and author != "user":
            message["name"] = author
    if calls:
        message["tool_calls"] = calls
    model = event.get("model_version")
    if isinstance(model, str) and model:
        message["model"] = model
    usage = event.get("usage_metadata")
    if isinstance(usage, dict) and ("prompt_token_count" in usage
                                    or "candidates_token_count" in usage):
        message["usage"] = {"input_tokens": usage.get("prompt_token_count"),
                            "output_tokens": usage.get("candidates_token_count")}
    # The model must see results right after their calls: in a user turn they lead.
    return [message, *results] if assistant else [*results, message]


def to_neutral(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Neutral messages for ADK events (``adk.event`` item data), in order.

    Raises :class:`~ownstate.errors.InvalidInput` when an item is not a JSON object.
    """
    groups: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    leading: list[dict[str, Any]] = []
    for index, event in enumerate(items):
        if not isinstance(event, dict):
            raise InvalidInput(f"item {index} is not an ADK event's JSON object",
                               field="items")
        messages = _event_messages(event)
        if messages:
            groups.append(([*leading, event], messages))
            leading = []
        elif groups:
            groups[-1][0].append(event)
        else:
            leading.append(event)
    out: list[dict[str, Any]] = []
    for events, messages in groups:
        first, *rest = messages
        first["original"] = {"format": FORMAT, "items": copy.deepcopy(events)}
        for message in rest:
            message["original"] = {"format": FORMAT, "item": message.get("message_id")}
        out.extend(messages)
    return out


# neutral -> ADK ------------------------------------------------------------------------


def _new_id() -> str:
    return str(uuid.uuid4())


def _note(part: dict[str, Any], why: str) -> dict[str, Any]:
    """A text part standing in for media that cannot be carried."""
    return {"text": _common.note_text(part, why)}


def _adk_media(part: dict[str, Any]) -> dict[str, Any]:
    url = part.get("url")
    media = part.get("media_type")
    media_type = media if isinstance(media, str) and media else None
    if not isinstance(url, str) or not url:
        return _note(part, "not inlined")
    parsed = _common.parse_data_url(url)
    if parsed is not None:
        data_media, data = parsed
        return {"inline_data": {
            "data": base64.urlsafe_b64encode(data).decode(),
            "mime_type": media_type or data_media or "application/octet-stream"}}
    if url.startswith("data:"):
        return _note(part, "unreadable data URL")
    guessed = mimetypes.guess_type(urllib.parse.urlsplit(url).path)[0]
    return {"file_data": {"file_uri": url,
                          "mime_type": media_type or guessed or "application/octet-stream"}}


def _adk_parts(content: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in _common.neutral_parts(content):
        kind = part.get("type")
        text = part.get("text")
        if kind == "text" and isinstance(text, str) and text:
            parts.append({"text": text})
        elif kind in ("image", "file"):
            parts.append(_adk_media(part))
    return parts


def _tool_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") in ("image", "file"):
                texts.append(_note(part, "not included")["text"])
    return "\n".join(texts)


def _response(message: dict[str, Any]) -> dict[str, Any]:
    text = _tool_text(message.get("content"))
    if message.get("is_error"):
        return {"error": text}
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"result": text}


@dataclass
class _Turn(_common.Turn):
    names: dict[str, str] = field(default_factory=dict)  # call id -> the tool it calls

    @classmethod
    def of(cls, calls: list[tuple[str, str]], *, fresh: bool) -> _Turn:
        """The turn of these (id, name) calls, in the order they were made."""
        ids = [c for c, _ in calls]
        return cls(ids, fresh=fresh, open=set(ids), names=dict(calls))


class _Writer(_common.TurnWriter):
    """Builds the event list of :func:`from_neutral` (see :func:`._common.write_neutral`)."""

    id_key = "id"

    def __init__(self, agent_name: str) -> None:
        self.agent = agent_name
        self.events: list[dict[str, Any]] = []
        self.fresh: list[bool] = []
        self.invocation = "e-" + _new_id()
        self.turn: _Turn | None = None

    def emit(self, author: str, role: str, parts: list[dict[str, Any]],
             **extra: Any) -> None:
        event: dict[str, Any] = {"id": _new_id(), "invocation_id": self.invocation,
                                 "author": author, "content": {"role": role, "parts": parts},
                                 **extra}
        self.events.append(event)
        self.fresh.append(True)

    def carry(self, items: list[Any]) -> None:
        self.flush()
        for item in items:
            self.events.append(copy.deepcopy(item))
            self.fresh.append(False)

    def write_results(self, results: list[dict[str, Any]]) -> None:
        self.emit(self.agent, "user", results)

    def unanswered(self, call_id: str) -> dict[str, Any]:
        assert self.turn is not None
        return {"function_response": {"id": call_id, "name": self.turn.names[call_id],
                                      "response": {"error": NO_RESULT}}}

    def tool_id(self, value: Any) -> str | None:
        return value if isinstance(value, str) else None

    def result(self, message: dict[str, Any], call_id: str) -> dict[str, Any]:
        assert self.turn is not None
        name = self.turn.names[call_id]
        return {"function_response": {"id": call_id, "name": name,
                                      "response": _response(message)}}

    def user(self, message: dict[str, Any]) -> None:
        self.invocation = "e-" + _new_id()
        parts = _adk_parts(message.get("content"))
        if parts:
            self.emit("user", "user", parts)

    def assistant(self, message: dict[str, Any]) -> None:
        _assistant_event(self, message)

    def carried_turn(self, message: dict[str, Any]) -> None:
        self.turn = _Turn.of(_calls_of(message), fresh=False)

    def finish(self) -> list[dict[str, Any]]:
        self.close()
        stamps: list[float | None] = []
        for event, fresh in zip(self.events, self.fresh, strict=True):
            given = event.get("timestamp")
            stamps.append(None if fresh or not isinstance(given, (int, float))
                          or isinstance(given, bool) else float(given))
        for event, fresh, stamp in zip(self.events, self.fresh,
                                       _common.spread(stamps, time.time()), strict=True):
            if fresh:
                event["timestamp"] = stamp
        return self.events


def _assistant_event(writer: _Writer, message: dict[str, Any]) -> None:
    parts = _adk_parts(message.get("content"))
    calls: list[tuple[str, str]] = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        given = call.get("id")
        call_id = given if isinstance(given, str) and given else "adk-" + _new_id()
        calls.append((call_id, call["name"]))
        parts.append({"function_call": {"id": call_id, "args": _common.arguments(
            call.get("arguments")), "name": call["name"]}})
    writer.turn = _Turn.of(calls, fresh=True)
    if not parts:
        return
    extra: dict[str, Any] = {}
    if isinstance(message.get("model"), str) and message["model"]:
        extra["model_version"] = message["model"]
    usage = message.get("usage")
    if isinstance(usage, dict):
        counts = {"prompt_token_count": usage.get("input_tokens"),
                  "candidates_token_count": usage.get("output_tokens")}
        counts = {k: v for k, v in counts.items()
                  if isinstance(v, int) and not isinstance(v, bool)}
        if counts:
            extra["usage_metadata"] = counts
    writer.emit(writer.agent, "model", parts, **extra)


def _calls_of(message: dict[str, Any]) -> list[tuple[str, str]]:
    calls = []
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict) and isinstance(call.get("id"), str):
            calls.append((call["id"], str(call.get("name") or "")))
    return calls


def from_neutral(messages: Sequence[dict[str, Any]], *,
                 agent_name: str = DEFAULT_AUTHOR) -> list[dict[str, Any]]:
    """ADK event JSON for neutral ``messages``, in order (see the module docstring).

    ``agent_name`` is the author of the assistant and tool events written from neutral
    fields; pass the name of the agent that will continue the session so that ADK shows
    the model those turns as its own. Raises :class:`~ownstate.errors.InvalidInput` when
    a message is not a JSON object or ``agent_name`` is not a usable author.
    """
    if not isinstance(agent_name, str) or not agent_name.strip() or agent_name == "user":
        raise InvalidInput("agent_name must be a non-empty name other than 'user'",
                           field="agent_name")
    return _common.write_neutral(messages, _Writer(agent_name), FORMAT)
