"""What every public handle carries: the backend, the tenant, the limits in force and the
embedder, if any.

It holds them and calls none of them: it may touch only their types (``ownstate.backends``,
``ownstate.embeddings``, ``ownstate.limits``).
"""

from __future__ import annotations

from ..backends import Backend
from ..embeddings import Embedder
from ..limits import Limits

__all__ = ["Scope"]


class Scope:
    """The backend, tenant, limits and embedder a client and all its handles act with."""

    __slots__ = ("backend", "embedder", "limits", "tenant")

    def __init__(self, backend: Backend, tenant: str, limits: Limits,
                 embedder: Embedder | None = None) -> None:
        self.backend = backend
        self.tenant = tenant
        self.limits = limits
        self.embedder = embedder
