"""Waiting for a human's decision without polling in a tight loop, for every backend.

A waiter subscribes first, then checks, then sleeps until a signal or a bounded pause
and checks again: a decision recorded between the check and the sleep has already fired
the subscription, so no wake-up is lost. :class:`LocalSignal` wakes the waiters of this
process when a decision is recorded through the same backend; a backend whose datastore
can announce decisions (PostgreSQL ``NOTIFY``, Redis pub/sub) feeds that signal from a
listener (:class:`Listener`), so waiters in every process wake within a round trip. The
pause after each check grows from 50 ms up to a bound (one second where decisions made by
other processes go unannounced, as on SQLite), which keeps a waiter on a quiet run cheap
and a decision made elsewhere found within the bound.

It may touch nothing of ownstate's but the model, and no datastore itself: a backend's
listener feeds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..model import Run

__all__ = ["Listener", "LocalSignal", "Signalled", "wait_until_decided"]

#: The first pause between checks, and how much each following one grows.
_FIRST_PAUSE = 0.05
_GROWTH = 2.0


class _Subscription:
    """One waiter's flag. On an event loop it is an :class:`asyncio.Event`; driven with no
    loop (the sync client's inline portal, which runs coroutines that never suspend) it is
    a :class:`threading.Event`, and waiting blocks the calling thread, which is all that
    thread is doing."""

    __slots__ = ("event", "flag", "loop")

    def __init__(self) -> None:
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self.event = asyncio.Event() if self.loop is not None else None
        self.flag = threading.Event()

    def fire(self) -> None:
        self.flag.set()
        if self.loop is not None and self.event is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
                self.loop.call_soon_threadsafe(self.event.set)

    async def wait(self, timeout: float) -> None:
        if self.event is None:
            self.flag.wait(timeout)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), timeout)
            self.event.clear()
        self.flag.clear()


class LocalSignal:
    """Wakes every waiter of this process; safe to fire from any thread or event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: set[_Subscription] = set()

    def fire(self) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for subscription in subscribers:
            subscription.fire()

    @contextlib.contextmanager
    def subscribe(self) -> Any:
        subscription = _Subscription()
        with self._lock:
            self._subscribers.add(subscription)
        try:
            yield subscription
        finally:
            with self._lock:
                self._subscribers.discard(subscription)


class Signalled:
    """Gives a backend its :class:`LocalSignal`, made on first use."""

    _decision_signal: LocalSignal | None = None

    @property
    def decision_signal(self) -> LocalSignal:
        """Wakes this process's waiters when a decision is recorded through this backend."""
        if self._decision_signal is None:
            self._decision_signal = LocalSignal()
        return self._decision_signal

    def announced_by(self, listen: Callable[[Callable[[], None], Callable[[], None]],
                                            Awaitable[None]]) -> Listener:
        """The :class:`Listener` that feeds :attr:`decision_signal` from ``listen``, made
        on first use and kept as ``_decisions_listener`` (where closing the backend finds
        it)."""
        listener: Listener | None = self.__dict__.get("_decisions_listener")
        if listener is None:
            listener = Listener(self.decision_signal, listen)
            self.__dict__["_decisions_listener"] = listener
        return listener


class Listener:
    """A task that holds the datastore's announcement channel open and fires a
    :class:`LocalSignal` for every announcement; started by the first waiter.

    ``listen(ready, fire)`` is the datastore's loop: it calls ``ready()`` once it is
    subscribed, ``fire()`` on every announcement, and returns or raises when its connection
    ends; the listener then starts it again on the next wait. Waiters never depend on it
    for more than speed: their pauses stay bounded. A waiter with no event loop (driven
    inline) starts it on an event loop of the listener's own, on a daemon thread.
    """

    def __init__(self, signal: LocalSignal,
                 listen: Callable[[Callable[[], None], Callable[[], None]], Awaitable[None]]
                 ) -> None:
        self._signal = signal
        self._listen = listen
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._own_lock = threading.Lock()

    def ensure_elsewhere(self, timeout: float = 2.0) -> bool:
        """:meth:`ensure` for a caller with no event loop: on the listener's own loop."""
        with self._own_lock:
            loop = self._own_loop
            if loop is None or loop.is_closed():
                loop = self._own_loop = asyncio.new_event_loop()
                threading.Thread(target=_serve, args=(loop,), name="ownstate-listener",
                                 daemon=True).start()
        try:
            return asyncio.run_coroutine_threadsafe(self.ensure(timeout), loop).result()
        except RuntimeError:  # closed meanwhile: the waiter polls
            return False

    async def ensure(self, timeout: float = 2.0) -> bool:
        """Start the listener on this event loop unless it runs; True once it listens (a
        listener on another loop, or one that fails to start, leaves waiters polling)."""
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and task.done():
            task = self._task = None
        if task is None:
            ready = self._ready = asyncio.Event()

            async def run() -> None:
                try:
                    await self._listen(ready.set, self._signal.fire)
                except Exception:
                    pass
                finally:
                    ready.set()

            task = self._task = loop.create_task(run())
        if task.get_loop() is not loop or self._ready is None:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        return self._ready.is_set() and not task.done()

    async def close(self) -> None:
        task, self._task = self._task, None
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # closed by a caller driven inline
            running = None
        if task is not None and not task.done():
            if task.get_loop() is running:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            else:
                task.get_loop().call_soon_threadsafe(task.cancel)
        with self._own_lock:
            loop, self._own_loop = self._own_loop, None
        if loop is not None:
            # the task's cancellation runs first: both were queued on the loop in order
            loop.call_soon_threadsafe(loop.stop)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """Run ``loop`` until it is stopped, then end what it still runs, and close it."""

    async def ended(tasks: set[asyncio.Task[Any]]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        loop.run_forever()
        loop.run_until_complete(ended(asyncio.all_tasks(loop)))
    finally:
        loop.close()


async def wait_until_decided(signal: LocalSignal, check: Callable[[], Awaitable[Run | None]],
                             timeout: float, *, max_pause: float,
                             listener: Listener | None = None) -> Run | None:
    """What ``check`` finds once it finds something, or None after ``timeout`` seconds.

    ``max_pause`` bounds the sleep between two checks; a decision announced through
    ``signal`` ends the sleep at once.
    """
    deadline = time.monotonic() + timeout
    with signal.subscribe() as subscription:
        if listener is not None:
            if subscription.loop is not None:
                await listener.ensure()
            else:
                listener.ensure_elsewhere()
        pause = _FIRST_PAUSE
        while True:
            found = await check()
            if found is not None:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            await subscription.wait(min(remaining, pause))
            pause = min(pause * _GROWTH, max_pause)
