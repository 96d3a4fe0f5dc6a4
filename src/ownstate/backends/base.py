"""The one interface every backend implements, async because async is the source of truth.

A backend is the sum of its ports (sessions, facts, runs, checkpoints, assets, access,
vectors, transfer, bulk) plus its lifecycle. It stores records and enforces invariants in
its datastore; it does not validate caller input (the public API does that first,
identically for every backend) and it does not encode page tokens (it returns and
accepts plain cursors).

Every method takes the tenant and applies it in its query: nothing is looked up by a bare
id across tenants. Every method either completes or leaves stored state unchanged, and
translates its driver's errors into :mod:`ownstate.errors`.

It may touch the ports and errors, nothing else: no driver, no datastore, never the API
above it.
"""

from __future__ import annotations

from abc import abstractmethod
from enum import StrEnum
from typing import ClassVar

from ..errors import InvalidInput
from .ports.access import AccessPort
from .ports.assets import AssetPort
from .ports.bulk import BulkPort
from .ports.checkpoints import CheckpointPort, NewCheckpoint
from .ports.facts import FactPort, NewFact
from .ports.runs import RunPort
from .ports.sessions import NewItem, SessionOrder, SessionPort
from .ports.transfer import TransferPort
from .ports.vectors import VectorPort

__all__ = [
    "Backend",
    "Capability",
    "NewCheckpoint",
    "NewFact",
    "NewItem",
    "SessionOrder",
]


class Capability(StrEnum):
    """Names of optional abilities a backend declares in ``Backend.capabilities``.

    Shared tests consult these instead of asking which class a backend is. Each member is
    the string it names (``Capability.PERSISTENT == "persistent"``), so a backend may declare
    plain strings too.
    """

    #: several OS processes may open the same data and see each other's writes
    MULTIPROCESS = "multiprocess"
    #: data outlives the process that wrote it
    PERSISTENT = "persistent"
    #: schema migrations exist and can be verified
    MIGRATIONS = "migrations"
    #: memory.search() is available
    TEXT_SEARCH = "text_search"
    #: the client is the database's operator: it looks keys up and records grants and
    #: owners as told (a server's client is a principal instead: the server authenticates
    #: it and makes it the owner of what it creates)
    OPERATOR = "operator"
    #: creating or deleting a store takes several steps, not one transaction (on Redis
    #: the store and the tenant's grants live in different slots): one that stops
    #: part-way leaves the store invisible, and the next create or delete of the name
    #: finishes it
    STEPWISE_STORES = "stepwise_stores"
    #: facts carry vectors and memory.search() ranks semantically and by fusion
    #: (``ownstate.backends.ports.vectors``)
    VECTORS = "vectors"
    #: searches are ranked by a remote ownstate server in the mode asked for: ``mode=``
    #: travels with the query, and the server's embedder decides whether semantic and
    #: hybrid rankings are available (``VectorPort.ranked_facts`` and ``ranked_items``)
    SERVER_RANKED = "server_ranked"
    #: every stored row can be read out and written back exactly
    #: (:class:`~ownstate.backends.ports.transfer.TransferPort`): export, import of an
    #: archive, and copy between backends
    TRANSFER = "transfer"
    #: many new sessions, each with its items, run and checkpoints, are stored in one
    #: transaction (:class:`~ownstate.backends.ports.bulk.BulkPort`)
    BULK_SESSIONS = "bulk_sessions"
    #: many sessions are read back whole (items, newest run, checkpoints by id) in a few
    #: queries (:meth:`~ownstate.backends.ports.bulk.BulkPort.read_sessions`)
    BULK_READS = "bulk_reads"
    #: a checkpoint is stored with items appended to its session in one transaction
    #: (:meth:`~ownstate.backends.ports.checkpoints.CheckpointPort.put_checkpoint_with_items`)
    CHECKPOINT_ITEMS = "checkpoint_items"
    #: a fenced checkpoint write also ends its fencing run, in one transaction
    #: (:meth:`~ownstate.backends.ports.checkpoints.CheckpointPort.put_checkpoint_ending_run`)
    CHECKPOINT_ENDS_RUN = "checkpoint_ends_run"
    #: a run is opened with a checkpoint its lease fences, in one transaction
    #: (:meth:`~ownstate.backends.ports.checkpoints.CheckpointPort.put_checkpoint_opening_run`)
    CHECKPOINT_OPENS_RUN = "checkpoint_opens_run"


class Backend(SessionPort, FactPort, RunPort, CheckpointPort, AssetPort, AccessPort,
              VectorPort, TransferPort, BulkPort):
    """Storage for every kind of ownstate state."""

    capabilities: ClassVar[frozenset[str]] = frozenset()

    @property
    def runs_inline(self) -> bool:
        """True when no operation of this backend ever waits on an event loop, so a sync
        client may drive its coroutines directly on the calling thread."""
        return False

    @property
    def bound_tenant(self) -> str | None:
        """The one tenant this backend may act for, when its credentials decide it (a
        remote server's API key); None when the caller chooses."""
        return None

    @abstractmethod
    async def setup(self, *, migrate: bool) -> None:
        """Bring the schema to the current version (``migrate=True``) or only verify it.

        Raises :class:`~ownstate.errors.SchemaVersion` when verifying finds an older schema,
        or when the schema is newer than this code.
        """

    @abstractmethod
    async def schema_status(self) -> tuple[int, int]:
        """``(found, expected)`` schema versions; found is 0 for an empty database."""

    @abstractmethod
    async def close(self) -> None:
        """Release what this backend opened. Connections it was given stay open."""

    async def isolation_bypass(self) -> str | None:
        """Why the datastore itself does not confine this connection to the transaction's
        tenant although it is meant to (on PostgreSQL: a superuser, a ``BYPASSRLS`` role,
        the tables' owner without ``FORCE ROW LEVEL SECURITY``), or None.

        None also where the datastore has no such layer and ownstate's own predicates are
        the whole of tenant isolation (memory, SQLite, Redis; a remote server's clients).
        """
        return None

    async def grant_app_role(self, role: str) -> bool:
        """Create the database role ``role`` (NOLOGIN) if it is missing and grant it what
        the application needs, and nothing that would exempt it from tenant isolation;
        True when the role was created.

        Raises :class:`~ownstate.errors.InvalidInput` where the datastore has no roles.
        """
        raise InvalidInput(f"{type(self).__name__} has no database roles; an app role is "
                           "for PostgreSQL", field="role")
