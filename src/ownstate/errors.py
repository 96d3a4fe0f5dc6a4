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
    │   ├── ActiveRunExists        the session already has a running or awaiting run
    │   ├── LeaseHeld              another owner holds an unexpired lease on the run
    │   ├── StaleLease             a write carried a fencing token older than the run's
    │   └── RunClosed              the run has ended and cannot be changed
    ├── InvalidInput               the request itself is wrong: bad name, bad data, bad token
    │   └── LimitExceeded          a documented size bound was crossed
    ├── PermissionDenied           the caller may see the thing but not do this to it
    │   └── Unauthenticated        no API key, an unknown one, or a revoked one
    ├── BackendUnavailable         the datastore could not be reached or failed mid-call
    ├── SchemaVersion              the database schema is missing, older or newer than this code
    └── MissingExtra               an optional dependency is not installed (also an ImportError)

Errors from database drivers never escape: backends translate them into this tree with
``raise ... from exc`` so the driver's error stays reachable as ``__cause__``.

Each error carries the identifiers it is about as attributes (``store``, ``session_id``,
``item_id``, ``field``, ...) so callers can react without parsing messages. Every
operation that raises leaves stored state exactly as it was before the call.
"""

from __future__ import annotations

__all__ = [
    "ActiveRunExists",
    "AlreadyExists",
    "AssetNotFound",
    "BackendUnavailable",
    "CheckpointNotFound",
    "Conflict",
    "FactNotFound",
    "HasChildren",
    "IdempotencyKeyReused",
    "InvalidInput",
    "ItemNotFound",
    "KeyNotFound",
    "LeaseHeld",
    "LimitExceeded",
    "MissingExtra",
    "NotFound",
    "OwnstateError",
    "PermissionDenied",
    "RunClosed",
    "RunNotFound",
    "SchemaVersion",
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

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, object] = details

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


class SessionNotFound(NotFound):
    """No session with this id in the store. Carries ``store`` and ``session_id``."""

    code = "session_not_found"


class ItemNotFound(NotFound):
    """No item with this id in the session. Carries ``session_id`` and ``item_id``."""

    code = "item_not_found"


class FactNotFound(NotFound):
    """No fact with this id in the memory store. Carries ``fact_id``."""

    code = "fact_not_found"


class RunNotFound(NotFound):
    """No run with this id in the caller's scope. Carries ``run_id``.

    A run that exists but lies outside the scope given (another actor's, another session's)
    raises exactly this, with the same message.
    """

    code = "run_not_found"


class CheckpointNotFound(NotFound):
    """No checkpoint with this id for the run. Carries ``run_id`` and ``checkpoint_id``."""

    code = "checkpoint_not_found"


class AssetNotFound(NotFound):
    """No asset with this id. Carries ``asset_id``."""

    code = "asset_not_found"


class KeyNotFound(NotFound):
    """No API key with this id in the tenant. Carries ``key_id``."""

    code = "key_not_found"


class Conflict(OwnstateError):
    """The request is well-formed but clashes with what is stored."""

    code = "conflict"


class AlreadyExists(Conflict):
    """A caller-chosen name or id is already taken. Carries the clashing ids."""

    code = "already_exists"


class HasChildren(Conflict):
    """A session that has forks cannot be deleted without ``force=True``.

    Carries ``session_id`` and ``children`` (the direct children's ids).
    """

    code = "has_children"


class StoreNotEmpty(Conflict):
    """A store that still holds sessions cannot be deleted without ``force=True``.

    Carries ``store`` and ``sessions`` (how many it holds).
    """

    code = "store_not_empty"


class IdempotencyKeyReused(Conflict):
    """An idempotency key was retried with a different request body.

    Carries ``session_id`` and ``idempotency_key``.
    """

    code = "idempotency_key_reused"


class ActiveRunExists(Conflict):
    """The session already has a run that is running or awaiting a human.

    Carries ``session_id`` and ``run_id`` (the active run). The database enforces this.
    """

    code = "active_run_exists"


class LeaseHeld(Conflict):
    """Another owner holds an unexpired lease on the run.

    Carries ``run_id``, ``owner`` (the holder) and ``expires_at``.
    """

    code = "lease_held"


class StaleLease(Conflict):
    """A write carried a fencing token older than the run's current one: another worker
    has claimed the run since. Carries ``run_id``, ``fencing_token`` (given) and
    ``current`` (the run's)."""

    code = "stale_lease"


class RunClosed(Conflict):
    """The run has ended (done, failed or cancelled) and cannot change. Carries ``run_id``
    and ``status``."""

    code = "run_closed"


class InvalidInput(OwnstateError):
    """The request is malformed: a bad name, data that is not JSON, a foreign page token.

    Carries ``field`` (which argument) where one can be named.
    """

    code = "invalid_input"


class LimitExceeded(InvalidInput):
    """A documented size bound was crossed. Carries ``field``, ``limit`` and ``actual``."""

    code = "limit_exceeded"


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


class MissingExtra(OwnstateError, ImportError):
    """A backend, adapter or the server needs an optional dependency that is not installed.

    Carries ``extra``, the name to install (``pip install 'ownstate[EXTRA]'``), and
    ``module``, the module that could not be imported. It is also an :class:`ImportError`,
    so code that guards an optional import with ``except ImportError`` keeps working.
    """

    code = "missing_extra"
