"""Distillation: what turns a session's items into durable facts.

The pass itself is ``MemoryStore.distill`` (sync and async); what it asks for candidate
facts is an :class:`~ownstate.Extractor`. This package holds the extractors ownstate
ships and the ``ownstate memory distill`` command, and uses only public names of the
library:

- :class:`ChatCompletionsExtractor`: any OpenAI-compatible chat-completions endpoint
  (OpenAI, vLLM, llama.cpp's server, Ollama, LiteLLM, ...), with structured output. It
  needs httpx (the ``distill`` extra), imported when one is made.

It may touch :mod:`.chat`, the error tree and the model; httpx only through :mod:`.chat`.
"""

from __future__ import annotations

from ..errors import ExtractorFailed
from ..model import Candidate, Distillation, Extractor
from .chat import ChatCompletionsExtractor, render_item

__all__ = ["Candidate", "ChatCompletionsExtractor", "Distillation", "Extractor",
           "ExtractorFailed", "render_item"]
