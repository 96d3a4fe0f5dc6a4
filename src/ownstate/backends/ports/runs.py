"""The runs port: shadow records of framework runs, their leases and their effects.

The invariants live in the datastore, not in read-then-write code: at most one active
(running or awaiting_human) run per session; a claim (``resume``) is a single conditional
write, so of N concurrent claimers exactly one wins; every claim increases the fencing
token, and a write that carries another token is refused. Each write checks the token
inside the same transaction (or conditional statement) that makes the change, and before
the run's status: a stale writer always learns that it is stale.

:func:`run_refusal` is that order, written once: every backend (and the checkpoint
fence) asks it why a write is refused, given the run as read inside the write.

Decisions follow the same rule: ``decide`` is one conditional write on "awaits a human and
its request is undecided", so of concurrent deciders exactly one wins, and
:func:`decision_refusal` says why the others lost. A run awaiting a human is *outstanding*
until decided and *decided* until a worker resumes it; both listings run oldest first,
by when the run entered ``awaiting_human`` and then by when it was opened.

It may touch decision waiting (``backends._decisions``), the model and errors, and no
datastore: each backend implements it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ...errors import (
    AlreadyDecided,
    LeaseHeld,
    NotAwaiting,
    OwnstateError,
    RunClosed,
    RunNotFound,
    StaleLease,
)
from ...model import ACTIVE_RUN_STATUSES, Decision, Effect, Lease, Run
from .._decisions import Signalled, wait_until_decided

__all__ = ["RunPort", "RunState", "decision_refusal", "run_refusal"]

#: The longest pause between two checks of a waiter on a backend that cannot announce
#: decisions made by other processes.
POLL_BOUND_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class RunState:
    """What a run write is checked against, as read inside the write's own transaction."""

    status: str
    fencing_token: int
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None


def opening_lease(owner: str | None, ttl_seconds: float,
                  now: datetime) -> tuple[datetime | None, int]:
    """A run's lease as it opens: when it has an owner, held for ``ttl_seconds`` under
    fencing token 1; without one, no lease and token 0."""
    if owner is None:
        return None, 0
    return now + timedelta(seconds=ttl_seconds), 1


def run_refusal(run_id: str, run: RunState | None, fencing_token: int | None, *,
                ended_ok: bool = False, lease_needed: bool = False,
                claimant: str | None = None, now: datetime | None = None
                ) -> OwnstateError | None:
    """Why a write on ``run`` is refused, or ``None`` when it may go on. In this order: the
    run exists (``None``: RunNotFound), ``fencing_token`` (when given) is current
    (StaleLease), the run has not ended (RunClosed; skipped with ``ended_ok``); then, for a
    heartbeat (``lease_needed``), that it holds a lease (StaleLease), and for a claim by
    ``claimant`` at ``now``, that nobody else holds an unexpired one (LeaseHeld)."""
    if run is None:
        return RunNotFound(run_id=run_id)
    current = run.fencing_token
    if fencing_token is not None and fencing_token != current:
        return StaleLease(run_id=run_id, fencing_token=fencing_token, current=current)
    if not ended_ok and run.status not in ACTIVE_RUN_STATUSES:
        return RunClosed(run_id=run_id, status=run.status)
    if lease_needed and run.lease_owner is None:
        return StaleLease(run_id=run_id, fencing_token=fencing_token, current=current)
    owner, until = run.lease_owner, run.lease_expires_at
    if (claimant is not None and owner is not None and owner != claimant
            and until is not None and (now is None or until > now)):
        return LeaseHeld(run_id=run_id, owner=owner, expires_at=until)
    return None


def decision_refusal(run_id: str, status: str | None, outcome: str | None) -> OwnstateError:
    """Why a decision on a run (read after the refused write) was refused: the run does not
    exist (``status`` None: RunNotFound), it does not await a human (NotAwaiting), or its
    request already has a decision with ``outcome`` (AlreadyDecided)."""
    if status is None:
        return RunNotFound(run_id=run_id)
    if status != "awaiting_human" or outcome is None:
        return NotAwaiting(run_id=run_id, status=status)
    return AlreadyDecided(run_id=run_id, outcome=outcome)


class RunPort(Signalled, ABC):
    """Storage for runs, leases and the effects ledger."""

    @abstractmethod
    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        """Start a run in status ``running``; with ``owner`` it also takes the lease
        (fencing token 1). Raises SessionNotFound, ActiveRunExists, AlreadyExists."""

    @abstractmethod
    async def get_run(self, tenant: str, run_id: str) -> Run:
        """Raises RunNotFound."""

    @abstractmethod
    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        """Up to ``limit`` runs matching every given filter, newest first, strictly after
        the cursor ``after``; and the cursor of the last one returned when more remain,
        else ``None``."""

    @abstractmethod
    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        """Set status ``awaiting_human`` with what it awaits (already holding
        ``requested_at``/``requested_by``). Raises RunNotFound, RunClosed, StaleLease."""

    @abstractmethod
    async def resume(self, tenant: str, run_id: str, owner: str, ttl_seconds: float,
                     now: datetime) -> Lease:
        """Claim the run for ``owner`` when it has no lease, its lease has expired, or
        ``owner`` already holds it: status becomes ``running``, ``awaiting`` is cleared and
        the fencing token grows by one. One conditional write.

        Raises RunNotFound, RunClosed, LeaseHeld.
        """

    @abstractmethod
    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        """Extend the lease held with ``fencing_token`` to ``now + ttl_seconds``, even if it
        has expired, as long as nobody has claimed the run since. Raises RunNotFound,
        StaleLease (also when the run holds no lease), RunClosed."""

    @abstractmethod
    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        """End the run (done, failed or cancelled), release its lease, add the cost and set
        the step count when given. Raises RunNotFound, RunClosed, StaleLease."""

    @abstractmethod
    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        """Up to ``limit`` runs in ``status`` (an active status) across the tenant, in the
        order they entered it (oldest first); with ``entered_before``, only those that
        entered it before that moment. A run enters ``running`` when opened or resumed and
        ``awaiting_human`` when marked (``awaiting["requested_at"]``)."""

    @abstractmethod
    async def record_effect(self, tenant: str, run_id: str, tool_call_id: str,
                            result_json: str, fencing_token: int | None,
                            now: datetime) -> Effect:
        """Store the result unless one is already stored; returns the stored one (with
        ``recorded`` saying which). The fencing check comes first; a closed run returns an
        effect stored earlier but takes no new one. Raises RunNotFound, StaleLease,
        RunClosed."""

    @abstractmethod
    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        """Raises RunNotFound."""

    # decisions -------------------------------------------------------------------------

    @abstractmethod
    async def decide(self, tenant: str, run_id: str, decision: Decision) -> Run:
        """Record ``decision`` on the run when it awaits a human and its request has no
        decision yet, and add it to the run's ``decisions``: one conditional write, so of
        concurrent deciders exactly one wins. Then fire :attr:`decision_signal` (and the
        datastore's announcement, where it has one). Raises RunNotFound, NotAwaiting,
        AlreadyDecided."""

    @abstractmethod
    async def list_awaiting(self, tenant: str, *, decided: bool, framework: str | None,
                            stores: frozenset[str] | None, limit: int,
                            after: Sequence[Any] | None
                            ) -> tuple[list[Run], list[Any] | None]:
        """Up to ``limit`` runs awaiting a human whose request is decided (``decided``) or
        not, oldest first, of ``framework`` and of the session stores ``stores`` when
        given, strictly after the cursor ``after``; and the cursor of the last one returned
        when more remain. A cursor is ``[entered, ordinal]``: RFC 3339 text (as
        :func:`~ownstate._ids.format_time` writes it) of when the run entered
        ``awaiting_human``, and the backend's opening order of runs."""

    async def wait_for_decision(self, tenant: str, run_id: str | None,
                                framework: str | None, stores: frozenset[str] | None,
                                timeout: float) -> Run | None:
        """The run ``run_id`` once it no longer awaits an undecided request, or (without
        ``run_id``) the oldest decided run of ``framework`` and ``stores``; None when
        ``timeout`` seconds pass first. Raises RunNotFound.

        This version checks, then sleeps until :attr:`decision_signal` fires or a pause
        bounded by a second passes; a backend that hears other processes' decisions
        overrides :meth:`_decision_wait_bound` and :meth:`_decision_listener`.
        """
        async def check() -> Run | None:
            if run_id is not None:
                run = await self.get_run(tenant, run_id)
                return None if run.status == "awaiting_human" and run.decision is None else run
            found, _ = await self.list_awaiting(tenant, decided=True, framework=framework,
                                                stores=stores, limit=1, after=None)
            return found[0] if found else None

        return await wait_until_decided(self.decision_signal, check, timeout,
                                        max_pause=self._decision_wait_bound(),
                                        listener=self._decision_listener())

    def _decision_wait_bound(self) -> float:
        return POLL_BOUND_SECONDS

    def _decision_listener(self) -> Any:
        return None
