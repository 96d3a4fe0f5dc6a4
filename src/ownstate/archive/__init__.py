"""Archives and copies: every row of a deployment out to a file, back in, or across backends.

>>> from ownstate import archive
>>> archive.export(client, "state.tar")                 # every tenant; keys only if asked
>>> archive.import_archive(other, "state.tar")          # checked whole, then restored
>>> archive.copy("sqlite:///app.db", "postgresql://db/app", verify=True)

The archive is a tar of a manifest and one file of canonical JSON lines per part
(``docs/archive.md`` describes it, version by version). Export is deterministic: export,
import into another backend, export again, and every part is byte for byte the same.
An archive of a newer format version, with a part whose hash or size is not the
manifest's, or cut short, is refused before anything is written. Import and copy skip
rows already stored, so either, stopped part-way and run again, duplicates nothing.

Each function has an async twin (``aexport``, ``aimport_archive``, ``acopy``) over
:class:`~ownstate.AsyncClient`. Both ends must be backends that declare
:attr:`~ownstate.backends.Capability.TRANSFER` (memory, SQLite, PostgreSQL, Redis; not a
remote server, whose database is exported where it runs).

It may touch the public API and the adapters' bridge (the sync functions run the async ones
through it) and the modules of this package, which reach the backends.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from ..adapters._bridge import Bridge
from ..api import AsyncClient, Client, connect_async
from ._copy import compare
from ._format import FORMAT_VERSION
from ._stream import ArchiveReport, Manifest, Progress, open_verified

__all__ = ["FORMAT_VERSION", "ArchiveReport", "Manifest", "Progress", "acopy", "aexport",
           "aimport_archive", "compare", "copy", "export", "import_archive", "verify"]


async def aexport(client: AsyncClient, out: str | os.PathLike[str], *,
                  tenants: Sequence[str] | None = None, include_keys: bool = False,
                  progress: Progress | None = None) -> ArchiveReport:
    """Write the archive of ``tenants`` (every tenant when None) of the client's database
    to ``out`` (a ``.tar``, or gzip-compressed when it ends in ``.gz`` or ``.tgz``). API
    keys (their secrets' hashes) only with ``include_keys``.

    Raises :class:`~ownstate.errors.InvalidInput` when the backend cannot transfer
    (a remote server), :class:`OSError` when the file cannot be written."""
    from ._stream import export_parts

    return await export_parts(client.backend, out, tenants=tenants,
                              include_keys=include_keys, progress=progress)


async def aimport_archive(client: AsyncClient, path: str | os.PathLike[str], *,
                          tenants: Sequence[str] | None = None,
                          progress: Progress | None = None) -> ArchiveReport:
    """Check the archive at ``path`` whole, then restore its rows (of ``tenants`` only,
    when given) into the client's database, exactly: ids, sequence numbers, times, fact
    versions, fencing tokens. Rows already stored are skipped.

    Raises :class:`~ownstate.errors.SchemaVersion` (a newer format version) and
    :class:`~ownstate.errors.InvalidInput` (not a whole archive; a backend that cannot
    transfer), in both cases before anything is written."""
    from ._stream import restore_archive

    return await restore_archive(client.backend, path, tenants=tenants, progress=progress)


async def acopy(source: AsyncClient, target: AsyncClient, *,
                tenants: Sequence[str] | None = None, include_keys: bool = False,
                verify: bool = False, progress: Progress | None = None) -> ArchiveReport:
    """Copy every row of ``tenants`` (every tenant when None) from the source's database
    into the target's, skipping rows already there; with ``verify``, then compare both
    (counts, and SHA-256 per part and per session: ``report.ok``, ``report.differences``).

    Raises :class:`~ownstate.errors.InvalidInput` when either backend cannot transfer."""
    from ._copy import copy_rows

    return await copy_rows(source.backend, target.backend, tenants=tenants,
                           include_keys=include_keys, verify=verify, progress=progress)


def export(client: Client | AsyncClient, out: str | os.PathLike[str], *,
           tenants: Sequence[str] | None = None, include_keys: bool = False,
           progress: Progress | None = None) -> ArchiveReport:
    """:func:`aexport` for sync code (not on a running event loop)."""
    bridge = Bridge(client)
    return asyncio.run(bridge.acall(aexport(bridge.client, out, tenants=tenants,
                                            include_keys=include_keys, progress=progress)))


def import_archive(client: Client | AsyncClient, path: str | os.PathLike[str], *,
                   tenants: Sequence[str] | None = None,
                   progress: Progress | None = None) -> ArchiveReport:
    """:func:`aimport_archive` for sync code (not on a running event loop)."""
    bridge = Bridge(client)
    return asyncio.run(bridge.acall(aimport_archive(bridge.client, path, tenants=tenants,
                                                    progress=progress)))


def copy(source_url: str, target_url: str, *, tenants: Sequence[str] | None = None,
         include_keys: bool = False, verify: bool = False,
         progress: Progress | None = None) -> ArchiveReport:
    """:func:`acopy` for sync code (not on a running event loop), between the databases
    at two URLs (the target's schema is migrated first)."""

    async def run() -> ArchiveReport:
        source = await connect_async(source_url, migrate=False)
        try:
            target = await connect_async(target_url)
            try:
                return await acopy(source, target, tenants=tenants,
                                   include_keys=include_keys, verify=verify,
                                   progress=progress)
            finally:
                await target.close()
        finally:
            await source.close()

    return asyncio.run(run())


def verify(path: str | os.PathLike[str]) -> Manifest:
    """Check the archive at ``path`` against its manifest without writing anywhere; its
    manifest. Raises as :func:`aimport_archive` does."""
    return open_verified(path)
