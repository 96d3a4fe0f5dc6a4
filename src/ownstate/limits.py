"""Size bounds and input validation shared by every backend.

The bounds are documented in ``docs/limits.md`` and can be changed per client with
``ownstate.connect(url, limits=Limits(...))``. Validation happens before any backend is
touched, so a refused request never changes stored state.

The rules for names and ids (the ``*_RE`` patterns, :data:`CONTROL_CHARS` and the
``MAX_*_CHARS`` bounds) are defined here and only here: the library checks its arguments
with them and the HTTP server builds its path, query and body constraints from them
(:func:`anchored`, :func:`printable`), so that whatever the library accepts the server
accepts too.

It may touch only the error tree (``ownstate.errors``) and, where it is installed,
orjson (the ``speedups`` extra), never a backend.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput, LimitExceeded

__all__ = ["Limits"]

#: The characters no text name or id may hold (ASCII control characters), as the body of
#: a regular-expression character class.
CONTROL_CHARS = r"\x00-\x1f\x7f"
CONTROL_RE = re.compile(f"[{CONTROL_CHARS}]")

#: Session store and memory store names.
MAX_STORE_NAME_CHARS = 55
STORE_NAME_RE = re.compile(rf"[a-z0-9_-]{{3,{MAX_STORE_NAME_CHARS}}}")
#: Chosen session ids and run ids (generated ones, ``ses_...`` and ``run_...``, match too).
MAX_SESSION_ID_CHARS = 128
SESSION_ID_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:@-]{{0,{MAX_SESSION_ID_CHARS - 1}}}")
FORMAT_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
LABEL_KEY_RE = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
#: Run frameworks (``langgraph``, ``openai.agents``, ...).
FRAMEWORK_RE = re.compile(r"[a-z0-9_.-]{1,64}")
#: Checkpoint payload type tags: printable ASCII without spaces.
TYPE_TAG_RE = re.compile(r"[!-~]{1,64}")
#: Principals (who an API key acts for, who holds a grant).
PRINCIPAL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,127}")
#: API key ids: 16 lowercase hex digits, made with the key.
KEY_ID_RE = re.compile(r"[0-9a-f]{16}")
#: The SHA-256 digest of a key's secret, as a caller that keeps the secret sends it.
SECRET_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
#: Free-text names of printable characters: fact subjects and keys, thread keys, lease
#: owners, tool call ids, checkpoint ids and namespaces, asset ids.
MAX_NAME_CHARS = 256
#: Subjects under this prefix are ownstate's own bookkeeping (distillation's watermarks,
#: ``ownstate:distill``): memory search and the subject listing leave them out unless the
#: caller names such a subject.
RESERVED_SUBJECT_PREFIX = "ownstate:"
#: The longest id a lookup may name (one path segment of the HTTP API); an id longer than
#: any ownstate makes or accepts simply names nothing.
MAX_LOOKUP_CHARS = 1024


def reserved_subject(subject: str) -> bool:
    """Whether ``subject`` is one of ownstate's own (see :data:`RESERVED_SUBJECT_PREFIX`)."""
    return subject.startswith(RESERVED_SUBJECT_PREFIX)


def anchored(pattern: re.Pattern[str]) -> str:
    """``pattern`` as a whole-string pattern (``^...$``), as OpenAPI and pydantic take it."""
    return f"^{pattern.pattern}$"


def printable(longest: int, *, least: int = 1) -> str:
    """A whole-string pattern of ``least``..``longest`` characters, none a control one."""
    return f"^[^{CONTROL_CHARS}]{{{least},{longest}}}$"


#: A subject or key: printable, and not only whitespace (bound its length separately).
NAME_PATTERN = rf"^[^{CONTROL_CHARS}]*[^\s{CONTROL_CHARS}][^{CONTROL_CHARS}]*$"


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one call may store or ask for.

    Sizes are of the item's JSON encoding in UTF-8 bytes.
    """

    max_item_bytes: int = 1024 * 1024
    max_batch_items: int = 1000
    max_batch_bytes: int = 16 * 1024 * 1024
    default_page_size: int = 100
    max_page_size: int = 1000
    max_metadata_labels: int = 32
    max_label_value_chars: int = 256
    max_actor_id_chars: int = 256
    max_idempotency_key_chars: int = 256
    max_checkpoint_bytes: int = 64 * 1024 * 1024
    max_asset_bytes: int = 64 * 1024 * 1024
    max_page_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"Limits.{name} must be a positive integer", field=name)
        if self.default_page_size > self.max_page_size:
            raise InvalidInput("Limits.default_page_size must not exceed max_page_size",
                               field="default_page_size")
        if self.max_item_bytes > self.max_batch_bytes:
            raise InvalidInput("Limits.max_item_bytes must not exceed max_batch_bytes",
                               field="max_item_bytes")

    def keyset_size(self, limit: int | None) -> int:
        """How many records a keyset listing reads: ``limit``, else ``default_page_size``.

        A keyset reader asks for one more than a page to learn whether another follows,
        so ``limit`` runs to ``max_page_size + 1``. Raises :class:`InvalidInput` (not an
        integer) and :class:`LimitExceeded` (out of range).
        """
        if limit is None:
            return self.default_page_size
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidInput("limit must be an integer", field="limit")
        most = self.max_page_size + 1
        if not 1 <= limit <= most:
            raise LimitExceeded(f"limit must be between 1 and {most}", field="limit",
                                limit=most, actual=limit)
        return limit

    def page_size(self, page_size: int | None, field: str = "page_size") -> int:
        """The page size to use, or :class:`InvalidInput` if out of ``1..max_page_size``;
        ``field`` names the argument it came as (``limit`` for a search)."""
        if page_size is None:
            return self.default_page_size
        if isinstance(page_size, bool) or not isinstance(page_size, int):
            raise InvalidInput(f"{field} must be an integer", field=field)
        if not 1 <= page_size <= self.max_page_size:
            raise LimitExceeded(
                f"{field} must be between 1 and {self.max_page_size}",
                field=field,
                limit=self.max_page_size,
                actual=page_size,
            )
        return page_size

    def metadata(self, metadata: Mapping[str, str] | None) -> dict[str, str]:
        """A validated copy of session metadata labels (string keys and string values)."""
        if metadata is None:
            return {}
        if not isinstance(metadata, Mapping):
            raise InvalidInput("metadata must be a mapping of strings", field="metadata")
        if len(metadata) > self.max_metadata_labels:
            raise LimitExceeded.too_many("metadata labels", self.max_metadata_labels,
                                         len(metadata), field="metadata")
        labels: dict[str, str] = {}
        for key, value in metadata.items():
            if not isinstance(key, str) or not LABEL_KEY_RE.fullmatch(key):
                raise InvalidInput(
                    f"metadata label {key!r} must be 1-64 chars of [A-Za-z0-9_.:/-]",
                    field="metadata",
                )
            if not isinstance(value, str) or not _encodable(value):
                raise InvalidInput(f"metadata label {key!r} must be UTF-8 text",
                                   field="metadata")
            if len(value) > self.max_label_value_chars:
                raise LimitExceeded.too_long(f"metadata label {key!r}",
                                             self.max_label_value_chars, len(value),
                                             field="metadata")
            labels[key] = value
        return labels

    def actor_id(self, actor_id: str) -> str:
        if not isinstance(actor_id, str) or not actor_id.strip():
            raise InvalidInput("actor_id is required and must be a non-empty string",
                               field="actor_id")
        if len(actor_id) > self.max_actor_id_chars:
            raise LimitExceeded.too_long("actor_id", self.max_actor_id_chars, len(actor_id),
                                         field="actor_id")
        if CONTROL_RE.search(actor_id) or not _encodable(actor_id):
            raise InvalidInput("actor_id must be printable UTF-8 text", field="actor_id")
        return actor_id

    def idempotency_key(self, key: str | None) -> str | None:
        if key is None:
            return None
        if not isinstance(key, str) or not key or CONTROL_RE.search(key) or not _encodable(key):
            raise InvalidInput("idempotency_key must be non-empty printable UTF-8 text",
                               field="idempotency_key")
        if len(key) > self.max_idempotency_key_chars:
            raise LimitExceeded.too_long("idempotency_key", self.max_idempotency_key_chars,
                                         len(key), field="idempotency_key")
        return key

    def encode_items(self, items: Sequence[Any]) -> list[str]:
        """The JSON text of each item, after checking shape and size bounds."""
        return self._encode_items(items, None)

    def encode_items_copied(self, items: Sequence[Any]) -> tuple[list[str], list[Any]]:
        """As :meth:`encode_items`, and with each item's text a copy of the item as
        decoding that text makes it (new dicts and lists; the immutable values within
        shared), or ``None`` where the item holds anything but the exact JSON types (a
        tuple, a subclass): whoever needs that one's value decodes its text."""
        copies: list[Any] = []
        return self._encode_items(items, copies), copies

    def _encode_items(self, items: Sequence[Any], copies: list[Any] | None) -> list[str]:
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise InvalidInput("items must be a list of JSON objects", field="items")
        if not items:
            raise InvalidInput("items must not be empty", field="items")
        if len(items) > self.max_batch_items:
            raise LimitExceeded.too_many("items per append", self.max_batch_items, len(items),
                                         field="items")
        encoded: list[str] = []
        total = 0
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise InvalidInput(
                    f"item {index} must be a JSON object (dict), not {type(item).__name__}",
                    field="items",
                    index=index,
                )
            plain = _plain_copy(item) if type(item) is dict else None
            raw = None
            if plain is not None and not plain[1] and _fast_dumps is not None:
                try:
                    raw = _fast_dumps(item)
                except _FastRefused:  # a lone surrogate: refused below, in our words
                    raw = None
            if raw is not None:
                size = len(raw)
                text = raw.decode()
            else:
                text = _encoded(item, "items", index)
                if plain is None:
                    _check_shape(item, "items", index)
                size = _item_size(text, index)
            if size > self.max_item_bytes:
                raise LimitExceeded.too_big(f"item {index}", size, self.max_item_bytes,
                                            field="items", index=index)
            if copies is not None:
                copies.append(None if plain is None else plain[0])
            total += size
            encoded.append(text)
        if total > self.max_batch_bytes:
            raise LimitExceeded.too_big("the batch", total, self.max_batch_bytes, field="items")
        return encoded


def _item_size(text: str, index: int) -> int:
    """The size of item ``index``'s ``text`` in UTF-8 bytes; :class:`InvalidInput` for a
    lone surrogate in it."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"item {index} holds text that is not valid Unicode (a lone surrogate)",
            field="items", index=index) from exc


def utf8_size(text: str, *, field: str) -> int:
    """The size of ``text`` in UTF-8 bytes; :class:`InvalidInput` for text no datastore
    can store (a lone surrogate, which JSON's ``\\ud800`` escapes can spell)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} holds text that is not valid Unicode (a lone surrogate)",
                           field=field) from exc


def bytes_copy(value: object, limit: int, *, field: str) -> bytes:
    """A private ``bytes`` copy of a bytes-like ``value`` (``bytes`` itself, being
    immutable, as it is); :class:`InvalidInput` for anything else,
    :class:`LimitExceeded` for more than ``limit`` bytes."""
    if isinstance(value, memoryview):
        size = value.nbytes
    elif isinstance(value, (bytes, bytearray)):
        size = len(value)
    else:
        raise InvalidInput(f"{field} must be bytes (or bytearray or memoryview), "
                           f"not {type(value).__name__}", field=field)
    if size > limit:
        raise LimitExceeded.too_big(field, size, limit, field=field)
    return value if type(value) is bytes else bytes(value)


def _encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogates), so every datastore takes it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


_CONTAINERS = (dict, list, tuple)
def _compact_encoder() -> Callable[[object], str]:
    """Compact JSON encoding, refusing NaN, Infinity and anything JSON has no type for.

    Where the C encoder is there it is called directly, as ``JSONEncoder.encode`` would
    call it but without building it anew for every value (a quarter of the cost of a
    500-byte item). It keeps no record of the containers it is inside: a value that
    contains itself fails by exceeding the recursion limit, as a RecursionError.
    """
    encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                               default=_refuse)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    chunks = make(None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False,
                  False)
    join = "".join

    def encode(value: object) -> str:
        return join(chunks(value, 0))

    return encode


_encode = _compact_encoder()


#: How deeply a stored JSON value may nest (objects and arrays): deep enough for any
#: message a model or framework makes, shallow enough for every JSON library to read back.
MAX_JSON_DEPTH = 128
#: The range of an integer in stored JSON and of every stored counter: what a signed 64-bit
#: column holds, and so what every datastore (and most JSON libraries) read back exactly.
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1


def _shape_problem(value: object) -> str | None:
    """What keeps ``value`` from being stored as it is: an object key that is not a string
    (JSON would rewrite it), nesting deeper than :data:`MAX_JSON_DEPTH`, or an integer
    outside the signed 64-bit range; else None.

    Only called once ``value`` has been encoded, so it holds no cycle.
    """
    if not isinstance(value, _CONTAINERS):
        in_range = not isinstance(value, int) or MIN_INT64 <= value <= MAX_INT64
        return None if in_range else _INT_PROBLEM
    stack: list[tuple[dict[Any, Any] | list[Any] | tuple[Any, ...], int]] = [(value, 1)]
    push, pop = stack.append, stack.pop
    while stack:
        node, depth = pop()
        if depth > MAX_JSON_DEPTH:
            return f"nests deeper than {MAX_JSON_DEPTH} levels"
        children: Iterable[Any] = node
        if isinstance(node, dict):
            for key in node:
                if not isinstance(key, str):
                    return "has an object key that is not a string"
            children = node.values()
        for child in children:
            kind = type(child)  # the exact JSON types first: most values are one
            if kind is str or kind is float or kind is bool or child is None:
                continue
            if kind is int:
                if not MIN_INT64 <= child <= MAX_INT64:
                    return _INT_PROBLEM
            elif isinstance(child, _CONTAINERS):
                push((child, depth + 1))
            elif isinstance(child, int) and not MIN_INT64 <= child <= MAX_INT64:
                return _INT_PROBLEM
    return None


_INT_PROBLEM = "holds an integer outside the signed 64-bit range"


def encode_json(value: object, *, field: str, index: int | None = None) -> str:
    """Compact JSON text of ``value``; :class:`InvalidInput` if JSON cannot represent it.

    Object keys must be strings: JSON would silently turn ``{1: "a"}`` into ``{"1": "a"}``,
    and what is stored must read back exactly as given. Nesting is bounded by
    :data:`MAX_JSON_DEPTH` and integers by the signed 64-bit range.
    """
    text = _encoded(value, field, index)
    _check_shape(value, field, index)
    return text


def _encoded(value: object, field: str, index: int | None) -> str:
    """``value``'s compact JSON text; :class:`InvalidInput` where JSON has no text for it."""
    try:
        return _encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        where = f" (item {index})" if index is not None else ""
        raise InvalidInput(f"{field}{where} is not JSON-serialisable: {exc}",
                           field=field, index=index) from exc


def _check_shape(value: object, field: str, index: int | None) -> None:
    """:class:`InvalidInput` for what :func:`_shape_problem` finds in encoded ``value``."""
    problem = _shape_problem(value)
    if problem is not None:
        where = f" (item {index})" if index is not None else ""
        raise InvalidInput(f"{field}{where} {problem}", field=field, index=index)


def _plain_copy(value: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
    """A copy of the exact dict ``value`` as decoding its JSON text makes it, and whether
    it holds a float, when it holds only the exact JSON types (``dict`` with ``str`` keys,
    ``list``, ``str``, ``int`` in the signed 64-bit range, ``float``, ``bool``, ``None``)
    nested at most :data:`MAX_JSON_DEPTH` deep; else None, and the standard encoder and
    :func:`_shape_problem` are the judges.

    It accepts only what :func:`_shape_problem` accepts, and costs about what that walk
    alone does: an append returns this copy as the item's data instead of decoding the
    text it stored. Its dicts and lists are new; the values in them, immutable, are the
    caller's (their text decodes to equal values of the same exact types).
    """
    top = dict(value)
    floats = False
    stack: list[tuple[Any, int]] = [(top, 1)]
    push, pop = stack.append, stack.pop
    while stack:
        node, depth = pop()
        if depth > MAX_JSON_DEPTH:
            return None
        keyed = type(node) is dict
        # replacing a value in place leaves either iteration valid
        for key, child in node.items() if keyed else enumerate(node):
            if keyed and type(key) is not str:
                return None
            kind = type(child)
            if kind is str or kind is bool or child is None:
                continue
            if kind is int:
                if not MIN_INT64 <= child <= MAX_INT64:
                    return None
            elif kind is dict:
                node[key] = child = dict(child)
                push((child, depth + 1))
            elif kind is list:
                node[key] = child = child[:]
                push((child, depth + 1))
            elif kind is float:
                floats = True
            else:
                return None
    return top, floats


try:
    from orjson import JSONEncodeError as _FastRefused
    from orjson import dumps as _orjson_dumps
except ImportError:
    _FastRefused = TypeError  # type: ignore[misc,assignment]
    _orjson_dumps = None  # type: ignore[assignment]

#: orjson's compact encoding (the optional extra ``speedups``), where it is installed:
#: for a value :func:`_plain_copy` accepted that holds no float, the same text as the
#: standard encoder's (``tests/test_append_path.py`` compares them), in about a fifth of
#: its time. Floats are left to the standard encoder, which spells some differently
#: (``1e-07`` where orjson writes ``1e-7``) and refuses NaN and the infinities, which
#: orjson writes as ``null``; so are strings with a lone surrogate, which orjson refuses
#: (``JSONEncodeError``) and the standard encoder passes on to the size check's refusal.
_fast_dumps: Callable[[object], bytes] | None = _orjson_dumps


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def decode_json(text: str | bytes, *, field: str) -> Any:
    """The value JSON ``text`` spells, held to the rules :func:`encode_json` holds stored
    JSON to (depth, integer range; no NaN or Infinity), so that JSON from a query
    parameter, a header or a token is bounded exactly as JSON in a body is.

    Raises :class:`InvalidInput` naming ``field``.
    """
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError as exc:
        raise InvalidInput(f"{field} nests deeper than {MAX_JSON_DEPTH} levels",
                           field=field) from exc
    except ValueError as exc:
        raise InvalidInput(f"{field} is not valid JSON", field=field) from exc
    problem = _shape_problem(value)
    if problem is not None:
        raise InvalidInput(f"{field} {problem}", field=field)
    return value


def int64(value: object, *, field: str, minimum: int = MIN_INT64) -> int:
    """``value`` when it is an integer from ``minimum`` to :data:`MAX_INT64` (what every
    datastore's counters hold). Raises :class:`InvalidInput` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not minimum <= value <= MAX_INT64:
        raise InvalidInput(f"{field} must be an integer from {minimum} to {MAX_INT64}",
                           field=field)
    return value


def name_list(values: object, each: Callable[[Any], str], limit: int, *, field: str,
              what: str) -> list[str]:
    """``values``, a list (not a string) of at most ``limit`` names, each checked by
    ``each``, as the distinct names in order. Raises :class:`InvalidInput` (saying the list
    holds ``what``), :class:`LimitExceeded`."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidInput(f"{field} must be a list of {what}", field=field)
    if len(values) > limit:
        raise LimitExceeded.too_many(field, limit, len(values), field=field)
    return sorted({each(v) for v in values})


def store_name(name: str) -> str:
    if not isinstance(name, str) or not STORE_NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"store name {name!r} must be 3-55 chars of [a-z0-9_-]", field="name", store=name
        )
    return name


def session_id(value: str, field: str = "session_id") -> str:
    if not isinstance(value, str) or not SESSION_ID_RE.fullmatch(value):
        raise InvalidInput(
            f"{field} {value!r} must be 1-128 chars of [A-Za-z0-9._:@-], "
            "starting with a letter or digit",
            field=field,
        )
    return value


def item_format(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not FORMAT_RE.fullmatch(value):
        raise InvalidInput(f"format {value!r} must be 1-64 chars of [a-z0-9_.-]", field="format")
    return value


def finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
