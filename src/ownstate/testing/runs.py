"""Conformance tests for runs, leases, fencing and the effects ledger.

Star-import this module in a test file that provides a ``target`` fixture (or name it in a
:class:`~ownstate.testing.Suite`). The tests live in :mod:`.runs_lifecycle` (opening,
awaiting, leases, closing, fencing), :mod:`.runs_ledger` (effects, listing, scope, the
async client) and :mod:`.runs_races` (resume races); this module gathers them.

It may touch only the three modules it gathers.
"""
# ruff: noqa: F403

from .runs_ledger import *
from .runs_lifecycle import *
from .runs_races import *
