"""Assets, streamed, over HTTP: bytes travel as raw bodies, references as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from urllib.parse import quote

from ... import _wire
from ...errors import AssetNotFound, SessionNotFound
from ...model import AssetRef
from ._base import HttpBase

__all__ = ["AssetsOverHttp"]

ASSETS = "/api/2.0/agents/assets"
STORES = "/api/2.0/agents/session-stores"
METADATA_HEADER = "x-ownstate-metadata"


def _segment(value: str) -> str | None:
    """``value`` as one path segment, or None when no URL path can carry it (a slash, or
    a dot segment that URL normalisation would swallow): no such id is ever stored."""
    if "/" in value or value in (".", ".."):
        return None
    return quote(value, safe="")


class AssetsOverHttp(HttpBase):
    """The assets port as calls to the server's routes."""

    def _asset_path(self, asset_id: str) -> str:
        segment = _segment(asset_id)
        if segment is None:
            raise AssetNotFound(f"no asset {asset_id!r}", asset_id=asset_id)
        return f"{ASSETS}/{segment}"

    async def put_asset(self, tenant: str, store: str | None, session_id: str | None,
                        asset_id: str, sha256: str, data: bytes, media_type: str,
                        metadata: Mapping[str, str], now: datetime) -> AssetRef:
        # The server names the asset and stamps its time: an id chosen here could replace
        # another owner's reference. The digest goes along so that the server refuses a
        # body damaged on the way.
        headers = {"content-type": media_type}
        if metadata:
            headers[METADATA_HEADER] = json.dumps(dict(metadata), separators=(",", ":"))
        body = await self._http.call(
            "POST", ASSETS, params={"store": store, "session_id": session_id, "sha256": sha256},
            content=data, headers=headers)
        return _wire.load(AssetRef, body)

    async def get_asset(self, tenant: str, asset_id: str) -> tuple[AssetRef, bytes]:
        ref = await self.get_asset_ref(tenant, asset_id)
        response = await self._http.raw("GET", f"{self._asset_path(asset_id)}/content")
        return ref, bytes(response.content)

    async def get_asset_ref(self, tenant: str, asset_id: str) -> AssetRef:
        body = await self._http.call("GET", self._asset_path(asset_id))
        return _wire.load(AssetRef, body)

    async def list_assets(self, tenant: str, store: str, session_id: str) -> list[AssetRef]:
        segment = _segment(session_id)
        if segment is None:
            raise SessionNotFound(f"no session {session_id!r} in store {store!r}",
                                  store=store, session_id=session_id)
        body = await self._http.call(
            "GET", f"{STORES}/{quote(store, safe='')}/sessions/{segment}/assets")
        return [_wire.load(AssetRef, r) for r in body["assets"]]

    async def delete_asset(self, tenant: str, asset_id: str) -> None:
        await self._http.call("DELETE", self._asset_path(asset_id))
