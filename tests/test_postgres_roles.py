"""Row-level security is in force, or the command says loudly that it is not.

Real roles in the test database, each with a name of its own and dropped afterwards: an
owner that migrates, the application role ``ownstate migrate --app-role`` sets up (and a
login role it is granted to), a ``BYPASSRLS`` role, and the test URL's superuser. The test
URL's role must be a superuser (it creates ``BYPASSRLS`` roles); otherwise these tests
skip.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import test_postgres as pg
from click.testing import Result
from test_cli import _runner

import ownstate
from ownstate.backends.postgres.schema import SCHEMA_VERSION
from ownstate.cli import cli

POSTGRES_URL = pg.POSTGRES_URL
admin = pg.admin  # the fixtures: a connection as the test URL's role, a new schema's name
schema = pg.schema

#: What ``find_api_key`` returns: what authenticating a key needs, nothing else.
KEY_LOOKUP_COLUMNS = ["key_id", "tenant", "principal", "admin", "create_time", "revoked_at",
                      "secret_hash"]

MakeRole = Callable[[str, str], str]


@pytest.fixture
def make_role(admin: Any) -> Iterator[MakeRole]:
    """``make_role(kind, attributes)``: a new role named after ``kind``, dropped after the
    test with everything granted to it and everything it owns."""
    is_super = admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                             ).fetchone()[0]
    if not is_super:
        pytest.skip("the test role is not a superuser")
    made: list[str] = []

    def make(kind: str, attributes: str = "LOGIN") -> str:
        name = f"os_{kind}_{uuid.uuid4().hex[:8]}"
        admin.execute(f"CREATE ROLE {name} {attributes}")
        made.append(name)
        return name

    yield make
    for name in [*reversed(made), *_created_by_migrate]:
        if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")
    _created_by_migrate.clear()


#: Roles the command under test created, for make_role's clean-up.
_created_by_migrate: list[str] = []


@pytest.fixture
def owned_schema(admin: Any, schema: str, make_role: MakeRole) -> Iterator[tuple[str, str]]:
    """A schema created for a new owner role, and that owner."""
    owner = make_role("owner", "LOGIN")
    admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {owner}")
    yield schema, owner
    admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _url(role: str | None, schema: str) -> str:
    return pg._with(POSTGRES_URL if role is None else pg._as_role(role), schema=schema)


def _cli(url: str, *args: str) -> Result:
    return _runner().invoke(cli, ["--url", url, *args])


def _bypass_refused(result: Result, *why: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == f"schema is at version {SCHEMA_VERSION}\n"
    (line,) = result.stderr.splitlines()
    assert line.startswith("row-level security is not in force"), line
    assert "--app-role" in line
    for part in why:
        assert part in line, line


def test_the_app_role_is_bound_and_check_says_so(admin: Any, owned_schema: tuple[str, str],
                                                 make_role: MakeRole) -> None:
    schema, owner = owned_schema
    app = make_role("app", "LOGIN")
    migrated = _cli(_url(owner, schema), "migrate", "--app-role", app)
    assert migrated.exit_code == 0, migrated.output
    assert f"role {app!r} may read and write" in migrated.stdout
    assert "created" not in migrated.stdout
    checked = _cli(_url(app, schema), "check")
    assert (checked.exit_code, checked.stdout, checked.stderr) == (
        0, f"schema is at version {SCHEMA_VERSION}\n", "")
    # the owner is bound too: the tables FORCE ROW LEVEL SECURITY
    assert _cli(_url(owner, schema), "check").exit_code == 0

    key_ids = {}
    for tenant in ("tenant-a", "tenant-b"):
        with ownstate.connect(_url(app, schema), tenant=tenant, migrate=False) as client:
            client.session_stores.create("support").add(actor_id="u", session_id="s1")
            key_ids[tenant] = client.api_keys.create("svc")[0].key_id
    import psycopg

    with psycopg.connect(_url(app, None).split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        with conn.transaction():
            conn.execute("SELECT set_config('ownstate.tenant', 'tenant-a', true)")
            assert conn.execute("SELECT tenant FROM sessions").fetchall() == [("tenant-a",)]
            assert conn.execute("SELECT tenant FROM api_keys").fetchall() == [("tenant-a",)]
        with conn.transaction():  # no tenant: nothing, keys included
            assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)
        # the key lookup finds one key by its exact id, and lists nothing
        wanted = key_ids["tenant-b"]
        for probe in ("%", "_%", "*", "", wanted[:-1], wanted + "%", wanted.upper(), None):
            with conn.transaction():
                rows = conn.execute("SELECT * FROM find_api_key(%s)", (probe,)).fetchall()
                assert rows == [], probe
        with conn.transaction():
            cur = conn.execute("SELECT * FROM find_api_key(%s)", (wanted,))
            assert [c.name for c in cur.description or []] == KEY_LOOKUP_COLUMNS
            assert [(r[0], r[1]) for r in cur.fetchall()] == [(wanted, "tenant-b")]
            # once it returned, the row it showed is hidden again
            assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)


def test_the_key_lookup_returns_only_its_columns_when_the_table_grows(
        admin: Any, owned_schema: tuple[str, str], make_role: MakeRole) -> None:
    schema, owner = owned_schema
    app = make_role("app", "LOGIN")
    assert _cli(_url(owner, schema), "migrate", "--app-role", app).exit_code == 0
    with ownstate.connect(_url(app, schema), tenant="t", migrate=False) as client:
        key, token = client.api_keys.create("svc")
    admin.execute(f"ALTER TABLE {schema}.api_keys ADD COLUMN internal_note text "
                  "DEFAULT 'not for authentication'")
    import psycopg

    with psycopg.connect(_url(app, None).split("?")[0], autocommit=True) as conn:
        cur = conn.execute(f"SELECT * FROM {schema}.find_api_key(%s)", (key.key_id,))
        assert [c.name for c in cur.description or []] == KEY_LOOKUP_COLUMNS
    with ownstate.connect(_url(app, schema), tenant="t", migrate=False) as client:
        assert client.api_keys.authenticate(token).key_id == key.key_id


def test_a_superuser_is_reported_and_serve_refuses_to_listen_widely(
        owned_schema: tuple[str, str]) -> None:
    schema, _ = owned_schema
    url = _url(None, schema)  # the test URL's superuser
    assert _cli(url, "migrate").exit_code == 0
    _bypass_refused(_cli(url, "check"), "a superuser", repr(POSTGRES_URL.split("//")[1]
                                                              .split("@")[0].split(":")[0]))
    with ownstate.connect(url, migrate=False) as client:
        assert "superuser" in (client.isolation_bypass() or "")
    for command in (["serve"], ["mcp", "--transport", "http"]):
        refused = _cli(url, *command, "--host", "0.0.0.0", "--port", "0")
        assert refused.exit_code == 1
        (line,) = refused.stderr.splitlines()
        assert "row-level security is not in force" in line
        assert "Refusing to serve on 0.0.0.0" in line
        assert "--allow-rls-bypass" in line
    with ownstate.connect(url, migrate=False) as client:
        assert client.api_keys.list() == []  # refused before it made a key
    for args in (["--host", "0.0.0.0", "--allow-rls-bypass"], ["--host", "127.0.0.1"]):
        warning = _serve_until_listening(url, *args)
        assert warning.startswith("Warning: row-level security is not in force"), warning


def _serve_until_listening(url: str, *args: str) -> str:
    """Start ``ownstate serve``, wait for it to say it serves, stop it; its stderr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ownstate", "--url", url, "serve", "--port", "0",
         "--no-bootstrap", "--log-level", "warning", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("Serving "), line
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    return err


def test_bypassrls_an_unforced_owner_and_a_disabled_table_are_reported(
        admin: Any, owned_schema: tuple[str, str], make_role: MakeRole) -> None:
    schema, owner = owned_schema
    app = make_role("app", "LOGIN")
    assert _cli(_url(owner, schema), "migrate", "--app-role", app).exit_code == 0
    bypasser = make_role("bypass", "LOGIN BYPASSRLS")
    admin.execute(f"GRANT {app} TO {bypasser}")
    _bypass_refused(_cli(_url(bypasser, schema), "check"), "BYPASSRLS", repr(bypasser))
    refused = _cli(_url(owner, schema), "migrate", "--app-role", bypasser)
    assert refused.exit_code == 1
    assert "BYPASSRLS" in refused.stderr

    admin.execute(f"ALTER TABLE {schema}.sessions NO FORCE ROW LEVEL SECURITY")
    _bypass_refused(_cli(_url(owner, schema), "check"), "the owner of tables sessions")
    assert _cli(_url(app, schema), "check").exit_code == 0  # still bound: not the owner
    refused = _cli(_url(owner, schema), "migrate", "--app-role", owner)
    assert refused.exit_code == 1
    assert "owns" in refused.stderr

    admin.execute(f"ALTER TABLE {schema}.items DISABLE ROW LEVEL SECURITY")
    _bypass_refused(_cli(_url(app, schema), "check"),
                    "tables items have row-level security disabled")


def test_migrate_creates_a_nologin_app_role_that_a_login_role_can_use(
        admin: Any, schema: str, make_role: MakeRole) -> None:
    app = f"os_app_{uuid.uuid4().hex[:8]}"
    _created_by_migrate.append(app)
    url = _url(None, schema)  # a superuser migrates: it may create the role
    created = _cli(url, "migrate", "--app-role", app)
    assert created.exit_code == 0, created.output
    assert f"created role {app!r} (NOLOGIN" in created.stdout
    again = _cli(url, "migrate", "--app-role", app)  # idempotent
    assert again.exit_code == 0
    assert "created" not in again.stdout
    assert admin.execute("SELECT rolcanlogin, rolsuper, rolbypassrls, rolcreaterole "
                         "FROM pg_roles WHERE rolname = %s", (app,)).fetchone() == (
        False, False, False, False)
    privileges = admin.execute(
        "SELECT has_table_privilege(%(r)s, %(s)s || '.sessions', 'INSERT'), "
        "has_table_privilege(%(r)s, %(s)s || '.items', 'DELETE'), "
        "has_table_privilege(%(r)s, %(s)s || '.ownstate_schema', 'SELECT'), "
        "has_table_privilege(%(r)s, %(s)s || '.ownstate_schema', 'INSERT'), "
        "has_table_privilege(%(r)s, %(s)s || '.sessions', 'TRUNCATE'), "
        "has_schema_privilege(%(r)s, %(s)s, 'CREATE'), "
        "has_function_privilege(%(r)s, %(s)s || '.find_api_key(text)', 'EXECUTE')",
        {"r": app, "s": schema}).fetchone()
    assert privileges == (True, True, True, False, False, False, True)
    login = make_role("login", f"LOGIN IN ROLE {app}")
    checked = _cli(_url(login, schema), "check")
    assert (checked.exit_code, checked.stderr) == (0, ""), checked.output
    with ownstate.connect(_url(login, schema), migrate=False) as client:
        client.session_stores.create("support").add(actor_id="u", session_id="s")
        assert client.isolation_bypass() is None


def test_a_migrator_that_may_not_create_roles_is_told_what_to_do(
        owned_schema: tuple[str, str]) -> None:
    schema, owner = owned_schema
    missing = f"os_app_{uuid.uuid4().hex[:8]}"
    refused = _cli(_url(owner, schema), "migrate", "--app-role", missing)
    assert refused.exit_code == 1
    # the migration's steps, then the refusal in one line
    *steps, told = refused.stderr.splitlines()
    assert "CREATEROLE" in told
    assert all(line.startswith("migration ") for line in steps)



def test_only_tables_the_role_owns_are_analyzed_after_growing(
        admin: Any, owned_schema: tuple[str, str], make_role: MakeRole,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The application role may not analyze the owner's tables: what a bulk write runs
    after it commits (``analyze_grown``) leaves them to autovacuum, without an error; as
    the owner it analyzes them."""
    import asyncio

    import psycopg

    from ownstate.backends.postgres import _statistics

    monkeypatch.setattr(_statistics, "MIN_PAGES", 1)
    schema, owner = owned_schema
    app = make_role("app", "LOGIN")
    assert _cli(_url(owner, schema), "migrate", "--app-role", app).exit_code == 0
    with ownstate.connect(_url(app, schema), migrate=False) as client:
        session = client.session_stores.create("support").add(actor_id="u", session_id="s1")
        session.append_items([{"role": "user", "content": f"turn {n}"} for n in range(50)])

    async def grown(role: str) -> list[str]:
        async with await psycopg.AsyncConnection.connect(
                _url(role, None).split("?")[0], autocommit=True) as conn:
            return await _statistics.analyze_grown(
                conn.cursor(), schema, ["items", "sessions"])  # type: ignore[arg-type]

    def items_counted() -> float:
        return float(admin.execute(
            "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'items'", (schema,)).fetchone()[0])

    assert asyncio.run(grown(app)) == []
    assert items_counted() == -1
    assert asyncio.run(grown(owner)) == ["items", "sessions"]
    assert items_counted() == 50
    assert asyncio.run(grown(owner)) == []  # not grown since
