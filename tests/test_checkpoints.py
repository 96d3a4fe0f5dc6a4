"""Checkpoints conformance, run over every backend in conftest.TARGETS."""

from ownstate.testing.checkpoints import *  # noqa: F403
