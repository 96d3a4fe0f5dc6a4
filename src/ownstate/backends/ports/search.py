"""Text search: the one definition of a search term and of relevance every backend shares.

A backend's engine (SQLite FTS5, PostgreSQL full text, a Redis index, plain Python) only
stores and counts the terms made here; none of them parses text itself, so every backend
finds the same documents for the same query.

**Terms.** Text is normalized with NFKC and case folding, and accents are removed (the
text is decomposed and its combining marks dropped, outside the scripts below, where the
marks are letters). A word is a maximal run of letters and digits. Scripts written
without spaces between words (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) have no
words to split on, so a run of them is indexed as its single characters and its
overlapping character pairs; a query run of two or more such characters asks for its
pairs, a single character for itself. That makes any substring of two characters or more
findable, which is the usual way search engines treat these scripts.

**Which terms count.** A query term held by half of the collection's documents or more
has the least idf there is (see below): it says almost nothing about relevance, and
matching on it would make nearly every document a candidate. So such terms are dropped
from a query that has any rarer term; a document matches when it holds at least one of
the terms that remain (all of them, when every one is that common).

**Relevance** is BM25 with ``k1 = 1.2`` and ``b = 0.75`` and the idf of SQLite FTS5
(``log((N - n + 0.5) / (n + 0.5))``, at least ``1e-6``), summed over the distinct query
terms a document holds. ``N`` and the average document length are those of the collection
the engine keeps (a memory store's facts, a tenant's items), ``n`` the documents holding
the term, a document's length its number of terms, summed over the terms that count.
Engines agree on which documents match and, up to those collection statistics, on their
order; equal scores are ordered
by a stable id (a fact's id; an item's store, session and seq).

**Candidates.** An engine need not score every document holding a kept term: it reads
the postings of the kept terms rarest first, as many whole terms as fit in
:data:`CANDIDATE_POSTINGS` (the rarest one always), and orders the documents found by the
sum of the idf of the terms each holds (:func:`candidates`). It scores them exactly in
that order and stops once the next one's best possible score
(:func:`best_possible`: every term it holds, and every term not read, at ``K1 + 1`` times
its idf, more than any document length and count can give) is below the ``limit``-th
score found (:func:`top`). When every kept term was read, that is the reference ranking
exactly; when the rarest terms alone filled the postings, at most :data:`RESCORED`
documents are scored, and the result is the reference ranking of the documents holding
one of the terms read, among the :data:`RESCORED` that hold the most of them by idf. An
engine that finds fewer than ``limit`` hits that way (its filters left too few) reads
more terms, four times the postings each time, until it has ``limit`` hits or has read
every kept term.

What a document's text is: a fact's key and the text of its value (object keys, strings,
and numbers, ``true``, ``false`` and ``null`` as JSON spells them); an item's text is
what a person reads in it and the tool calls it makes (every string of its JSON except
ids, types, roles, signatures and encoded bytes, and every object key inside tool
arguments).

It may touch the model and errors alone: no datastore and no search engine.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from ...errors import InvalidInput, LimitExceeded
from ...model import JSON

__all__ = [
    "CANDIDATE_POSTINGS",
    "K1",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "RESCORED",
    "B",
    "TextQuery",
    "best_possible",
    "bm25",
    "bm25_of",
    "candidates",
    "fact_text",
    "idf",
    "item_text",
    "normalize",
    "query_terms",
    "rank",
    "read_terms",
    "terms",
    "text_query",
    "top",
    "useful_terms",
]

T = TypeVar("T")

K1 = 1.2
B = 0.75
#: Longest query accepted, in characters.
MAX_QUERY_CHARS = 2000
#: Most distinct terms a query may have.
MAX_QUERY_TERMS = 64
#: Most postings a search reads to find its candidates, unless its rarest term has more.
CANDIDATE_POSTINGS = 2000
#: Most candidates scored when the rarest terms alone filled :data:`CANDIDATE_POSTINGS`.
RESCORED = 200
#: Candidates scored at a time.
_CHUNK = 50

_SPACELESS = ("\u0e00-\u0e7f\u0e80-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u309f\u30a0-\u30ff"
              "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f")
_RUN_RE = re.compile(rf"(?:[^\W_]|[{_SPACELESS}])+")
#: ASCII text to its runs split by spaces: letters lowered, digits kept, the rest a space
#: (in ASCII, the runs above are those of letters and digits)
_ASCII_RUNS = str.maketrans({c: (chr(c).lower() if chr(c).isalnum() else " ")
                             for c in range(128)})
_SPACELESS_RE = re.compile(rf"[{_SPACELESS}]+")
_MARK_RE = re.compile(rf"(?<![{_SPACELESS}])[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff"
                      r"\u20d0-\u20ff\ufe20-\ufe2f]+")


class TextQuery(NamedTuple):
    """A validated query: its text as given (what travels to a remote server) and its
    distinct terms, in first-seen order."""

    text: str
    terms: tuple[str, ...]


def normalize(text: str) -> str:
    """NFKC, case folded, without accents."""
    if text.isascii():
        return text.lower()
    folded = unicodedata.normalize("NFKC", text).casefold()
    return unicodedata.normalize("NFC", _MARK_RE.sub("", unicodedata.normalize("NFD", folded)))


def _run_terms(run: str, query: bool) -> Iterator[str]:
    start = 0
    for spaceless in _SPACELESS_RE.finditer(run):
        if spaceless.start() > start:
            yield run[start:spaceless.start()]
        chars = spaceless.group()
        if len(chars) == 1:
            yield chars
        else:
            if not query:
                yield from chars
            yield from (chars[i:i + 2] for i in range(len(chars) - 1))
        start = spaceless.end()
    if start < len(run):
        yield run[start:]


def terms(text: str) -> list[str]:
    """The terms a document's ``text`` is indexed by, in order, repeats included."""
    if text.isascii():
        return text.translate(_ASCII_RUNS).split()
    found: list[str] = []
    for run in _RUN_RE.findall(normalize(text)):
        found.extend(_run_terms(run, False))
    return found


def query_terms(text: str) -> list[str]:
    """The distinct terms a query asks for, in first-seen order."""
    seen: dict[str, None] = {}
    for run in _RUN_RE.findall(normalize(text)):
        for term in _run_terms(run, True):
            seen.setdefault(term, None)
    return list(seen)


def text_query(query: object) -> TextQuery:
    """``query`` checked and split into its terms.

    Raises :class:`~ownstate.errors.InvalidInput` (not a string, or no term in it) and
    :class:`~ownstate.errors.LimitExceeded` (longer than :data:`MAX_QUERY_CHARS`, or more
    than :data:`MAX_QUERY_TERMS` distinct terms).
    """
    if not isinstance(query, str):
        raise InvalidInput("query must be a string", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise LimitExceeded(f"query has {len(query)} characters; at most {MAX_QUERY_CHARS}",
                            field="query", limit=MAX_QUERY_CHARS, actual=len(query))
    found = query_terms(query)
    if not found:
        raise InvalidInput("query must contain at least one word", field="query")
    if len(found) > MAX_QUERY_TERMS:
        raise LimitExceeded(f"query has {len(found)} distinct terms; at most "
                            f"{MAX_QUERY_TERMS}", field="query", limit=MAX_QUERY_TERMS,
                            actual=len(found))
    return TextQuery(query, tuple(found))


def _value_texts(value: JSON) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _value_texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _value_texts(item)
    else:
        yield json.dumps(value)


def fact_text(key: str, value: JSON) -> str:
    """The text a fact is found by: its key and the text of its value."""
    return " ".join((key, *_value_texts(value)))


#: Keys whose strings are machine identifiers or encodings, never read by a person.
_SKIPPED_KEYS = frozenset({
    "id", "item_id", "call_id", "tool_call_id", "tool_use_id", "type", "role", "status",
    "model", "signature", "encrypted_content", "mime_type", "mimeType", "media_type",
    "file_id", "image_url", "file_data", "data", "url", "uri", "file_uri", "source",
    "invocation_id", "author", "branch", "timestamp", "uuid", "parentUuid", "sessionId",
    "session_id", "provider_data", "cache_control", "format", "detail", "index",
})
#: Keys whose value, a JSON object (or its JSON text), holds a tool call's arguments.
_ARGUMENT_KEYS = frozenset({"arguments", "args", "input"})
_LONG_TOKEN_RE = re.compile(r"\S{200,}")


def _item_texts(value: Any, arguments: bool = False) -> Iterator[str]:
    if isinstance(value, str):
        if arguments and value[:1] in "{[":
            try:
                yield from _item_texts(json.loads(value), True)
                return
            except ValueError:
                pass
        yield _LONG_TOKEN_RE.sub(" ", value) if len(value) >= 200 else value
    elif isinstance(value, dict):
        for key, item in value.items():
            if arguments:
                yield str(key)
            if key not in _SKIPPED_KEYS or (arguments and isinstance(item, str)):
                yield from _item_texts(item, arguments or key in _ARGUMENT_KEYS)
    elif isinstance(value, list):
        for item in value:
            yield from _item_texts(item, arguments)
    elif arguments and value is not None and not isinstance(value, bool):
        yield str(value)


def item_text(data: JSON) -> str:
    """The text an item is found by: what a person reads in it, its tool names and its tool
    arguments (long unbroken runs such as encoded bytes are left out)."""
    return " ".join(_item_texts(data))


def idf(df: int, n: int) -> float:
    """FTS5's idf of a term that ``df`` of ``n`` documents hold."""
    return max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)


def bm25(query: Sequence[str], tf: Counter[str], length: int, avg_length: float,
         df: dict[str, int], n: int) -> float:
    """The BM25 score of a document with term counts ``tf`` and ``length`` terms."""
    norm = K1 * (1 - B + B * length / avg_length) if avg_length > 0 else K1
    score = 0.0
    for term in query:
        f = tf.get(term, 0)
        if f:
            score += idf(df.get(term, 0), n) * f * (K1 + 1) / (f + norm)
    return score


def useful_terms(query: Sequence[str], df: Mapping[str, int], n: int) -> list[str]:
    """The query terms that count: those held by fewer than half of the ``n`` documents
    (the others have the least idf, ``1e-6``), or every term when none is that rare."""
    rare = [t for t in query if 2 * df.get(t, 0) < n]
    return rare or list(query)


def rank(query: Sequence[str], collection: Iterable[tuple[T, Sequence[str]]],
         wanted: Callable[[T], bool]) -> list[tuple[T, float]]:
    """The reference ranking: ``collection`` is every document of the collection as
    (document, its terms); the documents ``wanted`` keeps that hold a query term, with
    their scores, best first (ties in the order given)."""
    docs = [(doc, Counter(found), len(found)) for doc, found in collection]
    n = len(docs)
    avg_length = sum(d[2] for d in docs) / n if n else 0.0
    df = Counter(term for _, tf, _ in docs for term in query if term in tf)
    query = useful_terms(query, df, n)
    hits = [(doc, bm25(query, tf, length, avg_length, df, n)) for doc, tf, length in docs
            if any(term in tf for term in query) and wanted(doc)]
    hits.sort(key=lambda hit: -hit[1])
    return hits


def read_terms(kept: Sequence[str], df: Mapping[str, int],
               budget: int = CANDIDATE_POSTINGS) -> tuple[list[str], list[str]]:
    """The kept terms whose postings a search reads, rarest first: as many whole terms as
    fit in ``budget`` postings, the rarest always; and the terms left unread."""
    order = sorted(kept, key=lambda t: (df.get(t, 0), t))
    read, total = 0, 0
    for term in order:
        if read and total + df.get(term, 0) > budget:
            break
        read += 1
        total += df.get(term, 0)
    return order[:read], order[read:]


def candidates(postings: Mapping[str, Iterable[int]],
               weights: Mapping[str, float]) -> list[tuple[float, int]]:
    """The documents of ``postings`` (each term's document ids) as (the sum of the
    ``weights`` of the terms each holds, its id), most first, ties by id."""
    if len(postings) == 1:
        ((term, ids),) = postings.items()
        return [(weights[term], i) for i in sorted(ids)]
    held: dict[int, float] = {}
    for term, ids in postings.items():
        w = weights[term]
        for i in ids:
            held[i] = held.get(i, 0.0) + w
    # ids in order, then a stable sort by weight, most first: both sorts compare plain
    # numbers, with no Python key function (about half the time of sorting pairs)
    order = sorted(held)
    order.sort(key=held.__getitem__, reverse=True)
    return [(held[i], i) for i in order]


def best_possible(held_idf: float, unread_idf: float) -> float:
    """The most a document can score that holds terms of ``held_idf`` in all and perhaps
    some unread terms of ``unread_idf`` in all: each term's share of a BM25 score is below
    ``K1 + 1`` times its idf."""
    return (K1 + 1) * (held_idf + unread_idf)


def top(found: Sequence[tuple[float, int]], unread_idf: float, limit: int,
        score: Callable[[list[int]], list[tuple[T, float, Any]]],
        cap: int | None) -> list[tuple[T, float]]:
    """The ``limit`` best of the candidates ``found`` (from :func:`candidates`), scored by
    ``score`` a chunk at a time: it returns, for the ids given, each document that passes
    the search's filters as (document, score, tie key). Scoring stops when the next
    candidate cannot beat the ``limit``-th hit, or, when ``cap`` is given, after ``cap``
    candidates once ``limit`` hits are found. Hits are ordered by score, best first, then
    by tie key."""
    hits: list[tuple[T, float, Any]] = []
    at = 0
    while at < len(found):
        if len(hits) >= limit and (
                best_possible(found[at][0], unread_idf) < hits[-1][1]
                or (cap is not None and at >= cap)):
            break
        hits.extend(score([i for _, i in found[at:at + _CHUNK]]))
        at += _CHUNK
        hits.sort(key=lambda h: (-h[1], h[2]))
        del hits[limit:]
    return [(doc, s) for doc, s, _ in hits]


def bm25_of(kept: Sequence[str], weights: Mapping[str, float], n: int,
            avg_length: float) -> Callable[[Mapping[str, int], int], float]:
    """The BM25 score of a document with term counts (any mapping: a ``Counter``, or a
    plain dict of the kept terms it holds) and length, for the kept terms with their idf
    ``weights`` (:func:`bm25` with the idf computed once)."""
    def score(tf: Mapping[str, int], length: int) -> float:
        norm = K1 * (1 - B + B * length / avg_length) if avg_length > 0 else K1
        total = 0.0
        for term in kept:
            f = tf.get(term, 0)
            if f:
                total += weights[term] * f * (K1 + 1) / (f + norm)
        return total
    return score
