"""Opaque page tokens.

A token names the listing it belongs to (its scope and order) and the last position
returned. A token used with another listing, or that was altered, is refused with
:class:`~ownstate.errors.InvalidInput`. Tokens carry no secret: the scope is always
enforced by the query, so a forged cursor can only move within what the caller may see.

It may touch only the error tree and the limits (``ownstate.errors``, ``ownstate.limits``),
never a backend.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from .errors import InvalidInput
from .limits import decode_json

__all__ = ["decode_token", "encode_token"]


def encode_token(scope: str, position: list[Any]) -> str:
    body = json.dumps([scope, position], separators=(",", ":")).encode()
    checksum = zlib.crc32(body).to_bytes(4, "big")
    return base64.urlsafe_b64encode(checksum + body).decode().rstrip("=")


def decode_token(token: str, scope: str) -> list[Any]:
    """The position stored in ``token``; :class:`InvalidInput` if malformed or foreign."""
    if not isinstance(token, str) or not token or len(token) > 2048:
        raise InvalidInput("page_token is malformed", field="page_token")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        checksum, body = raw[:4], raw[4:]
        if zlib.crc32(body).to_bytes(4, "big") != checksum:
            raise ValueError("checksum mismatch")
        # Held to the rules of stored JSON: a forged position may not reach a datastore
        # with an integer no column holds, nor nest deeper than any input may.
        token_scope, position = decode_json(body, field="page_token")
    except (ValueError, TypeError, InvalidInput) as exc:
        raise InvalidInput("page_token is malformed", field="page_token") from exc
    if token_scope != scope or not isinstance(position, list):
        raise InvalidInput("page_token belongs to another listing", field="page_token")
    return position
