"""The conversation an :class:`~.session.OwnstateSession` keeps between reads, and the fast
copy of JSON values it hands out. Plain data, no storage. It may touch only the model and
the SDK's item types (``agents.items``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from agents.items import TResponseInputItem

from ...model import JSON, Item


def _copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists and immutable scalars), about four times
    faster than ``copy.deepcopy`` and seven times faster than a JSON round trip: only
    dicts and lists are copied, and a container's scalars come along in one C-level
    ``copy()``."""
    kind = type(value)
    if kind is dict:
        copied = value.copy()
        for key, inner in value.items():
            inner_kind = type(inner)
            if inner_kind is dict or inner_kind is list:
                copied[key] = _copy_json(inner)
        return copied
    if kind is list:
        copied_list = value.copy()
        for index, inner in enumerate(value):
            inner_kind = type(inner)
            if inner_kind is dict or inner_kind is list:
                copied_list[index] = _copy_json(inner)
        return copied_list
    return value


@dataclass(frozen=True, slots=True)
class _History:
    """The conversation as last read, kept so that the next read fetches only what
    follows it.

    The cache trusts nothing it cannot check: the next read asks for the items from the
    last one's ``seq`` on, and uses the cache only if the first of them is still that
    item (same ``item_id``). Items are immutable and leave a session only from its end
    (``pop_item``) or all at once (``clear``, deleting the session), and item ids are
    never reused, so then every cached item is still stored, in the same place. Anything
    else (a pop by someone else, a clear, the session made again) sends the read down the
    full path. A conversation holding another framework's items is never cached. The
    data is never handed out: callers get copies, so nothing they do to them reaches the
    cache. A ``_History`` is never changed once made.
    """

    data: list[dict[str, JSON]]
    ids: list[tuple[int, str]]  # (seq, item_id) of each item

    @property
    def last(self) -> tuple[int, str]:
        return self.ids[-1] if self.ids else (0, "")

    @classmethod
    def of(cls, items: Sequence[Item]) -> _History:
        return cls([item.data for item in items], [(i.seq, i.item_id) for i in items])

    def extended(self, items: Sequence[Item]) -> _History:
        if not items:
            return self
        return _History(self.data + [item.data for item in items],
                        self.ids + [(i.seq, i.item_id) for i in items])

    def newest(self, limit: int | None) -> list[TResponseInputItem]:
        """Copies of every item, or of the newest ``limit``, oldest first."""
        chosen = self.data if limit is None else self.data[max(len(self.data) - limit, 0):]
        return cast(list[TResponseInputItem], [_copy_json(data) for data in chosen])
