"""Identifiers and timestamps.

It may touch only the standard library: nothing else of ownstate's and no outside library.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

__all__ = ["format_time", "new_id", "new_ids", "now", "now_unless", "parse_time"]


def new_id(prefix: str) -> str:
    """A unique id with a readable prefix, e.g. ``itm_01a228beb803afe83fc68cee5d23f96a``.

    32 hex digits, like a UUID: 48 bits of milliseconds since the epoch, then 80 random
    bits (the UUIDv7 layout). Ids made one after another sort one after another, so each
    insert lands at the end of a B-tree index instead of on a random page of it.
    """
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


def new_ids(prefix: str, count: int) -> list[str]:
    """``count`` ids as :func:`new_id` makes them, from one reading of the clock and one
    read of random bytes (an append makes one per item)."""
    head = f"{prefix}_{time.time_ns() // 1_000_000:012x}"
    tail = os.urandom(10 * count).hex()
    return [head + tail[i:i + 20] for i in range(0, 20 * count, 20)]


def now() -> datetime:
    return datetime.now(UTC)


def now_unless(*moments: datetime | None) -> tuple[datetime, ...]:
    """The moments given, each None replaced by one reading of :func:`now`."""
    if all(m is not None for m in moments):
        return tuple(m for m in moments if m is not None)
    current = now()
    return tuple(current if m is None else m for m in moments)


def format_time(moment: datetime) -> str:
    """Fixed-width UTC ISO 8601 text, so stored times sort as strings."""
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S.%f}Z"


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)
