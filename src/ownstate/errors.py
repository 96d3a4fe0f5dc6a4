"""Every error ownstate raises, as one tree.

::

    OwnstateError                  base of everything below; never raised itself
    ├── NotFound                   the thing does not exist in this tenant (or is not yours)
    │   ├── StoreNotFound
    │   ├── SessionNotFound
    │   └── ItemNotFound
    ├── Conflict                   the request is valid but clashes with what is stored
    │   ├── AlreadyExists          a caller-chosen name or id is taken
    │   ├── HasChildren            a session with forks was deleted without force=True
    │   ├── StoreNotEmpty          a store with sessions was deleted without force=True
    │   └── IdempotencyKeyReused   a retried key arrived with a different request
    ├── InvalidInput               the request itself is wrong: bad name, bad data, bad token
    │   └── LimitExceeded          a documented size bound was crossed
    ├── BackendUnavailable         the datastore could not be reached or failed mid-call
    └── SchemaVersion              the database schema is missing, older or newer than this code

Errors from database drivers never escape: backends translate them into this tree with
``raise ... from exc`` so the driver's error stays reachable as ``__cause__``.

Each error carries the identifiers it is about as attributes (``store``, ``session_id``,
``item_id``, ``field``, ...) so callers can react without parsing messages. Every
operation that raises leaves stored state exactly as it was before the call.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExists",
    "BackendUnavailable",
    "Conflict",
    "HasChildren",
    "IdempotencyKeyReused",
    "InvalidInput",
    "ItemNotFound",
    "LimitExceeded",
    "NotFound",
    "OwnstateError",
    "SchemaVersion",
    "SessionNotFound",
    "StoreNotEmpty",
    "StoreNotFound",
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


class InvalidInput(OwnstateError):
    """The request is malformed: a bad name, data that is not JSON, a foreign page token.

    Carries ``field`` (which argument) where one can be named.
    """

    code = "invalid_input"


class LimitExceeded(InvalidInput):
    """A documented size bound was crossed. Carries ``field``, ``limit`` and ``actual``."""

    code = "limit_exceeded"


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
