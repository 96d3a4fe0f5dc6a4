"""The Redis backend: distributed sessions, runs with leases, expiring checkpoints.

``redis://host:6379/0`` (or ``rediss://`` for TLS) reaches one Redis; ``redis+cluster://``
and ``rediss+cluster://`` reach Redis Cluster through any of its nodes. Options:
``?prefix=NAME`` (default ``ownstate``) namespaces every key, and ``?checkpoint_ttl=SECONDS``
makes a run's checkpoints expire that long after its last checkpoint write. Other options
go to redis-py.

Each session (with its forks) and everything it owns lives in one hash slot, so every
write to it is one atomic Lua script, on one Redis and on Cluster alike; see
:mod:`ownstate.backends.redis._core` for the layout and ``docs/redis.md`` for what
durability depends on.

It may touch the interface (``base``), the migrations' log (``_migrations``), its own parts
and errors; it reaches redis-py only through ``_core``.
"""

from __future__ import annotations

from typing import ClassVar

from ...errors import InvalidInput, SchemaVersion
from .._migrations import LOG
from ..base import Backend, Capability
from ._core import parse_redis_url
from .access import AccessInRedis
from .assets import AssetsInRedis
from .checkpoints import CheckpointsInRedis
from .facts import FactsInRedis
from .runs import RunsInRedis
from .search import SearchInRedis
from .sessions import SessionsInRedis
from .transfer import TransferInRedis
from .vectors import VectorsInRedis

__all__ = ["LAYOUT_VERSION", "RedisBackend"]

#: The version of the key layout this code reads and writes.
#: 2: items are indexed for search in their session tree (``ITEM_INDEX`` in _core.py);
#: migrating from 1 indexes the items already stored.
LAYOUT_VERSION = 2


class RedisBackend(VectorsInRedis, FactsInRedis, SearchInRedis, SessionsInRedis, TransferInRedis,
                   CheckpointsInRedis, RunsInRedis, AssetsInRedis, AccessInRedis, Backend):
    """Every kind of state in Redis or Redis Cluster (redis-py's asyncio client).

    Give it a URL, or a ready ``redis.asyncio.Redis`` / ``RedisCluster`` made with
    ``decode_responses=False`` (``client=``; it is used and never closed); ``prefix`` and
    ``checkpoint_ttl`` as in the URL options. Raises
    :class:`~ownstate.errors.InvalidInput` for a malformed URL, prefix or TTL, or a client
    that decodes responses.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset(
        {Capability.OPERATOR, Capability.MULTIPROCESS, Capability.PERSISTENT, Capability.MIGRATIONS,
         Capability.TEXT_SEARCH, Capability.STEPWISE_STORES, Capability.VECTORS,
         Capability.TRANSFER}
    )

    @classmethod
    def from_url(cls, url: str) -> RedisBackend:
        """A backend for a ``redis://``, ``rediss://``, ``redis+cluster://`` or
        ``rediss+cluster://`` URL. Raises :class:`~ownstate.errors.InvalidInput`."""
        _, _, options = parse_redis_url(url)
        ttl = None
        if options.get("checkpoint_ttl"):
            try:
                ttl = float(options["checkpoint_ttl"])
            except ValueError as exc:
                raise InvalidInput("URL option checkpoint_ttl= must be a number of seconds",
                                   field="url") from exc
        return cls(url, prefix=options.get("prefix") or "ownstate", checkpoint_ttl=ttl)

    def _layout_key(self) -> str:
        return f"{self.prefix}:layout"

    async def schema_status(self) -> tuple[int, int]:
        found = await self._command("GET", self._layout_key(), write=False)
        return (int(found) if found is not None else 0, LAYOUT_VERSION)

    async def setup(self, *, migrate: bool) -> None:
        """Record the layout version under the prefix (``migrate=True``), or check it.

        There is no schema to create: keys are made as data arrives; migrating data of
        layout 1 indexes its items for search (see search.py). Raises
        :class:`~ownstate.errors.SchemaVersion` when verifying finds no layout version (a
        prefix never set up) or another one, and :class:`~ownstate.errors.BackendUnavailable`.
        """
        if migrate:
            found, _ = await self.schema_status()
            if 0 < found < LAYOUT_VERSION:
                LOG.info("layout %d to %d: items indexed for search", found, LAYOUT_VERSION)
                await self.index_existing_items()
                await self._command("SET", self._layout_key(), LAYOUT_VERSION, write=True)
            else:
                await self._command("SET", self._layout_key(), LAYOUT_VERSION, "NX",
                                    write=True)
        found, expected = await self.schema_status()
        if found > expected:
            raise SchemaVersion(
                f"the Redis data under prefix {self.prefix!r} has layout {found}, newer than "
                f"this ownstate ({expected}); upgrade ownstate", found=found, expected=expected)
        if found != expected:
            raise SchemaVersion(
                f"the Redis data under prefix {self.prefix!r} has layout {found}, expected "
                f"{expected}; run `ownstate migrate`", found=found, expected=expected)
