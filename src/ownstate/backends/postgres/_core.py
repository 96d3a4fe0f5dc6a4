"""What every part of the PostgreSQL backend shares: the pool, transactions, error mapping.

Every operation is one transaction on a pooled connection. The transaction begins by
setting ``ownstate.tenant`` with ``set_config(..., true)`` (the ``SET LOCAL`` form), which
the row-level security policies on every tenant-scoped table compare against: a query that
forgot its tenant predicate still sees only the caller's tenant.

Reads are retried once on a fresh connection when the connection was lost; a write whose
connection was lost raises :class:`~ownstate.errors.BackendUnavailable`, because whether it
committed is unknown.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ...errors import BackendUnavailable, Conflict, InvalidInput, OwnstateError

try:
    import psycopg
    from psycopg import AsyncConnection, AsyncCursor, sql
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL backend needs the 'postgres' extra: pip install 'ownstate[postgres]'"
    ) from exc

__all__ = ["Cursor", "PostgresCore", "translate"]

T = TypeVar("T")
Cursor = AsyncCursor[Any]


def translate(exc: psycopg.Error) -> OwnstateError:
    """The ownstate error for a driver error that escaped an operation."""
    if isinstance(exc, psycopg.errors.IntegrityError):
        return Conflict(f"the database refused the write: {exc}")
    if isinstance(exc, (psycopg.errors.DataError, psycopg.errors.ProgrammingError)) and not (
        isinstance(exc, psycopg.errors.UndefinedTable)
    ):
        return InvalidInput(f"the database refused the input: {exc}")
    return BackendUnavailable(f"PostgreSQL failed: {exc}")


def _connection_lost(exc: BaseException) -> bool:
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


class PostgresCore:
    """A PostgreSQL database reached through a pool, tables in one schema.

    Give it a libpq connection string (it then opens and closes its own pool) or a ready
    ``psycopg_pool.AsyncConnectionPool`` (which it uses and never closes). ``schema`` is the
    PostgreSQL schema that holds ownstate's tables, so several applications can share one
    database.
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        schema: str = "ownstate",
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
    ) -> None:
        if (conninfo is None) == (pool is None):
            raise InvalidInput("give the PostgreSQL backend a conninfo or a pool, not both")
        self._schema = schema
        self._owns_pool = pool is None
        self._pool: AsyncConnectionPool[Any] = pool or AsyncConnectionPool(
            conninfo or "", min_size=min_size, max_size=max_size, open=False, timeout=timeout,
            configure=self._configure, check=AsyncConnectionPool.check_connection,
            kwargs={"autocommit": True},
        )
        self._opened = False

    @property
    def schema(self) -> str:
        return self._schema

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(sql.SQL("SET search_path TO {}, public").format(
            sql.Identifier(self._schema)))

    async def _open(self) -> None:
        if not self._opened:
            if self._owns_pool:
                try:
                    await self._pool.open(wait=True, timeout=self._pool.timeout)
                except (psycopg.Error, PoolTimeout) as exc:
                    raise BackendUnavailable(f"PostgreSQL is unreachable: {exc}") from exc
            self._opened = True

    async def close(self) -> None:
        if self._owns_pool and self._opened:
            await self._pool.close()
        self._opened = False

    async def _transaction(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]]) -> T:
        await self._open()
        async with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            if tenant is not None:
                await cur.execute("SELECT set_config('ownstate.tenant', %s, true)", (tenant,))
            return await fn(cur)

    async def _read(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]]) -> T:
        """Run a read-only transaction, retried once on a new connection if one was lost."""
        for attempt in (1, 2):
            try:
                return await self._transaction(tenant, fn)
            except psycopg.Error as exc:
                if attempt == 1 and _connection_lost(exc):
                    continue
                raise translate(exc) from exc
            except PoolTimeout as exc:
                raise BackendUnavailable(f"no PostgreSQL connection: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(self, tenant: str | None, fn: Callable[[Cursor], Awaitable[T]]) -> T:
        """Run a write transaction; a lost connection is BackendUnavailable, not retried."""
        try:
            return await self._transaction(tenant, fn)
        except psycopg.Error as exc:
            if _connection_lost(exc):
                raise BackendUnavailable(
                    f"the PostgreSQL connection was lost during a write; it may or may not "
                    f"have been applied: {exc}") from exc
            raise translate(exc) from exc
        except PoolTimeout as exc:
            raise BackendUnavailable(f"no PostgreSQL connection: {exc}") from exc
