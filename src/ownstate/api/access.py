"""API keys and store grants: who may reach the HTTP server, and what each store opens.

A key's secret is shown once, when the key is made; only its SHA-256 digest is stored (the
secret is 256 random bits, so a fast digest is as strong as a slow one) and checks compare
digests in constant time. Grants are records: the library itself trusts its caller and
checks none of them; the HTTP server checks them on every request, asking
:meth:`AsyncApiKeys.permission_of` and :meth:`AsyncApiKeys.grants_of`.

It may touch the backend's key and grant operations through its scope, nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import datetime
from typing import ClassVar

from .._ids import now
from ..errors import InvalidInput, Unauthenticated
from ..limits import KEY_ID_RE, PRINCIPAL_RE, SECRET_DIGEST_RE
from ..model import PERMISSION_LEVELS, ApiKey, Grant, MemoryStoreRecord, SessionStoreRecord
from ._scope import Scope

__all__ = ["STORE_KINDS", "TOKEN_PREFIX", "AsyncApiKeys", "StoreHandle", "grant_permission",
           "new_key", "parse_token", "permission_level", "permissions", "principal_name",
           "revoke_permission"]

#: Every API key starts with this, so a leaked one is easy to find in logs and scanners.
TOKEN_PREFIX = "osk_"
#: The one message of every refused key, whatever was wrong with it (absent, malformed,
#: unknown, wrong secret, revoked), so that a refusal tells nothing about which it was.
UNKNOWN_KEY = "send a live API key as 'Authorization: Bearer osk_...'"
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{43}")
#: The kinds of store a grant can be on.
STORE_KINDS = ("session_store", "memory_store")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def principal_name(principal: str) -> str:
    """``principal`` if it is 1-128 chars of ``[A-Za-z0-9_.@:+-]``; else InvalidInput."""
    if not isinstance(principal, str) or not PRINCIPAL_RE.fullmatch(principal):
        raise InvalidInput("principal must be 1-128 chars of [A-Za-z0-9_.@:+-]",
                           field="principal")
    return principal


def new_key(tenant: str, principal: str, admin: bool) -> ApiKey:
    """A key of ``tenant`` for ``principal``, with a fresh random id, not yet stored.

    Raises :class:`~ownstate.errors.InvalidInput` (bad principal name).
    """
    return ApiKey(key_id=secrets.token_hex(8), tenant=tenant,
                  principal=principal_name(principal), admin=bool(admin), create_time=now())


def parse_token(token: str) -> tuple[str, str]:
    """``(key_id, secret)`` of a well-formed token; Unauthenticated otherwise."""
    if isinstance(token, str) and token.startswith(TOKEN_PREFIX):
        key_id, _, secret = token[len(TOKEN_PREFIX):].partition("_")
        if KEY_ID_RE.fullmatch(key_id) and _SECRET_RE.fullmatch(secret):
            return key_id, secret
    raise Unauthenticated(UNKNOWN_KEY)


def permission_level(level: str) -> str:
    """``level`` upper-cased if it is READ, WRITE or MANAGE; else InvalidInput."""
    normal = level.upper() if isinstance(level, str) else ""
    if normal not in PERMISSION_LEVELS:
        raise InvalidInput(f"permission must be one of {list(PERMISSION_LEVELS)}",
                           field="permission")
    return normal


class AsyncApiKeys:
    """The tenant's API keys for the HTTP server: ``client.api_keys``."""

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    async def create(self, principal: str, *, admin: bool = False) -> tuple[ApiKey, str]:
        """A new key for ``principal`` in this tenant, and its token (``osk_...``).

        The token is returned only here; store it now. Raises
        :class:`~ownstate.errors.InvalidInput` (bad principal name).
        """
        s = self._scope
        secret = secrets.token_urlsafe(32)
        # A remote server makes the key id itself: the token carries the id it returns.
        key = await s.backend.create_api_key(new_key(s.tenant, principal, admin),
                                             _digest(secret))
        return key, f"{TOKEN_PREFIX}{key.key_id}_{secret}"

    async def register(self, principal: str, secret_sha256: str, *,
                       admin: bool = False) -> ApiKey:
        """A new key for ``principal`` whose secret the caller made and keeps: only its
        digest, ``secret_sha256`` (64 lowercase hex digits), is given and stored. The key's
        token is ``osk_{key_id}_{secret}``, with the ``key_id`` returned here.

        Raises :class:`~ownstate.errors.InvalidInput` (bad principal name, not a SHA-256
        hex digest).
        """
        s = self._scope
        if not isinstance(secret_sha256, str) or not SECRET_DIGEST_RE.fullmatch(secret_sha256):
            raise InvalidInput("secret_sha256 must be 64 lowercase hex digits",
                               field="secret_sha256")
        return await s.backend.create_api_key(new_key(s.tenant, principal, admin),
                                              secret_sha256)

    async def permission_of(self, principal: str, kind: str, store: str) -> str | None:
        """The level ``principal`` holds on a store of ``kind`` (``"session_store"`` or
        ``"memory_store"``): ``READ``, ``WRITE``, ``MANAGE`` or ``OWNER``; None for none.

        A name no store can have (even ``""``) holds nothing and is looked up like any
        other, so the cost of an answer never tells whether the store exists.
        Raises :class:`~ownstate.errors.InvalidInput` (bad principal or kind).
        """
        s = self._scope
        name = principal_name(principal)
        if kind not in STORE_KINDS:
            raise InvalidInput(f"kind must be one of {list(STORE_KINDS)}", field="kind")
        if not isinstance(store, str):
            raise InvalidInput("store must be a string", field="store")
        return await s.backend.get_grant(s.tenant, kind, store, name)

    async def grants_of(self, principal: str) -> list[Grant]:
        """Every grant ``principal`` holds in this tenant, ownerships included.

        Raises :class:`~ownstate.errors.InvalidInput` (bad principal name).
        """
        s = self._scope
        return await s.backend.list_principal_grants(s.tenant, principal_name(principal))

    async def list(self) -> list[ApiKey]:
        """Every key of this tenant, revoked ones included, oldest first."""
        s = self._scope
        return await s.backend.list_api_keys(s.tenant)

    async def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key: every request carrying it is refused from now on.

        Revoking twice is harmless. Raises :class:`~ownstate.errors.KeyNotFound`.
        """
        s = self._scope
        if not isinstance(key_id, str) or not KEY_ID_RE.fullmatch(key_id):
            raise InvalidInput("key_id must be 16 lowercase hex digits", field="key_id")
        return await s.backend.revoke_api_key(s.tenant, key_id, now())

    async def authenticate(self, token: str) -> ApiKey:
        """The live key this token belongs to, in any tenant.

        Raises :class:`~ownstate.errors.Unauthenticated` for a malformed, unknown or revoked
        token, with one message for all three.
        """
        key_id, secret = parse_token(token)
        found = await self._scope.backend.find_api_key(key_id)
        expected = found[1] if found is not None else _digest("")
        matches = hmac.compare_digest(_digest(secret), expected)
        if found is None or not matches or found[0].revoked_at is not None:
            raise Unauthenticated(UNKNOWN_KEY)
        return found[0]


async def grant_permission(scope: Scope, kind: str, store: str, principal: str,
                           level: str) -> Grant:
    """Record ``principal``'s ``level`` on a store that the caller has already found: one
    write that keeps an owner's ownership (the owner already holds everything a grant
    could give)."""
    name, wanted = principal_name(principal), permission_level(level)
    held = await scope.backend.set_grant(scope.tenant, kind, store, name, wanted)
    return Grant(kind, store, name, held or wanted)


async def revoke_permission(scope: Scope, kind: str, store: str, principal: str) -> None:
    """Take ``principal``'s grant away; an owner's ownership is not a grant and stays."""
    await scope.backend.set_grant(scope.tenant, kind, store, principal_name(principal), None)


async def permissions(scope: Scope, kind: str, store: str) -> list[Grant]:
    return await scope.backend.list_grants(scope.tenant, kind, store)


class StoreHandle:
    """What a session store's handle and a memory store's share: the store's name, when it
    was made, and the grants on it. A subclass names its grant kind in ``_kind``."""

    _kind: ClassVar[str]

    def __init__(self, scope: Scope, record: SessionStoreRecord | MemoryStoreRecord) -> None:
        self._scope = scope
        self._record = record

    @property
    def name(self) -> str:
        """The store's name."""
        return self._record.name

    @property
    def create_time(self) -> datetime:
        """When the store was created."""
        return self._record.create_time

    async def grant_permission(self, principal: str, permission: str) -> Grant:
        """Give ``principal`` ``permission`` (READ, WRITE or MANAGE) on this store, replacing
        what it had. The HTTP server enforces grants; the library records them.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        return await grant_permission(self._scope, self._kind, self.name, principal, permission)

    async def revoke_permission(self, principal: str) -> None:
        """Take away ``principal``'s grant on this store (its ownership stays).

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        await revoke_permission(self._scope, self._kind, self.name, principal)

    async def permissions(self) -> list[Grant]:
        """Every grant on this store, the owner's included, by principal."""
        return await permissions(self._scope, self._kind, self.name)
