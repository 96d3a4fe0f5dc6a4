"""Assets, streamed, over HTTP: bytes travel as raw bodies, references as JSON.

It may touch the server through the transport of ``_base``, the wire format
(``ownstate._wire``), the model and errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from ... import _wire
from ...errors import AssetNotFound
from ...model import AssetRef
from ._base import API, HttpBase, addressable, not_found, segment, session_path

__all__ = ["AssetsOverHttp"]

ASSETS = f"{API}/assets"
METADATA_HEADER = "x-ownstate-metadata"


def _asset_path(asset_id: str) -> str:
    """The path of an asset; an id no path can carry names no asset (AssetNotFound)."""
    if not addressable(asset_id):
        raise not_found(AssetNotFound(asset_id=asset_id))
    return f"{ASSETS}/{segment(asset_id)}"


class AssetsOverHttp(HttpBase):
    """The assets port as calls to the server's routes."""

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
        return ref, await self._http.content("GET", f"{_asset_path(asset_id)}/content")

    async def get_asset_ref(self, tenant: str, asset_id: str) -> AssetRef:
        body = await self._http.call("GET", _asset_path(asset_id))
        return _wire.load(AssetRef, body)

    async def list_assets(self, tenant: str, store: str, session_id: str) -> list[AssetRef]:
        body = await self._http.call("GET", f"{session_path(store, session_id)}/assets")
        return [_wire.load(AssetRef, r) for r in body["assets"]]

    async def delete_asset(self, tenant: str, asset_id: str) -> None:
        await self._http.call("DELETE", _asset_path(asset_id))
