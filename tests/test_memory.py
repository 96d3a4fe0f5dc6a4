"""The memory conformance suite, run over every backend in conftest.TARGETS."""

from ownstate.testing.memory import *  # noqa: F403
