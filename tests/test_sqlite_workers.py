"""The threads the async client's SQLite calls run on (``backends/sqlite/_workers.py``):
results and errors, cancellation, the number of threads, closing; and the same promises
kept by the SQLite backend on top of them."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import threading
from pathlib import Path

import pytest

import ownstate
from ownstate.backends.sqlite import SqliteBackend
from ownstate.backends.sqlite._core import SqliteCore, write
from ownstate.backends.sqlite._workers import Workers
from ownstate.errors import BackendUnavailable


def _names() -> set[str]:
    return {t.name for t in threading.enumerate()}


def test_a_call_returns_its_result_or_raises_its_error_on_a_named_thread() -> None:
    workers = Workers(2, "test-workers")
    failure = KeyError("missing")

    def fail(_: None) -> None:
        raise failure

    async def main() -> None:
        assert await workers.run(lambda n: n * 2, 21) == 42
        assert await workers.run(lambda _: threading.current_thread().name, None) == (
            "test-workers_0")
        with pytest.raises(KeyError) as raised:
            await workers.run(fail, None)
        assert raised.value is failure
        assert await workers.run(lambda n: n + 1, 1) == 2  # the thread survived it

    asyncio.run(main())
    workers.close()
    assert not any(n.startswith("test-workers") for n in _names())


def test_a_call_cancelled_before_a_thread_takes_it_never_runs() -> None:
    workers = Workers(1, "test-cancel")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def block(_: None) -> str:
        started.set()
        assert release.wait(10)
        ran.append("first")
        return "first"

    async def main() -> None:
        first = asyncio.ensure_future(workers.run(block, None))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        queued = asyncio.ensure_future(workers.run(ran.append, "queued"))
        await asyncio.sleep(0)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        assert await first == "first"
        assert await workers.run(ran.append, "after") is None

    asyncio.run(main())
    workers.close()
    assert ran == ["first", "after"]


def test_a_call_cancelled_while_it_runs_runs_to_its_end() -> None:
    workers = Workers(1, "test-running")
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    def block(_: None) -> str:
        started.set()
        assert release.wait(10)
        done.set()
        return "result"

    async def main() -> None:
        call = asyncio.ensure_future(workers.run(block, None))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call  # at once, while the call still runs
        assert not done.is_set()
        release.set()
        assert await workers.run(lambda n: n, 7) == 7  # the same thread, after it

    asyncio.run(main())
    workers.close()
    assert done.is_set()


def test_at_most_size_threads_and_calls_in_turn_reuse_one() -> None:
    workers = Workers(2, "test-size")
    inside = threading.Barrier(2, timeout=10)

    def meet(_: None) -> str:
        inside.wait()
        return threading.current_thread().name

    async def main() -> None:
        for n in range(5):
            assert await workers.run(lambda x: x, n) == n
        assert len(workers._threads) == 1
        names = await asyncio.gather(*(workers.run(meet, None) for _ in range(4)))
        assert sorted(set(names)) == ["test-size_0", "test-size_1"]
        assert len(workers._threads) == 2

    asyncio.run(main())
    workers.close()


def test_close_runs_the_calls_already_queued_then_joins_the_threads() -> None:
    workers = Workers(1, "test-close")
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def block(_: None) -> None:
        started.set()
        assert release.wait(10)
        ran.append(0)

    async def main() -> None:
        calls = [asyncio.ensure_future(workers.run(block, None))]
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        calls += [asyncio.ensure_future(workers.run(ran.append, n)) for n in (1, 2)]
        await asyncio.sleep(0)
        threading.Timer(0.2, release.set).start()
        workers.close()  # waits: the loop is blocked, as the executor's shutdown did
        assert ran == [0, 1, 2]
        await asyncio.gather(*calls)
        with pytest.raises(RuntimeError, match="closed"):
            await workers.run(ran.append, 3)

    asyncio.run(main())
    assert not any(n.startswith("test-close") for n in _names())


def test_a_result_for_a_closed_loop_is_dropped_and_the_thread_serves_on() -> None:
    workers = Workers(1, "test-loop")
    started, release = threading.Event(), threading.Event()

    def block(_: None) -> str:
        started.set()
        assert release.wait(10)
        return "late"

    loop = asyncio.new_event_loop()
    call = loop.create_task(workers.run(block, None))
    loop.run_until_complete(asyncio.sleep(0))
    assert started.wait(10)
    call.cancel()
    loop.run_until_complete(asyncio.gather(call, return_exceptions=True))
    loop.close()
    release.set()
    assert asyncio.run(workers.run(lambda n: n, 5)) == 5
    workers.close()


def test_workers_dropped_unclosed_stop_their_threads() -> None:
    workers = Workers(1, "test-dropped")
    assert asyncio.run(workers.run(lambda n: n, 1)) == 1
    thread = workers._threads[0]
    del workers
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


def test_a_cancelled_append_either_stores_the_whole_batch_or_nothing(tmp_path: Path) -> None:
    # The async client's append cancelled at every point of its life: before the
    # backend's thread takes it, while it writes, after. A cancelled call that had
    # started may still commit after the next one began, on another thread; whatever
    # committed is whole batches, one after the other, with no gap in the seqs.
    async def main() -> None:
        async with await ownstate.connect_async(f"sqlite:///{tmp_path / 'c.db'}") as client:
            store = await client.session_stores.create("cancel-test")
            session = await store.add(actor_id="u", session_id="s-1")
            for yields in range(12):
                call = asyncio.ensure_future(session.append_items(
                    [{"role": "user", "content": f"{yields}-{n}"} for n in range(50)]))
                for _ in range(yields):
                    await asyncio.sleep(0)
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
            await session.append_items([{"role": "user", "content": "last-0"}])
        async with await ownstate.connect_async(f"sqlite:///{tmp_path / 'c.db'}") as client:
            session = await (await client.session_stores.get("cancel-test")).get("s-1")
            items = [i async for i in session.list_items(order_by="create_time asc")]
        assert [i.seq for i in items] == list(range(1, len(items) + 1))
        contents = [str(i.data["content"]) for i in items]
        while contents:
            batch = contents[0].split("-")[0]
            size = 1 if batch == "last" else 50
            assert contents[:size] == [f"{batch}-{n}" for n in range(size)]
            del contents[:size]

    asyncio.run(main())


def test_a_write_cancelled_before_its_thread_takes_it_writes_nothing(tmp_path: Path) -> None:
    core = SqliteCore(tmp_path / "w.db", threads=1)
    core._call(lambda conn: conn.execute("CREATE TABLE t (x)"))
    started, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        started.set()
        assert release.wait(10)

    def insert(conn: sqlite3.Connection) -> None:
        with write(conn):
            conn.execute("INSERT INTO t VALUES (1)")

    async def main() -> None:
        held = asyncio.ensure_future(core._run(hold))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        queued = asyncio.ensure_future(core._run_write(insert))
        await asyncio.sleep(0)
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        release.set()
        await held
        assert await core._run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()
                               ) == (0,)
        await core.close()
        with pytest.raises(BackendUnavailable, match="closed"):
            await core._run(lambda c: None)

    asyncio.run(main())
    assert not any(n.startswith("ownstate-sqlite") for n in _names())


def test_closing_the_backend_joins_its_threads(tmp_path: Path) -> None:
    async def main() -> None:
        backend = SqliteBackend(str(tmp_path / "j.db"))
        await backend.setup(migrate=True)
        assert any(n.startswith("ownstate-sqlite") for n in _names())
        await backend.close()

    asyncio.run(main())
    assert not any(n.startswith("ownstate-sqlite") for n in _names())
