"""What the conformance suite runs against.

It may touch, when a target is used, the public sync API and the ``Backend`` type and
the capability flags; nothing at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ownstate
    from ownstate.backends import Backend

__all__ = ["Target"]


@dataclass(frozen=True)
class Target:
    """A backend under test: its name, how to open its (fresh, empty) database, and the
    capabilities it declares.

    Give either ``url``, for a backend a URL names (built in, or registered by an
    ``ownstate.backends`` entry point), or ``backend``, a callable returning a new backend
    instance (not yet set up) on the target's database: it is called once per client a
    test opens, and every instance it returns must see the same data, as clients on one
    URL do. A target opened by ``backend`` may not declare ``Capability.MULTIPROCESS``:
    the tests of that capability open the database from other processes, by URL.

    ``cleanup`` (when given) runs after the test. ``opener`` (when given) opens clients
    instead of ``ownstate.connect(url, **kwargs)``: a server target uses it to give each
    tenant asked for a key of its own.

    ``grant_fault`` (when given) is how the fault tests of :mod:`ownstate.testing.faults`
    break the datastore: ``grant_fault(client, kind, store)`` is a context manager inside
    which the datastore itself fails every write to the grants of that store (``kind``
    ``"session_store"`` or ``"memory_store"``) in the client's tenant, and after which
    it works again. Without one those tests skip.

    Raises :class:`ValueError` for neither or both of ``url`` and ``backend``, and for a
    ``backend`` target declaring ``Capability.MULTIPROCESS`` or an ``opener``.
    """

    name: str
    url: str | None = None
    capabilities: frozenset[str] = field(default_factory=frozenset)
    cleanup: Callable[[], None] | None = None
    opener: Callable[..., ownstate.Client] | None = None
    grant_fault: Callable[[ownstate.Client, str, str],
                          AbstractContextManager[None]] | None = None
    backend: Callable[[], Backend] | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (self.backend is None):
            raise ValueError(f"target {self.name!r}: give url= or backend=, exactly one")
        if self.backend is not None:
            from ownstate.backends import Capability

            if Capability.MULTIPROCESS in self.capabilities:
                raise ValueError(f"target {self.name!r}: other processes open a database by "
                                 "URL, so a backend= target cannot declare MULTIPROCESS")
            if self.opener is not None:
                raise ValueError(f"target {self.name!r}: opener= is for url= targets")

    def connect(self, **kwargs: Any) -> ownstate.Client:
        """A sync client on the target's database; ``kwargs`` as for ``ownstate.connect``."""
        if self.opener is not None:
            return self.opener(**kwargs)
        import ownstate

        if self.backend is not None:
            return ownstate.connect(backend=self.backend(), **kwargs)
        return ownstate.connect(self.url, **kwargs)

    async def connect_async(self, **kwargs: Any) -> ownstate.AsyncClient:
        """An async client on the target's database; ``kwargs`` as for
        ``ownstate.connect_async`` (a server target's opener is not used: the URL carries
        the key of the test's main tenant)."""
        import ownstate

        if self.backend is not None:
            return await ownstate.connect_async(backend=self.backend(), **kwargs)
        return await ownstate.connect_async(self.url, **kwargs)

    def has(self, capability: str) -> bool:
        return capability in self.capabilities
