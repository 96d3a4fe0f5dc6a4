"""Conformance tests for human decisions on awaiting runs.

Star-import this module in a test file that provides a ``target`` fixture. A decision is
recorded once: a second one, or one on a run that does not await a human, is a
:class:`~ownstate.errors.Conflict` and changes nothing; of concurrent deciders (threads with
clients of their own, and on backends with the ``multiprocess`` capability OS processes
too) exactly one wins. Waiting for a decision returns the decided run, or None once its
timeout passes; no test asserts how fast.

It may touch the public sync API, the backends' capability flags (names only), the error
tree, the model and the shared fixtures, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import ownstate
from ownstate.backends.base import Capability
from ownstate.errors import (
    AlreadyDecided,
    Conflict,
    InvalidInput,
    NotAwaiting,
    RunNotFound,
)
from ownstate.model import Run

from .fixtures import *
from .fixtures import racing, snapshot

Client = ownstate.Client

def _awaiting(client: Client, store: ownstate.SessionStore, name: str,
              framework: str = "langgraph") -> Run:
    session = store.add(actor_id="customer-123", session_id=name)
    run = client.runs.open_run(session, framework, thread_key=f"t-{name}")
    return client.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "refund",
                                                  "payload": {"amount": 40}})


def _state(client: Client, run_id: str) -> Run:
    return client.runs.get(run_id)


def _everything(client: Client) -> tuple[Any, list[Run]]:
    """What the tenant stores, its runs included, to prove a refusal changed nothing."""
    return snapshot(client), list(client.runs.list())


def test_a_decision_is_recorded_once_and_kept_for_audit(
        client: Client, target: Any, store: ownstate.SessionStore) -> None:
    run = _awaiting(client, store, "a1")
    assert [r.run_id for r in client.runs.outstanding()] == [run.run_id]
    by = "reviewer@example.com" if target.has(Capability.OPERATOR) else None
    decided = client.runs.decide(run.run_id, "approve", comment="fine, once",
                                 payload={"amount": 30}, decided_by=by)
    decision = decided.decision
    assert decision is not None
    assert (decision.outcome, decision.comment, decision.payload, decision.approved) == (
        "approve", "fine, once", {"amount": 30}, True)
    if by is not None:
        assert decision.decided_by == by
    else:  # a server records its key's principal
        assert isinstance(decision.decided_by, str)
        assert decision.decided_by
    assert decision.decided_at.tzinfo is not None
    assert decided.status == "awaiting_human"
    assert decided.decided
    assert _state(client, run.run_id) == decided
    assert decided.decisions == (decision,)
    # decided: no longer waiting on a human, waiting on a worker
    assert client.runs.outstanding() == []
    assert client.runs.outstanding_page().items == []
    assert [r.run_id for r in client.runs.decided().items] == [run.run_id]
    lease = client.runs.resume(run.run_id, owner="worker-1")
    resumed = _state(client, run.run_id)
    assert (resumed.status, resumed.decision, resumed.decisions) == (
        "running", decision, (decision,))
    assert lease.fencing_token == resumed.fencing_token
    assert client.runs.decided().items == []


def test_a_second_decision_is_a_conflict_and_changes_nothing(
        client: Client, store: ownstate.SessionStore) -> None:
    run = _awaiting(client, store, "a2")
    first = client.runs.decide(run.run_id, "reject", comment="no")
    before = _everything(client)
    for outcome in ("approve", "reject"):
        with pytest.raises(AlreadyDecided) as caught:
            client.runs.decide(run.run_id, outcome, comment="changed my mind")
        assert isinstance(caught.value, Conflict)
        assert (caught.value.run_id, caught.value.outcome) == (run.run_id, "reject")
    assert _state(client, run.run_id) == first
    assert _everything(client) == before


def test_deciding_a_run_that_does_not_await_is_a_conflict(
        client: Client, store: ownstate.SessionStore) -> None:
    running = client.runs.open_run(store.add(actor_id="c", session_id="r1"), "langgraph")
    closed = client.runs.open_run(store.add(actor_id="c", session_id="r2"), "langgraph")
    closed = client.runs.close_run(closed.run_id, "cancelled")
    before = _everything(client)
    for run, status in ((running, "running"), (closed, "cancelled")):
        with pytest.raises(NotAwaiting) as caught:
            client.runs.decide(run.run_id, "approve")
        assert (caught.value.run_id, caught.value.status) == (run.run_id, status)
        assert _state(client, run.run_id) == run
    with pytest.raises(RunNotFound):
        client.runs.decide("run_missing", "approve")
    assert _everything(client) == before


def test_a_bad_decision_is_refused_and_changes_nothing(
        client: Client, store: ownstate.SessionStore) -> None:
    run = _awaiting(client, store, "b1")
    before = _state(client, run.run_id)
    bad: list[dict[str, Any]] = [
        {"outcome": "maybe"}, {"outcome": ""}, {"outcome": None}, {"outcome": "APPROVE"},
        {"outcome": "approve", "comment": 7}, {"outcome": "approve", "comment": "x" * 5000},
        {"outcome": "approve", "payload": {"n": float("nan")}},
        {"outcome": "approve", "payload": {1: "not a string key"}},
    ]
    for arguments in bad:
        outcome = arguments.pop("outcome")
        with pytest.raises(InvalidInput):
            client.runs.decide(run.run_id, outcome, **arguments)
    with pytest.raises(InvalidInput):
        client.runs.decide("", "approve")
    with pytest.raises(InvalidInput):
        client.runs.wait_for_decision(run.run_id, timeout=-1)
    with pytest.raises(InvalidInput):
        client.runs.wait_for_decision(run.run_id, framework="langgraph")
    assert _state(client, run.run_id) == before


def test_a_new_request_takes_a_new_decision(client: Client,
                                            store: ownstate.SessionStore) -> None:
    run = _awaiting(client, store, "n1")
    first = client.runs.decide(run.run_id, "approve").decision
    lease = client.runs.resume(run.run_id, owner="worker")
    client.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "email"},
                              fencing_token=lease.fencing_token)
    again = _state(client, run.run_id)
    assert (again.decision, again.decisions) == (None, (first,))
    assert [r.run_id for r in client.runs.outstanding()] == [run.run_id]
    second = client.runs.decide(run.run_id, "reject", comment="not this one").decision
    assert _state(client, run.run_id).decisions == (first, second)


def test_the_inbox_pages_oldest_first(client: Client, store: ownstate.SessionStore) -> None:
    runs = [_awaiting(client, store, f"p{n}", framework="openai-agents" if n % 2 else
                      "langgraph") for n in range(5)]
    client.runs.decide(runs[2].run_id, "approve")
    undecided = [runs[n].run_id for n in (0, 1, 3, 4)]
    seen: list[str] = []
    token = None
    while True:
        page = client.runs.outstanding_page(page_size=2, page_token=token)
        assert len(page.items) <= 2
        seen += [r.run_id for r in page.items]
        token = page.next_page_token
        if token is None:
            break
    assert seen == undecided
    keyset, cursor = client.runs.awaiting_after(limit=3)
    assert [r.run_id for r in keyset] == undecided[:3]
    assert cursor is not None
    rest, cursor = client.runs.awaiting_after(after=cursor, limit=3)
    assert ([r.run_id for r in rest], cursor) == (undecided[3:], None)
    assert [r.run_id for r in client.runs.outstanding_page(framework="openai-agents").items
            ] == [runs[1].run_id, runs[3].run_id]
    assert [r.run_id for r in client.runs.decided().items] == [runs[2].run_id]
    assert [r.run_id for r in client.runs.awaiting_after(decided=True)[0]] == [runs[2].run_id]
    assert client.runs.outstanding_page(stores=["elsewhere"]).items == []
    assert [r.run_id for r in client.runs.outstanding_page(stores=[store.name]).items
            ] == undecided
    first = client.runs.outstanding_page(page_size=1)
    assert first.next_page_token is not None
    with pytest.raises(InvalidInput):  # a token of another listing
        client.runs.decided(page_token=first.next_page_token)
    with pytest.raises(InvalidInput):
        client.runs.awaiting_after(after="not-a-cursor")


def test_decisions_stay_in_their_tenant(client: Client, other_tenant: Client,
                                        store: ownstate.SessionStore) -> None:
    run = _awaiting(client, store, "t1")
    with pytest.raises(RunNotFound):
        other_tenant.runs.decide(run.run_id, "approve")
    assert other_tenant.runs.outstanding_page().items == []
    assert other_tenant.runs.wait_for_decision(timeout=0) is None
    assert _state(client, run.run_id).decision is None


def test_wait_times_out_with_none(client: Client, store: ownstate.SessionStore) -> None:
    run = _awaiting(client, store, "w0")
    assert client.runs.wait_for_decision(run.run_id, timeout=0.3) is None
    assert client.runs.wait_for_decision(timeout=0.3) is None
    assert client.runs.wait_for_decision(run.run_id, timeout=0) is None
    with pytest.raises(RunNotFound):
        client.runs.wait_for_decision("run_missing", timeout=0.1)
    # a run that does not await a human has nothing to wait for
    running = client.runs.open_run(store.add(actor_id="c", session_id="w0b"), "langgraph")
    assert client.runs.wait_for_decision(running.run_id, timeout=5) == running


def _decide_later(make: Callable[..., Client], run_id: str, delay: float,
                  errors: list[BaseException]) -> threading.Thread:
    def decide() -> None:
        try:
            time.sleep(delay)
            make().runs.decide(run_id, "approve", comment="later")
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=decide)
    thread.start()
    return thread


def test_wait_for_a_decision_on_one_run(client: Client, make_client: Callable[..., Client],
                                        store: ownstate.SessionStore) -> None:
    run = _awaiting(client, store, "w1")
    errors: list[BaseException] = []
    thread = _decide_later(make_client, run.run_id, 0.3, errors)
    try:
        got = make_client().runs.wait_for_decision(run.run_id, timeout=60)
    finally:
        thread.join()
    assert errors == []
    assert got is not None
    assert got.decision is not None
    assert (got.run_id, got.decision.comment) == (run.run_id, "later")
    # decided already: returns at once
    assert client.runs.wait_for_decision(run.run_id, timeout=60) == _state(client, run.run_id)


def test_wait_for_any_decided_run(client: Client, make_client: Callable[..., Client],
                                  store: ownstate.SessionStore) -> None:
    other = _awaiting(client, store, "w2", framework="adk")
    run = _awaiting(client, store, "w3")
    errors: list[BaseException] = []
    client.runs.decide(other.run_id, "approve")  # another framework's: not waited for
    thread = _decide_later(make_client, run.run_id, 0.3, errors)
    try:
        got = make_client().runs.wait_for_decision(framework="langgraph", timeout=60)
    finally:
        thread.join()
    assert errors == []
    assert got is not None
    assert got.run_id == run.run_id
    assert got.decided
    assert client.runs.wait_for_decision(framework="langgraph", stores=["elsewhere"],
                                         timeout=0.2) is None


# -- races -------------------------------------------------------------------------------

_OUTCOMES = ("approve", "reject")


def _decide_race(connect: Callable[[], Client], run_ids: list[str], name: str,
                 barrier: Any, report: Callable[[tuple[str, str, str]], None]) -> None:
    """One contender: for each run, wait at the barrier, then try to decide it."""
    contender = connect()
    try:
        for index, run_id in enumerate(run_ids):
            barrier.wait(timeout=120)
            try:
                contender.runs.decide(run_id, _OUTCOMES[index % 2], comment=name)
                report((run_id, name, "won"))
            except AlreadyDecided:
                report((run_id, name, "lost"))
            except Exception as exc:
                report((run_id, name, f"error: {exc!r}"))
    finally:
        contender.close()


def _check_decide_race(client: Client, run_ids: list[str],
                       outcomes: list[tuple[str, str, str]], contenders: int) -> None:
    assert [o for o in outcomes if o[2] not in ("won", "lost")] == []
    assert len(outcomes) == len(run_ids) * contenders
    for run_id in run_ids:
        winners = [name for rid, name, result in outcomes if rid == run_id and result == "won"]
        assert len(winners) == 1, (run_id, winners)
        run = client.runs.get(run_id)
        assert run.decision is not None
        assert run.decision.comment == winners[0]
        assert len(run.decisions) == 1


def test_concurrent_deciders_one_wins(client: Client, target: Any,
                                      store: ownstate.SessionStore) -> None:
    contenders = 6
    run_ids = [_awaiting(client, store, f"race-{n}").run_id for n in range(10)]
    barrier = threading.Barrier(contenders)
    results: queue.SimpleQueue[tuple[str, str, str]] = queue.SimpleQueue()
    threads = [threading.Thread(target=_decide_race, args=(target.connect, run_ids,
                                                           f"thread-{n}", barrier, results.put))
               for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    outcomes = []
    while not results.empty():
        outcomes.append(results.get())
    _check_decide_race(client, run_ids, outcomes, contenders)


def _decide_process(url: str, run_ids: list[str], names: list[str], barrier: Any,
                    results: Any) -> None:
    """A spawned process's part of the race: one thread per contender."""
    threads = [threading.Thread(target=_decide_race, args=(
        lambda: ownstate.connect(url), run_ids, name, barrier, results.put))
        for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_concurrent_deciders_across_processes_one_wins(
        client: Client, target: Any, store: ownstate.SessionStore) -> None:
    if not target.has(Capability.MULTIPROCESS):
        pytest.skip("the backend does not share data between processes")
    local, remote, per_process = 2, 2, 2
    contenders = local + remote * per_process
    run_ids = [_awaiting(client, store, f"xrace-{n}").run_id for n in range(8)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(contenders)
    results = ctx.Queue()
    processes = [ctx.Process(target=_decide_process, args=(
        target.url, run_ids, [f"proc-{p}-{n}" for n in range(per_process)], barrier, results))
        for p in range(remote)]
    threads = [threading.Thread(target=_decide_race, args=(
        target.connect, run_ids, f"local-{n}", barrier, results.put)) for n in range(local)]
    with racing(threads, processes, barrier=barrier, results=results):
        outcomes: list[tuple[str, str, str]] = [
            results.get(timeout=120) for _ in range(len(run_ids) * contenders)]
    assert [p.exitcode for p in processes] == [0] * remote
    assert {name for _, name, _ in outcomes if name.startswith("proc-")} == {
        f"proc-{p}-{n}" for p in range(remote) for n in range(per_process)}
    _check_decide_race(client, run_ids, outcomes, contenders)
