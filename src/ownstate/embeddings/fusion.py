"""Hybrid ranking: reciprocal-rank fusion of several rankings of the same things.

Every backend ranks lexically and semantically with its own engine; the fusion of the two
happens here only, so that a hybrid search orders its hits the same way on every backend.
Reciprocal-rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009) scores a hit by
``sum(1 / (k + rank))`` over the rankings it appears in (ranks from 1), which needs no
calibration between a BM25 score and a cosine similarity. Ties break by the first
ranking's order, then by the key, so the order is deterministic.

It may touch nothing else of ownstate's and no outside library: it ranks the keys it is
given.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["RRF_K", "fuse"]

#: The constant of reciprocal-rank fusion; 60 is the value of the paper and of most engines.
RRF_K = 60

K = TypeVar("K", bound=Hashable)


def fuse(rankings: Sequence[Sequence[K]], *, k: int = RRF_K,
         weights: Sequence[float] | None = None) -> list[tuple[K, float]]:
    """The keys of all ``rankings`` (each best first, without repeats) with their fused
    score, best first. ``weights`` scale each ranking's contribution (default 1 each)."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[K, float] = {}
    first_seen: dict[K, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[which]
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
            first_seen.setdefault(key, (which, rank))
    return sorted(scores.items(), key=lambda kv: (-kv[1], first_seen[kv[0]], str(kv[0])))
