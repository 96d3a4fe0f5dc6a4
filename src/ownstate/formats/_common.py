"""Small pieces the format converters share: media URLs, tool arguments, timestamps."""

from __future__ import annotations

import base64
import binascii
import json
import urllib.parse
from typing import Any

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
