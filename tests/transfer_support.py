"""What the archive and copy tests share: a new database of each backend, state in two
tenants, and an archive's parts."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import ownstate
from ownstate.testing.transfer import fill_every_kind

#: the backends archives and copies are tested between (those that do not declare
#: Capability.TRANSFER skip)
KINDS = ("memory", "sqlite", "postgres", "redis")
#: ``make_url(kind)``, the fixture in conftest.py
Maker = Callable[[str], str]


def parts(path: Path) -> dict[str, bytes]:
    """Every part of the archive at ``path``, by member name (the manifest left out)."""
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.name != "manifest.json"}


def filled(url: str) -> ownstate.Client:
    """A client on ``url`` after state of every kind went into two tenants."""
    client = ownstate.connect(url)
    fill_every_kind(client)
    with ownstate.connect(url, tenant="acme") as other:
        fill_every_kind(other, sessions=1, items=2)
    return client
