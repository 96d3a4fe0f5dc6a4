"""SQLite ranks as the reference does (``ports.search.rank``), with each scope's own
statistics kept through deletes and forks, and its candidate pruning finds the
reference's best hits."""

from __future__ import annotations

from pathlib import Path

import pytest

import ownstate
from ownstate.backends.ports import search as search_rules
from ownstate.backends.ports.search import fact_text, item_text, query_terms, rank, terms


@pytest.fixture
def client(tmp_path: Path) -> ownstate.Client:
    made = ownstate.connect(f"sqlite:///{tmp_path}/ownstate.db", tenant="acme")
    made.migrate()
    return made


def _fact_reference(memory: ownstate.MemoryStore, subjects: list[str],
                    query: str) -> list[tuple[str, float]]:
    facts = sorted((f for s in subjects for f in memory.recall(s)), key=lambda f: f.fact_id)
    collection = [(f.key, terms(fact_text(f.key, f.value))) for f in facts]
    return rank(query_terms(query), collection, lambda _: True)


def test_fact_scores_are_the_references_through_erasure(client: ownstate.Client) -> None:
    memory = client.memory_stores.create("notes")
    other = client.memory_stores.create("other")
    for n in range(8):
        memory.remember(f"user:{n % 3}", f"k{n}", f"refund request number {n} common words")
        other.remember("user:9", f"k{n}", "refund refund refund elsewhere")
    memory.remember("user:1", "long", "refund " + " ".join(f"pad{i}" for i in range(20)))
    memory.erase_subject("user:2")
    got = [(h.fact.key, h.score) for h in memory.search("refund number 3 words")]
    want = _fact_reference(memory, ["user:0", "user:1"], "refund number 3 words")
    assert [k for k, _ in got] == [k for k, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)


def test_item_scores_are_the_references_through_forks_and_pops(
        client: ownstate.Client) -> None:
    store = client.session_stores.create("chats")
    session = store.add(actor_id="user:1")
    session.append_items([{"role": "user", "content": f"refund number {n} please"}
                          for n in range(6)])
    child = session.fork(up_to_item_id=session.list_items_after(limit=3)[2].item_id)
    session.pop_item()
    child.append_items([{"role": "user", "content": "a refund, a refund"}])
    items = [(s.session_id, i) for s in (session, child) for i in s.list_items_after()]
    collection = [((sid, i.seq), terms(item_text(i.data))) for sid, i in sorted(
        items, key=lambda x: (x[0], x[1].seq))]
    want = rank(query_terms("refund number 2"), collection, lambda _: True)
    got = client.session_stores.search_items("refund number 2", limit=20)
    assert [(h.item.session_id, h.item.seq) for h in got] == [d for d, _ in want]
    assert [h.score for h in got] == pytest.approx([s for _, s in want], rel=1e-9)


def test_pruned_candidates_still_give_the_best_hits(client: ownstate.Client,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    memory = client.memory_stores.create("notes")
    for n in range(30):
        memory.remember("user:1", f"c{n}", "common filler" if n < 10 else f"other {n % 4}")
    memory.remember("user:1", "r1", "rare common")
    memory.remember("user:1", "r2", "rare and unusual common")
    exact = memory.search("rare unusual common filler", limit=40)
    assert [h.fact.key for h in exact[:2]] == ["r2", "r1"]
    assert len(exact) == 12
    # read one term's postings at a time: the rarest first, the others only when the
    # first did not give enough hits
    monkeypatch.setattr(search_rules, "CANDIDATE_POSTINGS", 1)
    monkeypatch.setattr(search_rules, "RESCORED", 1)
    assert memory.search("rare unusual common filler", limit=2) == exact[:2]
    assert memory.search("rare unusual common filler", limit=40) == exact
    assert memory.search("rare unusual common filler", subject="user:1", limit=5) == exact[:5]
