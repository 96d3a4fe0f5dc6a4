"""``ownstate import langgraph-store``: items that LangGraph's SqliteStore and PostgresStore
hold, as the facts OwnstateStore reads back."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore

import ownstate
from ownstate.adapters.langgraph import OwnstateStore
from ownstate.importers import run_import

NAMESPACES = [("user:8814", "prefs"), ("user:8814",), ("account:ACME", "notes", "q1")]


class Source:
    def __init__(self, url: str, opener: Any) -> None:
        self.url = url
        self.open = opener


@pytest.fixture(params=["sqlite", "postgres"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Source:
    if request.param == "sqlite":
        path = tmp_path / "store.sqlite"
        return Source(f"sqlite:///{path}", lambda: SqliteStore.from_conn_string(str(path)))
    url = request.getfixturevalue("new_database")("lgs")
    return Source(url, lambda: PostgresStore.from_conn_string(url))


def fill(source: Source) -> list[Any]:
    with source.open() as store:
        store.setup()
        for n, namespace in enumerate(NAMESPACES):
            for k in range(3):
                store.put(namespace, f"k{k}", {"n": n, "k": k, "text": "préféré ☃"})
        time.sleep(0.01)
        store.put(NAMESPACES[0], "k1", {"n": 0, "k": 1, "text": "changed"})
        return sorted(store.search((), limit=100), key=lambda i: (i.namespace, i.key))


def aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def read_back(client: ownstate.Client) -> list[Any]:
    return sorted(OwnstateStore(client).search((), limit=100),
                  key=lambda i: (i.namespace, i.key))


def test_items_read_back_through_the_adapter(client: ownstate.Client, source: Source) -> None:
    items = fill(source)
    report = run_import("langgraph-store", client, source.url, verify=True)
    assert report.ok, report.summary()
    assert (report.units, report.imported, report.written["facts"]) == (3, 3, 9)
    got = read_back(client)
    assert [(i.namespace, i.key, i.value, i.created_at) for i in got] == [
        (i.namespace, i.key, i.value, aware(i.created_at)) for i in items]
    memory = client.memory_stores.get("langgraph")
    [fact] = memory.recall("user:8814.prefs", ["k1"])
    assert fact.source_type == "import"
    changed = next(i for i in items if i.namespace == NAMESPACES[0] and i.key == "k1")
    assert fact.valid_from == aware(changed.updated_at)
    assert fact.value["value"] == {"n": 0, "k": 1, "text": "changed"}  # type: ignore[index]
    assert OwnstateStore(client).list_namespaces() == sorted(NAMESPACES)


def test_a_second_run_writes_only_what_changed(client: ownstate.Client,
                                               source: Source) -> None:
    fill(source)
    run_import("langgraph-store", client, source.url)
    again = run_import("langgraph-store", client, source.url, verify=True)
    assert (again.already, sum(again.written.values())) == (3, 0)
    assert again.ok
    with source.open() as store:
        store.put(NAMESPACES[1], "k0", {"new": True})
    third = run_import("langgraph-store", client, source.url, verify=True)
    assert (third.imported, third.written["facts"]) == (1, 1)
    assert third.ok
    history = client.memory_stores.get("langgraph").history("user:8814", "k0")
    assert len(history) == 2


def test_dry_run_and_verify(client: ownstate.Client, source: Source) -> None:
    fill(source)
    dry = run_import("langgraph-store", client, source.url, dry_run=True)
    assert dry.written["facts"] == 9
    assert list(client.memory_stores.list()) == []
    run_import("langgraph-store", client, source.url)
    client.memory_stores.get("langgraph").forget("account:ACME.notes.q1", "k2")
    checked = run_import("langgraph-store", client, source.url, dry_run=True, verify=True)
    assert not checked.ok
    [failure] = checked.failures
    assert (failure.stage, failure.unit) == ("verify", "account:ACME/notes/q1")


def test_an_undecodable_row_skips_its_namespace(client: ownstate.Client,
                                                tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    source = Source(f"sqlite:///{path}", lambda: SqliteStore.from_conn_string(str(path)))
    fill(source)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE store SET value = '{broken' WHERE prefix = 'user:8814'")
    report = run_import("langgraph-store", client, source.url)
    assert (report.imported, report.failed) == (2, 1)
    [failure] = report.failures
    assert (failure.stage, failure.ids["namespace"]) == ("decode", ("user:8814",))
    assert client.memory_stores.get("langgraph").recall("user:8814") == []
