"""The concurrency conformance tests, run over every backend in conftest.TARGETS."""

from ownstate.testing.concurrency import *  # noqa: F403
