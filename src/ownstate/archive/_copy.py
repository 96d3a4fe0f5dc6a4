"""Copying every row from one backend to another, and checking that both hold the same.

The copy is the export stream without the file: pages read from the source through the
transfer port go straight to the destination's exact restore, the next page being read
while the last one is written. Restoring skips rows already stored, so a copy stopped
part-way and run again continues it and duplicates nothing.

Verification reads both sides again and compares, part by part, the row count and the
SHA-256 of the rows as the archive spells them (JSON values as stored: a copy stores the
text it is given, so the two sides hold the same text); items are compared per session,
so a difference names the session.

It may touch the backends through their transfer port (``ownstate.backends``,
``backends.ports.transfer``) and this package's :mod:`._format` and :mod:`._stream`; no
outside library.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

from ..backends import Backend
from ..backends.ports.transfer import Row
from ._format import encode_line
from ._stream import PAGE_ROWS, ArchiveReport, Progress, backend_rows, parts_of, transfer_backend

__all__ = ["compare", "copy_rows"]

#: rows per page of a copy: large pages make few transactions (PostgreSQL writes a page
#: with one COPY)
COPY_ROWS = 10_000


async def _pages(backend: Backend, tenant: str, part: str,
                 queue: asyncio.Queue[list[Row] | None]) -> None:
    try:
        async for page in backend_rows(backend, tenant, part, COPY_ROWS):
            await queue.put(page)
    finally:
        await queue.put(None)


async def copy_rows(source: Backend, target: Backend, *, tenants: Sequence[str] | None,
                    include_keys: bool, verify: bool,
                    progress: Progress | None) -> ArchiveReport:
    """Restore every row of ``tenants`` (every tenant when None) of ``source`` into
    ``target``; with ``verify``, then compare the two."""
    transfer_backend(source)
    transfer_backend(target)
    async with source.export_snapshot():
        report = await _copy_rows(source, target, tenants=tenants, include_keys=include_keys,
                                  progress=progress)
    if verify:
        report.differences = await compare(source, target, tenants=report.tenants,
                                           parts=list(report.rows))
        report.verified = True
    return report


async def _copy_rows(source: Backend, target: Backend, *, tenants: Sequence[str] | None,
                     include_keys: bool, progress: Progress | None) -> ArchiveReport:
    chosen = sorted(set(tenants)) if tenants is not None else await source.transfer_tenants()
    parts = parts_of(include_keys)
    report = ArchiveReport(rows=dict.fromkeys(parts, 0), skipped=dict.fromkeys(parts, 0),
                           tenants=list(chosen))
    if progress is not None:
        progress.start(None)
    for tenant in chosen:
        for part in parts:
            queue: asyncio.Queue[list[Row] | None] = asyncio.Queue(maxsize=2)
            reader = asyncio.ensure_future(_pages(source, tenant, part, queue))
            try:
                while (page := await queue.get()) is not None:
                    stored = await target.restore_rows(tenant, part, page)
                    report.rows[part] += stored
                    report.skipped[part] += len(page) - stored
                    if progress is not None:
                        progress.advance(by=len(page))
            finally:
                if not reader.done():
                    reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            reader.result()  # a failed read fails the copy
    if progress is not None:
        progress.finish()
    return report


async def _digests(backend: Backend, tenant: str, part: str) -> dict[Any, tuple[int, str]]:
    """Per session (items) or for the whole part (key None): rows and SHA-256."""
    sums: dict[Any, Any] = {}
    counts: dict[Any, int] = {}
    async for page in backend_rows(backend, tenant, part, PAGE_ROWS):
        for row in page:
            key = (row["store"], row["session_id"]) if part == "items" else None
            digest = sums.get(key)
            if digest is None:
                digest = sums[key] = hashlib.sha256()
            digest.update(encode_line(part, tenant, row, as_stored=True))
            counts[key] = counts.get(key, 0) + 1
    return {key: (counts[key], sums[key].hexdigest()) for key in sums}


async def compare(source: Backend, target: Backend, *, tenants: Sequence[str],
                  parts: Sequence[str]) -> list[str]:
    """What differs between the two backends' rows, as ``tenant:part`` (or, for items,
    ``tenant:items:STORE/SESSION``); empty when they hold the same."""
    differences: list[str] = []
    for tenant in tenants:
        for part in parts:
            mine, theirs = await asyncio.gather(_digests(source, tenant, part),
                                                _digests(target, tenant, part))
            if mine == theirs:
                continue
            if part != "items":
                differences.append(f"{tenant}:{part}")
                continue
            for key in sorted(set(mine) | set(theirs)):
                if mine.get(key) != theirs.get(key):
                    differences.append(f"{tenant}:items:{key[0]}/{key[1]}")
    return differences
