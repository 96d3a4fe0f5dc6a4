"""What the sources that read a framework's database share: a read-only SQLAlchemy engine
over it, appends cut to ownstate's batch limits, and keys derived from source ids.

The source is opened so that the database itself refuses writes, not only because the
importer issues none: a SQLite file is opened with ``mode=ro``; a PostgreSQL connection
starts with ``default_transaction_read_only`` on. Other databases SQLAlchemy speaks are
read with the URL as given (the importers issue only ``SELECT``).

It may touch the public API, the error tree and the limits, and SQLAlchemy, imported when a
source is opened.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ...api import AsyncClient
from ...api.aio import AsyncSessionStore
from ...errors import AlreadyExists, StoreNotFound
from ...limits import Limits

if TYPE_CHECKING:
    from sqlalchemy.engine import URL
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["batches", "derived_key", "readonly_engine", "redacted", "session_store"]

T = TypeVar("T")


def _sqlite_readonly(path: Path) -> URL:
    from urllib.parse import quote

    from sqlalchemy.engine import URL

    if not path.is_file():
        raise ValueError(f"{path} is not a file")
    # A SQLite URI, so that the driver opens the file read-only.
    return URL.create("sqlite+aiosqlite", database=f"file:{quote(str(path.resolve()))}",
                      query={"mode": "ro", "uri": "true"})


def readonly_engine(source: str) -> AsyncEngine:
    """An async engine that can only read ``source``: a path (a SQLite file) or a
    SQLAlchemy URL (``sqlite:///...``, ``postgresql://...``; SQLite is read with
    ``aiosqlite``, PostgreSQL with ``psycopg`` when the URL names it or no driver, else
    ``asyncpg``). Raises :class:`ValueError` for a path that
    is no file, an in-memory SQLite URL or a URL SQLAlchemy cannot use."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError
    from sqlalchemy.ext.asyncio import create_async_engine

    if "://" not in source:
        return create_async_engine(_sqlite_readonly(Path(source).expanduser()))
    try:
        url = make_url(source)
    except ArgumentError as exc:
        raise ValueError(f"{source!r} is neither a path nor a database URL") from exc
    backend = url.get_backend_name()
    connect_args: dict[str, Any] = {}
    if backend == "sqlite":
        if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
            raise ValueError("give the SQLite database as a file path or sqlite:///PATH")
        return create_async_engine(_sqlite_readonly(Path(url.database).expanduser()))
    if backend == "postgresql":
        if url.get_driver_name() in ("psycopg2", "pg8000", "asyncpg"):
            url = url.set(drivername="postgresql+asyncpg")
            connect_args["server_settings"] = {"default_transaction_read_only": "on"}
        elif url.get_driver_name() == "psycopg":
            connect_args["options"] = "-c default_transaction_read_only=on"
    try:
        return create_async_engine(url, connect_args=connect_args)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise ValueError(f"cannot open {redacted(source)}: {exc}") from exc


def redacted(source: str) -> str:
    """``source`` with any password in it hidden, for messages."""
    if "://" not in source:
        return source
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(source).render_as_string(hide_password=True)
    except ArgumentError:
        return "<a database URL>"


def derived_key(source: str, *ids: object) -> str:
    """An idempotency key naming what an append holds by its source ids."""
    text = json.dumps([source, *ids], ensure_ascii=False, default=str)
    return f"import:{source}:{hashlib.sha256(text.encode()).hexdigest()[:40]}"


def batches(pairs: Sequence[tuple[T, dict[str, Any]]], limits: Limits
            ) -> Iterator[list[tuple[T, dict[str, Any]]]]:
    """``(source id, item)`` pairs cut into appends within ``limits`` (items and bytes
    per append), in order. Raises what :meth:`Limits.encode_items` raises for an item
    ownstate cannot store."""
    batch: list[tuple[T, dict[str, Any]]] = []
    size = 0
    for pair in pairs:
        length = len(limits.encode_items([pair[1]])[0].encode())
        if batch and (len(batch) >= limits.max_batch_items
                      or size + length > limits.max_batch_bytes):
            yield batch
            batch, size = [], 0
        batch.append(pair)
        size += length
    if batch:
        yield batch


async def session_store(client: AsyncClient, name: str, *, create: bool
                        ) -> AsyncSessionStore | None:
    """The session store ``name``; made when missing with ``create``, else ``None``."""
    try:
        return await client.session_stores.get(name)
    except StoreNotFound:
        if not create:
            return None
        try:
            return await client.session_stores.create(name)
        except AlreadyExists:  # made by a unit imported at the same time
            return await client.session_stores.get(name)
