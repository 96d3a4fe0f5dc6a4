"""What every framework adapter does the same way, written once.

- **Stores and sessions made on first use.** :func:`ensure_store` gets a session or memory
  store, else creates it; a create that loses a race with another writer's (``AlreadyExists``)
  gets the winner's. :func:`ensure_session` does the same for one session of a store.
  :func:`find_store` and :func:`find_session` are the reads that never create (``None``).
- **Runs that record what a framework did.** :func:`track_run` opens one unless the
  session already has an active run; every adapter leases its runs to an owner named by
  :func:`lease_owner` (``framework@host:pid:random``) and closes them with
  :func:`close_run`, whose one policy is that a bookkeeping close never fails the framework's
  call: a run already closed (:class:`~ownstate.errors.RunClosed`), gone
  (:class:`~ownstate.errors.RunNotFound`) or taken over by another worker
  (:class:`~ownstate.errors.StaleLease`) is left to whoever got there first.
- **Reading on from what was read.** :func:`items_after` reads the items that follow one
  an adapter cached, proving in the same read that the cached one is still stored.
- **Sync and async twins.** Frameworks call their storage both ways (``get_tuple`` and
  ``aget_tuple``); an adapter writes the coroutine once and :func:`sync_twin` and
  :func:`async_twin` make the two public methods that run it through the adapter's
  :class:`~._bridge.Bridge`.

It may touch only the public API (:class:`~ownstate.AsyncClient` and its handles, and the
bridge), the error tree and the model; it holds no state.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import socket
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

from ..api import (
    AsyncClient,
    AsyncMemoryStore,
    AsyncMemoryStores,
    AsyncSession,
    AsyncSessionStore,
    AsyncSessionStores,
)
from ..errors import (
    ActiveRunExists,
    AlreadyExists,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StaleLease,
    StoreNotFound,
)
from ..model import Item
from ._bridge import Bridge

__all__ = [
    "BOOKKEEPING_CLOSE_IGNORES",
    "async_twin",
    "close_run",
    "ensure_session",
    "ensure_store",
    "find_session",
    "find_store",
    "items_after",
    "lease_owner",
    "sync_twin",
    "track_run",
]

P = ParamSpec("P")
T = TypeVar("T")

#: What a close made for bookkeeping (the framework's call is over either way) ignores.
BOOKKEEPING_CLOSE_IGNORES = (RunClosed, RunNotFound, StaleLease)


# stores and sessions -----------------------------------------------------------------------


@overload
async def ensure_store(stores: AsyncSessionStores, name: str) -> AsyncSessionStore: ...
@overload
async def ensure_store(stores: AsyncMemoryStores, name: str) -> AsyncMemoryStore: ...
async def ensure_store(stores: AsyncSessionStores | AsyncMemoryStores, name: str
                       ) -> AsyncSessionStore | AsyncMemoryStore:
    """The store ``name`` of ``stores`` (``client.session_stores`` or
    ``client.memory_stores``), created when missing."""
    try:
        return await stores.get(name)
    except StoreNotFound:
        try:
            return await stores.create(name)
        except AlreadyExists:  # made by a concurrent first call
            return await stores.get(name)


@overload
async def find_store(stores: AsyncSessionStores, name: str) -> AsyncSessionStore | None: ...
@overload
async def find_store(stores: AsyncMemoryStores, name: str) -> AsyncMemoryStore | None: ...
async def find_store(stores: AsyncSessionStores | AsyncMemoryStores, name: str
                     ) -> AsyncSessionStore | AsyncMemoryStore | None:
    """The store ``name`` of ``stores``, or ``None`` when there is none."""
    try:
        return await stores.get(name)
    except StoreNotFound:
        return None


async def find_session(store: AsyncSessionStore, session_id: str) -> AsyncSession | None:
    """The session, or ``None`` when the store has none of that id."""
    try:
        return await store.get(session_id)
    except SessionNotFound:
        return None


async def ensure_session(store: AsyncSessionStore, session_id: str, *, actor_id: str,
                         metadata: Mapping[str, str] | None = None) -> AsyncSession:
    """The session, created (with ``actor_id`` and ``metadata``) when missing; an existing
    one is used as it is, whatever its actor."""
    try:
        return await store.get(session_id)
    except SessionNotFound:
        pass
    try:
        return await store.add(actor_id=actor_id, session_id=session_id,
                               metadata=metadata)
    except AlreadyExists:  # made by a concurrent first call
        return await store.get(session_id)


async def items_after(session: AsyncSession, seq: int, item_id: str, *, page_size: int
                      ) -> list[Item] | None:
    """The items of ``session`` after item ``seq`` (``item_id``; 0 and ``""``: every
    item), oldest first, read ``page_size`` at a time; ``None`` when that item is no longer
    stored (popped, cleared, or the session made again). The read starts at that item,
    which proves it is still there.

    Pages are fetched one by one rather than through the auto-paging iterator: an async
    generator on the caller's loop breaks under frameworks that shut down their loop's
    async generators after every run and then reuse the loop. Raises
    :class:`~ownstate.errors.SessionNotFound`."""
    page = await session.list_items_page(order_by="create_time asc", page_size=page_size,
                                         after_seq=max(seq - 1, 0))
    items = page.items
    while page.next_page_token is not None:
        page = await session.list_items_page(order_by="create_time asc", page_size=page_size,
                                             page_token=page.next_page_token)
        items.extend(page.items)
    if seq == 0:
        return items
    if not items or (items[0].seq, items[0].item_id) != (seq, item_id):
        return None
    return items[1:]


# runs ---------------------------------------------------------------------------------------


def lease_owner(framework: str) -> str:
    """A fresh lease owner for one adapter object: ``framework@host:pid:random``, so a
    run's ``lease_owner`` says which framework on which process holds it."""
    return f"{framework}@{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


async def track_run(client: AsyncClient, session: AsyncSession, framework: str,
                    thread_key: str, *, owner: str) -> tuple[str, int] | None:
    """Open a run of ``framework`` in ``session``, leased to ``owner``, to record what the
    framework does there; returns its id and fencing token. ``None`` when the session
    already has an active run (another framework's, or one being resumed): nothing is
    recorded then, and the other run is left as it is."""
    try:
        run = await client.runs.open_run(session, framework, thread_key[:256], owner=owner)
    except ActiveRunExists:
        return None
    return run.run_id, run.fencing_token


async def close_run(client: AsyncClient, run_id: str, status: str, *,
                    fencing_token: int | None = None, **extra: Any) -> None:
    """Close a run the adapter tracked, ignoring :data:`BOOKKEEPING_CLOSE_IGNORES`: closed
    already, gone, or taken over meanwhile (another replica got there first)."""
    with contextlib.suppress(*BOOKKEEPING_CLOSE_IGNORES):
        await client.runs.close_run(run_id, status, fencing_token=fencing_token, **extra)


# sync and async twins -----------------------------------------------------------------------


class _Bridged(Protocol):
    _bridge: Bridge


S = TypeVar("S", bound=_Bridged)


def sync_twin(impl: Callable[Concatenate[S, P], Coroutine[Any, Any, T]]
              ) -> Callable[Concatenate[S, P], T]:
    """The sync method that runs the coroutine method ``impl`` through ``self._bridge``
    (it keeps ``impl``'s signature and docstring)."""

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._bridge.call(impl(self, *args, **kwargs))

    functools.update_wrapper(method, impl)
    return method


def async_twin(impl: Callable[Concatenate[S, P], Coroutine[Any, Any, T]]
               ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The async method that runs the coroutine method ``impl`` through ``self._bridge``,
    on the caller's loop or relayed to the client's (see :class:`~._bridge.Bridge`)."""

    async def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._bridge.acall(impl(self, *args, **kwargs))

    functools.update_wrapper(method, impl)
    return method
