"""The threads an async client's SQLite calls run on, and how a call is handed to them.

An async client must not block its event loop on disk, so each call runs on one of a few
threads (:class:`Workers`). ``loop.run_in_executor`` over a ``ThreadPoolExecutor`` would
do, but it costs about twice the CPU a call: it makes a ``concurrent.futures.Future``
(with its condition and lock), chains it to an asyncio future by callbacks on both sides
and counts idle threads with a semaphore. Here a call is a job on a queue, and the thread
sets its result on the caller's asyncio future through ``loop.call_soon_threadsafe``:
about 60 against 110 µs of CPU for a call that does nothing (2,000 calls, median of
seven), and on a bulk append of 20,000 items in batches of 100 that is a few percent.

What the executor promised still holds:

- A call whose awaiting task is cancelled before a thread takes it never runs. One that a
  thread has taken runs to its end (a write commits or rolls back whole); the task is
  cancelled at once and the result is dropped.
- At most ``size`` threads, each started when a call finds none idle; calls queue in order.
- :meth:`Workers.close` lets the calls already queued run, then joins the threads. So does
  the interpreter's exit, for workers never closed; workers dropped unclosed stop their
  threads once the queue is empty.
- The calls do not see the caller's context variables (``run_in_executor`` did not pass
  them either).

The thread reads the asyncio future's ``cancelled()`` (a read of its state under the
interpreter lock); everything that changes the future runs on its loop.

It may touch asyncio, threading and the standard library only.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Workers"]

T = TypeVar("T")
A = TypeVar("A")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[Any], Any], Any]


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the future's loop: its outcome, unless its task was cancelled meanwhile."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _work(jobs: queue.SimpleQueue[_Job | None], idle: list[None]) -> None:
    """A thread's life: run jobs until a ``None`` comes. It holds the queue, never the
    :class:`Workers`, so that dropping those stops it (see ``_stop``)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        loop, future, fn, arg = job
        del job
        outcome: tuple[Any, BaseException | None] | None = None
        if not future.cancelled():
            try:
                outcome = fn(arg), None
            except BaseException as exc:  # the caller's to see, as the executor did
                outcome = None, exc
        # idle before the caller hears of it, so that its next call finds this thread
        # rather than starting another: calls in turn stay on one thread and its caches.
        # list.append and list.pop are atomic, so the count needs no lock.
        idle.append(None)
        if outcome is not None:
            # a closed loop raises RuntimeError: no one is left to take the result
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_deliver, future, *outcome)
        del loop, future, fn, arg, outcome  # an idle thread keeps nothing alive


def _stop(jobs: queue.SimpleQueue[_Job | None], threads: list[threading.Thread],
          join: bool) -> None:
    """One ``None`` a thread, after the jobs already queued; then wait for them unless
    called from one of them."""
    for _ in threads:
        jobs.put(None)
    if join:
        me = threading.current_thread()
        for thread in threads:
            if thread is not me:
                thread.join()
    threads.clear()


#: workers not yet closed, closed (and waited for) at the interpreter's exit
_OPEN: weakref.WeakSet[Workers] = weakref.WeakSet()


@atexit.register
def _close_open() -> None:
    for workers in list(_OPEN):
        workers.close()


class Workers:
    """Up to ``size`` threads named ``{name}_0``, ``{name}_1``, ... that run calls handed
    to them by :meth:`run`."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle: list[None] = []  # one entry per thread waiting for a job
        self._threads: list[threading.Thread] = []
        self._starting = threading.Lock()
        self._closed = False
        weakref.finalize(self, _stop, self._jobs, self._threads, False).atexit = False
        _OPEN.add(self)

    async def run(self, fn: Callable[[A], T], arg: A) -> T:
        """``fn(arg)`` on one of the threads; its result, or its error raised here.

        Raises ``RuntimeError`` once closed.
        """
        if self._closed:
            raise RuntimeError("these SQLite worker threads are closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        try:
            self._idle.pop()
        except IndexError:
            self._start()
        self._jobs.put((loop, future, fn, arg))
        return await future

    def _start(self) -> None:
        with self._starting:
            if len(self._threads) >= self._size:
                return  # every thread is busy: the job waits in the queue
            thread = threading.Thread(target=_work, args=(self._jobs, self._idle),
                                      name=f"{self._name}_{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Let the calls already queued run, then stop and join the threads."""
        self._closed = True
        _OPEN.discard(self)
        _stop(self._jobs, self._threads, True)
