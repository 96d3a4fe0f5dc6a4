"""A framework's own database opened read-only: a PostgreSQL pool or a SQLite file.

Shared by the LangGraph sources: :class:`ReadOnlyDatabase`, and
:class:`DatabaseImporter`, an importer whose source is one. ``--from`` is a PostgreSQL URL
(every session of the pool is ``default_transaction_read_only``) or a SQLite file
(``sqlite:///path`` or a path), opened with a ``mode=ro`` URI so nothing can write it.

It may touch the importer base (``importers.base``) and, imported when a source is opened,
psycopg and psycopg_pool, or aiosqlite; nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..base import Importer

__all__ = ["DatabaseImporter", "ReadOnlyDatabase"]

D = TypeVar("D")


def _sqlite_path(source: str) -> Path:
    path = source.removeprefix("sqlite://")
    if source.startswith("sqlite://"):
        path = path.removeprefix("/") if path.startswith("//") else path
    return Path(path).expanduser()


class ReadOnlyDatabase:
    """``pool`` (PostgreSQL, rows as dicts, as LangGraph's classes want them) or
    ``sqlite`` (an aiosqlite connection) is set after :meth:`open`."""

    def __init__(self, source: str, *, size: int) -> None:
        self.source = source
        self.size = size
        self.pool: Any = None
        self.sqlite: Any = None

    @property
    def is_postgres(self) -> bool:
        return self.source.startswith(("postgresql://", "postgres://"))

    async def open(self) -> None:
        if self.is_postgres:
            import psycopg
            from psycopg.rows import dict_row
            from psycopg_pool import AsyncConnectionPool

            # One connection first: an unreachable source fails now, with the driver's
            # reason, not after the pool has retried for its whole timeout.
            probe = await psycopg.AsyncConnection.connect(self.source, connect_timeout=10)
            await probe.close()
            self.pool = AsyncConnectionPool(
                self.source, min_size=1, max_size=self.size, open=False,
                kwargs={"autocommit": True, "prepare_threshold": None,
                        "row_factory": dict_row,
                        "options": "-c default_transaction_read_only=on"})
            await self.pool.open(wait=True)
            return
        import aiosqlite

        path = _sqlite_path(self.source)
        if not path.is_file():
            raise ValueError(f"{self.source} is neither a PostgreSQL URL nor a SQLite file")
        self.sqlite = await aiosqlite.connect(f"file:{path}?mode=ro", uri=True)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        if self.sqlite is not None:
            await self.sqlite.close()

    async def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Rows of one statement written for both databases (``%s`` placeholders)."""
        if self.pool is not None:
            async with self.pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return list(await cur.fetchall())
        async with self.sqlite.execute(sql.replace("%s", "?"), params) as cur:
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


class DatabaseImporter(Importer[D]):
    """An importer reading a :class:`ReadOnlyDatabase` (``_db``): opened by :meth:`open`
    (a subclass goes on to pick its readers), closed by :meth:`close`; its units are
    counted by ``count_sql``."""

    #: one statement giving the number of units as ``n``
    count_sql: ClassVar[str]

    async def open(self) -> None:
        self._db = ReadOnlyDatabase(self.source, size=self.concurrency)
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def count(self) -> int | None:
        rows = await self._db.query(self.count_sql)
        return int(rows[0]["n"])
