"""Bulk loads under row-level security: ``ownstate import langgraph``, ``ownstate import
archive`` and ``ownstate copy`` run as the application role or as the schema's owner (not
superusers: the policies bind both) store what a superuser's run stores, and a bulk batch
carrying a row of another tenant is refused whole.

PostgreSQL refuses ``COPY FROM`` into a table whose row-level security binds the role, so
these loads go through a temporary table (``Cursor.load_rows``). The roles are made as in
``test_postgres_roles.py``, whose fixtures these tests use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_postgres_roles as roles
from test_import_bulk import bundle, lg_source, rows
from transfer_support import filled

import ownstate
from ownstate import archive
from ownstate.api.bulk import add_sessions
from ownstate.backends.postgres._core import Cursor
from ownstate.errors import OwnstateError
from ownstate.testing.transfer import part_rows

admin, schema = roles.admin, roles.schema  # the fixtures
make_role, owned_schema = roles.make_role, roles.owned_schema
__all__ = ["lg_source"]  # a fixture these tests use

TENANTS = ("default", "acme")


def _bound_url(kind: str, owned: tuple[str, str], make: roles.MakeRole) -> str:
    """The schema ``owned`` migrated by its owner with an application role, and the URL of
    ``kind`` (``app`` or ``owner``) on it."""
    schema, owner = owned
    app = make("app", "LOGIN")
    migrated = roles._cli(roles._url(owner, schema), "migrate", "--app-role", app)
    assert migrated.exit_code == 0, migrated.output
    return roles._url(app if kind == "app" else owner, schema)


def _every_row(url: str) -> dict[str, Any]:
    found = {}
    for tenant in TENANTS:
        with ownstate.connect(url, tenant=tenant, migrate=False) as client:
            found[tenant] = part_rows(client, page=1000)
    return found


@pytest.mark.parametrize("kind", ["app", "owner"])
def test_an_archive_import_and_a_copy_as_a_bound_role(
        kind: str, owned_schema: tuple[str, str], make_role: roles.MakeRole,
        make_url: Callable[[str], str], tmp_path: Path) -> None:
    bound = _bound_url(kind, owned_schema, make_role)
    source = make_url("sqlite")
    with filled(source) as client:
        archive.export(client, tmp_path / "all.tar", include_keys=True)
    reference = make_url("postgres")  # the test URL's role: a superuser
    done = roles._cli(reference, "import", "archive", "--from", str(tmp_path / "all.tar"))
    assert done.exit_code == 0, done.output
    expected = _every_row(reference)
    assert all(expected[t]["items"] for t in TENANTS)

    imported = roles._cli(bound, "import", "archive", "--from", str(tmp_path / "all.tar"))
    assert imported.exit_code == 0, imported.output
    assert _every_row(bound) == expected

    # a copy into another schema, as the same kind of role
    copied_schema = owned_schema[0] + "_c"
    target = bound.replace(f"schema={owned_schema[0]}", f"schema={copied_schema}")
    _own_schema_like(owned_schema[1], copied_schema, bound)
    try:
        copied = roles._cli(target, "copy", source, target, "--include-keys",
                              "--verify")
        assert copied.exit_code == 0, copied.output
        assert "verified: equal" in copied.output
        assert _every_row(target) == expected
    finally:
        _drop(copied_schema)


def _own_schema_like(owner: str, name: str, bound: str) -> None:
    """Schema ``name``, owned by ``owner`` and migrated, with the role of ``bound`` made
    its application role when it is not the owner."""
    import psycopg

    role = bound.split("://", 1)[1].split("@", 1)[0]
    with psycopg.connect(roles.POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name} AUTHORIZATION {owner}")
    args = ["migrate"] + (["--app-role", role] if role != owner else [])
    migrated = roles._cli(roles._url(owner, name), *args)
    assert migrated.exit_code == 0, migrated.output


def _drop(name: str) -> None:
    import psycopg

    with psycopg.connect(roles.POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.mark.parametrize("kind", ["app", "owner"])
def test_a_langgraph_import_as_a_bound_role(
        kind: str, owned_schema: tuple[str, str], make_role: roles.MakeRole,
        make_url: Callable[[str], str], lg_source: tuple[str, dict[str, str]]) -> None:
    bound = _bound_url(kind, owned_schema, make_role)
    source, made = lg_source
    reference = make_url("postgres")

    async def imported(url: str) -> Any:
        client = await ownstate.connect_async(url, migrate=False)
        try:
            return await rows(client)
        finally:
            await client.close()

    stored = {}
    for url in (reference, bound):
        done = roles._cli(url, "import", "langgraph", "--from", source, "--verify")
        assert done.exit_code == 0, done.output
        stored[url] = asyncio.run(imported(url))
    assert stored[bound] == stored[reference]
    sessions = stored[bound][0]
    assert len(sessions) == len(made)


def test_a_batch_with_a_row_of_another_tenant_is_refused_whole(
        admin: Any, owned_schema: tuple[str, str], make_role: roles.MakeRole,
        monkeypatch: pytest.MonkeyPatch) -> None:
    schema = owned_schema[0]
    bound = _bound_url("app", owned_schema, make_role)
    load = Cursor.load_rows

    async def smuggling(self: Cursor, table: str, columns: Any, rows: Any,
                        types: Any = None) -> None:
        # the last row of the batch says it belongs to another tenant
        listed = [list(r) for r in rows]
        listed[-1][list(columns).index("tenant")] = "acme"
        await load(self, table, columns, listed, types)

    def stored() -> dict[str, int]:
        return {table: admin.execute(f"SELECT count(*) FROM {schema}.{table}").fetchone()[0]
                for table in ("sessions", "items", "runs", "checkpoints",
                              "checkpoint_writes")}

    async def main() -> None:
        client = await ownstate.connect_async(bound, migrate=False)
        try:
            store = await client.session_stores.create("support")
            # the bound role stores a batch of its own tenant's rows
            assert await add_sessions(store, [bundle("ok")]) == [True]
            before = stored()
            assert before == {"sessions": 1, "items": 2, "runs": 1, "checkpoints": 1,
                              "checkpoint_writes": 1}
            with monkeypatch.context() as patch:
                patch.setattr(Cursor, "load_rows", smuggling)
                with pytest.raises(OwnstateError, match="row-level security"):
                    await add_sessions(store, [bundle("a"), bundle("b")])
                # and a restore batch (ownstate import archive, ownstate copy)
                backend, tenant = client._scope.backend, client._scope.tenant
                items, _ = await backend.export_rows(tenant, "items", None, 10)
                more = [{**r, "seq": r["seq"] + 2, "item_id": r["item_id"] + "-2"}
                        for r in items]
                with pytest.raises(OwnstateError, match="row-level security"):
                    await backend.restore_rows(tenant, "items", more)
            assert stored() == before
            assert await backend.restore_rows(tenant, "items", more) == 2
            assert stored()["items"] == 4
        finally:
            await client.close()

    asyncio.run(main())
