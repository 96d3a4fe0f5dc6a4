"""A session's items as a person reads them: one entry per item, its neutral messages
split into what each role said (text, images, files, reasoning, tool calls, tool results),
whichever framework wrote it.

Each item is converted on its own with :func:`ownstate.formats.neutral.to_neutral`, so every
entry keeps the id of the exact item it came from (what a fact's provenance links to). It
may touch no storage (the views hand it items): only neutral messages
(``ownstate.formats.neutral``), the model and the console's base (:mod:`._web`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...formats.neutral import to_neutral
from ...model import JSON, Item
from ._web import safe_url

__all__ = ["Entry", "Message", "entries"]


@dataclass
class Message:
    """One neutral message, taken apart for the page."""

    role: str
    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    images: list[dict[str, str | None]] = field(default_factory=list)
    files: list[dict[str, str | None]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False
    result: JSON = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    other: list[JSON] = field(default_factory=list)


@dataclass
class Entry:
    """One item and the messages it holds (none for a framework's own bookkeeping, which
    is shown as its raw data)."""

    item: Item
    messages: list[Message]
    raw: bool


def _media(part: dict[str, Any]) -> dict[str, str | None]:
    """Where an image or file part's bytes are: an asset of this server, an http(s) link,
    or an inline ``data:`` image; anything else (a ``javascript:`` URL) is dropped."""
    asset = part.get("asset")
    asset_id = asset.get("$asset") if isinstance(asset, dict) else None
    url = part.get("url")
    inline = (url if isinstance(url, str) and url.startswith("data:image/")
              and part.get("type") == "image" else None)
    return {"asset": asset_id if isinstance(asset_id, str) else None,
            "link": safe_url(url), "inline": inline,
            "media_type": str(part.get("media_type") or ""),
            "name": str(part.get("name") or "")}


def _message(data: dict[str, Any]) -> Message:
    role = str(data.get("role") or "message")
    message = Message(role=role, model=data.get("model") if isinstance(
        data.get("model"), str) else None, usage=data.get("usage") if isinstance(
        data.get("usage"), dict) else None)
    content = data.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else (
        content if isinstance(content, list) else ([] if content is None else [content]))
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            message.texts.append(part["text"])
        elif kind == "reasoning":
            message.reasoning.append(str(part.get("text") or ""))
        elif kind == "image":
            message.images.append(_media(part))
        elif kind == "file":
            message.files.append(_media(part))
        else:
            message.other.append(part)
    for call in data.get("tool_calls") or ():
        if isinstance(call, dict):
            message.tool_calls.append({"id": call.get("id"), "name": call.get("name"),
                                       "arguments": call.get("arguments")})
    if role == "tool":
        message.tool_call_id = data.get("tool_call_id")
        message.is_error = bool(data.get("is_error"))
        if not message.texts and message.other:
            message.result, message.other = (message.other[0] if len(message.other) == 1
                                             else message.other), []
    return message


def entries(items: list[Item]) -> list[Entry]:
    """The transcript entries of ``items``, in their order."""
    out = []
    for item in items:
        try:
            neutral = to_neutral([item])
        except Exception:  # a record its format's converter cannot read: shown raw
            neutral = []
        messages = [_message(m) for m in neutral if isinstance(m, dict)]
        out.append(Entry(item, messages, raw=not messages))
    return out
