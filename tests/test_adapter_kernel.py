"""The adapter kernel: stores and sessions made on first use, the one close policy of the
runs adapters record, lease owners, sync/async twins, and the public way a bridge drives a
sync client (``Client.aio``, ``run_coroutine``, ``relay_coroutine``)."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import pytest

import ownstate
from ownstate.adapters._bridge import Bridge
from ownstate.adapters._kernel import (
    BOOKKEEPING_CLOSE_IGNORES,
    async_twin,
    close_run,
    ensure_session,
    ensure_store,
    find_session,
    find_store,
    lease_owner,
    sync_twin,
    track_run,
)
from ownstate.errors import InvalidInput, RunClosed, RunNotFound, StaleLease

Client = ownstate.Client


def _session(client: Client) -> ownstate.Session:
    return client.session_stores.create("kernel").add(actor_id="a1", session_id="s1")


def test_ensure_store_makes_it_once_under_concurrent_first_calls(client: Client) -> None:
    stores = client.aio.session_stores
    got: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def first_use() -> None:
        start.wait()
        try:
            got.append(client.run_coroutine(ensure_store(stores, "made-once")))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {s.name for s in got} == {"made-once"}
    assert [s.name for s in client.session_stores.list()] == ["made-once"]


def test_find_store_and_session_never_create(client: Client) -> None:
    aio = client.aio
    assert client.run_coroutine(find_store(aio.memory_stores, "nowhere")) is None
    store = client.run_coroutine(ensure_store(aio.memory_stores, "facts"))
    assert client.run_coroutine(find_store(aio.memory_stores, "facts")).name == store.name
    sessions = client.run_coroutine(ensure_store(aio.session_stores, "kernel"))
    assert client.run_coroutine(find_session(sessions, "missing")) is None
    assert list(client.session_stores.get("kernel").list_sessions()) == []


def test_ensure_session_keeps_an_existing_session_as_it_is(client: Client) -> None:
    client.session_stores.create("kernel").add(actor_id="first", session_id="s1",
                                               metadata={"k": "v"})
    store = client.run_coroutine(client.aio.session_stores.get("kernel"))
    kept = client.run_coroutine(ensure_session(store, "s1", actor_id="second"))
    assert (kept.actor_id, kept.metadata) == ("first", {"k": "v"})
    made = client.run_coroutine(ensure_session(store, "s2", actor_id="second",
                                               metadata={"x": "y"}))
    assert (made.actor_id, made.metadata) == ("second", {"x": "y"})


def test_bookkeeping_closes_ignore_closed_missing_and_taken_over_runs(client: Client) -> None:
    assert set(BOOKKEEPING_CLOSE_IGNORES) == {RunClosed, RunNotFound, StaleLease}
    session = _session(client)
    aio = client.aio
    done = client.runs.open_run(session, "tests", owner="w1")
    client.runs.close_run(done.run_id, "done")
    client.run_coroutine(close_run(aio, done.run_id, "failed", fencing_token=1))  # closed
    assert client.runs.get(done.run_id).status == "done"
    client.run_coroutine(close_run(aio, "run_missing", "done"))  # gone
    taken = client.runs.open_run(session, "tests", owner="w1")
    client.runs.resume(taken.run_id, "w1")  # claimed again (a newer claim): token 2
    client.run_coroutine(close_run(aio, taken.run_id, "done", fencing_token=1))
    assert client.runs.get(taken.run_id).status == "running"  # nothing changed
    client.run_coroutine(close_run(aio, taken.run_id, "done", fencing_token=2))
    assert client.runs.get(taken.run_id).status == "done"


def test_bookkeeping_closes_still_report_bad_input(client: Client) -> None:
    run = client.runs.open_run(_session(client), "tests", owner="w1")
    with pytest.raises(InvalidInput):
        client.run_coroutine(close_run(client.aio, run.run_id, "no-such-status"))
    assert client.runs.get(run.run_id).status == "running"


def test_track_run_records_nothing_beside_an_active_run(client: Client) -> None:
    session = _session(client)
    handle = client.run_coroutine(client.aio.session_stores.session("kernel", "s1"))
    owner = lease_owner("tests")
    tracked = client.run_coroutine(track_run(client.aio, handle, "tests", "t" * 300,
                                             owner=owner))
    assert tracked is not None
    run = client.runs.get(tracked[0])
    assert (run.thread_key, run.lease_owner, run.fencing_token) == ("t" * 256, owner,
                                                                    tracked[1])
    assert client.run_coroutine(track_run(client.aio, handle, "other", "x",
                                          owner=owner)) is None
    assert [r.run_id for r in client.runs.list(session=session)] == [tracked[0]]


def test_lease_owners_name_the_framework_and_the_process() -> None:
    one, two = lease_owner("langgraph"), lease_owner("langgraph")
    assert re.fullmatch(r"langgraph@[^:]+:\d+:[0-9a-f]{12}", one)
    assert one != two


class _Twins:
    def __init__(self, client: Client | ownstate.AsyncClient) -> None:
        self._bridge = Bridge(client)

    async def _stores(self, *, prefix: str = "") -> list[str]:
        """The names of the session stores beginning with ``prefix``."""
        return [s.name async for s in self._bridge.client.session_stores.list()
                if s.name.startswith(prefix)]

    stores = sync_twin(_stores)
    astores = async_twin(_stores)


def test_twins_run_one_coroutine_both_ways(client: Client) -> None:
    client.session_stores.create("twin-a")
    client.session_stores.create("other")
    twins = _Twins(client)
    assert twins.stores(prefix="twin") == ["twin-a"]
    assert asyncio.run(twins.astores(prefix="twin")) == ["twin-a"]
    assert (_Twins.stores.__name__, _Twins.stores.__doc__) == (
        "_stores", "The names of the session stores beginning with ``prefix``.")
    assert _Twins.astores.__doc__ == _Twins.stores.__doc__


def test_client_exposes_the_async_client_it_drives(client: Client) -> None:
    assert isinstance(client.aio, ownstate.AsyncClient)
    assert client.aio.tenant == client.tenant
    client.session_stores.create("seen-both-ways")
    assert client.run_coroutine(client.aio.session_stores.get("seen-both-ways")).name == (
        "seen-both-ways")

    async def elsewhere() -> str:  # on another event loop than the client's
        store = await client.relay_coroutine(client.aio.session_stores.get("seen-both-ways"))
        return store.name

    assert asyncio.run(elsewhere()) == "seen-both-ways"
