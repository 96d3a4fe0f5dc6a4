"""The runs conformance suite, run over every backend in conftest.TARGETS."""

from ownstate.testing.runs import *  # noqa: F403
