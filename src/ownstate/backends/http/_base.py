"""What every port over HTTP shares: the transport, the routes' prefix, and how ids go
into paths and bodies.

It may touch the transport (``_transport``), the wire format (``ownstate._wire``), the
replay cache (``backends._replay``), the limits and errors.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from ... import _wire
from ...errors import NotFound, SessionNotFound
from ...limits import CONTROL_CHARS, MAX_LOOKUP_CHARS, SESSION_ID_RE
from .._replay import ReplayCache
from ._transport import Transport

__all__ = ["API", "SESSION_STORES", "HttpBase", "addressable", "json_object", "not_found",
           "segment", "session_path"]

#: Where every route of the server lives.
API = "/api/2.0/agents"
SESSION_STORES = f"{API}/session-stores"

E = TypeVar("E", bound=NotFound)

_UNADDRESSABLE = re.compile(f"[/{CONTROL_CHARS}]")


def segment(value: str) -> str:
    """``value`` as path text the server decodes back to exactly ``value``; dots are
    encoded too, so that ``.`` and ``..`` are never taken for relative segments."""
    return quote(value, safe="").replace(".", "%2E")


def addressable(value: str) -> bool:
    """Whether one path segment can carry this id: 1 to ``MAX_LOOKUP_CHARS`` characters,
    none of them a slash or a control character. No id ownstate makes or accepts is
    otherwise, so an id that is not addressable names nothing, as it would in a local
    database."""
    return 0 < len(value) <= MAX_LOOKUP_CHARS and _UNADDRESSABLE.search(value) is None


def not_found(error: E) -> E:
    """``error`` worded exactly as the server words it, for an answer this client knows
    without asking: an unknown thing reads the same whichever side found it missing."""
    made = _wire.error_from_problem(404, _wire.problem_for(error))
    assert isinstance(made, type(error))
    return made


def session_path(store: str, session_id: str) -> str:
    """The path of a session, under which its items, runs, checkpoints and assets live.

    Every session id was checked when the session was made, so an id that could not have
    been names no session: it raises :class:`~ownstate.errors.SessionNotFound` here, as the
    server would, rather than being sent, where a ``/`` in it would change the route.
    """
    if not SESSION_ID_RE.fullmatch(session_id):
        raise not_found(SessionNotFound(store=store, session_id=session_id))
    return f"{SESSION_STORES}/{store}/sessions/{segment(session_id)}"


def json_object(fields: Mapping[str, Any], raw: Mapping[str, str]) -> str:
    """A JSON object of ``fields``, and of ``raw``'s values spliced in as the JSON text the
    client API already checked and encoded (decoding it only to encode it again would cost
    as much as the rest of the call). ASCII escapes keep text that UTF-8 cannot carry
    travelling, for the server to refuse."""
    parts = [f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}"
             for k, v in fields.items()]
    parts += [f"{json.dumps(k)}:{v}" for k, v in raw.items()]
    return "{" + ",".join(parts) + "}"


class HttpBase:
    """Holds the transport; each port mixin turns its calls into requests on it."""

    _http: Transport
    #: the items of sessions replayed lately, or None when turned off (``replay_cache=0``)
    _replay: ReplayCache | None
    #: held around each use of ``_replay`` (an inline client's threads share it)
    _replay_lock: threading.Lock
    #: the principal the API key belongs to, once ``setup()`` has asked the server
    principal: str | None
