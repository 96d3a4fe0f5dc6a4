"""API keys and grants conformance, run over every backend in conftest.TARGETS, and what
each backend keeps underneath: only a digest of each secret; on PostgreSQL, row-level
security that still lets a key be found before its tenant is known; on Redis, a create
that stopped half way."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ownstate
from ownstate.testing import Suite

ownstate_suite = Suite("access")


def _secret(token: str) -> str:
    """What follows ``osk_``, the key id and ``_`` (the secret may itself hold ``_``)."""
    return token[len("osk_") + 17:]


def test_sqlite_keeps_a_digest_of_each_secret_and_the_grants(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    with ownstate.connect(f"sqlite:///{db}") as client:
        key, token = client.api_keys.create("alice", admin=True)
        client.session_stores.create("chats", owner="alice").grant_permission("bob", "READ")
        client.memory_stores.create("chats").grant_permission("bob", "WRITE")
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT key_id, tenant, principal, admin, revoked_at, secret_hash "
                            "FROM api_keys").fetchall()
        grants = conn.execute("SELECT tenant, kind, store, principal, level FROM store_grants "
                              "ORDER BY kind, principal").fetchall()
    finally:
        conn.close()
    assert rows == [(key.key_id, "default", "alice", 1, None,
                     hashlib.sha256(_secret(token).encode()).hexdigest())]
    assert _secret(token).encode() not in db.read_bytes()
    assert grants == [("default", "memory_store", "chats", "bob", "WRITE"),
                      ("default", "session_store", "chats", "alice", "OWNER"),
                      ("default", "session_store", "chats", "bob", "READ")]


# PostgreSQL ----------------------------------------------------------------------------

POSTGRES_URL = os.environ.get("OWNSTATE_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")


def _as_role(role: str, schema: str) -> str:
    scheme, rest = POSTGRES_URL.split("://", 1)
    url = f"{scheme}://{role}@{rest.split('@', 1)[-1]}"
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


@pytest.fixture
def pg_roles() -> Iterator[tuple[Any, str, str, str]]:
    """``(admin connection, schema, owner role, runtime role)``: a schema migrated by an
    owner role and used by a runtime role, neither of which bypasses row-level security."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if "postgres" in os.environ.get("OWNSTATE_REQUIRE_BACKENDS", ""):
            raise
        pytest.skip(f"PostgreSQL is unreachable ({exc})")
    suffix = uuid.uuid4().hex[:8]
    schema, owner, runtime = f"t_{suffix}", f"keys_owner_{suffix}", f"keys_app_{suffix}"
    try:
        admin.execute(f"CREATE ROLE {owner} LOGIN")
        admin.execute(f"CREATE ROLE {runtime} LOGIN")
    except psycopg.errors.InsufficientPrivilege:
        admin.close()
        pytest.skip("the test role may not create roles")
    admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {owner}")
    try:
        with ownstate.connect(_as_role(owner, schema)):
            pass
        with psycopg.connect(_as_role(owner, schema).split("?")[0], autocommit=True) as conn:
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {runtime}")
            conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
                         f"{schema} TO {runtime}")
            conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {runtime}")
        yield admin, schema, owner, runtime
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for role in (runtime, owner):
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
        admin.close()


def test_postgres_finds_keys_under_row_level_security(
        pg_roles: tuple[Any, str, str, str]) -> None:
    import psycopg

    admin, schema, _, runtime = pg_roles
    url = _as_role(runtime, schema)
    tokens = {}
    for tenant in ("tenant-a", "tenant-b"):
        with ownstate.connect(url, tenant=tenant, migrate=False) as client:
            _, tokens[tenant] = client.api_keys.create(f"user-of-{tenant}")
            client.session_stores.create("chats", owner="carol").grant_permission("bob", "READ")
    with ownstate.connect(url, tenant="tenant-c", migrate=False) as client:
        found = {t: client.api_keys.authenticate(token) for t, token in tokens.items()}
        assert {t: k.tenant for t, k in found.items()} == {"tenant-a": "tenant-a",
                                                           "tenant-b": "tenant-b"}
        assert client.api_keys.list() == []
        with pytest.raises(ownstate.KeyNotFound):
            client.api_keys.revoke(found["tenant-a"].key_id)
    assert admin.execute(f"SELECT count(*) FROM {schema}.api_keys").fetchone() == (2,)

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        key_b = found["tenant-b"].key_id

        def count(table: str, tenant: str | None) -> int:
            with conn.transaction():
                if tenant is not None:
                    conn.execute("SELECT set_config('ownstate.tenant', %s, true)", (tenant,))
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                assert row is not None
                return int(row[0])

        assert [count("api_keys", t) for t in (None, "tenant-a", "tenant-c")] == [0, 1, 0]
        assert [count("store_grants", t) for t in (None, "tenant-a", "tenant-c")] == [0, 2, 0]
        with conn.transaction():
            conn.execute("SELECT set_config('ownstate.tenant', 'tenant-a', true)")
            rows = conn.execute("SELECT tenant FROM find_api_key(%s)", (key_b,)).fetchall()
            assert rows == [("tenant-b",)]
            # the lookup shows its one row only while it runs
            assert conn.execute("SELECT key_id FROM api_keys WHERE tenant = 'tenant-b'"
                                ).fetchall() == []
        with conn.transaction():
            # a key found by id still cannot be written outside the current tenant
            conn.execute("SELECT set_config('ownstate.tenant', 'tenant-a', true), "
                         "set_config('ownstate.api_key', %s, true)", (key_b,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute("UPDATE api_keys SET revoked_at = now() WHERE key_id = %s",
                             (key_b,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute("INSERT INTO api_keys VALUES ('0000000000000000', 'tenant-b', "
                             "'mallory', true, now(), NULL, 'x')")
    with ownstate.connect(url, tenant="tenant-b", migrate=False) as client:
        assert client.api_keys.authenticate(tokens["tenant-b"]).revoked_at is None


# Redis ---------------------------------------------------------------------------------

REDIS_URL = os.environ.get("OWNSTATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The test Redis under a key prefix of this test's own (deleted afterwards)."""
    redis = pytest.importorskip("redis")
    server = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        server.ping()
    except redis.RedisError as exc:
        server.close()
        if "redis" in os.environ.get("OWNSTATE_REQUIRE_BACKENDS", ""):
            raise
        pytest.skip(f"Redis is unreachable ({exc})")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}prefix={prefix}"
    keys = list(server.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        server.delete(*keys)
    server.close()


def test_redis_key_layout(redis_url: str) -> None:
    """Keys are found by id in a slot of their own; listings and grants by tenant."""
    import redis

    prefix = redis_url.rsplit("prefix=", 1)[1]
    with ownstate.connect(redis_url, tenant="acme") as client:
        key, _ = client.api_keys.create("alice")
        client.session_stores.create("chats", owner="alice")
        client.memory_stores.create("facts", owner="alice")
    server = redis.Redis.from_url(REDIS_URL)
    try:
        keys = {k.decode() for k in server.scan_iter(match=f"{prefix}:*")}
        expected = {f"{prefix}:{{!key/{key.key_id}}}:key", f"{prefix}:{{acme}}:api-keys",
                    f"{prefix}:{{acme}}:grants:session_store:chats",
                    f"{prefix}:{{acme}}:grants:memory_store:facts",
                    f"{prefix}:{{acme}}:grants-of:alice"}
        assert expected <= keys
        record = server.hgetall(f"{prefix}:{{!key/{key.key_id}}}:key")
        assert record[b"tenant"] == b"acme"
        assert b"rv" not in record
    finally:
        server.close()


def test_redis_skips_the_index_entry_of_an_interrupted_create(redis_url: str) -> None:
    import redis

    prefix = redis_url.rsplit("prefix=", 1)[1]
    with ownstate.connect(redis_url) as client:
        key, token = client.api_keys.create("alice")
        server = redis.Redis.from_url(REDIS_URL)
        try:
            # the first step of a create, without the second
            server.zadd(f"{prefix}:{{default}}:api-keys", {"00000000000000ff": 1})
        finally:
            server.close()
        assert client.api_keys.list() == [key]
        assert client.api_keys.authenticate(token) == key
        with pytest.raises(ownstate.KeyNotFound):
            client.api_keys.revoke("00000000000000ff")


def test_redis_grants_and_their_index_change_together(redis_url: str) -> None:
    """A principal's grants are found through an index kept in the same slot, so the two
    never disagree: taking grants away, one by one or with their store, empties it."""
    import redis

    prefix = redis_url.rsplit("prefix=", 1)[1]
    with ownstate.connect(redis_url) as client:
        chats = client.session_stores.create("chats", owner="alice")
        client.memory_stores.create("chats", owner="alice")
        chats.grant_permission("bob", "READ")
        server = redis.Redis.from_url(REDIS_URL)
        try:
            assert server.smembers(f"{prefix}:{{default}}:grants-of:alice") == {
                b"session_store\x00chats", b"memory_store\x00chats"}
            chats.revoke_permission("bob")
            client.session_stores.delete("chats")
            client.memory_stores.delete("chats")
            assert list(server.scan_iter(match=f"{prefix}:*grants*")) == []
        finally:
            server.close()
