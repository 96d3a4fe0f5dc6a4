"""A thread's message history by reference: LangGraph's messages channel as session items.

The messages channel holds the whole conversation, and LangGraph's savers store all of it
at every step. Here each message is appended once to the thread's session as a neutral
message item (:mod:`ownstate.formats.langchain`), and a checkpoint stores a *reference*:
a list of segments, each either a run of consecutive item seqs or one message kept inline.

- The usual step (the list grew at the end) is one segment, ``["r", 1, n, key1, keyn]``,
  however long the conversation.
- A list that is not an extension of the last one (a message removed, a summary in front)
  is the runs of seqs that remain, in the new order.
- A message that replaces a stored one under the same id (an edit) is kept inline in the
  checkpoint (``["m", type, bytes]``, LangGraph's serializer), so the session holds the
  conversation as it happened and every checkpoint reads back exactly as it was written.

``key1``/``keyn`` are the first characters of the message ids at both ends of a run. A
session's items change only at the end (pop, clear), so if both ends still match, the
whole run does; otherwise the reference is stale and reading it raises instead of
returning the wrong messages.

Each saver keeps, per thread, the messages it has read or written (by seq, by message id
and by object identity), so a step costs the new messages, not the whole history. The
cached message objects are handed to LangGraph as they are: LangGraph's reducers build new
lists and never change a message in place, and neither must a node.

It may touch the public API, the error tree, the model, LangChain messages
(:mod:`ownstate.formats.langchain`, ``langchain_core``) and LangGraph's serializer; never a
backend.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...api import AsyncSession
from ...errors import InvalidInput, ItemNotFound
from ...formats.langchain import FORMAT, item_to_message, message_to_item
from ...model import Item

__all__ = ["History", "Staged", "is_history"]

_KEY_CHARS = 12
# The attributes whose identity tells whether a cached message object was changed since.
_WATCHED = ("content", "id", "name", "additional_kwargs", "response_metadata")


def is_history(value: Any) -> bool:
    """Whether a channel value is a message list that can be stored by reference."""
    # by the messages' classes (a handful), not each message: asked at every put, of the
    # whole conversation, and isinstance of a message class goes through ABCMeta
    return isinstance(value, list) and all(issubclass(kind, BaseMessage)
                                           for kind in set(map(type, value)))


def _snapshot(message: BaseMessage) -> tuple[Any, ...]:
    return (*(getattr(message, name, None) for name in _WATCHED),
            getattr(message, "tool_calls", None))


@dataclass
class History:
    """One thread's mirrored messages, as this process knows them."""

    serde: SerializerProtocol
    page_size: int
    by_seq: dict[int, tuple[str | None, BaseMessage]] = field(default_factory=dict)
    by_id: dict[str, int] = field(default_factory=dict)
    by_object: dict[int, tuple[int, BaseMessage, tuple[Any, ...]]] = field(
        default_factory=dict)
    # Messages read from other frameworks' items: kept in checkpoints, never re-appended.
    foreign: dict[int, BaseMessage] = field(default_factory=dict)
    # The last list encoded, and its reference: the next one usually extends it.
    last: tuple[list[BaseMessage], list[Any]] | None = None
    # The seq the session's next item takes, as this process last saw it (after its own
    # append); None when not known. Another writer may have appended since.
    next_seq: int | None = None

    def adopt(self, messages: Sequence[BaseMessage]) -> None:
        """Remember messages built from other frameworks' items, so that a checkpoint
        holding them keeps them itself instead of appending copies to the session."""
        for message in messages:
            self.foreign[id(message)] = message

    def forget(self) -> None:
        self.last = None
        self.next_seq = None
        self.by_seq.clear()
        self.by_id.clear()
        self.by_object.clear()

    def _remember(self, seq: int, message: BaseMessage) -> None:
        self.by_seq[seq] = (message.id, message)
        if message.id is not None:
            self.by_id[message.id] = seq
        self.by_object[id(message)] = (seq, message, _snapshot(message))

    def _seq_of(self, message: BaseMessage) -> int | None:
        known = self.by_object.get(id(message))
        if known is not None and known[1] is message and known[2] == _snapshot(message):
            return known[0]
        if message.id is not None:
            seq = self.by_id.get(message.id)
            if seq is not None and self.by_seq[seq][1] == message:
                self._remember(seq, message)
                return seq
        return None

    def _plan(self, messages: Sequence[BaseMessage]
              ) -> tuple[list[Any], list[Any], list[tuple[int, BaseMessage, dict[str, Any]]]]:
        """The segments ``messages`` extend, their slots (a seq, an inline message, or
        ``None`` for a new message) and the new messages (slot, message, item)."""
        segments: list[Any] = []
        tail: Sequence[BaseMessage] = messages
        last = self.last
        if last is not None and len(messages) >= len(last[0]) and all(
                map(operator.is_, messages, last[0])):
            segments = [list(s) for s in last[1]]
            tail = messages[len(last[0]):]
        slots: list[Any] = []
        fresh: list[tuple[int, BaseMessage, dict[str, Any]]] = []
        for message in tail:
            if id(message) in self.foreign and self.foreign[id(message)] is message:
                slots.append(["m", *self.serde.dumps_typed(message)])
                continue
            seq = self._seq_of(message)
            if seq is None and (message.id is None or message.id not in self.by_id):
                try:
                    fresh.append((len(slots), message, message_to_item(message)))
                except InvalidInput:
                    pass  # not representable as an item: kept inline below
                else:
                    slots.append(None)
                    continue
            if seq is None:
                slots.append(["m", *self.serde.dumps_typed(message)])
            else:
                slots.append(seq)
        return segments, slots, fresh

    async def encode(self, session: AsyncSession, messages: Sequence[BaseMessage]
                     ) -> list[Any]:
        """The reference for ``messages``, appending the new ones to ``session`` (one call).

        The usual list is the last one encoded plus a few messages: its prefix is matched by
        object identity and its reference extended, so a step costs its new messages."""
        segments, slots, fresh = self._plan(messages)
        if fresh:
            stored = await session.append_items([item for _, _, item in fresh],
                                                format=FORMAT)
            for (slot, message, _), item in zip(fresh, stored, strict=True):
                self._remember(item.seq, message)
                slots[slot] = item.seq
            self.next_seq = stored[-1].seq + 1
        self._extend(segments, slots)
        self.last = (list(messages), segments)
        return [list(s) for s in segments]

    def stage(self, messages: Sequence[BaseMessage], first_seq: int
              ) -> tuple[list[Any], Staged]:
        """The reference for ``messages`` with their new messages at the seqs they will
        take when appended from ``first_seq`` on, and those messages, staged: nothing here
        changes until :meth:`Staged.commit` says they were stored."""
        segments, slots, fresh = self._plan(messages)
        ids: dict[int, str | None] = {}
        for n, (slot, message, _) in enumerate(fresh):
            slots[slot] = first_seq + n
            ids[first_seq + n] = message.id
        self._extend(segments, slots, ids)
        staged = Staged(self, first_seq, [item for _, _, item in fresh],
                        [(first_seq + n, message) for n, (_, message, _) in enumerate(fresh)],
                        (list(messages), segments))
        return [list(s) for s in segments], staged

    def _extend(self, segments: list[Any], slots: list[Any],
                staged: dict[int, str | None] | None = None) -> None:
        for slot in slots:
            if isinstance(slot, int):
                last = segments[-1] if segments else None
                key = self._key(slot, staged)
                if last is not None and last[0] == "r" and last[2] + 1 == slot:
                    last[2] = slot
                    last[4] = key
                    continue
                segments.append(["r", slot, slot, key, key])
            else:
                segments.append(slot)

    def _key(self, seq: int, staged: dict[int, str | None] | None = None) -> str | None:
        """What checks that item ``seq`` is still the message a reference meant: a prefix
        of its message id (ids are random; a prefix is plenty to notice a changed item).
        ``staged``: the message ids of seqs not appended yet."""
        message_id = staged[seq] if staged and seq in staged else self.by_seq[seq][0]
        return message_id[:_KEY_CHARS] if message_id is not None else None

    async def decode(self, session: AsyncSession, segments: list[Any]) -> list[BaseMessage]:
        """The message list a reference stands for, reading only the items not yet known.

        Raises :class:`~ownstate.errors.ItemNotFound` when the session no longer holds the
        items the reference names (they were popped or cleared)."""
        for attempt in (0, 1):
            missing = [(s[1], s[2]) for s in segments
                       if s[0] == "r" and not self._holds(s[1], s[2])]
            for first, last in missing:
                await self._load(session, first, last)
            if all(self._matches(s) for s in segments if s[0] == "r"):
                break
            if attempt:
                raise ItemNotFound("the session no longer holds the messages this checkpoint "
                                   "refers to", field="messages")
            self.forget()  # the session changed under this cache: read it afresh
        out: list[BaseMessage] = []
        for segment in segments:
            if segment[0] == "r":
                by_seq = self.by_seq
                out.extend([by_seq[seq][1] for seq in range(segment[1], segment[2] + 1)])
            else:
                message = self.serde.loads_typed((segment[1], segment[2]))
                out.append(message)
        return out

    def hold(self, items: Sequence[Item]) -> None:
        """Remember the messages among ``items`` (read already, e.g. a whole session at
        once), so that :meth:`decode` reads only what they leave out."""
        for item in items:
            try:
                message = _message(item)
            except ItemNotFound:
                continue  # not a message: decode reads it, and refuses it, as it would
            self._remember(item.seq, message)

    def _holds(self, first: int, last: int) -> bool:
        by_seq = self.by_seq
        return all(map(by_seq.__contains__, range(first, last + 1)))

    def _matches(self, segment: list[Any]) -> bool:
        _, first, last, first_key, last_key = segment
        return bool(self._key(first) == first_key and self._key(last) == last_key)

    async def _load(self, session: AsyncSession, first: int, last: int) -> None:
        start = first
        while start <= last:
            while start in self.by_seq and start <= last:
                start += 1
            if start > last:
                return
            page = await session.list_items_page(
                order_by="create_time asc", after_seq=start - 1,
                page_size=min(last - start + 1, self.page_size))
            if not page.items or page.items[0].seq != start:
                raise ItemNotFound(f"the session no longer holds item seq {start} that a "
                                   "checkpoint refers to", field="messages")
            for item in page.items:
                self._remember(item.seq, _message(item))
            start = page.items[-1].seq + 1

    async def load_all(self, session: AsyncSession) -> list[BaseMessage]:
        """Every item of ``session`` that is a message, oldest first, remembered so that a
        checkpoint written from them refers to them instead of appending them again."""
        self.forget()
        out: list[BaseMessage] = []
        token = None
        while True:
            page = await session.list_items_page(order_by="create_time asc",
                                                 page_size=self.page_size, page_token=token)
            for item in page.items:
                try:
                    message = _message(item)
                except ItemNotFound:
                    continue  # not a message (a tool's raw record, a framework's event)
                self._remember(item.seq, message)
                out.append(message)
            token = page.next_page_token
            if token is None:
                return out


@dataclass
class Staged:
    """New messages of a reference made by :meth:`History.stage`, to be appended at seqs
    ``first_seq`` on (``items``, in order) by the write that stores the reference."""

    history: History
    first_seq: int
    items: list[dict[str, Any]]
    messages: list[tuple[int, BaseMessage]]
    encoded: tuple[list[BaseMessage], list[Any]]

    def commit(self) -> None:
        """They were stored: remember them at their seqs, and the list as the last one."""
        history = self.history
        for seq, message in self.messages:
            history._remember(seq, message)
        history.last = self.encoded
        history.next_seq = self.first_seq + len(self.items)


def _message(item: Item) -> BaseMessage:
    """The LangChain message an item holds: a mirrored message, or any item with a role
    and content."""
    if item.format != FORMAT and not (isinstance(item.data, dict) and "role" in item.data
                                      and "content" in item.data):
        raise ItemNotFound(f"item seq {item.seq} is not a message", field="messages")
    try:
        return item_to_message(item.data)
    except InvalidInput as exc:
        raise ItemNotFound(f"item seq {item.seq} is not a message: {exc}",
                           field="messages") from exc
