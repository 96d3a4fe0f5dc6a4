"""A checkpoint write that ends its fencing run in one transaction, over every backend in
conftest.TARGETS."""

from ownstate.testing.checkpoint_ends_run import *  # noqa: F403
