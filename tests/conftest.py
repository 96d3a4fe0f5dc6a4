"""Test configuration: the backends the conformance suite runs against.

Each backend is one entry in TARGETS. Backends that need a server (added later) skip
when it is unreachable, unless OWNSTATE_REQUIRE_BACKENDS names them (CI sets it), in which
case the skip becomes a failure.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ownstate.backends.memory import MemoryBackend
from ownstate.backends.sqlite import SqliteBackend
from ownstate.testing import Target

TARGETS: dict[str, Callable[[Path], Target]] = {
    "memory": lambda tmp: Target("memory", f"memory://{uuid.uuid4().hex}",
                                 MemoryBackend.capabilities),
    "sqlite": lambda tmp: Target("sqlite", f"sqlite:///{tmp}/ownstate.db",
                                 SqliteBackend.capabilities),
}


@pytest.fixture(params=sorted(TARGETS))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    made = TARGETS[request.param](tmp_path)
    yield made
    if made.cleanup is not None:
        made.cleanup()
