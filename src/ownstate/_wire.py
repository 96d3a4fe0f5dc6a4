"""How ownstate's records and errors travel over HTTP, for the server and its client alike.

Records are the frozen dataclasses of :mod:`ownstate.model`: a datetime travels as RFC 3339
text in UTC, bytes as standard base64 text, a nested record as an object. Errors travel as
``application/problem+json`` (RFC 9457) bodies whose ``code`` is the error class's stable
code, so the client raises the same class the server did, with the same ids.

It may touch only the error tree and the model (``ownstate.errors``, ``ownstate.model``),
and no outside library: the server and the client each bring their own HTTP stack.
"""

from __future__ import annotations

import base64
import dataclasses
import types
import typing
from datetime import UTC, datetime
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin

from . import errors
from .model import JSON

__all__ = ["PROBLEM_MEDIA_TYPE", "error_from_problem", "load", "problem_for", "status_for"]

T = TypeVar("T")

PROBLEM_MEDIA_TYPE = "application/problem+json"

# The most specific class wins: lookups walk each error's class hierarchy upward.
_STATUS: dict[type[errors.OwnstateError], int] = {
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.InvalidInput: 400,
    errors.Unauthenticated: 401,
    errors.PermissionDenied: 403,
    errors.BackendUnavailable: 503,
    errors.SchemaVersion: 503,
    errors.ExtractorFailed: 502,
}
_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           409: "Conflict", 413: "Content Too Large",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable"}


def _error_classes() -> dict[str, type[errors.OwnstateError]]:
    found: dict[str, type[errors.OwnstateError]] = {}
    for name in errors.__all__:
        cls = getattr(errors, name)
        found[cls.code] = cls
    return found


_BY_CODE = _error_classes()


def status_for(error: errors.OwnstateError) -> int:
    """The HTTP status that carries ``error``."""
    if isinstance(error, errors.LimitExceeded):
        # The bounds of the request itself, not of what it asks to store.
        wire = {"request_body": 413, "request_headers": 431}.get(str(error.details.get("field")))
        if wire is not None:
            return wire
    for cls in type(error).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500


def _plain(value: object) -> JSON:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _not_found_detail(error: errors.NotFound) -> str:
    """One message per kind of thing, built from its ids alone, so that something missing
    and something the caller may not see read exactly alike whichever backend answered.
    A plain :class:`~ownstate.errors.NotFound` names no kind of thing (an unknown route):
    its own message says what is missing."""
    if error.code == errors.NotFound.code:
        return error.message
    what = error.code.removesuffix("_not_found").replace("_", " ")
    ids = ", ".join(f"{k}={v!r}" for k, v in sorted(error.details.items()))
    return f"no {what} with {ids}" if ids else f"no such {what}"


def problem_for(error: errors.OwnstateError) -> dict[str, JSON]:
    """The problem+json body for ``error``."""
    status = status_for(error)
    detail = (_not_found_detail(error) if isinstance(error, errors.NotFound)
              else error.message)
    return {
        "type": f"urn:ownstate:error:{error.code}",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "code": error.code,
        "detail": detail,
        "details": {k: _plain(v) for k, v in sorted(error.details.items())},
    }


def error_from_problem(status: int, body: object) -> errors.OwnstateError:
    """The error a problem+json body describes (by its ``code``); a body without a known
    code gives the error its status implies."""
    if isinstance(body, dict):
        code = body.get("code")
        details = body.get("details") if isinstance(body.get("details"), dict) else {}
        detail = body.get("detail")
        message = detail if isinstance(detail, str) else f"HTTP {status}"
        cls = _BY_CODE.get(code) if isinstance(code, str) else None
        if cls is not None and cls is not errors.OwnstateError:
            return cls(message, **typing.cast(dict[str, object], details))
    else:
        message = f"HTTP {status}"
    if status == 401:
        return errors.Unauthenticated(message)
    if status == 403:
        return errors.PermissionDenied(message)
    if status == 404:
        return errors.NotFound(message)
    if status == 409:
        return errors.Conflict(message)
    if status in (400, 405, 413, 422, 431):
        return errors.InvalidInput(message)
    return errors.BackendUnavailable(f"the server answered {status}: {message}")


# records -------------------------------------------------------------------------------


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _load_value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        return _load_value(options[0], value) if len(options) == 1 else value
    if hint is datetime:
        return datetime.fromisoformat(value)
    if hint is bytes:
        return base64.b64decode(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return load(hint, value)
    if origin is tuple:
        args = get_args(hint)
        return tuple(_load_value(args[0], v) for v in value)
    if origin is list:
        (arg,) = get_args(hint)
        return [_load_value(arg, v) for v in value]
    if origin is dict:
        return dict(value)
    return value


def load(cls: type[T], data: Any, **known: Any) -> T:
    """A ``cls`` record from its JSON form (as the module docstring describes it); ``known``
    fills fields the wire leaves out (the tenant, which the key decides).

    Raises :class:`~ownstate.errors.BackendUnavailable` when the data does not fit (a
    server speaking another version).
    """
    try:
        hints = _hints(typing.cast(Any, cls))
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values = {k: _load_value(hints[k], v) for k, v in data.items() if k in names}
        values.update(known)
        return cls(**values)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise errors.BackendUnavailable(
            f"the server sent a {cls.__name__} this client cannot read: {exc}") from exc
