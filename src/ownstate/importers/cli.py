"""``ownstate import SOURCE --from URL_OR_PATH``: the CLI shell over :mod:`ownstate.importers`.

One subcommand per source, built from the source's importer when it is asked for (so the
``--help`` of ``ownstate`` imports no framework). Exit status: 0 when everything was
imported (and, with ``--verify``, matches); 2 when some units could not be imported; 3
when ``--verify`` found a difference; 1 for an error of ownstate or of the source as a
whole (unreachable, not a source of that kind).

It may touch the public API, the error tree, this package's loop, sources and progress, the
archive command (for ``ownstate import archive``), and click.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from ..api import connect_async
from ..errors import OwnstateError
from . import arun, get, sources
from .base import ImportReport, SourceError
from .progress import for_stream

__all__ = ["import_command"]

#: exit status when some units could not be imported
EXIT_FAILED_UNITS = 2
#: exit status when ``--verify`` found the store different from the source
EXIT_DIFFERENT = 3


class _Shard(click.ParamType[tuple[int, int]]):
    name = "I/N"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        try:
            index, count = (int(part) for part in str(value).split("/"))
        except ValueError:
            self.fail(f"{value!r} is not I/N", param, ctx)
        if not 1 <= index <= count:
            self.fail(f"{value!r}: I must be from 1 to N", param, ctx)
        return index - 1, count


class _Sources(click.Group):
    """One subcommand per source, and ``archive`` for ownstate's own archives."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*sources(), "archive"])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "archive":
            from ..archive.cli import archive_import_command

            return archive_import_command
        if cmd_name not in sources():
            return None
        return _command(cmd_name)


def _command(source: str) -> click.Command:
    importer = get(source)
    first_line = (importer.__doc__ or source).strip().splitlines()[0]

    @click.pass_context
    def command(ctx: click.Context, /, from_: str, dry_run: bool, verify: bool,
                store: str | None, url: str | None, tenant: str | None,
                concurrency: int | None, shard: tuple[int, int], **options: str) -> None:
        parent = ctx.find_root().obj
        url = url or getattr(parent, "url", None)
        tenant = tenant or getattr(parent, "tenant", None)
        settings = {k.replace("_", "-"): v for k, v in options.items()}
        try:
            report = asyncio.run(_run(source, from_, url=url, tenant=tenant, store=store,
                                      dry_run=dry_run, verify=verify,
                                      concurrency=concurrency, shard=shard,
                                      options=settings))
        except OwnstateError as exc:
            raise click.ClickException(" ".join(exc.message.split())) from exc
        except (ValueError, OSError, ImportError, SourceError) as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(report.summary())
        if report.failed:
            ctx.exit(EXIT_FAILED_UNITS)
        if not report.ok:
            ctx.exit(EXIT_DIFFERENT)

    params: list[click.Parameter] = [
        click.Option(["--from", "from_"], required=True, metavar="URL_OR_PATH",
                     help="Where the source's storage is (read, never written)."),
        click.Option(["--dry-run"], is_flag=True,
                     help="Report what would be written; write nothing."),
        click.Option(["--verify"], is_flag=True,
                     help="Then compare counts and a digest per unit of the source with "
                          "what is stored (with --dry-run: compare only)."),
        click.Option(["--store"], default=None,
                     help=f"The ownstate session store (default {importer.default_store})."),
        click.Option(["--url"], default=None,
                     help="Where ownstate state lives (default: the global --url)."),
        click.Option(["--tenant"], default=None,
                     help="The tenant to import into (default: the global --tenant)."),
        click.Option(["--concurrency"], type=click.IntRange(min=1), default=None,
                     help=f"Units imported at once (default {importer.concurrency})."),
        click.Option(["--shard"], type=_Shard(), default="1/1", show_default=True,
                     help="I/N: import only the I-th of N disjoint parts, to run N processes "
                          "side by side (each with its own I)."),
    ]
    for option in importer.options:
        kind: Any = click.Choice(option.choices) if option.choices else str
        params.append(click.Option([f"--{option.name}", option.name.replace("-", "_")],
                                   type=kind, default=option.default, show_default=True,
                                   help=option.help))
    return click.Command(source, callback=command, params=params, short_help=first_line,
                         help=sys.modules[importer.__module__].__doc__)


async def _run(source: str, from_: str, *, url: str | None, tenant: str | None,
               store: str | None, dry_run: bool, verify: bool, concurrency: int | None,
               shard: tuple[int, int], options: dict[str, str]) -> ImportReport:
    client = await connect_async(url, tenant=tenant, migrate=not dry_run)
    try:
        return await arun(source, client, from_, store=store, dry_run=dry_run, verify=verify,
                          progress=for_stream(f"import {source}", sys.stderr),
                          concurrency=concurrency, shard=shard, **options)
    finally:
        await client.close()


import_command = _Sources(
    "import", help="Import a framework's own storage into ownstate (read-only on the "
                   "source; re-running continues and duplicates nothing).")
