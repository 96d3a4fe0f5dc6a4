"""Checkpoints, scoped to actor, session and run: the async public API (``client.checkpoints``).

It may touch the backend's checkpoint operations through its scope, and uses the fencing
token check of :mod:`ownstate.api.runs` and the item encoding of :mod:`ownstate.api.session`
(with their vectors, :mod:`ownstate.api._semantic`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from .. import _ids
from .. import limits as _validate
from ..backends import Backend, Capability
from ..backends.ports.checkpoints import Fence, NewCheckpoint, listing_scope
from ..errors import InvalidInput, LimitExceeded
from ..limits import CONTROL_RE, MAX_NAME_CHARS, TYPE_TAG_RE, Limits, bytes_copy, encode_json
from ..model import (
    CLOSED_RUN_STATUSES,
    JSON,
    CheckpointRecord,
    CheckpointScope,
    Item,
    Page,
    PendingWrite,
    RetentionPolicy,
    RetentionReport,
    Run,
    RunUsage,
)
from . import _semantic
from ._paging import keyset_page
from ._scope import Scope
from .runs import check_fencing_token as _token
from .runs import run_opening
from .session import new_items

__all__ = ["AsyncCheckpoints"]

_MAX_TASK_PATH_CHARS = 1024


def _text(value: object, field: str, *, empty: bool = False,
          longest: int = MAX_NAME_CHARS) -> str:
    """``value`` when it is a string of printable chars within the bound (and not empty,
    unless ``empty``), else :class:`InvalidInput` naming ``field``."""
    if (not isinstance(value, str) or (not value and not empty) or len(value) > longest
            or CONTROL_RE.search(value)):
        least = 0 if empty else 1
        raise InvalidInput(f"{field} must be a string of {least}-{longest} printable chars",
                           field=field)
    return value


def _scope(value: object, limits: Limits, field: str = "scope") -> CheckpointScope:
    if not isinstance(value, CheckpointScope):
        raise InvalidInput(f"{field} must be a CheckpointScope (see Run.checkpoint_scope())",
                           field=field)
    limits.actor_id(value.actor_id)
    if not isinstance(value.store, str) or not _validate.STORE_NAME_RE.fullmatch(value.store):
        raise InvalidInput(f"{field}.store must be a session store name", field=field)
    _text(value.session_id, "session_id")
    _text(value.run_id, "run_id")
    return value


def _type_tag(value: object, field: str = "type_tag") -> str:
    if not isinstance(value, str) or not TYPE_TAG_RE.fullmatch(value):
        raise InvalidInput(f"{field} must be 1-64 printable ASCII chars without spaces",
                           field=field)
    return value


def _metadata_json(value: object, limits: Limits) -> str:
    if value is None:
        return "{}"
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidInput("metadata must be a JSON object (a dict with string keys)",
                           field="metadata")
    try:
        # sorted keys: stored objects compare as text in metadata filters
        text = json.dumps(dict(value), ensure_ascii=False, allow_nan=False, sort_keys=True,
                          separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"metadata is not a JSON object: {exc}", field="metadata") from exc
    _validate.encode_json(dict(value), field="metadata")  # the shape rules of any JSON
    size = _validate.utf8_size(text, field="metadata")
    if size > limits.max_item_bytes:
        raise LimitExceeded(f"metadata is {size} bytes of JSON; the limit is "
                            f"{limits.max_item_bytes}", field="metadata",
                            limit=limits.max_item_bytes, actual=size)
    return text


def _batch(value: object, limits: Limits, field: str, of: str, things: str) -> Sequence[object]:
    """``value`` as a list (of ``of``) of at most ``Limits.max_batch_items`` ``things``."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise InvalidInput(f"{field} must be a list of {of}", field=field)
    if len(value) > limits.max_batch_items:
        raise LimitExceeded.too_many(f"{things} per call", limits.max_batch_items, len(value),
                                     field=field)
    return value


def _checkpoint(limits: Limits, checkpoint_id: object, type_tag: object, payload: object,
                namespace: object, parent_checkpoint_id: object,
                metadata: object) -> NewCheckpoint:
    return NewCheckpoint(
        namespace=_text(namespace, "namespace", empty=True),
        checkpoint_id=_text(checkpoint_id, "checkpoint_id"),
        parent_checkpoint_id=(_text(parent_checkpoint_id, "parent_checkpoint_id")
                              if parent_checkpoint_id is not None else None),
        type_tag=_type_tag(type_tag),
        payload=bytes_copy(payload, limits.max_checkpoint_bytes, field="payload"),
        metadata_json=_metadata_json(metadata, limits),
    )


def _writes(value: object, limits: Limits) -> list[PendingWrite]:
    value = _batch(value, limits, "writes", "PendingWrite", "writes")
    checked: list[PendingWrite] = []
    total = 0
    for index, write in enumerate(value):
        if not isinstance(write, PendingWrite):
            raise InvalidInput(f"write {index} must be a PendingWrite", field="writes",
                               index=index)
        if isinstance(write.index, bool) or not isinstance(write.index, int):
            raise InvalidInput(f"write {index}: index must be an integer", field="writes",
                               index=index)
        payload = bytes_copy(write.payload, limits.max_checkpoint_bytes, field="writes")
        total += len(payload)
        checked.append(PendingWrite(
            task_id=_text(write.task_id, "writes"), index=write.index,
            channel=_text(write.channel, "writes"), type_tag=_type_tag(write.type_tag, "writes"),
            payload=payload,
            task_path=_text(write.task_path, "writes", empty=True, longest=_MAX_TASK_PATH_CHARS),
        ))
    if total > limits.max_checkpoint_bytes:
        raise LimitExceeded(f"the writes are {total} bytes; the limit is "
                            f"{limits.max_checkpoint_bytes}", field="writes",
                            limit=limits.max_checkpoint_bytes, actual=total)
    return checked


def _checkpoint_ids(value: object, limits: Limits) -> list[str]:
    """The distinct ids of a list of checkpoint ids, in the order given."""
    value = _batch(value, limits, "checkpoint_ids", "checkpoint ids", "checkpoint ids")
    ids: dict[str, None] = {}
    for index, checkpoint_id in enumerate(value):
        if (not isinstance(checkpoint_id, str) or not checkpoint_id
                or len(checkpoint_id) > MAX_NAME_CHARS or CONTROL_RE.search(checkpoint_id)):
            raise InvalidInput(f"checkpoint id {index} must be a string of 1-{MAX_NAME_CHARS} "
                               "printable chars", field="checkpoint_ids", index=index)
        ids[checkpoint_id] = None
    return list(ids)


def _filter(value: object) -> dict[str, JSON]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidInput("metadata filter must be a dict with string keys", field="metadata")
    encode_json(dict(value), field="metadata")  # integers within 64 bits, as stored
    return dict(value)


def _fence(scope: CheckpointScope, fencing_token: object,
           fencing_run_id: object) -> Fence | None:
    """The lease a write is made under: ``fencing_token`` of ``fencing_run_id`` (the
    scope's run unless named), or ``None`` for an unfenced write."""
    token = _token(fencing_token)
    if token is None:
        if fencing_run_id is not None:
            raise InvalidInput("fencing_run_id needs a fencing_token", field="fencing_run_id")
        return None
    run_id = (scope.run_id if fencing_run_id is None
              else _text(fencing_run_id, "fencing_run_id"))
    return Fence(run_id, token)


def _ending(backend: Backend, fence: Fence | None, end_run: object,
            step_count: object) -> tuple[Fence, str]:
    """The fence and status of a checkpoint write that ends its fencing run."""
    if Capability.CHECKPOINT_ENDS_RUN not in type(backend).capabilities:
        raise InvalidInput(f"{type(backend).__name__} cannot end a run with a checkpoint "
                           "(it does not declare Capability.CHECKPOINT_ENDS_RUN)",
                           field="end_run")
    if not isinstance(end_run, str) or end_run not in CLOSED_RUN_STATUSES:
        raise InvalidInput(f"end_run must be one of {', '.join(CLOSED_RUN_STATUSES)}",
                           field="end_run")
    if step_count is not None:
        _validate.int64(step_count, field="step_count", minimum=0)
    if fence is None:
        raise InvalidInput("end_run needs a fencing_token: it ends the fencing run",
                           field="end_run")
    return fence, end_run


def _policy(value: object) -> RetentionPolicy:
    if not isinstance(value, RetentionPolicy):
        raise InvalidInput("policy must be a RetentionPolicy", field="policy")
    keep = value.keep_last
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise InvalidInput("keep_last must be a positive integer or None", field="keep_last")
    age = value.max_age_seconds
    if age is not None and (isinstance(age, bool) or not isinstance(age, (int, float))
                            or not math.isfinite(age) or age <= 0):
        raise InvalidInput("max_age_seconds must be a positive number or None",
                           field="max_age_seconds")
    if not isinstance(value.drop_when_run_ends, bool):
        raise InvalidInput("drop_when_run_ends must be a bool", field="drop_when_run_ends")
    return value


def _listing(scope: object, limits: Limits, namespace: object, metadata: object,
             before: object) -> tuple[CheckpointScope, str | None, dict[str, JSON], str | None]:
    """The checked scope and filters of a listing."""
    run = _scope(scope, limits)
    ns = _text(namespace, "namespace", empty=True) if namespace is not None else None
    mark = _text(before, "before") if before is not None else None
    return run, ns, _filter(metadata), mark


class AsyncCheckpoints:
    """Framework checkpoints: ``client.checkpoints``.

    Every call names the full scope of the run it touches, a
    :class:`~ownstate.model.CheckpointScope` (actor, store, session, run; the tenant is the
    client's), and all of it is applied where the data is read: a run that does not exist
    and a run outside the scope raise the same :class:`~ownstate.errors.RunNotFound`, with
    the same message. Payloads are opaque bytes with a type tag, stored and returned
    unchanged and never decoded. Checkpoints are disposable: deleting any of them leaves
    sessions, items, runs and memory untouched.

    The framework's writes (:meth:`put`, :meth:`put_writes`, :meth:`delete`) are fenced
    like every other run write: given the ``fencing_token`` of the lease the writer holds
    (on the scope's run, or on ``fencing_run_id``, another run of the same session), a
    write is refused with :class:`~ownstate.errors.StaleLease` once another worker has
    claimed that run and with :class:`~ownstate.errors.RunClosed` once it has ended,
    checked in the same transaction as the write, and nothing changes. A write without a
    token is not fenced (for operators and single writers) and works on ended runs too.
    """

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    async def put(
        self,
        scope: CheckpointScope,
        checkpoint_id: str,
        *,
        type_tag: str,
        payload: bytes,
        namespace: str = "",
        parent_checkpoint_id: str | None = None,
        metadata: Mapping[str, JSON] | None = None,
        fencing_token: int | None = None,
        fencing_run_id: str | None = None,
        end_run: str | None = None,
        step_count: int | None = None,
    ) -> CheckpointRecord:
        """Store a checkpoint of the run; returns it as stored.

        ``payload`` is bytes (a ``bytearray`` or ``memoryview`` is copied) tagged with
        ``type_tag`` (say ``msgpack``); ``metadata`` is a JSON object. Putting the same
        ``checkpoint_id`` in the same ``namespace`` again replaces its parent, type tag,
        payload and metadata and keeps its place in the order, its ``create_time`` and its
        pending writes.

        ``fencing_token`` (and ``fencing_run_id``, by default the scope's run) fence the
        write: see the class docstring. With ``end_run`` (``done``, ``failed`` or
        ``cancelled``) the write also ends the fencing run, as
        :meth:`AsyncRuns.close_run <ownstate.api.runs.AsyncRuns.close_run>` with that
        token would (``step_count``, when given, replacing its count), in the same
        transaction: both or neither. Only where :attr:`ends_runs` is true, and only for
        a fenced write.

        Raises :class:`~ownstate.errors.InvalidInput` (bad id, tag, payload type or
        metadata; ``end_run`` without a token or where :attr:`ends_runs` is false),
        :class:`~ownstate.errors.LimitExceeded` (payload over
        ``Limits.max_checkpoint_bytes``, metadata over ``Limits.max_item_bytes``),
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.StaleLease`,
        :class:`~ownstate.errors.RunClosed`.
        """
        s = self._scope
        run = _scope(scope, s.limits)
        checkpoint = _checkpoint(s.limits, checkpoint_id, type_tag, payload, namespace,
                                 parent_checkpoint_id, metadata)
        fence = _fence(run, fencing_token, fencing_run_id)
        if end_run is not None:
            fence, status = _ending(s.backend, fence, end_run, step_count)
            record, _ = await s.backend.put_checkpoint_ending_run(
                s.tenant, run, checkpoint, fence, status, step_count, (), None, _ids.now())
            return record
        return await s.backend.put_checkpoint(s.tenant, run, checkpoint, fence, _ids.now())

    @property
    def opens_runs(self) -> bool:
        """Whether :meth:`put_opening_run` is available: the backend declares
        :attr:`~ownstate.backends.Capability.CHECKPOINT_OPENS_RUN`."""
        return Capability.CHECKPOINT_OPENS_RUN in type(self._scope.backend).capabilities

    async def put_opening_run(
        self,
        scope: CheckpointScope,
        checkpoint_id: str,
        *,
        framework: str,
        owner: str,
        type_tag: str,
        payload: bytes,
        thread_key: str | None = None,
        run_id: str | None = None,
        ttl: float = 30.0,
        namespace: str = "",
        parent_checkpoint_id: str | None = None,
        metadata: Mapping[str, JSON] | None = None,
    ) -> tuple[Run, CheckpointRecord]:
        """Open a run in the scope's session, leased to ``owner`` for ``ttl`` seconds, and
        store a checkpoint of the scope's run fenced by the new lease, in one transaction:
        both or neither. Returns both as stored.

        The run is opened as :meth:`AsyncRuns.open_run
        <ownstate.api.runs.AsyncRuns.open_run>` opens it (``framework``, ``thread_key``,
        ``run_id``, generated unless given), and the checkpoint is stored as :meth:`put`
        with the new run's ``fencing_token`` and ``fencing_run_id`` would store it. Only
        where :attr:`opens_runs` is true.

        Raises what :meth:`AsyncRuns.open_run <ownstate.api.runs.AsyncRuns.open_run>` and
        :meth:`put` raise (:class:`~ownstate.errors.ActiveRunExists`,
        :class:`~ownstate.errors.AlreadyExists`, :class:`~ownstate.errors.SessionNotFound`,
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.LimitExceeded`); :class:`~ownstate.errors.InvalidInput`
        too where :attr:`opens_runs` is false.
        """
        s = self._scope
        if Capability.CHECKPOINT_OPENS_RUN not in type(s.backend).capabilities:
            raise InvalidInput(f"{type(s.backend).__name__} cannot open a run with a "
                               "checkpoint (it does not declare "
                               "Capability.CHECKPOINT_OPENS_RUN)", field="framework")
        run = _scope(scope, s.limits)
        checkpoint = _checkpoint(s.limits, checkpoint_id, type_tag, payload, namespace,
                                 parent_checkpoint_id, metadata)
        if owner is None:
            raise InvalidInput("owner is required: the new lease fences the checkpoint",
                               field="owner")
        chosen, key, holder, kind, seconds = run_opening(run_id, thread_key, owner,
                                                         framework, ttl)
        assert holder is not None
        return await s.backend.put_checkpoint_opening_run(
            s.tenant, run, checkpoint, chosen, kind, key, holder, seconds, _ids.now())

    @property
    def ends_runs(self) -> bool:
        """Whether :meth:`put` and :meth:`put_with_items` take ``end_run``: the backend
        declares :attr:`~ownstate.backends.Capability.CHECKPOINT_ENDS_RUN`."""
        return Capability.CHECKPOINT_ENDS_RUN in type(self._scope.backend).capabilities

    @property
    def puts_items(self) -> bool:
        """Whether :meth:`put_with_items` is available: the backend declares
        :attr:`~ownstate.backends.Capability.CHECKPOINT_ITEMS`."""
        return Capability.CHECKPOINT_ITEMS in type(self._scope.backend).capabilities

    async def put_with_items(
        self,
        scope: CheckpointScope,
        checkpoint_id: str,
        items: Sequence[dict[str, JSON]],
        *,
        first_seq: int,
        type_tag: str,
        payload: bytes,
        format: str | None = None,
        namespace: str = "",
        parent_checkpoint_id: str | None = None,
        metadata: Mapping[str, JSON] | None = None,
        fencing_token: int | None = None,
        fencing_run_id: str | None = None,
        end_run: str | None = None,
        step_count: int | None = None,
    ) -> tuple[CheckpointRecord, list[Item]]:
        """Append ``items`` to the scope's session and store a checkpoint of the run, in
        one transaction: both are stored or neither is. Returns both as stored.

        The items are appended as :meth:`AsyncSession.append_items
        <ownstate.api.session.AsyncSession.append_items>` appends them (``format``,
        derived columns, search terms, vectors; no idempotency key), starting at seq
        ``first_seq``, which must be the session's next: a checkpoint that refers to its
        items by seq is never stored beside items that took other seqs. The checkpoint is
        stored as by :meth:`put`, fenced the same way (and ending the fencing run with
        ``end_run``, as :meth:`put` does), and a refused fence stores neither. Only where
        :attr:`puts_items` is true.

        Raises :class:`~ownstate.errors.InvalidInput` (as :meth:`put` and
        ``append_items`` do, a ``first_seq`` that is not a positive integer, or a backend
        without :attr:`puts_items`), :class:`~ownstate.errors.LimitExceeded`,
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.StaleLease`,
        :class:`~ownstate.errors.RunClosed`, :class:`~ownstate.errors.SeqConflict` (the
        session's next seq is not ``first_seq``), :class:`~ownstate.errors.EmbedderMismatch`.
        """
        s = self._scope
        run = _scope(scope, s.limits)
        checkpoint = _checkpoint(s.limits, checkpoint_id, type_tag, payload, namespace,
                                 parent_checkpoint_id, metadata)
        first = _validate.int64(first_seq, field="first_seq", minimum=1)
        fence = _fence(run, fencing_token, fencing_run_id)
        ending = _ending(s.backend, fence, end_run, step_count) if end_run is not None else None
        rows = await _semantic.items_with_vectors(s, new_items(s, items, format))
        if ending is not None:
            return await s.backend.put_checkpoint_ending_run(
                s.tenant, run, checkpoint, ending[0], ending[1], step_count, rows, first,
                _ids.now())
        return await s.backend.put_checkpoint_with_items(s.tenant, run, checkpoint, fence,
                                                         rows, first, _ids.now())

    async def put_writes(
        self,
        scope: CheckpointScope,
        checkpoint_id: str,
        writes: Sequence[PendingWrite],
        *,
        namespace: str = "",
        fencing_token: int | None = None,
        fencing_run_id: str | None = None,
    ) -> None:
        """Store pending writes against a stored checkpoint, all or none. A write with the
        same (``task_id``, ``index``) as a stored one replaces it in place; writes are
        returned in the order first stored.

        ``fencing_token`` (and ``fencing_run_id``, by default the scope's run) fence the
        write: see the class docstring.

        Raises :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.LimitExceeded` (more than ``Limits.max_batch_items``
        writes, or payloads together over ``Limits.max_checkpoint_bytes``),
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.StaleLease`,
        :class:`~ownstate.errors.RunClosed`, :class:`~ownstate.errors.CheckpointNotFound`.
        """
        s = self._scope
        run = _scope(scope, s.limits)
        cid = _text(checkpoint_id, "checkpoint_id")
        ns = _text(namespace, "namespace", empty=True)
        checked = _writes(writes, s.limits)
        fence = _fence(run, fencing_token, fencing_run_id)
        await s.backend.put_writes(s.tenant, run, ns, cid, checked, fence, _ids.now())

    async def get(
        self, scope: CheckpointScope, checkpoint_id: str | None = None, *, namespace: str = ""
    ) -> CheckpointRecord | None:
        """The checkpoint with this id, or the newest in ``namespace`` when no id is given,
        with its pending writes; ``None`` when there is none.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.RunNotFound`.
        """
        s = self._scope
        run = _scope(scope, s.limits)
        cid = _text(checkpoint_id, "checkpoint_id") if checkpoint_id is not None else None
        ns = _text(namespace, "namespace", empty=True)
        return await s.backend.get_checkpoint(s.tenant, run, ns, cid)

    async def delete(
        self,
        scope: CheckpointScope,
        checkpoint_ids: Sequence[str],
        *,
        namespace: str | None = None,
        fencing_token: int | None = None,
        fencing_run_id: str | None = None,
    ) -> int:
        """Delete the named checkpoints of the run, with their pending writes, in one
        atomic step; returns how many were deleted.

        ``namespace=None`` (the default) matches the ids in every namespace; a string
        matches them in that namespace only. Ids that are not stored are ignored, and an
        empty list deletes nothing. The remaining checkpoints keep their order and their
        ``create_time``; a checkpoint stored later under a deleted id is a new one, the
        newest of the run.

        ``fencing_token`` (and ``fencing_run_id``, by default the scope's run) fence the
        write: see the class docstring.

        Raises :class:`~ownstate.errors.InvalidInput` (a malformed scope, id or namespace),
        :class:`~ownstate.errors.LimitExceeded` (more than ``Limits.max_batch_items``
        ids), :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.StaleLease`,
        :class:`~ownstate.errors.RunClosed`.
        """
        s = self._scope
        run = _scope(scope, s.limits)
        ids = _checkpoint_ids(checkpoint_ids, s.limits)
        ns = _text(namespace, "namespace", empty=True) if namespace is not None else None
        fence = _fence(run, fencing_token, fencing_run_id)
        return await s.backend.delete_checkpoints(s.tenant, run, ns, ids, fence)

    async def delete_run(self, scope: CheckpointScope) -> int:
        """Delete every checkpoint and pending write of the run; returns how many
        checkpoints. The run itself stays.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.RunNotFound`.
        """
        s = self._scope
        return await s.backend.delete_run_checkpoints(s.tenant, _scope(scope, s.limits))

    async def delete_session(self, actor_id: str, store: str, session_id: str) -> int:
        """Delete every checkpoint of every run of the session; returns how many. The
        session, its items and its runs stay.

        Raises :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.SessionNotFound` (also when the session is another
        actor's).
        """
        s = self._scope
        actor = s.limits.actor_id(actor_id)
        if not isinstance(store, str) or not _validate.STORE_NAME_RE.fullmatch(store):
            raise InvalidInput("store must be a session store name", field="store")
        sid = _text(session_id, "session_id")
        return await s.backend.delete_session_checkpoints(s.tenant, actor, store, sid)

    async def copy(self, source: CheckpointScope, target: CheckpointScope) -> int:
        """Replace the target run's checkpoints with copies of the source run's: the same
        ids, namespaces, order, create times, metadata and pending writes. Returns how
        many were copied. The runs may belong to different sessions and actors.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.RunNotFound`
        (for whichever run is missing or outside its scope).
        """
        s = self._scope
        origin = _scope(source, s.limits, "source")
        destination = _scope(target, s.limits, "target")
        return await s.backend.copy_checkpoints(s.tenant, origin, destination)

    async def apply_retention(self, policy: RetentionPolicy) -> RetentionReport:
        """Delete, across the tenant and in one transaction, every checkpoint ``policy``
        names: all but the newest ``keep_last`` per run and namespace, those older than
        ``max_age_seconds``, and (``drop_when_run_ends``) all of each run that is done,
        failed or cancelled. Returns how many went and the payload bytes freed.

        Raises :class:`~ownstate.errors.InvalidInput` for a malformed policy.
        """
        s = self._scope
        return await s.backend.apply_retention(s.tenant, _policy(policy), _ids.now())

    async def usage(self, run_id: str | None = None) -> list[RunUsage]:
        """Checkpoints and stored payload bytes per run that holds any, largest first; only
        ``run_id`` when given (an empty list when it holds none).

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        chosen = _text(run_id, "run_id") if run_id is not None else None
        return await s.backend.checkpoint_usage(s.tenant, chosen)

    async def list(
        self,
        scope: CheckpointScope,
        *,
        namespace: str | None = None,
        metadata: Mapping[str, JSON] | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[CheckpointRecord]:
        """The run's checkpoints, newest first, with their pending writes.

        ``namespace`` keeps one namespace (every one by default); ``metadata`` keeps those
        whose metadata holds every given key with an equal JSON value (``1``, ``1.0`` and
        ``true`` are different values); ``before`` keeps those stored before that
        checkpoint; ``limit`` keeps the first that many.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.RunNotFound`,
        :class:`~ownstate.errors.CheckpointNotFound` (``before`` is unknown).
        """
        s = self._scope
        run, ns, wanted, mark = _listing(scope, s.limits, namespace, metadata, before)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise InvalidInput("limit must be a non-negative integer or None", field="limit")
        return await s.backend.list_checkpoints(s.tenant, run, ns, wanted, mark, limit)

    async def list_page(
        self,
        scope: CheckpointScope,
        *,
        namespace: str | None = None,
        metadata: Mapping[str, JSON] | None = None,
        before: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
        page_bytes: int | None = None,
    ) -> Page[CheckpointRecord]:
        """One page of :meth:`list` (same filters, same order) and the token of the next,
        ``None`` on the last page. A page holds at most ``page_size`` checkpoints
        (``Limits.default_page_size`` by default) and stops early before the one that
        would take its payload bytes (checkpoints and pending writes) past ``page_bytes``
        (by default and at most ``Limits.max_page_bytes``), but always holds at least
        one. A token belongs to one listing (scope and filters) and neither repeats nor
        skips a checkpoint while others are stored or deleted.

        Raises :class:`~ownstate.errors.InvalidInput` (also a token of another listing),
        :class:`~ownstate.errors.LimitExceeded` (``page_size``, ``page_bytes``),
        :class:`~ownstate.errors.RunNotFound`,
        :class:`~ownstate.errors.CheckpointNotFound` (``before`` is unknown).
        """
        s = self._scope
        run, ns, wanted, mark = _listing(scope, s.limits, namespace, metadata, before)
        s.limits.page_size(page_size)  # refused before page_bytes is looked at
        most = s.limits.max_page_bytes
        if page_bytes is None:
            page_bytes = most
        elif isinstance(page_bytes, bool) or not isinstance(page_bytes, int) or page_bytes < 1:
            raise InvalidInput("page_bytes must be a positive integer", field="page_bytes")
        elif page_bytes > most:
            raise LimitExceeded(f"page_bytes must be at most {most}", field="page_bytes",
                                limit=most, actual=page_bytes)

        async def fetch(limit: int, after: int | None) -> tuple[list[CheckpointRecord],
                                                               int | None]:
            return await s.backend.page_checkpoints(s.tenant, run, ns, wanted, mark, after,
                                                    limit, page_bytes)

        records, token = await keyset_page(s.limits, listing_scope(run, ns, wanted, mark),
                                           page_size, page_token, fetch, cursor=int)
        return Page(records, token)
