"""Distillation: turning a session's items into facts, through a pluggable extractor.

One pass (:func:`distill`, behind ``AsyncMemoryStore.distill``) reads the items of one
session that came after its watermark, asks the extractor for candidate facts, and
remembers the ones that are new. It may touch the public handles only (the memory store, the
session, the runs), with the error tree, the limits and the model; never a backend.

The watermark is a fact in the memory store itself, under the reserved subject
``ownstate:distill`` and the key ``<session store>/<session id>``, with the value ``{"seq":
..., "item_id": ..., "run_id": ...}`` and the last item read as its source. It is written
in the same ``remember_many`` call as the facts of the slice it closes, so the facts of a
slice and the advance of the watermark are stored together or not at all, on every
backend; its history is the log of every pass. A pass is a run of its own
(``framework="ownstate.distill"``) in the session, which also keeps two passes over one
session from running at once.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ActiveRunExists, ExtractorFailed, InvalidInput, OwnstateError
from ..limits import CONTROL_RE, MAX_NAME_CHARS, RESERVED_SUBJECT_PREFIX
from ..model import JSON, Candidate, Distillation, Extractor, Fact, Item, Run
from .runs import AsyncRuns
from .session import AsyncSession

if TYPE_CHECKING:
    from .memory import AsyncMemoryStore

__all__ = ["FRAMEWORK", "OUTCOME", "WATERMARK_SUBJECT", "distill", "watermark_key"]

#: The framework of the runs that record distillations.
FRAMEWORK = "ownstate.distill"
#: The subject under which each session's watermark is remembered.
WATERMARK_SUBJECT = f"{RESERVED_SUBJECT_PREFIX}distill"
#: The ``tool_call_id`` of the effect each distillation run records its outcome under.
OUTCOME = "outcome"
#: How long a pass holds its run's lease between two slices (it renews it per slice).
_LEASE_SECONDS = 600.0
_MAX_MESSAGE_CHARS = 500


def watermark_key(store: str, session_id: str) -> str:
    """The key of a session's watermark fact under :data:`WATERMARK_SUBJECT`."""
    return f"{store}/{session_id}"


def _owner() -> str:
    return f"{FRAMEWORK}@{socket.gethostname()}:{os.getpid()}"[:MAX_NAME_CHARS]


def _valid_key(key: object) -> bool:
    return (isinstance(key, str) and bool(key.strip()) and len(key) <= MAX_NAME_CHARS
            and not CONTROL_RE.search(key))


def _same(a: JSON, b: JSON) -> bool:
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


async def _extract(extractor: Extractor, items: Sequence[Item], subject: str,
                   known: Sequence[Fact]) -> Sequence[Candidate]:
    """The extractor's candidates; a plain method runs in a thread when a loop is running
    (the sync client on memory or SQLite drives coroutines without one)."""
    extract = extractor.extract
    if inspect.iscoroutinefunction(extract):
        result: Any = await extract(items, subject=subject, known=known)
    else:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            result = extract(items, subject=subject, known=known)
        else:
            result = await asyncio.to_thread(extract, items, subject=subject, known=known)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, (str, bytes, Mapping)) or not isinstance(result, Sequence) or not all(
            isinstance(c, Candidate) for c in result):
        raise ExtractorFailed("the extractor must return a list of Candidate",
                              reason="malformed")
    return result


class _Tally:
    def __init__(self) -> None:
        self.unchanged = 0
        self.below_threshold = 0
        self.rejected = 0

    def add(self, other: _Tally) -> None:
        self.unchanged += other.unchanged
        self.below_threshold += other.below_threshold
        self.rejected += other.rejected

    def summary(self) -> dict[str, JSON]:
        return {"unchanged": self.unchanged, "below_threshold": self.below_threshold,
                "rejected": self.rejected}


def _plan(candidates: Sequence[Candidate], items: Sequence[Item], subject: str,
          known: Sequence[Fact], min_confidence: float, store: str,
          tally: _Tally) -> list[dict[str, JSON]]:
    """The facts to remember for one slice: per key, the candidate from the latest item,
    unless it equals the current value."""
    seq_of = {item.item_id: item.seq for item in items}
    chosen: dict[str, tuple[int, str, Candidate]] = {}
    for candidate in candidates:
        confidence = candidate.confidence
        if (candidate.subject != subject or not _valid_key(candidate.key)
                or not isinstance(candidate.item_ids, Sequence)
                or isinstance(candidate.item_ids, str) or not candidate.item_ids
                or not all(isinstance(i, str) and i in seq_of for i in candidate.item_ids)
                or isinstance(confidence, bool) or not isinstance(confidence, (int, float))
                or not math.isfinite(confidence) or not 0 <= confidence <= 1):
            tally.rejected += 1
            continue
        if confidence < min_confidence:
            tally.below_threshold += 1
            continue
        source = max(candidate.item_ids, key=seq_of.__getitem__)
        earlier = chosen.get(candidate.key)
        if earlier is None or seq_of[source] >= earlier[0]:
            chosen[candidate.key] = (seq_of[source], source, candidate)
    current = {fact.key: fact for fact in known}
    specs: list[dict[str, JSON]] = []
    for _seq, source, candidate in sorted(chosen.values(), key=lambda entry: entry[0]):
        fact = current.get(candidate.key)
        if fact is not None and _same(fact.value, candidate.value):
            tally.unchanged += 1
            continue
        specs.append({"subject": subject, "key": candidate.key, "value": candidate.value,
                      "confidence": float(candidate.confidence),
                      "source": (store, items[0].session_id, source),
                      "source_type": "pipeline"})
    return specs


async def _watermark(mem: AsyncMemoryStore, session: AsyncSession) -> int:
    """The seq after which the session's items are new to ``mem``: 0 when it was never
    distilled, or when its history changed below the watermark (popped or cleared, so the
    seq now names another item), in which case every item is read again."""
    key = watermark_key(session.store, session.session_id)
    found = await mem.recall(WATERMARK_SUBJECT, [key])
    if not found or not isinstance(found[0].value, dict):
        return 0
    seq, item_id = found[0].value.get("seq"), found[0].value.get("item_id")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        return 0
    at = await session.list_items_after(order_by="create_time asc", after_seq=seq - 1,
                                        limit=1)
    return seq if at and at[0].seq == seq and at[0].item_id == item_id else 0


async def _open(runs: AsyncRuns, session: AsyncSession, memory_store: str) -> Run:
    """Open the pass's run, first closing a distillation run whose holder let its lease
    lapse (it crashed); any other active run of the session is refused."""
    try:
        return await runs.open_run(session, FRAMEWORK, memory_store, owner=_owner(),
                                   ttl=_LEASE_SECONDS)
    except ActiveRunExists as exc:
        active = await runs.get(str(exc.details.get("run_id")))
        if active.framework != FRAMEWORK or active.lease_expires_at is None:
            raise
        try:
            lease = await runs.resume(active.run_id, _owner(), ttl=_LEASE_SECONDS)
        except OwnstateError:
            raise exc from None
        await runs.record_effect(active.run_id, OUTCOME, {
            "status": "failed", "error": {"code": "abandoned", "message":
                                          "its lease lapsed before it finished"}},
            fencing_token=lease.fencing_token)
        await runs.close_run(active.run_id, "failed", fencing_token=lease.fencing_token)
        return await runs.open_run(session, FRAMEWORK, memory_store, owner=_owner(),
                                   ttl=_LEASE_SECONDS)


async def distill(mem: AsyncMemoryStore, runs: AsyncRuns, session: AsyncSession, *,
                  extractor: Extractor, subject: str | None, min_confidence: float,
                  batch_size: int, max_batch_size: int) -> Distillation:
    """One distillation pass of ``session`` into ``mem``; see ``AsyncMemoryStore.distill``."""
    if not isinstance(session, AsyncSession):
        raise InvalidInput("session must be a Session handle (store.get(...))",
                           field="session")
    if not callable(getattr(extractor, "extract", None)):
        raise InvalidInput("extractor must have an extract(items, subject=, known=) method",
                           field="extractor")
    if (isinstance(min_confidence, bool) or not isinstance(min_confidence, (int, float))
            or not math.isfinite(min_confidence) or not 0 <= min_confidence <= 1):
        raise InvalidInput("min_confidence must be a number from 0 to 1",
                           field="min_confidence")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not (
            1 <= batch_size <= max_batch_size):
        raise InvalidInput(f"batch_size must be an integer from 1 to {max_batch_size}",
                           field="batch_size")
    if subject is None:
        try:
            subject = session.actor_id
        except InvalidInput:  # a handle that has read nothing yet
            subject = (await session.refresh()).actor_id
    elif not _valid_key(subject):
        raise InvalidInput(f"subject must be a non-blank string of at most {MAX_NAME_CHARS} "
                           "printable chars", field="subject")
    start = await _watermark(mem, session)
    peek = await session.list_items_after(order_by="create_time asc", after_seq=start, limit=1)
    if not peek:
        return Distillation(session.store, session.session_id, None, start, start, 0, [], 0,
                            0, 0)
    run = await _open(runs, session, mem.name)
    token = run.fencing_token
    # Read again under the run: a pass that finished meanwhile has moved the watermark.
    start = after = await _watermark(mem, session)
    tally, written, read, slices = _Tally(), [], 0, 0
    try:
        while True:
            items = await session.list_items_after(order_by="create_time asc",
                                                   after_seq=after, limit=batch_size)
            if not items:
                break
            slices += 1
            if slices > 1:
                await runs.heartbeat(run.run_id, token, ttl=_LEASE_SECONDS)
            known = await mem.recall(subject)
            candidates = await _extract(extractor, items, subject, known)
            counted = _Tally()  # counted only once its slice is written
            specs = _plan(candidates, items, subject, known, min_confidence, session.store,
                          counted)
            last = items[-1]
            specs.append({"subject": WATERMARK_SUBJECT,
                          "key": watermark_key(session.store, session.session_id),
                          "value": {"seq": last.seq, "item_id": last.item_id,
                                    "run_id": run.run_id},
                          "source": (session.store, session.session_id, last.item_id),
                          "source_type": "pipeline"})
            written += (await mem.remember_many(specs))[:-1]
            tally.add(counted)
            read += len(items)
            after = last.seq
            if len(items) < batch_size:
                break
    except BaseException as exc:
        status = "failed" if isinstance(exc, Exception) else "cancelled"
        # Only ownstate's own messages are kept: another error's text may quote the items.
        ours = isinstance(exc, OwnstateError)
        code = exc.code if isinstance(exc, OwnstateError) else type(exc).__name__
        message = " ".join(str(exc).split())[:_MAX_MESSAGE_CHARS] if ours else ""
        outcome = {"status": status, "from_seq": start, "to_seq": after, "items": read,
                   "written": len(written), **tally.summary(),
                   "error": {"code": code, "message": message}}
        try:
            await runs.record_effect(run.run_id, OUTCOME, outcome, fencing_token=token)
            await runs.close_run(run.run_id, status, step_count=slices, fencing_token=token)
        except OwnstateError:
            pass  # the pass's own error is the one to report
        if isinstance(exc, OwnstateError):
            exc.details.setdefault("run_id", run.run_id)
        raise
    await runs.record_effect(run.run_id, OUTCOME, {
        "status": "done", "from_seq": start, "to_seq": after, "items": read,
        "written": len(written), **tally.summary()}, fencing_token=token)
    await runs.close_run(run.run_id, "done", step_count=slices, fencing_token=token)
    return Distillation(session.store, session.session_id, run.run_id, start, after, read,
                        written, tally.unchanged, tally.below_threshold, tally.rejected)

