"""One session's handle (:class:`AsyncSession`): its record and every operation on its
history (append, list, pop, clear, fork, delete, the converted history).

It may touch the backend's session and item operations through its scope, the limits and
the format converters; it knows nothing of stores, runs or assets (which import it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from .. import _ids
from .. import limits as _validate
from .._tokens import decode_token, encode_token
from ..backends import NewItem
from ..errors import InvalidInput
from ..formats.derive import derived_row, infer_format
from ..formats.neutral import check_format, convert
from ..model import JSON, Item, Page, SessionRecord
from . import _semantic
from ._paging import AsyncPager, order_key, token_position
from ._scope import Scope as _Scope

__all__ = ["AsyncSession", "new_items"]

_ITEM_ORDERS = {"create_time desc": True, "create_time asc": False}


def new_items(scope: _Scope, items: Sequence[dict[str, JSON]],
              format: str | None) -> list[NewItem]:
    """``items`` checked, encoded, given ids and their derived columns, as an append stores
    them (``format`` for all of them, else inferred per item); without their vectors.

    Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.LimitExceeded`.
    """
    encoded, copies = scope.limits.encode_items_copied(items)
    fixed_format = _validate.item_format(format)
    return [NewItem(item_id, text, fixed_format or infer_format(data), *derived_row(data),
                    None, None, copy)
            for item_id, data, text, copy in zip(_ids.new_ids("itm", len(encoded)), items,
                                                 encoded, copies, strict=True)]


class AsyncSession:
    """One session: its record as last read, and every operation on its history.

    Attribute values are a snapshot from when the handle was made or last refreshed;
    operations always act on what is stored now. A handle from ``session_stores.session()``
    has read nothing yet: only ``store`` and ``session_id`` are known until ``refresh()``.
    """

    def __init__(self, scope: _Scope, record: SessionRecord | None, *,
                 store: str | None = None, session_id: str | None = None) -> None:
        self._scope = scope
        self._record = record
        self._store = record.store if record is not None else str(store)
        self._session_id = record.session_id if record is not None else str(session_id)

    def __repr__(self) -> str:
        return f"<Session {self._store}/{self._session_id}>"

    def _read(self) -> SessionRecord:
        if self._record is None:
            raise InvalidInput("this session handle has not read the session yet; "
                               "call refresh() first", field="session",
                               store=self._store, session_id=self._session_id)
        return self._record

    @property
    def record(self) -> SessionRecord:
        """The stored record as last read.

        Raises :class:`~ownstate.errors.InvalidInput` on a handle that has read nothing yet
        (as do the attributes below other than ``store`` and ``session_id``).
        """
        return self._read()

    @property
    def store(self) -> str:
        """The name of the session store this session lives in."""
        return self._store

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def actor_id(self) -> str:
        return self._read().actor_id

    @property
    def parent_session_id(self) -> str | None:
        return self._read().parent_session_id

    @property
    def root_session_id(self) -> str:
        return self._read().root_session_id

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._read().metadata)

    @property
    def create_time(self) -> datetime:
        return self._read().create_time

    @property
    def last_activity_time(self) -> datetime:
        return self._read().last_activity_time

    async def refresh(self) -> AsyncSession:
        """Re-read the stored record into this handle and return it.

        Raises :class:`~ownstate.errors.SessionNotFound` if the session was deleted.
        """
        s = self._scope
        self._record = await s.backend.get_session(s.tenant, self.store, self.session_id)
        return self

    async def update_metadata(self, labels: Mapping[str, str | None], *,
                              max_labels: int | None = None) -> AsyncSession:
        """Set metadata labels; a value of ``None`` removes that label. Returns this handle.

        ``max_labels`` refuses an update that would leave more labels than that: a bound
        of the caller's own, applied with ``Limits.max_metadata_labels`` (the smaller
        wins); the count after the update is only known where it is stored.

        Raises :class:`~ownstate.errors.InvalidInput` for a label that is not a string,
        :class:`~ownstate.errors.LimitExceeded` past either bound,
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        if not isinstance(labels, Mapping):
            raise InvalidInput("labels must be a mapping", field="metadata")
        limits = s.limits
        if max_labels is not None:
            bound = _validate.int64(max_labels, field="max_labels", minimum=1)
            if bound < limits.max_metadata_labels:
                limits = replace(limits, max_metadata_labels=bound)
        to_set = limits.metadata({k: v for k, v in labels.items() if v is not None})
        to_remove = [k for k, v in labels.items() if v is None]
        for key in to_remove:  # a key named for removal obeys the same naming rules
            if not isinstance(key, str) or not _validate.LABEL_KEY_RE.fullmatch(key):
                raise InvalidInput(f"metadata label {key!r} must be 1-64 chars of "
                                   "[A-Za-z0-9_.:/-]", field="metadata")
        changes: dict[str, str | None] = dict.fromkeys(to_remove)
        changes.update(to_set)
        self._record = await s.backend.update_metadata(
            s.tenant, self.store, self.session_id, changes, limits.max_metadata_labels)
        return self

    async def append_items(
        self,
        items: Sequence[dict[str, JSON]],
        *,
        idempotency_key: str | None = None,
        format: str | None = None,
    ) -> list[Item]:
        """Append ``items`` to the end of the history, all or none, in the order given.

        Each item is a JSON object stored exactly as given. ``format`` names its shape
        (``openai.responses``, ``langchain``, ...); by default it is inferred per item.
        With ``idempotency_key``, a retry of the same call writes nothing and returns the
        first call's items (those of them still stored: items popped or cleared since then
        are not returned).

        Raises :class:`~ownstate.errors.InvalidInput` (not a list of JSON objects, not
        JSON-serialisable), :class:`~ownstate.errors.LimitExceeded` (item or batch too
        large), :class:`~ownstate.errors.IdempotencyKeyReused`,
        :class:`~ownstate.errors.SessionNotFound`, :class:`~ownstate.errors.EmbedderMismatch`
        (the client's embedder is not the model of the store's item vectors).
        """
        s = self._scope
        key = s.limits.idempotency_key(idempotency_key)
        rows = new_items(s, items, format)
        idempotency = None
        if key is not None:
            digest = hashlib.sha256()
            for row in rows:
                digest.update(row.format.encode())
                digest.update(b"\x00")
                digest.update(row.data_json.encode())
                digest.update(b"\x01")
            idempotency = (key, digest.hexdigest())
        rows = await _semantic.items_with_vectors(s, rows)
        return await s.backend.append_items(s.tenant, self.store, self.session_id, rows,
                                            idempotency, _ids.now())

    async def list_items_page(
        self,
        *,
        order_by: str = "create_time desc",
        page_size: int | None = None,
        page_token: str | None = None,
        after_seq: int | None = None,
    ) -> Page[Item]:
        """One page of items, newest first by default (``order_by="create_time asc"`` for
        replay order).

        ``after_seq`` starts the page after the item with that ``seq`` (items with a larger
        one in ascending order, a smaller one in descending order), as a page token would;
        give one or the other.

        Raises :class:`~ownstate.errors.InvalidInput` (bad order, malformed or foreign
        page token, both ``page_token`` and ``after_seq``, ``after_seq`` not an integer
        >= 0), :class:`~ownstate.errors.LimitExceeded` (page_size out of range),
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        order = order_key(order_by, _ITEM_ORDERS)
        size = s.limits.page_size(page_size)
        scope = f"items\x00{s.tenant}\x00{self.store}\x00{self.session_id}\x00{order}"
        after = None
        if after_seq is not None:
            if page_token is not None:
                raise InvalidInput("give page_token or after_seq, not both", field="after_seq")
            after = _validate.int64(after_seq, field="after_seq", minimum=0)
        if page_token is not None:
            (after,) = token_position(decode_token(page_token, scope), 1)
            if not isinstance(after, int):
                raise InvalidInput("page_token is malformed", field="page_token")
        found = await s.backend.list_items(
            s.tenant, self.store, self.session_id, descending=_ITEM_ORDERS[order],
            limit=size + 1, after_seq=after)
        more = len(found) > size
        del found[size:]
        token = encode_token(scope, [found[-1].seq]) if more else None
        return Page(found, token)

    async def list_items_after(
        self,
        *,
        order_by: str = "create_time desc",
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Item]:
        """Up to ``limit`` items (``Limits.default_page_size`` by default) after the item
        with ``after_seq`` (from the start without it), in ``order_by`` order: a keyset
        listing, whose next slice starts after the last item's ``seq``. ``limit`` may be
        one more than ``Limits.max_page_size``, so that a caller paging by pages learns
        whether another follows.

        Raises :class:`~ownstate.errors.InvalidInput` (bad order or ``after_seq``),
        :class:`~ownstate.errors.LimitExceeded` (``limit`` out of range),
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        order = order_key(order_by, _ITEM_ORDERS)
        size = s.limits.keyset_size(limit)
        after = (_validate.int64(after_seq, field="after_seq", minimum=0)
                 if after_seq is not None else None)
        return await s.backend.list_items(
            s.tenant, self.store, self.session_id, descending=_ITEM_ORDERS[order],
            limit=size, after_seq=after)

    def list_items(
        self,
        *,
        order_by: str = "create_time desc",
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> AsyncPager[Item]:
        """Every item from ``page_token`` on, fetched a page at a time (``page_size`` per
        fetch; by default the largest page allowed). Newest first unless
        ``order_by="create_time asc"``.

        Raises as :meth:`list_items_page`, when iteration starts.
        """
        size = page_size if page_size is not None else self._scope.limits.max_page_size
        return AsyncPager(
            lambda token: self.list_items_page(order_by=order_by, page_size=size,
                                               page_token=token),
            page_token,
        )

    async def history(self, as_format: str = "ownstate.message") -> list[dict[str, JSON]]:
        """The whole history, oldest first, in the shape of ``as_format``, whichever
        frameworks wrote it: ``"openai.responses"`` (Responses input items),
        ``"langchain"`` (``message_to_dict`` objects), ``"adk.event"`` (ADK event JSON),
        ``"claude.transcript"`` (transcript entries) or ``"ownstate.message"`` (neutral
        messages, the default). Items already in that shape come back as stored; others are
        converted through the neutral message (see :mod:`ownstate.formats.neutral`), and
        items that are not messages (a framework's own bookkeeping) are left out.

        Raises :class:`~ownstate.errors.InvalidInput` (unknown format, or an item its
        format's converter cannot read), :class:`~ownstate.errors.SessionNotFound`.
        """
        check_format(as_format)  # before anything is read
        items: list[Item] = []
        token = None
        while True:
            page = await self.list_items_page(order_by="create_time asc", page_token=token,
                                              page_size=self._scope.limits.max_page_size)
            items.extend(page.items)
            token = page.next_page_token
            if token is None:
                return convert(items, as_format)

    async def history_page(
        self,
        as_format: str = "ownstate.message",
        *,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> Page[dict[str, JSON]]:
        """One page of :meth:`history` and the token of the next, ``None`` on the last.

        A page holds at most ``page_size`` entries (``Limits.default_page_size`` by
        default) and stops before the entry that would take its compact JSON past
        ``Limits.max_page_bytes``, but always holds at least one. Conversions read the
        whole history (a message in one shape can be several items in another), so each
        page is cut from the history as it stands when that page is read.

        Raises as :meth:`history`, and :class:`~ownstate.errors.InvalidInput` (malformed
        or foreign page token), :class:`~ownstate.errors.LimitExceeded` (``page_size``).
        """
        s = self._scope
        check_format(as_format)
        size = s.limits.page_size(page_size)
        scope = f"history\x00{s.tenant}\x00{self.store}\x00{self.session_id}\x00{as_format}"
        start = 0
        if page_token is not None:
            (start,) = token_position(decode_token(page_token, scope), 1)
            if isinstance(start, bool) or not isinstance(start, int) or start < 0:
                raise InvalidInput("page_token is malformed", field="page_token")
        entries = (await self.history(as_format))[start:]
        taken = used = 0
        for entry in entries[:size]:
            length = _validate.utf8_size(_validate.encode_json(entry, field="history"),
                                         field="history")
            if taken and used + length > s.limits.max_page_bytes:
                break
            taken, used = taken + 1, used + length
        more = len(entries) > taken
        return Page(entries[:taken], encode_token(scope, [start + taken]) if more else None)

    async def get_item(self, item_id: str) -> Item:
        """One item by id. Raises :class:`~ownstate.errors.ItemNotFound`,
        :class:`~ownstate.errors.SessionNotFound`."""
        s = self._scope
        if not isinstance(item_id, str) or not item_id:
            raise InvalidInput("item_id must be a non-empty string", field="item_id")
        return await s.backend.get_item(s.tenant, self.store, self.session_id, item_id)

    async def pop_item(self) -> Item | None:
        """Remove and return the newest item; ``None`` when the session is empty.

        Raises :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        return await s.backend.pop_item(s.tenant, self.store, self.session_id, _ids.now())

    async def clear(self) -> int:
        """Remove every item (the session itself stays); returns how many were removed.

        Raises :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        return await s.backend.clear_items(s.tenant, self.store, self.session_id, _ids.now())

    async def fork(
        self, *, up_to_item_id: str | None = None, session_id: str | None = None
    ) -> AsyncSession:
        """A new session holding a copy of this one's items, up to and including
        ``up_to_item_id`` (all of them by default).

        The child has the same actor and metadata, ``parent_session_id`` set to this session
        and the same ``root_session_id``. Raises :class:`~ownstate.errors.ItemNotFound`,
        :class:`~ownstate.errors.AlreadyExists`, :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        child_id = (_validate.session_id(session_id) if session_id is not None
                    else _ids.new_id("ses"))
        if up_to_item_id is not None and (not isinstance(up_to_item_id, str) or not up_to_item_id):
            raise InvalidInput("up_to_item_id must be a non-empty string", field="up_to_item_id")
        record = await s.backend.fork_session(s.tenant, self.store, self.session_id, child_id,
                                              up_to_item_id, _ids.now())
        return AsyncSession(s, record)

    async def delete(self, *, force: bool = False) -> int:
        """Delete this session and its items; returns how many sessions were deleted.

        Refused with :class:`~ownstate.errors.HasChildren` while forks of it exist, unless
        ``force=True``, which deletes every descendant too. Memory facts are never touched.
        Raises :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        return await s.backend.delete_session(s.tenant, self.store, self.session_id, force)
