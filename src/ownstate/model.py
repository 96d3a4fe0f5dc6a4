"""The records ownstate stores, as frozen dataclasses.

These are plain values: what a backend returns and what the public handles expose. They
carry no connection and no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

__all__ = [
    "JSON",
    "Item",
    "Page",
    "SessionRecord",
    "SessionStoreRecord",
]

#: A JSON value as Python builds it: dict, list, str, int, float, bool or None.
JSON = Any

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SessionStoreRecord:
    """A named, tenant-scoped container of sessions."""

    tenant: str
    name: str
    create_time: datetime


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session as stored.

    ``actor_id`` groups sessions (a user, a customer) and grants nothing; it never changes.
    ``parent_session_id`` is set once, when the session is made by :meth:`fork`;
    ``root_session_id`` is the first ancestor (the session itself when it has no parent).
    ``metadata`` holds string labels and may be updated.
    """

    tenant: str
    store: str
    session_id: str
    actor_id: str
    parent_session_id: str | None
    root_session_id: str
    metadata: dict[str, str]
    create_time: datetime
    last_activity_time: datetime


@dataclass(frozen=True, slots=True)
class Item:
    """One entry of a session's ordered history.

    ``seq`` numbers a session's items 1, 2, 3, ... with no gap at the time of append; it
    is the order of the history and does not depend on a clock. ``data`` is the JSON the
    caller appended, unchanged. ``format`` names the shape of ``data`` (for example
    ``openai.responses``). The remaining fields are derived from ``data`` when its shape
    says them, else ``None``; they exist so audit and analytics are plain SQL.
    """

    item_id: str
    session_id: str
    seq: int
    create_time: datetime
    data: JSON
    format: str
    role: str | None = None
    type: str | None = None
    tool_name: str | None = None
    model: str | None = None
    in_tokens: int | None = None
    out_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing. ``next_page_token`` is ``None`` on the last page."""

    items: list[T] = field(default_factory=list)
    next_page_token: str | None = None
