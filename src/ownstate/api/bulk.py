"""Many new sessions at once, each with its items, its run and the run's checkpoints.

An importer writes thousands of sessions that each hold what a handful of calls would
store: ``store.add``, ``append_items``, ``runs.open_run`` then ``close_run`` or
``mark_awaiting``, ``checkpoints.put`` and ``put_writes``. :func:`add_sessions` takes a
batch of them and, on a backend that declares
:attr:`~ownstate.backends.Capability.BULK_SESSIONS` (see :func:`supports_bulk`), stores
the batch in one transaction. Everything is validated and encoded by the same rules
those calls apply, so what is stored reads back exactly as if it had been made call by
call.

Each session comes out one of three ways, returned in order: ``True``, stored whole;
``False``, a session of that id was stored already and nothing of the bundle was
written; an :class:`~ownstate.errors.OwnstateError`, the bundle was refused (invalid, or
refused by the datastore) and nothing of it was written, while the others were stored.
:class:`~ownstate.errors.BackendUnavailable` is raised, not returned.

:func:`read_sessions` reads such a batch back for verification: each session with every
item, its newest run and the checkpoints asked for by id, as the per-session reads return
them. A backend that declares :attr:`~ownstate.backends.Capability.BULK_READS` reads the
batch in a few queries over one snapshot; any other is read session by session.

It may touch the backend through the scope and its bulk port
(``ownstate.backends.ports.bulk``), the validation and encoding of the public handles
(``aio``, ``session``, ``runs``, ``checkpoints``), search text and derived item columns
(``ownstate.formats.derive``), ids, the error tree, the limits and the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from .. import _ids
from .. import limits as _validate
from ..backends import Capability, NewItem
from ..backends.ports.bulk import (
    CheckpointKey,
    NewCheckpointRow,
    NewRunRow,
    NewSessionBundle,
    StoredSessionBundle,
)
from ..backends.ports.search import item_text
from ..errors import (
    BackendUnavailable,
    InvalidInput,
    LimitExceeded,
    OwnstateError,
    RunNotFound,
    SessionNotFound,
)
from ..formats.derive import derived_row, infer_format
from ..model import (
    CLOSED_RUN_STATUSES,
    JSON,
    CheckpointRecord,
    CheckpointScope,
    Item,
    PendingWrite,
    Run,
)
from ._scope import Scope
from .aio import AsyncClient, AsyncSessionStore
from .checkpoints import _metadata_json, _type_tag, _writes
from .checkpoints import _text as _name
from .runs import _framework
from .runs import _text as _key
from .session import AsyncSession

__all__ = ["BulkCheckpoint", "BulkRun", "BulkSession", "CheckpointKey", "StoredSession",
           "add_sessions", "read_sessions", "supports_bulk"]


@dataclass(frozen=True, slots=True)
class BulkCheckpoint:
    """A checkpoint of the bundle's run, as :meth:`AsyncCheckpoints.put` takes it, with
    the pending writes :meth:`AsyncCheckpoints.put_writes` would store after it."""

    checkpoint_id: str
    type_tag: str
    payload: bytes
    namespace: str = ""
    parent_checkpoint_id: str | None = None
    metadata: Mapping[str, JSON] | None = None
    writes: Sequence[PendingWrite] = ()


@dataclass(frozen=True, slots=True)
class BulkRun:
    """The session's run as its calls leave it: opened (leased to an owner when
    ``leased``, fencing token 1, as ``open_run(owner=...)`` does; else unleased, token 0)
    and then closed with ``status`` (``done``, ``failed``, ``cancelled``: its lease
    released, ``ended_at`` set, ``step_count`` stored) or paused (``awaiting_human``:
    ``awaiting`` stored with ``requested_at`` and ``requested_by``, as
    ``mark_awaiting`` does, its lease released)."""

    run_id: str
    framework: str
    thread_key: str | None = None
    status: str = "done"
    step_count: int | None = None
    awaiting: Mapping[str, JSON] | None = None
    requested_by: str | None = None
    leased: bool = True
    checkpoints: Sequence[BulkCheckpoint] = ()


@dataclass(frozen=True, slots=True)
class BulkSession:
    """A new session: what ``store.add`` takes, the items one ``append_items`` would
    append (with its ``format``), and at most one run."""

    session_id: str
    actor_id: str
    metadata: Mapping[str, str] | None = None
    items: Sequence[dict[str, JSON]] = ()
    item_format: str | None = None
    run: BulkRun | None = None


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A session read back by :func:`read_sessions`: its handle, every item in replay
    order (as ``list_items(order_by="create_time asc")``), its newest run (as
    ``runs.list_page(session=...)`` lists first; ``None`` when it has none) and, per key
    asked for, the checkpoint as ``checkpoints.get`` returns it (``None`` where that
    returns ``None`` or raises :class:`~ownstate.errors.RunNotFound`)."""

    session: AsyncSession
    items: Sequence[Item]
    newest_run: Run | None
    checkpoints: Sequence[CheckpointRecord | None]


def supports_bulk(client: AsyncClient) -> bool:
    """Whether :func:`add_sessions` can store through ``client``: its backend stores
    bundles in one transaction, and the client computes no item vectors (an append with
    an embedder embeds its items; a bulk write does not)."""
    return _able(client._scope)


async def add_sessions(store: AsyncSessionStore, sessions: Sequence[BulkSession]
                       ) -> list[bool | OwnstateError]:
    """Store ``sessions`` in ``store``, one transaction for the batch; see the module
    docstring for what comes back. Raises :class:`~ownstate.errors.InvalidInput` when
    the client cannot (:func:`supports_bulk`), :class:`~ownstate.errors.StoreNotFound`,
    :class:`~ownstate.errors.BackendUnavailable`."""
    s = store._scope
    if not _able(s):
        raise InvalidInput("this client cannot store sessions in bulk (see supports_bulk)",
                           field="sessions")
    moment = _ids.now()
    out: list[bool | OwnstateError] = []
    valid: list[tuple[int, NewSessionBundle]] = []
    for n, session in enumerate(sessions):
        try:
            valid.append((n, _bundle(s, session, moment)))
        except OwnstateError as exc:
            out.append(exc)
            continue
        out.append(False)
    try:
        stored = await s.backend.create_sessions(s.tenant, store.name,
                                                 [b for _, b in valid], moment)
    except BackendUnavailable:
        raise
    except OwnstateError:
        if len(valid) == 1:
            raise
        # One bundle spoiled the batch: each alone, so that only it is refused.
        for n, bundle in valid:
            try:
                [out[n]] = await s.backend.create_sessions(s.tenant, store.name, [bundle],
                                                           moment)
            except BackendUnavailable:
                raise
            except OwnstateError as exc:
                out[n] = exc
        return out
    for (n, _), made in zip(valid, stored, strict=True):
        out[n] = made
    return out


async def read_sessions(store: AsyncSessionStore,
                        wanted: Sequence[tuple[str, Sequence[CheckpointKey]]]
                        ) -> list[StoredSession | None]:
    """Per ``(session_id, checkpoint keys)`` in ``wanted``, that session of ``store`` read
    back (:class:`StoredSession`), or ``None`` when it does not exist. A key names a
    checkpoint of one of the session's runs (its actor's, as a
    :class:`~ownstate.model.CheckpointScope` of the session would).

    Raises :class:`~ownstate.errors.InvalidInput` (a malformed id),
    :class:`~ownstate.errors.StoreNotFound`, :class:`~ownstate.errors.BackendUnavailable`.
    """
    s = store._scope
    asked = [(_validate.session_id(session_id), [CheckpointKey(
        _validate.session_id(k.run_id, field="run_id"), _name(k.namespace, "namespace",
                                                               empty=True),
        _name(k.checkpoint_id, "checkpoint_id")) for k in keys])
        for session_id, keys in wanted]
    if Capability.BULK_READS in s.backend.capabilities:
        found = await s.backend.read_sessions(s.tenant, store.name, asked)
    else:
        found = [await _read_one(s, store.name, session_id, keys)
                 for session_id, keys in asked]
    return [StoredSession(AsyncSession(s, b.session), b.items, b.newest_run, b.checkpoints)
            if b is not None else None for b in found]


async def _read_one(s: Scope, store: str, session_id: str, keys: Sequence[CheckpointKey]
                    ) -> StoredSessionBundle | None:
    """One session read back through the per-session reads of the ports."""
    backend = s.backend
    try:
        record = await backend.get_session(s.tenant, store, session_id)
    except SessionNotFound:
        return None
    items: list[Item] = []
    size = s.limits.max_page_size
    while True:
        page = await backend.list_items(s.tenant, store, session_id, descending=False,
                                        limit=size, after_seq=items[-1].seq if items else None)
        items += page
        if len(page) < size:
            break
    runs, _ = await backend.list_runs(s.tenant, store=store, session_id=session_id,
                                      status=None, framework=None, limit=1, after=None)
    checkpoints: list[CheckpointRecord | None] = []
    for key in keys:
        scope = CheckpointScope(record.actor_id, store, session_id, key.run_id)
        try:
            checkpoints.append(await backend.get_checkpoint(s.tenant, scope, key.namespace,
                                                            key.checkpoint_id))
        except RunNotFound:
            checkpoints.append(None)
    return StoredSessionBundle(record, items, runs[0] if runs else None, checkpoints)


def _able(scope: Scope) -> bool:
    return Capability.BULK_SESSIONS in scope.backend.capabilities and scope.embedder is None


def _bundle(s: Scope, session: BulkSession, moment: datetime) -> NewSessionBundle:
    limits = s.limits
    if not isinstance(session, BulkSession):
        raise InvalidInput("sessions must be BulkSession values", field="sessions")
    session_id = _validate.session_id(session.session_id)
    actor = limits.actor_id(session.actor_id)
    labels = limits.metadata(session.metadata)
    items: list[NewItem] = []
    if session.items:
        encoded = limits.encode_items(session.items)
        fixed_format = _validate.item_format(session.item_format)
        for data, text in zip(session.items, encoded, strict=True):
            items.append(NewItem(_ids.new_id("itm"), text, fixed_format or infer_format(data),
                                 *derived_row(data), item_text(data)))
    run = session.run
    if run is None:
        return NewSessionBundle(session_id, actor, labels, items, None, [])
    return NewSessionBundle(session_id, actor, labels, items, _run(limits, run, moment),
                            [_checkpoint(limits, c) for c in run.checkpoints])


def _run(limits: _validate.Limits, run: BulkRun, moment: datetime) -> NewRunRow:
    run_id = _validate.session_id(run.run_id, field="run_id")
    key = _key(run.thread_key, "thread_key") if run.thread_key is not None else None
    awaiting_json = None
    if run.status == "awaiting_human":
        awaiting = run.awaiting
        if not isinstance(awaiting, Mapping) or not all(isinstance(k, str) for k in awaiting):
            raise InvalidInput("awaiting must be a JSON object (a dict with string keys)",
                               field="awaiting")
        by = run.requested_by if run.requested_by is not None else awaiting.get(
            "requested_by")
        if by is not None:
            by = _key(by, "requested_by")
        described = {**awaiting, "requested_at": _ids.format_time(moment),
                     "requested_by": by}
        awaiting_json = _validate.encode_json(described, field="awaiting")
        size = _validate.utf8_size(awaiting_json, field="awaiting")
        if size > limits.max_item_bytes:
            raise LimitExceeded(f"awaiting is {size} bytes; the limit is "
                                f"{limits.max_item_bytes}", field="awaiting",
                                limit=limits.max_item_bytes, actual=size)
    elif run.status not in CLOSED_RUN_STATUSES:
        raise InvalidInput(f"status must be awaiting_human or one of "
                           f"{', '.join(CLOSED_RUN_STATUSES)}", field="status")
    if run.step_count is not None:
        _validate.int64(run.step_count, field="step_count", minimum=0)
    closed = run.status != "awaiting_human"
    return NewRunRow(run_id, _framework(run.framework), key, run.status, moment,
                     awaiting_json, run.step_count if closed and run.step_count else 0,
                     moment, moment if closed else None, 1 if run.leased else 0)


def _checkpoint(limits: _validate.Limits, c: BulkCheckpoint) -> NewCheckpointRow:
    return NewCheckpointRow(
        _name(c.namespace, "namespace", empty=True), _name(c.checkpoint_id, "checkpoint_id"),
        (_name(c.parent_checkpoint_id, "parent_checkpoint_id")
         if c.parent_checkpoint_id is not None else None),
        _type_tag(c.type_tag), _metadata_json(c.metadata, limits),
        _validate.bytes_copy(c.payload, limits.max_checkpoint_bytes, field="payload"),
        _writes(c.writes, limits) if c.writes else [])
