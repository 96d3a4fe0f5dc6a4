"""The backend conformance suite, importable by third-party backends.

Every behaviour ownstate promises is written once here and run against every backend. To
run it against a backend of your own, provide a ``target`` fixture returning a
:class:`Target` and import the tests::

    # test_my_backend.py
    import pytest
    from ownstate.testing import Target
    from ownstate.testing.conformance import *  # noqa: F403

    @pytest.fixture
    def target(tmp_path):
        return Target("mine", url=f"mine://{tmp_path}", capabilities=frozenset())

Tests that need an optional ability (several processes on one database, persistence)
consult ``Target.capabilities`` and skip with the reason, never the backend's class.
"""

from __future__ import annotations

from .targets import Target

__all__ = ["Target"]
