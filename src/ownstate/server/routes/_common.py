"""What several route modules share: error responses for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from ..._wire import PROBLEM_MEDIA_TYPE
from ..schemas import Problem

__all__ = ["ERRORS"]

_PROBLEM: dict[str, Any] = {"model": Problem, "content": {PROBLEM_MEDIA_TYPE: {}}}

#: Every route may answer with these (documented once, shared by every route).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: dict(_PROBLEM, description=text) for code, text in (
        (400, "The request is malformed or crosses a documented bound."),
        (401, "No API key, or an unknown or revoked one."),
        (403, "The key's principal may see the store but not do this."),
        (404, "No such thing in the key's tenant, or one the principal may not see."),
        (409, "The request clashes with what is stored."),
        (413, "The request body is larger than the server accepts."),
        (503, "The database could not be reached."),
    )
}
