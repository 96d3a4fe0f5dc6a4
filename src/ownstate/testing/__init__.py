"""The backend conformance suite, importable by third-party backends.

Every behaviour ownstate promises is written once here and run against every backend. To
run it against a backend of your own, provide a ``target`` fixture returning a
:class:`Target` (a URL, or a callable opening your backend) and put a :class:`Suite` in a
test module; the pytest plugin that installing ownstate registers
(:mod:`ownstate.testing.plugin`) collects the suite's tests there::

    # test_my_backend.py
    import pytest
    from ownstate.testing import Suite, Target

    from my_backend import MyBackend

    @pytest.fixture
    def target(tmp_path):
        return Target("mine", backend=lambda: MyBackend(tmp_path / "db"),
                      capabilities=MyBackend.capabilities)

    ownstate_suite = Suite("conformance")  # a test module for each module of the suite

Tests that need an optional ability (several processes on one database, persistence)
consult ``Target.capabilities`` and skip with the reason, never the backend's class.
docs/testing.md walks through it.

It may touch only :mod:`.suite` and :mod:`.targets`; the test modules are imported when a
suite is collected.
"""

from __future__ import annotations

from .suite import Suite
from .targets import Target

__all__ = ["Suite", "Target"]
