"""Fenced checkpoint writes and paged checkpoint listings, over every backend in
conftest.TARGETS."""

from ownstate.testing.checkpoint_fencing import *  # noqa: F403
