"""Restoring into Redis leaves the key layout the backend's own writes make: the same keys,
the same hash fields, set and sorted-set members and list lengths (values differ only
where they are nonces and claim times), so every index the other Redis code reads and
every delete path works on restored data as on written data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REDIS_URL, _require

import ownstate
from ownstate import archive
from ownstate.testing.transfer import fill_every_kind

redis = pytest.importorskip("redis")


@pytest.fixture
def prefixes() -> Iterator[list[str]]:
    _require("redis")
    made: list[str] = []
    yield made
    with redis.Redis.from_url(REDIS_URL) as raw:
        for prefix in made:
            keys = list(raw.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                raw.delete(*keys)


def _url(prefixes: list[str], option: str = "") -> tuple[str, str]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    prefixes.append(prefix)
    separator = "&" if "?" in REDIS_URL else "?"
    return f"{REDIS_URL}{separator}prefix={prefix}{option}", prefix


def _layout(prefix: str) -> dict[str, Any]:
    """Every key under the prefix (prefix stripped) with its type and its shape."""
    shapes: dict[str, Any] = {}
    with redis.Redis.from_url(REDIS_URL) as raw:
        for key in raw.scan_iter(match=f"{prefix}:*", count=1000):
            name = key.decode()[len(prefix) + 1:]
            kind = raw.type(key).decode()
            if kind == "hash":
                shape: Any = sorted(raw.hkeys(key))
            elif kind == "set":
                shape = sorted(raw.smembers(key))
            elif kind == "zset":
                shape = sorted(raw.zrange(key, 0, -1))
            elif kind == "list":
                shape = raw.llen(key)
            else:
                shape = kind
            shapes[name] = (kind, shape)
    return shapes


def _empty_every_store(client: ownstate.Client) -> None:
    for store in list(client.session_stores.list()):
        client.session_stores.delete(store.name, force=True)
    for store in list(client.memory_stores.list()):
        client.memory_stores.delete(store.name)


def test_a_restore_makes_the_layout_the_writes_make(prefixes: list[str],
                                                    tmp_path: Path) -> None:
    written_url, written = _url(prefixes)
    restored_url, restored = _url(prefixes)
    with ownstate.connect(written_url) as client:
        fill_every_kind(client)
        archive.export(client, tmp_path / "a.tar", include_keys=True)
        with ownstate.connect(restored_url) as copy:
            archive.import_archive(copy, tmp_path / "a.tar")
            assert _layout(restored) == _layout(written)
            # listings follow the indexes: the same sessions and runs, in the same order
            for store in ("st-one", "st-two", "st-quiet"):
                assert ([s.session_id for s in copy.session_stores.get(store).list_sessions()]
                        == [s.session_id for s in client.session_stores.get(store).list_sessions()])
            assert ([r.run_id for r in copy.runs.list()]
                    == [r.run_id for r in client.runs.list()])
            # the delete paths find every key a restore made
            _empty_every_store(client)
            _empty_every_store(copy)
            assert _layout(restored) == _layout(written)


def test_restored_checkpoints_expire_as_written_ones_do(prefixes: list[str],
                                                        tmp_path: Path) -> None:
    with ownstate.connect("memory://") as client:
        fill_every_kind(client, sessions=1, items=1)
        archive.export(client, tmp_path / "a.tar")
    url, prefix = _url(prefixes, "&checkpoint_ttl=90")
    with ownstate.connect(url) as copy:
        archive.import_archive(copy, tmp_path / "a.tar")
    with redis.Redis.from_url(REDIS_URL) as raw:
        held = [k for k in raw.scan_iter(match=f"{prefix}:*", count=1000)
                if k.decode().rsplit(":", 2)[-2] in ("c", "cd", "cz", "cw", "cm")]
        assert held
        assert all(0 < raw.ttl(k) <= 90 for k in held)


def _hits(client: ownstate.Client, query: str, **where: Any) -> list[tuple[Any, ...]]:
    return [(h.store, h.item.session_id, h.item.seq, h.item.item_id, round(h.score, 9))
            for h in client.session_stores.search_items(query, limit=50, **where)]


def test_search_after_a_restore_equals_search_after_the_appends(prefixes: list[str],
                                                                tmp_path: Path) -> None:
    written_url, _ = _url(prefixes)
    restored_url, _ = _url(prefixes)
    queries = ("refund order", "whispered secret", "shipping", "hi ünï", "lookup_order 42")
    with ownstate.connect(written_url) as client:
        fill_every_kind(client)
        store = client.session_stores.get("st-two")
        talk = store.add(actor_id="user:5", session_id="talk")
        talk.append_items([
            {"type": "message", "role": "user", "content": "where is my refund order"},
            {"type": "function_call", "name": "lookup_order", "arguments": '{"order": 42}',
             "call_id": "c1"},
            {"type": "message", "role": "assistant", "content": "shipping takes a week"}])
        talk.fork(session_id="talk-fork").append_items(
            [{"type": "message", "role": "user", "content": "refund the shipping too"}])
        client.memory_stores.get("mem").remember("user:2", "ship", "refund by shipping")
        expected = {q: _hits(client, q) for q in queries}
        facts = [(h.fact.fact_id, round(h.score, 9))
                 for h in client.memory_stores.get("mem").search("refund shipping")]
        archive.export(client, tmp_path / "a.tar", include_keys=True)
    assert expected["refund order"]
    assert expected["lookup_order 42"]
    assert facts
    assert expected["whispered secret"] == []  # st-quiet keeps its items out of search
    with ownstate.connect(restored_url) as copy:
        archive.import_archive(copy, tmp_path / "a.tar")
        assert {q: _hits(copy, q) for q in queries} == expected
        assert [(h.fact.fact_id, round(h.score, 9))
                for h in copy.memory_stores.get("mem").search("refund shipping")] == facts
        # appended after the restore, as into any session: indexed alike
        copy.session_stores.get("st-quiet").get("hush").append_items(
            [{"type": "message", "role": "user", "content": "whispered again"}])
        assert _hits(copy, "whispered") == []
        copy.session_stores.get("st-two").get("talk").append_items(
            [{"type": "message", "role": "user", "content": "whispered refund"}])
        assert [h[1:3] for h in _hits(copy, "whispered")] == [("talk", 4)]
