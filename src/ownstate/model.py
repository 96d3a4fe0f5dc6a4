"""The records ownstate stores, as frozen dataclasses.

These are plain values: what a backend returns and what the public handles expose. They
carry no connection and no behaviour. One protocol lives beside them, :class:`Extractor`,
the shape of what distillation asks for candidate facts.

It may touch only timestamps (``ownstate._ids``): no other part of ownstate and no outside
library.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import repeat
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ._ids import format_time

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "CLOSED_RUN_STATUSES",
    "DECISION_OUTCOMES",
    "JSON",
    "PERMISSION_LEVELS",
    "RUN_STATUSES",
    "SOURCE_TYPES",
    "ApiKey",
    "AssetRef",
    "Candidate",
    "CheckpointRecord",
    "CheckpointScope",
    "Decision",
    "Distillation",
    "Effect",
    "Extractor",
    "Fact",
    "FactExplanation",
    "FactHit",
    "Grant",
    "Item",
    "ItemHit",
    "Lease",
    "MemoryStoreRecord",
    "Page",
    "PendingWrite",
    "RetentionPolicy",
    "RetentionReport",
    "Run",
    "RunUsage",
    "SessionRecord",
    "SessionStoreRecord",
]

#: A JSON value as Python builds it: dict, list, str, int, float, bool or None.
JSON = Any

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SessionStoreRecord:
    """A named, tenant-scoped container of sessions."""

    tenant: str
    name: str
    create_time: datetime


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session as stored.

    ``actor_id`` groups sessions (a user, a customer) and grants nothing; it never changes.
    ``parent_session_id`` is set once, when the session is made by :meth:`fork`;
    ``root_session_id`` is the first ancestor (the session itself when it has no parent).
    ``metadata`` holds string labels and may be updated.
    """

    tenant: str
    store: str
    session_id: str
    actor_id: str
    parent_session_id: str | None
    root_session_id: str
    metadata: dict[str, str]
    create_time: datetime
    last_activity_time: datetime


@dataclass(frozen=True, slots=True)
class Item:
    """One entry of a session's ordered history.

    ``seq`` numbers a session's items 1, 2, 3, ... with no gap at the time of append; it
    is the order of the history and does not depend on a clock. ``data`` is the JSON the
    caller appended, unchanged. ``format`` names the shape of ``data`` (for example
    ``openai.responses``). The remaining fields are derived from ``data`` when its shape
    says them, else ``None``; they exist so audit and analytics are plain SQL.
    """

    item_id: str
    session_id: str
    seq: int
    create_time: datetime
    data: JSON
    format: str
    role: str | None = None
    type: str | None = None
    tool_name: str | None = None
    model: str | None = None
    in_tokens: int | None = None
    out_tokens: int | None = None


_item_slots = vars(Item)
_set_item_fields = tuple(_item_slots[f].__set__ for f in (
    "item_id", "session_id", "seq", "create_time", "data", "format", "role", "type",
    "tool_name", "model", "in_tokens", "out_tokens"))


def build_item(item_id: str, session_id: str, seq: int, create_time: datetime, data: JSON,
               format: str, role: str | None, type: str | None, tool_name: str | None,
               model: str | None, in_tokens: int | None, out_tokens: int | None) -> Item:
    """``Item(...)`` for backends that build thousands per replay: the same frozen object,
    with its slots set through their descriptors instead of the frozen dataclass's twelve
    ``object.__setattr__`` calls, in about half the time. Arguments are not checked."""
    item: Item = object.__new__(Item)
    (s_id, s_session, s_seq, s_time, s_data, s_format, s_role, s_type, s_tool, s_model,
     s_in, s_out) = _set_item_fields
    s_id(item, item_id)
    s_session(item, session_id)
    s_seq(item, seq)
    s_time(item, create_time)
    s_data(item, data)
    s_format(item, format)
    s_role(item, role)
    s_type(item, type)
    s_tool(item, tool_name)
    s_model(item, model)
    s_in(item, in_tokens)
    s_out(item, out_tokens)
    return item


_new = object.__new__
_exhaust: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def build_items(session_id: str, data: Sequence[JSON], item_ids: Sequence[str],
                seqs: Sequence[int], create_times: Sequence[datetime], formats: Sequence[str],
                roles: Sequence[str | None], types: Sequence[str | None],
                tool_names: Sequence[str | None], models: Sequence[str | None],
                in_tokens: Sequence[int | None], out_tokens: Sequence[int | None],
                ) -> list[Item]:
    """:func:`build_item` at every position of equally long columns, all of one session:
    the objects are made, then filled a field at a time, each field by one loop that runs
    in C (``map`` over the field's descriptor), which takes about two thirds of the time
    of building them one by one. Raises ValueError if the columns differ in length."""
    n = len(data)
    columns = (item_ids, seqs, create_times, formats, roles, types, tool_names, models,
               in_tokens, out_tokens)
    if any(len(column) != n for column in columns):
        raise ValueError("the columns of the items differ in length")
    items: list[Item] = list(map(_new, repeat(Item, n)))
    (s_id, s_session, s_seq, s_time, s_data, s_format, s_role, s_type, s_tool, s_model,
     s_in, s_out) = _set_item_fields
    _exhaust(map(s_id, items, item_ids))
    _exhaust(map(s_session, items, repeat(session_id)))
    _exhaust(map(s_seq, items, seqs))
    _exhaust(map(s_time, items, create_times))
    _exhaust(map(s_data, items, data))
    _exhaust(map(s_format, items, formats))
    _exhaust(map(s_role, items, roles))
    _exhaust(map(s_type, items, types))
    _exhaust(map(s_tool, items, tool_names))
    _exhaust(map(s_model, items, models))
    _exhaust(map(s_in, items, in_tokens))
    _exhaust(map(s_out, items, out_tokens))
    return items


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing. ``next_page_token`` is ``None`` on the last page."""

    items: list[T] = field(default_factory=list)
    next_page_token: str | None = None


# memory ------------------------------------------------------------------------------

#: Where a fact came from.
SOURCE_TYPES = ("agent", "pipeline", "user", "import")


@dataclass(frozen=True, slots=True)
class MemoryStoreRecord:
    """A named, tenant-scoped container of facts."""

    tenant: str
    name: str
    create_time: datetime


@dataclass(frozen=True, slots=True)
class Fact:
    """One belief about a subject: ``key`` had ``value`` during ``[valid_from, valid_to)``.

    Valid time (``valid_from``, ``valid_to``) is when it was true in the world; record time
    (``recorded_at``, ``superseded_at``) is when we held it as the current belief. A fact is
    never rewritten: remembering a new value for the same (subject, key) supersedes the
    current fact (setting ``superseded_at``, and ``valid_to`` to the new fact's
    ``valid_from``) and the new fact names it in ``supersedes``. ``valid_to`` stays ``None``
    while the fact is current. ``closed_reason`` says why a fact stopped being current:
    ``superseded`` or ``forgotten: <reason>``.
    """

    fact_id: str
    memory_store: str
    subject: str
    key: str
    value: JSON
    confidence: float | None
    source_type: str
    source_session_id: str | None
    source_item_id: str | None
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    superseded_at: datetime | None
    supersedes: str | None
    closed_reason: str | None = None
    #: the session store of the source item (with ``source_session_id``, ``source_item_id``)
    source_store: str | None = None


@dataclass(frozen=True, slots=True)
class FactExplanation:
    """Why a fact is what it is: the fact, what it superseded, what superseded it, and the
    conversation item it was learned from (``None`` when it came from elsewhere or that item
    has since been deleted)."""

    fact: Fact
    superseded: Fact | None
    superseded_by: Fact | None
    source_item: Item | None


@dataclass(frozen=True, slots=True)
class FactHit:
    """One answer of ``memory.search``: a fact and how well it matches the query.

    ``score`` is its BM25 relevance (higher is better; see ``docs/memory.md``), comparable
    only within one answer. Provenance is the fact's own: ``fact.source_store``,
    ``fact.source_session_id`` and ``fact.source_item_id`` name the item it came from.
    """

    fact: Fact
    score: float


@dataclass(frozen=True, slots=True)
class ItemHit:
    """One answer of ``session_stores.search_items``: a conversation item, where it lives
    (``store``, ``item.session_id``, ``item.seq``; ``actor_id`` of its session) and how
    well it matches the query (``score``, BM25, higher is better)."""

    store: str
    actor_id: str
    item: Item
    score: float


# runs --------------------------------------------------------------------------------

#: Run statuses. ``running`` and ``awaiting_human`` are active: a session has at most one
#: active run at a time.
RUN_STATUSES = ("running", "awaiting_human", "done", "failed", "cancelled")
ACTIVE_RUN_STATUSES = ("running", "awaiting_human")
CLOSED_RUN_STATUSES = ("done", "failed", "cancelled")
#: what a human may answer a run that awaits them with
DECISION_OUTCOMES = ("approve", "reject")


@dataclass(frozen=True, slots=True)
class Decision:
    """A human's answer to a run awaiting them: ``outcome`` (``approve`` or ``reject``),
    who gave it (``decided_by``: the principal, or whoever the library caller named) and
    when, with an optional ``comment`` and ``payload`` (edited arguments, an answer) for the
    framework that resumes the run."""

    outcome: str
    decided_by: str | None
    decided_at: datetime
    comment: str | None = None
    payload: JSON = None

    @property
    def approved(self) -> bool:
        """True when the human approved."""
        return self.outcome == "approve"

    def to_json(self) -> dict[str, JSON]:
        """The decision as stored: a JSON object with the time as RFC 3339 text."""
        return {"outcome": self.outcome, "decided_by": self.decided_by,
                "decided_at": format_time(self.decided_at), "comment": self.comment,
                "payload": self.payload}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Decision:
        """The decision stored as :meth:`to_json` wrote it."""
        return cls(outcome=data["outcome"], decided_by=data.get("decided_by"),
                   decided_at=datetime.fromisoformat(data["decided_at"]),
                   comment=data.get("comment"), payload=data.get("payload"))


@dataclass(frozen=True, slots=True)
class Run:
    """The shadow record of one framework run.

    ``awaiting`` is what a paused run waits for: the caller's description (``kind``,
    ``tool``, ``payload``, ...) plus ``requested_at`` and ``requested_by``. The lease
    (``lease_owner``, ``lease_expires_at``) says which worker drives the run; every claim
    increases ``fencing_token``, and a write carrying an older token is refused.

    ``decision`` is the human's answer to the current request (set once, while the run
    awaits; kept when a worker resumes the run, cleared when it is marked awaiting again);
    ``decisions`` holds every decision the run has received, oldest first, for audit.
    """

    run_id: str
    store: str
    session_id: str
    actor_id: str
    framework: str
    thread_key: str | None
    status: str
    awaiting: dict[str, JSON] | None
    step_count: int
    usd_cost: float
    started_at: datetime
    ended_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    fencing_token: int
    decision: Decision | None = None
    decisions: tuple[Decision, ...] = ()

    @property
    def decided(self) -> bool:
        """True while the run awaits a human who has already answered: a worker should
        resume it."""
        return self.status == "awaiting_human" and self.decision is not None

    def checkpoint_scope(self) -> CheckpointScope:
        """The scope that names this run's checkpoints."""
        return CheckpointScope(self.actor_id, self.store, self.session_id, self.run_id)


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on a run: who holds it, until when, and the fencing token to write with."""

    run_id: str
    owner: str
    fencing_token: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Effect:
    """The recorded result of one side-effecting tool call in a run.

    ``recorded`` is true when this call stored it, false when an earlier record won.
    """

    run_id: str
    tool_call_id: str
    result: JSON
    recorded_at: datetime
    recorded: bool


# checkpoints -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointScope:
    """The full scope every checkpoint operation names: actor, session and run.

    The tenant comes from the client. A run outside this scope is indistinguishable from
    one that does not exist.
    """

    actor_id: str
    store: str
    session_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """One write a task made that belongs to a checkpoint not yet taken."""

    task_id: str
    index: int
    channel: str
    type_tag: str
    payload: bytes
    task_path: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """An opaque framework checkpoint: a type tag and bytes, with its lineage and metadata."""

    run_id: str
    namespace: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type_tag: str
    payload: bytes
    metadata: dict[str, JSON]
    create_time: datetime
    pending_writes: tuple[PendingWrite, ...] = ()


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Which checkpoints to drop: beyond the newest ``keep_last`` per run and namespace,
    older than ``max_age_seconds``, or all of a run once it has ended."""

    keep_last: int | None = None
    max_age_seconds: float | None = None
    drop_when_run_ends: bool = False


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What a retention pass removed."""

    checkpoints_deleted: int
    bytes_freed: int


@dataclass(frozen=True, slots=True)
class RunUsage:
    """Checkpoint storage held by one run."""

    run_id: str
    checkpoints: int
    stored_bytes: int


# distillation ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A fact an :class:`Extractor` proposes: ``key`` of ``subject`` is ``value``, with
    ``confidence`` (0 to 1), learned from the items named in ``item_ids`` (at least one,
    each among the items the extractor was given)."""

    subject: str
    key: str
    value: JSON
    confidence: float
    item_ids: tuple[str, ...]


@runtime_checkable
class Extractor(Protocol):
    """What distillation asks for candidate facts: items in, candidates out.

    ``extract`` gets a slice of one session's items in order, the ``subject`` the facts
    are about, and ``known``, the subject's current facts (so an extractor can reuse their
    keys and skip what is already known). It may be a plain method or a coroutine
    function; a plain one is run in a worker thread when an event loop is running. It
    raises :class:`~ownstate.errors.ExtractorFailed` when it cannot answer.
    """

    def extract(self, items: Sequence[Item], *, subject: str,
                known: Sequence[Fact]) -> Sequence[Candidate] | Awaitable[Sequence[Candidate]]:
        """The candidate facts found in ``items``."""
        ...


@dataclass(frozen=True, slots=True)
class Distillation:
    """What one distillation of a session did.

    ``run_id`` is the run that recorded it (``None`` when there was nothing new to read, in
    which case nothing was written). Items after ``from_seq`` up to ``to_seq`` were read:
    ``items_read`` of them. ``facts`` are the facts written; of the other candidates,
    ``unchanged`` equalled the current value, ``below_threshold`` had too little
    confidence, and ``rejected`` named another subject, an item outside the slice, or a
    key that is not a valid key.
    """

    store: str
    session_id: str
    run_id: str | None
    from_seq: int
    to_seq: int
    items_read: int
    facts: list[Fact]
    unchanged: int
    below_threshold: int
    rejected: int


# assets ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssetRef:
    """A reference to stored bytes, to hold in items and checkpoints instead of the bytes.

    ``asset_id`` names this reference (one per owner: a session, or none); ``sha256`` names
    the content, which is stored once however many references share it. ``size`` and
    ``sha256`` are computed by ownstate, never taken from the caller.
    """

    asset_id: str
    sha256: str
    size: int
    media_type: str
    store: str | None
    session_id: str | None
    metadata: dict[str, str]
    create_time: datetime

    def to_json(self) -> dict[str, JSON]:
        """The form an item or checkpoint stores: ``{"$asset": id, ...}``."""
        return {"$asset": self.asset_id, "media_type": self.media_type, "size": self.size}


# access ------------------------------------------------------------------------------

#: Store permission levels, weakest first; each includes the ones before it. READ reads a
#: store's contents, WRITE changes them, MANAGE also grants, revokes and deletes the store.
#: The principal that created a store through the server owns it, which gives MANAGE.
PERMISSION_LEVELS: tuple[str, ...] = ("READ", "WRITE", "MANAGE")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key's record; the secret itself is shown once at creation and never stored.

    A key authenticates one ``principal`` of one ``tenant``; an ``admin`` key may do
    everything in its tenant, whatever the store grants say.
    """

    key_id: str
    tenant: str
    principal: str
    admin: bool
    create_time: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    """One principal's access to one session store or memory store.

    ``kind`` is ``"session_store"`` or ``"memory_store"``; ``level`` is one of
    :data:`PERMISSION_LEVELS`, or ``"OWNER"`` for the store's owner.
    """

    kind: str
    store: str
    principal: str
    level: str
