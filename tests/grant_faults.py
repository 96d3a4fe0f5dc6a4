"""How each test target makes its datastore fail to write a store's grants (the
``grant_fault`` of :class:`ownstate.testing.Target`, used by ``ownstate.testing.faults``).

Each fault is the datastore's own refusal, inside the operation under test: a trigger
that raises in the same SQL transaction, a Redis key of the wrong type that makes the
script touching it fail, a grants table that refuses writes in the in-memory backend.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ownstate
from ownstate.backends.memory import _shared

__all__ = ["InjectedFault", "memory_fault", "postgres_fault", "redis_fault", "sqlite_fault"]

_SAFE = re.compile(r"[A-Za-z0-9_.:-]+")


class InjectedFault(ownstate.BackendUnavailable):
    """What the in-memory datastore raises while it refuses to write a store's grants: a
    failure of the datastore, as a real one reaches the caller."""


def _literal(value: str) -> str:
    assert _SAFE.fullmatch(value), value  # tenants, kinds and store names are plain
    return f"'{value}'"


class _RefusingGrants(dict[Any, Any]):
    """The in-memory grants table, refusing every write to one store's grants."""

    def __init__(self, grants: dict[Any, Any], key: tuple[str, str, str]) -> None:
        super().__init__(grants)
        self.key = key

    def _check(self, key: Any) -> None:
        if key == self.key:
            raise InjectedFault(f"the grants of {key} cannot be written")

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._check(key)
        super().__delitem__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._check(key)
        return super().pop(key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._check(key)
        return super().setdefault(key, default)


def memory_fault(database: str) -> Any:
    """For the in-memory database shared under ``database`` (``memory://NAME``)."""

    @contextmanager
    def fault(client: ownstate.Client, kind: str, store: str) -> Iterator[None]:
        data = _shared[database]
        with data.lock:
            kept = data.grants
            data.grants = _RefusingGrants(kept, (client.tenant, kind, store))
        try:
            yield
        finally:
            with data.lock:
                refused, data.grants = data.grants, kept
                kept.clear()
                kept.update(refused)

    return fault


def _sql_trigger_body(client: ownstate.Client, kind: str, store: str, row: str) -> str:
    return (f"{row}.tenant = {_literal(client.tenant)} AND {row}.kind = {_literal(kind)} "
            f"AND {row}.store = {_literal(store)}")


def sqlite_fault(path: str) -> Any:
    """For the SQLite file at ``path``: triggers that abort the statement (and so the
    transaction it is in) writing the store's grants."""
    import sqlite3

    @contextmanager
    def fault(client: ownstate.Client, kind: str, store: str) -> Iterator[None]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            for event, row in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
                conn.execute(
                    f"CREATE TRIGGER fault_{event.lower()} BEFORE {event} ON store_grants "
                    f"WHEN {_sql_trigger_body(client, kind, store, row)} "
                    "BEGIN SELECT RAISE(ABORT, 'injected fault'); END")
            yield
        finally:
            for event in ("insert", "update", "delete"):
                conn.execute(f"DROP TRIGGER IF EXISTS fault_{event}")
            conn.close()

    return fault


def postgres_fault(url: str, schema: str) -> Any:
    """For the PostgreSQL schema ``schema``: a row trigger that raises in the transaction
    writing the store's grants."""
    import psycopg

    @contextmanager
    def fault(client: ownstate.Client, kind: str, store: str) -> Iterator[None]:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"""
                CREATE FUNCTION {schema}.injected_fault() RETURNS trigger
                LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$""")
            try:
                for event, row in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
                    conn.execute(
                        f"CREATE TRIGGER fault_{event.lower()} BEFORE {event} "
                        f"ON {schema}.store_grants FOR EACH ROW "
                        f"WHEN ({_sql_trigger_body(client, kind, store, row)}) "
                        f"EXECUTE FUNCTION {schema}.injected_fault()")
                yield
            finally:
                conn.execute(f"DROP FUNCTION {schema}.injected_fault() CASCADE")

    return fault


def redis_fault(url: str, prefix: str) -> Any:
    """For the Redis keys under ``prefix``: the store's grants key holds a string while
    the fault lasts, so every script that reads or writes it fails (before its writes,
    where the script reads first)."""
    import redis

    @contextmanager
    def fault(client: ownstate.Client, kind: str, store: str) -> Iterator[None]:
        key = f"{prefix}:{{{client.tenant}}}:grants:{kind}:{store}"
        server = redis.Redis.from_url(url)
        try:
            kept = server.dump(key)
            server.set(key, "not a hash")
            try:
                yield
            finally:
                server.delete(key)
                if kept is not None:
                    server.restore(key, 0, kept)
        finally:
            server.close()

    return fault
