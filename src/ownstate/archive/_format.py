"""The archive format, version 1: one canonical JSON line per row, and the manifest.

Written for people in ``docs/archive.md``. Kept here: how a transfer row
(:mod:`ownstate.backends.ports.transfer`) becomes a line and back. A line is a JSON object
with the row's fields and ``tenant``, keys sorted, no spaces, UTF-8 (not ASCII-escaped):

- times: UTC, fixed width, microseconds, ``Z`` (``2026-12-01T23:59:58.123456Z``)
- JSON values (item data, fact values, awaiting payloads, effect results, checkpoint
  metadata): compact, with object keys in the order they were stored
- labels: an object with sorted keys
- bytes: standard base64
- floats written as floats (``0.0``), integers as integers, booleans as booleans

Decoding holds a line to the same rules the public API holds input to (stored JSON
within the depth and integer bounds), and names the part and line of what it refuses.

It may touch the transfer port's row shapes (``ownstate.backends.ports.transfer``), ids,
JSON decoding (``ownstate._jsontext``), the error tree and the limits; it never calls a
backend.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import UTC, datetime
from typing import Any

from .._ids import format_time
from .._jsontext import decode_json
from ..backends.ports.transfer import PART_FIELDS, WRITE_FIELDS, FieldKind, Row
from ..errors import InvalidInput
from ..limits import MAX_JSON_DEPTH, encode_json

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "MANIFEST_NAME", "decode_line", "encode_line",
           "part_file"]

FORMAT_NAME = "ownstate-archive"
#: Raised only for a change an older reader could not read correctly; a new part or a new
#: field of a row is a new key, which older readers of this version skip.
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"

_canonical = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True,
                              separators=(",", ":")).encode
_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False,
                            separators=(",", ":")).encode
_TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


def part_file(part: str) -> str:
    """The tar member holding ``part``."""
    return f"parts/{part}.jsonl"


def _json_text(text: str) -> str:
    """Stored JSON text as the archive spells it: compact, keys in their order."""
    return str(_compact(decode_json(text)))


def _encode_value(kind: FieldKind, value: Any, as_stored: bool = False) -> str:
    if value is None:
        return "null"
    if kind == "json":
        return str(value) if as_stored else _json_text(value)
    if kind == "time":
        return f'"{format_time(value)}"'
    if kind == "bytes":
        return f'"{base64.b64encode(value).decode()}"'
    if kind == "float":
        return str(_canonical(float(value)))
    if kind == "int":
        return str(int(value))
    if kind == "bool":
        return "true" if value else "false"
    if kind == "writes":
        return "[" + ",".join(_encode_object(WRITE_FIELDS, w, None) for w in value) + "]"
    return str(_canonical(value))  # text, labels


def _encode_object(fields: dict[str, FieldKind], row: Row, tenant: str | None,
                   as_stored: bool = False) -> str:
    names = sorted([*fields, "tenant"] if tenant is not None else fields)
    parts = []
    for name in names:
        value = tenant if name == "tenant" else row[name]
        kind: FieldKind = "text" if name == "tenant" else fields[name]
        parts.append(f'"{name}":{_encode_value(kind, value, as_stored)}')
    return "{" + ",".join(parts) + "}"


def encode_line(part: str, tenant: str, row: Row, *, as_stored: bool = False) -> bytes:
    """The archive line of one row, with its newline. With ``as_stored``, JSON values go
    in as the backend stores their text, not re-encoded: what two backends are compared
    by (both hold the text the public API encoded), and several times faster."""
    return (_encode_object(PART_FIELDS[part], row, tenant, as_stored) + "\n").encode()


# decoding ------------------------------------------------------------------------------


class _Bad(Exception):
    pass


def _decode_value(kind: FieldKind, value: Any, name: str, checked: bool = False) -> Any:
    if value is None:
        if kind in ("bytes", "writes", "labels"):
            raise _Bad(f"{name} may not be null")
        return None
    if kind == "text":
        if not isinstance(value, str):
            raise _Bad(f"{name} must be a string")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"{name} must be an integer")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad(f"{name} must be a number")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise _Bad(f"{name} must be true or false")
        return value
    if kind == "time":
        if not isinstance(value, str) or not _TIME_RE.fullmatch(value):
            raise _Bad(f"{name} must be a UTC time like 2026-01-31T12:00:00.000000Z")
        return datetime.fromisoformat(value[:-1]).replace(tzinfo=UTC)
    if kind == "json":
        # bounds (depth, integer range) checked once, on the pass that checks the archive
        return str(_compact(value)) if checked else encode_json(value, field=name)
    if kind == "labels":
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise _Bad(f"{name} must be an object of strings")
        return dict(value)
    if kind == "bytes":
        if not isinstance(value, str):
            raise _Bad(f"{name} must be base64 text")
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise _Bad(f"{name} is not base64: {exc}") from None
    if not isinstance(value, list):  # writes
        raise _Bad(f"{name} must be a list")
    return [_decode_object(WRITE_FIELDS, w, f"{name}[{i}]") for i, w in enumerate(value)]


def _decode_object(fields: dict[str, FieldKind], obj: Any, where: str,
                   checked: bool = False) -> Row:
    if not isinstance(obj, dict):
        raise _Bad(f"{where} must be an object")
    row: Row = {}
    for name, kind in fields.items():
        if name not in obj:
            raise _Bad(f"{where} has no {name}")
        row[name] = _decode_value(kind, obj[name], name, checked)
    return row  # fields this version does not know are left out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def decode_line(part: str, line: bytes, number: int, *,
                checked: bool = False) -> tuple[str, Row]:
    """The tenant and row a line of ``part`` holds (line ``number`` counts from 1).
    ``checked`` says the line was decoded before, bounds included (as an import's first
    pass does), so they are not walked again.

    Raises :class:`~ownstate.errors.InvalidInput` naming the part and line."""
    where = f"{part_file(part)} line {number}"
    try:
        try:
            obj = json.loads(line, parse_constant=_no_constant)
        except ValueError as exc:
            raise _Bad(f"not JSON ({exc})") from None
        tenant = obj.get("tenant") if isinstance(obj, dict) else None
        if not isinstance(tenant, str):
            raise _Bad("the row has no tenant")
        return tenant, _decode_object(PART_FIELDS[part], obj, "the row", checked)
    except _Bad as exc:
        raise InvalidInput(f"{where}: {exc}", field="archive") from None
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}", field="archive") from None
    except RecursionError:
        raise InvalidInput(f"{where}: nests deeper than {MAX_JSON_DEPTH} levels",
                           field="archive") from None
