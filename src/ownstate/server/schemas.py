"""Request and response bodies shared by several route modules (pydantic, for the
OpenAPI document); each module defines the bodies only it uses. It may touch only the limits
(``ownstate.limits``) and pydantic."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..limits import PRINCIPAL_RE, anchored

__all__ = [
    "Empty",
    "GrantOut",
    "GrantRequest",
    "GrantsOut",
    "ItemOut",
    "PrincipalRef",
    "Problem",
    "RevokeRequest",
    "Score",
    "SearchMode",
    "StoreOut",
    "StrictModel",
]


#: The ``mode`` of a search request.
SearchMode = Annotated[Literal["lexical", "semantic", "hybrid"] | None, Field(description=(
    "The ranking: lexical (BM25), semantic (cosine similarity of vectors from the "
    "server's embedder) or hybrid (their reciprocal-rank fusion). Default: hybrid when "
    "the server has an embedder, else lexical; semantic and hybrid without one are "
    "refused with 400 (code invalid_input, field mode)."))]

#: The ``score`` of a search hit.
Score = Annotated[float, Field(description=(
    "Relevance in the mode searched (BM25, cosine similarity or fused), higher is better, "
    "within one answer."))]


class StrictModel(BaseModel):
    """A request body: unknown fields are refused, not ignored, and values are not coerced
    (``0`` is not ``false``, ``"1"`` is not ``1``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Problem(BaseModel):
    """An error (RFC 9457 problem details); ``code`` is stable, ``details`` carries ids."""

    type: str
    title: str
    status: int
    code: str
    detail: str
    details: dict[str, object] = Field(default_factory=dict)


class Empty(BaseModel):
    """Nothing to report."""


class PrincipalRef(StrictModel):
    name: str = Field(pattern=anchored(PRINCIPAL_RE))
    principal_type: str | None = Field(default=None, pattern=r"^(USER|SERVICE_PRINCIPAL)$")


class GrantRequest(StrictModel):
    principal: PrincipalRef
    permission: str = Field(pattern=r"^(READ|WRITE|MANAGE)$")


class RevokeRequest(StrictModel):
    principal: PrincipalRef


class GrantOut(BaseModel):
    kind: str
    store: str
    principal: str
    level: str


class GrantsOut(BaseModel):
    grants: list[GrantOut]


class ItemOut(BaseModel):
    """One item of a session's history; ``data`` is stored and returned unchanged, the
    columns after ``format`` are derived from it when its shape says them."""

    item_id: str
    session_id: str
    seq: int = Field(description="1, 2, 3, ... in history order, gapless at append time.")
    create_time: datetime
    data: dict[str, Any]
    format: str
    role: str | None = None
    type: str | None = None
    tool_name: str | None = None
    model: str | None = None
    in_tokens: int | None = None
    out_tokens: int | None = None


class StoreOut(BaseModel):
    name: str
    create_time: datetime
