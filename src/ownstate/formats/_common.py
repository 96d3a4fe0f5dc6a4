"""Small pieces the format converters share: media URLs, tool arguments, timestamps, and
the walk over neutral messages that the ADK and Claude converters write their own items
from (:func:`write_neutral`) and how their writers end a turn (:class:`TurnWriter`). Pure
functions over JSON values: they may touch only the error tree, never storage."""

from __future__ import annotations

import base64
import binascii
import json
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import InvalidInput

#: The spacing (seconds) between timestamps made up for converted entries.
STEP = 0.001


def b64_to_bytes(data: str) -> bytes:
    """Base64 in either alphabet (pydantic writes the URL-safe one), padding optional."""
    text = data.replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def parse_data_url(url: str) -> tuple[str | None, bytes] | None:
    """The media type and bytes of a ``data:`` URL, or None when it is not one."""
    if not url.startswith("data:") or "," not in url:
        return None
    header, payload = url[5:].split(",", 1)
    params = header.split(";")
    media = params[0] or None
    try:
        if "base64" in params[1:]:
            return media, b64_to_bytes(urllib.parse.unquote(payload))
        return media, urllib.parse.unquote_to_bytes(payload)
    except (binascii.Error, ValueError):
        return None


def note_text(part: dict[str, Any], why: str) -> str:
    """The words standing in for media that cannot be carried into a format."""
    kind = part.get("type", "file")
    asset = part.get("asset")
    name = part.get("name")
    if isinstance(asset, dict) and isinstance(asset.get("$asset"), str):
        label = f"ownstate asset {asset['$asset']}"
    elif isinstance(name, str) and name:
        label = name
    else:
        label = "attachment"
    return f"[{kind}: {label} ({why})]"


def media_part(kind: str, url: str, media_type: str | None, name: object) -> dict[str, Any]:
    """A neutral ``image`` or ``file`` part: its URL, and its media type and name when
    there are (a name that is not a non-empty string is left out)."""
    part: dict[str, Any] = {"type": kind, "url": url}
    if media_type:
        part["media_type"] = media_type
    if isinstance(name, str) and name:
        part["name"] = name
    return part


def arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments as an object: JSON text is parsed, anything else wrapped."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else {}
        except ValueError:
            return {"input": value}
        return parsed if isinstance(parsed, dict) else {"input": value}
    return {} if value is None else {"input": value}


def content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Neutral content: a lone text part as a plain string, else the parts."""
    if not parts:
        return ""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def neutral_parts(content: Any) -> Iterator[dict[str, Any]]:
    """The parts of neutral content as dicts: a plain string (the whole content, or one
    part) as a text part; anything else that is not a dict is passed over."""
    for part in [content] if isinstance(content, str) else (
            content if isinstance(content, list) else []):
        if isinstance(part, str):
            yield {"type": "text", "text": part}
        elif isinstance(part, dict):
            yield part


def spread(stamps: list[float | None], now: float) -> list[float]:
    """Fill the ``None`` timestamps so that they increase between the given ones."""
    out: list[float] = []
    index = 0
    while index < len(stamps):
        given = stamps[index]
        if given is not None:
            out.append(given)
            index += 1
            continue
        end = index
        while end < len(stamps) and stamps[end] is None:
            end += 1
        count = end - index
        low = out[-1] if out else None
        high = stamps[end] if end < len(stamps) else None
        if high is None:
            start = now - count * STEP
            if low is not None and start <= low:
                start = low + STEP
            out.extend(start + i * STEP for i in range(count))
        elif low is None or high - low <= 0:
            out.extend(high - (count - i) * STEP for i in range(count))
        else:
            gap = (high - low) / (count + 1)
            out.extend(low + (i + 1) * gap for i in range(count))
        index = end
    return out


def original_of(message: dict[str, Any], fmt: str, carried: set[str], carried_last: bool
                ) -> tuple[str, dict[str, Any] | None]:
    """How ``from_neutral`` writes ``message`` in format ``fmt``, and the message's own
    ``original`` in that format (or ``None``): ``"carry"`` (the original's items, exactly),
    ``"skip"`` (the items were written with the message that owns them: ``carried`` holds
    their ids, ``carried_last`` says whether the previous message was carried), or
    ``"write"`` (from the neutral fields)."""
    original = message.get("original")
    own = original if isinstance(original, dict) and original.get("format") == fmt else None
    if own is not None and isinstance(own.get("items"), list):
        return "carry", own
    if own is not None and "item" in own and (
            own["item"] in carried if isinstance(own["item"], str) else carried_last):
        return "skip", own
    return "write", own


@dataclass
class Turn:
    """The calls of the latest assistant message a writer wrote, and their results."""

    calls: list[str]  # call ids, in the order they were made
    fresh: bool  # written from neutral fields (so the converter answers its orphans)
    open: set[str] = field(default_factory=set)  # the calls no result has answered yet
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # call id -> its result


class TurnWriter:
    """How a writer ends a turn, the same in every format: the results given so far are
    written in the order of the calls, and a turn written from neutral fields answers the
    calls nothing answered. A format says how it writes those two things."""

    turn: Turn | None

    def unanswered(self, call_id: str) -> dict[str, Any]:
        """The result written for call ``call_id`` of the current turn when nothing
        answered it."""
        raise NotImplementedError

    def write_results(self, results: list[dict[str, Any]]) -> None:
        """Write the results given to the current turn's calls, in call order (one
        entry)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Write the results given so far to the current turn's calls."""
        turn = self.turn
        if turn is None or not turn.results:
            return
        order = {call_id: i for i, call_id in enumerate(turn.calls)}
        results = [turn.results[k] for k in sorted(turn.results, key=order.__getitem__)]
        turn.results.clear()
        self.write_results(results)

    def close(self) -> None:
        """End the current turn, answering the calls this converter wrote and nothing
        answered."""
        turn = self.turn
        if turn is None:
            return
        if turn.fresh:
            for call_id in turn.calls:
                if call_id in turn.open:
                    turn.results[call_id] = self.unanswered(call_id)
        self.flush()
        self.turn = None


class NeutralWriter(Protocol):
    """A format's writer of neutral messages, as :func:`write_neutral` drives it."""

    #: The key of a carried item's id (what a later message's ``original.item`` names).
    id_key: str

    @property
    def turn(self) -> Turn | None: ...

    def tool_id(self, value: Any) -> str | None:
        """The call id a tool message answers, as this format writes ids."""

    def result(self, message: dict[str, Any], call_id: str) -> dict[str, Any]:
        """The result of call ``call_id`` written from a tool message's neutral fields."""

    def user(self, message: dict[str, Any]) -> None:
        """Write a user message from its neutral fields."""

    def assistant(self, message: dict[str, Any]) -> None:
        """Write an assistant message from its neutral fields (it opens a turn)."""

    def carried_turn(self, message: dict[str, Any]) -> None:
        """Open the turn of an assistant message whose items were carried."""

    def carry(self, items: list[Any]) -> None:
        """Write an original's items exactly."""

    def close(self) -> None:
        """End the current turn."""

    def finish(self) -> list[dict[str, Any]]:
        """Everything written, in order."""


def write_neutral(messages: Sequence[dict[str, Any]], writer: NeutralWriter, fmt: str
                  ) -> list[dict[str, Any]]:
    """Write neutral ``messages`` in format ``fmt`` through ``writer``: a message whose
    ``original`` is in ``fmt`` is carried (its items exactly) or skipped (written with the
    message that owns them), any other from its neutral fields; a tool result is written
    into the turn of the call it answers (an orphan is dropped), and system messages are
    left out. Raises :class:`~ownstate.errors.InvalidInput` when a message is not a JSON
    object."""
    carried: set[str] = set()  # ids of the items written from originals
    carried_last = False  # the previous message was written from (or into) an original
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidInput(f"message {index} is not a JSON object", field="messages")
        role = message.get("role")
        # "skip": its items were written with the message that owns them
        mode, own = original_of(message, fmt, carried, carried_last)
        if role == "tool":
            turn = writer.turn
            call_id = writer.tool_id(message.get("tool_call_id"))
            answers = turn is not None and call_id is not None and call_id in turn.open
            if turn is not None and call_id is not None and answers:
                turn.open.discard(call_id)
            if mode == "write":
                carried_last = False
                if turn is not None and call_id is not None and answers:
                    turn.results[call_id] = writer.result(message, call_id)
                continue  # an orphan result is dropped
        elif role in ("system", "developer") and mode == "write":
            continue
        else:
            writer.close()
        if mode == "carry":
            items = own["items"] if own is not None else []
            writer.carry(items)
            carried.update(i[writer.id_key] for i in items
                           if isinstance(i, dict) and isinstance(i.get(writer.id_key), str))
            carried_last = True
        elif mode == "skip":
            carried_last = True
        else:
            carried_last = False
            if role == "user":
                writer.user(message)
            elif role == "assistant":
                writer.assistant(message)
            continue
        if role == "assistant":
            writer.carried_turn(message)
    return writer.finish()
