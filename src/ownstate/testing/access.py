"""Conformance tests for API keys and store grants.

Star-import this module in a test file that provides a ``target`` fixture. Times are
driven by the ``key_clock`` fixture, which stands still until a test moves it, so the
order of keys and the time of a revocation are exact, never measured.

It may touch the public sync API (``ownstate``, ``ownstate.api.access``), ids, the error
tree, the model and the shared fixtures, the backends' capability flags (names only), and
pytest.
"""
# ruff: noqa: F403

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import ownstate
from ownstate import _ids
from ownstate.api import access as _access
from ownstate.errors import (
    AlreadyExists,
    InvalidInput,
    KeyNotFound,
    NotFound,
    PermissionDenied,
    StoreNotFound,
    Unauthenticated,
)
from ownstate.model import ApiKey, Grant

from .fixtures import *
from .fixtures import run_async

Client = ownstate.Client

_START = datetime(2030, 1, 1, 9, 0, 0, 123456, tzinfo=UTC)
_TOKEN_RE = re.compile(r"osk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
KINDS = ("session_store", "memory_store")


@pytest.fixture(autouse=True)
def only_for_operators(request: pytest.FixtureRequest) -> None:
    """These tests manage keys and grants as the database's operator; through a server a
    client is a principal, whose keys and grants the server's own tests cover.

    Only tests that use a backend ask for ``target`` here, so a test of one backend's
    storage, or of no backend at all, is not repeated once per backend."""
    from ownstate.backends import Capability

    if "target" not in request.fixturenames:
        return
    target = request.getfixturevalue("target")
    if not target.has(Capability.OPERATOR):
        pytest.skip(f"the {target.name} backend's clients are principals, not operators "
                    "(Capability.OPERATOR)")


class KeyClock:
    """The time the API stamps keys with: stands still until moved."""

    def __init__(self) -> None:
        self.now = _START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def key_clock(monkeypatch: pytest.MonkeyPatch) -> KeyClock:
    """Controls the clock of the access API (key creation and revocation times)."""
    made = KeyClock()
    monkeypatch.setattr(_ids, "now", made)
    # the access API imports the clock function by name
    monkeypatch.setattr(_access, "now", made)
    return made


def _store(client: Client, kind: str, name: str, owner: str | None = None) -> Any:
    """A new session store or memory store (``kind``)."""
    stores: Any = client.session_stores if kind == "session_store" else client.memory_stores
    return stores.create(name, owner=owner)


def _stores_of(client: Client, kind: str) -> Any:
    return client.session_stores if kind == "session_store" else client.memory_stores


def _secret(token: str) -> str:
    """The secret part of a token (it may itself contain ``_``)."""
    match = _TOKEN_RE.fullmatch(token)
    assert match is not None, token
    return match[2]


def _refusal(token: Any, client: Client) -> str:
    with pytest.raises(Unauthenticated) as err:
        client.api_keys.authenticate(token)
    assert isinstance(err.value, PermissionDenied)
    return str(err.value)


# API keys ----------------------------------------------------------------------------


def test_create_returns_a_token_that_authenticates(client: Client, other_tenant: Client,
                                                   key_clock: KeyClock) -> None:
    key, token = client.api_keys.create("alice")
    match = _TOKEN_RE.fullmatch(token)
    assert match is not None, token
    assert match[1] == key.key_id
    assert key == ApiKey(key_id=key.key_id, tenant="default", principal="alice", admin=False,
                         create_time=_START, revoked_at=None)
    assert client.api_keys.authenticate(token) == key
    # authentication is what tells the tenant: any client finds the key
    assert other_tenant.api_keys.authenticate(token) == key

    admin, admin_token = client.api_keys.create("ops@example.com", admin=True)
    assert admin.admin
    assert admin.key_id != key.key_id
    assert admin_token != token
    assert client.api_keys.authenticate(admin_token) == admin
    # created at the same instant: listed by key id
    assert client.api_keys.list() == sorted([key, admin], key=lambda k: k.key_id)


def test_the_secret_is_never_returned_again(client: Client) -> None:
    key, token = client.api_keys.create("alice")
    secret = _secret(token)
    for shown in (client.api_keys.list()[0], client.api_keys.authenticate(token),
                  client.api_keys.revoke(key.key_id)):
        assert secret not in repr(shown)
        assert hashlib.sha256(secret.encode()).hexdigest() not in repr(shown)


@pytest.mark.parametrize("malformed", [
    "", "osk_", "osk__", "Bearer osk_0123456789abcdef_x", "0123456789abcdef_" + "a" * 43,
    "osk_0123456789ABCDEF_" + "a" * 43, "osk_0123456789abcdef_" + "a" * 42,
    "osk_0123456789abcdef_" + "a" * 44, "osk_0123456789abcdef_" + "a" * 42 + "!",
    None, 42, b"osk_0123456789abcdef_" + b"a" * 43,
])
def test_authenticate_refuses_malformed_tokens(client: Client, malformed: Any) -> None:
    client.api_keys.create("alice")
    _refusal(malformed, client)


def test_authenticate_refuses_unknown_wrong_and_revoked_tokens_alike(
        client: Client, other_tenant: Client, key_clock: KeyClock) -> None:
    key, token = client.api_keys.create("alice")
    doomed, doomed_token = client.api_keys.create("bob")
    key_id, secret = key.key_id, _secret(token)
    other_secret = secrets.token_urlsafe(32)
    unknown_id = "0" * 16 if key_id != "0" * 16 else "1" * 16
    client.api_keys.revoke(doomed.key_id)

    messages = {
        "unknown": _refusal(f"osk_{unknown_id}_{secret}", client),
        "wrong secret": _refusal(f"osk_{key_id}_{other_secret}", client),
        "another key's secret": _refusal(
            f"osk_{key_id}_{_secret(doomed_token)}", client),
        "revoked": _refusal(doomed_token, client),
        "revoked, from another tenant": _refusal(doomed_token, other_tenant),
    }
    # nothing tells a caller whether a key id exists or was revoked
    assert len(set(messages.values())) == 1, messages
    assert client.api_keys.authenticate(token) == key


def test_list_shows_keys_oldest_first_with_revocations(client: Client,
                                                       key_clock: KeyClock) -> None:
    assert client.api_keys.list() == []
    first, _ = client.api_keys.create("alice")
    key_clock.advance(1.5)
    later = [client.api_keys.create(p)[0] for p in ("bob", "carol", "dave")]
    key_clock.advance(0.000001)
    last, _ = client.api_keys.create("erin")
    revoked_at = key_clock.advance(60)
    revoked = client.api_keys.revoke(later[1].key_id)
    assert revoked.revoked_at == revoked_at

    listed = client.api_keys.list()
    # created at the same instant: ordered by key id
    same_instant = sorted(later, key=lambda k: k.key_id)
    assert [k.key_id for k in listed] == [
        first.key_id, *(k.key_id for k in same_instant), last.key_id]
    by_id = {k.key_id: k for k in listed}
    assert by_id[later[1].key_id] == revoked
    assert [k.revoked_at for k in listed if k.key_id != later[1].key_id] == [None] * 4
    assert by_id[first.key_id].create_time == _START
    assert by_id[last.key_id].create_time == _START + timedelta(seconds=1.5, microseconds=1)
    assert {k.principal for k in listed} == {"alice", "bob", "carol", "dave", "erin"}


def test_revoking_twice_keeps_the_first_time(client: Client, key_clock: KeyClock) -> None:
    key, token = client.api_keys.create("alice")
    first_time = key_clock.advance(10)
    revoked = client.api_keys.revoke(key.key_id)
    assert revoked == ApiKey(key.key_id, "default", "alice", False, _START, first_time)
    key_clock.advance(10)
    assert client.api_keys.revoke(key.key_id) == revoked
    assert client.api_keys.list() == [revoked]
    _refusal(token, client)


def test_revoking_an_unknown_or_foreign_key_changes_nothing(
        client: Client, other_tenant: Client, key_clock: KeyClock) -> None:
    key, token = client.api_keys.create("alice")
    theirs, their_token = other_tenant.api_keys.create("mallory")
    unknown = "f" * 16 if key.key_id != "f" * 16 else "e" * 16
    for who, key_id in ((other_tenant, key.key_id), (client, theirs.key_id),
                        (client, unknown)):
        with pytest.raises(KeyNotFound) as err:
            who.api_keys.revoke(key_id)
        assert isinstance(err.value, NotFound)
        assert err.value.details["key_id"] == key_id
    for bad in ("", "xyz", "ABCDEF0123456789", key.key_id + "0", None):
        with pytest.raises(InvalidInput):
            client.api_keys.revoke(bad)  # type: ignore[arg-type]
    assert client.api_keys.list() == [key]
    assert other_tenant.api_keys.list() == [theirs]
    assert client.api_keys.authenticate(token) == key
    assert client.api_keys.authenticate(their_token) == theirs


def test_keys_of_one_tenant_are_invisible_to_another(client: Client, other_tenant: Client,
                                                     key_clock: KeyClock) -> None:
    mine, _ = client.api_keys.create("alice", admin=True)
    assert other_tenant.api_keys.list() == []
    theirs, _ = other_tenant.api_keys.create("alice", admin=True)
    assert theirs.tenant == other_tenant.tenant
    assert client.api_keys.list() == [mine]
    assert other_tenant.api_keys.list() == [theirs]
    other_tenant.api_keys.revoke(theirs.key_id)
    assert client.api_keys.list() == [mine]


@pytest.mark.parametrize("principal", ["", " alice", "has space", "-lead", "x" * 129,
                                       "é", "a/b", None, 7])
def test_create_refuses_bad_principals_and_stores_nothing(client: Client,
                                                          principal: Any) -> None:
    with pytest.raises(InvalidInput):
        client.api_keys.create(principal)
    assert client.api_keys.list() == []


def test_principal_names_at_the_bounds(client: Client) -> None:
    for principal in ("a", "x" * 128, "user:8814", "svc.bot+ci@example.com", "A_b-9"):
        _, token = client.api_keys.create(principal)
        assert client.api_keys.authenticate(token).principal == principal


def test_a_taken_key_id_is_refused_in_any_tenant(target: Any) -> None:
    """The port refuses a key id that exists, whatever the tenant, and keeps the first."""
    first = ApiKey("00112233445566aa", "default", "alice", False, _START)

    async def scenario() -> None:
        async with await target.connect_async() as client:
            backend = client.backend
            await backend.create_api_key(first, "a" * 64)
            clash = ApiKey(first.key_id, "default", "bob", True, _START + timedelta(seconds=1))
            foreign = ApiKey(first.key_id, "tenant-b", "bob", True, _START)
            for taken in (clash, foreign):
                with pytest.raises(AlreadyExists) as err:
                    await backend.create_api_key(taken, "b" * 64)
                assert err.value.details["key_id"] == first.key_id
            assert await backend.find_api_key(first.key_id) == (first, "a" * 64)
            assert await backend.list_api_keys("default") == [first]
            assert await backend.list_api_keys("tenant-b") == []
            assert await backend.find_api_key("00112233445566ab") is None

    run_async(scenario())


# grants ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_grant_revoke_and_list_permissions(client: Client, kind: str) -> None:
    store = _store(client, kind, "shared-store")
    assert store.permissions() == []
    assert store.grant_permission("bob", "write") == Grant(kind, "shared-store", "bob", "WRITE")
    store.grant_permission("alice", "MANAGE")
    store.grant_permission("Alice", "Read")
    # by principal, in code point order, whatever the database's collation
    assert store.permissions() == [Grant(kind, "shared-store", "Alice", "READ"),
                                   Grant(kind, "shared-store", "alice", "MANAGE"),
                                   Grant(kind, "shared-store", "bob", "WRITE")]
    assert store.grant_permission("bob", "READ") == Grant(kind, "shared-store", "bob", "READ")
    store.revoke_permission("alice")
    store.revoke_permission("nobody")  # nothing to take away is not an error
    assert store.permissions() == [Grant(kind, "shared-store", "Alice", "READ"),
                                   Grant(kind, "shared-store", "bob", "READ")]
    again = _stores_of(client, kind).get("shared-store")
    assert again.permissions() == store.permissions()
    store.revoke_permission("Alice")
    store.revoke_permission("bob")
    assert store.permissions() == []


@pytest.mark.parametrize("kind", KINDS)
def test_bad_grants_change_nothing(client: Client, kind: str) -> None:
    store = _store(client, kind, "shared-store", owner="carol")
    store.grant_permission("bob", "WRITE")
    before = store.permissions()
    for principal, level in (("bob", "OWNER"), ("bob", "admin"), ("bob", ""), ("bob", None),
                             ("dave", "ALL"), ("", "READ"), ("has space", "READ"),
                             (None, "READ"), ("x" * 129, "READ")):
        with pytest.raises(InvalidInput):
            store.grant_permission(principal, level)
    for principal in ("", "has space", None):
        with pytest.raises(InvalidInput):
            store.revoke_permission(principal)
    assert store.permissions() == before


@pytest.mark.parametrize("kind", KINDS)
def test_create_with_an_owner_grants_ownership(client: Client, kind: str) -> None:
    store = _store(client, kind, "owned-store", owner="carol")
    assert store.permissions() == [Grant(kind, "owned-store", "carol", "OWNER")]
    store.grant_permission("bob", "READ")
    assert store.permissions() == [Grant(kind, "owned-store", "bob", "READ"),
                                   Grant(kind, "owned-store", "carol", "OWNER")]
    with pytest.raises(InvalidInput):
        _store(client, kind, "other-store", owner="not valid")
    with pytest.raises(StoreNotFound):
        _stores_of(client, kind).get("other-store")
    with pytest.raises(AlreadyExists):
        _store(client, kind, "owned-store", owner="mallory")
    assert store.permissions() == [Grant(kind, "owned-store", "bob", "READ"),
                                   Grant(kind, "owned-store", "carol", "OWNER")]


@pytest.mark.parametrize("kind", KINDS)
def test_the_owner_keeps_ownership(client: Client, kind: str) -> None:
    store = _store(client, kind, "owned-store", owner="carol")
    owned = [Grant(kind, "owned-store", "carol", "OWNER")]
    assert store.grant_permission("carol", "READ") == owned[0]
    store.revoke_permission("carol")
    assert store.permissions() == owned


@pytest.mark.parametrize("kind", KINDS)
def test_deleting_a_store_drops_its_grants(client: Client, kind: str) -> None:
    store = _store(client, kind, "doomed-store", owner="carol")
    store.grant_permission("bob", "WRITE")
    kept = _store(client, kind, "kept-store", owner="carol")
    kept.grant_permission("bob", "READ")
    _stores_of(client, kind).delete("doomed-store")
    reborn = _store(client, kind, "doomed-store")
    assert reborn.permissions() == []
    assert kept.permissions() == [Grant(kind, "kept-store", "bob", "READ"),
                                  Grant(kind, "kept-store", "carol", "OWNER")]
    _stores_of(client, kind).delete("doomed-store")
    owned = _store(client, kind, "doomed-store", owner="dave")
    assert owned.permissions() == [Grant(kind, "doomed-store", "dave", "OWNER")]


def test_deleting_a_session_store_with_sessions_drops_its_grants(client: Client) -> None:
    store = client.session_stores.create("busy-store", owner="carol")
    store.add(actor_id="user:1", session_id="s1")
    store.grant_permission("bob", "WRITE")
    with pytest.raises(ownstate.StoreNotEmpty):
        client.session_stores.delete("busy-store")
    assert len(store.permissions()) == 2  # a refused delete keeps them
    assert client.session_stores.delete("busy-store", force=True) == 1
    assert client.session_stores.create("busy-store").permissions() == []


def test_session_and_memory_store_grants_are_separate(client: Client) -> None:
    sessions = client.session_stores.create("same-name", owner="carol")
    memory = client.memory_stores.create("same-name", owner="dave")
    sessions.grant_permission("bob", "WRITE")
    memory.grant_permission("bob", "READ")
    memory.grant_permission("erin", "MANAGE")
    assert sessions.permissions() == [Grant("session_store", "same-name", "bob", "WRITE"),
                                      Grant("session_store", "same-name", "carol", "OWNER")]
    memory_grants = [Grant("memory_store", "same-name", "bob", "READ"),
                     Grant("memory_store", "same-name", "dave", "OWNER"),
                     Grant("memory_store", "same-name", "erin", "MANAGE")]
    assert memory.permissions() == memory_grants
    sessions.revoke_permission("bob")
    assert memory.permissions() == memory_grants
    client.session_stores.delete("same-name")
    assert memory.permissions() == memory_grants
    assert client.session_stores.create("same-name").permissions() == []
    client.memory_stores.delete("same-name")
    assert client.session_stores.get("same-name").permissions() == []
    assert client.memory_stores.create("same-name").permissions() == []


@pytest.mark.parametrize("kind", KINDS)
def test_another_tenant_sees_no_grants(client: Client, other_tenant: Client,
                                       kind: str) -> None:
    mine = _store(client, kind, "shared-name", owner="carol")
    mine.grant_permission("bob", "WRITE")
    granted = mine.permissions()
    theirs = _store(other_tenant, kind, "shared-name")
    assert theirs.permissions() == []
    theirs.grant_permission("bob", "READ")
    theirs.grant_permission("mallory", "MANAGE")
    theirs.revoke_permission("carol")
    assert mine.permissions() == granted
    _stores_of(other_tenant, kind).delete("shared-name")
    assert mine.permissions() == granted
    assert _store(other_tenant, kind, "shared-name").permissions() == []


def test_a_principals_grants_across_stores(target: Any) -> None:
    """The port lists every grant one principal holds in the tenant, by kind and store."""

    async def scenario() -> None:
        async with await target.connect_async() as client:
            other = await target.connect_async(tenant="tenant-b")
            try:
                for name in ("b-store", "a-store", "c-store"):
                    await client.session_stores.create(name, owner="carol")
                    await client.memory_stores.create(name)
                for store in (await client.memory_stores.get("c-store"),
                              await client.memory_stores.get("a-store")):
                    await store.grant_permission("carol", "READ")
                await (await client.session_stores.get("a-store")).grant_permission(
                    "bob", "WRITE")
                await (await other.session_stores.create("a-store", owner="dave")
                       ).grant_permission("carol", "MANAGE")
                backend = client.backend
                assert await backend.list_principal_grants("default", "carol") == [
                    Grant("memory_store", "a-store", "carol", "READ"),
                    Grant("memory_store", "c-store", "carol", "READ"),
                    Grant("session_store", "a-store", "carol", "OWNER"),
                    Grant("session_store", "b-store", "carol", "OWNER"),
                    Grant("session_store", "c-store", "carol", "OWNER")]
                assert await backend.list_principal_grants("default", "bob") == [
                    Grant("session_store", "a-store", "bob", "WRITE")]
                assert await backend.list_principal_grants("default", "nobody") == []
                assert await other.backend.list_principal_grants("tenant-b", "carol") == [
                    Grant("session_store", "a-store", "carol", "MANAGE")]

                await (await client.memory_stores.get("c-store")).revoke_permission("carol")
                await client.session_stores.delete("b-store")
                assert await backend.list_principal_grants("default", "carol") == [
                    Grant("memory_store", "a-store", "carol", "READ"),
                    Grant("session_store", "a-store", "carol", "OWNER"),
                    Grant("session_store", "c-store", "carol", "OWNER")]
                assert await backend.get_grant("default", "session_store", "a-store",
                                               "bob") == "WRITE"
                assert await backend.get_grant("default", "session_store", "b-store",
                                               "carol") is None
                assert await backend.drop_grants("default", "session_store", "a-store") == 2
                assert await backend.drop_grants("default", "session_store", "a-store") == 0
                assert await backend.list_principal_grants("default", "bob") == []
                assert await other.backend.list_principal_grants("tenant-b", "carol") == [
                    Grant("session_store", "a-store", "carol", "MANAGE")]
            finally:
                await other.close()

    run_async(scenario())


# the async client --------------------------------------------------------------------


def test_async_client_keys_and_grants(target: Any, key_clock: KeyClock) -> None:
    async def scenario() -> None:
        async with await target.connect_async() as client:
            key, token = await client.api_keys.create("alice", admin=True)
            assert await client.api_keys.authenticate(token) == key
            assert await client.api_keys.list() == [key]
            store = await client.session_stores.create("async-store", owner="alice")
            memory = await client.memory_stores.create("async-store")
            await memory.grant_permission("bob", "read")
            assert await store.permissions() == [
                Grant("session_store", "async-store", "alice", "OWNER")]
            assert await memory.permissions() == [
                Grant("memory_store", "async-store", "bob", "READ")]
            key_clock.advance(1)
            assert (await client.api_keys.revoke(key.key_id)).revoked_at == key_clock.now

    run_async(scenario())
    with target.connect() as sync_client:
        (key,) = sync_client.api_keys.list()
        assert key.revoked_at == _START + timedelta(seconds=1)
        assert [g.principal for g in
                sync_client.memory_stores.get("async-store").permissions()] == ["bob"]


def test_errors_are_in_the_tree() -> None:
    assert issubclass(KeyNotFound, NotFound)
    assert issubclass(Unauthenticated, PermissionDenied)
    assert KeyNotFound.code != Unauthenticated.code
