"""Who is calling: the bearer token checked against the stored keys, briefly remembered.

It may touch the public API (a caller's :class:`~ownstate.AsyncClient`,
``ownstate.api.access``), the backend it is given, the embedder, the error tree, the limits
and the model; no web framework.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from ..api import AsyncClient
from ..api.access import UNKNOWN_KEY
from ..backends import Backend
from ..embeddings import Embedder
from ..errors import Unauthenticated
from ..limits import Limits
from ..model import ApiKey

__all__ = ["Caller", "KeyCheck"]


@dataclass(frozen=True, slots=True)
class Caller:
    """The key a request carries, and a client acting for its tenant."""

    key: ApiKey
    client: AsyncClient

    @property
    def tenant(self) -> str:
        return self.key.tenant

    @property
    def principal(self) -> str:
        return self.key.principal

    @property
    def admin(self) -> bool:
        return self.key.admin


class KeyCheck:
    """Authenticates tokens, remembering a live key's caller for ``cache_seconds`` so that
    a busy client costs one key lookup per interval rather than per request.

    A key revoked through this server stops working at once; one revoked elsewhere (the
    CLI, another replica) within ``cache_seconds``. Only the token's digest is held.
    """

    def __init__(self, backend: Backend, limits: Limits, cache_seconds: float,
                 embedder: Embedder | None = None) -> None:
        self.backend = backend
        self.limits = limits
        self.embedder = embedder
        self.cache_seconds = cache_seconds
        # Keys are looked up in every tenant, so any tenant's client finds them.
        # made first: it refuses an embedder that is not one, or a backend without vectors
        self._keys = AsyncClient(backend, limits=limits, owns_backend=False,
                                 embedder=embedder).api_keys
        self._cache: dict[bytes, tuple[Caller, float]] = {}

    async def caller(self, authorization: str | None) -> Caller:
        """The caller of a request with this ``Authorization`` header.

        Raises :class:`~ownstate.errors.Unauthenticated`.
        """
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(UNKNOWN_KEY)
        token = token.strip()
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        key = await self._keys.authenticate(token)
        # The client holds nothing of a request's: one serves every request the key makes.
        caller = Caller(key, AsyncClient(self.backend, tenant=key.tenant, limits=self.limits,
                                         owns_backend=False, embedder=self.embedder))
        if self.cache_seconds > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (caller, time.monotonic() + self.cache_seconds)
        return caller

    def forget(self, key_id: str) -> None:
        """Drop a revoked key from the cache so that this replica refuses it at once."""
        for digest, (caller, _) in list(self._cache.items()):
            if caller.key.key_id == key_id:
                self._cache.pop(digest, None)
