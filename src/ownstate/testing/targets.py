"""What the conformance suite runs against."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Target"]


@dataclass(frozen=True)
class Target:
    """A backend under test: its name, a URL for a fresh empty database, its capabilities.

    ``cleanup`` (when given) runs after the test.
    """

    name: str
    url: str
    capabilities: frozenset[str] = field(default_factory=frozenset)
    cleanup: Callable[[], None] | None = None

    def has(self, capability: str) -> bool:
        return capability in self.capabilities
