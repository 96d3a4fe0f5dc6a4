"""A new thread's checkpoint prepared as :class:`~.saver.OwnstateSaver` stores it, to be
written in bulk (:func:`ownstate.api.bulk.add_sessions`) instead of call by call.

A thread brought over from another saver is usually its newest root checkpoint and that
checkpoint's pending writes. Stored through the saver, that is a session made, the
messages appended, the thread's first run opened, the checkpoint put, and the run closed
(the graph had finished) or its writes stored and the run marked awaiting (the graph was
paused at an ``interrupt()``). :func:`prepare` computes all of it with the saver's own
code, the payload included (its message references point at the items the session will
hold, seq 1 onwards), and returns it as one :class:`~ownstate.api.bulk.BulkSession`.
Other shapes (subgraph namespaces, a run left running, a resume or an error among the
writes) give ``None``: they are stored through the saver.

:func:`read_back` is the other direction, for verifying such a batch: a thread's session
read back in bulk (:func:`ownstate.api.bulk.read_sessions`) decoded into checkpoint tuples
by the saver's own code, as ``aget_tuple`` decodes them, without a read per thread.

It may touch the saver's own modules (:mod:`._history`, :mod:`._runs`, :mod:`._threads`),
the public bulk API (``ownstate.api.bulk``), the error tree and the model, and LangGraph's
checkpoint types; never a backend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from langgraph.checkpoint.base import CheckpointTuple, get_serializable_checkpoint_metadata
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME

from ...api import AsyncSession
from ...api.bulk import BulkCheckpoint, BulkRun, BulkSession, StoredSession
from ...errors import InvalidInput, OwnstateError
from ...model import CheckpointScope
from ._history import History
from ._runs import awaiting_interrupt
from ._threads import _THREAD_LABEL, FRAMEWORK, TYPE_TAG, _finished, _holder_id, _Thread

if TYPE_CHECKING:
    from .saver import OwnstateSaver

__all__ = ["prepare", "read_back"]


class _Stored(NamedTuple):
    seq: int


class _NewSession:
    """Stands for the thread's session while it does not exist yet: what the history
    appends is kept, numbered as a new session numbers its items."""

    def __init__(self, session_id: str, actor_id: str) -> None:
        self.session_id = session_id
        self.actor_id = actor_id
        self.items: list[dict[str, Any]] = []
        self.format: str | None = None

    async def append_items(self, items: Sequence[dict[str, Any]], *,
                           format: str | None = None) -> list[_Stored]:
        if self.items and format != self.format:
            raise InvalidInput("one format per new session", field="format")
        first = len(self.items) + 1
        self.items.extend(items)
        self.format = format
        return [_Stored(first + n) for n in range(len(items))]


async def prepare(saver: OwnstateSaver, store: str, thread_id: str, session_id: str,
                  actor: str | None, labels: Mapping[str, str], t: CheckpointTuple
                  ) -> BulkSession | None:
    """The new thread ``thread_id`` holding the root checkpoint ``t`` (and its pending
    writes) as the saver would store it in ``store``, or ``None`` for a shape it does not
    cover. ``actor`` is the thread's ``user_id`` (the session's actor; ``langgraph``
    when ``None``)."""
    configurable = t.config.get("configurable") or {}
    metadata = t.metadata or {}
    step = metadata.get("step")
    if configurable.get("checkpoint_ns") or metadata.get("source") != "loop" or (
            not isinstance(step, int)):
        return None
    writes = list(t.pending_writes or ())
    channels = {w[1] for w in writes}
    if RESUME in channels or ERROR in channels:
        return None
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in writes:
        by_task.setdefault(task_id, []).append((channel, value))
    paused = [task for task, ws in by_task.items() if any(c == INTERRUPT for c, _ in ws)]
    finished = _finished(t.checkpoint)
    if (finished and writes) or (not finished and len(paused) != 1):
        return None
    checkpoint_id = str(configurable["checkpoint_id"])
    parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    config: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if parent is not None:
        config["checkpoint_id"] = parent
    if actor is not None:
        config["user_id"] = actor
    stored_metadata = get_serializable_checkpoint_metadata(
        {"configurable": config}, metadata)
    try:
        metadata_json = json.loads(json.dumps(stored_metadata, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"checkpoint metadata is not JSON: {exc}", field="metadata") from exc
    session = _NewSession(session_id, actor or saver._actor_id)
    thread = _Thread(thread_id, cast(AsyncSession, session),
                     CheckpointScope(session.actor_id, store, session_id,
                                     _holder_id(store, session_id)),
                     History(saver.serde, saver.client.limits.max_page_size))
    payload, _ = await saver._encode(thread, "", t.checkpoint,
                                     dict(t.checkpoint["channel_versions"]))
    pending = []
    # as the import stores them through the saver: task by task, the interrupt's last
    for task_id, task_writes in sorted(by_task.items(), key=lambda kv: kv[0] in paused):
        pending += saver._pending(task_writes, task_id)
    checkpoint = BulkCheckpoint(checkpoint_id, TYPE_TAG, payload, "", parent, metadata_json,
                                pending)
    if finished:
        run = BulkRun(thread.scope.run_id, FRAMEWORK, thread_id[:256], "done", step_count=1,
                      checkpoints=[checkpoint])
    else:
        run = BulkRun(thread.scope.run_id, FRAMEWORK, thread_id[:256], "awaiting_human",
                      awaiting=awaiting_interrupt(thread_id, by_task[paused[0]],
                                                  checkpoint_id),
                      requested_by=FRAMEWORK, checkpoints=[checkpoint])
    return BulkSession(session_id, session.actor_id, {**labels, _THREAD_LABEL: thread_id[:256]},
                       session.items, session.format, run)


async def read_back(saver: OwnstateSaver, store: str, thread_id: str, stored: StoredSession
                    ) -> list[CheckpointTuple | OwnstateError | None]:
    """Each checkpoint of ``stored`` (the session of thread ``thread_id`` in ``store``)
    as ``aget_tuple`` returns it, decoded by the saver from the items read with it (an
    item the reference needs that is not among them is read as ``aget_tuple`` reads it);
    ``None`` for one not found, and the error ``aget_tuple`` would raise for one it cannot
    decode. Nothing is kept in the saver's cache of threads."""
    session = stored.session
    thread = _Thread(thread_id, session,
                     CheckpointScope(session.actor_id, store, session.session_id,
                                     _holder_id(store, session.session_id)),
                     History(saver.serde, saver.client.limits.max_page_size))
    thread.history.hold(stored.items)
    out: list[CheckpointTuple | OwnstateError | None] = []
    for record in stored.checkpoints:
        if record is None:
            out.append(None)
            continue
        try:
            out.append(await saver._tuple(thread, record))
        except OwnstateError as exc:
            out.append(exc)
    return out
