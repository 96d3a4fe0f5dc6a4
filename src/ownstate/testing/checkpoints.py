"""Conformance tests for checkpoints, pending writes, retention and usage.

Star-import this module in a test file that provides a ``target`` fixture (or name it in a
:class:`~ownstate.testing.Suite`). The tests live in :mod:`.checkpoints_storing` and
:mod:`.checkpoints_keeping`; this module gathers them.

It may touch only the two modules it gathers.
"""
# ruff: noqa: F403

from .checkpoints_keeping import *
from .checkpoints_storing import *
