"""Every error ownstate raises, as one tree.

::

    OwnstateError                  base of everything below; never raised itself
    ├── NotFound                   the thing does not exist in this tenant (or is not yours)
    │   ├── StoreNotFound
    │   ├── SessionNotFound
    │   ├── ItemNotFound
    │   ├── FactNotFound
    │   ├── RunNotFound            also: a run outside the caller's checkpoint scope
    │   ├── CheckpointNotFound
    │   ├── AssetNotFound
    │   └── KeyNotFound            no API key with this id in the tenant
    ├── Conflict                   the request is valid but clashes with what is stored
    │   ├── AlreadyExists          a caller-chosen name or id is taken
    │   ├── HasChildren            a session with forks was deleted without force=True
    │   ├── StoreNotEmpty          a store with sessions was deleted without force=True
    │   ├── IdempotencyKeyReused   a retried key arrived with a different request
    │   ├── SeqConflict            items meant to take seq n found the session elsewhere
    │   ├── ActiveRunExists        the session already has a running or awaiting run
    │   ├── LeaseHeld              another owner holds an unexpired lease on the run
    │   ├── StaleLease             a write carried a fencing token older than the run's
    │   ├── RunClosed              the run has ended and cannot be changed
    │   ├── NotAwaiting            a decision on a run that does not await a human
    │   ├── AlreadyDecided         a second decision on a run's request
    │   └── EmbedderMismatch       a store's vectors were made by another model or dimension
    ├── InvalidInput               the request itself is wrong: bad name, bad data, bad token
    │   └── LimitExceeded          a documented size bound was crossed
    ├── PermissionDenied           the caller may see the thing but not do this to it
    │   └── Unauthenticated        no API key, an unknown one, or a revoked one
    ├── BackendUnavailable         the datastore could not be reached or failed mid-call
    ├── SchemaVersion              the database schema is missing, older or newer than this code
    ├── ExtractorFailed            distillation's extractor failed, timed out or answered nonsense
    └── MissingExtra               an optional dependency is not installed (also an ImportError)

Errors from database drivers never escape: backends translate them into this tree with
``raise ... from exc`` so the driver's error stays reachable as ``__cause__``.

Each error carries the identifiers it is about as attributes (``store``, ``session_id``,
``item_id``, ``field``, ...) so callers can react without parsing messages. Every
operation that raises leaves stored state exactly as it was before the call.

An error that is about ids words its own message from them: ``SessionNotFound(store="s",
session_id="x")`` reads ``no session 'x' in store 's'`` wherever it is raised, so every
backend says the same thing in the same words. A message given first replaces that
wording (for a reason only the caller knows); ``cls(message, **details)`` is also how an
error is rebuilt from its parts (unpickling, a problem+json answer). It may touch nothing
else of ownstate's and no outside library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "ActiveRunExists",
    "AlreadyDecided",
    "AlreadyExists",
    "AssetNotFound",
    "BackendUnavailable",
    "CheckpointNotFound",
    "Conflict",
    "EmbedderMismatch",
    "ExtractorFailed",
    "FactNotFound",
    "HasChildren",
    "IdempotencyKeyReused",
    "InvalidInput",
    "ItemNotFound",
    "KeyNotFound",
    "LeaseHeld",
    "LimitExceeded",
    "MissingExtra",
    "NotAwaiting",
    "NotFound",
    "OwnstateError",
    "PermissionDenied",
    "RunClosed",
    "RunNotFound",
    "SchemaVersion",
    "SeqConflict",
    "SessionNotFound",
    "StaleLease",
    "StoreNotEmpty",
    "StoreNotFound",
    "Unauthenticated",
]


class OwnstateError(Exception):
    """Base class of every error ownstate raises.

    ``code`` is a stable, machine-readable identifier (used later as the HTTP problem
    type); ``details`` holds the ids the error is about.
    """

    code = "ownstate_error"
    #: The message built from ``details`` alone (``str.format`` over them) when none is
    #: given; empty for errors that always need one.
    template: ClassVar[str] = ""

    def __init__(self, message: str | None = None, /, **details: object) -> None:
        if message is None:
            message = self.describe(details)
        super().__init__(message)
        self.message = message
        self.details: dict[str, object] = details

    @classmethod
    def describe(cls, details: Mapping[str, object]) -> str:
        """The message this error has when built from ``details`` alone.

        Raises TypeError when the error needs a message, or an id its wording names is
        missing (a mistake in the calling code, not in the request)."""
        if not cls.template:
            raise TypeError(f"{cls.__name__} needs a message")
        try:
            return cls.template.format_map(details)
        except KeyError as exc:
            raise TypeError(f"{cls.__name__} needs {exc.args[0]!r} for its message") from None

    def __getattr__(self, name: str) -> object:
        details = self.__dict__.get("details", {})
        if name in details:
            return details[name]
        raise AttributeError(name)


class NotFound(OwnstateError):
    """The thing asked for does not exist in the caller's tenant.

    Something that exists but belongs to another tenant or principal gives exactly the same
    error, so existence never leaks across scopes.
    """

    code = "not_found"


class StoreNotFound(NotFound):
    """No session store (or memory store) with this name. Carries ``store``."""

    code = "store_not_found"
    template = "no store {store!r}"


class SessionNotFound(NotFound):
    """No session with this id in the store. Carries ``store`` and ``session_id``."""

    code = "session_not_found"
    template = "no session {session_id!r} in store {store!r}"


class ItemNotFound(NotFound):
    """No item with this id in the session. Carries ``session_id`` and ``item_id``."""

    code = "item_not_found"
    template = "no item {item_id!r} in session {session_id!r}"


class FactNotFound(NotFound):
    """No fact with this id in the memory store. Carries ``fact_id``."""

    code = "fact_not_found"
    template = "no fact {fact_id!r} in memory store {store!r}"


class RunNotFound(NotFound):
    """No run with this id in the caller's scope. Carries ``run_id``.

    A run that exists but lies outside the scope given (another actor's, another session's)
    raises exactly this, with the same message.
    """

    code = "run_not_found"
    template = "no run {run_id!r}"


class CheckpointNotFound(NotFound):
    """No checkpoint with this id for the run. Carries ``run_id`` and ``checkpoint_id``."""

    code = "checkpoint_not_found"
    template = "no checkpoint {checkpoint_id!r} in run {run_id!r}"


class AssetNotFound(NotFound):
    """No asset with this id. Carries ``asset_id``."""

    code = "asset_not_found"
    template = "no asset {asset_id!r}"


class KeyNotFound(NotFound):
    """No API key with this id in the tenant. Carries ``key_id``."""

    code = "key_not_found"
    template = "no API key {key_id!r}"


class Conflict(OwnstateError):
    """The request is well-formed but clashes with what is stored."""

    code = "conflict"


class AlreadyExists(Conflict):
    """A caller-chosen name or id is already taken. Carries the clashing ids."""

    code = "already_exists"

    @classmethod
    def describe(cls, details: Mapping[str, object]) -> str:
        """Names the most specific id given: a run, an API key, a session in its store,
        a store."""
        if "run_id" in details:
            return f"run {details['run_id']!r} already exists"
        if "key_id" in details:
            return f"an API key {details['key_id']!r} exists"
        if "session_id" in details and "store" in details:
            return (f"session {details['session_id']!r} already exists "
                    f"in store {details['store']!r}")
        if "store" in details:
            return f"store {details['store']!r} already exists"
        return super().describe(details)


class HasChildren(Conflict):
    """A session that has forks cannot be deleted without ``force=True``.

    Carries ``session_id`` and ``children`` (the direct children's ids).
    """

    code = "has_children"
    template = "session {session_id!r} has forks; delete with force=True"


class StoreNotEmpty(Conflict):
    """A store that still holds sessions cannot be deleted without ``force=True``.

    Carries ``store`` and ``sessions`` (how many it holds).
    """

    code = "store_not_empty"
    template = "session store {store!r} holds {sessions} sessions"


class IdempotencyKeyReused(Conflict):
    """An idempotency key was retried with a different request body.

    Carries ``session_id`` and ``idempotency_key``.
    """

    code = "idempotency_key_reused"
    template = "idempotency key {idempotency_key!r} was used with a different request"


class SeqConflict(Conflict):
    """Items meant to start at seq ``first_seq`` found the session's history elsewhere
    (another writer appended or popped meanwhile); nothing was stored. Carries ``store``,
    ``session_id`` and ``first_seq``."""

    code = "seq_conflict"
    template = "session {session_id!r} does not continue at seq {first_seq}"


class ActiveRunExists(Conflict):
    """The session already has a run that is running or awaiting a human.

    Carries ``session_id`` and ``run_id`` (the active run). The database enforces this.
    """

    code = "active_run_exists"
    template = "session {session_id!r} already has an active run {run_id!r}"


class LeaseHeld(Conflict):
    """Another owner holds an unexpired lease on the run.

    Carries ``run_id``, ``owner`` (the holder) and ``expires_at``.
    """

    code = "lease_held"
    template = "run {run_id!r} is leased to {owner!r} until {expires_at}"


class StaleLease(Conflict):
    """A write carried a fencing token older than the run's current one: another worker
    has claimed the run since. Carries ``run_id``, ``fencing_token`` (given) and
    ``current`` (the run's)."""

    code = "stale_lease"
    template = "run {run_id!r} is held with fencing token {current}, not {fencing_token}"

    @classmethod
    def describe(cls, details: Mapping[str, object]) -> str:
        """A writer whose token is current but whose run holds no lease (a heartbeat after
        the lease was released) is told so; any other is told the two tokens."""
        if "run_id" in details and details.get("fencing_token") == details.get("current"):
            return f"run {details['run_id']!r} holds no lease"
        return super().describe(details)


class RunClosed(Conflict):
    """The run has ended (done, failed or cancelled) and cannot change. Carries ``run_id``
    and ``status``."""

    code = "run_closed"
    template = "run {run_id!r} has ended ({status})"


class NotAwaiting(Conflict):
    """A decision on a run that does not await a human (it runs, or has ended). Carries
    ``run_id`` and ``status``."""

    code = "not_awaiting"
    template = "run {run_id!r} is not awaiting a human ({status})"


class AlreadyDecided(Conflict):
    """The run's request has been decided already; the first decision stands. Carries
    ``run_id`` and the standing ``outcome``."""

    code = "already_decided"
    template = "run {run_id!r} has been decided already ({outcome})"
class EmbedderMismatch(Conflict):
    """A store holds vectors made by another embedding model (or of another dimension)
    than the client's embedder, and vectors of two models are never compared.

    Carries ``store``, ``model`` and ``dimension`` (the client's embedder), and
    ``stored_model`` and ``stored_dimension`` (what the store's vectors were made by).
    Re-embed the store with ``reindex(replace=True)`` to switch models.
    """

    code = "embedder_mismatch"
    template = ("store {store!r} holds vectors of {stored_model!r} ({stored_dimension} "
                "dimensions), not of {model!r} ({dimension} dimensions)")


class InvalidInput(OwnstateError):
    """The request is malformed: a bad name, data that is not JSON, a foreign page token.

    Carries ``field`` (which argument) where one can be named.
    """

    code = "invalid_input"


class LimitExceeded(InvalidInput):
    """A documented size bound was crossed. Carries ``field``, ``limit`` and ``actual``.

    The three bounds most requests meet word their messages through a constructor each,
    so every call says them the same way.
    """

    code = "limit_exceeded"

    @classmethod
    def too_many(cls, things: str, limit: int, actual: int, *, field: str) -> LimitExceeded:
        """``at most {limit} {things}``: more of something in one request than allowed."""
        return cls(f"at most {limit} {things}", field=field, limit=limit, actual=actual)

    @classmethod
    def too_big(cls, what: str, actual: int, limit: int, *, field: str,
                **details: object) -> LimitExceeded:
        """``{what} is {actual} bytes; the limit is {limit}``."""
        return cls(f"{what} is {actual} bytes; the limit is {limit}", field=field, **details,
                   limit=limit, actual=actual)

    @classmethod
    def too_long(cls, what: str, limit: int, actual: int, *, field: str) -> LimitExceeded:
        """``{what} is longer than {limit} chars``."""
        return cls(f"{what} is longer than {limit} chars", field=field, limit=limit,
                   actual=actual)


class PermissionDenied(OwnstateError):
    """The caller's principal lacks the permission the operation needs.

    Raised only where the caller may already see the thing (it holds READ on the store):
    a caller who may not see it gets the same :class:`NotFound` as for something that does
    not exist. Carries ``store`` and ``needed`` (the permission level) where known.
    """

    code = "permission_denied"


class Unauthenticated(PermissionDenied):
    """The request carried no API key, or one that is unknown or revoked."""

    code = "unauthenticated"


class BackendUnavailable(OwnstateError):
    """The datastore could not be reached, or failed in a way that is not the caller's fault.

    Whether the failed write happened is unknown only when the message says so; reads are
    safe to retry.
    """

    code = "backend_unavailable"


class SchemaVersion(OwnstateError):
    """The database schema is not the version this code expects.

    Carries ``found`` and ``expected``. Run ``ownstate migrate`` (or connect with
    migrations allowed) to bring an older schema forward; a newer schema needs newer code.
    """

    code = "schema_version"


class ExtractorFailed(OwnstateError):
    """The extractor that distillation asked for candidate facts gave none: its endpoint
    could not be reached, timed out, answered with an error, or answered something that
    is not the structured output asked for.

    Carries ``reason`` (``unreachable``, ``timeout``, ``status``, ``malformed`` or
    ``refused``) and, for ``status``, the HTTP ``status``. Nothing was written: the
    distillation is recorded as a failed run and a later one reads the same items again.
    """

    code = "extractor_failed"


class MissingExtra(OwnstateError, ImportError):
    """A backend, adapter or the server needs an optional dependency that is not installed.

    Carries ``extra``, the name to install (``pip install 'ownstate[EXTRA]'``), and
    ``module``, the module that could not be imported. It is also an :class:`ImportError`,
    so code that guards an optional import with ``except ImportError`` keeps working.
    """

    code = "missing_extra"
