"""Checkpoint writes that open or end a run in the same transaction, over every backend in
conftest.TARGETS."""

from ownstate.testing.checkpoint_runs import *  # noqa: F403
