"""OpenAI Responses items to and from neutral messages.

The items are the ones the OpenAI Agents SDK keeps in a ``Session`` (and passes to
``Runner.run`` as input): Responses API input items, format ``openai.responses``. Both
functions are pure, work on whole histories and never modify their arguments.

Items to neutral messages (:func:`to_neutral`)
----------------------------------------------

- ``message`` with role user, system or developer -> a message of that role; ``content``
  stays a string when it is one, a list of parts otherwise.
- ``message`` with role assistant -> the text of an assistant message (``output_text`` and
  ``refusal`` parts become text parts).
- ``function_call`` -> a tool call ``{"id": call_id, "name", "arguments"}`` on the
  assistant message; ``arguments`` is the parsed JSON object, or the raw text when it is
  not one. ``custom_tool_call`` -> a tool call whose ``arguments`` is its raw ``input``.
- ``function_call_output`` and ``custom_tool_call_output`` -> a ``role: "tool"`` message
  with ``tool_call_id`` = call_id and ``content`` = the output string or its parts.
- ``reasoning`` -> ``{"type": "reasoning", "text"}`` parts on an assistant message, one per
  summary text (and one per raw ``reasoning_text``).
- hosted tool calls (``web_search_call``, ``file_search_call``, ``computer_call``,
  ``code_interpreter_call``, ``mcp_call``, any ``*_call``), ``mcp_list_tools`` and
  ``mcp_approval_request`` -> part of the assistant turn, with no neutral field (another
  framework could not replay them); kept in ``original``.
- anything else (``compaction``, ``item_reference``, ``computer_call_output`` and other
  outputs of hosted or local tools, ``mcp_approval_response``, item types this module does
  not know) -> no message of its own: kept in the ``original`` of the message before it
  (or, at the very start of a history, of the message after it). A history of nothing but
  such items becomes one assistant message with ``content: []``.

**Assistant turns.** The Agents SDK stores one model response as several items, in the
order the model produced them: reasoning, a message, then one ``function_call`` per tool
call. Consecutive items of one response become ONE neutral assistant message: its
``content`` holds the reasoning and text parts in item order, its
``tool_calls`` all the calls (parallel calls stay one message). A reasoning item therefore
goes with the message and calls that follow it; a reasoning item that nothing follows (or
that a user message or tool result follows) becomes an assistant message of its own whose
content is only the reasoning part. A turn starts again after a tool result or an input
message, and also when a message or reasoning item comes after the current turn's text or
calls (the next response). A turn without text has ``content: []``; a turn made of one
plain-string message has that string as content.

Content parts: ``input_text``/``output_text``/``refusal`` -> ``text``; ``input_image`` ->
``image`` with ``url`` (an https or ``data:`` URL), ``file_id`` and/or ``asset`` as the
item has them; ``input_file`` -> ``file`` with ``url`` (``file_url``, or ``file_data`` as a
``data:`` URL: raw base64 file data is wrapped in one), ``file_id``, ``asset`` and ``name``
(``filename``). ``media_type`` is added when a ``data:`` URL names it. Parts with no
neutral type (``input_audio``, ...) are left out of ``content`` and kept in ``original``.

``message_id`` is the item's own ``id`` (for a turn, its message item's; the SDK's
placeholder ``__fake_id__`` is not an id); a tool message's ``name`` is the output item's
``name`` when it has one. ``model`` and ``usage`` are taken from an
item's own ``model``/``usage`` keys or from its ``provider_data`` (where the SDK records
the model of a non-OpenAI response).

**Lossless.** Every neutral message carries ``original = {"format": "openai.responses",
"items": [...]}``: the items it was made from, in order, with each value a neutral field
already carries replaced by the marker ``"$neutral"`` (texts, image and file URLs,
``file_id``, assets, file names, call ids, tool names, call arguments, outputs), so a long
text or a ``data:`` URL is not stored twice. :func:`from_neutral` puts the neutral values
back in place, which gives back exactly the stored items (same keys, same key order, the
same ``arguments`` bytes; ``json.dumps`` of the result equals that of the input). Should a
message not survive this (a shape the marker cannot describe), ``original`` holds the
items whole with ``"verbatim": true`` instead; :func:`to_neutral` checks every message
before answering.

Neutral messages to items (:func:`from_neutral`)
------------------------------------------------

A message whose ``original`` is in this format is turned back into its items: the texts,
URLs, arguments and outputs come from the neutral fields (so an edit of a text shows),
everything else from ``original``. When the neutral fields no longer fit the original
items (a part added, removed or changed in kind, a call added, the role changed), the
message is rebuilt from its neutral fields instead, as below. Items restored this way are
returned as stored, orphans included: the Agents SDK keeps a ``function_call`` without
output while a run awaits approval (resuming supplies it), and it prunes orphans of its own
history when it prepares model input.

Messages written by other frameworks are built from the neutral fields only:

- user / system / developer -> ``{"type": "message", "role", "content"}``; a string stays
  a string; parts become ``input_text``, ``input_image`` (``image_url`` from ``url``, else
  ``file_id``, else ``asset``; ``"detail": "auto"``) and ``input_file`` (``file_url`` for
  an https URL, ``file_data`` for a ``data:`` URL, else ``file_id``, else ``asset``;
  ``filename`` from ``name``, or made from the media type for inline data, which the API
  requires). A message left with no content is skipped.
- assistant -> a message item ``{"type": "message", "role": "assistant", "content":
  [{"type": "output_text", "text", "annotations": []}]}`` when it has text, then one
  ``{"type": "function_call", "call_id": <the neutral id>, "name", "arguments"}`` per tool
  call, in order; ``arguments`` is serialised to a JSON string when it is not one already
  (a call without an id gets ``call_ownstate_<n>``). ``model`` and ``usage`` go to the
  first item's ``provider_data``, the key the Agents SDK uses for provider metadata and
  strips before it calls the OpenAI API (strip it yourself if you send the items to the
  Responses API without the SDK).
- tool -> ``{"type": "function_call_output", "call_id": tool_call_id, "output"}`` with the
  content as a string, or as ``input_text``/``input_image``/``input_file`` parts; a result
  for a ``custom_tool_call`` becomes a ``custom_tool_call_output``. ``is_error`` has no
  Responses field and is dropped.

Left out, because the Responses API accepts no such input: reasoning parts from other
frameworks (it only takes reasoning items it produced itself, by id or encrypted
content), images and files in assistant messages, parts of unknown types, and foreign
message ids (the API would look them up as its own).

**Orphans.** The Responses API rejects a ``function_call_output`` whose call is not in
the input, and a ``function_call`` that has no output. So, for items built from neutral
fields: a tool result whose ``call_id`` has no call earlier in the history (or that
answers a call already answered) is dropped; a call that never gets an output anywhere
later gets ``{"type": "function_call_output", "call_id", "output": "[no result was
recorded]"}`` right after its turn. A call restored from this format's own items gets that
placeholder too, but only once messages from another framework follow it (the
conversation moved on, so no approval will answer it); otherwise it is left as stored.

**Assets.** A neutral image or file part with an ``asset`` reference
(``{"$asset": "ast_...", ...}``) becomes an ``input_image``/``input_file`` part that keeps
that JSON under ``"asset"``; the Responses API does not know the key, so resolve it before
sending (fetch the bytes from ``client.assets`` and set ``image_url``/``file_data`` to a
``data:`` URL, or upload and set ``file_id``, then drop ``asset``). :func:`to_neutral`
maps such a part back to a neutral part with the same ``asset``.

Errors: both functions raise :class:`~ownstate.errors.InvalidInput` for an entry that is
not a JSON object; :func:`from_neutral` also for a message whose role the Responses API
has no equivalent for, and for a tool call without a name.

It may touch only the error tree, never storage or the OpenAI Agents SDK.
"""

from __future__ import annotations

import copy
import json
import mimetypes
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInput

__all__ = ["FORMAT", "NO_RESULT", "from_neutral", "to_neutral"]

#: The format tag of the items this module reads and writes.
FORMAT = "openai.responses"
#: The output given to a tool call that never got one.
NO_RESULT = "[no result was recorded]"

# Stands, in ``original``, for a value the neutral message carries.
_CARRIED = "$neutral"
# Stands for raw base64 ``file_data``, carried as a data: URL.
_CARRIED_BASE64 = "$neutral:base64"
# The Agents SDK's id for items of non-OpenAI models: not an id of the message.
_FAKE_ID = "__fake_id__"

_INPUT_ROLES = frozenset({"user", "system", "developer"})
_CALL_OUTPUTS = {"function_call": "function_call_output",
                 "custom_tool_call": "custom_tool_call_output"}
_OUTPUTS = frozenset(_CALL_OUTPUTS.values())
_HOSTED = frozenset({"mcp_list_tools", "mcp_approval_request"})
_REASONING_ENTRIES = {"summary": "summary_text", "content": "reasoning_text"}
# (item key, neutral key) of the media parts; a file's url comes from file_data or file_url.
_IMAGE_KEYS = (("image_url", "url"), ("file_id", "file_id"), ("asset", "asset"))
_FILE_KEYS = (("file_data", "url"), ("file_url", "url"), ("file_id", "file_id"),
              ("asset", "asset"), ("filename", "name"))

JSONDict = dict[str, Any]


class _Mismatch(Exception):
    """The neutral fields no longer fit the original items."""


def _kind(item: JSONDict) -> str:
    """What an item is to the grouping: input, reply, reasoning, call, output, hosted or
    rider (an item with no neutral meaning)."""
    item_type = item.get("type")
    if (item_type == "message" or (item_type is None and "role" in item)) \
            and "content" in item:
        role = item.get("role")
        if role == "assistant":
            return "reply"
        return "input" if role in _INPUT_ROLES else "rider"
    if item_type == "reasoning":
        return "reasoning"
    if item_type in _CALL_OUTPUTS:
        return "call"
    if item_type in _OUTPUTS:
        return "output"
    if isinstance(item_type, str) and (item_type.endswith("_call") or item_type in _HOSTED):
        return "hosted"
    return "rider"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _media_type(url: str) -> str | None:
    if not url.startswith("data:"):
        return None
    media_type = url[5:].split(",", 1)[0].split(";", 1)[0]
    return media_type or None


def _parse_arguments(text: str) -> Any:
    """The JSON object ``text`` holds, else ``text`` itself (raw arguments)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments)


# items -> neutral ------------------------------------------------------------------------


class _Group:
    """The items that become one neutral message, and what they carry."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.sources: list[JSONDict] = []
        self.skeletons: list[JSONDict] = []
        self.parts: list[JSONDict] = []
        self.plain = False  # the only part came from a plain-string content
        self.calls: list[JSONDict] = []
        self.has_text = False
        self.message_id: str | None = None
        self.name: str | None = None
        self.tool_call_id: Any = None
        self.model: str | None = None
        self.usage: Any = None

    def accepts(self, kind: str) -> bool:
        """Whether an assistant-side item of ``kind`` continues this turn."""
        if kind in ("reasoning", "reply"):
            return not self.has_text and not self.calls
        return True

    def add(self, item: JSONDict, kind: str) -> None:
        self.sources.append(item)
        self.skeletons.append(self._carry(item, kind))
        for holder in (item, item.get("provider_data")):
            if not isinstance(holder, dict):
                continue
            if self.model is None and isinstance(holder.get("model"), str):
                self.model = holder["model"]
            if self.usage is None and isinstance(holder.get("usage"), dict):
                self.usage = copy.deepcopy(holder["usage"])

    def _set_id(self, item: JSONDict) -> None:
        item_id = item.get("id")
        if self.message_id is None and isinstance(item_id, str) and item_id != _FAKE_ID:
            self.message_id = item_id

    def _carry_content(self, value: Any) -> Any:
        if isinstance(value, str):
            self.plain = not self.parts
            self.parts.append({"type": "text", "text": value})
            return _CARRIED
        if isinstance(value, list):
            self.plain = False
            return [_carry_part(part, self.parts) for part in value]
        return value

    def _carry(self, item: JSONDict, kind: str) -> JSONDict:
        skeleton = dict(item)
        if kind in ("input", "reply"):
            self._set_id(item)
            self.has_text = self.has_text or kind == "reply"
            skeleton["content"] = self._carry_content(item["content"])
        elif kind == "reasoning":
            for key, value in item.items():
                entry_type = _REASONING_ENTRIES.get(key)
                if entry_type is None or not isinstance(value, list):
                    continue
                entries = []
                for entry in value:
                    if isinstance(entry, dict) and entry.get("type") == entry_type \
                            and isinstance(entry.get("text"), str):
                        self.plain = False
                        self.parts.append({"type": "reasoning", "text": entry["text"]})
                        entry = {**entry, "text": _CARRIED}
                    entries.append(entry)
                skeleton[key] = entries
        elif kind == "call":
            self.calls.append(_carry_call(item, skeleton))
        elif kind == "output":
            self._set_id(item)
            if isinstance(item.get("call_id"), str):
                self.tool_call_id = item["call_id"]
                skeleton["call_id"] = _CARRIED
            if isinstance(item.get("name"), str):
                self.name = item["name"]
            output = item.get("output")
            if "output" in item and not isinstance(output, str | list | None):
                # Not an output the API takes; other frameworks get its JSON text, and
                # original keeps the value (verbatim).
                self.plain = not self.parts
                self.parts.append({"type": "text", "text": _dumps(output)})
            elif "output" in item:
                skeleton["output"] = self._carry_content(output)
        return skeleton

    def message(self) -> JSONDict:
        content: Any = self.parts[0]["text"] if self.plain and len(self.parts) == 1 \
            else self.parts
        msg: JSONDict = {"type": "message", "role": self.role, "content": content}
        if self.message_id is not None:
            msg["message_id"] = self.message_id
        if self.name is not None:
            msg["name"] = self.name
        if self.calls:
            msg["tool_calls"] = self.calls
        if self.role == "tool" and self.tool_call_id is not None:
            msg["tool_call_id"] = self.tool_call_id
        if self.model is not None:
            msg["model"] = self.model
        if self.usage is not None:
            msg["usage"] = self.usage
        msg["original"] = {"format": FORMAT, "items": self.skeletons}
        restored = _restore(msg, msg["original"])
        if restored is None or _dumps(restored) != _dumps(self.sources):
            msg["original"] = {"format": FORMAT, "items": copy.deepcopy(self.sources),
                               "verbatim": True}
        return msg


def _carry_call(item: JSONDict, skeleton: JSONDict) -> JSONDict:
    key = "arguments" if item.get("type") == "function_call" else "input"
    value = item.get(key)
    call: JSONDict = {"id": item.get("call_id"), "name": item.get("name"), "arguments": value}
    for field in ("call_id", "name"):
        if isinstance(item.get(field), str):
            skeleton[field] = _CARRIED
    if isinstance(value, str):
        parsed = _parse_arguments(value) if key == "arguments" else value
        call["arguments"] = parsed
        # Parsed arguments that would not serialise back to these bytes keep the bytes.
        if isinstance(parsed, str) or json.dumps(parsed) == value:
            skeleton[key] = _CARRIED
    return call


def _carry_part(part: Any, parts: list[JSONDict]) -> Any:
    if not isinstance(part, dict):
        return part
    part_type = part.get("type")
    for kind, key in (("input_text", "text"), ("output_text", "text"), ("refusal", "refusal")):
        if part_type == kind and isinstance(part.get(key), str):
            parts.append({"type": "text", "text": part[key]})
            return {**part, key: _CARRIED}
    if part_type not in ("input_image", "input_file"):
        return part  # no neutral type for it: kept in original only
    is_image = part_type == "input_image"
    neutral: JSONDict = {"type": "image" if is_image else "file"}
    skeleton = dict(part)
    for key, field in _IMAGE_KEYS if is_image else _FILE_KEYS:
        value = part.get(key)
        if field in neutral or not isinstance(value, dict if key == "asset" else str):
            continue
        skeleton[key] = _CARRIED
        if isinstance(value, str) and key == "file_data" and not value.startswith("data:"):
            media_type = mimetypes.guess_type(part.get("filename") or "")[0]
            value = f"data:{media_type or 'application/octet-stream'};base64,{value}"
            skeleton[key] = _CARRIED_BASE64
        neutral[field] = copy.deepcopy(value)
        if field == "url" and isinstance(value, str) and _media_type(value):
            neutral["media_type"] = _media_type(value)
    parts.append(neutral)
    return skeleton


def to_neutral(items: Sequence[JSONDict]) -> list[JSONDict]:
    """Neutral messages for OpenAI Responses ``items`` (a history, in order).

    See the module docstring for the mapping. Raises
    :class:`~ownstate.errors.InvalidInput` when an item is not a JSON object.
    """
    groups: list[_Group] = []
    waiting: list[JSONDict] = []  # items with no message of their own, before any message
    turn: _Group | None = None  # the assistant turn items may still join

    def start(role: str) -> _Group:
        group = _Group(role)
        groups.append(group)
        for rider in waiting:
            group.add(rider, "rider")
        waiting.clear()
        return group

    for index, source in enumerate(items):
        if not isinstance(source, dict):
            raise InvalidInput(f"item {index} is not a JSON object", field="items")
        item = copy.deepcopy(source)
        kind = _kind(item)
        if kind == "input":
            start(item["role"]).add(item, kind)
            turn = None
        elif kind == "output":
            start("tool").add(item, kind)
            turn = None
        elif kind in ("reply", "reasoning", "call", "hosted"):
            if turn is None or not turn.accepts(kind):
                turn = start("assistant")
            turn.add(item, kind)
        elif groups:
            groups[-1].add(item, kind)
        else:
            waiting.append(item)
    if waiting:  # nothing but items without a neutral meaning
        start("assistant")
    return [group.message() for group in groups]


# neutral -> items ------------------------------------------------------------------------


class _Cursor:
    """The neutral values of one message, taken in the order the items need them."""

    def __init__(self, msg: JSONDict) -> None:
        content = msg.get("content")
        if isinstance(content, str):
            self.parts: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            self.parts = content
        else:
            raise _Mismatch
        calls = msg.get("tool_calls") or []
        if not isinstance(calls, list):
            raise _Mismatch
        self.calls: list[Any] = calls
        self.next_part = self.next_call = 0

    def part(self, part_type: str) -> JSONDict:
        if self.next_part >= len(self.parts):
            raise _Mismatch
        part = self.parts[self.next_part]
        self.next_part += 1
        if not isinstance(part, dict) or part.get("type") != part_type:
            raise _Mismatch
        return part

    def text(self, part_type: str = "text") -> str:
        text = self.part(part_type).get("text")
        if not isinstance(text, str):
            raise _Mismatch
        return text

    def call(self) -> JSONDict:
        if self.next_call >= len(self.calls) or not isinstance(self.calls[self.next_call], dict):
            raise _Mismatch
        self.next_call += 1
        call: JSONDict = self.calls[self.next_call - 1]
        return call

    def finish(self) -> None:
        if self.next_part != len(self.parts) or self.next_call != len(self.calls):
            raise _Mismatch


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Mismatch
    return value


def _fill_content(value: Any, cursor: _Cursor) -> Any:
    if value == _CARRIED:
        return cursor.text()
    if isinstance(value, list):
        return [_fill_part(part, cursor) for part in value]
    return value


def _fill_part(part: Any, cursor: _Cursor) -> Any:
    if not isinstance(part, dict):
        return part
    part_type = part.get("type")
    for kind, key in (("input_text", "text"), ("output_text", "text"), ("refusal", "refusal")):
        if part_type == kind and part.get(key) == _CARRIED:
            return {**part, key: cursor.text()}
    if part_type not in ("input_image", "input_file"):
        return part
    is_image = part_type == "input_image"
    neutral = cursor.part("image" if is_image else "file")
    keys = _IMAGE_KEYS if is_image else _FILE_KEYS
    filled = dict(part)
    used = set()
    for key, field in keys:
        marker = part.get(key)
        if marker not in (_CARRIED, _CARRIED_BASE64):
            continue
        if field not in neutral:
            raise _Mismatch
        value = neutral[field]
        if marker == _CARRIED_BASE64:
            head, sep, value = _string(value).partition(",")
            if not (sep and head.startswith("data:") and head.endswith(";base64")):
                raise _Mismatch
        filled[key] = copy.deepcopy(value)
        used.add(field)
    if used != {field for _, field in keys if field in neutral}:
        raise _Mismatch
    return filled


def _fill(skeleton: JSONDict, msg: JSONDict, cursor: _Cursor) -> JSONDict:
    kind = _kind(skeleton)
    item = dict(skeleton)
    if kind in ("input", "reply"):
        item["content"] = _fill_content(skeleton["content"], cursor)
    elif kind == "reasoning":
        for key, value in skeleton.items():
            if key in _REASONING_ENTRIES and isinstance(value, list):
                item[key] = [{**entry, "text": cursor.text("reasoning")}
                             if isinstance(entry, dict) and entry.get("text") == _CARRIED
                             else entry for entry in value]
    elif kind == "call":
        call = cursor.call()
        if skeleton.get("call_id") == _CARRIED:
            item["call_id"] = _string(call.get("id"))
        if skeleton.get("name") == _CARRIED:
            item["name"] = _string(call.get("name"))
        key = "arguments" if skeleton.get("type") == "function_call" else "input"
        kept = skeleton.get(key)
        arguments = call.get("arguments")
        if kept == _CARRIED:
            item[key] = _arguments_text(arguments)
        elif isinstance(kept, str) and not (isinstance(arguments, dict)
                                            and _parse_arguments(kept) == arguments):
            item[key] = _arguments_text(arguments)  # the arguments were edited
    elif kind == "output":
        if skeleton.get("call_id") == _CARRIED:
            item["call_id"] = _string(msg.get("tool_call_id"))
        if "output" in skeleton:
            item["output"] = _fill_content(skeleton["output"], cursor)
    return item


def _role_of(skeletons: list[Any]) -> str:
    for skeleton in skeletons:
        kind = _kind(skeleton)
        if kind == "input":
            role: str = skeleton["role"]
            return role
        if kind == "output":
            return "tool"
    return "assistant"


def _restore(msg: JSONDict, original: JSONDict) -> list[JSONDict] | None:
    """The items ``msg`` was made from, with its neutral values; None when they no longer
    fit."""
    skeletons = original.get("items")
    if not isinstance(skeletons, list) or not all(isinstance(s, dict) for s in skeletons):
        return None
    if original.get("verbatim") is True:
        return copy.deepcopy(skeletons)
    if msg.get("role") != _role_of(skeletons):
        return None
    try:
        cursor = _Cursor(msg)
        items = [_fill(skeleton, msg, cursor) for skeleton in skeletons]
        cursor.finish()
    except _Mismatch:
        return None
    return items


def _input_part(part: Any) -> JSONDict | None:
    """The Responses input part for a neutral part; None when it has none."""
    if isinstance(part, str):
        return {"type": "input_text", "text": part}
    if not isinstance(part, dict):
        return None
    part_type = part.get("type")
    if part_type == "text" and isinstance(part.get("text"), str):
        return {"type": "input_text", "text": part["text"]}
    url = part.get("url") if isinstance(part.get("url"), str) else None
    if part_type == "image":
        if url is not None:
            return {"type": "input_image", "image_url": url, "detail": "auto"}
        if isinstance(part.get("file_id"), str):
            return {"type": "input_image", "file_id": part["file_id"], "detail": "auto"}
        if isinstance(part.get("asset"), dict):
            return {"type": "input_image", "asset": part["asset"], "detail": "auto"}
        return None
    if part_type != "file":
        return None
    out: JSONDict = {"type": "input_file"}
    if url is not None:
        out["file_data" if url.startswith("data:") else "file_url"] = url
    elif isinstance(part.get("file_id"), str):
        out["file_id"] = part["file_id"]
    elif isinstance(part.get("asset"), dict):
        out["asset"] = part["asset"]
    else:
        return None
    name = part.get("name")
    if isinstance(name, str) and name:
        out["filename"] = name
    elif "file_url" not in out and "file_id" not in out:
        asset = part.get("asset")
        media_type = (part.get("media_type") or (url and _media_type(url))
                      or (asset.get("media_type") if isinstance(asset, dict) else None) or "")
        out["filename"] = "file" + (mimetypes.guess_extension(media_type) or "")
    return out


def _input_parts(content: Any) -> list[JSONDict]:
    parts = content if isinstance(content, list) else [content]
    return [p for p in (_input_part(part) for part in parts) if p is not None]


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if not isinstance(content, list):
        return []
    return [part if isinstance(part, str) else part["text"] for part in content
            if isinstance(part, str)
            or (isinstance(part, dict) and part.get("type") == "text"
                and isinstance(part.get("text"), str) and part["text"])]


class _Ids:
    """Call ids for neutral tool calls that have none."""

    def __init__(self) -> None:
        self.count = 0

    def new(self) -> str:
        self.count += 1
        return f"call_ownstate_{self.count}"


def _build(msg: JSONDict, index: int, ids: _Ids) -> list[JSONDict]:
    """The items for a neutral message, from its neutral fields only."""
    role = msg.get("role")
    content = msg.get("content")
    if role in _INPUT_ROLES:
        if isinstance(content, str):
            return [{"type": "message", "role": role, "content": content}]
        parts = _input_parts(content)
        return [{"type": "message", "role": role, "content": parts}] if parts else []
    if role == "assistant":
        items: list[JSONDict] = []
        texts = _texts(content)
        if texts:
            items.append({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": text, "annotations": []} for text in texts]})
        calls = msg.get("tool_calls") or []
        for call in calls if isinstance(calls, list) else [calls]:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise InvalidInput(f"message {index} has a tool call without a name",
                                   field="messages")
            call_id = call.get("id")
            items.append({"type": "function_call",
                          "call_id": ids.new() if call_id in (None, "") else str(call_id),
                          "name": call["name"],
                          "arguments": _arguments_text(call.get("arguments"))})
        provider_data = {key: copy.deepcopy(msg[key]) for key in ("model", "usage")
                         if msg.get(key) is not None}
        if items and provider_data:
            items[0]["provider_data"] = provider_data
        return items
    if role == "tool":
        output: Any
        if isinstance(content, str):
            output = content
        elif isinstance(content, list):
            output = _input_parts(content) or ""
        else:
            output = "" if content is None else json.dumps(content)
        return [{"type": "function_call_output", "call_id": msg.get("tool_call_id"),
                 "output": output}]
    raise InvalidInput(f"message {index} has role {role!r}, which the OpenAI Responses "
                       "format has no equivalent for", field="messages")


def _settle(segments: list[tuple[list[JSONDict], bool]]) -> list[JSONDict]:
    """The items of all messages, with the orphans of built items dropped or answered."""
    calls: dict[str, str] = {}  # call_id -> call type, for the calls seen so far
    answered: set[str] = set()
    kept: list[tuple[list[JSONDict], bool]] = []
    for items, built in segments:
        keep = []
        for item in items:
            item_type, call_id = item.get("type"), item.get("call_id")
            if item_type in _CALL_OUTPUTS and isinstance(call_id, str):
                calls.setdefault(call_id, item_type)
            elif item_type in _OUTPUTS and built:
                if not isinstance(call_id, str) or call_id not in calls \
                        or call_id in answered:
                    continue  # no call to answer: the API would reject it
                item["type"] = _CALL_OUTPUTS[calls[call_id]]
                answered.add(call_id)
            elif item_type in _OUTPUTS and isinstance(call_id, str):
                answered.add(call_id)
            keep.append(item)
        kept.append((keep, built))
    last_built = max((i for i, (_, built) in enumerate(kept) if built), default=-1)
    out: list[JSONDict] = []
    for i, (items, built) in enumerate(kept):
        out.extend(items)
        if not built and i > last_built:
            continue  # as stored: a call here may be awaiting approval
        for item in items:
            item_type, call_id = item.get("type"), item.get("call_id")
            if item_type in _CALL_OUTPUTS and isinstance(call_id, str) \
                    and call_id not in answered:
                out.append({"type": _CALL_OUTPUTS[item_type], "call_id": call_id,
                            "output": NO_RESULT})
                answered.add(call_id)
    return out


def from_neutral(messages: Sequence[JSONDict]) -> list[JSONDict]:
    """OpenAI Responses items for neutral ``messages`` (a history, in order).

    See the module docstring for the mapping, what is left out and how orphans are
    handled. Raises :class:`~ownstate.errors.InvalidInput` when a message is not a JSON
    object, has a role the format has no equivalent for, or has a tool call without a
    name.
    """
    ids = _Ids()
    segments: list[tuple[list[JSONDict], bool]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidInput(f"message {index} is not a JSON object", field="messages")
        msg = copy.deepcopy(message)
        original = msg.get("original")
        restored = None
        if isinstance(original, dict) and original.get("format") == FORMAT:
            restored = _restore(msg, original)
        if restored is not None:
            segments.append((restored, False))
        else:
            segments.append((_build(msg, index, ids), True))
    return _settle(segments)
