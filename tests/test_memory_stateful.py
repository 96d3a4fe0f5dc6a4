"""The facts state machine, run over every backend in conftest.TARGETS."""

from ownstate.testing.memory_stateful import *  # noqa: F403
