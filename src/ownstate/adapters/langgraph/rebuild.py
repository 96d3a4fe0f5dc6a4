"""Giving a LangGraph thread its conversation back from its ownstate session:
:func:`rebuild` when its checkpoints are gone, :func:`catch_up` when other frameworks added to
it. Works through a graph compiled with an :class:`~.saver.OwnstateSaver` only. It may touch
the saver and :mod:`._threads`, the error tree and LangChain's runnables, nothing else."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from ...errors import (
    Conflict,
    InvalidInput,
)
from ._threads import (
    _thread_id,
)
from .saver import OwnstateSaver

__all__ = ["acatch_up", "arebuild", "catch_up", "rebuild"]


def _checked_saver(graph: Any, config: RunnableConfig) -> OwnstateSaver:
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, OwnstateSaver):
        raise InvalidInput("the graph must be compiled with an OwnstateSaver", field="graph")
    _thread_id(config)
    return saver


def rebuild(graph: Any, config: RunnableConfig, *, channel: str = "messages",
            as_node: str | None = None) -> RunnableConfig:
    """Give a thread whose checkpoints were all dropped its conversation back.

    Reads the thread's session (see :meth:`OwnstateSaver.history`) and writes it into
    ``channel`` as a new first checkpoint (``graph.update_state(config, ..., as_node)``),
    referring to the stored items rather than copying them. The graph continues from there
    with the whole conversation; what is lost is only where a run was in flight (its
    pending tasks and interrupts). Returns the new checkpoint's config.

    Raises :class:`~ownstate.errors.InvalidInput` when the graph does not use an
    :class:`OwnstateSaver`, :class:`~ownstate.errors.Conflict` when the thread still has
    a checkpoint (nothing to rebuild).
    """
    saver = _checked_saver(graph, config)
    if saver.get_tuple(_latest(config)) is not None:
        raise Conflict(f"thread {_thread_id(config)!r} still has checkpoints")
    messages = saver.history(config)
    result: RunnableConfig = graph.update_state(_latest(config), {channel: messages},
                                                as_node=as_node)
    return result


async def arebuild(graph: Any, config: RunnableConfig, *, channel: str = "messages",
                   as_node: str | None = None) -> RunnableConfig:
    """Async :func:`rebuild`."""
    saver = _checked_saver(graph, config)
    if await saver.aget_tuple(_latest(config)) is not None:
        raise Conflict(f"thread {_thread_id(config)!r} still has checkpoints")
    messages = await saver.ahistory(config)
    result: RunnableConfig = await graph.aupdate_state(_latest(config), {channel: messages},
                                                       as_node=as_node)
    return result


def _latest(config: RunnableConfig) -> RunnableConfig:
    configurable = {k: v for k, v in (config.get("configurable") or {}).items()
                    if k != "checkpoint_id"}
    return {**config, "configurable": configurable}


def catch_up(graph: Any, config: RunnableConfig, *, channel: str = "messages",
             as_node: str | None = None) -> RunnableConfig | None:
    """Bring a thread up to date with what other frameworks added to its session.

    When a conversation continued in another framework (the OpenAI Agents SDK, ADK, ...)
    and comes back to LangGraph, its latest checkpoint ends where LangGraph left it. This
    adds the messages written since (:meth:`OwnstateSaver.news`) to ``channel`` with
    ``graph.update_state(config, ..., as_node=as_node)`` and returns the new checkpoint's
    config, or ``None`` when there was nothing new. A thread without checkpoints is
    rebuilt from its whole session (:func:`rebuild`).

    Raises :class:`~ownstate.errors.InvalidInput` when the graph does not use an
    :class:`OwnstateSaver`.
    """
    saver = _checked_saver(graph, config)
    if saver.get_tuple(_latest(config)) is None:
        return rebuild(graph, config, channel=channel, as_node=as_node)
    messages = saver.news(config, channel=channel)
    if not messages:
        return None
    result: RunnableConfig = graph.update_state(_latest(config), {channel: messages},
                                                as_node=as_node)
    return result


async def acatch_up(graph: Any, config: RunnableConfig, *, channel: str = "messages",
                    as_node: str | None = None) -> RunnableConfig | None:
    """Async :func:`catch_up`."""
    saver = _checked_saver(graph, config)
    if await saver.aget_tuple(_latest(config)) is None:
        return await arebuild(graph, config, channel=channel, as_node=as_node)
    messages = await saver.anews(config, channel=channel)
    if not messages:
        return None
    result: RunnableConfig = await graph.aupdate_state(_latest(config), {channel: messages},
                                                       as_node=as_node)
    return result
