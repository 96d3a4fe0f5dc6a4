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

from contextvars import ContextVar

__all__ = ["driven_inline"]

#: True while a sync client drives a coroutine on the calling thread (no event loop).
driven_inline: ContextVar[bool] = ContextVar("ownstate_driven_inline", default=False)
