"""What every adapter's ``resume_decided`` shares: the record of a run it resumed, the
refusals that mean another worker got there first, and the loop over the decided runs of
one framework. It may touch runs through the public API only (by way of the bridge), the
error tree and the model; never a backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import LeaseHeld, NotAwaiting, RunClosed, RunNotFound, StaleLease
from ..model import Decision, Run
from ._bridge import Bridge

__all__ = ["TAKEN_ELSEWHERE", "Resumed", "decision_of", "each_decided"]

#: What a resume meets when another worker resumed, closed or removed the run first.
TAKEN_ELSEWHERE = (LeaseHeld, NotAwaiting, RunClosed, RunNotFound, StaleLease)


@dataclass(frozen=True)
class Resumed:
    """A decided run that a worker carried on: the run as it was decided, and what the
    framework returned when it ran on."""

    run: Run
    result: Any

    @property
    def decision(self) -> Decision:
        return decision_of(self.run)


def decision_of(run: Run) -> Decision:
    """The run's decision; a run listed as decided always has one."""
    if run.decision is None:  # pragma: no cover - decided() lists decided runs only
        raise NotAwaiting(run_id=run.run_id, status=run.status)
    return run.decision


async def each_decided(bridge: Bridge, framework: str,
                       resume: Callable[[Run], Awaitable[Any]], *,
                       limit: int) -> list[Resumed]:
    """``resume`` every decided run of ``framework`` (up to ``limit``, oldest first) and
    return those it carried on; a run another worker took first is passed over. ``resume``
    runs on the caller's loop; only the listing goes through ``bridge``."""
    page = await bridge.acall(bridge.client.runs.decided(framework=framework,
                                                         page_size=limit))
    done = []
    for run in page.items:
        try:
            result = await resume(run)
        except TAKEN_ELSEWHERE:
            continue
        done.append(Resumed(run, result))
    return done
