"""Conformance tests for resume races: 150 rounds of 8 threads, each with its own client,
on every backend; and, on backends with the ``multiprocess`` capability, 50 rounds in which
the 8 contenders are 4 threads here and 2 threads in each of 2 spawned OS processes.
Star-imported by :mod:`.runs`. It may touch the public sync API, the backends' capability
flags (names only), the error tree, :mod:`.runs_lifecycle` and the shared fixtures, and
pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import ownstate
from ownstate import _ids
from ownstate.backends.base import Capability
from ownstate.errors import (
    LeaseHeld,
    StaleLease,
)

from .fixtures import *
from .fixtures import racing
from .runs_lifecycle import (
    Clock,
)

Client = ownstate.Client


# resume races ------------------------------------------------------------------------

_TTL = 30.0


@dataclass
class _Outcome:
    round: int
    owner: str
    won: int | None
    stale_tried: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _contend(connect: Callable[[], Client], run_id: str, owner: str, rounds: int,
             barrier: Any, report: Callable[[_Outcome], object]) -> None:
    """One contender on a client of its own (``connect()``): each round, claim the run;
    then, having lost, write with the token of the last round it won, which must be
    refused; having won, write with the new token."""
    last: int | None = None
    with connect() as client, contextlib.suppress(threading.BrokenBarrierError):
        for round_no in range(rounds):
            outcome = _Outcome(round_no, owner, None)
            barrier.wait(timeout=120)
            try:
                outcome.won = client.runs.resume(run_id, owner, ttl=_TTL).fencing_token
            except LeaseHeld:
                pass
            except Exception as exc:
                outcome.problems.append(f"resume: {exc!r}")
            barrier.wait(timeout=120)
            if outcome.won is not None:
                try:
                    client.runs.heartbeat(run_id, outcome.won, ttl=_TTL)
                    client.runs.record_effect(run_id, f"won-{round_no}", owner,
                                              fencing_token=outcome.won)
                except Exception as exc:
                    outcome.problems.append(f"winner's write: {exc!r}")
                last = outcome.won
            elif last is not None:
                call = f"stale-{round_no}-{owner}"
                outcome.problems.extend(_stale_writes(client, run_id, owner, call, last))
                outcome.stale_tried.append(call)
            report(outcome)
            barrier.wait(timeout=120)


def _stale_writes(client: Client, run_id: str, owner: str, call: str,
                  stale: int) -> list[str]:
    """Write with a token that is no longer current; each write must be refused."""
    writes: list[tuple[str, Callable[[], object]]] = [
        ("heartbeat", lambda: client.runs.heartbeat(run_id, stale)),
        ("record_effect", lambda: client.runs.record_effect(run_id, call, owner,
                                                            fencing_token=stale)),
        ("close_run", lambda: client.runs.close_run(run_id, "failed", fencing_token=stale)),
    ]
    problems = []
    for name, write in writes:
        try:
            write()
            problems.append(f"{name} with stale token {stale} succeeded")
        except StaleLease:
            pass
        except Exception as exc:
            problems.append(f"{name}: {exc!r}")
    return problems


def _race_process(url: str, run_id: str, owners: list[str], rounds: int, barrier: Any,
                  offset: Any, results: Any) -> None:
    """A spawned process's part of the race: its own clock on the shared offset, and one
    thread per owner."""
    _ids.now = Clock(offset).now
    threads = [threading.Thread(target=_contend, args=(functools.partial(ownstate.connect, url),
                                                       run_id, owner, rounds, barrier,
                                                       results.put))
               for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _coordinate(clock: Clock, rounds: int, barrier: Any) -> None:
    """Expire every lease, then let a round run: claim, write, report."""
    for _ in range(rounds):
        clock.advance(_TTL + 1)
        for _phase in range(3):
            barrier.wait(timeout=120)


def _check_race(client: Client, run_id: str, outcomes: list[_Outcome], rounds: int,
                contenders: int, first_token: int) -> None:
    assert len(outcomes) == rounds * contenders
    problems = [(o.round, o.owner, p) for o in outcomes for p in o.problems]
    assert problems == []
    tokens = []
    for round_no in range(rounds):
        winners = [o for o in outcomes if o.round == round_no and o.won is not None]
        assert len(winners) == 1, (round_no, winners)
        tokens.append(winners[0].won)
        effect = client.runs.get_effect(run_id, f"won-{round_no}")
        assert effect is not None
        assert effect.result == winners[0].owner
    assert tokens == list(range(first_token + 1, first_token + rounds + 1))
    assert sum(len(o.stale_tried) for o in outcomes) > 0
    for o in outcomes:
        for call in o.stale_tried:
            assert client.runs.get_effect(run_id, call) is None
    final = client.runs.get(run_id)
    assert (final.status, final.fencing_token) == ("running", first_token + rounds)


@pytest.mark.slow
def test_resume_race_threads(client: Client, target: Any, session: ownstate.Session,
                             clock: Clock) -> None:
    rounds, contenders = 150, 8
    run = client.runs.open_run(session, "langgraph", owner="opener")
    barrier = threading.Barrier(contenders + 1)
    results: queue.SimpleQueue[_Outcome] = queue.SimpleQueue()
    threads = [threading.Thread(target=_contend, args=(target.connect, run.run_id, f"thread-{n}",
                                                       rounds, barrier, results.put))
               for n in range(contenders)]
    with racing(threads, barrier=barrier):
        _coordinate(clock, rounds, barrier)
    outcomes = []
    while not results.empty():
        outcomes.append(results.get())
    _check_race(client, run.run_id, outcomes, rounds, contenders, run.fencing_token)


@pytest.mark.slow
def test_resume_race_across_processes(client: Client, target: Any,
                                      session: ownstate.Session,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if not target.has(Capability.MULTIPROCESS):
        pytest.skip("the backend does not share data between processes")
    rounds, local, remote, per_process = 50, 4, 2, 2
    contenders = local + remote * per_process
    ctx = multiprocessing.get_context("spawn")
    offset = ctx.Value("d", 0.0)
    clock = Clock(offset)
    monkeypatch.setattr(_ids, "now", clock.now)
    run = client.runs.open_run(session, "langgraph", owner="opener")
    barrier = ctx.Barrier(contenders + 1)
    results = ctx.Queue()
    processes = [
        ctx.Process(target=_race_process,
                    args=(target.url, run.run_id, [f"proc-{p}-{n}" for n in range(per_process)],
                          rounds, barrier, offset, results))
        for p in range(remote)
    ]
    threads = [threading.Thread(target=_contend, args=(target.connect, run.run_id, f"local-{n}",
                                                       rounds, barrier, results.put))
               for n in range(local)]
    with racing(threads, processes, barrier=barrier, results=results):
        _coordinate(clock, rounds, barrier)
        outcomes: list[_Outcome] = [results.get(timeout=120) for _ in range(rounds * contenders)]
    assert [p.exitcode for p in processes] == [0] * remote
    assert {o.owner for o in outcomes if o.owner.startswith("proc-")} == {
        f"proc-{p}-{n}" for p in range(remote) for n in range(per_process)}
    _check_race(client, run.run_id, outcomes, rounds, contenders, run.fencing_token)
