"""Decoding JSON text that ownstate stored: the hot loops (replays, exports, restores) read
a great many small values, and ``json.loads`` spends half its time on ~500-byte values in
its per-call Python layers. It may touch only the standard library: nothing else of
ownstate's and no outside library."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["decode_json"]

_scan_once: Callable[[str, int], tuple[Any, int]] = (
    json.JSONDecoder().scan_once)  # type: ignore[attr-defined]


def decode_json(text: str) -> Any:
    """``json.loads(text)``, minus its per-call Python layers; anything unusual (leading
    or trailing text, bad JSON) goes to json.loads."""
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value
