"""The checkpoints port: opaque framework checkpoints, always reached through a full scope.

Every method takes a :class:`~ownstate.model.CheckpointScope` (actor, session, run; the
tenant separately) and applies all of it in the datastore predicate: a run outside the
scope raises the same RunNotFound, with the same message, as a run that does not exist.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...model import (
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
        payload and metadata and keeps its place in the order. Raises RunNotFound."""

    @abstractmethod
    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         now: datetime) -> None:
        """Store pending writes for a checkpoint; a (task_id, index) already stored is
        replaced. Raises RunNotFound."""

    @abstractmethod
    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        """The checkpoint (the newest in the namespace when ``checkpoint_id`` is ``None``)
        with its pending writes, or ``None``. Raises RunNotFound."""

    @abstractmethod
    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, Any],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        """Newest first; only those whose metadata contains every given key with an equal
        value; only those stored before checkpoint ``before`` (same namespace rules).
        Raises RunNotFound."""

    @abstractmethod
    async def delete_run_checkpoints(self, tenant: str, scope: CheckpointScope) -> int:
        """Delete every checkpoint (and pending write) of the run. Raises RunNotFound."""

    @abstractmethod
    async def delete_session_checkpoints(self, tenant: str, actor_id: str, store: str,
                                         session_id: str) -> int:
        """Delete every checkpoint of every run of the session. Raises SessionNotFound
        (also when the session belongs to another actor)."""

    @abstractmethod
    async def copy_checkpoints(self, tenant: str, source: CheckpointScope,
                               target: CheckpointScope, now: datetime) -> int:
        """Copy every checkpoint and pending write of one run to another (replacing the
        target's); returns how many checkpoints. Raises RunNotFound."""

    @abstractmethod
    async def apply_retention(self, tenant: str, policy: RetentionPolicy,
                              now: datetime) -> RetentionReport:
        """Delete what ``policy`` says to, across the tenant."""

    @abstractmethod
    async def checkpoint_usage(self, tenant: str, run_id: str | None) -> list[RunUsage]:
        """Checkpoints and stored bytes per run (one run when ``run_id`` is given)."""
