"""What the conformance suite runs against."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ownstate

__all__ = ["Target"]


@dataclass(frozen=True)
class Target:
    """A backend under test: its name, a URL for a fresh empty database, its capabilities.

    ``cleanup`` (when given) runs after the test. ``opener`` (when given) opens clients
    instead of ``ownstate.connect(url, **kwargs)``: a server target uses it to give each
    tenant asked for a key of its own.

    ``grant_fault`` (when given) is how the fault tests of :mod:`ownstate.testing.faults`
    break the datastore: ``grant_fault(client, kind, store)`` is a context manager inside
    which the datastore itself fails every write to the grants of that store (``kind``
    ``"session_store"`` or ``"memory_store"``) in the client's tenant, and after which
    it works again. Without one those tests skip.
    """

    name: str
    url: str
    capabilities: frozenset[str] = field(default_factory=frozenset)
    cleanup: Callable[[], None] | None = None
    opener: Callable[..., ownstate.Client] | None = None
    grant_fault: Callable[[ownstate.Client, str, str],
                          AbstractContextManager[None]] | None = None

    def connect(self, **kwargs: Any) -> ownstate.Client:
        """A sync client on the target's database; ``kwargs`` as for ``ownstate.connect``."""
        if self.opener is not None:
            return self.opener(**kwargs)
        import ownstate

        return ownstate.connect(self.url, **kwargs)

    def has(self, capability: str) -> bool:
        return capability in self.capabilities
