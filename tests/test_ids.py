"""Names and ids of every character the library accepts, run over every backend in
conftest.TARGETS."""

from ownstate.testing.ids import *  # noqa: F403
