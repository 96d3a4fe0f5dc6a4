"""Array parameters in their binary form (``array_recv``'s), which the backend's
connections send as they are (``_core``): one-dimensional ``text[]``, ``bigint[]`` and
``bytea[]`` built here, for the statements that send a batch's columns as arrays (an
append's items, a step's pending writes), and the ``tsvector[]`` and ``int4[]`` of item
search terms (built by ``_tsvector``).

psycopg dumps a list parameter with a lookup of its elements' dumper for each list,
about 5 us a list whatever its length: for the nine short arrays of a put with items,
most of that statement's conversion. Built here in one pass each, a short list costs
about a third of that; past ``SHORT`` elements psycopg's compiled loop is the faster,
and the list is left to it.

The wire form: dimensions (1, or 0 for an empty array), whether any element is NULL, the
element type's id, then the length and lower bound (1), then each element as its length
(-1 for NULL) and bytes: text as UTF-8, the backend's connections' ``client_encoding``,
a bigint as eight bytes big-endian. A list these cannot send as it is (a string with a
NUL or a lone surrogate, an integer beyond bigint) is returned unchanged, for psycopg to
refuse as it always has.

It may touch nothing of ownstate's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["BinaryBigints", "BinaryByteas", "BinaryInts", "BinaryTexts", "BinaryVectors",
           "bigints", "byteas", "texts"]

#: PostgreSQL's type ids (fixed in its catalog)
TEXT_OID, BIGINT_OID, BYTEA_OID = 25, 20, 17
_HEADER = struct.Struct(">iiIii")
_EMPTY = struct.Struct(">iiI")
_LENGTH = struct.Struct(">i").pack
_NULL = _LENGTH(-1)
_BIGINT = struct.Struct(">iq").pack  # an element: its length (8) and value
#: the longest list built here (measured: psycopg's own dumping is faster from about 16
#: to 32 elements on)
SHORT = 16


class BinaryVectors(bytes):
    """A ``tsvector[]`` in its binary form (``_tsvector``)."""

    __slots__ = ()


class BinaryInts(bytes):
    """An ``int4[]`` in its binary form (``_tsvector``)."""

    __slots__ = ()


class BinaryTexts(bytes):
    """A ``text[]`` in its binary form."""

    __slots__ = ()


class BinaryBigints(bytes):
    """A ``bigint[]`` in its binary form."""

    __slots__ = ()


class BinaryByteas(bytes):
    """A ``bytea[]`` in its binary form."""

    __slots__ = ()


def _header(oid: int, values: Sequence[object], nulls: bool) -> bytes:
    if not values:
        return _EMPTY.pack(0, 0, oid)
    return _HEADER.pack(1, 1 if nulls else 0, oid, len(values), 1)


def _elements(raw: Sequence[bytes | None]) -> list[bytes]:
    return [_NULL if b is None else _LENGTH(len(b)) + b for b in raw]


def texts(values: list[str | None]) -> BinaryTexts | list[str | None]:
    """``values`` (strings or None) as a binary ``text[]``."""
    if len(values) > SHORT:
        return values
    try:
        raw = [None if v is None else v.encode() for v in values]
    except UnicodeEncodeError:
        return values
    if any(b is not None and b"\x00" in b for b in raw):
        return values
    nulls = None in raw
    return BinaryTexts(b"".join((_header(TEXT_OID, raw, nulls), *_elements(raw))))


def byteas(values: list[bytes | None]) -> BinaryByteas | list[bytes | None]:
    """``values`` (bytes-like or None) as a binary ``bytea[]``."""
    if len(values) > SHORT:
        return values
    raw = [None if v is None else bytes(v) for v in values]
    nulls = None in raw
    return BinaryByteas(b"".join((_header(BYTEA_OID, raw, nulls), *_elements(raw))))


def bigints(values: list[int | None]) -> BinaryBigints | list[int | None]:
    """``values`` (integers or None) as a binary ``bigint[]``."""
    if len(values) > SHORT:
        return values
    nulls = None in values
    try:
        return BinaryBigints(b"".join((_header(BIGINT_OID, values, nulls), *(
            _NULL if v is None else _BIGINT(8, v) for v in values))))
    except struct.error:
        return values
