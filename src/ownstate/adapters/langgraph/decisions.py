"""Human decisions carried back into LangGraph: each decided run of a thread paused at
``interrupt()`` is resumed with ``Command(resume=...)`` on its thread.

The graph must be compiled with an :class:`~.saver.OwnstateSaver`, whose invocations are
the ownstate runs that wait on a human. :func:`resume_decided` (and its async twin) claims
each decided run for the saver's owner (so of several workers one resumes it, and the
others pass it over), then invokes the graph on the run's thread with the decision as the
interrupt's answer; the saver closes the run when the graph finishes, or marks it awaiting
again at the next interrupt. It may touch runs through the public API only (the bridge and
the shared ``_decided`` loop), the saver, and LangGraph's ``Command``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langgraph.types import Command

from ...api import AsyncClient, Client
from ...errors import InvalidInput
from ...model import JSON, Run
from .._bridge import Bridge
from .._decided import TAKEN_ELSEWHERE, Resumed, decision_of, each_decided
from ._threads import FRAMEWORK
from .saver import OwnstateSaver

__all__ = ["aresume_decided", "decision_value", "resume_command", "resume_decided"]


def decision_value(run: Run) -> dict[str, JSON]:
    """What ``interrupt()`` returns in the resumed node, by default: the decision as a
    dict (``outcome``, ``approved``, ``comment``, ``payload``, ``decided_by``)."""
    decision = decision_of(run)
    return {"outcome": decision.outcome, "approved": decision.approved,
            "comment": decision.comment, "payload": decision.payload,
            "decided_by": decision.decided_by}


def resume_command(run: Run, value: Callable[[Run], Any] = decision_value) -> Command[Any]:
    """The ``Command(resume=...)`` that answers the run's interrupts with ``value(run)``:
    the value itself for one interrupt, or the same value for each interrupt id when the
    graph paused at several."""
    answer = value(run)
    interrupts = (run.awaiting or {}).get("interrupts")
    ids = [i.get("id") for i in interrupts if isinstance(i, Mapping)] if isinstance(
        interrupts, list) else []
    if len(ids) > 1 and all(isinstance(i, str) for i in ids):
        return Command(resume=dict.fromkeys(ids, answer))
    return Command(resume=answer)


def _config(run: Run, config: Mapping[str, Any] | None) -> dict[str, Any]:
    if run.thread_key is None:
        raise InvalidInput(f"run {run.run_id!r} names no thread", field="thread_key")
    base = dict(config or {})
    base["configurable"] = {**dict(base.get("configurable") or {}),
                            "thread_id": run.thread_key}
    return base


def _saver(graph: Any) -> OwnstateSaver:
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, OwnstateSaver):
        raise InvalidInput("the graph must be compiled with an OwnstateSaver", field="graph")
    return saver


def resume_decided(
    graph: Any,
    client: Client,
    *,
    value: Callable[[Run], Any] = decision_value,
    config: Mapping[str, Any] | None = None,
    limit: int = 100,
    lease_ttl: float = 60.0,
) -> list[Resumed]:
    """Resume every decided LangGraph run (up to ``limit``, oldest first) on ``graph``:
    claim it for the graph's saver, then ``graph.invoke(resume_command(run, value),
    config)`` with the run's thread. Returns the runs resumed, each with the graph's
    result; a run another worker resumed first is passed over.

    Raises :class:`~ownstate.errors.InvalidInput` (a graph without an OwnstateSaver) and
    whatever the graph raises.
    """
    saver = _saver(graph)
    done = []
    for run in client.runs.decided(framework=FRAMEWORK, page_size=limit).items:
        try:
            client.runs.resume(run.run_id, saver.owner, ttl=lease_ttl)
        except TAKEN_ELSEWHERE:
            continue
        result = graph.invoke(resume_command(run, value), _config(run, config))
        done.append(Resumed(run, result))
    return done


async def aresume_decided(
    graph: Any,
    client: AsyncClient,
    *,
    value: Callable[[Run], Any] = decision_value,
    config: Mapping[str, Any] | None = None,
    limit: int = 100,
    lease_ttl: float = 60.0,
) -> list[Resumed]:
    """The async twin of :func:`resume_decided`, with ``graph.ainvoke``."""
    saver = _saver(graph)

    async def resume(run: Run) -> Any:
        await client.runs.resume(run.run_id, saver.owner, ttl=lease_ttl)
        return await graph.ainvoke(resume_command(run, value), _config(run, config))

    return await each_decided(Bridge(client), FRAMEWORK, resume, limit=limit)
