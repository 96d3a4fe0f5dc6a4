"""The ``terms`` tsvector of an item in PostgreSQL's binary wire form, for ``COPY``.

``search.py`` spells a document's terms as ``tsvector`` text, which the server parses;
a restore writes a great many of them at once, in binary ``COPY``, and spells the same
value in the form ``tsvector_recv`` reads: the number of lexemes (int32), then for each
its UTF-8 bytes ending in NUL, its number of positions (uint16) and the positions
(uint16, weight D, strictly increasing). psycopg has no dumper for that type; the column
is sent as ``bytea``, whose binary form is the bytes as they are, and the server reads
them with the column's own type.

The value stored is the one the text gives: the same lexemes (a term longer than a
lexeme may be stored as its hash, and a hash that equals a stored term shares its
lexeme), the same first positions of each, and a position past the largest a
``tsvector`` holds kept once, as the text parser keeps it (it drops repeats). The
server sorts the lexemes itself.

An append sends its items' terms in the same form, as one ``tsvector[]`` parameter made
here whole in ``array_recv``'s form (``BinaryVectors`` in ``_arrays``), and their numbers of
terms as an ``int4[]`` made the same way: the server reads the terms with
``tsvector_recv`` instead of parsing their text (``tsvector_in`` checks the class of every
character, which cost the server more than anything else an indexed append does but the
term counts), and the client joins bytes instead of dumping a list element by element.

It may touch the search part beside it (``search``) alone: no connection, no driver.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain

from .search import (
    LONGEST_LEXEME,
    MAX_POSITION,
    MAX_POSITIONS,
    grouped_positions,
    lexeme,
    scope_prefix,
    term_positions,
)

__all__ = ["item_terms_binary", "item_vector_binary", "items_terms_binary"]

_COUNT = struct.Struct(">i")
#: ``array_recv``'s header of a one-dimensional array without NULLs (dimensions, has
#: NULLs, element type, length, lower bound), and of an empty one
_ARRAY = struct.Struct(">iiIii")
_EMPTY_ARRAY = struct.Struct(">iiI")
#: PostgreSQL's type ids (fixed in its catalog) of ``tsvector`` and ``int4``
_TSVECTOR_OID = 3614
_INT4_OID = 23
#: lexemes (with their NUL) of the terms seen, per scope prefix: terms repeat across the
#: items of a restore; dropped when it grows past _CACHED terms
_LEXEMES: dict[str, dict[str, bytes]] = {}
_CACHED = 1 << 16
_PREFIXES: dict[str, str] = {}
#: a term shorter than this many characters is a lexeme as it is (at most 4 bytes each)
_SHORT = LONGEST_LEXEME
#: the positions of a term seen once, by position
_ONCE = [struct.pack(">HH", 1, n) for n in range(MAX_POSITION + 1)]


def _capped(at: list[int]) -> list[int]:
    """The first positions a lexeme keeps, past-the-end ones kept once."""
    at = at[:MAX_POSITIONS]
    if at[-1] <= MAX_POSITION:
        return at
    kept = [n for n in at if n < MAX_POSITION]
    kept.append(MAX_POSITION)
    return kept


def vector_binary(prefix: str, found: Sequence[str],
                  seen: Counter[bytes] | None = None) -> bytes:
    """The binary ``tsvector`` of the terms ``found``, in order, in scope ``prefix``; its
    lexemes (each with its NUL) are counted into ``seen``, when given."""
    made = _vector_binary(prefix, found)
    if seen is not None:
        # a lexeme and its positions alternate after the count
        seen.update(made[1::2])
    return b"".join(made)


def _vector_binary(prefix: str, found: Sequence[str]) -> list[bytes]:
    return _vector_and_terms(prefix, found)[0]


def _vector_and_terms(prefix: str, found: Sequence[str]) -> tuple[list[bytes], Iterable[str]]:
    """The parts of the binary ``tsvector`` of ``found``, and its distinct lexemes without
    the prefix (a term, or the hash a long one is stored as)."""
    lexemes = _LEXEMES.get(prefix)
    if lexemes is None or len(lexemes) > _CACHED:
        lexemes = _LEXEMES[prefix] = {}
    if len(found) > MAX_POSITION:
        return _exact_and_terms(lexemes, prefix, found)
    # the usual document: no position to cap, no term long enough to be hashed (so no
    # two terms share a lexeme); a term seen once keeps its position as an int
    positions = grouped_positions(found)
    out = [_COUNT.pack(len(positions))]
    add = out.append
    for term, at in positions.items():
        lex = lexemes.get(term)
        if lex is None:
            if len(term) * 4 > _SHORT:  # it may be hashed (long terms are not kept)
                return _exact_and_terms(lexemes, prefix, found)
            lex = lexemes[term] = (prefix + term).encode() + b"\x00"
        add(lex)
        if at.__class__ is int:
            add(_ONCE[at])
        else:
            del at[MAX_POSITIONS:]
            add(struct.pack(f">{len(at) + 1}H", len(at), *at))
    return out, positions.keys()


def _exact_and_terms(lexemes: dict[str, bytes], prefix: str, found: Sequence[str]
                     ) -> tuple[list[bytes], Iterable[str]]:
    out = _exact(lexemes, prefix, found)
    cut = len(prefix.encode())
    return out, [lex[cut:-1].decode() for lex in out[1::2]]


def _exact(lexemes: dict[str, bytes], prefix: str, found: Sequence[str]) -> list[bytes]:
    entries: dict[bytes, list[int]] = {}
    for term, at in term_positions(found).items():
        lex = lexemes.get(term)
        if lex is None:
            lex = lexeme(prefix, term).encode() + b"\x00"
            if len(term) * 4 <= _SHORT:
                lexemes[term] = lex
        held = entries.get(lex)
        entries[lex] = at if held is None else sorted(held + at)
    out = [_COUNT.pack(len(entries))]
    for lex, at in entries.items():
        if len(at) > MAX_POSITIONS or at[-1] > MAX_POSITION:
            at = _capped(at)
        out.append(lex)
        out.append(struct.pack(f">{len(at) + 1}H", len(at), *at))
    return out


def item_vector_binary(tenant: str, found: Sequence[str],
                       seen: Counter[bytes] | None = None) -> tuple[bytes, int]:
    """An item's ``terms`` (binary) and ``terms_len`` from its terms, as ``item_vector``
    gives them in text; its lexemes are counted into ``seen`` (see ``vector_binary``)."""
    prefix = _PREFIXES.get(tenant)
    if prefix is None:
        if len(_PREFIXES) > _CACHED:
            _PREFIXES.clear()
        prefix = _PREFIXES[tenant] = scope_prefix(tenant)
    return vector_binary(prefix, found, seen), len(found)


def item_terms_binary(prefix: str, found: Sequence[str], seen: Counter[str]) -> bytes:
    """The binary ``tsvector`` of an item's terms ``found`` in scope ``prefix``; each of its
    distinct lexemes, without the prefix, is counted into ``seen`` (what an append logs)."""
    made, distinct = _vector_and_terms(prefix, found)
    seen.update(distinct)
    return b"".join(made)



def items_terms_binary(prefix: str, found: Sequence[Sequence[str]], seen: Counter[str]
                       ) -> tuple[bytes, bytes]:
    """The binary ``tsvector[]`` of the items' terms ``found`` (one list per item) in scope
    ``prefix``, and the binary ``int4[]`` of their numbers of terms (``terms_len``), each
    in ``array_recv``'s form; each item's distinct lexemes, without the prefix, are
    counted into ``seen`` (what an append logs)."""
    if not found:
        empty = _EMPTY_ARRAY.pack(0, 0, _TSVECTOR_OID)
        return empty, _EMPTY_ARRAY.pack(0, 0, _INT4_OID)
    vectors = [item_terms_binary(prefix, f, seen) for f in found]
    n = len(found)
    sizes = map(_COUNT.pack, map(len, vectors))
    terms = b"".join((_ARRAY.pack(1, 0, _TSVECTOR_OID, n, 1),
                      *chain.from_iterable(zip(sizes, vectors, strict=True))))
    lens = struct.pack(f">iiIii{2 * n}i", 1, 0, _INT4_OID, n, 1,
                       *chain.from_iterable((4, len(f)) for f in found))
    return terms, lens
