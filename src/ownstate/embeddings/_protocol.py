"""The Embedder protocol and the one encoding of a stored vector.

A stored vector is an :class:`Embedding`: the model's name and the vector, scaled to unit
length and packed as little-endian float32 (the layout sqlite-vec reads, 4 bytes a
dimension), so that cosine similarity is a dot product on every backend. It may touch only
the error tree (``ownstate.errors``), and numpy when it is installed (a faster dot product);
nothing else outside the standard library.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import EmbedderMismatch, InvalidInput

__all__ = ["Embedder", "Embedding", "check_vectors", "one_model"]

_TINY = 1e-30


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors: the one thing semantic search needs.

    ``model`` names the model (and any setting that changes its vectors), ``dimension``
    is the length of every vector it returns. ``embed`` returns one vector per text, in
    order; it may block (a client calls it in a worker thread).
    """

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


@dataclass(frozen=True, slots=True)
class Embedding:
    """A vector as stored: its model and its unit-length float32 bytes."""

    model: str
    data: bytes

    @property
    def dimension(self) -> int:
        return len(self.data) // 4

    @classmethod
    def pack(cls, model: str, vector: Sequence[float]) -> Embedding:
        """Scale ``vector`` to unit length and pack it. Raises InvalidInput for a vector
        that is empty, has a non-finite component, or is all zeros."""
        values = [float(x) for x in vector]
        norm = math.sqrt(math.fsum(x * x for x in values))
        if not values or not math.isfinite(norm) or norm == 0.0:
            raise InvalidInput("an embedder returned an empty, zero or non-finite vector",
                               field="embedder")
        # components too small for a float32 (or a PostgreSQL real) count as zero
        return cls(model, struct.pack(f"<{len(values)}f", *(
            y if abs(y := x / norm) >= _TINY else 0.0 for x in values)))

    def unpack(self) -> tuple[float, ...]:
        return struct.unpack(f"<{self.dimension}f", self.data)


def check_vectors(embedder: Embedder, texts: Sequence[str]) -> list[Embedding]:
    """``embedder.embed(texts)``, checked (one vector per text, each of the embedder's
    dimension) and packed. Raises InvalidInput when the embedder breaks its contract."""
    if not texts:
        return []
    vectors = embedder.embed(list(texts))
    if len(vectors) != len(texts):
        raise InvalidInput(f"the embedder returned {len(vectors)} vectors for {len(texts)} "
                           "texts", field="embedder")
    made = []
    for vector in vectors:
        if len(vector) != embedder.dimension:
            raise InvalidInput(f"the embedder returned a vector of {len(vector)} dimensions, "
                               f"not its declared {embedder.dimension}", field="embedder")
        made.append(Embedding.pack(embedder.model, vector))
    return made


def one_model(store: str, stored: tuple[str, int] | None,
              embeddings: Iterable[Embedding]) -> None:
    """Refuse ``embeddings`` unless they share one model and dimension with each other and
    with ``stored``, the store's (None when it has no vectors yet). Raises
    EmbedderMismatch."""
    for embedding in embeddings:
        mine = (embedding.model, embedding.dimension)
        if stored is None:
            stored = mine
        elif stored != mine:
            raise EmbedderMismatch(store=store, model=mine[0], dimension=mine[1],
                                   stored_model=stored[0], stored_dimension=stored[1])


def _dot_python(a: bytes, b: bytes) -> float:
    n = len(a) // 4
    return math.fsum(x * y for x, y in zip(struct.unpack(f"<{n}f", a),
                                           struct.unpack(f"<{n}f", b), strict=True))


def _dot_numpy(a: bytes, b: bytes) -> float:
    import numpy  # type: ignore[import-not-found,unused-ignore]

    return float(numpy.frombuffer(a, "<f4").astype("<f8") @ numpy.frombuffer(b, "<f4"))


def _choose_dot() -> Callable[[bytes, bytes], float]:
    try:
        import numpy  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return _dot_python
    return _dot_numpy


_dot: Callable[[bytes, bytes], float] | None = None


def dot(a: bytes, b: bytes) -> float:
    """The dot product of two packed vectors of one dimension (their cosine similarity):
    with numpy where it is installed (it comes with the ``embed`` extra), else in Python.
    Called only where vectors exist, so numpy is imported no earlier."""
    global _dot
    if _dot is None:
        _dot = _choose_dot()
    return _dot(a, b)
