"""The in-memory backend: a complete reference implementation, kept in plain Python data.

``memory://`` gives a private, empty database; ``memory://NAME`` gives one shared by every
client in this process that names it. Nothing survives the process. Each method runs
without awaiting under one lock, so every operation is atomic.

It may touch the interface (``base``) and its own parts, nothing outside this process.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from ..base import Backend, Capability
from ._data import _Data
from .access import AccessInMemory
from .assets import AssetsInMemory
from .checkpoints import CheckpointsInMemory
from .facts import FactsInMemory
from .runs import RunsInMemory
from .sessions import SessionsInMemory
from .transfer import TransferInMemory
from .vectors import VectorsInMemory

__all__ = ["MemoryBackend"]

_shared: dict[str, _Data] = {}
_shared_lock = threading.Lock()


class MemoryBackend(SessionsInMemory, FactsInMemory, VectorsInMemory, RunsInMemory,
                    CheckpointsInMemory, AssetsInMemory, AccessInMemory, TransferInMemory,
                    Backend):
    """Every kind of state, kept in process memory."""

    capabilities: ClassVar[frozenset[str]] = frozenset({Capability.TEXT_SEARCH,
                                                               Capability.OPERATOR,
                                                               Capability.VECTORS,
                                                               Capability.TRANSFER,
                                                               Capability.CHECKPOINT_ITEMS,
                                                               Capability.CHECKPOINT_ENDS_RUN,
                                                               Capability.CHECKPOINT_OPENS_RUN})

    def __init__(self, name: str | None = None) -> None:
        if name:
            with _shared_lock:
                self._data = _shared.setdefault(name, _Data())
        else:
            self._data = _Data()

    @property
    def runs_inline(self) -> bool:
        return True

    async def setup(self, *, migrate: bool) -> None:
        return None

    async def schema_status(self) -> tuple[int, int]:
        return (1, 1)

    async def close(self) -> None:
        return None
