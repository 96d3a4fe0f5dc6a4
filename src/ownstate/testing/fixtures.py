"""Fixtures and helpers shared by the conformance modules.

Each conformance module star-imports this, so a test file that star-imports a module gets
its fixtures too. They build on one fixture the user provides: ``target``.

It may touch the public sync API, ids (the controlled clock), the model and the targets, and
pytest; never a backend directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import pytest

import ownstate
from ownstate import _ids
from ownstate.model import CheckpointScope, Run

from .targets import Target

__all__ = ["FrozenTime", "checkpoint_run", "checkpoint_scope", "client", "frozen_time",
           "make_client", "other_tenant", "run_async", "session", "snapshot", "store"]

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion on a fresh event loop."""
    return asyncio.run(coro)


@pytest.fixture
def make_client(target: Target) -> Iterator[Callable[..., ownstate.Client]]:
    """Open more sync clients on the target's database (closed after the test)."""
    opened: list[ownstate.Client] = []

    def make(**kwargs: Any) -> ownstate.Client:
        made = target.connect(**kwargs)
        opened.append(made)
        return made

    yield make
    for made in opened:
        made.close()


@pytest.fixture
def client(make_client: Callable[..., ownstate.Client]) -> ownstate.Client:
    """A sync client on a fresh, empty database of the target backend."""
    return make_client()


@pytest.fixture
def other_tenant(make_client: Callable[..., ownstate.Client]) -> ownstate.Client:
    """A client on the same database, for another tenant."""
    return make_client(tenant="tenant-b")


@pytest.fixture
def store(client: ownstate.Client) -> ownstate.SessionStore:
    return client.session_stores.create("support-agent-sessions")


@pytest.fixture
def session(store: ownstate.SessionStore) -> ownstate.Session:
    return store.add(actor_id="customer-123", session_id="case-456", metadata={"channel": "web"})


def snapshot(client: ownstate.Client) -> dict[str, Any]:
    """Everything the client's tenant stores, as plain data, to prove an error changed nothing."""
    state: dict[str, Any] = {}
    for st in client.session_stores.list():
        sessions = {}
        for s in st.list_sessions(order_by="create_time asc"):
            sessions[s.session_id] = (
                s.record,
                [(i.item_id, i.seq, i.data, i.format) for i in
                 s.list_items(order_by="create_time asc")],
            )
        state[st.name] = sessions
    return state


def check_store_lifecycle(stores: Any, name: str) -> None:
    """On an empty ``stores`` (``client.session_stores`` or ``client.memory_stores``): a
    store ``name`` is made, found, listed and deleted, and then is not found."""
    created = stores.create(name)
    assert created.name == name
    assert stores.get(name).create_time == created.create_time
    assert [s.name for s in stores.list()] == [name]
    assert stores.delete(name) == 0
    with pytest.raises(ownstate.StoreNotFound) as err:
        stores.get(name)
    assert err.value.store == name
    assert isinstance(err.value, ownstate.NotFound)


def check_store_kind(stores: Any, prefix: str) -> None:
    """What session stores and memory stores share, on ``stores`` (``client.session_stores``
    or ``client.memory_stores``): seven stores made in reverse order page back by name, and
    a taken name is refused with the store named."""
    names = [f"{prefix}-{n:02d}" for n in range(7)]
    for name in reversed(names):
        stores.create(name)
    first = stores.list_page(page_size=3)
    assert [s.name for s in first.items] == names[:3]
    second = stores.list_page(page_size=3, page_token=first.next_page_token)
    third = stores.list_page(page_size=3, page_token=second.next_page_token)
    assert [s.name for s in second.items + third.items] == names[3:]
    assert third.next_page_token is None
    assert [s.name for s in stores.list(page_size=2)] == names
    with pytest.raises(ownstate.AlreadyExists) as err:
        stores.create(names[0])
    assert err.value.store == names[0]


class _Worker(Protocol):
    def start(self) -> None: ...
    def join(self, timeout: float | None = None) -> None: ...


@contextlib.contextmanager
def racing(threads: Sequence[_Worker] = (), processes: Sequence[Any] = (), *,
           barrier: Any = None, results: Any = None, timeout: float = 120) -> Iterator[None]:
    """Start ``processes`` then ``threads``; on leaving, join them all.

    A failure inside aborts ``barrier`` first, so no contender waits on it forever; a
    process still alive ``timeout`` seconds after the block is killed; ``results``, a
    multiprocessing queue, is closed and its feeder thread joined.
    """
    for worker in (*processes, *threads):
        worker.start()
    try:
        yield
    except BaseException:
        if barrier is not None:
            barrier.abort()
        raise
    finally:
        for thread in threads:
            thread.join(timeout=timeout)
        for process in processes:
            process.join(timeout=timeout)
            if process.is_alive():
                process.kill()
                process.join()
        if results is not None:
            results.close()
            results.join_thread()


class FrozenTime:
    """A clock that stands still until advanced."""

    def __init__(self) -> None:
        self.moment = datetime(2030, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


@pytest.fixture
def frozen_time(monkeypatch: pytest.MonkeyPatch) -> FrozenTime:
    """Controls the time ownstate's public API sees."""
    made = FrozenTime()
    monkeypatch.setattr(_ids, "now", made.now)
    return made


@pytest.fixture
def checkpoint_run(client: ownstate.Client, session: ownstate.Session) -> Run:
    """A running run in the ``session`` fixture."""
    return client.runs.open_run(session, "langgraph", "thread-1")


@pytest.fixture
def checkpoint_scope(checkpoint_run: Run) -> CheckpointScope:
    return checkpoint_run.checkpoint_scope()
