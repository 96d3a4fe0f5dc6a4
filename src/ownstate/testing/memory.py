"""Conformance tests for memory stores and facts.

Star-import this module in a test file that provides a ``target`` fixture::

    from ownstate.testing.memory import *  # noqa: F403

The tests live in :mod:`.memory_facts` (stores, facts over time) and
:mod:`.memory_across` (search, batches, erasure, tenants, concurrency); this module
gathers them.

It may touch only the two modules it gathers.
"""
# ruff: noqa: F403

from .memory_across import *
from .memory_facts import *
