"""Tests of the Redis backend beyond the shared conformance suite: URLs and options, key
layout, checkpoint expiry, verify-only mode, driver errors, given clients, and what an
interrupted multi-step operation leaves behind (and how the next call copes with it).

The cluster runs of the conformance suite are in test_redis_cluster.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from conftest import REDIS_URL, REQUIRED, _require

import ownstate
from ownstate import _ids
from ownstate.api.aio import AsyncClient
from ownstate.backends import open_backend
from ownstate.errors import (
    AlreadyExists,
    BackendUnavailable,
    InvalidInput,
    SchemaVersion,
    SessionNotFound,
    StoreNotFound,
)
from ownstate.model import PendingWrite, RunUsage

try:
    import redis
    from redis.crc import key_slot

    from ownstate.backends.redis import RedisBackend
    from ownstate.backends.redis._core import CLAIM_GRACE_MS
except ImportError:  # only without the 'redis' extra
    if "redis" in REQUIRED:
        raise
    pytest.skip("redis-py (the 'redis' extra) is not installed", allow_module_level=True)


def _with(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix of this test's own on the test Redis, emptied afterwards."""
    _require("redis")
    made = f"t{uuid.uuid4().hex[:12]}"
    yield made
    with redis.Redis.from_url(REDIS_URL) as raw:
        keys = list(raw.scan_iter(match=f"{made}:*", count=1000))
        if keys:
            raw.delete(*keys)


@pytest.fixture
def url(prefix: str) -> str:
    return _with(REDIS_URL, f"prefix={prefix}")


@pytest.fixture
def raw() -> Iterator[redis.Redis]:
    with redis.Redis.from_url(REDIS_URL) as made:
        yield made


def _keys(raw: redis.Redis, prefix: str) -> list[str]:
    return sorted(k.decode() for k in raw.scan_iter(match=f"{prefix}:*", count=1000))


# URLs ----------------------------------------------------------------------------------


def test_schemes_and_options() -> None:
    plain = open_backend("redis://127.0.0.1:6379/2?prefix=app-1&checkpoint_ttl=90")
    assert isinstance(plain, RedisBackend)
    assert (plain.prefix, plain.checkpoint_ttl, plain.cluster) == ("app-1", 90, False)
    default = open_backend("rediss://cache.example:6380/0")
    assert isinstance(default, RedisBackend)
    assert (default.prefix, default.checkpoint_ttl) == ("ownstate", None)
    clustered = open_backend("redis+cluster://127.0.0.1:7000?prefix=x")
    assert isinstance(clustered, RedisBackend)
    assert clustered.cluster
    assert isinstance(open_backend("rediss+cluster://node.example:7000"), RedisBackend)


@pytest.mark.parametrize("bad", [
    "redis://127.0.0.1:6379/0?prefix=has%20space",
    "redis://127.0.0.1:6379/0?prefix=" + "x" * 65,
    "redis://127.0.0.1:6379/0?prefix=a{b}",
    "redis://127.0.0.1:6379/0?checkpoint_ttl=soon",
    "redis://127.0.0.1:6379/0?checkpoint_ttl=0",
    "redis://127.0.0.1:notaport/0",
    "redis+cluster://127.0.0.1:7000/3",
])
def test_bad_urls_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        open_backend(bad)


# layout --------------------------------------------------------------------------------


def _busy(client: ownstate.Client) -> None:
    """Something of every kind: sessions and a fork, runs with effects and checkpoints,
    assets with and without an owner, facts."""
    session = client.session_stores.create("chats").add(actor_id="user:1", session_id="s1")
    (item,) = session.append_items([{"role": "user", "content": "email me"}],
                                   idempotency_key="k1")
    fork = session.fork(session_id="s1-fork")
    run = client.runs.open_run(fork, "langgraph", owner="w", run_id="run-1")
    client.runs.record_effect(run.run_id, "call-1", {"ok": True})
    client.checkpoints.put(run.checkpoint_scope(), "c1", type_tag="json", payload=b"{}")
    client.assets.put(b"png", "image/png", session=fork)
    client.assets.put(b"logo", "image/svg+xml")
    client.memory_stores.create("memory").remember("user:1", "channel", "email", source=item)


def test_every_key_carries_prefix_and_tenant(url: str, prefix: str, raw: redis.Redis) -> None:
    for tenant in ("acme", "globex"):
        with ownstate.connect(url, tenant=tenant) as client:
            _busy(client)
    keys = _keys(raw, prefix)
    assert f"{prefix}:layout" in keys
    tagged = [k for k in keys if k != f"{prefix}:layout"]
    assert tagged
    for key in tagged:
        tag = key[len(prefix) + 1:].split("}", 1)[0]
        assert tag.startswith("{acme") or tag.startswith("{globex"), key
    acme = {k.replace("{acme", "{T") for k in tagged if "{acme" in k}
    globex = {k.replace("{globex", "{T") for k in tagged if "{globex" in k}
    assert acme == globex, "both tenants' data has the same shape, apart"


def test_a_session_tree_lives_in_one_slot(url: str, prefix: str, raw: redis.Redis) -> None:
    with ownstate.connect(url) as client:
        _busy(client)
    keys = _keys(raw, prefix)
    tree = [k for k in keys if "{default/chats/s1}" in k]
    kinds = {k.split("}:", 1)[1].split(":")[0] for k in tree}
    assert kinds >= {"s", "l", "o", "ix", "ik", "kids", "runs", "r", "e", "c", "cd", "cz", "cm",
                     "a", "ar", "ash"}
    assert any(k.endswith(":s:s1-fork") for k in tree), "a fork lives in its root's tree"
    assert f"{prefix}:{{default/chats/s1-fork}}:fork" in keys, "...and claims its own name"
    assert len({key_slot(k.encode()) for k in tree}) == 1


def test_prefixes_keep_applications_apart(prefix: str) -> None:
    one, two = (_with(REDIS_URL, f"prefix={prefix}{n}") for n in "ab")
    try:
        with ownstate.connect(one) as first, ownstate.connect(two) as second:
            first.session_stores.create("shared-name").add(actor_id="a", session_id="s")
            assert list(second.session_stores.list()) == []
            second.session_stores.create("shared-name")
            with pytest.raises(SessionNotFound):
                second.session_stores.get("shared-name").get("s")
    finally:
        with redis.Redis.from_url(REDIS_URL) as raw:
            for p in (f"{prefix}a", f"{prefix}b"):
                keys = list(raw.scan_iter(match=f"{p}:*"))
                if keys:
                    raw.delete(*keys)


# checkpoint expiry ---------------------------------------------------------------------


def test_checkpoint_ttl_expires_a_runs_checkpoints_together(url: str, prefix: str,
                                                            raw: redis.Redis) -> None:
    with ownstate.connect(_with(url, "checkpoint_ttl=600")) as client:
        session = client.session_stores.create("chats").add(actor_id="a", session_id="s")
        run = client.runs.open_run(session, "langgraph", run_id="r1")
        scope = run.checkpoint_scope()
        client.checkpoints.put(scope, "c1", type_tag="json", payload=b"12345")
        client.checkpoints.put_writes(scope, "c1", [PendingWrite("t", 0, "ch", "json",
                                                                          b"1")])
        client.checkpoints.put(scope, "c2", type_tag="json", payload=b"6")
        tree = f"{prefix}:{{default/chats/s}}:"
        expiring = [f"{tree}{kind}:r1" for kind in ("c", "cd", "cz", "cw", "cm")]
        ttls = [raw.pttl(k) for k in expiring]
        assert all(0 < t <= 600_000 for t in ttls), ttls
        assert max(ttls) - min(ttls) < 1000, "a run's checkpoints expire together"
        for kept in (f"{tree}s:s", f"{tree}i:s", f"{tree}r:r1"):
            assert raw.pttl(kept) in (-1, -2), f"{kept} must not expire"
        # what expiry does, without waiting for it
        raw.delete(*expiring)
        assert client.checkpoints.list(scope) == []
        assert client.checkpoints.usage() == []
        assert client.checkpoints.get(scope) is None
        assert client.runs.get("r1") == run
        client.checkpoints.put(scope, "c3", type_tag="json", payload=b"7")
        assert [c.checkpoint_id for c in client.checkpoints.list(scope)] == ["c3"]
        assert client.checkpoints.usage() == [RunUsage("r1", 1, 1)]


def test_without_ttl_checkpoints_never_expire(url: str, prefix: str, raw: redis.Redis) -> None:
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="a", session_id="s")
        scope = client.runs.open_run(session, "langgraph", run_id="r1").checkpoint_scope()
        client.checkpoints.put(scope, "c1", type_tag="json", payload=b"1")
    assert raw.pttl(f"{prefix}:{{default/chats/s}}:c:r1") == -1


# setup, errors, clients ----------------------------------------------------------------


def test_verify_only_mode(url: str, prefix: str, raw: redis.Redis) -> None:
    with pytest.raises(SchemaVersion) as err:
        ownstate.connect(url, migrate=False)
    assert (err.value.found, err.value.expected) == (0, 2)
    assert _keys(raw, prefix) == [], "verifying writes nothing"
    with ownstate.connect(url) as client:
        assert client.check() == (2, 2)
    ownstate.connect(url, migrate=False).close()
    raw.set(f"{prefix}:layout", 3)
    with pytest.raises(SchemaVersion) as newer:
        ownstate.connect(url)
    assert newer.value.found == 3


def test_an_unreachable_server_is_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailable):
        ownstate.connect("redis://127.0.0.1:1/0?socket_connect_timeout=2")


def test_a_connection_dropped_by_the_server_is_replaced(url: str, raw: redis.Redis) -> None:
    """Reads are retried once on a new connection; later writes use the new one."""
    name = f"ownstate-{uuid.uuid4().hex[:8]}"
    with ownstate.connect(_with(url, f"client_name={name}")) as client:
        session = client.session_stores.create("chats").add(actor_id="a", session_id="s")
        session.append_items([{"n": 1}])
        killed = [raw.client_kill_filter(_id=entry["id"]) for entry in raw.client_list()
                  if entry.get("name") == name]
        assert killed
        assert [i.data for i in session.list_items()] == [{"n": 1}]
        session.append_items([{"n": 2}])
        assert [i.seq for i in session.list_items(order_by="create_time asc")] == [1, 2]


def test_a_given_client_is_used_and_left_open(prefix: str) -> None:
    async def scenario() -> None:
        given = redis.asyncio.Redis.from_url(REDIS_URL)
        backend = RedisBackend(client=given, prefix=prefix)
        await backend.setup(migrate=True)
        client = AsyncClient(backend)
        await (await client.session_stores.create("chats")).add(actor_id="a")
        await client.close()
        assert await given.ping()
        await given.aclose()
        decoding = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)
        with pytest.raises(InvalidInput):
            RedisBackend(client=decoding)
        await decoding.aclose()
        with pytest.raises(InvalidInput):
            RedisBackend()

    asyncio.run(scenario())


# interrupted multi-step operations -----------------------------------------------------


def _backend(client: ownstate.Client) -> RedisBackend:
    backend = client.backend
    assert isinstance(backend, RedisBackend)
    return backend


def _run(client: ownstate.Client, coro: object) -> object:
    return client._portal.call(coro)  # type: ignore[attr-defined,arg-type]


def test_an_index_entry_without_its_session_is_skipped(url: str) -> None:
    """A create that stopped after its first step leaves an entry no listing shows, and
    that does not keep the store from being deleted."""
    with ownstate.connect(url) as client:
        store = client.session_stores.create("chats")
        store.add(actor_id="a", session_id="real")
        _run(client, _backend(client)._reserve("default", "chats", "ghost", "ghost"))
        assert [s.session_id for s in store.list_sessions()] == ["real"]
        assert [s.session_id for s in store.list_sessions(order_by="last_activity_time asc")
                ] == ["real"]
        store.get("real").delete()
        assert client.session_stores.delete("chats") == 0
        with pytest.raises(StoreNotFound):
            client.session_stores.get("chats")


def test_a_store_delete_that_stopped_half_way_is_finished_later(url: str) -> None:
    with ownstate.connect(url) as client:
        store = client.session_stores.create("chats")
        store.add(actor_id="a", session_id="one").append_items([{"n": 1}])
        backend = _backend(client)
        _run(client, backend._eval("store_close", [backend.store_key("default", "chats")],
                                   ["1"]))
        with pytest.raises(StoreNotFound):
            client.session_stores.get("chats")
        assert list(client.session_stores.list()) == []
        with pytest.raises(StoreNotFound):
            store.add(actor_id="a")
        again = client.session_stores.create("chats")
        assert list(again.list_sessions()) == []
        with pytest.raises(SessionNotFound):
            again.get("one")


def test_stale_claims_are_taken_over(url: str, prefix: str, raw: redis.Redis) -> None:
    """A fork or a run open that stopped after claiming its id blocks the id for a
    minute; after that the id is free again."""
    with ownstate.connect(url) as client:
        store = client.session_stores.create("chats")
        root = store.add(actor_id="a", session_id="root")
        home = f"{prefix}:{{default/chats/orphan}}:fork"
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        raw.set(home, f"root|{now_ms}|n1")
        with pytest.raises(AlreadyExists):
            store.add(actor_id="a", session_id="orphan")
        raw.set(home, f"root|{now_ms - CLAIM_GRACE_MS - 1000}|n1")
        assert store.add(actor_id="a", session_id="orphan").root_session_id == "orphan"

        directory = f"{prefix}:{{default}}:runs"
        raw.hset(directory, "run-x", f"chats\x00root\x00{now_ms}\x00n2")
        with pytest.raises(AlreadyExists):
            client.runs.open_run(root, "langgraph", run_id="run-x")
        raw.hset(directory, "run-x", f"chats\x00root\x00{now_ms - CLAIM_GRACE_MS - 1000}\x00n2")
        assert client.runs.open_run(root, "langgraph", run_id="run-x").run_id == "run-x"


def test_forks_are_found_by_a_client_that_never_saw_them(url: str) -> None:
    with ownstate.connect(url) as maker:
        store = maker.session_stores.create("chats")
        root = store.add(actor_id="a", session_id="root")
        root.append_items([{"n": 1}])
        child = root.fork(session_id="child")
        grandchild = child.fork(session_id="grandchild")
        run = maker.runs.open_run(grandchild, "langgraph", run_id="deep-run", owner="w")
        maker.checkpoints.put(run.checkpoint_scope(), "c1", type_tag="json", payload=b"1")
        maker.runs.mark_awaiting("deep-run", {"kind": "approval"}, fencing_token=1)
    with ownstate.connect(url) as fresh:
        seen = fresh.session_stores.get("chats").get("grandchild")
        assert (seen.parent_session_id, seen.root_session_id) == ("child", "root")
        assert [i.data for i in seen.list_items()] == [{"n": 1}]
        assert [r.run_id for r in fresh.runs.outstanding()] == ["deep-run"]
    with ownstate.connect(url) as fresh:
        assert fresh.checkpoints.usage() == [RunUsage("deep-run", 1, 1)]
    with ownstate.connect(url) as fresh:
        assert [r.run_id for r in fresh.runs.list()] == ["deep-run"]
        assert fresh.runs.get("deep-run").session_id == "grandchild"
        fresh.session_stores.get("chats").get("child").delete(force=True)
        assert [s.session_id for s in fresh.session_stores.get("chats").list_sessions()] == [
            "root"]
        reused = fresh.session_stores.get("chats").add(actor_id="b", session_id="child")
        assert reused.root_session_id == "child", "a deleted fork's id is free at once"
        assert list(fresh.runs.list()) == []


def test_run_times_compare_as_instants(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lease expiry is compared as a number inside the scripts, not as text."""
    moment = datetime(2030, 1, 1, tzinfo=UTC)
    monkeypatch.setattr(_ids, "now", lambda: moment)
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="a")
        run = client.runs.open_run(session, "langgraph", owner="w", ttl=0.001)
        moment = datetime(2030, 1, 1, 0, 0, 0, 2000, tzinfo=UTC)
        assert client.runs.resume(run.run_id, "other").fencing_token == 2


def test_item_ids_that_json_must_escape(url: str) -> None:
    """Items keep ids that are not plain text (a backend may be given such ids)."""
    from ownstate.backends.ports.sessions import NewItem

    odd = ['quote"d', "back\\slash", "tab\there", "é-ü"]

    async def scenario() -> None:
        backend = RedisBackend.from_url(url)
        await backend.setup(migrate=True)
        moment = datetime(2030, 1, 1, tzinfo=UTC)
        await backend.create_store("default", "chats", moment)
        await backend.create_session("default", "chats", "s", "a", {}, moment)
        rows = [NewItem(i, f'{{"n": {n}}}', "json", None, None, None, None, None, None)
                for n, i in enumerate(odd)]
        stored = await backend.append_items("default", "chats", "s", rows, ("k", "h"), moment)
        assert [i.item_id for i in stored] == odd
        again = await backend.append_items("default", "chats", "s", rows, ("k", "h"), moment)
        assert [i.item_id for i in again] == odd
        for item_id in odd:
            assert (await backend.get_item("default", "chats", "s", item_id)).item_id == item_id
        fork = await backend.fork_session("default", "chats", "s", "f", odd[2], moment)
        copied = await backend.list_items("default", "chats", fork.session_id,
                                          descending=False, limit=10, after_seq=None)
        assert [i.data for i in copied] == [{"n": 0}, {"n": 1}, {"n": 2}]
        popped = await backend.pop_item("default", "chats", "s", moment)
        assert popped is not None
        assert popped.item_id == odd[-1]
        listed = await backend.list_items("default", "chats", "s", descending=True, limit=10,
                                          after_seq=None)
        assert [i.item_id for i in listed] == odd[:3][::-1]
        assert await backend.list_items("default", "chats", "s", descending=True, limit=10,
                                        after_seq=1) == []
        await backend.close()

    asyncio.run(scenario())
