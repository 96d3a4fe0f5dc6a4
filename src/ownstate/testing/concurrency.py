"""Concurrency conformance: many writers on one session, and races on one id.

Star-import this module in a test file that provides a ``target`` fixture. Writers append
batches tagged ``{"writer": w, "batch": b, "n": i}`` at the same time, from threads sharing
one sync client, from threads with a client each, from asyncio tasks on one async client
and (where the backend declares :attr:`~ownstate.backends.Capability.MULTIPROCESS`) from
separate OS processes. Afterwards the history must hold every item exactly once, with
``seq`` exactly ``1..N``, every batch contiguous and in its own order, and each writer's
batches in the order that writer appended them. Races on one id: one session id created
by many threads, one idempotency key retried by many, one history popped by many.

It may touch the public sync API, the backends' capability flags (names only), the shared
fixtures and targets, and pytest; never a backend directly.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

import ownstate
from ownstate.backends import Capability

from .fixtures import client, make_client, racing
from .targets import Target

__all__ = [
    "client",
    "make_client",
    "test_concurrent_appends_from_async_tasks",
    "test_concurrent_appends_from_processes",
    "test_concurrent_appends_through_one_client",
    "test_concurrent_appends_with_a_client_per_thread",
    "test_concurrent_creation_of_one_session_id",
    "test_concurrent_pops_take_each_item_once",
    "test_concurrent_retries_of_one_idempotency_key",
    "test_replays_from_threads_sharing_one_client_while_it_grows",
]

T = TypeVar("T")

WRITERS = 8
BATCHES = 25
PROCESSES = 2
PROCESS_BATCHES = 40
POPPERS = 8
POPPED_ITEMS = 40
#: how long a thread or process may wait for the others at the starting line
START_TIMEOUT = 60.0
#: how long the writer processes may take, start-up included
PROCESS_TIMEOUT = 120.0

#: A writer's plan: its batches, in the order it appends them.
Plan = list[list[dict[str, Any]]]


def _plan(writer: int, batches: int) -> Plan:
    """Batches of 1-4 tagged items; the same for a writer every time (processes rebuild it)."""
    sizes = random.Random(writer).choices(range(1, 5), k=batches)
    return [[{"writer": writer, "batch": b, "n": n} for n in range(size)]
            for b, size in enumerate(sizes)]


def _tag(data: Any) -> tuple[int, int, int]:
    return (data["writer"], data["batch"], data["n"])


def _check_history(
    stored: Sequence[ownstate.Item],
    plans: dict[int, Plan],
    returned: dict[int, list[list[ownstate.Item]]],
) -> None:
    """The stored history is exactly the planned items, unbroken batches, writers in order.

    ``returned`` holds what each writer's ``append_items`` calls returned, which must be the
    stored items at the seqs they name.
    """
    planned = [item for plan in plans.values() for batch in plan for item in batch]
    assert [it.seq for it in stored] == list(range(1, len(planned) + 1)), "seq is not 1..N"
    assert len({it.item_id for it in stored}) == len(stored), "an item id repeats"
    tags = Counter(_tag(it.data) for it in stored)
    assert set(tags) == {_tag(item) for item in planned}, "items were lost or invented"
    assert tags.most_common(1)[0][1] == 1, f"stored twice: {tags.most_common(3)}"
    seq_of = {_tag(it.data): it.seq for it in stored}
    by_seq = {it.seq: it for it in stored}
    for writer, plan in plans.items():
        firsts = []
        for b, batch in enumerate(plan):
            seqs = [seq_of[_tag(item)] for item in batch]
            assert seqs == list(range(seqs[0], seqs[0] + len(batch))), (
                f"writer {writer} batch {b} was interleaved or reordered: seqs {seqs}")
            for item, seq in zip(batch, seqs, strict=True):
                assert by_seq[seq].data == item
            firsts.append(seqs[0])
        assert firsts == sorted(firsts), f"writer {writer}'s batches are out of order"
        assert len(returned[writer]) == len(plan)
        for batch, result in zip(plan, returned[writer], strict=True):
            assert [it.data for it in result] == batch
            for it in result:
                assert (by_seq[it.seq].item_id, by_seq[it.seq].data) == (it.item_id, it.data), (
                    f"append_items returned seq {it.seq}, which holds another item")


def _in_threads(count: int, work: Callable[[int], T]) -> list[T]:
    """``work(0) .. work(count - 1)`` on as many threads, released together; their results."""
    barrier = threading.Barrier(count)

    def start(n: int) -> T:
        barrier.wait(START_TIMEOUT)
        return work(n)

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(start, n) for n in range(count)]
        return [future.result() for future in futures]


def _new_session(client: ownstate.Client, store: str = "concurrency") -> ownstate.Session:
    return client.session_stores.create(store).add(actor_id="writers")


def _history(session: ownstate.Session) -> list[ownstate.Item]:
    return list(session.list_items(order_by="create_time asc"))


# appends from threads and tasks --------------------------------------------------------


def test_concurrent_appends_through_one_client(client: ownstate.Client) -> None:
    """Threads sharing one sync client: every batch lands whole, in each writer's order."""
    session = _new_session(client)
    plans = {w: _plan(w, BATCHES) for w in range(WRITERS)}

    def write(w: int) -> list[list[ownstate.Item]]:
        return [session.append_items(batch) for batch in plans[w]]

    returned = dict(enumerate(_in_threads(WRITERS, write)))
    _check_history(_history(session), plans, returned)


def test_replays_from_threads_sharing_one_client_while_it_grows(
        client: ownstate.Client) -> None:
    """Threads sharing one sync client replay a session while others append to it: each
    replay is the session as it was at some moment (seqs 1..n, every item as stored), as
    a backend's replay cache must keep it under threads that really run at once."""
    session = _new_session(client)
    writers, readers = WRITERS // 2, WRITERS // 2
    plans = {w: _plan(w, BATCHES) for w in range(writers)}

    def work(n: int) -> list[list[ownstate.Item]]:
        if n < writers:
            for batch in plans[n]:
                session.append_items(batch)
            return []
        return [_history(session) for _ in range(BATCHES)]

    replays = [replay for done in _in_threads(writers + readers, work) for replay in done]
    final = {it.seq: (it.item_id, it.data) for it in _history(session)}
    for replay in replays:
        assert [it.seq for it in replay] == list(range(1, len(replay) + 1))
        for it in replay:
            assert final[it.seq] == (it.item_id, it.data)


def test_concurrent_appends_with_a_client_per_thread(
    make_client: Callable[..., ownstate.Client],
) -> None:
    """Threads with a client each, on one database: the same guarantees."""
    session = _new_session(make_client())
    sessions = [
        make_client().session_stores.get(session.store).get(session.session_id)
        for _ in range(WRITERS)
    ]
    plans = {w: _plan(w, BATCHES) for w in range(WRITERS)}

    def write(w: int) -> list[list[ownstate.Item]]:
        return [sessions[w].append_items(batch) for batch in plans[w]]

    returned = dict(enumerate(_in_threads(WRITERS, write)))
    _check_history(_history(session), plans, returned)


def test_concurrent_appends_from_async_tasks(target: Target) -> None:
    """Tasks on one async client, gathered: the same guarantees."""
    plans = {w: _plan(w, BATCHES) for w in range(WRITERS)}

    async def scenario() -> tuple[list[ownstate.Item], dict[int, list[list[ownstate.Item]]]]:
        async with await target.connect_async() as aclient:
            store = await aclient.session_stores.create("concurrency")
            session = await store.add(actor_id="writers")

            async def write(w: int) -> list[list[ownstate.Item]]:
                results = []
                for batch in plans[w]:
                    results.append(await session.append_items(batch))
                    # a backend that never suspends would otherwise run each task to the end
                    await asyncio.sleep(0)
                return results

            returned = await asyncio.gather(*(write(w) for w in range(WRITERS)))
            stored = [it async for it in session.list_items(order_by="create_time asc")]
            return stored, dict(enumerate(returned))

    stored, returned = asyncio.run(scenario())
    _check_history(stored, plans, returned)


# appends from processes ----------------------------------------------------------------


def _append_in_process(url: str, store: str, session_id: str, writer: int,
                       start: Any, results: Any) -> None:
    """A child process: open a client of its own, wait for the others, append its plan."""
    with ownstate.connect(url) as own:
        session = own.session_stores.get(store).get(session_id)
        start.wait(START_TIMEOUT)
        returned = [session.append_items(batch) for batch in _plan(writer, PROCESS_BATCHES)]
    results.put((writer, returned))


def test_concurrent_appends_from_processes(target: Target, client: ownstate.Client) -> None:
    """Processes with a client each, on one database: the same guarantees."""
    if not target.has(Capability.MULTIPROCESS):
        pytest.skip(f"{target.name} does not declare Capability.MULTIPROCESS: separate "
                    "processes cannot open the same database")
    session = _new_session(client)
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    results = context.Queue()
    processes = [
        context.Process(target=_append_in_process, name=f"ownstate-writer-{w}",
                        args=(target.url, session.store, session.session_id, w, start, results))
        for w in range(PROCESSES)
    ]
    returned: dict[int, list[list[ownstate.Item]]] = {}
    with racing(processes=processes, results=results, timeout=30):
        # drain before joining: a child cannot exit while its queued result is unread
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while len(returned) < PROCESSES:
            try:
                writer, items = results.get(timeout=0.2)
                returned[writer] = items
            except queue.Empty:
                failed = [p.name for p in processes if p.exitcode not in (None, 0)]
                assert not failed, f"{failed} failed (their traceback is on stderr)"
                assert time.monotonic() < deadline, "the writer processes did not finish"
    assert [p.exitcode for p in processes] == [0] * PROCESSES
    plans = {w: _plan(w, PROCESS_BATCHES) for w in range(PROCESSES)}
    _check_history(_history(session), plans, returned)


# races on one id and on one item ---------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False], ids=["one-client", "client-per-thread"])
def test_concurrent_creation_of_one_session_id(
    make_client: Callable[..., ownstate.Client], shared: bool
) -> None:
    """Eight threads add the same session id: exactly one wins, the rest get AlreadyExists."""
    first = make_client()
    first.session_stores.create("contested")
    clients = [first] * WRITERS if shared else [make_client() for _ in range(WRITERS)]
    stores = [c.session_stores.get("contested") for c in clients]

    def add(n: int) -> ownstate.Session | ownstate.AlreadyExists:
        try:
            return stores[n].add(actor_id=f"actor-{n}", session_id="case-1",
                                 metadata={"writer": str(n)})
        except ownstate.AlreadyExists as exc:
            return exc

    outcomes = _in_threads(WRITERS, add)
    winners = [o for o in outcomes if isinstance(o, ownstate.Session)]
    refused = [o for o in outcomes if isinstance(o, ownstate.AlreadyExists)]
    assert len(winners) == 1, f"{len(winners)} threads created the same session"
    assert len(refused) == WRITERS - 1
    assert all(type(e) is ownstate.AlreadyExists and e.details.get("session_id") == "case-1"
               for e in refused)
    stored = stores[0].get("case-1")
    assert (stored.actor_id, stored.metadata) == (winners[0].actor_id, winners[0].metadata)
    assert [s.session_id for s in stores[0].list_sessions()] == ["case-1"]


@pytest.mark.parametrize("shared", [True, False], ids=["one-client", "client-per-thread"])
def test_concurrent_retries_of_one_idempotency_key(
    make_client: Callable[..., ownstate.Client], shared: bool
) -> None:
    """Eight threads send the same keyed append at once: it lands once and every thread gets
    its items; a different request under the same key gets IdempotencyKeyReused."""
    first = make_client()
    session = _new_session(first)
    clients = [first] * WRITERS if shared else [make_client() for _ in range(WRITERS)]
    sessions = [c.session_stores.get("concurrency").get(session.session_id) for c in clients]
    batch = [{"role": "user", "content": "charge once"}]
    other = [{"role": "user", "content": "something else"}]

    def append(n: int) -> list[ownstate.Item] | ownstate.IdempotencyKeyReused:
        try:
            return sessions[n].append_items(other if n == WRITERS - 1 else batch,
                                            idempotency_key="pay-1")
        except ownstate.IdempotencyKeyReused as exc:
            return exc

    outcomes = _in_threads(WRITERS, append)
    stored = _history(session)
    assert len(stored) == 1, "a retried append landed more than once"
    (only,) = stored
    for n, outcome in enumerate(outcomes):
        if isinstance(outcome, ownstate.IdempotencyKeyReused):
            continue
        assert [i.item_id for i in outcome] == [only.item_id], f"thread {n}"
    if only.data == other[0]:  # the odd request came first: every other one is refused
        assert all(isinstance(o, ownstate.IdempotencyKeyReused) for o in outcomes[:-1])
    else:
        assert isinstance(outcomes[-1], ownstate.IdempotencyKeyReused)
        assert not any(isinstance(o, ownstate.IdempotencyKeyReused) for o in outcomes[:-1])


@pytest.mark.parametrize("shared", [True, False], ids=["one-client", "client-per-thread"])
def test_concurrent_pops_take_each_item_once(
    make_client: Callable[..., ownstate.Client], shared: bool
) -> None:
    """Eight threads pop a 40-item session dry: each item comes out once, newest first."""
    first = make_client()
    session = _new_session(first)
    appended = session.append_items([{"n": n} for n in range(POPPED_ITEMS)])
    clients = [first] * POPPERS if shared else [make_client() for _ in range(POPPERS)]
    handles = [c.session_stores.get(session.store).get(session.session_id) for c in clients]

    def pop_until_empty(n: int) -> list[ownstate.Item]:
        popped = []
        while (item := handles[n].pop_item()) is not None:
            popped.append(item)
        return popped

    per_thread = _in_threads(POPPERS, pop_until_empty)
    popped = [item for items in per_thread for item in items]
    ids = Counter(item.item_id for item in popped)
    assert ids.most_common(1)[0][1] == 1, f"popped twice: {ids.most_common(3)}"
    assert set(ids) == {item.item_id for item in appended}, "an item was never popped"
    by_id = {item.item_id: item for item in appended}
    for item in popped:
        assert (item.seq, item.data) == (by_id[item.item_id].seq, by_id[item.item_id].data)
    for items in per_thread:
        seqs = [item.seq for item in items]
        assert seqs == sorted(seqs, reverse=True), "a thread popped an older item first"
    assert _history(session) == []
    assert session.pop_item() is None
