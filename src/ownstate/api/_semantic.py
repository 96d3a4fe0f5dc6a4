"""Semantic and hybrid search for the public API: vectors for writes, and the search modes.

A client with an embedder embeds the text of each fact it writes and hands the vector to
the backend with the fact, so both land in one transaction. A search ranks in one of three
modes: ``lexical`` (the backend's full-text engine), ``semantic`` (the backend's nearest
vectors to the query's) or ``hybrid``, the reciprocal-rank fusion of the two
(:func:`ownstate.embeddings.fuse`), computed here for every backend. The default is
hybrid with an embedder and lexical without one.

It may touch the client's embedder and the backend's vector and search operations through
the scope.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Literal, TypeVar

from ..backends import Backend, Capability, NewItem
from ..backends.ports.facts import NewFact
from ..backends.ports.search import TextQuery, fact_text, item_text
from ..embeddings import Embedder, Embedding, check_vectors, fuse
from ..errors import InvalidInput
from ..model import Fact, Item, ItemHit
from ._scope import Scope

__all__ = [
    "FUNCTION_WORDS",
    "HYBRID_K",
    "MODES",
    "Mode",
    "check_embedder",
    "choose_mode",
    "content_terms",
    "embed",
    "fused",
    "nearest_facts",
    "pool_size",
    "reindex_facts",
    "reindex_items",
    "with_vectors",
]

Mode = Literal["lexical", "semantic", "hybrid"]
MODES: tuple[Mode, ...] = ("lexical", "semantic", "hybrid")

H = TypeVar("H")


def check_embedder(backend: Backend, embedder: object) -> Embedder | None:
    """``embedder`` if it is one and the backend stores vectors. Raises InvalidInput."""
    if embedder is None:
        return None
    if not isinstance(embedder, Embedder) or not isinstance(embedder.model, str) or not (
            isinstance(embedder.dimension, int) and embedder.dimension > 0):
        raise InvalidInput("embedder= takes an ownstate.embeddings.Embedder (embed(), a "
                           "model name and a positive dimension)", field="embedder")
    if Capability.VECTORS not in type(backend).capabilities:
        raise InvalidInput(f"{type(backend).__name__} stores no vectors; connect without "
                           "embedder=", field="embedder")
    return embedder


async def embed(scope: Scope, texts: Sequence[str]) -> list[Embedding]:
    """The scope's embedder's vectors for ``texts``, checked and packed; encoded off the
    event loop unless the backend runs inline (a sync client's own thread)."""
    embedder = scope.embedder
    assert embedder is not None
    if scope.backend.runs_inline:
        return check_vectors(embedder, texts)
    return await asyncio.to_thread(check_vectors, embedder, texts)


def server_ranked(scope: Scope) -> bool:
    """Whether the backend's server ranks searches itself (and so picks the mode)."""
    return Capability.SERVER_RANKED in type(scope.backend).capabilities


def choose_mode(scope: Scope, mode: object) -> Mode | None:
    """The search mode asked for, or the default (None: the server's, for a backend
    whose server ranks). Raises InvalidInput (an unknown mode, or a semantic one without
    an embedder)."""
    if server_ranked(scope):
        if mode is not None and mode not in MODES:
            raise InvalidInput(f"mode must be one of {', '.join(MODES)}", field="mode")
        return mode
    if mode is None:
        return "hybrid" if scope.embedder is not None else "lexical"
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}", field="mode")
    if mode != "lexical" and scope.embedder is None:
        raise InvalidInput(f"a {mode} search needs a client with an embedder "
                           "(connect(..., embedder=...))", field="mode")
    return mode


#: English function words, which a natural-language question is full of ("when did she
#: go to the ...") and which match nearly every document: the lexical half of a hybrid
#: search leaves them out (unless nothing else is left), so that it ranks by the words
#: that carry the question. A lexical search keeps every term.
_FUNCTION_WORDS = """
a about after again all also am an and any are as at be because been before being both
but by can could did do does doing done for from had has have having he her here hers
herself him himself his how i if in into is it its itself just me my myself no nor not
now of off on once only or other our ours ourselves out over own same she should so some
such than that the their theirs them themselves then there these they this those to too
under until up very was we were what when where which while who whom why will with would
you your yours yourself yourselves
"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())

#: The constant of the hybrid search's fusion. Smaller than the 60 of the original paper:
#: with two rankings, a small constant lets each ranking's best few hits lead, where 60
#: lets documents that both rank middling overtake them (docs/benchmarks.md measures
#: both on LoCoMo).
HYBRID_K = 5


def content_terms(query: TextQuery) -> TextQuery:
    """``query`` without its :data:`FUNCTION_WORDS`, or unchanged if it holds nothing else."""
    kept = tuple(t for t in query.terms if t not in FUNCTION_WORDS)
    return query._replace(terms=kept) if kept else query


def pool_size(limit: int) -> int:
    """How many candidates each ranking contributes to a fusion of ``limit`` hits."""
    return max(50, 3 * limit)


async def fused(lexical: Callable[[int], Awaitable[list[H]]],
                semantic: Callable[[int], Awaitable[list[H]]], key: Callable[[H], str],
                rescore: Callable[[H, float], H], limit: int) -> list[H]:
    """The hybrid ranking: both rankings of ``pool_size(limit)`` candidates, fused, with
    each hit's score replaced by its fused score, best first; at most ``limit``."""
    depth = pool_size(limit)
    lex = await lexical(depth)
    sem = await semantic(depth)
    by_key = {key(h): h for h in sem}
    by_key.update({key(h): h for h in lex})
    ranked = fuse([[key(h) for h in lex], [key(h) for h in sem]], k=HYBRID_K)
    return [rescore(by_key[k], score) for k, score in ranked[:limit]]


# facts ---------------------------------------------------------------------------------

_fact_text = fact_text


async def with_vectors(scope: Scope, facts: list[NewFact]) -> list[NewFact]:
    """``facts``, each with the vector of its text when the scope has an embedder."""
    if scope.embedder is None or not facts:
        return facts
    vectors = await embed(scope, [_fact_text(f.key, json.loads(f.value_json)) for f in facts])
    return [replace(f, embedding=v) for f, v in zip(facts, vectors, strict=True)]


async def nearest_facts(scope: Scope, store: str, query: str, subject: str | None,
                        limit: int, as_of: datetime | None) -> list[tuple[Fact, float]]:
    """The facts whose vectors are nearest the query's, with their similarity."""
    (vector,) = await embed(scope, [query])
    return await scope.backend.nearest_facts(scope.tenant, store, vector, subject, limit,
                                             as_of)


R = TypeVar("R")
C = TypeVar("C")


async def _reindex(scope: Scope, batch_size: object, replace: bool,
                   todo: Callable[[str, C | None, int], Awaitable[list[R]]],
                   text_of: Callable[[R], str], cursor: Callable[[R], C],
                   put: Callable[[list[tuple[R, Embedding]], bool], Awaitable[int]]) -> int:
    """The reindex loop: ``todo(model, after, limit)`` lists a batch of rows lacking a
    vector of the scope's model, strictly after the ``cursor`` of the previous batch's
    last row; each row with text is embedded and ``put`` (with ``replace``, ``put`` first
    drops every vector). Returns how many vectors were stored. Raises InvalidInput (no
    embedder; a bad batch_size)."""
    embedder = scope.embedder
    if embedder is None:
        raise InvalidInput("reindex needs a client with an embedder", field="embedder")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not (
            1 <= batch_size <= scope.limits.max_batch_items):
        raise InvalidInput(f"batch_size must be from 1 to {scope.limits.max_batch_items}",
                           field="batch_size")
    if replace:
        await put([], True)
    stored, after = 0, None
    while True:
        rows = await todo(embedder.model, after, batch_size)
        if not rows:
            return stored
        texts = [(row, text) for row in rows if (text := text_of(row)).strip()]
        if texts:
            vectors = await embed(scope, [text for _, text in texts])
            stored += await put([(row, v) for (row, _), v in zip(texts, vectors, strict=True)],
                                False)
        after = cursor(rows[-1])


async def reindex_facts(scope: Scope, store: str, *, batch_size: int, replace: bool) -> int:
    """Embed the store's current facts that lack a vector of the scope's model, in batches
    of ``batch_size`` (each batch its own transaction); with ``replace``, first drop every
    vector of the store. Returns how many vectors were stored."""
    backend, tenant = scope.backend, scope.tenant

    def put(vectors: list[tuple[Fact, Embedding]], drop: bool) -> Awaitable[int]:
        return backend.put_fact_vectors(tenant, store, [(f.fact_id, v) for f, v in vectors],
                                        replace=drop)

    return await _reindex(
        scope, batch_size, replace,
        lambda model, after, limit: backend.facts_to_embed(tenant, store, model, after, limit),
        lambda f: _fact_text(f.key, f.value), lambda f: f.fact_id, put)


# items ---------------------------------------------------------------------------------

async def items_with_vectors(scope: Scope, items: list[NewItem]) -> list[NewItem]:
    """``items``, each with the vector of its text (what it is found by) when the scope
    has an embedder; an item with no text gets none."""
    if scope.embedder is None:
        return items
    texts = [it.text for it in items if it.text.strip()]
    if not texts:
        return items
    vectors = iter(await embed(scope, texts))
    return [it.with_embedding(next(vectors)) if it.text.strip() else it for it in items]


async def reindex_items(scope: Scope, store: str, *, batch_size: int, replace: bool) -> int:
    """Embed the session store's items that lack a vector of the scope's model (those
    appended without an embedder, or restored from an archive), in batches of
    ``batch_size`` (each batch its own transaction), by session id then seq; with
    ``replace``, first drop every item vector of the store. An item with no text gets no
    vector, as on append. Returns how many vectors were stored."""
    backend, tenant = scope.backend, scope.tenant

    def put(vectors: list[tuple[Item, Embedding]], drop: bool) -> Awaitable[int]:
        return backend.put_item_vectors(
            tenant, store, [(it.session_id, it.seq, v) for it, v in vectors], replace=drop)

    return await _reindex(
        scope, batch_size, replace,
        lambda model, after, limit: backend.items_to_embed(tenant, store, model, after, limit),
        lambda it: item_text(it.data), lambda it: (it.session_id, it.seq), put)


async def nearest_items(scope: Scope, query: str, *, stores: Sequence[str] | None,
                        actor_id: str | None, session_id: str | None,
                        limit: int) -> list[ItemHit]:
    """The items whose vectors are nearest the query's, with their similarity."""
    (vector,) = await embed(scope, [query])
    return await scope.backend.nearest_items(scope.tenant, vector, stores=stores,
                                             actor_id=actor_id, session_id=session_id,
                                             limit=limit)
