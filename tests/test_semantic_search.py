"""Semantic and hybrid search on every backend that stores vectors, with the real model.

The embedder is ``all-MiniLM-L6-v2`` from the ``embed`` extra (installed by CI); the
tests skip, saying so, where it is missing. A second, tiny embedder of another model and
dimension stands for "a client configured with a different model". Backends that do not
declare ``Capability.VECTORS`` are held to refusing an embedder at connect.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from conftest import _require

import ownstate
from ownstate import archive
from ownstate.backends import Capability
from ownstate.embeddings import Embedder, fuse
from ownstate.testing import Target

FACTS = [
    ("user:1", "pet", "Has a golden retriever called Max"),
    ("user:1", "city", "Lives in Lisbon, Portugal"),
    ("user:1", "job", "Works as a nurse at the night shift of the hospital"),
    ("user:1", "drink", "Prefers green tea over coffee"),
    ("user:2", "pet", "Keeps two cats, Salt and Pepper"),
    ("user:2", "sport", "Plays tennis on Sunday mornings"),
]


class Letters:
    """A small embedder of another model: counts of the letters a to h."""

    model = "test/letters"
    dimension = 8

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(t.lower().count(c)) + 0.01 for c in "abcdefgh"] for t in texts]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    _require("embed")
    from ownstate.embeddings import MiniLM

    return MiniLM().load()


@pytest.fixture
def vectors(target: Target) -> Target:
    if not target.has(Capability.VECTORS):
        pytest.skip(f"{target.name} stores no vectors (no Capability.VECTORS)")
    return target


@pytest.fixture
def semantic(vectors: Target, minilm: Embedder) -> Iterator[ownstate.Client]:
    with vectors.connect(embedder=minilm) as client:
        yield client


def _fill(client: ownstate.Client) -> ownstate.MemoryStore:
    mem = client.memory_stores.create("mem-a")
    mem.remember_many([{"subject": s, "key": k, "value": v} for s, k, v in FACTS])
    return mem


def test_semantic_finds_a_paraphrase_that_lexical_misses(semantic: ownstate.Client) -> None:
    mem = _fill(semantic)
    question = "which dog breed is owned"
    assert [h.fact.key for h in mem.search(question, mode="lexical")] == []
    hits = mem.search(question, mode="semantic", limit=3)
    assert (hits[0].fact.subject, hits[0].fact.key) == ("user:1", "pet")
    assert hits[0].score > hits[1].score
    assert [h.fact.key for h in mem.search("beverage", mode="semantic", limit=1)] == ["drink"]
    only = mem.search("an animal at home", mode="semantic", subject="user:2", limit=2)
    assert [h.fact.subject for h in only] == ["user:2", "user:2"]
    assert only[0].fact.key == "pet"


def test_hybrid_is_the_fusion_of_both_rankings_and_deterministic(
        semantic: ownstate.Client) -> None:
    mem = _fill(semantic)
    question = "who is on the night shift with animals"
    hybrid = mem.search(question, limit=6)  # hybrid is the default with an embedder
    assert hybrid == mem.search(question, limit=6, mode="hybrid")
    # the lexical half leaves out the question's function words ("who", "is", "the", ...)
    lexical = [h.fact.fact_id for h in
               mem.search("night shift animals", mode="lexical", limit=50)]
    semantic_ids = [h.fact.fact_id for h in mem.search(question, mode="semantic", limit=50)]
    assert lexical, "the lexical ranking finds the words 'night shift'"
    expected = fuse([lexical, semantic_ids], k=5)[:6]
    assert [(h.fact.fact_id, h.score) for h in hybrid] == expected
    assert "job" in [h.fact.key for h in hybrid[:2]]
    assert "pet" in [h.fact.key for h in hybrid[:3]]


def test_an_embedder_of_another_model_is_refused_and_nothing_is_written(
        vectors: Target, semantic: ownstate.Client) -> None:
    mem = _fill(semantic)
    before = mem.recall("user:1")
    with vectors.connect(embedder=Letters()) as other:
        theirs = other.memory_stores.get("mem-a")
        with pytest.raises(ownstate.EmbedderMismatch) as caught:
            theirs.remember("user:1", "pet", "A parrot")
        assert caught.value.stored_model == "sentence-transformers/all-MiniLM-L6-v2"
        assert (caught.value.model, caught.value.dimension) == ("test/letters", 8)
        with pytest.raises(ownstate.EmbedderMismatch):
            theirs.remember_many([{"subject": "user:9", "key": "k", "value": "v"}])
        with pytest.raises(ownstate.EmbedderMismatch):
            theirs.reindex()
        assert isinstance(caught.value, ownstate.Conflict)
    assert mem.recall("user:1") == before
    assert mem.recall("user:9") == []
    # switching models is explicit: replace every vector, then the new model is the store's
    with vectors.connect(embedder=Letters()) as other:
        assert other.memory_stores.get("mem-a").reindex(replace=True) == len(FACTS)
    with pytest.raises(ownstate.EmbedderMismatch):
        mem.remember("user:1", "pet", "A parrot")


def test_reindex_backfills_facts_written_without_an_embedder(
        vectors: Target, minilm: Embedder) -> None:
    with vectors.connect() as plain:
        _fill(plain)
    with vectors.connect(embedder=minilm) as client:
        mem = client.memory_stores.get("mem-a")
        assert mem.search("which dog breed is owned", mode="semantic") == []
        assert mem.reindex(batch_size=4) == len(FACTS)
        assert mem.reindex() == 0
        assert mem.search("which dog breed is owned", mode="semantic")[0].fact.key == "pet"
        mem.remember("user:1", "pet", "Now owns a parrot named Kiwi")
        hits = mem.search("a bird that talks", mode="semantic")
        assert hits[0].fact.value == "Now owns a parrot named Kiwi"
        assert "Has a golden retriever called Max" not in [h.fact.value for h in hits]
        with pytest.raises(ownstate.InvalidInput):
            mem.reindex(batch_size=0)
        client.memory_stores.erase_subject("user:1")
        assert {h.fact.subject for h in mem.search("pet", mode="semantic")} == {"user:2"}


def test_without_an_embedder_search_is_lexical(vectors: Target) -> None:
    with vectors.connect() as client:
        mem = _fill(client)
        assert client.embedder is None
        assert [h.fact.key for h in mem.search("retriever")] == ["pet"]
        for mode in ("semantic", "hybrid"):
            with pytest.raises(ownstate.InvalidInput) as caught:
                mem.search("retriever", mode=mode)  # type: ignore[arg-type]
            assert caught.value.field == "mode"
        with pytest.raises(ownstate.InvalidInput):
            mem.search("retriever", mode="fuzzy")  # type: ignore[arg-type]
        with pytest.raises(ownstate.InvalidInput):
            mem.reindex()


def test_the_async_client_embeds_off_the_event_loop(vectors: Target, minilm: Embedder) -> None:
    async def main() -> list[str]:
        async with await vectors.connect_async(embedder=minilm) as client:
            mem = await client.memory_stores.create("mem-b")
            await mem.remember("user:1", "pet", "Has a golden retriever called Max")
            await mem.remember("user:1", "city", "Lives in Lisbon, Portugal")
            return [h.fact.key for h in await mem.search("a dog", mode="semantic")]

    assert asyncio.run(main())[0] == "pet"


def test_a_backend_without_vectors_refuses_an_embedder(target: Target) -> None:
    if target.has(Capability.VECTORS):
        pytest.skip(f"{target.name} stores vectors")
    with pytest.raises(ownstate.InvalidInput) as caught:
        target.connect(embedder=Letters())
    assert caught.value.field == "embedder"


def test_an_embedder_that_breaks_its_contract_is_refused(vectors: Target) -> None:
    class Short(Letters):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[1.0, 2.0] for _ in texts]

    with pytest.raises(ownstate.InvalidInput):
        vectors.connect(embedder=object())
    with vectors.connect(embedder=Short()) as client:
        mem = client.memory_stores.create("mem-c")
        with pytest.raises(ownstate.InvalidInput) as caught:
            mem.remember("user:1", "pet", "dog")
        assert caught.value.field == "embedder"
        assert mem.recall("user:1") == []


def _conversation(client: ownstate.Client, store: str = "talks") -> ownstate.Session:
    session = client.session_stores.create(store).add(
        actor_id="user:1", session_id="s-1")
    session.append_items([
        {"role": "user", "content": "My golden retriever Max chewed my homework"},
        {"role": "assistant", "content": "Sorry to hear about the essay"},
        {"role": "user", "content": "I will fly to Lisbon tomorrow"},
    ])
    return session


def test_items_are_found_by_meaning_and_by_fusion(semantic: ownstate.Client) -> None:
    _conversation(semantic)
    other = semantic.session_stores.get("talks").add(actor_id="user:2", session_id="s-2")
    other.append_items([{"role": "user", "content": "Planning a holiday in Portugal"}])
    search = semantic.session_stores.search_items
    assert search("travel abroad", mode="lexical") == []
    trips = search("travel abroad", mode="semantic", limit=2)
    assert {(h.item.session_id, h.item.seq) for h in trips} == {("s-1", 3), ("s-2", 1)}
    mine = search("travel abroad", mode="semantic", actor_id="user:1", limit=1)
    assert [(h.store, h.actor_id, h.item.seq) for h in mine] == [("talks", "user:1", 3)]
    only = search("travel abroad", mode="semantic", session_id="s-2", store="talks")
    assert [h.item.session_id for h in only] == ["s-2"]
    hybrid = search("my dog chewed the homework")
    assert hybrid[0].item.seq == 1
    assert hybrid == search("my dog chewed the homework", mode="hybrid")


def test_item_vectors_keep_one_model(
        vectors: Target, semantic: ownstate.Client) -> None:
    session = _conversation(semantic)
    with vectors.connect(embedder=Letters()) as other:
        theirs = other.session_stores.get("talks").get("s-1")
        with pytest.raises(ownstate.EmbedderMismatch):
            theirs.append_items([{"role": "user", "content": "a parrot"}])
    assert len(list(session.list_items())) == 3
    # another store may hold another model's vectors
    with vectors.connect(embedder=Letters()) as other:
        _conversation(other, "elsewhere")
        assert [h.store for h in other.session_stores.search_items(
            "dog", mode="semantic", store="elsewhere", limit=1)] == ["elsewhere"]


def test_a_fork_keeps_its_items_vectors(semantic: ownstate.Client) -> None:
    session = _conversation(semantic)
    child = session.fork(session_id="s-1-fork")
    hits = semantic.session_stores.search_items("travel abroad", mode="semantic",
                                                session_id="s-1-fork", limit=1)
    assert [(h.item.session_id, h.item.seq) for h in hits] == [(child.session_id, 3)]


def test_without_an_embedder_nothing_heavy_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys, ownstate\n"
        f"c = ownstate.connect('sqlite:///{tmp_path}/x.db')\n"
        "m = c.memory_stores.create('mem-a')\n"
        "m.remember('u', 'k', 'v')\n"
        "m.search('v')\n"
        "print([n for n in ('torch', 'numpy', 'sentence_transformers', 'transformers')"
        " if n in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_ownstates_own_subjects_stay_out_of_semantic_search(semantic: ownstate.Client) -> None:
    mem = _fill(semantic)
    mark = mem.remember("ownstate:distill", "talks/s-1", "Has a golden retriever called Max")
    for mode in ("semantic", "hybrid"):
        hits = mem.search("a dog", mode=mode, limit=len(FACTS))
        assert mark.fact_id not in {h.fact.fact_id for h in hits}
        assert len(hits) == len(FACTS)
        named = mem.search("a dog", mode=mode, subject="ownstate:distill")
        assert [h.fact.fact_id for h in named] == [mark.fact_id]


def test_session_store_reindex_backfills_items_appended_without_an_embedder(
        vectors: Target, minilm: Embedder) -> None:
    with vectors.connect() as plain:
        _conversation(plain)
        plain.session_stores.get("talks").add(actor_id="user:2", session_id="s-2") \
            .append_items([{"role": "user", "content": "Planning a holiday in Portugal"},
                           {"type": "marker"}])
        with pytest.raises(ownstate.InvalidInput):
            plain.session_stores.reindex("talks")
    with vectors.connect(embedder=minilm) as client:
        stores = client.session_stores
        assert stores.search_items("travel abroad", mode="semantic") == []
        assert stores.reindex("talks", batch_size=2) == 4
        assert stores.reindex("talks") == 0
        trips = stores.search_items("travel abroad", mode="semantic", limit=2)
        assert {(h.item.session_id, h.item.seq) for h in trips} == {("s-1", 3), ("s-2", 1)}
        with pytest.raises(ownstate.InvalidInput):
            stores.reindex("talks", batch_size=0)
        with pytest.raises(ownstate.StoreNotFound):
            stores.reindex("nowhere")


def test_session_store_reindex_keeps_one_model_unless_replacing(
        vectors: Target, semantic: ownstate.Client) -> None:
    _conversation(semantic)
    with vectors.connect(embedder=Letters()) as other:
        stores = other.session_stores
        with pytest.raises(ownstate.EmbedderMismatch):
            stores.reindex("talks")
        assert stores.search_items("dog", mode="semantic") == []
        assert stores.reindex("talks", replace=True) == 3
        assert stores.reindex("talks") == 0
        assert len(stores.search_items("dog", mode="semantic")) == 3
    assert semantic.session_stores.search_items("travel abroad", mode="semantic") == []
    with pytest.raises(ownstate.EmbedderMismatch):
        semantic.session_stores.get("talks").get("s-1").append_items(
            [{"role": "user", "content": "a parrot"}])


def test_an_interrupted_session_store_reindex_resumes(vectors: Target) -> None:
    class Failing(Letters):
        calls = 0

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            Failing.calls += 1
            if Failing.calls == 2:
                raise RuntimeError("the model went away")
            return super().embed(texts)

    with vectors.connect() as plain:
        _conversation(plain)
    with vectors.connect(embedder=Failing()) as client:
        with pytest.raises(RuntimeError):
            client.session_stores.reindex("talks", batch_size=2)
        assert len(client.session_stores.search_items("dog", mode="semantic")) == 2
        assert client.session_stores.reindex("talks", batch_size=2) == 1
        assert len(client.session_stores.search_items("dog", mode="semantic")) == 3


def test_a_store_that_does_not_index_items_takes_no_vectors_on_reindex(
        vectors: Target) -> None:
    with vectors.connect() as plain:
        plain.session_stores.create("quiet", index_items=False).add(
            actor_id="user:1", session_id="s-1").append_items(
            [{"role": "user", "content": "My golden retriever Max"}])
    with vectors.connect(embedder=Letters()) as client:
        assert client.session_stores.reindex("quiet") == 0
        assert client.session_stores.reindex("quiet", replace=True) == 0
        assert client.session_stores.search_items("dog", mode="semantic") == []


def test_a_session_store_reindex_needs_an_embedder(target: Target) -> None:
    with target.connect() as client:
        client.session_stores.create("talks")
        with pytest.raises(ownstate.InvalidInput) as caught:
            client.session_stores.reindex("talks")
        assert caught.value.field == "embedder"


def test_items_restored_from_an_archive_are_found_by_meaning_after_a_reindex(
        vectors: Target, semantic: ownstate.Client, tmp_path: Path) -> None:
    if not vectors.has(Capability.TRANSFER):
        pytest.skip(f"{vectors.name} does not transfer")
    _conversation(semantic)
    archive.export(semantic, tmp_path / "a.tar")
    with ownstate.connect(f"sqlite:///{tmp_path}/copy.db", embedder=Letters()) as copy:
        archive.import_archive(copy, tmp_path / "a.tar")
        assert copy.session_stores.search_items("dog", mode="semantic") == []
        assert copy.session_stores.reindex("talks") == 3
        assert len(copy.session_stores.search_items("dog", mode="semantic")) == 3
