"""The sessions port: session stores, sessions and their items.

It may touch the search port, the embeddings, JSON decoding (``ownstate._jsontext``), the
model and errors, and no datastore: each backend implements it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from ..._jsontext import decode_json
from ...embeddings import Embedding
from ...errors import LimitExceeded
from ...model import Item, ItemHit, SessionRecord, SessionStoreRecord
from .search import TextQuery, item_text

__all__ = ["NewItem", "SessionOrder", "SessionPort", "changed_labels", "forked_record"]

SessionOrder = Literal["create_time", "last_activity_time"]


class NewItem:
    """An item ready to store: validated, encoded and with its columns derived.

    ``text``, what the item is found by (:func:`~ownstate.backends.ports.search.item_text`),
    is worked out from ``data_json`` the first time it is read, so a store that does not
    index its items (and a remote server, which indexes them itself) never pays for it.
    ``data`` is ``data_json`` decoded, once: a backend returns it as the appended
    :class:`~ownstate.model.Item`'s data, a value nobody else holds. An append gives it
    ready made where it has a copy equal to that (see ``Limits.encode_items_copied``).
    """

    __slots__ = ("_data", "_text", "data_json", "embedding", "format", "in_tokens", "item_id",
                 "model", "out_tokens", "role", "tool_name", "type")

    def __init__(self, item_id: str, data_json: str, format: str, role: str | None,
                 type: str | None, tool_name: str | None, model: str | None,
                 in_tokens: int | None, out_tokens: int | None, text: str | None = None,
                 embedding: Embedding | None = None, data: Any = None) -> None:
        self.item_id = item_id
        self.data_json = data_json
        self.format = format
        self.role = role
        self.type = type
        self.tool_name = tool_name
        self.model = model
        self.in_tokens = in_tokens
        self.out_tokens = out_tokens
        #: its vector, when the client has an embedder: stored in the same transaction
        self.embedding = embedding
        self._text = text
        #: ``data_json`` decoded, or a copy of the item equal to that; None: not yet
        self._data: Any = data

    def __repr__(self) -> str:
        return f"NewItem({self.item_id!r}, {self.data_json!r}, {self.format!r})"

    @property
    def data(self) -> Any:
        if self._data is None:  # an item is a JSON object, never null
            self._data = decode_json(self.data_json)
        return self._data

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = item_text(self.data)
        return self._text

    def with_embedding(self, embedding: Embedding | None) -> NewItem:
        """This item with ``embedding`` as its vector."""
        return NewItem(self.item_id, self.data_json, self.format, self.role, self.type,
                       self.tool_name, self.model, self.in_tokens, self.out_tokens,
                       self._text, embedding, self._data)


def forked_record(parent: SessionRecord, new_session_id: str, now: datetime) -> SessionRecord:
    """The record of the session that :meth:`SessionPort.fork_session` makes from ``parent``:
    the parent's actor, labels and root, the parent as its parent, made (and last active)
    at ``now``."""
    return SessionRecord(
        tenant=parent.tenant, store=parent.store, session_id=new_session_id,
        actor_id=parent.actor_id, parent_session_id=parent.session_id,
        root_session_id=parent.root_session_id, metadata=dict(parent.metadata),
        create_time=now, last_activity_time=now)


def changed_labels(labels: Mapping[str, str], changes: Mapping[str, str | None],
                   max_labels: int) -> dict[str, str]:
    """A session's metadata labels after ``changes`` (a value of ``None`` removes its key);
    :class:`~ownstate.errors.LimitExceeded` when more than ``max_labels`` would remain."""
    changed = dict(labels)
    for key, value in changes.items():
        if value is None:
            changed.pop(key, None)
        else:
            changed[key] = value
    if len(changed) > max_labels:
        raise LimitExceeded(f"at most {max_labels} metadata labels", field="metadata",
                            limit=max_labels, actual=len(changed))
    return changed


class SessionPort(ABC):
    """Storage for session stores, sessions and items."""

    # session stores --------------------------------------------------------------------

    @abstractmethod
    async def create_store(self, tenant: str, name: str, now: datetime,
                           owner: str | None = None, index_items: bool = True,
                           ) -> SessionStoreRecord:
        """Create the store and, in the same transaction, its grants: none left over from
        an earlier store of this name, and ``owner``'s ``OWNER`` level when one is named
        (see :class:`~ownstate.backends.ports.access.AccessPort`). Either all of it is
        stored or nothing is. With ``index_items`` False, its items are never indexed
        for :meth:`search_items`.

        Raises AlreadyExists.
        """

    @abstractmethod
    async def get_store(self, tenant: str, name: str) -> SessionStoreRecord:
        """Raises StoreNotFound."""

    @abstractmethod
    async def list_stores(
        self, tenant: str, limit: int, after: str | None
    ) -> list[SessionStoreRecord]:
        """Stores ordered by name, strictly after ``after``."""

    @abstractmethod
    async def delete_store(self, tenant: str, name: str, force: bool) -> int:
        """Delete the store, and with ``force`` its sessions and items; returns sessions deleted.
        Its grants go in the same transaction: a store is never gone while its grants
        stay, nor stays without them.

        Raises StoreNotFound, StoreNotEmpty.
        """

    # sessions --------------------------------------------------------------------------

    @abstractmethod
    async def create_session(
        self,
        tenant: str,
        store: str,
        session_id: str,
        actor_id: str,
        metadata: Mapping[str, str],
        now: datetime,
    ) -> SessionRecord:
        """Raises StoreNotFound, AlreadyExists."""

    @abstractmethod
    async def get_session(self, tenant: str, store: str, session_id: str) -> SessionRecord:
        """Raises SessionNotFound."""

    @abstractmethod
    async def list_sessions(
        self,
        tenant: str,
        store: str,
        *,
        actor_id: str | None,
        metadata: Mapping[str, str],
        order: SessionOrder,
        descending: bool,
        limit: int,
        after: Sequence[Any] | None,
    ) -> tuple[list[SessionRecord], list[Any] | None]:
        """Up to ``limit`` sessions after the cursor, and the cursor of the last one returned.

        Cursors are stable under concurrent additions: paging never repeats or skips a
        session that existed when the listing began. Raises StoreNotFound.
        """

    @abstractmethod
    async def update_metadata(
        self, tenant: str, store: str, session_id: str, changes: Mapping[str, str | None],
        max_labels: int,
    ) -> SessionRecord:
        """Set labels (``None`` removes one). Raises SessionNotFound, LimitExceeded."""

    @abstractmethod
    async def delete_session(self, tenant: str, store: str, session_id: str, force: bool) -> int:
        """Delete the session (with ``force``: and its descendants); returns sessions deleted.

        Raises SessionNotFound, HasChildren.
        """

    @abstractmethod
    async def fork_session(
        self,
        tenant: str,
        store: str,
        session_id: str,
        new_session_id: str,
        up_to_item_id: str | None,
        now: datetime,
    ) -> SessionRecord:
        """Copy the session's items (up to and including ``up_to_item_id``) into a child.

        The copies keep ``seq``, ``create_time`` and ``data`` and get new item ids.
        Raises SessionNotFound, ItemNotFound, AlreadyExists.
        """

    # items -----------------------------------------------------------------------------

    @abstractmethod
    async def append_items(
        self,
        tenant: str,
        store: str,
        session_id: str,
        items: Sequence[NewItem],
        idempotency: tuple[str, str] | None,
        now: datetime,
    ) -> list[Item]:
        """Append all items or none, in order, with the next gapless ``seq`` values.

        ``idempotency`` is ``(key, request_hash)``: a key seen before with the same hash
        returns the first call's items and writes nothing; with another hash it raises
        IdempotencyKeyReused. Raises SessionNotFound.
        """

    @abstractmethod
    async def list_items(
        self,
        tenant: str,
        store: str,
        session_id: str,
        *,
        descending: bool,
        limit: int,
        after_seq: int | None,
    ) -> list[Item]:
        """Items ordered by ``seq``, strictly after ``after_seq``. Raises SessionNotFound."""

    @abstractmethod
    async def get_item(self, tenant: str, store: str, session_id: str, item_id: str) -> Item:
        """Raises SessionNotFound, ItemNotFound."""

    @abstractmethod
    async def pop_item(self, tenant: str, store: str, session_id: str,
                       now: datetime) -> Item | None:
        """Remove and return the newest item, or ``None`` when empty. Raises SessionNotFound."""

    @abstractmethod
    async def clear_items(self, tenant: str, store: str, session_id: str, now: datetime) -> int:
        """Remove every item; returns how many. Raises SessionNotFound."""

    @abstractmethod
    async def search_items(
        self,
        tenant: str,
        query: TextQuery,
        *,
        stores: Sequence[str] | None,
        actor_id: str | None,
        session_id: str | None,
        limit: int,
    ) -> list[ItemHit]:
        """Items of the tenant holding at least one of ``query.terms``, in ``stores`` (None:
        every store), of sessions of ``actor_id`` and of ``session_id`` when given, best
        first by BM25 score, then by store, session id and seq; at most ``limit``. Items
        of stores created with ``index_items=False`` are not found."""
