"""ownstate: the system of record for AI-agent state, in a schema the application owns.

>>> import ownstate
>>> client = ownstate.connect("memory://")
>>> store = client.session_stores.create("support-agent-sessions")
>>> session = store.add(actor_id="customer-123", session_id="case-456")
>>> _ = session.append_items([{"type": "message", "role": "user", "content": "I need help"}])
>>> [item.data["content"] for item in session.list_items(order_by="create_time asc")]
['I need help']
>>> client.close()
"""

from __future__ import annotations

from .api import (
    AsyncClient,
    AsyncPager,
    AsyncSession,
    AsyncSessionStore,
    AsyncSessionStores,
    Client,
    Session,
    SessionStore,
    SessionStores,
    connect,
    connect_async,
)
from .errors import (
    AlreadyExists,
    BackendUnavailable,
    Conflict,
    HasChildren,
    IdempotencyKeyReused,
    InvalidInput,
    ItemNotFound,
    LimitExceeded,
    NotFound,
    OwnstateError,
    SchemaVersion,
    SessionNotFound,
    StoreNotEmpty,
    StoreNotFound,
)
from .limits import Limits
from .model import Item, Page, SessionRecord, SessionStoreRecord

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "AsyncClient",
    "AsyncPager",
    "AsyncSession",
    "AsyncSessionStore",
    "AsyncSessionStores",
    "BackendUnavailable",
    "Client",
    "Conflict",
    "HasChildren",
    "IdempotencyKeyReused",
    "InvalidInput",
    "Item",
    "ItemNotFound",
    "LimitExceeded",
    "Limits",
    "NotFound",
    "OwnstateError",
    "Page",
    "SchemaVersion",
    "Session",
    "SessionNotFound",
    "SessionRecord",
    "SessionStore",
    "SessionStoreRecord",
    "SessionStores",
    "StoreNotEmpty",
    "StoreNotFound",
    "connect",
    "connect_async",
]
