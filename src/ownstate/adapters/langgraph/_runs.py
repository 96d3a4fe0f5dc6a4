"""The ownstate runs of LangGraph threads: the thread's first run that holds its checkpoints,
each invocation's run opened, claimed on resume, leased, paused for an interrupt and closed.
It may touch runs (and read sessions' runs) through the saver's async client only, with the
adapters' kernel, :mod:`._threads`, ids, the error tree, the limits and the model, and
LangGraph's checkpoint types."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointMetadata,
)
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME

from ..._ids import now
from ...api import AsyncClient
from ...errors import (
    ActiveRunExists,
    AlreadyExists,
    Conflict,
    LeaseHeld,
    RunClosed,
    RunNotFound,
)
from ...limits import SESSION_ID_RE
from ...model import (
    ACTIVE_RUN_STATUSES,
    Run,
)
from .._kernel import close_run
from ._threads import (
    _HOLDER,
    FRAMEWORK,
    _json_value,
    _Thread,
    _wait,
)


@dataclass(frozen=True)
class Opening:
    """A run :meth:`ThreadRuns.begin` left to be opened with the checkpoint it began for:
    the run id wanted (``None``: made up)."""

    run_id: str | None


def awaiting_interrupt(thread_id: str, writes: Sequence[tuple[str, Any]],
                       checkpoint_id: str | None) -> dict[str, Any]:
    """What a run paused by ``interrupt()`` awaits: the interrupts among a task's writes."""
    interrupts = []
    for channel, value in writes:
        if channel != INTERRUPT:
            continue
        for one in value if isinstance(value, (list, tuple)) else [value]:
            interrupts.append({"id": getattr(one, "id", None),
                               "value": _json_value(getattr(one, "value", one))})
    return {"kind": "interrupt", "interrupts": interrupts, "thread_id": thread_id,
            "checkpoint_id": checkpoint_id}


class ThreadRuns:
    """Opens, claims, leases and closes the ownstate runs of the threads of one saver.

    The invocation's run is leased to ``owner`` while it runs, and every run write carries
    the lease's fencing token: a replica that lost the run (another one resumed it) learns
    it at its next write (StaleLease) instead of overwriting."""

    def __init__(self, client: AsyncClient, owner: str, lease_ttl: float) -> None:
        self.client = client
        self._owner = owner
        self._lease_ttl = lease_ttl
        self._claims_lock = threading.Lock()
        # an invocation's run is opened in the write of its first checkpoint, where it can
        self._opens_with_checkpoints = client.checkpoints.opens_runs

    @property
    def owner(self) -> str:
        return self._owner

    async def has_holder(self, thread: _Thread) -> bool:
        """Whether the thread's first run, which holds its checkpoints, exists."""
        if not thread.held:
            try:
                await self.client.runs.get(thread.scope.run_id)
            except RunNotFound:
                return False
            thread.held = True
        return True

    async def _once(self, thread: _Thread, key: str,
                    work: Callable[[], Awaitable[None]]) -> bool:
        """Run ``work`` once among this saver's concurrent calls for one thread: the first
        call for ``key`` runs it, the others wait for its outcome (its error too). Returns
        whether this call ran it. A failed run is forgotten, so a later call tries again;
        :meth:`_release` forgets a run's claim once the run is paused or closed."""
        with self._claims_lock:
            pending = thread.claims.get(key)
            mine = pending is None
            if pending is None:
                pending = thread.claims[key] = concurrent.futures.Future()
        if not mine:
            await _wait(pending)
            return False
        try:
            await work()
        except BaseException as exc:
            with self._claims_lock:
                thread.claims.pop(key, None)
            pending.set_exception(exc)
            raise
        pending.set_result(None)
        return True

    async def _make_holder(self, thread: _Thread, *, invocation: bool) -> bool:
        """Make sure the thread's first run exists; returns whether this call opened it,
        as the invocation's run when ``invocation`` (else closed at once: it only holds
        checkpoints, as for ``update_state`` on a new thread or a subgraph's own).

        A thread's root graph and its subgraphs store checkpoints concurrently, so the
        first of them makes the run and the others wait for it."""
        if thread.held:
            return False
        opened = False

        async def make() -> None:
            nonlocal opened
            if not await self.has_holder(thread):
                if invocation:
                    await self._open(thread, thread.scope.run_id)
                    opened = True
                else:
                    try:
                        run = await self.client.runs.open_run(
                            thread.session, FRAMEWORK, thread.thread_id[:256],
                            run_id=thread.scope.run_id)
                    except AlreadyExists:
                        pass  # another replica made it meanwhile
                    else:
                        await self._finish(run.run_id, "done")
            thread.held = True

        await self._once(thread, _HOLDER, make)
        return opened

    async def ensure_holder(self, thread: _Thread) -> None:
        """Open the thread's first run, which holds its checkpoints, if it has none."""
        await self._make_holder(thread, invocation=False)

    # -- runs -------------------------------------------------------------------------------
    #
    # The invocation's run is leased to this saver's owner while it runs, and every run
    # write carries the lease's fencing token: a replica that lost the run (another one
    # resumed it) learns it at its next write (StaleLease) instead of overwriting.

    def _held(self, thread: _Thread, run_id: str, token: int) -> None:
        if thread.active == run_id and thread.token is not None and token < thread.token:
            return  # two calls of this saver claimed it at once: the later claim stands
        thread.active = run_id
        thread.token = token
        thread.renew_at = time.monotonic() + self._lease_ttl / 2

    async def fenced(self, thread: _Thread, write: Callable[..., Awaitable[Any]]) -> None:
        """``write(**fence)`` under this saver's lease (see :meth:`_fence`). LangGraph
        stores a step's writes in the background, so they may arrive after this saver
        closed the run with the next checkpoint: a run it closed itself with that very
        token was not taken over, and its late writes are stored unfenced."""
        fence = self._fence(thread)
        try:
            await write(**fence)
        except RunClosed:
            if not fence or thread.ended != (fence["fencing_run_id"], fence["fencing_token"]):
                raise
            await write()

    async def ending(self, thread: _Thread, write: Callable[..., Awaitable[Any]],
                     status: str, **extra: Any) -> bool:
        """``write(end_run=status, **extra, **fence)``: a checkpoint write that also ends
        the run this saver drives, in its transaction. False, and nothing written, when
        no run is driven here; else the run is released and remembered as closed with its
        token, as :meth:`close` does (first, so that a late write that finds it closed is
        stored unfenced, as after :meth:`close`; forgotten again if the write fails)."""
        fence = self._fence(thread)
        if not fence:
            return False
        before = thread.ended
        thread.ended = (fence["fencing_run_id"], fence["fencing_token"])
        try:
            await write(end_run=status, **extra, **fence)
        except BaseException:
            thread.ended = before
            raise
        self._release(thread)
        return True

    @staticmethod
    def _fence(thread: _Thread) -> dict[str, Any]:
        """The lease this saver drives the thread's run with, for its checkpoint writes
        (kept on the thread's first run, fenced by the invocation's): a replica that lost
        the run is refused (StaleLease, RunClosed) instead of overwriting its successor's
        checkpoints. Nothing while no run is driven here (a resume's writes come before
        its claim; pruning and copying are housekeeping)."""
        if thread.active is None or thread.token is None:
            return {}
        return {"fencing_token": thread.token, "fencing_run_id": thread.active}

    async def _open(self, thread: _Thread, run_id: str | None) -> None:
        runs = self.client.runs
        for _ in range(3):
            try:
                run = await runs.open_run(thread.session, FRAMEWORK, thread.thread_id[:256],
                                          run_id=run_id, owner=self._owner,
                                          ttl=self._lease_ttl)
            except ActiveRunExists as exc:
                active = await runs.get(str(exc.run_id))
                if active.framework != FRAMEWORK:
                    raise Conflict(
                        f"thread {thread.thread_id!r} has an active {active.framework} run "
                        f"({active.run_id}); finish or cancel it before LangGraph continues",
                        run_id=active.run_id) from exc
                if active.status == "running" and active.lease_owner not in (
                        None, self._owner) and active.lease_expires_at is not None and (
                        active.lease_expires_at > now()):
                    raise LeaseHeld(
                        f"thread {thread.thread_id!r} is running on {active.lease_owner!r}",
                        run_id=active.run_id, owner=active.lease_owner,
                        expires_at=active.lease_expires_at) from exc
                # A new input supersedes what the thread was doing or waiting for.
                await self._finish(active.run_id, "cancelled" if active.status ==
                                   "awaiting_human" else "done")
                continue
            except AlreadyExists:
                run_id = None  # that id is taken (by another thread's run): make one up
                continue
            self._held(thread, run.run_id, run.fencing_token)
            return
        raise Conflict(f"could not open a run for thread {thread.thread_id!r}")

    async def open_with(self, thread: _Thread, opening: Opening,
                        write: Callable[..., Awaitable[tuple[Run, Any]]]) -> bool:
        """Open the run :meth:`begin` left to a root checkpoint (``opening``) with it, in
        one write: ``write(**run)`` opens the run leased to this saver and stores the
        checkpoint fenced by it. When the session has an active run or the id is taken,
        nothing is written and the run is opened as :meth:`_open` decides (superseding,
        refusing or taking another id); then False, and the checkpoint is still to put."""
        try:
            run, _ = await write(framework=FRAMEWORK, thread_key=thread.thread_id[:256],
                                 run_id=opening.run_id, owner=self._owner,
                                 ttl=self._lease_ttl)
        except (ActiveRunExists, AlreadyExists):
            await self._open(thread, opening.run_id)
            return False
        self._held(thread, run.run_id, run.fencing_token)
        return True

    async def open_apart(self, thread: _Thread, opening: Opening) -> None:
        """Open the run :meth:`begin` left to a root checkpoint in a call of its own
        (that checkpoint is written with more than :meth:`open_with` can carry)."""
        await self._open(thread, opening.run_id)

    async def _claim(self, thread: _Thread, run_id: str) -> None:
        """Take the run's lease (raises LeaseHeld while another replica holds it). A run
        this saver already drives, or one that has ended meanwhile, is left as it is.

        LangGraph stores a resume's writes and its next checkpoint concurrently, and both
        want the run: the first call claims it and any other waits for that claim, so the
        saver never holds two fencing tokens for one run."""
        if thread.active == run_id:
            return

        async def claim() -> None:
            try:
                lease = await self.client.runs.resume(run_id, self._owner,
                                                      ttl=self._lease_ttl)
            except RunClosed:
                return
            self._held(thread, run_id, lease.fencing_token)

        await self._once(thread, run_id, claim)

    def _release(self, thread: _Thread) -> tuple[str | None, int | None]:
        """Stop driving the thread's run (paused or closed); returns its id and token."""
        run_id, token = thread.active, thread.token
        thread.active, thread.token = None, None
        if run_id is not None:
            with self._claims_lock:
                thread.claims.pop(run_id, None)
        return run_id, token

    async def _keep(self, thread: _Thread) -> None:
        """Extend the lease of the run being driven once half of it has passed."""
        if thread.active is not None and thread.token and time.monotonic() >= thread.renew_at:
            await self.client.runs.heartbeat(thread.active, thread.token, ttl=self._lease_ttl)
            thread.renew_at = time.monotonic() + self._lease_ttl / 2

    async def _finish(self, run_id: str, status: str, token: int | None = None,
                      **extra: Any) -> None:
        await close_run(self.client, run_id, status, fencing_token=token, **extra)

    async def close(self, thread: _Thread, status: str, **extra: Any) -> None:
        run_id, token = self._release(thread)
        if run_id is not None and token is not None:
            thread.ended = (run_id, token)
        if run_id is not None:
            await self._finish(run_id, status, token, **extra)

    async def _active(self, thread: _Thread) -> Run | None:
        """The thread's active LangGraph run, read from the database.

        One query: a session has at most one active run, and it is its newest, so the
        newest LangGraph run is read and kept if active. (Two queries, one per status,
        could both miss a run that moves from waiting to running between them.)"""
        page = await self.client.runs.list_page(session=thread.session, framework=FRAMEWORK,
                                                page_size=1)
        if page.items and page.items[0].status in ACTIVE_RUN_STATUSES:
            return page.items[0]
        return None

    async def begin(self, thread: _Thread, metadata: CheckpointMetadata,
                     parent_id: str | None) -> Opening | None:
        """Track the run a root checkpoint belongs to, before it is stored. Returns the
        run to open with that checkpoint (:meth:`open_with`) where the backend can open
        runs with checkpoints and a new run is due; else ``None``, any run opened."""
        source = metadata.get("source")
        opening = None
        if source not in ("input", "loop"):
            if thread.active is None:
                await self.ensure_holder(thread)
            return None
        if source == "loop" and thread.active is not None:
            await self._keep(thread)
            return None
        if source == "input" and thread.active is not None:
            await self.close(thread, "done")
        # The thread's first invocation opens the run that holds its checkpoints.
        if not await self._make_holder(thread, invocation=True):
            if source == "loop":
                run = await self._active(thread)
                if run is not None:  # resumed, or continued after a stop: claim it
                    thread.resumed_from = parent_id
                    await self._claim(thread, run.run_id)
                    thread.first_step = None  # begun elsewhere: first step not known
                    return None
            wanted = metadata.get("run_id")
            valid = isinstance(wanted, str) and SESSION_ID_RE.fullmatch(wanted)
            opening = Opening(wanted if valid else None)
            if not self._opens_with_checkpoints:
                await self._open(thread, opening.run_id)
        step = metadata.get("step")
        thread.first_step = (step if source == "input" else step - 1) if isinstance(
            step, int) else None
        return opening if self._opens_with_checkpoints else None

    async def after_writes(self, thread: _Thread, writes: Sequence[tuple[str, Any]],
                            config: RunnableConfig) -> None:
        channels = {channel for channel, _ in writes}
        if INTERRUPT in channels:
            if thread.active is None:
                run = await self._active(thread)
                if run is None:
                    return
                await self._claim(thread, run.run_id)
            configurable = config.get("configurable") or {}
            awaiting = awaiting_interrupt(thread.thread_id, writes,
                                          configurable.get("checkpoint_id"))
            run_id, token = self._release(thread)  # paused: nobody drives it now
            assert run_id is not None
            await self.client.runs.mark_awaiting(run_id, awaiting, requested_by=FRAMEWORK,
                                                 fencing_token=token)
        elif RESUME in channels:
            # The resume's writes may be stored after the graph has gone on (they are
            # written in the background): once this saver has claimed the run for a
            # resume from this checkpoint, a late write must not claim it again.
            resumed = (config.get("configurable") or {}).get("checkpoint_id")
            if thread.resumed_from != resumed or resumed is None:
                thread.resumed_from = resumed
                run = await self._active(thread)
                if run is not None:
                    await self._claim(thread, run.run_id)
        elif ERROR in channels:
            if thread.active is None:
                run = await self._active(thread)
                if run is not None:
                    await self._claim(thread, run.run_id)
            await self.close(thread, "failed")
