"""A model-based test of facts and their two time axes.

A Hypothesis state machine drives one memory store through the sync client with random
``remember`` (valid times before, at and after the clock, so backdated corrections and
future-dated facts both occur), ``remember_many``, ``forget``, refused calls and clock
ticks (including none at all, so record times tie). The clock is the machine's own: it
replaces ``ownstate._ids.now`` for the duration of an example.

The model is deliberately built another way than the backends: it keeps the log of calls
and answers "what did we believe at record time R" by replaying the calls made up to R,
then "what held at valid time T" from the intervals that replay gives, the latest recorded
covering fact winning. After every step every history must equal the model's (nothing is
ever lost or rewritten), at most one fact per (subject, key) may be current, and recall at
valid and record times sampled around every recorded time must agree with the model.

It may touch the public sync API, the error tree, the model, :mod:`.stateful` and the
targets, and Hypothesis; never a backend directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import ownstate
from ownstate import _ids
from ownstate.errors import InvalidInput
from ownstate.model import Fact

from .stateful import SETTINGS as SESSION_SETTINGS
from .stateful import fresh_url, open_fresh
from .targets import Target

__all__ = ["FactsMachine", "test_facts_state_machine"]

#: the session machine's settings, with fewer and shorter runs
SETTINGS = settings(SESSION_SETTINGS, max_examples=30, stateful_step_count=25)

START = datetime(2030, 1, 1, tzinfo=UTC)
TICK = timedelta(milliseconds=1)
SUBJECTS = ("user:1", "user:2")
KEYS = ("plan", "city")
#: valid_from offsets from START, in ticks: before, at and after the clock's whole range
OFFSETS = st.one_of(st.none(), st.integers(-3, 40))
ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass
class ModelFact:
    fact_id: str
    subject: str
    key: str
    value: int
    valid_from: datetime
    recorded_at: datetime
    supersedes: str | None
    valid_to: datetime | None = None
    superseded_at: datetime | None = None
    closed_reason: str | None = None


@dataclass(frozen=True)
class Remembered:
    fact_id: str
    subject: str
    key: str
    value: int
    valid_from: datetime | None
    at: datetime


@dataclass(frozen=True)
class Forgotten:
    subject: str
    key: str
    reason: str
    at: datetime


def replay(log: list[Remembered | Forgotten], up_to: datetime | None) -> list[ModelFact]:
    """Every fact believed after the calls recorded at or before ``up_to`` (all of them
    when ``None``), in record order, with their intervals as those calls left them."""
    facts: list[ModelFact] = []
    current: dict[tuple[str, str], ModelFact] = {}
    for call in log:
        if up_to is not None and call.at > up_to:
            break
        where = (call.subject, call.key)
        old = current.pop(where, None)
        if isinstance(call, Remembered):
            valid_from = call.valid_from or call.at
            new = ModelFact(call.fact_id, call.subject, call.key, call.value, valid_from,
                            call.at, old.fact_id if old else None)
            if old is not None:
                old.valid_to = max(valid_from, old.valid_from)
                old.superseded_at, old.closed_reason = call.at, "superseded"
            facts.append(new)
            current[where] = new
        elif old is not None:
            old.valid_to = max(call.at, old.valid_from)
            old.superseded_at, old.closed_reason = call.at, call.reason
    return facts


def model_recall(log: list[Remembered | Forgotten], subject: str, valid_at: datetime,
                 known_at: datetime) -> dict[str, str]:
    """Per key, the fact id the model says is in force: the last recorded covering one."""
    found: dict[str, str] = {}
    for fact in replay(log, known_at):
        if fact.subject != subject or fact.valid_from > valid_at:
            continue
        if fact.valid_to is None or fact.valid_to > valid_at:
            found[fact.key] = fact.fact_id
    return dict(sorted(found.items()))


class FactsMachine(RuleBasedStateMachine):
    """Random fact operations on one memory store, checked against :func:`replay`.

    Subclass it with ``new_database`` set to a function returning the URL of a fresh, empty
    database; each example calls it once.
    """

    new_database: ClassVar[Callable[[], str | None]]

    def open_client(self, **kwargs: Any) -> ownstate.Client:
        """A client on a fresh database; override it where a URL alone cannot open one."""
        return ownstate.connect(type(self).new_database(), **kwargs)

    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self._real_now = _ids.now
        _ids.now = lambda: self.now
        self.client = self.open_client(tenant=f"facts-{uuid.uuid4().hex}")
        self.memory = self.client.memory_stores.create("machine-memory")
        self.log: list[Remembered | Forgotten] = []

    def teardown(self) -> None:
        _ids.now = self._real_now
        self.client.close()

    # helpers ----------------------------------------------------------------------------

    def _times(self) -> list[datetime]:
        """Every time the model mentions, with a microsecond either side."""
        moments = {START}
        for fact in replay(self.log, None):
            for moment in (fact.valid_from, fact.recorded_at, fact.valid_to,
                           fact.superseded_at):
                if moment is not None:
                    moments.add(moment)
        return sorted({m + d for m in moments for d in (-ONE_MICROSECOND, timedelta(0),
                                                        ONE_MICROSECOND)})

    @staticmethod
    def _valid_from(offset: int | None) -> datetime | None:
        return None if offset is None else START + offset * TICK

    def _record(self, fact: Fact, subject: str, key: str, value: int,
                valid_from: datetime | None) -> None:
        assert (fact.subject, fact.key, fact.value) == (subject, key, value)
        assert fact.recorded_at == self.now
        assert fact.valid_from == (valid_from or self.now)
        self.log.append(Remembered(fact.fact_id, subject, key, value, valid_from, self.now))

    # rules ------------------------------------------------------------------------------

    @rule(ticks=st.integers(0, 3))
    def tick(self, ticks: int) -> None:
        self.now += ticks * TICK

    @rule(subject=st.sampled_from(SUBJECTS), key=st.sampled_from(KEYS),
          value=st.integers(0, 9), offset=OFFSETS)
    def remember(self, subject: str, key: str, value: int, offset: int | None) -> None:
        valid_from = self._valid_from(offset)
        fact = self.memory.remember(subject, key, value, valid_from=valid_from)
        self._record(fact, subject, key, value, valid_from)

    @rule(batch=st.lists(st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(KEYS),
                                   st.integers(0, 9), OFFSETS), min_size=1, max_size=3))
    def remember_many(self, batch: list[tuple[str, str, int, int | None]]) -> None:
        specs = [{"subject": s, "key": k, "value": v, "valid_from": self._valid_from(o)}
                 for s, k, v, o in batch]
        made = self.memory.remember_many(specs)
        for fact, (s, k, v, o) in zip(made, batch, strict=True):
            self._record(fact, s, k, v, self._valid_from(o))

    @rule(subject=st.sampled_from(SUBJECTS), key=st.sampled_from(KEYS),
          reason=st.sampled_from([None, "asked", "wrong"]))
    def forget(self, subject: str, key: str, reason: str | None) -> None:
        before = {f.fact_id for f in replay(self.log, None) if f.superseded_at is None
                  and (f.subject, f.key) == (subject, key)}
        closed = self.memory.forget(subject, key, reason)
        if not before:
            assert closed is None
            return
        assert closed is not None
        assert {closed.fact_id} == before
        self.log.append(Forgotten(subject, key,
                                  f"forgotten: {reason}" if reason else "forgotten", self.now))

    @rule(subject=st.sampled_from(SUBJECTS), key=st.sampled_from(KEYS),
          bad=st.sampled_from([{"confidence": 2.0}, {"valid_from": datetime(2030, 1, 1)},
                               {"source_type": "robot"}]))
    def refused_remember(self, subject: str, key: str, bad: dict[str, Any]) -> None:
        try:
            self.memory.remember(subject, key, 0, **bad)
        except InvalidInput:
            return
        raise AssertionError(f"remember with {bad} was not refused")

    @precondition(lambda self: bool(self.log))
    @rule(data=st.data())
    def recall_at_sampled_times(self, data: st.DataObject) -> None:
        times = self._times()
        valid_at = data.draw(st.sampled_from(times), label="as_of")
        known_at = data.draw(st.sampled_from(times), label="known_at")
        for subject in SUBJECTS:
            got = self.memory.recall(subject, as_of=valid_at, known_at=known_at)
            assert {f.key: f.fact_id for f in got} == model_recall(
                self.log, subject, valid_at, known_at), (subject, valid_at, known_at)
            assert [f.key for f in got] == sorted(f.key for f in got)

    # invariants -------------------------------------------------------------------------

    def _histories(self) -> Iterator[tuple[str, str, list[ModelFact]]]:
        facts = replay(self.log, None)
        for subject in SUBJECTS:
            for key in KEYS:
                yield subject, key, [f for f in facts if (f.subject, f.key) == (subject, key)]

    @invariant()
    def histories_match_the_model(self) -> None:
        for subject, key, want in self._histories():
            got = self.memory.history(subject, key)
            assert [(f.fact_id, f.value, f.valid_from, f.valid_to, f.recorded_at,
                     f.superseded_at, f.supersedes, f.closed_reason) for f in got] == [
                (m.fact_id, m.value, m.valid_from, m.valid_to, m.recorded_at,
                 m.superseded_at, m.supersedes, m.closed_reason) for m in want]
            assert sum(f.superseded_at is None for f in got) <= 1

    @invariant()
    def recall_now_matches_the_model(self) -> None:
        for subject in SUBJECTS:
            got = self.memory.recall(subject)
            assert {f.key: f.fact_id for f in got} == model_recall(
                self.log, subject, self.now, self.now)


def test_facts_state_machine(target: Target, tmp_path: Path) -> None:
    """Random fact operations agree with the replayed model on the target backend."""
    directory = tmp_path / "facts-machine"
    directory.mkdir()
    fresh_url(target, directory)  # skips here, not mid-example, for a scheme it cannot copy

    class OnTarget(FactsMachine):
        new_database = staticmethod(lambda: fresh_url(target, directory))

        def open_client(self, **kwargs: Any) -> ownstate.Client:
            return open_fresh(target, directory, **kwargs)

    run_state_machine_as_test(OnTarget, settings=SETTINGS)
