"""The runs port: shadow records of framework runs, their leases and their effects.

The invariants live in the datastore, not in read-then-write code: at most one active
(running or awaiting_human) run per session; a claim (``resume``) is a single conditional
write, so of N concurrent claimers exactly one wins; every claim increases the fencing
token, and a write that carries an older token is refused.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...model import Effect, Lease, Run

__all__ = ["RunPort"]


class RunPort(ABC):
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
        """Runs matching every given filter, newest first, and the cursor after the last.
        """

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
        """Extend the lease held with ``fencing_token``. Raises RunNotFound, RunClosed,
        StaleLease."""

    @abstractmethod
    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        """End the run (done, failed or cancelled), release its lease, add the cost and set
        the step count when given. Raises RunNotFound, RunClosed, StaleLease."""

    @abstractmethod
    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          older_than: datetime | None, limit: int) -> list[Run]:
        """Runs in ``status`` across the tenant, oldest first; with ``older_than``, only
        those that entered it (``awaiting.requested_at``, else ``started_at``) before it."""

    @abstractmethod
    async def record_effect(self, tenant: str, run_id: str, tool_call_id: str,
                            result_json: str, fencing_token: int | None,
                            now: datetime) -> Effect:
        """Store the result unless one is already stored; returns the stored one (with
        ``recorded`` saying which). Raises RunNotFound, StaleLease."""

    @abstractmethod
    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        """Raises RunNotFound."""
