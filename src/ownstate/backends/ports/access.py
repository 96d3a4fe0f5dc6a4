"""The access port: API keys and the grants that open session and memory stores.

Keys and grants live in the same database as the state they guard, so every server
replica sharing that database agrees on who may do what. A store's grants are made and
dropped together with the store: ``create_store`` (and ``create_memory_store``) writes
the owner's ``OWNER`` grant in its own transaction, and ``delete_store`` (and
``delete_memory_store``) drops every grant in its own, so no store is ever without its
owner, nor a grant left on a store that is gone.

It may touch the model alone, and no datastore: each backend implements it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from ...model import ApiKey, Grant

__all__ = ["AccessPort", "StoreKind"]

#: What a grant opens: ``"session_store"`` or ``"memory_store"``.
StoreKind = str


class AccessPort(ABC):
    """Storage for API keys (by their secret's hash) and store grants."""

    # API keys --------------------------------------------------------------------------

    @abstractmethod
    async def create_api_key(self, key: ApiKey, secret_hash: str) -> ApiKey:
        """Store a new key with the SHA-256 hex digest of its secret; returns the key as
        stored. A database stores ``key`` as it is and raises AlreadyExists when
        ``key.key_id`` is taken (in any tenant); a remote server makes the key id itself
        and returns the key with that id."""

    @abstractmethod
    async def find_api_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        """The key with this id and its secret's hash, revoked or not; None when unknown.

        The one lookup without a tenant: authentication is what tells the tenant.
        """

    @abstractmethod
    async def list_api_keys(self, tenant: str) -> list[ApiKey]:
        """The tenant's keys, revoked ones included, oldest first."""

    @abstractmethod
    async def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> ApiKey:
        """Mark the key revoked (once: revoking again keeps the first time) and return it.

        Raises KeyNotFound, also for another tenant's key.
        """

    # grants ----------------------------------------------------------------------------

    @abstractmethod
    async def set_grant(self, tenant: str, kind: StoreKind, store: str, principal: str,
                        level: str | None) -> str | None:
        """Give ``principal`` exactly ``level`` (READ, WRITE or MANAGE) on the store,
        replacing what it had, or with None take its grant away; returns the level the
        principal holds afterwards.

        An ``OWNER`` is left as it is, checked in the same step as the write: ownership is
        given only by creating the store and goes only with it. Does not check that the
        store exists (a grant left on a store deleted meanwhile goes when a store of that
        name is created).
        """

    @abstractmethod
    async def get_grant(self, tenant: str, kind: StoreKind, store: str,
                        principal: str) -> str | None:
        """The principal's level on the store, or None."""

    @abstractmethod
    async def list_grants(self, tenant: str, kind: StoreKind, store: str) -> list[Grant]:
        """Every grant on the store, ordered by principal."""

    @abstractmethod
    async def list_principal_grants(self, tenant: str, principal: str) -> list[Grant]:
        """Every grant ``principal`` holds in the tenant, ordered by (kind, store)."""

    @abstractmethod
    async def drop_grants(self, tenant: str, kind: StoreKind, store: str) -> int:
        """Remove every grant on the store (when it is deleted); returns how many."""
