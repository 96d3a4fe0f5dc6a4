"""A checkpoint stored with items in one transaction, over every backend in
conftest.TARGETS."""

from ownstate.testing.checkpoint_items import *  # noqa: F403
