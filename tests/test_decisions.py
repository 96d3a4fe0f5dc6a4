"""The decisions conformance suite, run over every backend in conftest.TARGETS."""

from ownstate.testing import Suite

ownstate_suite = Suite("decisions")
