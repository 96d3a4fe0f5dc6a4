"""Sessions stored in bulk (``ownstate.api.bulk``), and the LangGraph import through them:
what a batch stores reads back as what the calls it stands for store, one bad bundle of
a batch leaves the others written and itself absent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.types import Command
from test_import_langgraph import GRAPHS, cfg, fill, state_of

import ownstate
from ownstate.adapters.langgraph import OwnstateSaver
from ownstate.api.bulk import (
    BulkCheckpoint,
    BulkRun,
    BulkSession,
    CheckpointKey,
    add_sessions,
    read_sessions,
    supports_bulk,
)
from ownstate.backends import Capability
from ownstate.errors import AlreadyExists, InvalidInput
from ownstate.importers import arun
from ownstate.importers.sources.langgraph import LangGraphImporter
from ownstate.model import CheckpointScope, PendingWrite

ITEMS = [{"type": "message", "role": "user", "content": "where is my order?"},
         {"type": "message", "role": "assistant", "content": "it ships today"}]


def bundle(name: str, *, run_id: str | None = None, status: str = "done",
           items: Any = None) -> BulkSession:
    checkpoint = BulkCheckpoint("cp-1", "msgpack", b"\x01\x02", metadata={"step": 1},
                                writes=[PendingWrite("task-1", 0, "messages", "json", b"[]")])
    return BulkSession(name, f"user-{name}", {"channel": "web"},
                       ITEMS if items is None else items, None,
                       BulkRun(run_id or f"run-{name}", "langgraph", name, status,
                               step_count=1 if status == "done" else None,
                               awaiting={"kind": "interrupt"} if status != "done" else None,
                               checkpoints=[checkpoint]))


async def postgres(url: str) -> ownstate.AsyncClient:
    client = await ownstate.connect_async(url)
    if not supports_bulk(client):  # pragma: no cover - the PostgreSQL backend does
        await client.close()
        pytest.skip("the backend stores no sessions in bulk")
    return client


def test_a_batch_stores_what_the_calls_would(make_url: Callable[[str], str]) -> None:
    async def main() -> None:
        client = await postgres(make_url("postgres"))
        try:
            store = await client.session_stores.create("bulk-store")
            done = await add_sessions(store, [bundle("a"), bundle("b", status="awaiting_human")])
            assert done == [True, True]
            a = await store.get("a")
            assert (a.actor_id, a.metadata) == ("user-a", {"channel": "web"})
            items = [i async for i in a.list_items(order_by="create_time asc")]
            assert [(i.seq, i.data, i.role) for i in items] == [
                (1, ITEMS[0], "user"), (2, ITEMS[1], "assistant")]
            run = await client.runs.get("run-a")
            assert (run.status, run.step_count, run.fencing_token, run.lease_owner,
                    run.ended_at is not None) == ("done", 1, 1, None, True)
            record = await client.checkpoints.get(run.checkpoint_scope())
            assert record is not None
            assert (record.checkpoint_id, record.payload, record.metadata) == (
                "cp-1", b"\x01\x02", {"step": 1})
            assert [w.task_id for w in record.pending_writes] == ["task-1"]
            [waiting] = await client.runs.outstanding()
            assert waiting.run_id == "run-b"
            assert waiting.awaiting is not None
            assert waiting.awaiting["kind"] == "interrupt"
            assert waiting.awaiting["requested_at"]
            # stored already: left as it is, nothing of the bundle written again
            again = await add_sessions(store, [bundle("a", items=[ITEMS[0]]), bundle("c")])
            assert again == [False, True]
            assert (await store.get("a")).record == a.record
            assert len([i async for i in a.list_items()]) == 2
            # the usual calls go on from what a batch stored
            more = await (await store.get("c")).append_items([ITEMS[0]])
            assert more[0].seq == 3
        finally:
            await client.close()

    asyncio.run(main())


def test_one_bad_bundle_leaves_the_others_written(make_url: Callable[[str], str]) -> None:
    async def main() -> None:
        client = await postgres(make_url("postgres"))
        try:
            store = await client.session_stores.create("bulk-store")
            await add_sessions(store, [bundle("first")])
            # refused by the datastore (the run id is another session's) and by validation
            batch = [bundle("a"), bundle("clash", run_id="run-first"), bundle("b"),
                     bundle("invalid", items=[{"role": "user", "content": 1.5e400}])]
            outcome = await add_sessions(store, batch)
            assert outcome[0] is True
            assert outcome[2] is True
            assert isinstance(outcome[1], AlreadyExists)
            assert isinstance(outcome[3], InvalidInput)
            for name in ("clash", "invalid"):
                with pytest.raises(ownstate.SessionNotFound):
                    await store.get(name)
            assert {s.session_id async for s in store.list_sessions()} == {"first", "a", "b"}
            page = await client.runs.list_page(session=await store.get("first"))
            assert [r.run_id for r in page.items] == ["run-first"]
        finally:
            await client.close()

    asyncio.run(main())


def test_a_batch_analyzes_the_tables_it_doubled(make_url: Callable[[str], str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Without statistics the planner reads a batch's items by scanning every item of the
    tenant; a batch that leaves a table twice the size its statistics counted analyzes it
    (the threshold in pages lowered here so that a few sessions cross it)."""
    from ownstate.backends.postgres import _statistics

    monkeypatch.setattr(_statistics, "MIN_PAGES", 1)
    url = make_url("postgres")
    schema = url.rsplit("schema=", 1)[1]

    def counted() -> dict[str, float]:
        with psycopg.connect(url.split("?")[0]) as conn:
            return {r[0]: r[1] for r in conn.execute(
                "SELECT c.relname, c.reltuples FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname IN "
                "('sessions', 'items', 'runs', 'checkpoints', 'checkpoint_writes')",
                (schema,))}

    def has_statistics(table: str, column: str) -> bool:
        with psycopg.connect(url.split("?")[0]) as conn:
            return conn.execute("SELECT 1 FROM pg_stats WHERE schemaname = %s AND "
                                "tablename = %s AND attname = %s",
                                (schema, table, column)).fetchone() is not None

    async def main() -> None:
        client = await postgres(url)
        try:
            store = await client.session_stores.create("bulk-store")
            assert counted()["items"] == -1  # never analyzed
            await add_sessions(store, [bundle(f"a{n}") for n in range(60)])
            assert counted() == {"sessions": 60, "items": 120, "runs": 60,
                                 "checkpoints": 60, "checkpoint_writes": 60}
            assert has_statistics("items", "tenant")
            assert has_statistics("items", "sid")
            await add_sessions(store, [bundle(f"b{n}") for n in range(120)])  # tripled
            assert counted()["items"] == 360
            await add_sessions(store, [bundle("c")])  # grown by far less than twice
            assert counted()["items"] == 360
            assert len([s async for s in store.list_sessions()]) == 181
        finally:
            await client.close()

    asyncio.run(main())


def test_a_batch_whose_analyze_fails_is_stored_all_the_same(
        make_url: Callable[[str], str], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from ownstate.backends.postgres import _statistics

    async def refused(*args: Any) -> list[str]:
        raise ownstate.BackendUnavailable("the server went away")

    monkeypatch.setattr(_statistics, "analyze_grown", refused)

    async def main() -> None:
        client = await postgres(make_url("postgres"))
        try:
            store = await client.session_stores.create("bulk-store")
            assert await add_sessions(store, [bundle("a"), bundle("b")]) == [True, True]
            assert {s.session_id async for s in store.list_sessions()} == {"a", "b"}
        finally:
            await client.close()

    asyncio.run(main())
    assert "analyzing the tables a bulk write grew failed" in caplog.text


def test_a_backend_without_bulk_refuses(make_url: Callable[[str], str]) -> None:
    async def main() -> None:
        client = await ownstate.connect_async(make_url("memory"))
        try:
            assert not supports_bulk(client)
            store = await client.session_stores.create("bulk-store")
            with pytest.raises(InvalidInput):
                await add_sessions(store, [bundle("a")])
        finally:
            await client.close()

    asyncio.run(main())


# -- the LangGraph import in batches ----------------------------------------------------


@pytest.fixture
def lg_source(new_database: Callable[[str], str]) -> tuple[str, dict[str, str]]:
    url = new_database("lgb")
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        made = fill(saver, 3)
        app = GRAPHS["tools"](saver)
        app.invoke({"messages": [HumanMessage("order 44", id="h-long")]}, cfg("tools-0"))
    return url, made


async def rows(client: ownstate.AsyncClient) -> Any:
    """Every row of the tenant that the import writes, without what each write stamps
    itself (times, item ids)."""
    backend = client._scope.backend
    tenant = client._scope.tenant
    stamped = {"create_time", "last_activity_time", "status_since", "started_at", "ended_at",
               "item_id"}

    def plain(key: str, value: Any) -> Any:
        if key == "awaiting" and value is not None:
            return {k: v for k, v in json.loads(value).items() if k != "requested_at"}
        return value

    async def part(name: str) -> list[Any]:
        got, _ = await backend.export_rows(tenant, name, None, 10_000)
        return sorted((sorted((k, repr(plain(k, v))) for k, v in r.items()
                              if k not in stamped) for r in got), key=repr)

    return await asyncio.gather(*(part(p) for p in ("sessions", "items", "runs", "checkpoints")))


def test_the_import_in_batches_stores_what_the_saver_does(
        lg_source: tuple[str, dict[str, str]], make_url: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, made = lg_source

    async def imported(one_at_a_time: bool) -> Any:
        client = await postgres(make_url("postgres"))
        try:
            with monkeypatch.context() as patch:
                if one_at_a_time:
                    patch.setattr(LangGraphImporter, "batch_size",
                                  lambda self, client, dry_run: 1)
                report = await arun("langgraph", client, url, verify=True)
            assert report.ok, report.summary()
            assert report.units == report.verified == len(made)
            return report, await rows(client)
        finally:
            await client.close()

    bulk = []

    async def spy(store: Any, sessions: Any) -> Any:
        bulk.extend(s.session_id for s in sessions)
        return await add_sessions(store, sessions)

    monkeypatch.setattr("ownstate.api.bulk.add_sessions", spy)
    batched, stored = asyncio.run(imported(False))
    # the threads of the usual shapes went in bulk, the nested ones through the saver
    assert sorted(bulk) == sorted(t for t in made if not t.startswith("nested"))
    single, expected = asyncio.run(imported(True))
    assert stored == expected
    assert batched.written == single.written
    assert batched.source_counts == single.source_counts


def test_an_undecodable_thread_of_a_batch(lg_source: tuple[str, dict[str, str]],
                                          make_url: Callable[[str], str]) -> None:
    url, made = lg_source
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE checkpoint_blobs SET blob = '\\xc1c1c1' WHERE thread_id = "
                     "'tools-1' AND channel = 'messages'")
    target = make_url("postgres")

    async def main() -> Any:
        client = await postgres(target)
        try:
            return await arun("langgraph", client, url, verify=True)
        finally:
            await client.close()

    report = asyncio.run(main())
    assert (report.imported, report.failed) == (len(made) - 1, 1)
    [failure] = report.failures
    assert (failure.stage, failure.ids["thread_id"], failure.ids["checkpoint_ns"]) == (
        "decode", "tools-1", "")
    with ownstate.connect(target) as client:
        store = client.session_stores.get("langgraph")
        with pytest.raises(ownstate.SessionNotFound):
            store.get("tools-1")
        # the paused threads of the batch resume on OwnstateSaver
        ours = OwnstateSaver(client)
        with PostgresSaver.from_conn_string(url) as theirs:
            for thread in ("approval-2", "nested-2"):
                graph = GRAPHS[made[thread]]
                assert state_of(graph(ours), thread) == state_of(graph(theirs), thread)
                mine = graph(ours).invoke(Command(resume="yes"), cfg(thread))
                assert "approved: yes" in str(mine) or "inner yes" in str(mine)
        assert client.runs.outstanding() == [r for r in client.runs.outstanding()
                                             if r.thread_key not in ("approval-2", "nested-2")]
    # run again: the thread stays failed, the others are there already
    again = asyncio.run(main())
    assert (again.already, again.failed, again.imported) == (len(made) - 1, 1, 0)


def test_the_batched_verification_finds_a_changed_item_checkpoint_or_run(
        lg_source: tuple[str, dict[str, str]], make_url: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each thread of a batch is compared from one bulk read; a changed item, checkpoint
    or run makes that thread's digests differ there already, and the per-thread reading
    that decides agrees."""
    url, made = lg_source
    target = make_url("postgres")
    schema = target.rsplit("schema=", 1)[1]
    server = target[:target.rindex("schema=") - 1]
    changed = {"tools-0", "approval-1", "approval-2"}

    async def main() -> None:
        client = await postgres(target)
        try:
            report = await arun("langgraph", client, url, verify=True)
            assert report.ok, report.summary()
            assert report.verified == len(made)
            with psycopg.connect(server, autocommit=True) as conn:
                sid = (f"(SELECT sid FROM {schema}.sessions WHERE store = 'langgraph' "
                       "AND session_id = %s)")
                conn.execute(f"UPDATE {schema}.items SET data = replace(data::text, "
                             f"'order 42', 'order 24')::json WHERE sid = {sid}", ("tools-0",))
                conn.execute(f"UPDATE {schema}.checkpoints SET metadata = "
                             "(metadata::jsonb || '{\"step\": 99}')::json WHERE rid IN "
                             f"(SELECT rid FROM {schema}.runs WHERE sid = {sid})",
                             ("approval-1",))
                conn.execute(f"UPDATE {schema}.runs SET status = 'done', ended_at = now() "
                             f"WHERE sid = {sid}", ("approval-2",))
            importer = LangGraphImporter(url)
            await importer.open()
            try:
                units = [u async for u in importer.units()]
                decoded = await importer.decode_many(units)
                reads = []

                async def read(store: Any, wanted: Any) -> Any:
                    reads.append(len(wanted))
                    return await read_sessions(store, wanted)

                slow = []
                digest = LangGraphImporter.digest

                async def one_by_one(self: Any, client: Any, unit: Any, thread: Any) -> Any:
                    slow.append(thread.thread_id)
                    return await digest(self, client, unit, thread)

                with monkeypatch.context() as patch:
                    patch.setattr("ownstate.api.bulk.read_sessions", read)
                    patch.setattr(LangGraphImporter, "digest", one_by_one)
                    quick = await importer._quick_many(client, decoded)
                    final = await importer.digest_many(client, units, decoded)
            finally:
                await importer.close()
            assert reads == [len(units), len(units)]  # the whole batch in one read, twice
            names = [t.thread_id for t in decoded]
            assert {n for n, q in zip(names, quick, strict=True)
                    if q is None or q[0] != q[1]} == changed
            assert sorted(slow) == sorted(changed)  # only they are read one by one
            assert {n for n, f in zip(names, final, strict=True)
                    if not isinstance(f, tuple) or f[0] != f[1]} == changed
        finally:
            await client.close()

    asyncio.run(main())


def test_a_backend_without_bulk_reads_reads_session_by_session(
        make_url: Callable[[str], str]) -> None:
    async def main() -> None:
        client = await ownstate.connect_async(make_url("sqlite"))
        pg = await postgres(make_url("postgres"))
        try:
            got = []
            for c in (client, pg):
                assert (Capability.BULK_READS in c._scope.backend.capabilities) == (c is pg)
                store = await c.session_stores.create("bulk-store")
                for name in ("a", "b"):
                    session = await store.add(actor_id=f"user-{name}", session_id=name)
                    await session.append_items(ITEMS)
                    run = await c.runs.open_run(session, framework="langgraph", run_id=f"r-{name}")
                    scope = CheckpointScope(f"user-{name}", "bulk-store", name, run.run_id)
                    await c.checkpoints.put(scope, "cp-1", type_tag="msgpack", payload=b"\x01")
                    await c.checkpoints.put_writes(scope, "cp-1", [
                        PendingWrite("task-1", 0, "messages", "json", b"[]")])
                keys = [CheckpointKey("r-a", "", "cp-1"), CheckpointKey("r-b", "", "cp-1"),
                        CheckpointKey("r-a", "", "cp-2")]
                found = await read_sessions(store, [("a", keys), ("missing", keys), ("b", [])])
                assert found[1] is None
                assert found[2] is not None
                a = found[0]
                assert a is not None
                assert a.session.actor_id == "user-a"
                assert [i.data for i in a.items] == ITEMS
                assert a.newest_run is not None
                assert a.newest_run.run_id == "r-a"
                # another session's run is out of this session's scope, as with get()
                assert [c is not None for c in a.checkpoints] == [True, False, False]
                got.append([(s.session.session_id, [i.data for i in s.items],
                             s.newest_run.run_id if s.newest_run else None,
                             [(r.checkpoint_id, r.payload, r.pending_writes) if r else None
                              for r in s.checkpoints]) if s else None for s in found])
            assert got[0] == got[1]
        finally:
            await client.close()
            await pg.close()

    asyncio.run(main())
