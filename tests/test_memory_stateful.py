"""The facts state machine, run over every backend in conftest.TARGETS."""

from ownstate.testing import Suite

ownstate_suite = Suite("memory_stateful")
