"""What every importer is made of, and the loop that runs one.

An importer reads one framework's own storage, read-only, and writes through the public
:class:`~ownstate.AsyncClient` exactly what that framework's ownstate adapter would have
written. Its work is cut into *units* (a LangGraph thread, a Claude session, ...), each
imported on its own:

1. :meth:`Importer.units` lists the source's units (cheap: ids, never payloads);
2. :meth:`Importer.decode` reads one unit whole and decodes it with the framework's own
   package. A unit that cannot be decoded raises :class:`DecodeError` carrying its ids:
   nothing of it is written, and the import goes on with the next unit;
3. :meth:`Importer.write` writes the decoded unit. Every id and idempotency key it writes
   is derived from source ids, and it first looks at what is stored, so writing a unit
   again adds nothing: an import killed half-way is finished by running it again;
4. :meth:`Importer.digest` (verify) is one digest of the unit as the source holds it and
   one of what is stored, computed the same way; any difference is reported.

:func:`arun_import` drives the loop, several units at a time, and returns an
:class:`ImportReport`. A dry run calls :meth:`Importer.write` with ``dry_run=True``: it
reads the destination to count what it would write, and writes nothing.

It may touch only the public API (``ownstate.api``) and the error tree, never a backend.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import zlib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..api import AsyncClient
from ..errors import BackendUnavailable, OwnstateError

__all__ = [
    "DecodeError",
    "ImportOption",
    "ImportReport",
    "Importer",
    "Progress",
    "SourceError",
    "Unit",
    "UnitFailure",
    "Written",
    "arun_import",
]

D = TypeVar("D")
A = TypeVar("A")


class SourceError(Exception):
    """The source as a whole cannot be read (unreachable, not a source of that kind, its
    tables missing); raised by :func:`arun_import`, with the framework's error as its
    cause. Nothing more is imported."""


class DecodeError(Exception):
    """A source unit that cannot be read or decoded; ``ids`` say which (e.g. the thread
    and checkpoint ids), ``reason`` why. Nothing of that unit is written."""

    def __init__(self, reason: str, **ids: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.ids = {k: v for k, v in ids.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Unit:
    """One independently imported piece of the source: its ``key`` (unique in the source,
    shown in reports), the source ids that name it (shown with its failures), and what
    else the listing learned of it for :meth:`Importer.decode` (``listed``, not shown)."""

    key: str
    ids: Mapping[str, Any] = field(default_factory=dict)
    listed: Any = None


@dataclass(frozen=True, slots=True)
class ImportOption:
    """An option one source takes besides ``--from`` (shown as ``--<name>`` by the CLI)."""

    name: str
    help: str
    default: str
    choices: tuple[str, ...] | None = None


@dataclass(slots=True)
class Written:
    """What writing one unit wrote (or, in a dry run, would write), by kind:
    ``sessions``, ``items``, ``runs``, ``checkpoints``, ``writes``, ``facts``.
    ``already`` is true when everything was already stored."""

    counts: Counter[str] = field(default_factory=Counter)
    already: bool = False


@dataclass(frozen=True, slots=True)
class UnitFailure:
    """A unit that was not imported (``stage`` ``decode`` or ``write``) or that differs
    from what is stored (``stage`` ``verify``), with its ids and the reason."""

    unit: str
    stage: str
    reason: str
    ids: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        ids = " ".join(f"{k}={v!r}" for k, v in self.ids.items())
        return f"{self.stage} failed for {self.unit} ({ids}): {self.reason}"


@dataclass(slots=True)
class ImportReport:
    """The outcome of one import: units seen, imported now, found already imported,
    failed; what was written by kind (what would be, in a dry run); the failures; and,
    with ``verify``, how many units were checked and the source's counts by kind next to
    the stored ones."""

    source: str
    dry_run: bool = False
    units: int = 0
    imported: int = 0
    already: int = 0
    failed: int = 0
    written: Counter[str] = field(default_factory=Counter)
    verified: int = 0
    source_counts: Counter[str] = field(default_factory=Counter)
    stored_counts: Counter[str] = field(default_factory=Counter)
    failures: list[UnitFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No unit failed and, when verified, every digest and count matched."""
        return not self.failures and self.source_counts == self.stored_counts

    def summary(self) -> str:
        """A few lines for people: totals, then one line per failure."""
        verb = "would write" if self.dry_run else "wrote"
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.written.items()) if n) or "nothing"
        done = "to import" if self.dry_run else "imported"
        lines = [f"{self.source}: {self.units} units, {self.imported} {done}, "
                 f"{self.already} already imported, {self.failed} failed; {verb} {kinds}"]
        if self.verified:
            same = self.source_counts == self.stored_counts
            counts = ", ".join(f"{k} {self.source_counts[k]}/{self.stored_counts[k]}"
                               for k in sorted(self.source_counts | self.stored_counts))
            lines.append(f"verified {self.verified} units: counts (source/stored) {counts}"
                         f"{'' if same else ' DIFFER'}")
        lines += [str(f) for f in self.failures]
        return "\n".join(lines)


class Progress(Protocol):
    """Told about each unit as it ends; see :mod:`ownstate.importers.progress`."""

    def start(self, total: int | None) -> None: ...

    def advance(self, *, failed: bool = False) -> None: ...

    def finish(self) -> None: ...


class Importer(ABC, Generic[D]):
    """One source's importer. Subclasses set ``name`` (the source name, e.g.
    ``"langgraph"``), ``default_store`` (the ownstate store its adapter writes to) and
    ``options``, and implement the four steps of the module docstring.

    ``source`` is what ``--from`` gave (a URL or a path); ``store`` the ownstate store to
    write to (``default_store`` unless named); ``options`` the values of ``options``.
    """

    name: ClassVar[str]
    default_store: ClassVar[str]
    options: ClassVar[tuple[ImportOption, ...]] = ()
    #: units imported at once (each waits on the source and the database in turn)
    concurrency: ClassVar[int] = 8

    def __init__(self, source: str, *, store: str | None = None, **options: str) -> None:
        self.source = source
        self.store = store or self.default_store
        known = {o.name: o for o in self.options}
        unknown = set(options) - set(known)
        if unknown:
            raise ValueError(f"{self.name} takes no option {sorted(unknown)[0]!r}")
        self.settings = {name: options.get(name, o.default) for name, o in known.items()}
        for name, value in self.settings.items():
            choices = known[name].choices
            if choices is not None and value not in choices:
                raise ValueError(f"{self.name}: {name} must be one of {', '.join(choices)}")
        self._adapters: dict[int, Any] = {}

    def adapter(self, client: AsyncClient, make: Callable[[AsyncClient], A]) -> A:
        """The adapter the import writes through for ``client``: ``make(client)``, made
        once per client, so that its caches serve every unit."""
        made = self._adapters.get(id(client))
        if made is None:
            made = self._adapters[id(client)] = make(client)
        return made

    async def open(self) -> None:
        """Connect to the source (read-only). Called once before :meth:`units`."""

    async def close(self) -> None:
        """Release the source. Called once at the end, also after a failure."""

    async def count(self) -> int | None:
        """How many units :meth:`units` will give, for progress; ``None`` if unknown."""
        return None

    @abstractmethod
    def units(self) -> AsyncIterator[Unit]:
        """The source's units, each once."""

    @abstractmethod
    async def decode(self, unit: Unit) -> D:
        """The unit read whole and decoded; raises :class:`DecodeError`."""

    @abstractmethod
    async def write(self, client: AsyncClient, unit: Unit, decoded: D, *,
                    dry_run: bool) -> Written:
        """Write what is not stored yet (count it only, with ``dry_run``)."""

    @abstractmethod
    async def digest(self, client: AsyncClient, unit: Unit, decoded: D
                     ) -> tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]:
        """``(source digest, source counts), (stored digest, stored counts)``."""

    # batches ------------------------------------------------------------------------------
    #
    # An importer that reads and writes many units at once (one query for many units'
    # rows, one transaction for many units' writes) says how many with batch_size and
    # overrides the *_many steps; each returns one outcome per unit, in order, an error
    # standing for a unit that failed that step (the others go on).

    #: batches imported at once, when batch_size is over 1
    batches_in_flight: ClassVar[int] = 3

    def batch_size(self, client: AsyncClient, *, dry_run: bool) -> int:
        """Units per batch for an import into ``client``; 1 imports them one at a time."""
        return 1

    async def decode_many(self, units: list[Unit]) -> list[D | DecodeError]:
        """:meth:`decode` of each unit."""
        out: list[D | DecodeError] = []
        for unit in units:
            try:
                out.append(await self.decode(unit))
            except DecodeError as exc:
                out.append(exc)
        return out

    async def write_many(self, client: AsyncClient, units: list[Unit], decoded: list[D], *,
                         dry_run: bool) -> list[Written | OwnstateError]:
        """:meth:`write` of each unit."""
        out: list[Written | OwnstateError] = []
        for unit, one in zip(units, decoded, strict=True):
            try:
                out.append(await self.write(client, unit, one, dry_run=dry_run))
            except BackendUnavailable:
                raise
            except OwnstateError as exc:
                out.append(exc)
        return out

    async def digest_many(self, client: AsyncClient, units: list[Unit], decoded: list[D]
                          ) -> list[tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]
                                    | OwnstateError]:
        """:meth:`digest` of each unit."""
        out: list[tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]
                  | OwnstateError] = []
        for unit, one in zip(units, decoded, strict=True):
            try:
                out.append(await self.digest(client, unit, one))
            except BackendUnavailable:
                raise
            except OwnstateError as exc:
                out.append(exc)
        return out


def canonical_digest(values: Iterable[Any]) -> str:
    """A digest of JSON values that ignores key order (as databases store objects)."""
    digest = hashlib.sha256()
    for value in values:
        digest.update(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                 ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


async def arun_import(importer: Importer[Any], client: AsyncClient, *, dry_run: bool = False,
                      verify: bool = False, progress: Progress | None = None,
                      concurrency: int | None = None,
                      shard: tuple[int, int] = (0, 1)) -> ImportReport:
    """Import every unit of ``importer``'s source into ``client``'s database.

    With ``verify``, each unit is then checked against what is stored (with ``dry_run``
    too, which makes a verify-only pass). Failures of single units are collected in the
    report; :class:`~ownstate.errors.BackendUnavailable` (the database is gone) stops the
    import and is raised, as is any error of the source as a whole.

    ``shard=(i, n)`` imports only the units whose key hashes to ``i`` modulo ``n``, so
    that ``n`` processes (on as many cores) share one import without overlapping.
    """
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: the index must be in 0..{count - 1}")
    report = ImportReport(importer.name, dry_run=dry_run)
    width = concurrency or importer.concurrency
    try:
        await importer.open()
    except (ValueError, SourceError):
        raise
    except Exception as exc:
        raise SourceError(f"cannot open {importer.name} source {importer.source!r}: "
                          f"{exc}") from exc
    try:
        if progress is not None:
            try:
                total = await importer.count()
            except Exception as exc:
                raise SourceError(f"cannot read {importer.name} source "
                                  f"{importer.source!r}: {exc}") from exc
            progress.start(None if total is None else -(-total // count) if count > 1
                           else total)
        size = importer.batch_size(client, dry_run=dry_run)
        if size > 1:  # the units go in batches; --concurrency bounds a batch
            size = min(size, concurrency or size)
            width = importer.batches_in_flight
        queue: asyncio.Queue[list[Unit] | None] = asyncio.Queue(maxsize=width * 2)

        async def worker() -> None:
            while (units := await queue.get()) is not None:
                if size > 1:
                    outcomes = await _many(importer, client, units, report, dry_run=dry_run,
                                           verify=verify)
                else:
                    outcomes = [await _one(importer, client, units[0], report,
                                           dry_run=dry_run, verify=verify)]
                if progress is not None:
                    for failed in outcomes:
                        progress.advance(failed=failed)

        async def feed() -> None:
            batch: list[Unit] = []
            try:
                async for unit in _listed(importer):
                    if count > 1 and zlib.crc32(unit.key.encode()) % count != index:
                        continue
                    report.units += 1
                    batch.append(unit)
                    if len(batch) >= size:
                        await queue.put(batch)
                        batch = []
                if batch:
                    await queue.put(batch)
            finally:
                for _ in range(width):
                    await queue.put(None)

        async with asyncio.TaskGroup() as group:
            group.create_task(feed())
            for _ in range(width):
                group.create_task(worker())
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None
    finally:
        if progress is not None:
            progress.finish()
        await importer.close()
    report.failures.sort(key=lambda f: (f.unit, f.stage))
    return report


async def _listed(importer: Importer[Any]) -> AsyncIterator[Unit]:
    try:
        async for unit in importer.units():
            yield unit
    except Exception as exc:
        raise SourceError(f"cannot list the units of {importer.name} source "
                          f"{importer.source!r}: {exc}") from exc


async def _many(importer: Importer[Any], client: AsyncClient, units: list[Unit],
                report: ImportReport, *, dry_run: bool, verify: bool) -> list[bool]:
    """Import (and verify) a batch of units; returns whether each failed."""
    failed = [False] * len(units)

    def fail(n: int, stage: str, exc: Exception) -> None:
        failed[n] = True
        unit = units[n]
        if isinstance(exc, DecodeError):
            report.failures.append(UnitFailure(unit.key, stage, exc.reason,
                                               {**unit.ids, **exc.ids}))
        else:
            message = exc.message if isinstance(exc, OwnstateError) else str(exc)
            report.failures.append(UnitFailure(unit.key, stage, " ".join(message.split()),
                                               unit.ids))
        report.failed += 1

    decoded = await importer.decode_many(units)
    ok = [n for n, d in enumerate(decoded) if not isinstance(d, DecodeError)]
    for n, d in enumerate(decoded):
        if isinstance(d, DecodeError):
            fail(n, "decode", d)
    written = await importer.write_many(client, [units[n] for n in ok],
                                        [decoded[n] for n in ok], dry_run=dry_run)
    done = []
    for n, w in zip(ok, written, strict=True):
        if isinstance(w, OwnstateError):
            fail(n, "write", w)
            continue
        report.written.update(w.counts)
        if w.already:
            report.already += 1
        else:
            report.imported += 1
        done.append(n)
    if verify and done:
        digests = await importer.digest_many(client, [units[n] for n in done],
                                             [decoded[n] for n in done])
        for n, outcome in zip(done, digests, strict=True):
            if isinstance(outcome, OwnstateError):
                fail(n, "verify", outcome)
                continue
            (source_digest, source_counts), (stored_digest, stored_counts) = outcome
            report.verified += 1
            report.source_counts.update(source_counts)
            report.stored_counts.update(stored_counts)
            if source_digest != stored_digest or source_counts != stored_counts:
                failed[n] = True
                report.failures.append(UnitFailure(
                    units[n].key, "verify", "what is stored differs from the source "
                    f"(counts {dict(source_counts)} vs {dict(stored_counts)})", units[n].ids))
    return failed


async def _one(importer: Importer[Any], client: AsyncClient, unit: Unit,
               report: ImportReport, *, dry_run: bool, verify: bool) -> bool:
    """Import (and verify) one unit; returns whether it failed."""
    stage = "decode"
    try:
        decoded = await importer.decode(unit)
        stage = "write"
        written = await importer.write(client, unit, decoded, dry_run=dry_run)
        report.written.update(written.counts)
        if written.already:
            report.already += 1
        else:
            report.imported += 1
        if verify:
            stage = "verify"
            (source_digest, source_counts), (stored_digest, stored_counts) = \
                await importer.digest(client, unit, decoded)
            report.verified += 1
            report.source_counts.update(source_counts)
            report.stored_counts.update(stored_counts)
            if source_digest != stored_digest or source_counts != stored_counts:
                report.failures.append(UnitFailure(
                    unit.key, "verify", "what is stored differs from the source "
                    f"(counts {dict(source_counts)} vs {dict(stored_counts)})", unit.ids))
                return True
    except DecodeError as exc:
        report.failed += 1
        report.failures.append(UnitFailure(unit.key, "decode", exc.reason,
                                           {**unit.ids, **exc.ids}))
        return True
    except BackendUnavailable:
        raise
    except OwnstateError as exc:
        report.failed += 1
        report.failures.append(UnitFailure(unit.key, stage, " ".join(exc.message.split()),
                                           unit.ids))
        return True
    return False
