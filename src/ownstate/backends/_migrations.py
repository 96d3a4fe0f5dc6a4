"""Versioned migrations as the SQL backends keep them: the record of one migration, and the
rule that decides, from the version a database holds, whether setup migrates, has nothing
to do, or refuses.

A database newer than this code is always refused (downgrading would lose what the newer
code wrote); an older one is migrated only when the caller allows it, so a process that may
not run DDL verifies instead. It may touch nothing of ownstate's but its errors, and no
database: each backend runs its own migrations.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SchemaVersion

__all__ = ["Migration", "needs_migration"]


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
