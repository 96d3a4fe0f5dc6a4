"""Identifiers and timestamps."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

__all__ = ["format_time", "new_id", "now", "parse_time"]


def new_id(prefix: str) -> str:
    """A random id with a readable prefix, e.g. ``itm_3f2a...``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def now() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """Fixed-width UTC ISO 8601 text, so stored times sort as strings."""
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S.%f}Z"


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)
