"""One model per session store for item vectors, in memory: the check an append makes.

It may touch the in-memory data (``_data``) and the embeddings, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...embeddings import Embedding
from ...embeddings._protocol import one_model
from ._data import _Data

__all__ = ["admit_item_vectors"]


def admit_item_vectors(data: _Data, tenant: str, store: str,
                       embeddings: Sequence[Embedding | None]) -> None:
    """Refuse vectors of another model or dimension than the store's item vectors (or
    than each other's). Call under the data lock."""
    new = [e for e in embeddings if e is not None]
    if not new:
        return
    fixed = None
    for (t, st, _), session in data.sessions.items():
        if t == tenant and st == store:
            found = next((it.embedding for it in session.items if it.embedding is not None),
                         None)
            if found is not None:
                fixed = (found.model, found.dimension)
                break
    one_model(store, fixed, new)
