"""Whether a sync client is driving a coroutine on the calling thread right now.

A backend that runs inline (``Backend.runs_inline``) does its I/O without an event loop.
Most of the time a sync client drives its coroutines itself, on the caller's thread, and
the backend may block that thread. But an adapter may also relay one for async code
(``Client.relay_coroutine``), which then runs on that code's event loop: a backend that
blocks on the network (a remote server's answer, a long poll) should hand that wait to a
worker thread rather than hold the loop up. :data:`driven_inline` tells the two apart: the
sync client's inline portal sets it while it drives a coroutine.

It may touch nothing else of ownstate's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["drive", "driven_inline", "relayed"]

T = TypeVar("T")

#: True while a sync client drives a coroutine on the calling thread (no event loop).
driven_inline: ContextVar[bool] = ContextVar("ownstate_driven_inline", default=False)


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro``, which must never wait on an event loop, to completion on this thread,
    with :data:`driven_inline` set; a bare ``yield`` (``asyncio.sleep(0)``) is stepped
    over, and anything that needs a running loop fails loudly."""
    token = driven_inline.set(True)
    try:
        while True:
            if coro.send(None) is not None:
                raise RuntimeError("an inline ownstate backend waited on an event loop")
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        driven_inline.reset(token)
        coro.close()


def relayed() -> bool:
    """Whether the caller runs on an event loop, not driven inline: a backend that would
    block should then hand its blocking work to a worker thread (``asyncio.to_thread``
    of :func:`drive`)."""
    if driven_inline.get():
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
