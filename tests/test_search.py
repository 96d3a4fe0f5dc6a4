"""The ranked-search conformance suite, run over every backend in conftest.TARGETS."""

from ownstate.testing import Suite

ownstate_suite = Suite("search")
