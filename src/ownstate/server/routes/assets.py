"""Assets: bytes uploaded and downloaded as raw request and response bodies, never as JSON.

An asset of a session lives under that session's store and needs READ (to see it) or WRITE
(to add or delete it) there; an asset of nobody is the tenant's and needs an admin key. A
caller that may not see an asset gets exactly the not-found an unknown id gets.

It may touch the caller's client and the permission checks, the routing base,
:mod:`._common` and the shared schemas, the error tree, the limits and the model, and
FastAPI, starlette and pydantic; never a backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.requests import ClientDisconnect

from ...errors import AssetNotFound, InvalidInput, NotFound
from ...limits import (
    MAX_NAME_CHARS,
    MAX_SESSION_ID_CHARS,
    MAX_STORE_NAME_CHARS,
    Limits,
    decode_json,
)
from ...model import AssetRef
from ..auth import Caller
from ..permissions import SESSION_STORE, require, unseen
from ..routing import CallerDep, upload_body
from ..schemas import Empty
from ._common import api_router, require_admin

__all__ = ["METADATA_HEADER", "router"]

router = api_router("assets")

#: The request header carrying an upload's labels, as a JSON object of strings.
METADATA_HEADER = "x-ownstate-metadata"
#: Responses stream in pieces of this size, so a slow reader never holds a second copy.
_CHUNK = 256 * 1024
#: Labels travel in a header as escaped JSON: the most labels of the longest values fit.
_MAX_METADATA_HEADER = 128 * 1024

AssetId = Annotated[str, Path(min_length=1, max_length=MAX_NAME_CHARS)]


class AssetOut(BaseModel):
    asset_id: str
    sha256: str
    size: int
    media_type: str
    store: str | None = None
    session_id: str | None = None
    metadata: dict[str, str]
    create_time: datetime


class AssetsOut(BaseModel):
    assets: list[AssetOut]


def _out(ref: AssetRef) -> AssetOut:
    return AssetOut(asset_id=ref.asset_id, sha256=ref.sha256, size=ref.size,
                    media_type=ref.media_type, store=ref.store, session_id=ref.session_id,
                    metadata=dict(ref.metadata), create_time=ref.create_time)


def _unknown(asset_id: str) -> AssetNotFound:
    return AssetNotFound(f"no asset {asset_id!r}", asset_id=asset_id)


async def _visible(caller: Caller, asset_id: str, level: str) -> AssetRef:
    """The asset's reference, when the caller may act at ``level`` on it.

    Raises :class:`~ownstate.errors.AssetNotFound` alike for an unknown asset and one the
    caller may not see, :class:`~ownstate.errors.PermissionDenied` for one it may only read.
    """
    try:
        ref = await caller.client.assets.get_ref(asset_id)
    except NotFound as exc:
        await unseen(caller, SESSION_STORE)
        raise _unknown(asset_id) from exc
    if caller.admin:
        return ref
    if ref.store is None:
        await unseen(caller, SESSION_STORE)
        raise _unknown(asset_id)
    try:
        await require(caller, SESSION_STORE, ref.store, level)
    except NotFound as exc:
        raise _unknown(asset_id) from exc
    return ref


def _labels(header: str | None) -> dict[str, Any] | None:
    if header is None:
        return None
    labels = decode_json(header, field="metadata")
    if not isinstance(labels, dict):
        raise InvalidInput(f"{METADATA_HEADER} must be a JSON object of strings",
                           field="metadata")
    return labels


_UPLOAD_BODY: dict[str, Any] = {"requestBody": {
    "required": True,
    "description": "The asset's bytes, as they are; Content-Type is its media type.",
    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
}}


def _asset_bound(limits: Limits) -> int:
    return limits.max_asset_bytes


@router.post("/assets", response_model=AssetOut, openapi_extra=_UPLOAD_BODY)
@upload_body(_asset_bound)
async def put_asset(
    request: Request,
    caller: CallerDep,
    store: Annotated[str | None, Query(max_length=MAX_STORE_NAME_CHARS, description=(
        "The session store of the owning session; with session_id, or neither for an "
        "asset of the tenant (admin)."))] = None,
    session_id: Annotated[str | None, Query(max_length=MAX_SESSION_ID_CHARS)] = None,
    sha256: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}$", description=(
        "The digest the client expects; a body with another digest is refused."))] = None,
    metadata: Annotated[str | None, Header(alias=METADATA_HEADER,
                                           max_length=_MAX_METADATA_HEADER, description=(
        "Labels: a JSON object of strings, as on sessions."))] = None,
) -> Any:
    """Store the request body as an asset of a session (WRITE on its store) or of the
    tenant (admin); the same bytes put into the same owner again give the first
    reference. Bodies above the server's asset limit are refused with 413."""
    content_type = request.headers.get("content-type")
    if (store is None) != (session_id is None):
        raise InvalidInput("give store and session_id together, or neither",
                           field="session_id")
    if content_type is None:
        raise InvalidInput("send the media type as Content-Type", field="media_type")
    labels = _labels(metadata)
    if store is None or session_id is None:
        require_admin(caller, "store assets outside a session")
        owner = None
    else:
        await require(caller, SESSION_STORE, store, "WRITE")
        owner = await caller.client.session_stores.session(store, session_id)
    digest = hashlib.sha256() if sha256 is not None else None
    chunks: list[bytes] = []
    try:
        async for chunk in request.stream():
            if digest is not None:
                digest.update(chunk)
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise InvalidInput("the upload ended before its body did",
                           field="request_body") from exc
    if digest is not None and digest.hexdigest() != sha256:
        raise InvalidInput("the body's sha256 is not the one given", field="sha256")
    data = b"".join(chunks)
    chunks.clear()
    ref = await caller.client.assets.put(data, content_type, session=owner, metadata=labels)
    return _out(ref)


@router.get("/assets/{asset_id}", response_model=AssetOut)
async def get_asset_ref(asset_id: AssetId, caller: CallerDep) -> AssetOut:
    """An asset's reference: owner, size, sha256, media type and labels (READ)."""
    return _out(await _visible(caller, asset_id, "READ"))


def _etag_matches(header: str | None, etag: str) -> bool:
    if header is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


@router.get("/assets/{asset_id}/content", response_model=None, response_class=StreamingResponse,
            responses={200: {"description": "The asset's bytes, with its media type.",
                             "content": {"*/*": {"schema": {"type": "string",
                                                            "format": "binary"}}}},
                       304: {"description": "The client's copy (If-None-Match) is current."}})
async def get_asset_content(
    asset_id: AssetId, caller: CallerDep,
    if_none_match: Annotated[str | None, Header(max_length=1024)] = None,
) -> Response:
    """An asset's bytes (READ), streamed with its media type; the ETag is its sha256."""
    ref = await _visible(caller, asset_id, "READ")
    etag = f'"{ref.sha256}"'
    if _etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"etag": etag})
    try:
        data = await caller.client.assets.get(asset_id)
    except NotFound as exc:
        raise _unknown(asset_id) from exc

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(data), _CHUNK):
            yield data[start:start + _CHUNK]

    # The stored media type is whatever the uploader said: never let a browser render it
    # as a page of this origin.
    headers = {"content-type": ref.media_type, "content-length": str(len(data)),
               "etag": etag, "x-content-type-options": "nosniff",
               "content-disposition": "attachment"}
    return StreamingResponse(pieces(), headers=headers)


@router.delete("/assets/{asset_id}", response_model=Empty)
async def delete_asset(asset_id: AssetId, caller: CallerDep) -> Empty:
    """Delete an asset (WRITE); its bytes go too unless another reference holds them."""
    await _visible(caller, asset_id, "WRITE")
    try:
        await caller.client.assets.delete(asset_id)
    except NotFound as exc:
        raise _unknown(asset_id) from exc
    return Empty()


@router.get("/session-stores/{store}/sessions/{session_id}/assets", response_model=AssetsOut)
async def list_session_assets(store: str, session_id: str, caller: CallerDep) -> AssetsOut:
    """A session's assets, oldest first (READ)."""
    await require(caller, SESSION_STORE, store, "READ")
    session = await caller.client.session_stores.session(store, session_id)
    return AssetsOut(assets=[_out(r) for r in await caller.client.assets.list(session)])

