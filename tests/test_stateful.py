"""The model-based state machine, run over every backend in conftest.TARGETS."""

from ownstate.testing.stateful import *  # noqa: F403
