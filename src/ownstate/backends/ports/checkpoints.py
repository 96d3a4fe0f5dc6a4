"""The checkpoints port: opaque framework checkpoints, always reached through a full scope.

Every scoped method takes a :class:`~ownstate.model.CheckpointScope` (actor, session, run;
the tenant separately) and applies all of it in the datastore predicate: a run outside the
scope raises the same RunNotFound, with the same message and details, as a run that does
not exist.

Checkpoints of a run are ordered by when each was first stored (newest first in listings);
storing the same (namespace, checkpoint_id) again keeps that place. Pending writes belong
to a stored checkpoint and go with it. ``stored bytes`` counts payload bytes of
checkpoints and their pending writes. Checkpoints are disposable: deleting them never
touches sessions, items, runs or facts.

Fencing. The framework's writes (``put_checkpoint``, ``put_writes``, ``delete_checkpoints``)
take an optional :class:`Fence`: the lease the writer holds, named by a run of the scope's
session (usually the scope's run itself) and that run's fencing token. Inside the same
transaction (or script) as the write, and before anything else is checked or changed, the
fence run must exist in the scope (else RunNotFound naming it), hold exactly that token
(else StaleLease) and be active (else RunClosed): :func:`~.runs.run_refusal` decides,
as for every run write. A write without a fence is not fenced
and works on an ended run too (housekeeping, single writers), as the other unfenced run
writes do.

Items with a checkpoint. A framework step's new messages and its checkpoint can be stored
in one transaction (``put_checkpoint_with_items``): the items are appended to the scope's
session as ``append_items`` appends them (without an idempotency key) and the checkpoint is
stored as ``put_checkpoint`` stores it, both or neither. The caller names the seq the items
start at (its checkpoint refers to them by seq), and the write is refused when the
session's next seq is another. Backends that declare
:attr:`~ownstate.backends.Capability.CHECKPOINT_ITEMS` implement it; the others raise
InvalidInput, and a caller appends and puts in two calls.

A run ended with its last checkpoint. A fenced checkpoint write (with items or without)
can also end the run it is fenced by (``put_checkpoint_ending_run``), as ``close_run``
with the fence's token would, in the same transaction: the fence is checked once, and
the checkpoint, its items and the run's end are stored together or not at all. Backends
that declare :attr:`~ownstate.backends.Capability.CHECKPOINT_ENDS_RUN` implement it; the
others raise InvalidInput, and a caller puts and closes in two calls.

A run opened with its first checkpoint. A run can be opened in the scope's session, leased,
together with a checkpoint its new lease fences (``put_checkpoint_opening_run``), as
``open_run`` and a fenced ``put_checkpoint`` would, in one transaction: both or neither.
Backends that declare :attr:`~ownstate.backends.Capability.CHECKPOINT_OPENS_RUN`
implement it; the others raise InvalidInput, and a caller opens and puts in two calls.

Paging. ``page_checkpoints`` returns a listing a page at a time, from a position (an
opaque, increasing ordinal of when each checkpoint was first stored), stopping early at a
byte bound.

It may touch the model, the sessions port's ``NewItem`` and errors, and no datastore: each
backend implements it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ...errors import InvalidInput
from ...model import (
    JSON,
    CheckpointRecord,
    CheckpointScope,
    Item,
    PendingWrite,
    RetentionPolicy,
    RetentionReport,
    Run,
    RunUsage,
)
from .sessions import NewItem

__all__ = ["CheckpointPort", "Fence", "NewCheckpoint", "listing_scope", "page_cut"]


@dataclass(frozen=True, slots=True)
class NewCheckpoint:
    """A validated checkpoint on its way in; ``metadata_json`` is a compact JSON object."""

    namespace: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type_tag: str
    payload: bytes
    metadata_json: str


@dataclass(frozen=True, slots=True)
class Fence:
    """The lease a write is made under: a run of the scope's session and its token."""

    run_id: str
    fencing_token: int


def listing_scope(scope: CheckpointScope, namespace: str | None,
                  metadata: Mapping[str, JSON], before: str | None) -> str:
    """What a checkpoint page token belongs to: the run's scope and the filters. The
    tenant is left out (the query applies it), so a remote client and its server agree on
    every token."""
    return json.dumps(["checkpoints", scope.actor_id, scope.store, scope.session_id,
                       scope.run_id, namespace, dict(metadata), before], sort_keys=True,
                      ensure_ascii=False, separators=(",", ":"))


def page_cut(sizes: Sequence[int], limit: int, max_bytes: int) -> tuple[int, bool]:
    """How many of the entries whose stored bytes are ``sizes`` (newest first, up to
    ``limit + 1`` of them) one page holds, and whether more follow: at most ``limit``,
    and no more than fit in ``max_bytes`` together, but always at least one."""
    taken = total = 0
    for size in sizes[:limit]:
        if taken and total + size > max_bytes:
            return taken, True
        taken += 1
        total += size
    return taken, len(sizes) > taken


class CheckpointPort(ABC):
    """Storage for checkpoints and their pending writes."""

    @abstractmethod
    async def put_checkpoint(self, tenant: str, scope: CheckpointScope,
                             checkpoint: NewCheckpoint, fence: Fence | None,
                             now: datetime) -> CheckpointRecord:
        """Store a checkpoint; putting the same (namespace, checkpoint_id) again replaces
        parent, type tag, payload and metadata, and keeps its place in the order, its
        ``create_time`` and its pending writes. Raises RunNotFound, and for ``fence``
        StaleLease, RunClosed."""

    async def put_checkpoint_with_items(self, tenant: str, scope: CheckpointScope,
                                        checkpoint: NewCheckpoint, fence: Fence | None,
                                        items: Sequence[NewItem], first_seq: int,
                                        now: datetime) -> tuple[CheckpointRecord, list[Item]]:
        """Append ``items`` to the scope's session and store ``checkpoint``, in one
        transaction: both or neither. Checked before anything is stored, in this order:
        the scope (RunNotFound), the fence (StaleLease, RunClosed), that the session's
        next seq is ``first_seq`` (else SeqConflict). The items take seqs ``first_seq``,
        ``first_seq + 1``, ... with everything ``append_items`` gives them (derived
        columns, search terms, vectors, the session's activity time); the checkpoint is
        stored as by :meth:`put_checkpoint`. Returns both as stored. Only for backends
        that declare :attr:`~ownstate.backends.Capability.CHECKPOINT_ITEMS`; the others
        raise InvalidInput."""
        raise InvalidInput(f"{type(self).__name__} cannot store items with a checkpoint (it "
                           "does not declare Capability.CHECKPOINT_ITEMS)", field="items")

    async def put_checkpoint_ending_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint,
            fence: Fence, status: str, step_count: int | None, items: Sequence[NewItem],
            first_seq: int | None, now: datetime) -> tuple[CheckpointRecord, list[Item]]:
        """Store ``checkpoint`` (with ``items`` from ``first_seq`` on, as
        :meth:`put_checkpoint_with_items` does; as :meth:`put_checkpoint` when
        ``first_seq`` is ``None``) and
        end the fence's run with ``status`` (``done``, ``failed`` or ``cancelled``;
        ``step_count``, when given, replacing its count) as ``close_run`` with the fence's
        token does, in one transaction: all or nothing. Refused as those writes are
        (RunNotFound, StaleLease, RunClosed, SeqConflict). Only for backends that declare
        :attr:`~ownstate.backends.Capability.CHECKPOINT_ENDS_RUN`; the others raise
        InvalidInput."""
        raise InvalidInput(f"{type(self).__name__} cannot end a run with a checkpoint (it "
                           "does not declare Capability.CHECKPOINT_ENDS_RUN)",
                           field="end_run")

    async def put_checkpoint_opening_run(
            self, tenant: str, scope: CheckpointScope, checkpoint: NewCheckpoint, run_id: str,
            framework: str, thread_key: str | None, owner: str, ttl_seconds: float,
            now: datetime) -> tuple[Run, CheckpointRecord]:
        """Open run ``run_id`` in the scope's session, leased to ``owner``, as ``open_run``
        does, and store ``checkpoint`` as :meth:`put_checkpoint` does, fenced by the new
        run's lease, in one transaction: both or neither. Refused as those are
        (SessionNotFound, AlreadyExists, ActiveRunExists, RunNotFound for the scope).
        Returns both. Only for backends that declare
        :attr:`~ownstate.backends.Capability.CHECKPOINT_OPENS_RUN`; the others raise
        InvalidInput."""
        raise InvalidInput(f"{type(self).__name__} cannot open a run with a checkpoint (it "
                           "does not declare Capability.CHECKPOINT_OPENS_RUN)",
                           field="framework")

    @abstractmethod
    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         fence: Fence | None, now: datetime) -> None:
        """Store pending writes for a stored checkpoint, all or none; a (task_id, index)
        already stored is replaced in place. Raises RunNotFound, StaleLease, RunClosed
        (``fence``), CheckpointNotFound."""

    @abstractmethod
    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        """The checkpoint (the newest in the namespace when ``checkpoint_id`` is ``None``)
        with its pending writes in the order first stored, or ``None``.
        Raises RunNotFound."""

    @abstractmethod
    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        """Newest first, with pending writes; every namespace when ``namespace`` is
        ``None``. Only those whose metadata holds every given key with an equal JSON value
        (equal as compact, key-sorted JSON text: ``1``, ``1.0`` and ``true`` differ). With
        ``before``, only those stored before that checkpoint (looked up in ``namespace``,
        or the newest with that id in any namespace). Raises RunNotFound,
        CheckpointNotFound (``before`` unknown)."""

    @abstractmethod
    async def page_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, after: int | None, limit: int,
                               max_bytes: int) -> tuple[list[CheckpointRecord], int | None]:
        """One page of :meth:`list_checkpoints` (same filters, same order) and the
        position to continue from, ``None`` on the last page. ``after`` is a position a
        previous page returned: only checkpoints stored before it. A page holds at most
        ``limit`` checkpoints and stops before the one that would take its stored bytes
        past ``max_bytes`` (see :func:`page_cut`), but always holds at least one.
        Raises RunNotFound, CheckpointNotFound (``before`` unknown)."""

    @abstractmethod
    async def delete_checkpoints(self, tenant: str, scope: CheckpointScope,
                                 namespace: str | None, checkpoint_ids: Sequence[str],
                                 fence: Fence | None) -> int:
        """Delete, in one transaction (one atomic step), the checkpoints of the run whose
        id is in ``checkpoint_ids`` (distinct, validated ids), in ``namespace`` or, when
        it is ``None``, in every namespace, with their pending writes; returns how many
        checkpoints went. Ids not stored are ignored; an empty list deletes nothing but
        still checks the scope. The others keep their place in the order and their
        ``create_time``; a checkpoint stored later under a deleted (namespace, id) is new
        and takes the newest place. Stored bytes (usage) drop by what went.
        Raises RunNotFound, and for ``fence`` StaleLease, RunClosed."""

    @abstractmethod
    async def delete_run_checkpoints(self, tenant: str, scope: CheckpointScope) -> int:
        """Delete every checkpoint (and pending write) of the run; returns how many
        checkpoints. Raises RunNotFound."""

    @abstractmethod
    async def delete_session_checkpoints(self, tenant: str, actor_id: str, store: str,
                                         session_id: str) -> int:
        """Delete every checkpoint of every run of the session; returns how many. Raises
        SessionNotFound (also when the session belongs to another actor)."""

    @abstractmethod
    async def copy_checkpoints(self, tenant: str, source: CheckpointScope,
                               target: CheckpointScope) -> int:
        """Replace the target run's checkpoints with copies of the source run's (same ids,
        order, create times and pending writes); returns how many. Copying a run onto
        itself changes nothing. Raises RunNotFound (naming whichever run is missing)."""

    @abstractmethod
    async def apply_retention(self, tenant: str, policy: RetentionPolicy,
                              now: datetime) -> RetentionReport:
        """Delete, across the tenant and in one transaction, every checkpoint the policy
        names: beyond the newest ``keep_last`` per run and namespace, created more than
        ``max_age_seconds`` before ``now``, or (``drop_when_run_ends``) of a run whose
        status is done, failed or cancelled."""

    @abstractmethod
    async def checkpoint_usage(self, tenant: str, run_id: str | None) -> list[RunUsage]:
        """Checkpoints and stored bytes per run that holds any, largest first (then by
        run id); only that run when ``run_id`` is given."""
