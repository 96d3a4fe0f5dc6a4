"""Semantic and hybrid search measured on LoCoMo: retrieval recall of ``memory.search`` in
each mode, against BM25 in the same run.

Each LoCoMo conversation (``--data``, the dataset's JSON; read from where it lies, never
copied) is loaded per backend as a session store with one session per LoCoMo session and
one item per turn, and a memory store with one fact per turn whose source is that turn's
item, written by a client with the ``all-MiniLM-L6-v2`` embedder (``ownstate[embed]``), so
every fact carries its vector. Each turn's text is its speaker, a colon and its text, with
the image caption appended where the turn has one; each conversation has a tenant of its
own, so every search ranks within one conversation, as the baseline does. For each
answerable question (categories 1-4) it takes the top 10 of
``session_stores.search_items`` and of ``memory.search`` in the modes ``lexical``,
``semantic`` and ``hybrid``, and counts a hit at k when one of the question's evidence
turns is among the first k (an item hit is its turn; a fact hit is its source item's
turn). A fact's vector is made from its text, key first (``D1:3 Caroline: ...``); an
item's from its text alone. ``hybrid k=60`` is
the hybrid search with the fusion constant of the original paper instead of ownstate's.
The baseline is ``rank_bm25.BM25Okapi`` over the same turns, lowercased ``\\w+`` tokens,
one corpus per conversation. Query latency is the median of the hybrid searches, query
embedding included.

Every text is embedded once per run (the vectors are kept in memory and handed to every
backend; ``--cache FILE`` keeps them between runs), so the backends differ only in what
they store and rank.

Run by hand (not in CI)::

    python bench/search_hybrid.py --data ../shared/data/locomo/locomo-dev.json \
        --cache /tmp/locomo-minilm.json

Backends: ``--backends memory,sqlite,postgres`` (PostgreSQL at
``OWNSTATE_BENCH_POSTGRES_URL``, by default the local server; each run uses a schema of
its own and removes it). The data loading, the databases and the baseline are those of
``search_locomo.py``, the lexical benchmark.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from search_locomo import _hits, baseline, database, load

import ownstate
from ownstate.api import _semantic
from ownstate.embeddings import MiniLM

perf_counter = time.perf_counter
MODES = ("lexical", "semantic", "hybrid", "hybrid k=60")
KINDS = ("search_items", "memory.search")


class Remembering:
    """An embedder that encodes each distinct text once and remembers its vector, in a
    file between runs when given one (``--cache``: JSON of text -> vector)."""

    def __init__(self, inner: MiniLM, cache: str | None) -> None:
        self.inner = inner
        self.model = inner.model
        self.dimension = inner.dimension
        self.cache = Path(cache) if cache else None
        self.seen: dict[str, list[float]] = (
            json.loads(self.cache.read_text()) if self.cache and self.cache.exists() else {})

    def save(self) -> None:
        if self.cache is not None:
            self.cache.write_text(json.dumps(self.seen))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        new = [t for t in dict.fromkeys(texts) if t not in self.seen]
        if new:
            self.seen.update(zip(new, self.inner.embed(new), strict=True))
        return [self.seen[t] for t in texts]


def _search(search: Any, question: str, mode: str) -> list[Any]:
    if mode != "hybrid k=60":
        return list(search(question, limit=10, mode=mode))
    saved, _semantic.HYBRID_K = _semantic.HYBRID_K, 60
    try:
        return list(search(question, limit=10, mode="hybrid"))
    finally:
        _semantic.HYBRID_K = saved


def measure(url: str, convs: list[dict[str, Any]], embedder: Remembering
            ) -> tuple[dict[tuple[str, str], list[tuple[int, int, int]]], float]:
    scores: dict[tuple[str, str], list[tuple[int, int, int]]] = {
        (kind, mode): [] for kind in KINDS for mode in MODES}
    times = []
    for conv in convs:
        tenant = re.sub(r"[^a-z0-9-]", "-", conv["id"].lower())
        with ownstate.connect(url, tenant=tenant, embedder=embedder) as client:
            store = client.session_stores.create("locomo")
            memory = client.memory_stores.create("locomo-facts")
            item_turn: dict[str, str] = {}
            turn_of: dict[tuple[str, int], str] = {}
            for n, turns in enumerate(conv["sessions"], start=1):
                session = store.add(actor_id="locomo", session_id=f"session-{n}")
                items = session.append_items(
                    [{"role": "user", "content": text} for _, text in turns])
                for (dia, _), item in zip(turns, items, strict=True):
                    item_turn[item.item_id] = dia
                    turn_of[(item.session_id, item.seq)] = dia
                facts = [{"subject": "locomo", "key": dia, "value": text, "source": item}
                         for (dia, text), item in zip(turns, items, strict=True)]
                for start in range(0, len(facts), 100):
                    memory.remember_many(facts[start:start + 100])
            for question, evidence in conv["questions"]:
                for mode in MODES:
                    started = perf_counter()
                    found = _search(memory.search, question, mode)
                    if mode == "hybrid":
                        times.append(perf_counter() - started)
                    scores[("memory.search", mode)].append(_hits(
                        [{item_turn.get(h.fact.source_item_id or "", "")} for h in found],
                        evidence))
                    hits = _search(client.session_stores.search_items, question, mode)
                    scores[("search_items", mode)].append(_hits(
                        [{turn_of[(h.item.session_id, h.item.seq)]} for h in hits], evidence))
    return scores, statistics.median(times) * 1000


def _rates(scores: list[tuple[int, int, int]]) -> str:
    return " | ".join(f"{sum(s[i] for s in scores) / len(scores):.3f}" for i in range(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="path of LoCoMo's JSON")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--cache", help="a JSON file keeping the vectors between runs")
    args = parser.parse_args()
    convs = load(args.data)
    embedder = Remembering(MiniLM(), args.cache)
    started = perf_counter()
    texts = [text for conv in convs for s in conv["sessions"] for _, text in s]
    keyed = [f"{dia} {text}" for conv in convs for s in conv["sessions"] for dia, text in s]
    embedder.embed(texts + keyed + [q for conv in convs for q, _ in conv["questions"]])
    embedder.save()
    print(f"embedded {len(embedder.seen)} texts in {perf_counter() - started:.1f} s",
          flush=True)
    base = baseline(convs)
    print(f"{len(base)} questions in {len(convs)} conversations\n")
    print("| backend | ranking | R@1 | R@5 | R@10 |")
    print("|---|---|---|---|---|")
    print(f"| - | BM25 (rank_bm25) | {_rates(base)} |")
    for backend in args.backends.split(","):
        with database(backend) as url:
            scores, p50 = measure(url, convs, embedder)
        for kind in KINDS:
            for mode in MODES:
                print(f"| {backend} | {kind} {mode} | {_rates(scores[(kind, mode)])} |")
        print(f"| {backend} | hybrid query p50 {p50:.1f} ms | | | |", flush=True)


if __name__ == "__main__":
    main()
