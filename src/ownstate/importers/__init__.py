"""Importers: one framework's own storage into ownstate, as its adapter would have written it.

>>> from ownstate.importers import sources
>>> sources()
['claude', 'langgraph', 'langgraph-store']

Each importer reads its framework's storage read-only, decodes it with the framework's
own package, and writes through the public API what the matching adapter writes, with ids
and idempotency keys derived from source ids: re-running an import (after a kill, or to
pick up what was added since) finishes it and duplicates nothing.

``run_import("langgraph", client, "postgresql://.../app")`` (or ``await arun_import(...)``
with an :class:`~ownstate.AsyncClient`) returns an :class:`ImportReport`; the CLI is
``ownstate import SOURCE --from URL_OR_PATH [--dry-run] [--verify] [--store NAME]``.

Adding a source
---------------
A source is one module in :mod:`ownstate.importers.sources`, named after the source
(``-`` spelled ``_``: ``langgraph-store`` lives in ``sources/langgraph_store.py``), that
defines ``IMPORTER``, a subclass of :class:`Importer` (see :mod:`ownstate.importers.base`
for the four steps it implements). Nothing else is edited: :func:`sources`, :func:`get`,
:func:`run_import` and the ``ownstate import`` command find it by its module name, and the
CLI turns its ``options`` into ``--name`` flags. Import the framework's package inside
the module's methods (or under ``TYPE_CHECKING``), so that listing sources and
``import ownstate`` need no extra.

It may touch the public API and the adapters' bridge (the sync :func:`run_import` runs the
async loop through it), :mod:`.base` and :mod:`.sources`; each source imports its framework
itself.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from typing import Any

from ..adapters._bridge import Bridge
from ..api import AsyncClient, Client
from . import base as _base
from . import sources as _sources
from .base import *  # noqa: F403  (base.__all__, the vocabulary of importers, is public here)
from .base import Importer, ImportReport, Progress, arun_import

__all__ = ["arun", "get", "run_import", "sources"]
__all__ += _base.__all__


def sources() -> list[str]:
    """The names of every source there is an importer for, sorted."""
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(_sources.__path__)
                  if not m.name.startswith("_"))


def get(source: str) -> type[Importer[Any]]:
    """The importer class of ``source``. Raises :class:`ValueError` for an unknown source
    (naming the known ones), :class:`ImportError` when its framework is not installed."""
    if source not in sources():
        raise ValueError(f"no importer for {source!r}; there are: {', '.join(sources())}")
    module = importlib.import_module(f"{_sources.__name__}.{source.replace('-', '_')}")
    found: type[Importer[Any]] = module.IMPORTER
    return found


async def arun(source: str, client: AsyncClient, from_: str, *, store: str | None = None,
               dry_run: bool = False, verify: bool = False, progress: Progress | None = None,
               concurrency: int | None = None, shard: tuple[int, int] = (0, 1),
               **options: str) -> ImportReport:
    """Import ``source`` (a source name) from ``from_`` (its URL or path) into ``client``;
    see :func:`~ownstate.importers.base.arun_import`. Raises :class:`ValueError` for an
    unknown source or option, :class:`SourceError` when the source cannot be read."""
    importer = get(source)(from_, store=store, **options)
    return await arun_import(importer, client, dry_run=dry_run, verify=verify,
                             progress=progress, concurrency=concurrency, shard=shard)


def run_import(source: str, client: Client | AsyncClient, from_: str, *,
               store: str | None = None, dry_run: bool = False, verify: bool = False,
               progress: Progress | None = None, concurrency: int | None = None,
               shard: tuple[int, int] = (0, 1), **options: str) -> ImportReport:
    """:func:`arun` for sync code (not on a running event loop), over a sync
    :class:`~ownstate.Client`: the import runs where the client's backend runs its calls."""
    bridge = Bridge(client)
    return asyncio.run(bridge.acall(arun(
        source, bridge.client, from_, store=store, dry_run=dry_run, verify=verify,
        progress=progress, concurrency=concurrency, shard=shard, **options)))
