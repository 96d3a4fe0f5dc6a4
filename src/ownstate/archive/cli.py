"""``ownstate export``, ``ownstate import archive`` and ``ownstate copy``: the CLI shell over
:mod:`ownstate.archive`.

Exit status: 0 when done (and, for ``copy --verify``, both sides hold the same); 3 when
``--verify`` found a difference; 1 for an error (an archive refused, a backend that cannot
transfer, a database out of reach), in which case an import has written nothing.

It may touch the public API, the functions of :mod:`ownstate.archive`, the error tree and
the importers' progress display (``ownstate.importers.progress``), and click.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from ..api import AsyncClient, connect_async
from ..errors import OwnstateError
from ..importers.progress import for_stream
from . import ArchiveReport, acopy, aexport, aimport_archive

__all__ = ["archive_import_command", "copy_command", "export_command"]

#: exit status when ``--verify`` found the two backends different
EXIT_DIFFERENT = 3

T = TypeVar("T")


def _settings(ctx: click.Context) -> tuple[str | None, str | None]:
    parent = ctx.find_root().obj
    return getattr(parent, "url", None), getattr(parent, "tenant", None)


def _run(work: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except OwnstateError as exc:
        raise click.ClickException(" ".join(exc.message.split())) from exc
    except OSError as exc:
        raise click.ClickException(str(exc)) from exc


async def _with(url: str | None, work: Callable[[AsyncClient], Awaitable[T]], *,
                migrate: bool) -> T:
    client = await connect_async(url, migrate=migrate)
    try:
        return await work(client)
    finally:
        await client.close()


@click.command("export")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="The archive to write (.tar; .tar.gz or .tgz compressed).")
@click.option("--include-keys", is_flag=True,
              help="Also export API keys (their ids, principals and secrets' hashes).")
@click.pass_context
def export_command(ctx: click.Context, out: str, include_keys: bool) -> None:
    """Write every row of the tenant given with --tenant (else of every tenant) to an
    archive: sessions and items, memory and every fact version, runs with their leases and
    effects, checkpoints, assets with their bytes, store grants."""
    url, tenant = _settings(ctx)
    tenants = None if tenant is None else [tenant]
    progress = for_stream("export", sys.stderr, unit="rows")
    report = _run(lambda: _with(url, lambda c: aexport(
        c, out, tenants=tenants, include_keys=include_keys, progress=progress),
        migrate=False))
    click.echo(report.summary())
    click.echo(f"wrote {out} ({len(report.tenants)} tenants)")


@click.command("archive")
@click.option("--from", "from_", required=True, type=click.Path(dir_okay=False),
              metavar="FILE", help="The archive to import (ownstate export --out).")
@click.option("--url", default=None,
              help="Where ownstate state lives (default: the global --url).")
@click.option("--tenant", default=None,
              help="Import only this tenant's rows (default: the global --tenant, else "
                   "every tenant in the archive).")
@click.pass_context
def archive_import_command(ctx: click.Context, from_: str, url: str | None,
                           tenant: str | None) -> None:
    """Import an ownstate archive: checked whole first (format version, every part's
    SHA-256), then restored exactly; rows already stored are skipped, so a re-run after
    an interruption finishes the import and duplicates nothing."""
    given_url, given_tenant = _settings(ctx)
    url, tenant = url or given_url, tenant or given_tenant
    tenants = None if tenant is None else [tenant]
    progress = for_stream("import archive", sys.stderr, unit="rows")
    report = _run(lambda: _with(url, lambda c: aimport_archive(
        c, from_, tenants=tenants, progress=progress), migrate=True))
    click.echo(report.summary())


@click.command("copy")
@click.argument("source_url")
@click.argument("target_url")
@click.option("--include-keys", is_flag=True, help="Also copy API keys.")
@click.option("--verify", is_flag=True,
              help="Then compare both sides: counts and SHA-256 per part and per session.")
@click.pass_context
def copy_command(ctx: click.Context, source_url: str, target_url: str, include_keys: bool,
                 verify: bool) -> None:
    """Copy every row from SOURCE_URL to TARGET_URL (of the tenant given with --tenant,
    else of every tenant), e.g. a SQLite file into PostgreSQL. Rows already in the target
    are skipped, so a re-run continues an interrupted copy."""
    _, tenant = _settings(ctx)
    tenants = None if tenant is None else [tenant]
    progress = for_stream("copy", sys.stderr, unit="rows")

    async def work() -> ArchiveReport:
        async def into(source: AsyncClient) -> ArchiveReport:
            return await _with(target_url, lambda target: acopy(
                source, target, tenants=tenants, include_keys=include_keys, verify=verify,
                progress=progress), migrate=True)
        return await _with(source_url, into, migrate=False)

    report = _run(work)
    click.echo(report.summary())
    if not report.ok:
        ctx.exit(EXIT_DIFFERENT)
