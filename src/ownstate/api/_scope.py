"""What every public handle carries: the backend, the tenant and the limits in force."""

from __future__ import annotations

from ..backends import Backend
from ..limits import Limits

__all__ = ["Scope"]


class Scope:
    """The backend, tenant and limits a client and all its handles act with."""

    __slots__ = ("backend", "limits", "tenant")

    def __init__(self, backend: Backend, tenant: str, limits: Limits) -> None:
        self.backend = backend
        self.tenant = tenant
        self.limits = limits
