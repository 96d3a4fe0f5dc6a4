"""Database roles in PostgreSQL: whether row-level security binds this connection, and the
application role that it is meant to bind.

Row-level security (see ``schema.py``) does not apply to a superuser, to a role with
``BYPASSRLS``, or to a table's owner unless the table has ``FORCE ROW LEVEL SECURITY``
(ownstate's migrations force it, but someone may have turned it off). In those cases
nothing fails: every query still names its tenant, but the database no longer stands
behind a query that forgets to. :meth:`RolesInPostgres.isolation_bypass` says which case
applies, so that ``ownstate check`` and ``ownstate serve`` can say so.

The application role (``ownstate migrate --app-role NAME``) reads and writes rows and
owns nothing: ``USAGE`` on the schema, ``SELECT, INSERT, UPDATE, DELETE`` on every table
(only ``SELECT`` on ``ownstate_schema``), ``USAGE, SELECT`` on the sequences behind the
internal ids, ``EXECUTE`` on the functions, and the same by default on what later
migrations create. No ``CREATE`` on the schema, no ``TRUNCATE``, ``REFERENCES`` or
``TRIGGER``. A role that is missing is created ``NOLOGIN``: a password does not belong on
a command line, so either grant the role to the login roles the application uses
(``GRANT ownstate_app TO app_login``), or give it one yourself (``ALTER ROLE ownstate_app
LOGIN PASSWORD '...'``). An existing role is used as it is; one that row-level security
would not bind (a superuser, ``BYPASSRLS``, an owner of ownstate's tables) is refused.

It may touch PostgreSQL through ``_core`` and psycopg's ``sql`` and ``errors`` (through
``ownstate._extras``), and ownstate's errors.
"""

from __future__ import annotations

from ..._extras import requires
from ...errors import InvalidInput, PermissionDenied
from ._core import Cursor, PostgresCore

with requires("postgres", "the PostgreSQL backend"):
    from psycopg import errors, sql

__all__ = ["RolesInPostgres"]

#: The schema's tables that hold tenants' rows, whether this role owns each (with the
#: owner's rights, which is what exempts an owner), and their row-level security flags.
_TENANT_TABLES = """
    SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
           pg_has_role(current_user, c.relowner, 'USAGE')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND EXISTS (
        SELECT 1 FROM pg_attribute a
        WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped)
    ORDER BY c.relname
"""

#: What the application role is granted, in the schema {schema}, to {role}.
_GRANTS = (
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
    "REVOKE INSERT, UPDATE, DELETE ON {schema}.ownstate_schema FROM {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} "
    "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {role}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT EXECUTE ON FUNCTIONS TO {role}",
)


def _names(tables: list[str]) -> str:
    return ", ".join(tables[:4]) + (f" and {len(tables) - 4} more" if len(tables) > 4 else "")


class RolesInPostgres(PostgresCore):
    """Row-level security as this connection's role meets it, and the application role."""

    async def isolation_bypass(self) -> str | None:
        async def run(cur: Cursor) -> str | None:
            await cur.execute("SELECT current_user, rolsuper, rolbypassrls FROM pg_roles "
                              "WHERE rolname = current_user")
            row = await cur.fetchone()
            assert row is not None  # the connected role exists
            role, superuser, bypassrls = str(row[0]), bool(row[1]), bool(row[2])
            await cur.execute(_TENANT_TABLES, (self.schema,))
            tables = await cur.fetchall()
            if superuser:
                why = f"connected as {role!r}, a superuser"
            elif bypassrls:
                why = f"connected as {role!r}, which has BYPASSRLS"
            elif off := [str(t[0]) for t in tables if not t[1]]:
                why = f"tables {_names(off)} have row-level security disabled"
            elif owned := [str(t[0]) for t in tables if t[3] and not t[2]]:
                why = (f"connected as {role!r}, the owner of tables {_names(owned)}, which "
                       "do not FORCE ROW LEVEL SECURITY")
            else:
                return None
            return (f"row-level security is not in force in schema {self.schema!r}: {why}; "
                    "connect as a role that is no superuser, has no BYPASSRLS and owns no "
                    "tables (`ownstate migrate --app-role NAME`, see docs/postgres.md)")

        return await self._read(None, run)

    async def grant_app_role(self, role: str) -> bool:
        if not role or len(role.encode()) > 63 or "\x00" in role or role.startswith("pg_"):
            raise InvalidInput(f"{role!r} cannot be a PostgreSQL role name", field="role")
        ident = sql.Identifier(role)

        async def run(cur: Cursor) -> bool:
            await cur.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s",
                              (role,))
            found = await cur.fetchone()
            if found is not None and (found[0] or found[1]):
                raise InvalidInput(
                    f"role {role!r} is a superuser or has BYPASSRLS, so row-level security "
                    "would not bind it; choose another role", field="role")
            if found is None:
                try:
                    await cur.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(ident))
                except errors.InsufficientPrivilege as exc:
                    raise PermissionDenied(
                        f"this role may not create role {role!r} ({exc}); create it as a "
                        "role with CREATEROLE, then run this again", role=role) from exc
            await cur.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
                "AND pg_has_role(%s, c.relowner, 'USAGE') ORDER BY 1", (self.schema, role))
            owned = [str(r[0]) for r in await cur.fetchall()]
            if owned:
                raise InvalidInput(
                    f"role {role!r} owns (or may act as the owner of) tables "
                    f"{_names(owned)} in schema {self.schema!r}; row-level security would "
                    "not bind it there. Give the application a role of its own",
                    field="role")
            for grant in _GRANTS:
                statement = sql.SQL(grant).format(schema=sql.Identifier(self.schema),
                                                  role=ident)
                try:
                    await cur.execute(statement)
                except errors.InsufficientPrivilege as exc:
                    raise PermissionDenied(
                        f"this role may not grant access to schema {self.schema!r} ({exc}); "
                        "run `ownstate migrate --app-role` as the schema's owner",
                        role=role) from exc
            return found is None

        return await self._write(None, run)
