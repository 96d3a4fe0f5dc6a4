"""Fault tests: a failure inside an operation leaves nothing of it behind.

A store and its grants are one piece of state: creating a store with an owner and
deleting a store are each one operation, so a failure in the middle of either (here: the
datastore refusing to write the store's grants, as the target's ``grant_fault`` makes it)
must leave no store without its owner and no grants on a store that is gone.

Star-import this module in a test file that provides a ``target`` fixture whose
``grant_fault`` is set (see :class:`~ownstate.testing.Target`).

It may touch the public sync API, the backends' capability flags (names only), the shared
fixtures and targets, and pytest; the faults come from the target, never from reaching into
a backend.
"""
# ruff: noqa: F403

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

import ownstate
from ownstate import Grant, StoreNotFound
from ownstate.backends.base import Capability

from .fixtures import *
from .fixtures import run_async
from .targets import Target

KINDS = ["session_store", "memory_store"]
_NAME = "faulty-store"
_OWNER = "olivia"

Fault = Callable[[ownstate.Client, str, str], AbstractContextManager[None]]


def _fault(target: Target) -> Fault:
    if target.grant_fault is None:
        pytest.skip(f"the {target.name} target cannot make its datastore fail")
    return target.grant_fault


def _stores(client: ownstate.Client, kind: str) -> Any:
    return client.session_stores if kind == "session_store" else client.memory_stores


def _stored_grants(target: Target, client: ownstate.Client, kind: str) -> list[Grant] | None:
    """Every grant the datastore holds on the store, whether the store exists or not;
    None where the client is a principal that may not look (a server's)."""
    if not target.has(Capability.OPERATOR):
        return None

    async def look() -> list[Grant]:
        async with await ownstate.connect_async(target.url, tenant=client.tenant) as opened:
            return await opened.backend.list_grants(client.tenant, kind, _NAME)

    return run_async(look())


def _visible(client: ownstate.Client, kind: str) -> bool:
    try:
        _stores(client, kind).get(_NAME)
    except StoreNotFound:
        assert _NAME not in [s.name for s in _stores(client, kind).list()]
        return False
    return True


@pytest.mark.parametrize("kind", KINDS)
def test_a_create_that_fails_leaves_no_store_without_its_owner(
        target: Target, client: ownstate.Client, kind: str) -> None:
    fault = _fault(target)
    with fault(client, kind, _NAME), pytest.raises(Exception):  # noqa: B017, PT011
        _stores(client, kind).create(_NAME, owner=_OWNER)
    assert not _visible(client, kind), "a store was left without its owner"
    assert _stored_grants(target, client, kind) in ([], None)
    # nothing blocks the name: the same call now succeeds, with its owner (over a server,
    # the key's principal)
    made = _stores(client, kind).create(_NAME, owner=_OWNER)
    assert [g.level for g in made.permissions()] == ["OWNER"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_delete_that_fails_leaves_the_store_with_its_grants(
        target: Target, client: ownstate.Client, kind: str) -> None:
    """Where deleting is one transaction, a failed delete changes nothing. Where it takes
    steps (``Capability.STEPWISE_STORES``), a failed delete may leave the store gone for
    readers, and the next delete of the name finishes it; never a visible store without
    its grants, nor grants left once the store is gone."""
    fault = _fault(target)
    made = _stores(client, kind).create(_NAME, owner=_OWNER)
    made.grant_permission("bob", "READ")
    granted = made.permissions()
    with fault(client, kind, _NAME), pytest.raises(Exception):  # noqa: B017, PT011
        _stores(client, kind).delete(_NAME)
    if _visible(client, kind):
        assert _stores(client, kind).get(_NAME).permissions() == granted
    else:
        assert target.has(Capability.STEPWISE_STORES), "a failed delete changed the store"
    _stores(client, kind).delete(_NAME)  # finishes it, or deletes it now
    assert not _visible(client, kind)
    assert _stored_grants(target, client, kind) in ([], None)
