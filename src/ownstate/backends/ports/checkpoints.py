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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ...model import (
    JSON,
    CheckpointRecord,
    CheckpointScope,
    PendingWrite,
    RetentionPolicy,
    RetentionReport,
    RunUsage,
)

__all__ = ["CheckpointPort", "NewCheckpoint"]


@dataclass(frozen=True, slots=True)
class NewCheckpoint:
    """A validated checkpoint on its way in; ``metadata_json`` is a compact JSON object."""

    namespace: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type_tag: str
    payload: bytes
    metadata_json: str


class CheckpointPort(ABC):
    """Storage for checkpoints and their pending writes."""

    @abstractmethod
    async def put_checkpoint(self, tenant: str, scope: CheckpointScope,
                             checkpoint: NewCheckpoint, now: datetime) -> CheckpointRecord:
        """Store a checkpoint; putting the same (namespace, checkpoint_id) again replaces
        parent, type tag, payload and metadata, and keeps its place in the order, its
        ``create_time`` and its pending writes. Raises RunNotFound."""

    @abstractmethod
    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         now: datetime) -> None:
        """Store pending writes for a stored checkpoint, all or none; a (task_id, index)
        already stored is replaced in place. Raises RunNotFound, CheckpointNotFound."""

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
    async def delete_checkpoints(self, tenant: str, scope: CheckpointScope,
                                 namespace: str | None, checkpoint_ids: Sequence[str]) -> int:
        """Delete, in one transaction (one atomic step), the checkpoints of the run whose
        id is in ``checkpoint_ids`` (distinct, validated ids), in ``namespace`` or, when
        it is ``None``, in every namespace, with their pending writes; returns how many
        checkpoints went. Ids not stored are ignored; an empty list deletes nothing but
        still checks the scope. The others keep their place in the order and their
        ``create_time``; a checkpoint stored later under a deleted (namespace, id) is new
        and takes the newest place. Stored bytes (usage) drop by what went.
        Raises RunNotFound."""

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
