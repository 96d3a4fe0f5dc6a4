"""The conformance suite, run over every backend in conftest.TARGETS."""

from ownstate.testing.conformance import *  # noqa: F403
from ownstate.testing.faults import *  # noqa: F403
