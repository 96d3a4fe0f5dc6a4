"""The Redis item index and vectors beyond the shared suites: where they live, that a
search reads the index rather than the items, what goes with a session or a store, that
``ownstate migrate`` indexes what layout 1 stored, and that scores equal the reference's.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

import ownstate
from ownstate.errors import SchemaVersion

try:
    import redis

    from ownstate.backends.redis.sessions import SessionsInRedis
except ImportError:  # pragma: no cover - only without the 'redis' extra
    pytest.skip("redis-py (the 'redis' extra) is not installed", allow_module_level=True)

# a prefix of each test's own, emptied afterwards, and a raw client: test_redis.py's
pytest_plugins = ["test_redis"]

TEXTS = ("Caroline went to the LGBTQ support group", "the support group met on Sunday",
         "Melanie paints sunsets", "refund for order 12345", "a common filler line",
         "another common filler line")


def _index_keys(raw: redis.Redis, prefix: str) -> list[str]:
    keys = (k.decode() for k in raw.scan_iter(match=f"{prefix}:*", count=1000))
    return sorted(k for k in keys
                  if "}:" in k and k.split("}:", 1)[1].split(":")[0] in ("xd", "xt", "xn"))


def _fill(client: ownstate.Client) -> ownstate.Session:
    session = client.session_stores.create("chats").add(actor_id="user:1", session_id="s1")
    session.append_items([{"role": "user", "content": t} for t in TEXTS])
    return session


def test_items_are_indexed_in_their_tree(url: str, prefix: str, raw: redis.Redis) -> None:
    with ownstate.connect(url) as client:
        session = _fill(client)
        session.fork(session_id="s1-fork")
        quiet = client.session_stores.create("quiet", index_items=False)
        quiet.add(actor_id="user:1", session_id="q1").append_items(
            [{"role": "user", "content": "refund please"}])
    keys = _index_keys(raw, prefix)
    assert keys
    assert all("{default/chats/s1}" in k for k in keys), keys
    assert raw.hgetall(f"{prefix}:{{default/chats/s1}}:xn") == {
        b"n": str(2 * len(TEXTS)).encode(),
        b"len": str(2 * sum(len(t.split()) for t in TEXTS)).encode()}
    assert raw.hget(f"{prefix}:{{default/chats/s1}}:xt:refund", "s1-fork\x004") == b"1,4"


def test_a_search_reads_the_index_not_the_items(url: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with ownstate.connect(url) as client:
        _fill(client)
        async def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("a search listed items")

        monkeypatch.setattr(SessionsInRedis, "list_items", refuse)
        hits = client.session_stores.search_items("refund")
        assert [(h.item.session_id, h.item.seq) for h in hits] == [("s1", 4)]


def test_the_index_goes_with_its_items(url: str, prefix: str, raw: redis.Redis) -> None:
    with ownstate.connect(url) as client:
        session = _fill(client)
        child = session.fork(session_id="s1-fork")
        child.pop_item()
        child.clear()
        assert raw.hlen(f"{prefix}:{{default/chats/s1}}:xd:s1-fork") == 0
        child.delete()
        assert int(raw.hget(f"{prefix}:{{default/chats/s1}}:xn", "n")) == len(TEXTS)
        client.session_stores.delete("chats", force=True)
    assert _index_keys(raw, prefix) == []


def test_scores_are_the_references(url: str) -> None:
    queries = ["caroline support group sunday", "common filler", "refund 12345 order",
               "sunsets melanie group"]
    found = []
    for where in (url, f"memory://{uuid.uuid4().hex}"):
        with ownstate.connect(where) as client:
            session = _fill(client)
            session.fork(session_id="s1-fork", up_to_item_id=session.list_items_after(
                limit=3)[2].item_id)
            other = client.session_stores.create("other").add(actor_id="user:2",
                                                              session_id="s2")
            other.append_items([{"role": "user", "content": "support for Caroline"}])
            found.append([[(h.store, h.item.session_id, h.item.seq, round(h.score, 9))
                           for h in client.session_stores.search_items(q, limit=20)]
                          for q in queries])
    assert found[0] == found[1]
    assert all(found[0])


def _as_layout_1(raw: redis.Redis, prefix: str) -> None:
    """Leave the data as layout 1 stored it: no item index, no ``nx`` on sessions."""
    for key in _index_keys(raw, prefix):
        raw.delete(key)
    for key in raw.scan_iter(match=f"{prefix}:*:s:*", count=1000):
        raw.hdel(key, "nx")
    raw.set(f"{prefix}:layout", 1)


def test_migrate_indexes_what_layout_1_stored(url: str, prefix: str, raw: redis.Redis,
                                              caplog: pytest.LogCaptureFixture) -> None:
    with ownstate.connect(url) as client:
        _fill(client).fork(session_id="s1-fork")
        quiet = client.session_stores.create("quiet", index_items=False)
        quiet.add(actor_id="user:1", session_id="q1").append_items(
            [{"role": "user", "content": "refund please"}])
        with ownstate.connect(url, tenant="acme") as acme:
            _fill(acme)
        expected = client.session_stores.search_items("refund order support")
    counts = raw.hgetall(f"{prefix}:{{default/chats/s1}}:xn")
    _as_layout_1(raw, prefix)
    with pytest.raises(SchemaVersion) as err:
        ownstate.connect(url, migrate=False)
    assert (err.value.found, err.value.expected) == (1, 2)
    with caplog.at_level(logging.INFO, logger="ownstate.migrate"):
        ownstate.connect(url).close()
    # it says what it does: the 18 items of the three indexed sessions (one a fork), not
    # the quiet store's
    told = [r.getMessage() for r in caplog.records if r.name == "ownstate.migrate"]
    assert len(told) == 2, told
    assert told[0] == "layout 1 to 2: items indexed for search"
    assert re.fullmatch(r"indexing items for search: 18 \([\d,]+/s\)", told[1]), told
    with ownstate.connect(url) as client:
        assert client.session_stores.search_items("refund order support") == expected
        assert raw.hgetall(f"{prefix}:{{default/chats/s1}}:xn") == counts
        # the unindexed store's sessions learnt that they are, and stay out of search
        client.session_stores.get("quiet").get("q1").append_items(
            [{"role": "user", "content": "refund again"}])
        assert client.session_stores.search_items("refund", store="quiet") == []
    with ownstate.connect(url, tenant="acme") as acme:
        assert [h.item.seq for h in acme.session_stores.search_items("refund")] == [4]
    # migrating again changes nothing
    with ownstate.connect(url) as client:
        assert raw.hgetall(f"{prefix}:{{default/chats/s1}}:xn") == counts


class _Letters:
    """A tiny embedder: counts of eight letters (``letters``), one model per spelling."""

    dimension = 8

    def __init__(self, letters: str) -> None:
        self.letters = letters
        self.model = f"test/letters-{letters}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(t.lower().count(c)) + 0.01 for c in self.letters] for t in texts]


def test_an_append_checked_before_a_replacing_reindex_leaves_no_stale_vector(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model of an append's vectors is checked in the store's record and its items
    land in the session's tree, two scripts a cluster may run on two nodes. A replacing
    reindex to another model of the same dimension that runs between the two must not
    leave the append's old-model vector counted as one of the new model's."""
    old, new = _Letters("abcdefgh"), _Letters("ilmnoprs")
    with ownstate.connect(url, embedder=old) as writer, \
            ownstate.connect(url, embedder=new) as switcher:
        session = writer.session_stores.create("talks").add(actor_id="u", session_id="s1")
        session.append_items([{"role": "user", "content": "a bad cab faced a bed"}])
        admit = SessionsInRedis._admit_item_vectors
        reindexed: list[int] = []

        async def admit_then_switch(self: SessionsInRedis, *args: Any) -> int:
            generation = await admit(self, *args)
            if self is writer.backend and not reindexed:  # the switch runs in between
                reindexed.append(switcher.session_stores.reindex("talks", replace=True))
            return generation

        monkeypatch.setattr(SessionsInRedis, "_admit_item_vectors", admit_then_switch)
        session.append_items([{"role": "user", "content": "lemon pills in a simple prism"}])
        monkeypatch.undo()
        assert reindexed == [1]
        assert sorted(it.seq for it in session.list_items()) == [1, 2]
        # the second item's vector, of the old model, was not written: the new model's
        # reindex gives it one, and a search of the new model scores it by that one
        assert switcher.session_stores.reindex("talks") == 1
        assert switcher.session_stores.reindex("talks") == 0
        query = "prism lemon"
        hits = switcher.session_stores.search_items(query, mode="semantic", limit=2)
        expected = _dot(new.embed([query])[0], new.embed(["lemon pills in a simple prism"])[0])
        scores = {h.item.seq: h.score for h in hits}
        assert scores[2] == pytest.approx(expected, rel=1e-5)
        # a fork takes its parent's vectors with their generation
        session.fork(session_id="s1-fork")
        forked = switcher.session_stores.search_items(query, mode="semantic",
                                                      session_id="s1-fork", limit=2)
        assert {h.item.seq: h.score for h in forked} == scores
        # the old model's client is refused rather than mixing its vectors in
        with pytest.raises(ownstate.EmbedderMismatch):
            session.append_items([{"role": "user", "content": "one more"}])


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors (the embeddings are normalised when stored)."""
    na = sum(x * x for x in a) ** 0.5
    nb = sum(x * x for x in b) ** 0.5
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)
