"""The bulk port: many new sessions, each with its items, its run and the run's
checkpoints, stored in one transaction.

An importer makes sessions by the thousand, each holding what a few calls of the other
ports would have stored one transaction at a time (make the session, append its items,
open its run, put a checkpoint, close or pause the run). Here a batch of them is one
transaction. The public API validates and encodes everything first, exactly as those
calls do (:mod:`ownstate.api.bulk`), so a bundle stored here reads back as if it had been
made call by call.

A bundle whose session is already stored is left out whole (nothing of it is written) and
reported, so a batch run again after an interruption stores each session once; a batch
that fails stores nothing. Backends that cannot do this in one transaction do not declare
:attr:`~ownstate.backends.Capability.BULK_SESSIONS`, and :meth:`create_sessions` raises
:class:`~ownstate.errors.InvalidInput`.

Reading such a batch back (an import verifying what it stored) is :meth:`read_sessions`:
each session with every item, its newest run and the checkpoints asked for, in a few
queries over one snapshot, each part exactly what the per-session reads return
(``get_session``, ``list_items`` in seq order, ``list_runs`` newest first,
``get_checkpoint`` by id). Backends that declare
:attr:`~ownstate.backends.Capability.BULK_READS` implement it; without it the public API
reads session by session.

It may touch the sessions port, the model and errors, and no datastore: each backend
implements it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from ...errors import InvalidInput
from ...model import CheckpointRecord, Item, PendingWrite, Run, SessionRecord
from .sessions import NewItem

__all__ = ["BulkPort", "CheckpointKey", "NewCheckpointRow", "NewRunRow", "NewSessionBundle",
           "StoredSessionBundle"]


class NewRunRow(NamedTuple):
    """A run as stored once its calls are done (opened and then closed, or paused)."""

    run_id: str
    framework: str
    thread_key: str | None
    status: str
    status_since: datetime
    awaiting_json: str | None
    step_count: int
    started_at: datetime
    ended_at: datetime | None
    fencing_token: int


class NewCheckpointRow(NamedTuple):
    """A checkpoint of the bundle's run, with its pending writes in the order stored."""

    namespace: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type_tag: str
    metadata_json: str
    payload: bytes
    writes: Sequence[PendingWrite]


class NewSessionBundle(NamedTuple):
    """One new session and what it holds: items (seq 1, 2, ... in order), at most one run
    and that run's checkpoints."""

    session_id: str
    actor_id: str
    metadata: Mapping[str, str]
    items: Sequence[NewItem]
    run: NewRunRow | None
    checkpoints: Sequence[NewCheckpointRow]


class CheckpointKey(NamedTuple):
    """A checkpoint to read back with its session: the run holding it (a run of that
    session, its actor's), the namespace and the checkpoint id."""

    run_id: str
    namespace: str
    checkpoint_id: str


class StoredSessionBundle(NamedTuple):
    """A stored session read back whole: every item in seq order, the newest run (as
    ``list_runs`` orders them; ``None`` when it has none) and, per key asked for, the
    checkpoint with its pending writes (``None`` where ``get_checkpoint`` gives ``None``
    or raises RunNotFound)."""

    session: SessionRecord
    items: Sequence[Item]
    newest_run: Run | None
    checkpoints: Sequence[CheckpointRecord | None]


class BulkPort:
    """Bundles of new sessions in one transaction (see the module docstring)."""

    async def create_sessions(self, tenant: str, store: str,
                              bundles: Sequence[NewSessionBundle], now: datetime
                              ) -> list[bool]:
        """Store every bundle whose session is not stored yet, in one transaction; returns,
        per bundle, whether it was stored (False: its session existed, nothing of it was
        written). Raises StoreNotFound, or the error of a row the datastore refused (and
        then stores nothing)."""
        raise InvalidInput(f"{type(self).__name__} cannot store sessions in bulk (it does "
                           "not declare Capability.BULK_SESSIONS)", field="bundles")

    async def read_sessions(self, tenant: str, store: str,
                            wanted: Sequence[tuple[str, Sequence[CheckpointKey]]]
                            ) -> list[StoredSessionBundle | None]:
        """Per ``(session_id, checkpoint keys)`` asked for, the session read back (see
        :class:`StoredSessionBundle`; ``None`` when there is no such session), all of
        them from one snapshot. Raises StoreNotFound."""
        raise InvalidInput(f"{type(self).__name__} cannot read sessions in bulk (it does "
                           "not declare Capability.BULK_READS)", field="sessions")
