"""What is particular to the PostgreSQL backend: schemas and migrations, row-level security
under a runtime role, the run invariants under 16 racing connections, and lost
connections (retried when safe, never losing an acknowledged write).

Every test uses a schema of its own in the database of ``OWNSTATE_TEST_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``), dropped afterwards. The role in
that URL must be able to create schemas and roles; the tests skip when the server is
unreachable, unless ``OWNSTATE_REQUIRE_BACKENDS`` names postgres.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import ownstate
from ownstate.backends.base import NewItem
from ownstate.errors import (
    ActiveRunExists,
    BackendUnavailable,
    InvalidInput,
    LeaseHeld,
    SchemaVersion,
)
from ownstate.model import Item, Lease, PendingWrite, Run, build_item, build_items

POSTGRES_URL = os.environ.get("OWNSTATE_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
REQUIRED = "postgres" in os.environ.get("OWNSTATE_REQUIRE_BACKENDS", "")

try:
    import psycopg
except ImportError:  # pragma: no cover - only without the postgres extra
    if REQUIRED:
        raise
    pytest.skip("psycopg is not installed (the postgres extra)", allow_module_level=True)

from ownstate.backends.postgres import PostgresBackend  # noqa: E402
from ownstate.backends.postgres import schema as pg_schema  # noqa: E402
from ownstate.backends.postgres._core import Cursor  # noqa: E402

_BASE = datetime(2030, 1, 1, tzinfo=UTC)


def _with(url: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _as_role(role: str) -> str:
    """The test URL with its user replaced by ``role`` (trust or peer auth is assumed)."""
    scheme, rest = POSTGRES_URL.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[-1]}"


@pytest.fixture
def admin() -> Iterator[Any]:
    """An autocommit connection as the test URL's role."""
    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if REQUIRED:
            pytest.fail(f"PostgreSQL is unreachable ({exc}), and "
                        "OWNSTATE_REQUIRE_BACKENDS requires it")
        pytest.skip(f"PostgreSQL is unreachable ({exc})")
    yield conn
    conn.close()


@pytest.fixture
def schema(admin: Any) -> Iterator[str]:
    """A schema name nobody uses yet; dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
def url(schema: str) -> str:
    return _with(POSTGRES_URL, schema=schema)


def _exists(admin: Any, schema: str) -> bool:
    return admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                         (schema,)).fetchone() is not None


async def _backend(schema: str, **kwargs: Any) -> PostgresBackend:
    backend = PostgresBackend(POSTGRES_URL, schema=schema, **kwargs)
    await backend.setup(migrate=True)
    return backend


def _item(n: int, **data: Any) -> NewItem:
    import json

    return NewItem(item_id=f"itm_{uuid.uuid4().hex}", data_json=json.dumps({"n": n, **data}),
                   format="ownstate.message", role="user", type="message", tool_name=None,
                   model=None, in_tokens=None, out_tokens=None)


# schemas and migrations ----------------------------------------------------------------


def test_verify_only_on_an_empty_schema_raises_and_creates_nothing(admin: Any, schema: str,
                                                                   url: str) -> None:
    with pytest.raises(SchemaVersion) as err:
        ownstate.connect(url, migrate=False)
    assert (err.value.found, err.value.expected) == (0, pg_schema.SCHEMA_VERSION)
    assert not _exists(admin, schema)


def test_migrations_fill_only_the_named_schema(admin: Any, schema: str, url: str) -> None:
    def outside() -> set[tuple[str, str]]:
        """What the default schema holds, where a migration that ignored ours would go."""
        return set(admin.execute(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public'").fetchall())

    before = outside()
    with ownstate.connect(url) as client:
        assert client.check() == (pg_schema.SCHEMA_VERSION, pg_schema.SCHEMA_VERSION)
    assert outside() == before
    versions = admin.execute(f"SELECT version FROM {schema}.ownstate_schema ORDER BY 1")
    assert [v for (v,) in versions] == [m.version for m in pg_schema.MIGRATIONS]
    with ownstate.connect(url, migrate=False) as client:  # verify-only now passes
        assert client.check() == (pg_schema.SCHEMA_VERSION, pg_schema.SCHEMA_VERSION)


def test_a_failing_migration_leaves_nothing_behind(admin: Any, schema: str, url: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import ownstate.backends.postgres as package

    broken = pg_schema.Migration(pg_schema.SCHEMA_VERSION + 1, "broken",
                                 ("CREATE TABLE half_done (x int)", "CREATE TABLE (oops"))
    monkeypatch.setattr(package, "MIGRATIONS", (*pg_schema.MIGRATIONS, broken))
    monkeypatch.setattr(package, "SCHEMA_VERSION", broken.version)
    with pytest.raises(BackendUnavailable):
        ownstate.connect(url)
    assert not _exists(admin, schema)  # every migration ran in the one transaction


def test_concurrent_migrators_apply_each_migration_once(admin: Any, schema: str,
                                                        url: str) -> None:
    barrier = threading.Barrier(6)
    failures: list[BaseException] = []

    def migrate() -> None:
        try:
            barrier.wait(timeout=30)
            ownstate.connect(url).close()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    rows = admin.execute(f"SELECT version, count(*) FROM {schema}.ownstate_schema "
                         "GROUP BY version ORDER BY version").fetchall()
    assert rows == [(m.version, 1) for m in pg_schema.MIGRATIONS]


def test_a_newer_schema_is_refused(admin: Any, schema: str, url: str) -> None:
    ownstate.connect(url).close()
    admin.execute(f"INSERT INTO {schema}.ownstate_schema (version, description) "
                  "VALUES (%s, 'from the future')", (pg_schema.SCHEMA_VERSION + 1,))
    for migrate in (True, False):
        with pytest.raises(SchemaVersion) as err:
            ownstate.connect(url, migrate=migrate)
        assert err.value.found == pg_schema.SCHEMA_VERSION + 1


def test_schemas_share_a_database_without_seeing_each_other(admin: Any, schema: str) -> None:
    other = f"{schema}_b"
    try:
        with ownstate.connect(_with(POSTGRES_URL, schema=schema)) as first, \
                ownstate.connect(_with(POSTGRES_URL, schema=other)) as second:
            first.session_stores.create("only-in-first")
            assert [s.name for s in second.session_stores.list()] == []
            second.session_stores.create("only-in-second")
            assert [s.name for s in first.session_stores.list()] == ["only-in-first"]
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {other} CASCADE")


def test_schema_is_plain_queryable_sql(admin: Any, schema: str, url: str) -> None:
    with ownstate.connect(url) as client:
        session = client.session_stores.create("support").add(actor_id="u1", session_id="s1")
        session.append_items([
            {"role": "user", "content": "hi"},
            {"type": "function_call", "name": "refund", "arguments": "{}", "call_id": "c"},
        ])
    rows = admin.execute(
        f"SELECT session_id, seq, role, type, tool_name, data->>'content' "
        f"FROM {schema}.session_items WHERE tenant = 'default' AND store = 'support' "
        "ORDER BY seq").fetchall()
    assert rows == [("s1", 1, "user", "message", None, "hi"),
                    ("s1", 2, None, "function_call", "refund", None)]


def test_every_tenant_table_forces_row_level_security(admin: Any, schema: str,
                                                      url: str) -> None:
    ownstate.connect(url).close()
    tables = admin.execute(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
        " (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND EXISTS (SELECT 1 FROM pg_attribute a "
        " WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped) "
        "ORDER BY 1", (schema,)).fetchall()
    assert len(tables) >= 12
    assert [t for t in tables if t[1:] != (True, True, 1)] == []
    untenanted = admin.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND NOT EXISTS (SELECT 1 FROM "
        "pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant')",
        (schema,)).fetchall()
    assert untenanted == [("ownstate_schema",)]


# a runtime role under row-level security ----------------------------------------------

#: The grants docs/postgres.md gives, run by the owner of the schema.
RUNTIME_GRANTS = (
    "GRANT USAGE ON SCHEMA {schema} TO {runtime}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {runtime}",
    "REVOKE INSERT, UPDATE, DELETE ON {schema}.ownstate_schema FROM {runtime}",
    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {runtime}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} "
    "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {runtime}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE ON SEQUENCES TO {runtime}",
)


@pytest.fixture
def roles(admin: Any, schema: str) -> Iterator[tuple[str, str]]:
    """An owner role that runs migrations and a runtime role the application uses; neither
    is a superuser, so row-level security binds both."""
    suffix = uuid.uuid4().hex[:8]
    owner, runtime = f"ownstate_owner_{suffix}", f"ownstate_app_{suffix}"
    try:
        admin.execute(f"CREATE ROLE {owner} LOGIN")
        admin.execute(f"CREATE ROLE {runtime} LOGIN")
    except psycopg.errors.InsufficientPrivilege:
        pytest.skip("the test role may not create roles")
    admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {owner}")
    yield owner, runtime
    admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    for role in (runtime, owner):
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")


class _Letters:
    """A tiny embedder, so that the vector tables hold rows too."""

    model = "test/letters"
    dimension = 3

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(t.count(c)) + 0.5 for c in "aeo"] for t in texts]


def _fill(url: str, tenant: str) -> None:
    """One of everything, for ``tenant``."""
    with ownstate.connect(url, tenant=tenant, migrate=False, embedder=_Letters()) as client:
        session = client.session_stores.create("shared-name", owner="user:1").add(
            actor_id="user:1", session_id="s1")
        client.api_keys.create("user:1")
        (item,) = session.append_items([{"role": "user", "content": f"hello from {tenant}"}],
                                       idempotency_key="first")
        run = client.runs.open_run(session, "langgraph", owner="w")
        client.runs.record_effect(run.run_id, "call-1", {"ok": True},
                                  fencing_token=run.fencing_token)
        scope = run.checkpoint_scope()
        client.checkpoints.put(scope, "c1", payload=b"state", type_tag="msgpack")
        client.checkpoints.put_writes(scope, "c1", [PendingWrite("task", 0, "ch", "json", b"w")])
        client.assets.put(b"bytes of " + tenant.encode(), "text/plain", session=session)
        client.memory_stores.create("facts").remember("user:1", "channel", "email",
                                                      source=item)
        # a search folds the logged item term counts into search_terms; the facts' stay
        # logged, so both tables hold rows
        client.session_stores.search_items("hello")
        # an item the next search is to index: item_index_queue holds its row
        session.append_items([{"role": "user", "content": "goodbye"}])


def test_a_runtime_role_sees_only_its_tenant(admin: Any, schema: str,
                                             roles: tuple[str, str]) -> None:
    owner, runtime = roles
    owner_url = _with(_as_role(owner), schema=schema)
    runtime_url = _with(_as_role(runtime), schema=schema)
    with ownstate.connect(owner_url, migrate=True) as client:  # `ownstate migrate`
        assert client.check() == (pg_schema.SCHEMA_VERSION, pg_schema.SCHEMA_VERSION)
    with psycopg.connect(owner_url.split("?")[0], autocommit=True) as conn:
        for grant in RUNTIME_GRANTS:
            conn.execute(grant.format(schema=schema, runtime=runtime))
    for tenant in ("tenant-a", "tenant-b"):
        _fill(runtime_url, tenant)
    with ownstate.connect(runtime_url) as client:  # migrate=True is a no-op when current
        assert client.check() == (pg_schema.SCHEMA_VERSION, pg_schema.SCHEMA_VERSION)
    tables = [t for (t,) in admin.execute(
        "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND relkind = 'r' AND relname <> 'ownstate_schema' "
        "ORDER BY 1", (schema,))]
    everything = {t: admin.execute(f"SELECT count(*) FROM {schema}.{t}").fetchone()[0]
                  for t in tables}
    assert all(count > 0 for count in everything.values()), everything

    with psycopg.connect(runtime_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")

        def counts(tenant: str | None) -> dict[str, int]:
            with conn.transaction():
                if tenant is not None:
                    conn.execute("SELECT set_config('ownstate.tenant', %s, true)", (tenant,))
                # no tenant predicate: row-level security is all that stands in the way
                return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                        for t in tables}

        seen_by_a = counts("tenant-a")
        assert seen_by_a == {t: n // 2 for t, n in everything.items()}
        assert seen_by_a["sessions"] == 1
        with conn.transaction():
            conn.execute("SELECT set_config('ownstate.tenant', 'tenant-a', true)")
            assert conn.execute("SELECT count(*) FROM sessions WHERE tenant = 'tenant-b'"
                                ).fetchone() == (0,)
            assert conn.execute("SELECT DISTINCT tenant FROM session_items").fetchall() == [
                ("tenant-a",)]
            updated = conn.execute("UPDATE sessions SET metadata = '{}'")
            assert updated.rowcount == 1
        assert counts(None) == dict.fromkeys(tables, 0)
        assert counts("tenant-c") == dict.fromkeys(tables, 0)
        with conn.transaction():
            conn.execute("SELECT set_config('ownstate.tenant', 'tenant-a', true)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute("INSERT INTO session_stores (tenant, name, create_time) "
                             "VALUES ('tenant-b', 'planted', now())")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE sneaky (x int)")

    with psycopg.connect(owner_url.split("?")[0], autocommit=True) as conn:  # FORCE
        assert conn.execute(f"SELECT count(*) FROM {schema}.sessions").fetchone() == (0,)


def test_a_runtime_role_cannot_migrate_and_says_so(admin: Any, schema: str,
                                                   roles: tuple[str, str]) -> None:
    _, runtime = roles
    admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {runtime}")
    with pytest.raises(SchemaVersion) as err:
        ownstate.connect(_with(_as_role(runtime), schema=schema), migrate=True)
    assert "ownstate migrate" in str(err.value)
    assert admin.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n "
                         "ON n.oid = c.relnamespace WHERE n.nspname = %s",
                         (schema,)).fetchone() == (0,)


# the run invariants under 16 racing connections ---------------------------------------


def test_sixteen_connections_race_to_open_a_run(schema: str, admin: Any) -> None:
    async def scenario() -> list[list[Any]]:
        backend = await _backend(schema, min_size=16, max_size=16)
        outcomes = []
        try:
            await backend.create_store("default", "races", _BASE)
            for round_no in range(10):
                await backend.create_session("default", "races", f"s{round_no}", "a", {},
                                             _BASE)
                outcomes.append(await asyncio.gather(*(
                    backend.open_run("default", "races", f"s{round_no}",
                                     f"run-{round_no}-{n}", "langgraph", None, f"w{n}", 30.0,
                                     _BASE)
                    for n in range(16)), return_exceptions=True))
        finally:
            await backend.close()
        return outcomes

    for outcome in asyncio.run(scenario()):
        winners = [o for o in outcome if isinstance(o, Run)]
        refused = [o for o in outcome if isinstance(o, ActiveRunExists)]
        assert (len(winners), len(refused)) == (1, 15), outcome
        assert {r.run_id for r in refused} == {winners[0].run_id}
    active = admin.execute(f"SELECT sid, count(*) FROM {schema}.runs GROUP BY sid").fetchall()
    assert sorted(n for _, n in active) == [1] * 10


def test_sixteen_connections_race_to_resume(schema: str) -> None:
    rounds, ttl = 20, 30.0

    async def scenario() -> tuple[int, list[list[Any]]]:
        backend = await _backend(schema, min_size=16, max_size=16)
        outcomes = []
        try:
            await backend.create_store("default", "races", _BASE)
            await backend.create_session("default", "races", "s", "a", {}, _BASE)
            run = await backend.open_run("default", "races", "s", "run-1", "langgraph", None,
                                         "opener", ttl, _BASE)
            for round_no in range(1, rounds + 1):
                now = _BASE + timedelta(seconds=round_no * (ttl + 1))  # every lease expired
                outcomes.append(await asyncio.gather(*(
                    backend.resume("default", run.run_id, f"w{n}", ttl, now)
                    for n in range(16)), return_exceptions=True))
        finally:
            await backend.close()
        return run.fencing_token, outcomes

    first, outcomes = asyncio.run(scenario())
    tokens = []
    for outcome in outcomes:
        winners = [o for o in outcome if isinstance(o, Lease)]
        held = [o for o in outcome if isinstance(o, LeaseHeld)]
        assert (len(winners), len(held)) == (1, 15), outcome
        assert {h.owner for h in held} == {winners[0].owner}
        tokens.append(winners[0].fencing_token)
    assert tokens == list(range(first + 1, first + rounds + 1))


# lost connections ----------------------------------------------------------------------


async def _terminate_own_backend(cur: Cursor) -> None:
    await cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")


#: Each backend's operations run over psycopg's async connections (the async client) and
#: over its sync ones (inline, as the sync client opens a URL): the same coroutines, which
#: the tests below drive on an event loop either way.
MODES = pytest.mark.parametrize("inline", [False, True], ids=["async", "inline"])


@MODES
def test_lost_connections_are_retried_when_nothing_was_applied(admin: Any, schema: str,
                                                               inline: bool) -> None:
    tag = f"ownstate-lost-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        backend = PostgresBackend(_with(POSTGRES_URL, application_name=tag), schema=schema,
                                  min_size=4, max_size=4, inline=inline)
        await backend.setup(migrate=True)
        try:
            await backend.create_store("default", "lost", _BASE)
            # every pooled connection dies while idle (a server restart, a proxy timeout)
            killed = admin.execute("SELECT count(pg_terminate_backend(pid)) "
                                   "FROM pg_stat_activity WHERE application_name = %s",
                                   (tag,)).fetchone()
            assert killed[0] > 0
            assert (await backend.get_store("default", "lost")).name == "lost"
            await backend.create_session("default", "lost", "s", "a", {}, _BASE)

            attempts: list[int] = []

            async def write_then_lose(cur: Cursor) -> int:
                attempts.append(len(attempts) + 1)
                await cur.execute("INSERT INTO session_stores (tenant, name, create_time) "
                                  "VALUES ('default', %s, now())", (f"made-{len(attempts)}",))
                if len(attempts) == 1:
                    await _terminate_own_backend(cur)
                return len(attempts)

            assert await backend._write("default", write_then_lose) == 2
            names = [s.name for s in await backend.list_stores("default", 10, None)]
            assert names == ["lost", "made-2"]  # the lost attempt applied nothing

            reads: list[int] = []

            async def read_then_lose(cur: Cursor) -> str:
                reads.append(1)
                if len(reads) == 1:
                    await _terminate_own_backend(cur)
                await cur.execute("SELECT current_setting('ownstate.tenant')")
                row = await cur.fetchone()
                return str(row[0]) if row else ""

            assert await backend._read("tenant-r", read_then_lose) == "tenant-r"
            assert len(reads) == 2
        finally:
            await backend.close()

    asyncio.run(scenario())


@MODES
def test_a_connection_lost_while_committing_is_backend_unavailable(admin: Any, schema: str,
                                                                   inline: bool) -> None:
    async def scenario() -> None:
        backend = await _backend(schema, min_size=1, max_size=2, inline=inline)
        admin.execute(f"""
            CREATE TABLE {schema}.commit_probe (x int);
            CREATE FUNCTION {schema}.die_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON {schema}.commit_probe
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
            EXECUTE FUNCTION {schema}.die_at_commit();
        """)
        calls: list[int] = []

        async def write(cur: Cursor) -> None:
            calls.append(1)
            await cur.execute("INSERT INTO commit_probe VALUES (1)")

        try:
            with pytest.raises(BackendUnavailable, match="may or may not"):
                await backend._write(None, write)
            assert calls == [1]  # never retried: it might have committed
            await backend.create_store("default", "still-works", _BASE)
        finally:
            await backend.close()

    asyncio.run(scenario())


@pytest.mark.slow
def test_no_acknowledged_append_is_lost_when_connections_are_killed(admin: Any,
                                                                    schema: str) -> None:
    writers, appends, sessions = 8, 40, 2
    tag = f"ownstate-kill-{uuid.uuid4().hex[:8]}"
    acknowledged: set[tuple[int, int]] = set()
    uncertain: set[tuple[int, int]] = set()
    kills = 0

    async def writer(backend: PostgresBackend, w: int) -> None:
        rng = random.Random(w)
        for n in range(appends):
            batch = [_item(n, w=w, k=k) for k in range(rng.randint(1, 3))]
            try:
                await backend.append_items("default", "kill", f"s{w % sessions}", batch, None,
                                           datetime.now(UTC))
            except BackendUnavailable:
                uncertain.add((w, n))
            else:
                acknowledged.add((w, n))

    async def killer(done: asyncio.Event) -> None:
        nonlocal kills
        conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
        try:
            while not done.is_set():
                cur = await conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid "
                    "FROM pg_stat_activity WHERE application_name = %s "
                    "ORDER BY random() LIMIT 1) one", (tag,))
                row = await cur.fetchone()
                kills += int(row[0]) if row else 0
                await asyncio.sleep(0.01)
        finally:
            await conn.close()

    async def scenario() -> dict[str, list[tuple[int, Any]]]:
        backend = PostgresBackend(_with(POSTGRES_URL, application_name=tag), schema=schema,
                                  min_size=writers, max_size=writers)
        await backend.setup(migrate=True)
        await backend.create_store("default", "kill", _BASE)
        for s in range(sessions):
            await backend.create_session("default", "kill", f"s{s}", "a", {}, _BASE)
        done = asyncio.Event()
        killing = asyncio.create_task(killer(done))
        try:
            await asyncio.gather(*(writer(backend, w) for w in range(writers)))
        finally:
            done.set()
            await killing
            await backend.close()
        reader = await _backend(schema)
        try:
            return {f"s{s}": [(i.seq, i.data) for i in await reader.list_items(
                "default", "kill", f"s{s}", descending=False, limit=10_000, after_seq=None)]
                for s in range(sessions)}
        finally:
            await reader.close()

    stored = asyncio.run(scenario())
    assert kills > 0
    found: dict[tuple[int, int], list[int]] = {}
    for rows in stored.values():
        assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))  # gapless
        for _, data in rows:
            found.setdefault((data["w"], data["n"]), []).append(data["k"])
    assert acknowledged <= found.keys()  # no acknowledged append is missing
    assert found.keys() <= acknowledged | uncertain
    assert all(ks == list(range(len(ks))) for ks in found.values())  # whole, and once


# driver errors and connection options --------------------------------------------------


def test_driver_errors_become_ownstate_errors(schema: str) -> None:
    async def scenario() -> None:
        backend = await _backend(schema)
        try:
            with pytest.raises(InvalidInput) as err:
                await backend.create_store("default", "nul\x00name", _BASE)
            assert isinstance(err.value.__cause__, psycopg.DataError)
            with pytest.raises(InvalidInput):
                await backend.create_store("default", "lone-\ud800", _BASE)
            assert await backend.list_stores("default", 10, None) == []
        finally:
            await backend.close()

    asyncio.run(scenario())
    unreachable = PostgresBackend("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1",
                                  timeout=1.0)
    with pytest.raises(BackendUnavailable):
        asyncio.run(unreachable.setup(migrate=False))


def test_url_options_reach_libpq(schema: str) -> None:
    from ownstate.backends import open_backend

    backend = open_backend(_with(POSTGRES_URL, schema=schema, pool_max="2",
                                 application_name="ownstate%20url%20test"))
    assert isinstance(backend, PostgresBackend)

    async def name(cur: Cursor) -> str:
        await cur.execute("SHOW application_name")
        row = await cur.fetchone()
        return str(row[0]) if row else ""

    async def scenario() -> str:
        try:
            return await backend._read(None, name)
        finally:
            await backend.close()

    assert asyncio.run(scenario()) == "ownstate url test"


def test_a_given_pool_is_used_and_left_open(schema: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    async def scenario() -> None:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            POSTGRES_URL, min_size=1, max_size=2, open=False, kwargs={"autocommit": True})
        await pool.open()
        try:
            backend = PostgresBackend(pool=pool, schema=schema)
            await backend.setup(migrate=True)
            await backend.create_store("default", "pooled", _BASE)
            await backend.close()
            assert not pool.closed
            async with pool.connection() as conn:
                # the schema came from the backend, per transaction, not from the pool
                cur = await conn.execute(f"SELECT name FROM {schema}.session_stores")
                assert await cur.fetchall() == [("pooled",)]
        finally:
            await pool.close()

    asyncio.run(scenario())

def test_a_given_sync_pool_runs_the_backend_inline_and_is_left_open(schema: str) -> None:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    pool: ConnectionPool[Any] = ConnectionPool(
        POSTGRES_URL, min_size=1, max_size=2, open=True, kwargs={"autocommit": True})
    try:
        backend = PostgresBackend(pool=pool, schema=schema)
        assert backend.runs_inline
        with ownstate.connect(backend=backend) as client:
            assert client.runs_inline
            store = client.session_stores.create("pooled")
            store.add(actor_id="a", session_id="s").append_items([{"role": "user",
                                                                  "content": "hi"}])
        assert not pool.closed
        with pool.connection() as conn:
            found = conn.execute(f"SELECT count(*) FROM {schema}.items").fetchone()
            assert found == (1,)
    finally:
        pool.close()

    async def refused() -> None:
        given: AsyncConnectionPool[Any] = AsyncConnectionPool(POSTGRES_URL, open=False)
        with pytest.raises(InvalidInput, match="synchronous pool"):
            PostgresBackend(pool=given, schema=schema, inline=True)

    asyncio.run(refused())


def test_the_sync_client_runs_postgresql_on_the_calling_thread(url: str) -> None:
    """A sync client drives the backend on its caller's threads over psycopg's sync
    connections: no event loop thread, and threads of the caller run at once."""
    portals = {t for t in threading.enumerate() if t.name == "ownstate-portal"}
    with ownstate.connect(url) as client:
        assert client.runs_inline
        assert {t for t in threading.enumerate() if t.name == "ownstate-portal"} == portals
        session = client.session_stores.create("inline").add(actor_id="a", session_id="s")
        barrier = threading.Barrier(4)

        def append(n: int) -> list[int]:
            barrier.wait()
            return [session.append_items([{"role": "user", "content": f"{n}-{k}"}])[0].seq
                    for k in range(10)]

        threads_seqs: list[list[int]] = []
        workers = [threading.Thread(target=lambda n=n: threads_seqs.append(append(n)))
                   for n in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert sorted(seq for seqs in threads_seqs for seq in seqs) == list(range(1, 41))
        assert all(seqs == sorted(seqs) for seqs in threads_seqs)
    with pytest.raises(BackendUnavailable, match="closed"):
        session.append_items([{"role": "user", "content": "late"}])


def test_a_call_relayed_for_async_code_leaves_its_event_loop_running(url: str) -> None:
    """An adapter's async method on a sync client relays its call to the caller's event
    loop; an inline backend then blocks a worker thread, not that loop."""
    async def slow(cur: Cursor) -> None:
        await cur.execute("SELECT pg_sleep(0.4)")

    with ownstate.connect(url) as client:
        assert client.runs_inline
        backend = client.backend
        assert isinstance(backend, PostgresBackend)

        async def scenario() -> int:
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            await client.relay_coroutine(backend._read(None, slow))
            ticker.cancel()
            return ticks

        assert asyncio.run(scenario()) >= 10  # the loop ran while the server slept
        client.session_stores.create("still-inline")  # a sync call stays on this thread


def test_an_inline_waiter_is_woken_by_a_decision_made_elsewhere(
        admin: Any, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync client's waiter has no event loop; its backend listens for decisions on a
    thread of its own, so a decision made through another client (another process as far
    as the waiter can tell) wakes it at once, and closing the client ends the listening."""
    from ownstate.backends import _decisions

    # after its first check the waiter sleeps past the test unless it is woken
    monkeypatch.setattr(_decisions, "_FIRST_PAUSE", 60.0)
    tag = f"ownstate-listen-{uuid.uuid4().hex[:8]}"
    waiter = ownstate.connect(_with(url, application_name=tag))
    decider = ownstate.connect(url)
    try:
        store = decider.session_stores.create("decide")
        run = decider.runs.open_run(store.add(actor_id="a", session_id="s"), "langgraph")
        decider.runs.mark_awaiting(run.run_id, {"kind": "approval"})
        got: list[Run | None] = []
        thread = threading.Thread(
            target=lambda: got.append(waiter.runs.wait_for_decision(run.run_id, timeout=50)))
        thread.start()

        def listening() -> int:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                "application_name = %s AND query LIKE 'LISTEN %%'",
                                (tag,)).fetchone()
            return int(row[0])

        for _ in range(200):
            if listening():
                break
            threading.Event().wait(0.05)
        assert listening() == 1
        decider.runs.decide(run.run_id, "approve")
        thread.join(20)
        assert not thread.is_alive()
        assert len(got) == 1
        assert got[0] is not None
        assert got[0].decided
    finally:
        waiter.close()
        decider.close()
    for _ in range(100):
        if not listening() and not any(t.name == "ownstate-listener"
                                       for t in threading.enumerate()):
            break
        threading.Event().wait(0.05)
    assert listening() == 0
    assert not any(t.name == "ownstate-listener" for t in threading.enumerate())


def _step_writes(backend: PostgresBackend, scope: Any, fence: Any
                 ) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """A LangGraph step's two checkpoint writes under ``fence``, named: checkpoint ``c1``
    (payload ``b"p"``) and one pending write (``b"w"``) of task ``task``."""
    from ownstate.backends.ports.checkpoints import NewCheckpoint

    return [
        ("put", lambda: backend.put_checkpoint(
            "default", scope, NewCheckpoint("", "c1", None, "t", b"p", "{}"), fence, _BASE)),
        ("put_writes", lambda: backend.put_writes(
            "default", scope, "", "c1", [PendingWrite("task", 0, "ch", "t", b"w")], fence,
            _BASE)),
    ]


#: How statements that open or commit a transaction are sent: in one trip below psycopg's
#: cursor (``_trip``), or through the cursor in psycopg's pipeline (where ``_trip`` cannot).
@pytest.fixture
def sending(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    from ownstate.backends.postgres import _trip

    if request.param == "cursor":
        monkeypatch.setattr(_trip, "available", False)
    return str(request.param)


@MODES
@pytest.mark.parametrize("sending", ["trip", "cursor"], indirect=True)
def test_a_step_s_checkpoint_writes_and_read_are_one_round_trip_each(schema: str,
                                                                     inline: bool,
                                                                     sending: str) -> None:
    # A LangGraph step stores a checkpoint and a task's writes under a fence, and reads
    # the latest checkpoint; an invocation's first put opens its run and its last ends it:
    # each is one statement that checks what it must (scope, fence, checkpoint) and
    # commits with it.
    from ownstate.backends.ports.checkpoints import Fence, NewCheckpoint
    from ownstate.backends.postgres import _core
    from ownstate.model import CheckpointScope

    sent: list[int] = []
    original, original_trip = _core.Cursor._send, _core.Cursor._trip

    async def counted(self: Cursor, statement: Any, *, commit: bool) -> None:
        sent.append(1)
        await original(self, statement, commit=commit)

    async def counted_trip(self: Cursor, *args: Any, commit: bool) -> None:
        sent.append(1)
        await original_trip(self, *args, commit=commit)
    async def scenario() -> dict[str, int]:
        backend = await _backend(schema, inline=inline)
        trips: dict[str, int] = {}
        try:
            await backend.create_store("default", "steps", _BASE)
            await backend.create_session("default", "steps", "s", "a", {}, _BASE)
            holder = await backend.open_run("default", "steps", "s", "holder", "langgraph",
                                            None, "me", 60.0, _BASE)
            await backend.close_run("default", "holder", "done", None, None, 1, _BASE)
            run = await backend.open_run("default", "steps", "s", "run-2", "langgraph",
                                         None, "me", 60.0, _BASE)
            scope = CheckpointScope("a", "steps", "s", holder.run_id)
            fence = Fence(run.run_id, run.fencing_token)
            _core.Cursor._send = counted  # type: ignore[method-assign]
            _core.Cursor._trip = counted_trip  # type: ignore[method-assign]
            try:
                for name, call in (
                    *_step_writes(backend, scope, fence),
                    ("get", lambda: backend.get_checkpoint("default", scope, "", None)),
                    ("put_ending_run", lambda: backend.put_checkpoint_ending_run(
                        "default", scope, NewCheckpoint("", "c2", "c1", "t", b"q", "{}"),
                        fence, "done", 3, [], None, _BASE)),
                    ("put_opening_run", lambda: backend.put_checkpoint_opening_run(
                        "default", scope, NewCheckpoint("", "c3", "c2", "t", b"r", "{}"),
                        "run-3", "langgraph", None, "me", 60.0, _BASE)),
                ):
                    sent.clear()
                    await call()
                    trips[name] = len(sent)
            finally:
                _core.Cursor._send = original  # type: ignore[method-assign]
                _core.Cursor._trip = original_trip  # type: ignore[method-assign]
            got = await backend.get_checkpoint("default", scope, "", "c1")
            assert got is not None
            assert got.pending_writes == (PendingWrite("task", 0, "ch", "t", b"w"),)
            ended = await backend.get_run("default", run.run_id)
            assert (ended.status, ended.step_count) == ("done", 3)
            assert (await backend.get_run("default", "run-3")).status == "running"
            latest = await backend.get_checkpoint("default", scope, "", None)
            assert latest is not None
            assert latest.checkpoint_id == "c3"
        finally:
            await backend.close()
        return trips

    assert asyncio.run(scenario()) == {"put": 1, "put_writes": 1, "get": 1,
                                       "put_ending_run": 1, "put_opening_run": 1}


async def _made_probe_table(cur: Cursor) -> None:
    await cur.execute("CREATE TABLE modes_probe (n bigserial, seen text)", last=True)


async def _taken_probes(cur: Cursor) -> list[str]:
    await cur.execute("DELETE FROM modes_probe RETURNING n, seen", last=True)
    return [seen for _, seen in sorted(await cur.fetchall())]


def _commit_modes(backend: PostgresBackend) -> dict[str, str]:
    """Each write of a LangGraph step against ``backend``, and the ``synchronous_commit``
    its transaction committed with and the ``plan_cache_mode`` it ran with (read back
    inside that transaction, ``commit/plans``)."""
    from ownstate.backends.ports.checkpoints import Fence
    from ownstate.backends.postgres import _core
    from ownstate.model import CheckpointScope

    seen: list[str] = []
    active = [False]  # while a write of the step runs
    writing = [False]  # while a trip of it commits a write
    original, original_trip, trip_class = _core.Cursor._send, _core.Cursor._trip, _core.Trip
    probe = ("SELECT current_setting('synchronous_commit') || '/' || "
             "current_setting('plan_cache_mode')")

    async def observed(self: Cursor, statement: Any, *, commit: bool) -> None:
        if active[0] and commit and not self._read:  # the commit's own, as the server has it
            async def probed() -> None:
                await statement()
                cur = await self._conn.execute(probe)
                row = await cur.fetchone()
                seen.append(str(row[0]) if row else "")

            await original(self, probed, commit=commit)
            return
        await original(self, statement, commit=commit)

    async def traced(self: Cursor, *args: Any, commit: bool) -> None:
        writing[0] = active[0] and commit and not self._read
        try:
            await original_trip(self, *args, commit=commit)
        finally:
            writing[0] = False

    class Probed(_core.Trip):
        """A trip that commits, with the settings read by a statement before its last,
        kept where its transaction's writes go (``modes_probe``)."""

        def __init__(self, conn: Any, raw: Any, statements: Any, keep: int) -> None:
            statements = list(statements)
            if writing[0]:
                statements.insert(keep, _core.Statement(
                    f"INSERT INTO modes_probe (seen) ({probe})"))
                keep += 1
            super().__init__(conn, raw, statements, keep)
    async def scenario() -> dict[str, str]:
        await backend.setup(migrate=True)
        modes: dict[str, str] = {}
        try:
            await backend.create_store("default", "modes", _BASE)
            await backend.create_session("default", "modes", "s", "a", {}, _BASE)
            holder = await backend.open_run("default", "modes", "s", "holder", "langgraph",
                                            None, "me", 60.0, _BASE)
            scope = CheckpointScope("a", "modes", "s", holder.run_id)
            fence = Fence(holder.run_id, holder.fencing_token)
            await backend._write(None, _made_probe_table)
            _core.Cursor._send = observed  # type: ignore[method-assign]
            _core.Trip = Probed  # type: ignore[misc]
            _core.Cursor._trip = traced  # type: ignore[method-assign]
            try:
                for name, call in (
                    ("append", lambda: backend.append_items(
                        "default", "modes", "s", [_item(1)], None, _BASE)),
                    *_step_writes(backend, scope, fence),
                    ("close", lambda: backend.close_run(
                        "default", holder.run_id, "done", None, 1, holder.fencing_token,
                        _BASE)),
                ):
                    seen.clear()
                    active[0] = True
                    try:
                        await call()
                    finally:
                        active[0] = False
                    seen.extend(await backend._write(None, _taken_probes))
                    modes[name] = ",".join(seen)
            finally:
                _core.Cursor._send = original  # type: ignore[method-assign]
                _core.Trip = trip_class  # type: ignore[misc]
                _core.Cursor._trip = original_trip  # type: ignore[method-assign]
            got = await backend.get_checkpoint("default", scope, "", None)
            assert got is not None
            assert got.payload == b"p"
            assert got.pending_writes == (PendingWrite("task", 0, "ch", "t", b"w"),)
        finally:
            await backend.close()
        return modes

    return asyncio.run(scenario())


@MODES
@pytest.mark.parametrize("sending", ["trip", "cursor"], indirect=True)
def test_checkpoint_writes_commit_without_waiting_for_the_disk(schema: str, inline: bool,
                                                               sending: str) -> None:
    # A step's checkpoint and writes need not wait for their WAL flush (checkpoints are
    # disposable, and the step's next item append or run close flushes them anyway);
    # items and runs, the system of record, always do.
    # Their statements run on generic plans; an append's and a close's as the server
    # chooses.
    modes = _commit_modes(PostgresBackend(POSTGRES_URL, schema=schema, inline=inline))
    assert modes == {"append": "on/auto", "put": "off/force_generic_plan",
                     "put_writes": "off/force_generic_plan", "close": "on/auto"}


def test_synchronous_checkpoints_makes_every_write_wait_for_the_disk(schema: str) -> None:
    from ownstate.backends import open_backend

    backend = open_backend(_with(POSTGRES_URL, schema=schema,
                                 synchronous_checkpoints="true"))
    assert isinstance(backend, PostgresBackend)
    modes = _commit_modes(backend)
    assert modes == {"append": "on/auto", "put": "on/force_generic_plan",
                     "put_writes": "on/force_generic_plan", "close": "on/auto"}
    with pytest.raises(InvalidInput, match="synchronous_checkpoints"):
        open_backend(_with(POSTGRES_URL, schema=schema, synchronous_checkpoints="maybe"))


@MODES
def test_an_own_pool_prepares_a_statement_the_second_time_it_runs(schema: str,
                                                                  inline: bool) -> None:
    async def prepared(cur: Cursor) -> int:
        await cur.execute("SELECT count(*) FROM pg_prepared_statements")
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def scenario() -> tuple[int, int]:
        backend = await _backend(schema, max_size=1, inline=inline)  # the same connection
        try:
            await backend.create_store("default", "prepared", _BASE)
            before = await backend._read(None, prepared)
            for _ in range(2):
                await backend.get_store("default", "prepared")
            return before, await backend._read(None, prepared)
        finally:
            await backend.close()

    before, after = asyncio.run(scenario())
    assert after > before


# the replay cache --------------------------------------------------------------------


def test_replay_entries_slice_and_merge_their_runs() -> None:
    from ownstate.backends._replay import Replay, ReplayCache

    rng = random.Random(7)
    entry = Replay(1, [("i1", 1)], [{"n": 1}])
    while entry.last_seq < 300:
        first = entry.last_seq + 1
        added = range(first, first + rng.randint(1, 9))
        entry.extend([(f"i{n}", n) for n in added], [{"n": n} for n in added])
        assert len(entry.runs) <= 2 * entry.last_seq.bit_length()
    for start, stop in [(0, 1000), (0, 1), (5, 6), (17, 250), (299, 301), (entry.last_seq, 999)]:
        columns, data = entry.slice(start, stop)
        expected = list(range(start + 1, min(stop, entry.last_seq) + 1))
        assert columns[1] == [d["n"] for d in data] == expected
        assert columns[0] == [f"i{n}" for n in expected]
    cache = ReplayCache(max_items=500)
    cache.put(("t", "s", "a"), entry)
    cache.put(("t", "s", "b"), Replay(2, [("x", 1)] * 250, [{}] * 250))  # evicts "a"
    assert cache.held(("t", "s", "a"), 0, 10) is None
    held = cache.held(("t", "s", "b"), 0, 10)
    assert held is not None
    assert (held[0].last_seq, len(held[2])) == (250, 10)
    assert cache.held(("t", "s", "b"), 251, 260) is None  # past its end


def test_threads_may_share_a_replay_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers slicing an entry while another thread extends it (an inline backend's
    callers) each get items whose data matches their metadata, in order, with none lost."""
    import sys

    from ownstate.backends._replay import Replay, ReplayCache

    monkeypatch.setattr(sys, "getswitchinterval", sys.getswitchinterval)
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        key = ("t", "s", "a")
        cache = ReplayCache(max_items=100_000)
        entry = Replay(1, [("i1", 1)], [{"n": 1}])
        cache.put(key, entry)
        bad: list[str] = []
        done = threading.Event()

        def extend() -> None:
            while entry.last_seq < 6000:
                first = entry.last_seq + 1
                added = range(first, first + 3)
                cache.extend(key, entry, [(f"i{n}", n) for n in added],
                             [{"n": n} for n in added])
            done.set()

        def read() -> None:
            while not done.is_set():
                held = cache.held(key, 0, 100_000)
                assert held is not None
                columns, data = held[1], held[2]
                if columns[1] != [d["n"] for d in data] or columns[1] != list(
                        range(1, len(data) + 1)):
                    bad.append(f"{len(columns[1])} seqs against {len(data)} items")
                    return

        threads = [threading.Thread(target=extend)] + [threading.Thread(target=read)
                                                       for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(0.005)
    assert bad == []


class _Labels(dict[str, Any]):
    """Data that marshal cannot hold (a subclass of dict)."""


def test_replay_entries_keep_data_marshal_cannot_hold_and_hand_out_copies() -> None:
    from ownstate.backends._replay import Replay

    entry = Replay(1, [("i1", 1)], [_Labels(n=1)])
    entry.extend([("i2", 2), ("i3", 3)], [{"n": [2]}, {"n": [3]}])  # merged with the first
    columns, data = entry.slice(0, 3)
    assert columns == [["i1", "i2", "i3"], [1, 2, 3]]
    assert type(data[0]) is _Labels
    assert data == [{"n": 1}, {"n": [2]}, {"n": [3]}]
    data[1]["n"].append("changed")
    columns[0].append("changed")
    assert entry.slice(0, 3) == ([["i1", "i2", "i3"], [1, 2, 3]],
                                 [{"n": 1}, {"n": [2]}, {"n": [3]}])


def test_replay_entries_load_equal_keys_and_short_strings_as_one_object() -> None:
    from ownstate.backends._replay import Replay

    long = "x" * 100
    data = [{"role": "user", "content": [{"type": "text", "text": long + str(n)}]}
            for n in range(3)]
    entry = Replay(1, [(f"i{n}", n) for n in (1, 2, 3)], [dict(d) for d in data])
    entry.extend([("i4", 4)], [{"role": "user", "n": 4}])
    _, loaded = entry.slice(0, 4)
    assert loaded == [*data, {"role": "user", "n": 4}]
    first, second = loaded[0], loaded[1]
    assert next(iter(first)) is next(iter(second))  # the key "role"
    assert first["role"] is second["role"]
    assert first["content"] is not second["content"]
    assert first["content"][0]["text"] == long + "0"


def test_items_built_a_column_at_a_time_equal_items_built_one_by_one() -> None:
    now = datetime.now(UTC)
    rows = [(f"i{n}", n, now, {"n": n}, "openai.responses", "user" if n % 2 else None,
             "message", "tool" if n == 2 else None, None, n, None) for n in range(1, 6)]
    columns = [list(c) for c in zip(*rows, strict=True)]
    built = build_items("s", columns[3], *columns[:3], *columns[4:])
    assert built == [build_item(r[0], "s", *r[1:]) for r in rows]
    assert all(type(i) is Item for i in built)
    assert build_items("s", [], *[[]] * 10) == []
    with pytest.raises(ValueError, match="differ in length"):
        build_items("s", columns[3], *columns[:3], *columns[4:-1], columns[-1][:-1])
