"""What the conformance suite runs against."""

from __future__ import annotations

from collections.abc import Callable
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
    """

    name: str
    url: str
    capabilities: frozenset[str] = field(default_factory=frozenset)
    cleanup: Callable[[], None] | None = None
    opener: Callable[..., ownstate.Client] | None = None

    def connect(self, **kwargs: Any) -> ownstate.Client:
        """A sync client on the target's database; ``kwargs`` as for ``ownstate.connect``."""
        if self.opener is not None:
            return self.opener(**kwargs)
        import ownstate

        return ownstate.connect(self.url, **kwargs)

    def has(self, capability: str) -> bool:
        return capability in self.capabilities
