"""psycopg's synchronous pool and connections behind the awaitable interface the backend
uses, so that a sync client drives the backend on its own thread with no event loop.

The backend's operations are coroutines that await their cursor. Given these wrappers,
each await runs the synchronous psycopg call at once and never suspends, so the sync
client's inline portal can drive an operation to its end on the calling thread: no hop to
a loop thread and back, and libpq's own wait for the server instead of the event loop's.
Threads of the caller run their operations concurrently, each on a connection of the
(thread-safe) pool.

Each wrapper has only the methods and properties the backend uses, named as psycopg's
async classes name them. ``raw`` is the psycopg connection a wrapper stands for: what the
backend remembers per connection is keyed by it, since a connection gets a new wrapper at
every checkout.

It may touch psycopg and psycopg_pool (through ``ownstate._extras``), nothing of ownstate's.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ..._extras import requires

with requires("postgres", "the PostgreSQL backend"):
    from psycopg import Connection, Copy, sql
    from psycopg import Cursor as SyncCursor
    from psycopg.abc import Params
    from psycopg_pool import ConnectionPool

__all__ = ["InlineConnection", "InlinePool"]

Query = str | bytes | sql.SQL | sql.Composed


class _InlineCopy:
    __slots__ = ("_copy",)

    def __init__(self, copy: Copy) -> None:
        self._copy = copy

    def set_types(self, types: Sequence[str]) -> None:
        self._copy.set_types(types)

    async def write_row(self, row: Sequence[Any]) -> None:
        self._copy.write_row(row)


class _Entered:
    """An async context manager around a sync one, yielding ``wrap`` of what it yields."""

    __slots__ = ("_manager", "_wrap")

    def __init__(self, manager: Any, wrap: Any = None) -> None:
        self._manager = manager
        self._wrap = wrap

    async def __aenter__(self) -> Any:
        entered = self._manager.__enter__()
        return entered if self._wrap is None else self._wrap(entered)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._manager.__exit__(kind, exc, tb)


class _InlineCursor:
    __slots__ = ("_cur",)

    def __init__(self, cur: SyncCursor[Any]) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    async def execute(self, query: Query, params: Params | None = None, *,
                      binary: bool | None = None) -> _InlineCursor:
        self._cur.execute(query, params, binary=binary)
        return self

    async def executemany(self, query: Query, params_seq: Any) -> None:
        self._cur.executemany(query, params_seq)

    async def fetchone(self) -> Any:
        return self._cur.fetchone()

    async def fetchall(self) -> list[Any]:
        return self._cur.fetchall()

    def copy(self, statement: Query) -> _Entered:
        return _Entered(self._cur.copy(statement), _InlineCopy)


class InlineConnection:
    """A pooled psycopg ``Connection`` for the backend to await."""

    __slots__ = ("raw",)

    def __init__(self, raw: Connection[Any]) -> None:
        self.raw = raw

    @property
    def broken(self) -> bool:
        return self.raw.broken

    @property
    def closed(self) -> bool:
        return self.raw.closed

    @property
    def info(self) -> Any:
        return self.raw.info

    @property
    def adapters(self) -> Any:
        return self.raw.adapters

    def fileno(self) -> int:
        return self.raw.fileno()

    def cursor(self) -> _InlineCursor:
        return _InlineCursor(self.raw.cursor())

    async def execute(self, query: Query, params: Params | None = None) -> _InlineCursor:
        return _InlineCursor(self.raw.execute(query, params))

    def pipeline(self) -> _Entered:
        return _Entered(self.raw.pipeline())

    async def wait(self, gen: Any) -> Any:
        return self.raw.wait(gen)

    async def close(self) -> None:
        self.raw.close()

    async def __aenter__(self) -> InlineConnection:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.raw.__exit__(kind, exc, tb)

    @classmethod
    async def connect(cls, conninfo: str, **options: Any) -> InlineConnection:
        """A connection of its own, outside any pool."""
        return cls(Connection.connect(conninfo, **options))


class InlinePool:
    """A psycopg ``ConnectionPool`` for the backend to await; its connections come
    wrapped."""

    __slots__ = ("raw",)

    def __init__(self, raw: ConnectionPool[Any]) -> None:
        self.raw = raw

    @property
    def conninfo(self) -> Any:
        return self.raw.conninfo

    @property
    def kwargs(self) -> Any:
        return self.raw.kwargs

    @property
    def max_size(self) -> int:
        return self.raw.max_size

    @property
    def timeout(self) -> float:
        return self.raw.timeout

    async def open(self, *, wait: bool, timeout: float) -> None:
        self.raw.open(wait=wait, timeout=timeout)

    async def close(self) -> None:
        self.raw.close()

    def connection(self) -> _Entered:
        return _Entered(self.raw.connection(), InlineConnection)
