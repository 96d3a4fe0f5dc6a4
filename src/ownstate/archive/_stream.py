"""Writing, checking and reading archive files, streamed so no part sits in memory.

Export pages each part of each tenant out of the backend (keyset pages through the
transfer port), writes its lines to a temporary file while hashing them, then writes the
tar: the manifest first, then the parts. The file appears under its name only once it is
whole (it is written beside it and renamed).

Import reads the archive twice: the first pass checks everything (format version, every
part's size, line count and SHA-256 against the manifest, every line decodes) and writes
nothing; only then the second pass restores the rows, part by part in dependency order,
in batches. Restoring skips rows already stored, so an import stopped part-way and run
again finishes the job and duplicates nothing.

It may touch the backends through their transfer port and capabilities, :mod:`._format`,
ids, the error tree and the package's version; no outside library.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from .. import __version__
from .._ids import format_time, now
from ..backends import Backend, Capability
from ..backends.ports.transfer import PARTS, Row
from ..errors import InvalidInput, SchemaVersion
from ._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    decode_line,
    encode_line,
    part_file,
)

__all__ = ["ArchiveReport", "Progress", "export_parts", "open_verified", "parts_of",
           "restore_archive", "transfer_backend"]

#: rows asked of a backend per page, and restored per transaction
PAGE_ROWS = 2_000
#: a restore batch holds at most about this many bytes of lines (large checkpoints and
#: assets go in smaller batches)
BATCH_BYTES = 32 << 20
_CHUNK = 1 << 20
#: the parts an export holds unless asked for more (API keys carry secrets' hashes)
SECRET_PARTS = frozenset({"api_keys"})


class Progress(Protocol):
    """What reports progress (``ownstate.importers.progress`` makes one)."""

    def start(self, total: int | None) -> None: ...
    def advance(self, *, failed: bool = False, by: int = 1) -> None: ...
    def finish(self) -> None: ...


@dataclass
class ArchiveReport:
    """What an export, an import or a copy did: rows per part (written, or for an import
    and a copy, newly stored; rows already there are ``skipped``)."""

    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    tenants: list[str] = field(default_factory=list)
    #: parts (or row fields) of the archive this version does not know, left out
    ignored: list[str] = field(default_factory=list)
    #: for a copy with verify: parts (and sessions, as ``items:STORE/SESSION``) that differ
    differences: list[str] = field(default_factory=list)
    verified: bool = False

    @property
    def ok(self) -> bool:
        """No difference was found (or none was looked for)."""
        return not self.differences

    def summary(self) -> str:
        """One line per part, then the verdict."""
        lines = [f"{part}: {count} rows" + (f" ({self.skipped[part]} already there)"
                                            if self.skipped.get(part) else "")
                 for part, count in self.rows.items()]
        if self.ignored:
            lines.append(f"not known to this version, left out: {', '.join(self.ignored)}")
        if self.verified:
            lines.append("verified: equal" if self.ok else
                         "verified: DIFFERENT: " + ", ".join(self.differences[:20]))
        return "\n".join(lines)


def transfer_backend(backend: Backend) -> Backend:
    """``backend``, once it is known to declare the transfer capability.

    Raises :class:`~ownstate.errors.InvalidInput` otherwise."""
    if Capability.TRANSFER not in backend.capabilities:
        raise InvalidInput(f"{type(backend).__name__} cannot export or restore exactly "
                           "(a remote server: export from its database instead)", field="url")
    return backend


def parts_of(include_keys: bool) -> tuple[str, ...]:
    """The parts an export holds."""
    return tuple(p for p in PARTS if include_keys or p not in SECRET_PARTS)


async def backend_rows(backend: Backend, tenant: str, part: str,
                       limit: int = PAGE_ROWS) -> Any:
    """Every row of the part in the tenant, a page at a time (an async iterator of pages)."""
    after = None
    while True:
        rows, after = await backend.export_rows(tenant, part, after, limit)
        if rows:
            yield rows
        if after is None:
            return


# export --------------------------------------------------------------------------------


async def export_parts(backend: Backend, out: str | os.PathLike[str], *,
                       tenants: Sequence[str] | None, include_keys: bool,
                       progress: Progress | None) -> ArchiveReport:
    """Write the archive of ``tenants`` (every tenant when None) to ``out``."""
    transfer_backend(backend)
    async with backend.export_snapshot():
        return await _export_parts(backend, out, tenants=tenants, include_keys=include_keys,
                                   progress=progress)


async def _export_parts(backend: Backend, out: str | os.PathLike[str], *,
                        tenants: Sequence[str] | None, include_keys: bool,
                        progress: Progress | None) -> ArchiveReport:
    chosen = sorted(set(tenants)) if tenants is not None else await backend.transfer_tenants()
    parts = parts_of(include_keys)
    report = ArchiveReport(rows=dict.fromkeys(parts, 0), tenants=list(chosen))
    target = Path(out)
    with tempfile.TemporaryDirectory(prefix=".ownstate-export-",
                                     dir=target.parent if target.parent.exists() else None
                                     ) as scratch:
        files = {part: open(Path(scratch) / f"{part}.jsonl", "wb")  # noqa: SIM115
                 for part in parts}
        hashes = {part: hashlib.sha256() for part in parts}
        sizes = dict.fromkeys(parts, 0)
        try:
            if progress is not None:
                progress.start(None)
            for tenant in chosen:
                for part in parts:
                    async for page in backend_rows(backend, tenant, part):
                        data = b"".join(encode_line(part, tenant, row) for row in page)
                        files[part].write(data)
                        hashes[part].update(data)
                        sizes[part] += len(data)
                        report.rows[part] += len(page)
                        if progress is not None:
                            progress.advance(by=len(page))
        finally:
            for handle in files.values():
                handle.close()
        manifest = {
            "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "ownstate_version": __version__, "exported_at": format_time(now()),
            "tenants": list(chosen), "include_keys": include_keys,
            "parts": {part: {"file": part_file(part), "rows": report.rows[part],
                             "bytes": sizes[part], "sha256": hashes[part].hexdigest()}
                      for part in parts},
        }
        partial = target.with_name(target.name + ".partial")
        mode = "w:gz" if target.name.endswith((".gz", ".tgz")) else "w"
        with tarfile.open(partial, mode, format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            _add(tar, MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True).encode())
            for part in parts:
                info = tarfile.TarInfo(part_file(part))
                info.size = sizes[part]
                info.mode = 0o644
                with open(Path(scratch) / f"{part}.jsonl", "rb") as spooled:
                    tar.addfile(info, spooled)
        os.replace(partial, target)
    if progress is not None:
        progress.finish()
    return report


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    import io

    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


# reading -------------------------------------------------------------------------------


@dataclass
class Manifest:
    """An archive's manifest, once checked: the parts this version restores, in order."""

    raw: dict[str, Any]
    parts: list[str]
    ignored: list[str]

    def rows(self, part: str) -> int:
        return int(self.raw["parts"][part]["rows"])


def _refuse(path: Path, why: str) -> InvalidInput:
    return InvalidInput(f"{path} is not a whole ownstate archive: {why}; nothing was written",
                        field="archive")


def _read_manifest(path: Path, tar: tarfile.TarFile) -> Manifest:
    first = tar.next()
    if first is None or first.name != MANIFEST_NAME or not first.isfile():
        raise _refuse(path, f"it does not begin with {MANIFEST_NAME}")
    handle = tar.extractfile(first)
    assert handle is not None
    try:
        raw = json.loads(handle.read())
    except ValueError as exc:
        raise _refuse(path, f"its manifest is not JSON ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise _refuse(path, "its manifest does not name the ownstate archive format")
    version = raw.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise _refuse(path, f"format_version {version!r} is not a version")
    if version > FORMAT_VERSION:
        raise SchemaVersion(f"{path} is an archive of format version {version}; this ownstate "
                            f"({__version__}) reads versions up to {FORMAT_VERSION}: upgrade "
                            "it to import this archive; nothing was written")
    listed = raw.get("parts")
    if not isinstance(listed, dict):
        raise _refuse(path, "its manifest lists no parts")
    for part, entry in listed.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("rows"), int)
                and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str)
                and isinstance(entry.get("file"), str)):
            raise _refuse(path, f"its manifest entry for {part!r} is malformed")
    return Manifest(raw, [p for p in PARTS if p in listed],
                    sorted(p for p in listed if p not in PARTS))


def _members(path: Path, tar: tarfile.TarFile,
             manifest: Manifest) -> Iterator[tuple[str, IO[bytes]]]:
    """The parts' members in archive order, as (part, stream), each checked to be the
    file the manifest names."""
    by_file = {entry["file"]: part for part, entry in manifest.raw["parts"].items()}
    seen: set[str] = set()
    place = -1
    while (member := tar.next()) is not None:
        part = by_file.get(member.name)
        if part is None or not member.isfile():
            raise _refuse(path, f"it holds {member.name!r}, which its manifest does not list")
        if part in seen:
            raise _refuse(path, f"it holds {member.name!r} twice")
        if part in PARTS:
            if PARTS.index(part) < place:
                raise _refuse(path, f"{member.name!r} comes after a part restored after it")
            place = PARTS.index(part)
        seen.add(part)
        handle = tar.extractfile(member)
        assert handle is not None
        yield part, handle
    missing = sorted(set(by_file.values()) - seen)
    if missing:
        raise _refuse(path, f"it ends before the parts {', '.join(missing)}")


def _lines(handle: IO[bytes]) -> Iterator[bytes]:
    tail = b""
    while chunk := handle.read(_CHUNK):
        chunk = tail + chunk
        lines = chunk.split(b"\n")
        tail = lines.pop()
        yield from lines
    if tail:
        yield tail  # no final newline: counted, and refused by the size or hash check


def _check(path: Path) -> Manifest:
    """The manifest, once every byte of the archive agrees with it."""
    try:
        with tarfile.open(path, "r:*") as tar:
            manifest = _read_manifest(path, tar)
            for part, handle in _members(path, tar, manifest):
                entry = manifest.raw["parts"][part]
                digest, size, count = hashlib.sha256(), 0, 0
                known = part in PARTS
                for line in _lines(handle):
                    digest.update(line + b"\n")
                    size += len(line) + 1
                    count += 1
                    if known:
                        try:
                            decode_line(part, line, count)
                        except InvalidInput as exc:
                            raise _refuse(path, exc.message) from None
                if size != entry["bytes"] or count != entry["rows"]:
                    raise _refuse(path, f"{part} holds {count} rows in {size} bytes, its "
                                        f"manifest says {entry['rows']} in {entry['bytes']}")
                if digest.hexdigest() != entry["sha256"]:
                    raise _refuse(path, f"the SHA-256 of {part} is not the one its manifest "
                                        "gives (the part is corrupted)")
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise InvalidInput(f"no archive at {path}", field="archive") from None
        raise _refuse(path, f"it cannot be read as a tar file ({exc})") from None
    return manifest


def open_verified(path: str | os.PathLike[str]) -> Manifest:
    """Check the whole archive against its manifest, writing nothing; its manifest.

    Raises :class:`~ownstate.errors.SchemaVersion` for a newer format version and
    :class:`~ownstate.errors.InvalidInput` for anything else that is not a whole archive
    (truncated, a part corrupted, a line that does not decode)."""
    return _check(Path(path))


async def restore_archive(backend: Backend, path: str | os.PathLike[str], *,
                          tenants: Sequence[str] | None,
                          progress: Progress | None) -> ArchiveReport:
    """Check the archive whole (:func:`open_verified`), then restore its rows."""
    transfer_backend(backend)
    source = Path(path)
    manifest = _check(source)
    wanted = None if tenants is None else set(tenants)
    report = ArchiveReport(rows=dict.fromkeys(manifest.parts, 0),
                           skipped=dict.fromkeys(manifest.parts, 0),
                           ignored=manifest.ignored)
    found: set[str] = set()
    if progress is not None:
        progress.start(sum(manifest.rows(p) for p in manifest.parts))
    # the check made sure the parts come in the order they are restored: one pass
    with tarfile.open(source, "r:*") as tar:
        tar.next()  # the manifest
        for part, handle in _members(source, tar, manifest):
            if part not in PARTS:
                continue
            batch: list[Row] = []
            batch_tenant: str | None = None
            held = 0
            for number, line in enumerate(_lines(handle), start=1):
                tenant, row = decode_line(part, line, number, checked=True)
                if wanted is not None and tenant not in wanted:
                    continue
                found.add(tenant)
                if batch and (tenant != batch_tenant or len(batch) >= PAGE_ROWS
                              or held >= BATCH_BYTES):
                    await _restore(backend, batch_tenant, part, batch, report, progress)
                    batch, held = [], 0
                batch_tenant = tenant
                batch.append(row)
                held += len(line)
            if batch:
                await _restore(backend, batch_tenant, part, batch, report, progress)
    report.tenants = sorted(found)
    if progress is not None:
        progress.finish()
    return report


async def _restore(backend: Backend, tenant: str | None, part: str, rows: list[Row],
                   report: ArchiveReport, progress: Progress | None) -> None:
    assert tenant is not None
    stored = await backend.restore_rows(tenant, part, rows)
    report.rows[part] += stored
    report.skipped[part] += len(rows) - stored
    if progress is not None:
        progress.advance(by=len(rows))
