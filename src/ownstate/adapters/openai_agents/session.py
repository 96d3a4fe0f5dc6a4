"""``OwnstateSession``: the OpenAI Agents SDK ``Session`` protocol over one ownstate session,
its human approvals stored as runs and checkpoints (built in :mod:`.approvals`) and the run
hooks that record each ``Runner.run``. Reads and writes through the session's bridge. It may
touch the public API through the adapters' bridge and kernel, this package's
:mod:`._history` and :mod:`.approvals`, the error tree, the limits and the model, and the
SDK's ``Session``, items and hooks (``agents``); never a backend."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from agents import (
    Agent,
    RunHooks,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
)
from agents.exceptions import UserError
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings

from ... import limits as _validate
from ...api import AsyncClient, AsyncSession, Client
from ...errors import (
    CheckpointNotFound,
    InvalidInput,
    LeaseHeld,
    OwnstateError,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StoreNotFound,
)
from ...model import JSON, CheckpointRecord, CheckpointScope, Item, Run
from .._bridge import Bridge, BridgedAdapter
from .._kernel import (
    close_run,
    ensure_session,
    ensure_store,
    find_session,
    find_store,
    items_after,
    lease_owner,
    track_run,
)
from ._history import (
    _copy_json,
    _History,
)
from .approvals import (
    _CHECKPOINT_PREFIX,
    _TYPE_TAG,
    FRAMEWORK,
    PendingApproval,
    StaleApproval,
    _Parked,
    _printable,
    park_data,
    to_state,
)

#: The session store used unless another is named.
DEFAULT_STORE = "openai-agents"
#: The actor a new session gets unless another is named (actors group sessions, grant nothing).
DEFAULT_ACTOR_ID = "openai-agents"
#: The item format every item is stored with.
FORMAT = "openai.responses"
#: How many items a session keeps between reads unless told otherwise (see ``_History``).
DEFAULT_ITEM_CACHE_SIZE = 10_000

T = TypeVar("T")


class InvalidType(InvalidInput, TypeError):
    """Input of a type the SDK's own sessions refuse with ``TypeError``: items that are not
    a list of JSON objects (an ``object()`` among them, or inside one), session settings
    with unknown keys or of another type. Both ``except TypeError`` (as for the SDK's
    ``SQLiteSession``) and ``except InvalidInput`` catch it. Carries ``field``."""

    code = "invalid_type"


#: The error of every call on an OwnstateSession after close(), as SQLiteSession's.
_CLOSED = "OwnstateSession is closed"

def _checked_limit(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput("limit must be None or an integer >= 0", field="limit")
    return value


class OwnstateSession(BridgedAdapter):
    """An OpenAI Agents SDK ``Session`` kept in one ownstate session.

    ``session_id`` is the SDK's session id and the ownstate session id (1-128 chars of
    ``[A-Za-z0-9._:@-]``). The session (and its store) is created by the first write, with
    ``actor_id`` and ``metadata``; an existing session is used as it is, whatever its actor,
    so a conversation begun elsewhere continues here. ``session_settings`` (a
    ``SessionSettings`` or a dict) sets the default ``limit`` of :meth:`get_items`.
    ``item_cache_size`` bounds the items kept between reads, so that a read fetches only
    what is new (0 turns that off; see ``docs/openai-agents.md``).

    Build it from a connected :class:`~ownstate.Client` or :class:`~ownstate.AsyncClient`,
    or with :meth:`from_url`. Raises :class:`~ownstate.errors.InvalidInput` for a bad
    session id, store name, actor id, metadata, settings or ``item_cache_size``
    (:class:`InvalidType`, also a ``TypeError``, for settings with unknown keys, as the
    SDK's coercion raises). After :meth:`close`, every method raises ``RuntimeError``.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        client: Client | AsyncClient,
        *,
        store: str = DEFAULT_STORE,
        actor_id: str = DEFAULT_ACTOR_ID,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        metadata: Mapping[str, str] | None = None,
        item_cache_size: int = DEFAULT_ITEM_CACHE_SIZE,
    ) -> None:
        self._setup(session_id, Bridge(client), store, actor_id, session_settings, metadata,
                    item_cache_size)

    @classmethod
    def from_url(
        cls,
        session_id: str,
        url: str | None = None,
        *,
        tenant: str | None = None,
        store: str = DEFAULT_STORE,
        actor_id: str = DEFAULT_ACTOR_ID,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        metadata: Mapping[str, str] | None = None,
        item_cache_size: int = DEFAULT_ITEM_CACHE_SIZE,
    ) -> OwnstateSession:
        """A session over a client it opens on ``url`` (default ``OWNSTATE_URL``, else
        ``sqlite:///ownstate.db``) and closes with :meth:`close`.

        Raises :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.BackendUnavailable`, :class:`~ownstate.errors.SchemaVersion`.
        """
        bridge = Bridge.from_url(url, tenant=tenant)
        try:
            session = cls.__new__(cls)
            session._setup(session_id, bridge, store, actor_id, session_settings, metadata,
                           item_cache_size)
        except BaseException:
            bridge.close()
            raise
        return session

    def _setup(
        self,
        session_id: str,
        bridge: Bridge,
        store: str,
        actor_id: str,
        session_settings: SessionSettings | Mapping[str, Any] | None,
        metadata: Mapping[str, str] | None,
        item_cache_size: int = DEFAULT_ITEM_CACHE_SIZE,
    ) -> None:
        limits = bridge.client.limits
        if (isinstance(item_cache_size, bool) or not isinstance(item_cache_size, int)
                or item_cache_size < 0):
            raise InvalidInput("item_cache_size must be an integer >= 0",
                               field="item_cache_size")
        self.session_id: str = _validate.session_id(session_id)
        self._store = _validate.store_name(store)
        self._actor_id = limits.actor_id(actor_id)
        self._metadata = limits.metadata(metadata)
        if session_settings is None:
            self.session_settings = SessionSettings()
        else:
            given = (dict(session_settings) if isinstance(session_settings, Mapping)
                     else session_settings)
            try:
                # The SDK's own coercion: unknown keys and other types are a TypeError.
                self.session_settings = coerce_session_settings(given)
            except TypeError as exc:
                raise InvalidType(f"session_settings: {exc}",
                                  field="session_settings") from exc
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                raise InvalidInput(f"session_settings: {exc}", field="session_settings") from exc
        try:
            _checked_limit(self.session_settings.limit)
        except InvalidInput as exc:
            raise InvalidInput(f"session_settings: {exc}", field="session_settings") from exc
        self._bridge = bridge
        self._handle: AsyncSession | None = None
        self._tracked: tuple[str, int] | None = None  # the run run_hooks() opened
        self._item_cache_size = item_cache_size
        self._history: _History | None = None  # see _History
        self._closed = False

    def __repr__(self) -> str:
        return f"<OwnstateSession {self._store}/{self.session_id}>"

    @property
    def store(self) -> str:
        """The name of the ownstate session store."""
        return self._store

    @property
    def actor_id(self) -> str:
        """The actor a new session is created with."""
        return self._actor_id

    @property
    def _client(self) -> AsyncClient:
        # for the coroutines below only: they run wherever the bridge runs them
        return self._bridge.client

    def close(self) -> None:
        """End this session object: every later call raises ``RuntimeError``, as on the
        SDK's ``SQLiteSession``. Closes the client if :meth:`from_url` opened it; a client
        passed in stays open. Closing again does nothing."""
        self._closed = True
        super().close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(_CLOSED)

    # -- the Session protocol ------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation in order, oldest first: every item, or the newest ``limit``
        (``session_settings.limit`` when ``limit`` is ``None``; ``0`` gives none).

        The first read of a whole history keeps it (up to ``item_cache_size`` items);
        later reads fetch only the items appended since, after checking that the last
        item read is still stored, and fall back to a full read when it is not. A first
        read with a limit reads only the newest ``limit`` items. The items returned are
        the caller's to change. A session that does not exist yet has no items. Raises
        :class:`~ownstate.errors.InvalidInput` for a limit that is not ``None`` or an
        integer >= 0.
        """
        self._check_open()
        wanted = _checked_limit(limit)
        if wanted is None and self.session_settings is not None:
            wanted = _checked_limit(self.session_settings.limit)
        if wanted == 0:
            return []
        return await self._call(self._get_items(wanted))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, all or none, in one write; an empty list does nothing.

        Each item must be a JSON object; it is stored exactly as given, with format
        ``openai.responses``. Creates the store and the session on first use.

        Raises :class:`InvalidType` (an :class:`~ownstate.errors.InvalidInput` and a
        ``TypeError``, where the SDK's ``SQLiteSession`` raises ``TypeError``: not a list
        of JSON objects, or a value JSON cannot encode, such as an ``object()``),
        :class:`~ownstate.errors.InvalidInput` (a value JSON cannot represent exactly, such
        as ``NaN``), :class:`~ownstate.errors.LimitExceeded` (more than
        ``Limits.max_batch_items`` items, or too many bytes); nothing is stored then.
        """
        self._check_open()
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise InvalidType("items must be a list of JSON objects", field="items")
        if not items:
            return
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise InvalidType(f"item {index} must be a JSON object (dict), not "
                                  f"{type(item).__name__}", field="items", index=index)
        try:
            await self._call(self._add_items(list(items)))
        except InvalidInput as exc:
            if isinstance(exc.__cause__, TypeError) and not isinstance(exc, InvalidType):
                # JSON could not encode a value's type (json.dumps raises TypeError)
                raise InvalidType(exc.message, **exc.details) from exc.__cause__
            raise

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; ``None`` when there is none."""
        self._check_open()
        return await self._call(self._pop_item())

    async def clear_session(self) -> None:
        """Remove every item. The ownstate session itself stays, with its runs."""
        self._check_open()
        await self._call(self._clear())

    # -- human approvals -----------------------------------------------------------------

    async def hold_for_approval(
        self,
        result: RunResult | RunResultStreaming | RunState[Any, Any],
        *,
        requested_by: str | None = None,
        context_serializer: Any = None,
    ) -> Run:
        """Keep a run that stopped for tool approvals until a human decides.

        Opens an ownstate run (framework ``openai.agents``, thread key = the session id) in
        this session, stores ``result.to_state().to_json()`` as its checkpoint
        ``run-state-1`` (type tag ``json``) and marks it ``awaiting_human`` with what it
        waits for: ``{"kind": "approval", "tool": <first tool>, "revision": 1,
        "requests": [{"call_id", "tool", "arguments", "agent"}, ...]}``. Returns the run.
        ``requested_by`` defaults to the interrupted agent's name; ``context_serializer``
        is passed to ``RunState.to_json`` for a context that is not a mapping.

        Raises :class:`~ownstate.errors.InvalidInput` (no interruptions, or a state the SDK
        cannot serialize), :class:`~ownstate.errors.LimitExceeded` (a state larger than
        ``Limits.max_checkpoint_bytes``), :class:`~ownstate.errors.ActiveRunExists` (the
        session already has a running or awaiting run); nothing is stored then.
        """
        self._check_open()
        state = result if isinstance(result, RunState) else to_state(result)
        parked = park_data(self._client.limits, state, 1, requested_by, context_serializer)
        return await self._call(self._hold(parked))

    async def load_approval(
        self,
        run_id: str,
        agent: Agent[Any],
        *,
        context_override: Any = None,
        context_deserializer: Any = None,
        strict_context: bool = False,
    ) -> PendingApproval:
        """Load a run of this session that awaits approval, for a decision.

        ``agent`` is the starting agent of the interrupted run (the same name, tools and
        handoffs); the SDK's ``RunState`` is restored with it from the run's newest
        checkpoint (``context_override``, ``context_deserializer`` and ``strict_context``
        go to ``RunState.from_json``). Nothing is claimed or changed.

        Raises :class:`~ownstate.errors.RunNotFound` (no such run in this session, or not
        an ``openai.agents`` run), :class:`~ownstate.errors.RunClosed` (it has ended),
        :class:`~ownstate.errors.LeaseHeld` (another worker is resuming it),
        :class:`~ownstate.errors.CheckpointNotFound` (its state was deleted),
        :class:`~ownstate.errors.InvalidInput` (the state cannot be restored with this
        agent).
        """
        self._check_open()
        if not isinstance(agent, Agent):
            raise InvalidInput("agent must be an agents.Agent", field="agent")
        run, record = await self._call(self._load(run_id))
        options: dict[str, Any] = {}  # only what is asked for, so older SDKs take the call
        if context_override is not None:
            options["context_override"] = context_override
        if context_deserializer is not None:
            options["context_deserializer"] = context_deserializer
        if strict_context:
            options["strict_context"] = True
        try:
            state = await RunState.from_json(agent, json.loads(record.payload), **options)
        except (UserError, ValueError) as exc:
            raise InvalidInput(f"run {run.run_id!r}: its RunState cannot be restored with "
                               f"this agent: {exc}", field="agent", run_id=run.run_id) from exc
        revision = record.metadata.get("revision")
        return PendingApproval(run, agent, state, record.checkpoint_id,
                               revision if isinstance(revision, int) else 1)

    async def resume_from_approval(
        self,
        approval: PendingApproval,
        *,
        owner: str | None = None,
        lease_ttl: float = 60.0,
        **run_options: Any,
    ) -> RunResult:
        """Carry on a run after the decisions made on ``approval``, with ``Runner.run``.

        Claims the run (``client.runs.resume``: of many resumers one wins), runs
        ``Runner.run(approval.agent, approval.state, session=self, **run_options)`` while
        heartbeating the lease (``lease_ttl`` seconds), then closes the run ``done``, or,
        when the result stops for approvals again (or calls were left undecided), stores
        the new state as the next revision and marks the run ``awaiting_human`` again.
        If ``Runner.run`` raises, the run is closed ``failed`` and the error re-raised.
        Returns the ``RunResult``.

        Raises :class:`~ownstate.errors.InvalidInput` (an approval of another session, a
        ``session`` option), :class:`~ownstate.errors.LeaseHeld` (another worker is
        resuming it), :class:`~ownstate.errors.RunClosed` (it has ended),
        :class:`StaleApproval` (it was paused again since it was loaded; nothing changed),
        :class:`~ownstate.errors.StaleLease` (another worker took the run over while it
        ran), :class:`~ownstate.errors.RunNotFound`.
        """
        self._check_open()
        if not isinstance(approval, PendingApproval):
            raise InvalidInput("approval must be a PendingApproval (load_approval)",
                               field="approval")
        if (approval.run.store, approval.run.session_id) != (self._store, self.session_id):
            raise InvalidInput(f"run {approval.run_id!r} belongs to another session",
                               field="approval", run_id=approval.run_id)
        if "session" in run_options:
            raise InvalidInput("the session is this OwnstateSession; do not pass one",
                               field="session")
        worker = _printable(owner, "owner") if owner is not None else lease_owner(FRAMEWORK)
        lease_token = await self._call(self._claim(approval, worker, lease_ttl))
        run_id = approval.run_id
        beat = asyncio.ensure_future(self._heartbeat(run_id, lease_token, lease_ttl))
        try:
            result = await Runner.run(approval.agent, approval.state, session=self,
                                      **run_options)
        except BaseException:
            await _stop(beat)
            with contextlib.suppress(OwnstateError):
                await self._call(self._client.runs.close_run(run_id, "failed",
                                                            fencing_token=lease_token))
            raise
        await _stop(beat)
        if result.interruptions:
            try:
                parked = park_data(self._client.limits, result.to_state(),
                                   approval.revision + 1, None, None)
            except BaseException:
                with contextlib.suppress(OwnstateError):
                    await self._call(self._client.runs.close_run(run_id, "failed",
                                                                fencing_token=lease_token))
                raise
            scope = approval.run.checkpoint_scope()
            await self._call(self._park(run_id, scope, approval.revision + 1, parked,
                                        lease_token))
        else:
            await self._call(self._client.runs.close_run(
                run_id, "done", step_count=len(result.raw_responses), fencing_token=lease_token))
        return result

    async def cancel_approval(self, run_id: str) -> Run:
        """Close a run of this session that awaits approval as ``cancelled``, without
        resuming it (the agent never hears back). Returns the closed run.

        Raises :class:`~ownstate.errors.RunNotFound` (no such run in this session),
        :class:`~ownstate.errors.RunClosed` (it has already ended).
        """
        self._check_open()
        return await self._call(self._cancel(run_id))

    # -- runs -------------------------------------------------------------------------------

    def run_hooks(self) -> RunHooks[Any]:
        """Hooks that record each ``Runner.run`` on this session as an ownstate run:
        ``Runner.run(agent, input, session=session, hooks=session.run_hooks())``.

        The run (framework ``openai.agents``, thread key the session id) is opened when the
        first agent starts and closed ``done`` when an agent gives the final output. A run
        that stops for approvals stays open, and :meth:`hold_for_approval` parks that same
        run. When the session already has an active run (another framework's, or an
        approval being resumed), nothing is recorded for this one.
        """
        self._check_open()
        return _RunHooks(self)

    async def _track_start(self) -> None:
        if self._tracked is not None:
            return
        handle = await self._session(create=True)
        assert handle is not None
        self._tracked = await track_run(self._client, handle, FRAMEWORK, self.session_id,
                                        owner=lease_owner(FRAMEWORK))

    async def _track_end(self, status: str) -> None:
        tracked, self._tracked = self._tracked, None
        if tracked is not None:
            await close_run(self._client, tracked[0], status, fencing_token=tracked[1])

    # -- coroutines over the async client ------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        return self._bridge.acall(coro)

    async def _session(self, *, create: bool) -> AsyncSession | None:
        """The ownstate session handle; with ``create``, made (with its store) if missing,
        else ``None`` when it does not exist. Cached once found."""
        if self._handle is not None:
            return self._handle
        stores = self._client.session_stores
        if not create:
            store = await find_store(stores, self._store)
            handle = await find_session(store, self.session_id) if store else None
        else:
            store = await ensure_store(stores, self._store)
            handle = await ensure_session(store, self.session_id, actor_id=self._actor_id,
                                          metadata=self._metadata)
        self._handle = handle
        return handle

    def _forget(self) -> None:
        """The session was not found: look it up again next time, cache nothing."""
        self._handle = None
        self._history = None

    def _keep(self, history: _History | None) -> None:
        self._history = (history if history is not None
                         and len(history.ids) <= self._item_cache_size else None)

    async def _get_items(self, limit: int | None) -> list[TResponseInputItem]:
        handle = await self._session(create=False)
        if handle is None:
            return []
        cached = self._history
        try:
            if cached is not None:
                after = await self._after(handle, cached)
                if after is not None and all(item.format == FORMAT for item in after):
                    history = cached.extended(after)
                    self._keep(history)
                    return history.newest(limit)
                self._history = None
            found, whole = await self._read(handle, limit)
        except (SessionNotFound, StoreNotFound):
            self._forget()
            return []
        if any(item.format != FORMAT for item in found):
            # Another framework wrote part of this conversation: hand the SDK the history
            # in its own shape (whole, so that tool calls and results stay paired).
            history_data = await handle.history(as_format=FORMAT)
            if limit is not None:
                history_data = history_data[len(history_data) - limit:] if limit else []
            return cast(list[TResponseInputItem], history_data)
        if whole and self._item_cache_size > 0 and len(found) <= self._item_cache_size:
            # Keep what was read, hand out copies (the SDK may change what it is given).
            self._keep(_History.of(found))
            return cast(list[TResponseInputItem], [_copy_json(item.data) for item in found])
        return [cast(TResponseInputItem, item.data) for item in found]

    async def _read(self, handle: AsyncSession, limit: int | None) -> tuple[list[Item], bool]:
        """Every item, or the newest ``limit``, oldest first; and whether that is the
        whole history."""
        # Pages are fetched one by one rather than through the auto-paging iterator: an
        # async generator on the caller's loop breaks under Runner.run_sync, which shuts
        # down its loop's async generators after every run and then reuses the loop.
        found: list[Item] = []
        token = None
        page_most = self._client.limits.max_page_size
        while limit is None or len(found) < limit:
            size = page_most if limit is None else min(limit - len(found), page_most)
            page = await handle.list_items_page(
                order_by="create_time asc" if limit is None else "create_time desc",
                page_size=size, page_token=token)
            found.extend(page.items)
            token = page.next_page_token
            if token is None:
                break
        if limit is not None:
            found.reverse()  # the newest were read newest first
        return found, token is None

    async def _after(self, handle: AsyncSession, cached: _History) -> list[Item] | None:
        """The items that follow ``cached``; ``None`` if its last item is gone. The read
        starts at that item, which proves it is still there."""
        seq, item_id = cached.last
        return await items_after(handle, seq, item_id,
                                 page_size=self._client.limits.max_page_size)

    async def _add_items(self, items: list[TResponseInputItem]) -> None:
        data = cast(list[dict[str, JSON]], items)
        if self._handle is None:
            # Refuse bad items before the first write creates a store or a session.
            self._client.limits.encode_items(data)
        for attempt in (1, 2):
            handle = await self._session(create=True)
            assert handle is not None
            try:
                await handle.append_items(data, format=FORMAT)
                return
            except (SessionNotFound, StoreNotFound):
                self._forget()  # deleted since it was cached: make it again, once
                if attempt == 2:
                    raise

    async def _pop_item(self) -> TResponseInputItem | None:
        handle = await self._session(create=False)
        if handle is None:
            return None
        try:
            item = await handle.pop_item()
        except (SessionNotFound, StoreNotFound):
            self._forget()
            return None
        if item is None:
            return None
        cached = self._history
        if cached is not None:
            if cached.ids and cached.ids[-1] == (item.seq, item.item_id):
                # It was the newest item, so everything before it is still stored.
                self._history = _History(cached.data[:-1], cached.ids[:-1])
            elif item.seq <= cached.last[0]:
                self._history = None  # the cached history was changed by someone else
            # else: an item after the cached ones went; the cache still holds
        return cast(TResponseInputItem, item.data)

    async def _clear(self) -> None:
        handle = await self._session(create=False)
        if handle is None:
            return
        try:
            await handle.clear()
        except (SessionNotFound, StoreNotFound):
            self._forget()
            return
        self._history = _History([], []) if self._item_cache_size else None

    # -- approvals, the storage side -----------------------------------------------------
    async def _hold(self, parked: _Parked) -> Run:
        runs = self._client.runs
        tracked, self._tracked = self._tracked, None
        if tracked is not None:  # the run run_hooks() opened for this Runner.run
            run = await runs.get(tracked[0])
            return await self._park(run.run_id, run.checkpoint_scope(), 1, parked, tracked[1])
        handle = await self._session(create=True)
        assert handle is not None
        try:
            run = await runs.open_run(handle, FRAMEWORK, thread_key=self.session_id,
                                      owner=lease_owner(FRAMEWORK))
        except SessionNotFound:
            self._forget()  # deleted since it was cached: make it again, once
            handle = await self._session(create=True)
            assert handle is not None
            run = await runs.open_run(handle, FRAMEWORK, thread_key=self.session_id,
                                      owner=lease_owner(FRAMEWORK))
        try:
            return await self._park(run.run_id, run.checkpoint_scope(), 1, parked,
                                    run.fencing_token)
        except BaseException:
            with contextlib.suppress(OwnstateError):
                await runs.close_run(run.run_id, "failed", fencing_token=run.fencing_token)
            raise

    async def _park(self, run_id: str, scope: CheckpointScope, revision: int, parked: _Parked,
                    token: int) -> Run:
        await self._client.checkpoints.put(
            scope, f"{_CHECKPOINT_PREFIX}{revision}", type_tag=_TYPE_TAG, payload=parked.payload,
            metadata={"framework": FRAMEWORK, "revision": revision,
                      "awaiting": parked.awaiting, "requested_by": parked.requested_by},
            fencing_token=token)
        return await self._client.runs.mark_awaiting(run_id, parked.awaiting,
                                                    requested_by=parked.requested_by,
                                                    fencing_token=token)

    async def _own_run(self, run_id: str) -> Run:
        """The run, if it is an ``openai.agents`` run of this session (else not found)."""
        if not isinstance(run_id, str) or not run_id:
            raise InvalidInput("run_id must be a non-empty string", field="run_id")
        run = await self._client.runs.get(run_id)
        if (run.store, run.session_id, run.framework) != (self._store, self.session_id,
                                                           FRAMEWORK):
            raise RunNotFound(f"no run {run_id!r} in this scope", run_id=run_id)
        return run

    async def _load(self, run_id: str) -> tuple[Run, CheckpointRecord]:
        run = await self._own_run(run_id)
        if run.status not in ("awaiting_human", "running"):
            raise RunClosed(f"run {run_id!r} has ended ({run.status})", run_id=run_id,
                            status=run.status)
        expires = run.lease_expires_at
        if run.status == "running" and expires is not None and expires > datetime.now(UTC):
            # Someone is resuming it now. A running run whose lease ran out is loadable:
            # its resumer died, and the state it started from is still the newest.
            raise LeaseHeld(f"run {run_id!r} is being resumed by {run.lease_owner!r}",
                            run_id=run_id, owner=run.lease_owner, expires_at=expires)
        record = await self._client.checkpoints.get(run.checkpoint_scope())
        if record is None or record.type_tag != _TYPE_TAG:
            raise CheckpointNotFound(f"run {run_id!r} holds no RunState", run_id=run_id,
                                     checkpoint_id=None)
        return run, record

    async def _claim(self, approval: PendingApproval, owner: str, ttl: float) -> int:
        """Claim the run and check it still holds the state the decisions were made on;
        returns the fencing token."""
        runs = self._client.runs
        lease = await runs.resume(approval.run_id, owner, ttl=ttl)
        newest = await self._client.checkpoints.get(approval.run.checkpoint_scope())
        if newest is not None and newest.checkpoint_id == approval.checkpoint_id:
            return lease.fencing_token
        # Paused again since it was loaded: put the pause we claimed back as it was.
        current = newest.checkpoint_id if newest is not None else None
        awaiting = newest.metadata.get("awaiting") if newest is not None else None
        by = newest.metadata.get("requested_by") if newest is not None else None
        if not isinstance(awaiting, dict):
            awaiting = dict(approval.run.awaiting or {})
            by = awaiting.get("requested_by")
        awaiting = {k: v for k, v in awaiting.items() if k not in ("requested_at",
                                                                   "requested_by")}
        await runs.mark_awaiting(approval.run_id, awaiting,
                                 requested_by=by if isinstance(by, str) else None,
                                 fencing_token=lease.fencing_token)
        raise StaleApproval(f"run {approval.run_id!r} was paused again since this approval "
                            "was loaded; load it again", run_id=approval.run_id,
                            checkpoint_id=approval.checkpoint_id, current=current)

    async def _heartbeat(self, run_id: str, token: int, ttl: float) -> None:
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                await self._call(self._client.runs.heartbeat(run_id, token, ttl=ttl))
            except OwnstateError:
                return  # the lease is lost; the final fenced write reports it

    async def _cancel(self, run_id: str) -> Run:
        run = await self._own_run(run_id)
        return await self._client.runs.close_run(run.run_id, "cancelled")


async def _stop(task: asyncio.Future[None]) -> None:
    task.cancel()
    await asyncio.wait({task})


class _RunHooks(RunHooks[Any]):
    """See :meth:`OwnstateSession.run_hooks`."""

    def __init__(self, session: OwnstateSession) -> None:
        self._session = session

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        await self._session._call(self._session._track_start())

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        await self._session._call(self._session._track_end("done"))
