"""Runs, leases, the effects ledger and human decisions: the async public API
(``client.runs``).

It may touch the backend's run operations through its scope and the session handle's ids.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from .. import _ids
from .. import limits as _validate
from .._tokens import decode_token, encode_token
from ..errors import InvalidInput, LimitExceeded
from ..limits import CONTROL_RE, FRAMEWORK_RE, MAX_NAME_CHARS
from ..model import (
    ACTIVE_RUN_STATUSES,
    CLOSED_RUN_STATUSES,
    DECISION_OUTCOMES,
    JSON,
    RUN_STATUSES,
    Decision,
    Effect,
    Lease,
    Page,
    Run,
)
from ._paging import AsyncPager
from ._scope import Scope
from .session import AsyncSession

__all__ = ["MAX_DECISION_WAIT_SECONDS", "MAX_LEASE_TTL_SECONDS", "AsyncRuns"]

#: The longest lease one claim or heartbeat may take; hold a run longer by heartbeating.
MAX_LEASE_TTL_SECONDS = 24 * 60 * 60
#: The longest one ``wait_for_decision`` may wait; wait longer by calling it again.
MAX_DECISION_WAIT_SECONDS = 24 * 60 * 60
#: The longest comment a decision may carry, in characters.
_MAX_COMMENT_CHARS = 4096
#: How many backend slices one filtered listing reads while passing over the runs of
#: stores outside ``stores``; it then answers with fewer runs and a cursor to go on from.
_MAX_SCAN_ROUNDS = 16
#: How far ``outstanding(stores=...)`` widens its search (a multiple of ``limit``).
_MAX_OUTSTANDING_WIDENING = 64



def _text(value: object, field: str) -> str:
    """A required, printable string of 1-256 chars (owners, thread keys, tool call ids)."""
    if (not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS
            or CONTROL_RE.search(value)):
        raise InvalidInput(f"{field} must be 1-{MAX_NAME_CHARS} printable chars", field=field)
    return value


def _run_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput("run_id must be a non-empty string", field="run_id")
    return value


def _framework(value: object) -> str:
    if not isinstance(value, str) or not FRAMEWORK_RE.fullmatch(value):
        raise InvalidInput(f"framework {value!r} must be 1-64 chars of [a-z0-9_.-]",
                           field="framework")
    return value


def _ttl(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not 0 < value <= MAX_LEASE_TTL_SECONDS):
        raise InvalidInput(f"ttl must be a number of seconds in (0, {MAX_LEASE_TTL_SECONDS}]",
                           field="ttl")
    return float(value)


def run_opening(run_id: str | None, thread_key: object, owner: object, framework: object,
                ttl: object) -> tuple[str, str | None, str | None, str, float]:
    """The checked run id (made up when ``None``), thread key, owner, framework and ttl of
    a run being opened."""
    chosen = (_validate.session_id(run_id, field="run_id") if run_id is not None
              else _ids.new_id("run"))
    key = _text(thread_key, "thread_key") if thread_key is not None else None
    holder = _text(owner, "owner") if owner is not None else None
    return chosen, key, holder, _framework(framework), _ttl(ttl)


def check_fencing_token(value: object, *, required: bool = False) -> int | None:
    if value is None and not required:
        return None
    return _validate.int64(value, field="fencing_token", minimum=0)


def _store_set(stores: object) -> frozenset[str]:
    if isinstance(stores, str) or not isinstance(stores, Collection) or not all(
            isinstance(name, str) for name in stores):
        raise InvalidInput("stores must be a collection of store names", field="stores")
    return frozenset(stores)


def _status(value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(f"status must be one of {', '.join(allowed)}", field="status")
    return value


def _timeout(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not 0 <= value <= MAX_DECISION_WAIT_SECONDS):
        raise InvalidInput(f"timeout must be a number of seconds in [0, "
                           f"{MAX_DECISION_WAIT_SECONDS}]", field="timeout")
    return float(value)


_CURSOR_RE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)/(-?\d{1,19})")


def _awaiting_cursor(value: object) -> list[Any]:
    found = _CURSOR_RE.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        raise InvalidInput("after must be a cursor from this listing", field="after")
    return [found.group(1), _validate.int64(int(found.group(2)), field="after")]


class AsyncRuns:
    """The shadow records of framework runs, their leases and effects: ``client.runs``.

    A run belongs to a session; a session has at most one active (``running`` or
    ``awaiting_human``) run. Whoever drives a run holds its lease and writes with the
    lease's fencing token; a write with a token that is no longer current is refused, so a
    worker that lost its lease can never overwrite the one that took over.
    """

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    def _encode(self, value: object, field: str) -> str:
        text = _validate.encode_json(value, field=field)
        size = _validate.utf8_size(text, field=field)
        limit = self._scope.limits.max_item_bytes
        if size > limit:
            raise LimitExceeded.too_big(field, size, limit, field=field)
        return text

    async def open_run(
        self,
        session: AsyncSession,
        framework: str,
        thread_key: str | None = None,
        *,
        run_id: str | None = None,
        owner: str | None = None,
        ttl: float = 30.0,
    ) -> Run:
        """Start a run of ``framework`` (1-64 chars of ``[a-z0-9_.-]``) in ``session``, in
        status ``running``.

        ``thread_key`` is the framework's own resume handle. ``run_id`` is generated
        (``run_...``) unless given. With ``owner`` the caller also takes the lease for
        ``ttl`` seconds (fencing token 1); without it the run is unleased (token 0) until
        someone calls :meth:`resume`.

        Raises :class:`~ownstate.errors.ActiveRunExists` (carrying the active ``run_id``)
        while the session has a running or awaiting run,
        :class:`~ownstate.errors.AlreadyExists` for a taken ``run_id``,
        :class:`~ownstate.errors.SessionNotFound`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        if not isinstance(session, AsyncSession):
            raise InvalidInput("session must be a Session handle (store.get(...))",
                               field="session")
        chosen, key, holder, kind, seconds = run_opening(run_id, thread_key, owner,
                                                         framework, ttl)
        return await s.backend.open_run(
            s.tenant, session.store, session.session_id, chosen, kind, key, holder, seconds,
            _ids.now())

    async def get(self, run_id: str) -> Run:
        """The run with this id. Raises :class:`~ownstate.errors.RunNotFound`."""
        s = self._scope
        return await s.backend.get_run(s.tenant, _run_id(run_id))

    async def mark_awaiting(
        self,
        run_id: str,
        awaiting: Mapping[str, JSON],
        *,
        requested_by: str | None = None,
        fencing_token: int | None = None,
    ) -> Run:
        """Pause the run for a human: status ``awaiting_human``, with what it awaits.

        ``awaiting`` is the caller's description (``kind``, ``tool``, ``payload``, ...);
        ownstate stores it with ``requested_at`` (now) and ``requested_by`` (the argument,
        else ``awaiting["requested_by"]``). The lease is released, since nobody drives a
        paused run: whichever replica handles the human's answer claims it with
        :meth:`resume`. The fencing token stays, so the pausing worker's token turns stale
        as soon as another claims the run. Marking a run that already awaits replaces the
        description and its ``requested_at``.

        Raises :class:`~ownstate.errors.StaleLease` when ``fencing_token`` is given and not
        current, :class:`~ownstate.errors.RunClosed`, :class:`~ownstate.errors.RunNotFound`,
        :class:`~ownstate.errors.InvalidInput` (not a JSON object),
        :class:`~ownstate.errors.LimitExceeded` (larger than ``Limits.max_item_bytes``).
        """
        s = self._scope
        rid = _run_id(run_id)
        if not isinstance(awaiting, Mapping) or not all(isinstance(k, str) for k in awaiting):
            raise InvalidInput("awaiting must be a JSON object (a dict with string keys)",
                               field="awaiting")
        by = requested_by if requested_by is not None else awaiting.get("requested_by")
        if by is not None:
            by = _text(by, "requested_by")
        token = check_fencing_token(fencing_token)
        moment = _ids.now()
        described = {**awaiting, "requested_at": _ids.format_time(moment), "requested_by": by}
        return await s.backend.mark_awaiting(s.tenant, rid, self._encode(described, "awaiting"),
                                             token, moment)

    async def resume(self, run_id: str, owner: str, *, ttl: float = 30.0) -> Lease:
        """Claim the run for ``owner`` for ``ttl`` seconds and return the lease.

        The claim succeeds when the run has no lease, its lease has expired, or ``owner``
        already holds it; the run becomes ``running``, ``awaiting`` is cleared and the
        fencing token grows by one. Of many concurrent claimers exactly one wins.

        Raises :class:`~ownstate.errors.LeaseHeld` (carrying the holder ``owner`` and
        ``expires_at``), :class:`~ownstate.errors.RunClosed`,
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        return await s.backend.resume(s.tenant, _run_id(run_id), _text(owner, "owner"),
                                      _ttl(ttl), _ids.now())

    async def heartbeat(self, run_id: str, fencing_token: int, *, ttl: float = 30.0) -> Lease:
        """Extend the lease held with ``fencing_token`` to ``ttl`` seconds from now.

        A lease that has expired can still be extended while nobody has claimed the run.
        Raises :class:`~ownstate.errors.StaleLease` (the token is not current, or the run
        holds no lease), :class:`~ownstate.errors.RunClosed`,
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        token = check_fencing_token(fencing_token, required=True)
        assert token is not None
        return await s.backend.heartbeat(s.tenant, _run_id(run_id), token, _ttl(ttl),
                                         _ids.now())

    async def close_run(
        self,
        run_id: str,
        status: str,
        *,
        usd_cost: float | None = None,
        step_count: int | None = None,
        fencing_token: int | None = None,
    ) -> Run:
        """End the run with ``status`` ``done``, ``failed`` or ``cancelled``; its lease is
        released and ``ended_at`` set.

        ``usd_cost`` (finite, >= 0) is added to the run's total; ``step_count`` (>= 0)
        replaces the stored count. Raises :class:`~ownstate.errors.StaleLease` when
        ``fencing_token`` is given and not current, :class:`~ownstate.errors.RunClosed`
        when it has already ended, :class:`~ownstate.errors.RunNotFound`,
        :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        rid = _run_id(run_id)
        final = _status(status, CLOSED_RUN_STATUSES)
        if usd_cost is not None and (not _validate.finite_number(usd_cost) or usd_cost < 0):
            raise InvalidInput("usd_cost must be a finite number >= 0", field="usd_cost")
        if step_count is not None:
            _validate.int64(step_count, field="step_count", minimum=0)
        token = check_fencing_token(fencing_token)
        cost = float(usd_cost) if usd_cost is not None else None
        return await s.backend.close_run(s.tenant, rid, final, cost, step_count, token,
                                         _ids.now())

    async def outstanding(
        self,
        status: str = "awaiting_human",
        *,
        framework: str | None = None,
        older_than: timedelta | float | None = None,
        entered_before: datetime | None = None,
        stores: Collection[str] | None = None,
        limit: int = 100,
    ) -> list[Run]:
        """Runs in ``status`` (``awaiting_human`` by default, or ``running``) across the
        tenant, the longest-waiting first; an awaiting run a human has already decided
        waits on a worker, not a human, and is left out (:meth:`decided` lists those;
        :meth:`outstanding_page` pages through the inbox).

        ``older_than`` (a timedelta or seconds) keeps only runs that have been in that
        status for longer: marked awaiting (``awaiting["requested_at"]``), or opened or
        resumed, that long ago; ``entered_before`` (an aware datetime, instead) only those
        that entered it before that moment. ``stores`` keeps only the runs of those session
        stores (a principal's view); runs of others are passed over, reading at most
        ``64 * limit`` runs. ``limit`` is 1 to ``Limits.max_page_size``.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        wanted = _status(status, ACTIVE_RUN_STATUSES)
        kind = _framework(framework) if framework is not None else None
        if isinstance(limit, bool) or not isinstance(limit, int) or not (
                1 <= limit <= s.limits.max_page_size):
            raise InvalidInput(f"limit must be an integer from 1 to {s.limits.max_page_size}",
                               field="limit")
        cutoff = None
        if older_than is not None:
            if isinstance(older_than, timedelta):
                seconds = older_than.total_seconds()
            elif _validate.finite_number(older_than):
                seconds = float(older_than)
            else:
                seconds = math.nan
            if not 0 <= seconds <= 1e9:
                raise InvalidInput("older_than must be a timedelta or seconds, >= 0",
                                   field="older_than")
            cutoff = _ids.now() - timedelta(seconds=seconds)
        if entered_before is not None:
            if older_than is not None:
                raise InvalidInput("give older_than or entered_before, not both",
                                   field="older_than")
            if not isinstance(entered_before, datetime) or entered_before.tzinfo is None:
                raise InvalidInput("entered_before must be an aware datetime",
                                   field="entered_before")
            cutoff = entered_before
        if stores is None:
            return await s.backend.outstanding(s.tenant, wanted, kind, cutoff, limit)
        visible = _store_set(stores)
        if not visible:
            return []
        # Others' runs are skipped, so ask for more until enough are left (or none remain).
        asked = limit
        while True:
            found = await s.backend.outstanding(s.tenant, wanted, kind, cutoff, asked)
            kept = [r for r in found if r.store in visible]
            if (len(kept) >= limit or len(found) < asked
                    or asked >= limit * _MAX_OUTSTANDING_WIDENING):
                return kept[:limit]
            asked *= 4

    async def list_after(
        self,
        *,
        store: str | None = None,
        session: AsyncSession | None = None,
        stores: Collection[str] | None = None,
        status: str | None = None,
        framework: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> tuple[list[Run], int | None]:
        """Up to ``limit`` runs, newest first, after the cursor ``after``, and the cursor of
        the last run read when more remain (``None`` on the last): the keyset listing
        behind :meth:`list_page`, filtered by one session store (``store``), a
        ``session``, status and framework. ``stores`` keeps only the runs of those session
        stores (a principal's view): runs of others are passed over, reading at most 16
        slices, so a slice may hold fewer runs while the cursor still leads on. ``limit``
        is as in :meth:`AsyncSession.list_items_after`.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.LimitExceeded`.
        """
        s = self._scope
        if session is not None and not isinstance(session, AsyncSession):
            raise InvalidInput("session must be a Session handle", field="session")
        if store is not None and session is not None and store != session.store:
            raise InvalidInput("store and session name different stores", field="store")
        where = session.store if session is not None else (
            _validate.store_name(store) if store is not None else None)
        session_id = session.session_id if session is not None else None
        wanted = _status(status, RUN_STATUSES) if status is not None else None
        kind = _framework(framework) if framework is not None else None
        size = s.limits.keyset_size(limit)
        cursor = ([_validate.int64(after, field="after")] if after is not None else None)
        visible = _store_set(stores) if stores is not None else None

        async def fetch(count: int, start: list[Any] | None
                        ) -> tuple[list[Run], list[Any] | None]:
            return await s.backend.list_runs(s.tenant, store=where, session_id=session_id,
                                             status=wanted, framework=kind, limit=count,
                                             after=start)

        if visible is not None and not visible:
            return [], None
        runs, cursor = await fetch(size, cursor)
        if visible is not None:
            # Each round asks for no more runs than are still wanted, so the cursor is
            # always that of the last run read and going on from it skips nothing.
            kept = [r for r in runs if r.store in visible]
            rounds = 1
            while cursor is not None and len(kept) < size and rounds < _MAX_SCAN_ROUNDS:
                runs, cursor = await fetch(size - len(kept), cursor)
                kept.extend(r for r in runs if r.store in visible)
                rounds += 1
            runs = kept
        return runs, (cursor[0] if cursor is not None else None)

    async def decide(
        self,
        run_id: str,
        outcome: str,
        *,
        comment: str | None = None,
        payload: JSON = None,
        decided_by: str | None = None,
    ) -> Run:
        """Record a human's ``outcome`` (``"approve"`` or ``"reject"``) on a run awaiting
        them, exactly once, and return the run with its :attr:`~ownstate.model.Run.decision`.

        ``comment`` (up to 4,096 chars) and ``payload`` (any JSON: edited arguments, an
        answer) travel to the framework that resumes the run. ``decided_by`` names who
        decided (over HTTP the server records the API key's principal instead); the time
        is now. The run stays ``awaiting_human`` (:meth:`decided` lists it) until a worker
        claims it with :meth:`resume`; the decision stays on the run for audit. Of
        concurrent deciders exactly one wins; the others change nothing.

        Raises :class:`~ownstate.errors.AlreadyDecided` (carrying the standing
        ``outcome``), :class:`~ownstate.errors.NotAwaiting` (the run runs or has ended),
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.LimitExceeded`.
        """
        s = self._scope
        rid = _run_id(run_id)
        if not isinstance(outcome, str) or outcome not in DECISION_OUTCOMES:
            raise InvalidInput(f"outcome must be one of {', '.join(DECISION_OUTCOMES)}",
                               field="outcome")
        if comment is not None and (not isinstance(comment, str)
                                    or len(comment) > _MAX_COMMENT_CHARS):
            raise InvalidInput(f"comment must be text of at most {_MAX_COMMENT_CHARS} chars",
                               field="comment")
        if comment is not None:
            _validate.utf8_size(comment, field="comment")
        by = _text(decided_by, "decided_by") if decided_by is not None else None
        # stored as JSON spells it: a tuple comes back a list, as from every backend
        stored = json.loads(self._encode(payload, "payload"))
        decision = Decision(outcome=outcome, decided_by=by, decided_at=_ids.now(),
                            comment=comment, payload=stored)
        return await s.backend.decide(s.tenant, rid, decision)

    async def outstanding_page(
        self,
        *,
        framework: str | None = None,
        stores: Collection[str] | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> Page[Run]:
        """One page of the runs awaiting a human who has not decided yet (the inbox),
        oldest request first; ``stores`` keeps only the runs of those session stores.

        Raises :class:`~ownstate.errors.InvalidInput` (bad filter, malformed or foreign
        page token), :class:`~ownstate.errors.LimitExceeded` (page_size out of range).
        """
        return await self._awaiting_page(False, framework, stores, page_size, page_token)

    async def decided(
        self,
        *,
        framework: str | None = None,
        stores: Collection[str] | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> Page[Run]:
        """One page of the runs a worker should resume: decided by a human and not yet
        claimed (:meth:`resume`), oldest request first, of ``framework`` and ``stores``.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.LimitExceeded`.
        """
        return await self._awaiting_page(True, framework, stores, page_size, page_token)

    async def awaiting_after(
        self,
        *,
        decided: bool = False,
        framework: str | None = None,
        stores: Collection[str] | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[Run], str | None]:
        """Up to ``limit`` runs awaiting a human, undecided (the inbox) or ``decided``,
        oldest request first, after the cursor ``after``, and the cursor of the last run
        read when more remain: the keyset listing behind :meth:`outstanding_page` and
        :meth:`decided`. ``limit`` is as in :meth:`list_after`.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.LimitExceeded`.
        """
        s = self._scope
        kind = _framework(framework) if framework is not None else None
        visible = _store_set(stores) if stores is not None else None
        size = s.limits.keyset_size(limit)
        start = _awaiting_cursor(after) if after is not None else None
        if visible is not None and not visible:
            return [], None
        runs, cursor = await s.backend.list_awaiting(
            s.tenant, decided=bool(decided), framework=kind, stores=visible, limit=size,
            after=start)
        return runs, (f"{cursor[0]}/{cursor[1]}" if cursor is not None else None)

    async def _awaiting_page(self, decided: bool, framework: str | None,
                             stores: Collection[str] | None, page_size: int | None,
                             page_token: str | None) -> Page[Run]:
        s = self._scope
        kind = _framework(framework) if framework is not None else None
        visible = _store_set(stores) if stores is not None else None
        size = s.limits.page_size(page_size)
        scope = "\x00".join(["awaiting", s.tenant, "decided" if decided else "open",
                             kind or "", *sorted(visible or ())])
        after = None
        if page_token is not None:
            after = decode_token(page_token, scope)
            if (len(after) != 2 or not isinstance(after[0], str)
                    or isinstance(after[1], bool) or not isinstance(after[1], int)):
                raise InvalidInput("page_token is malformed", field="page_token")
        if visible is not None and not visible:
            return Page([], None)
        runs, cursor = await s.backend.list_awaiting(
            s.tenant, decided=decided, framework=kind, stores=visible, limit=size,
            after=after)
        return Page(runs, encode_token(scope, cursor) if cursor is not None else None)

    async def wait_for_decision(
        self,
        run_id: str | None = None,
        *,
        framework: str | None = None,
        stores: Collection[str] | None = None,
        timeout: float = 30.0,
    ) -> Run | None:
        """Wait until a human decides, without polling in a tight loop.

        With ``run_id``: that run, as soon as it no longer awaits an undecided request
        (at once when it already has a decision, runs or has ended). Without: the oldest
        run that :meth:`decided` lists, of ``framework`` and ``stores``. ``None`` once
        ``timeout`` seconds (0 to a day) pass with nothing to return.

        PostgreSQL and Redis announce each decision to every waiting process; SQLite and
        memory wake the waiters of the deciding process at once and others within a
        second; over HTTP the server holds the request open (a long poll).

        Raises :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        rid = _run_id(run_id) if run_id is not None else None
        if rid is not None and (framework is not None or stores is not None):
            raise InvalidInput("give run_id, or framework and stores, not both",
                               field="run_id")
        kind = _framework(framework) if framework is not None else None
        visible = _store_set(stores) if stores is not None else None
        seconds = _timeout(timeout)
        return await s.backend.wait_for_decision(s.tenant, rid, kind, visible, seconds)

    async def record_effect(
        self,
        run_id: str,
        tool_call_id: str,
        result: JSON,
        *,
        fencing_token: int | None = None,
    ) -> Effect:
        """Record the result of a side-effecting tool call, once.

        The first record for (run, ``tool_call_id``) wins: a later call stores nothing and
        returns the stored effect with ``recorded=False``, so a resumed run can tell that
        the tool already ran and reuse its result. ``result`` is any JSON value.

        Raises :class:`~ownstate.errors.StaleLease` when ``fencing_token`` is given and not
        current, :class:`~ownstate.errors.RunClosed` (a new record on an ended run),
        :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.InvalidInput` (not
        JSON), :class:`~ownstate.errors.LimitExceeded` (larger than
        ``Limits.max_item_bytes``).
        """
        s = self._scope
        rid = _run_id(run_id)
        call = _text(tool_call_id, "tool_call_id")
        token = check_fencing_token(fencing_token)
        text = self._encode(result, "result")
        return await s.backend.record_effect(s.tenant, rid, call, text, token, _ids.now())

    async def get_effect(self, run_id: str, tool_call_id: str) -> Effect | None:
        """The recorded effect of a tool call, or ``None`` if none was recorded.

        Raises :class:`~ownstate.errors.RunNotFound`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        return await s.backend.get_effect(s.tenant, _run_id(run_id),
                                          _text(tool_call_id, "tool_call_id"))

    async def list_page(
        self,
        *,
        session: AsyncSession | None = None,
        status: str | None = None,
        framework: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> Page[Run]:
        """One page of the tenant's runs, newest first, filtered by session, status and
        framework (all given must match).

        Raises :class:`~ownstate.errors.InvalidInput` (bad filter, malformed or foreign
        page token), :class:`~ownstate.errors.LimitExceeded` (page_size out of range).
        """
        s = self._scope
        if session is not None and not isinstance(session, AsyncSession):
            raise InvalidInput("session must be a Session handle", field="session")
        store = session.store if session is not None else None
        session_id = session.session_id if session is not None else None
        wanted = _status(status, RUN_STATUSES) if status is not None else None
        kind = _framework(framework) if framework is not None else None
        size = s.limits.page_size(page_size)
        scope = "\x00".join(["runs", s.tenant, store or "", session_id or "", wanted or "",
                             kind or ""])
        after = None
        if page_token is not None:
            after = decode_token(page_token, scope)
            if len(after) != 1 or isinstance(after[0], bool) or not isinstance(after[0], int):
                raise InvalidInput("page_token is malformed", field="page_token")
        runs, cursor = await s.backend.list_runs(
            s.tenant, store=store, session_id=session_id, status=wanted, framework=kind,
            limit=size, after=after)
        return Page(runs, encode_token(scope, cursor) if cursor is not None else None)

    def list(
        self,
        *,
        session: AsyncSession | None = None,
        status: str | None = None,
        framework: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> AsyncPager[Run]:
        """Every matching run from ``page_token`` on, newest first, fetched a page at a time.

        Raises as :meth:`list_page`, when iteration starts.
        """
        return AsyncPager(
            lambda token: self.list_page(session=session, status=status, framework=framework,
                                         page_size=page_size, page_token=token),
            page_token,
        )
