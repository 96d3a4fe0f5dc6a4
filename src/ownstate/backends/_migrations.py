"""Versioned migrations as the SQL backends keep them: the record of one migration, the
rule that decides, from the version a database holds, whether setup migrates, has nothing
to do, or refuses, and how a migration tells what it is doing.

A database newer than this code is always refused (downgrading would lose what the newer
code wrote); an older one is migrated only when the caller allows it, so a process that may
not run DDL verifies instead.

Migrating says what it does on the ``ownstate.migrate`` logger, at INFO: each migration as
it starts, and for the ones that go over existing rows (indexing them for search, say)
their count so far, the rate and the time left, every few seconds and once at the end.
``ownstate migrate`` prints those lines; a library user sees them through ``logging``.

It may touch nothing of ownstate's but its errors and how a duration is spelt
(``_duration``), and no database: each backend runs its own migrations.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .._duration import duration_text
from ..errors import SchemaVersion

__all__ = ["LOG", "Migration", "Progress", "needs_migration"]

#: Where migrations say what they do.
LOG = logging.getLogger("ownstate.migrate")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


def needs_migration(found: int, expected: int, *, migrate: bool,
                    schema: str = "the database schema") -> bool:
    """Whether a database at version ``found`` must be migrated to ``expected``.

    Raises :class:`~ownstate.errors.SchemaVersion` when it is newer than this code, or older
    and ``migrate`` is false; ``schema`` names it in that message.
    """
    if found > expected:
        raise SchemaVersion(
            f"the database schema is version {found}, newer than this ownstate "
            f"({expected}); upgrade ownstate", found=found, expected=expected)
    if found < expected and not migrate:
        raise SchemaVersion(
            f"{schema} is version {found}, expected {expected}; run `ownstate migrate`",
            found=found, expected=expected)
    return found < expected


class Progress:
    """Rows a migration has gone over, logged now and then: ``indexing items for search:
    40,000 of 1,000,000 (12,345/s, about 1m18s left)``. ``total`` is None when the work is
    not counted beforehand."""

    def __init__(self, what: str, total: int | None = None, *, every: float = 5.0) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self._every = every
        self._started = self._logged = time.monotonic()
        self._told = 0  # the count last logged

    def advance(self, rows: int) -> None:
        self.done += rows
        now = time.monotonic()
        if now - self._logged >= self._every:
            self._logged = now
            self._log(now)

    def finish(self) -> None:
        """Log the final count, unless it was just logged or there was nothing to do."""
        if self.done != self._told or (self.total and not self.done):
            self._log(time.monotonic())

    def _log(self, now: float) -> None:
        self._told = self.done
        elapsed = max(now - self._started, 1e-9)
        rate = self.done / elapsed
        counted = f"{self.done:,}" if self.total is None else f"{self.done:,} of {self.total:,}"
        left = ""
        if self.total is not None and self.done < self.total and rate > 0:
            left = f", about {duration_text((self.total - self.done) / rate)} left"
        LOG.info("%s: %s (%s/s%s)", self.what, counted, f"{rate:,.0f}", left)
