"""Assets, in memory.

It may touch the in-memory data (``_data``), the model and errors, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import cast

from ...errors import AssetNotFound, SessionNotFound
from ...model import AssetRef
from ._data import MemoryBase

__all__ = ["AssetsInMemory"]


def _copy(ref: AssetRef) -> AssetRef:
    """The reference with its own labels, so no caller can change what is stored."""
    return replace(ref, metadata=dict(ref.metadata))


class AssetsInMemory(MemoryBase):
    """References live in ``_data.assets`` under (tenant, asset_id), in the order made;
    content lives once in ``_data.blobs`` under (tenant, sha256)."""

    def _ref(self, tenant: str, asset_id: str) -> AssetRef:
        ref = self._data.assets.get((tenant, asset_id))
        if ref is None:
            raise AssetNotFound(asset_id=asset_id)
        return _copy(ref)

    def _free_unreferenced(self, tenant: str, digests: set[str]) -> None:
        held = {ref.sha256 for (t, _), ref in self._data.assets.items() if t == tenant}
        for digest in digests - held:
            self._data.blobs.pop((tenant, digest), None)

    def _drop_assets_of_sessions(self, tenant: str, store: str,
                                 session_ids: Sequence[str]) -> None:
        owners = set(session_ids)
        doomed = [key for key, ref in self._data.assets.items()
                  if key[0] == tenant and ref.store == store and ref.session_id in owners]
        digests = {self._data.assets.pop(key).sha256 for key in doomed}
        self._free_unreferenced(tenant, digests)

    async def put_asset(self, tenant: str, store: str | None, session_id: str | None,
                        asset_id: str, sha256: str, data: bytes, media_type: str,
                        metadata: Mapping[str, str], now: datetime) -> AssetRef:
        with self._data.lock:
            if store is not None and session_id is not None and (
                    (tenant, store, session_id) not in self._data.sessions):
                raise SessionNotFound(store=store, session_id=session_id)
            for (t, _), ref in self._data.assets.items():
                if (t == tenant and ref.sha256 == sha256
                        and (ref.store, ref.session_id) == (store, session_id)):
                    return _copy(ref)
            self._data.blobs.setdefault((tenant, sha256), bytes(data))
            made = AssetRef(asset_id=asset_id, sha256=sha256, size=len(data),
                            media_type=media_type, store=store, session_id=session_id,
                            metadata=dict(metadata), create_time=now)
            self._data.assets[(tenant, asset_id)] = made
            return _copy(made)

    async def get_asset(self, tenant: str, asset_id: str) -> tuple[AssetRef, bytes]:
        with self._data.lock:
            ref = self._ref(tenant, asset_id)
            return ref, cast(bytes, self._data.blobs[(tenant, ref.sha256)])

    async def get_asset_ref(self, tenant: str, asset_id: str) -> AssetRef:
        with self._data.lock:
            return self._ref(tenant, asset_id)

    async def list_assets(self, tenant: str, store: str, session_id: str) -> list[AssetRef]:
        with self._data.lock:
            if (tenant, store, session_id) not in self._data.sessions:
                raise SessionNotFound(store=store, session_id=session_id)
            return [_copy(ref) for (t, _), ref in self._data.assets.items()
                    if t == tenant and (ref.store, ref.session_id) == (store, session_id)]

    async def delete_asset(self, tenant: str, asset_id: str) -> None:
        with self._data.lock:
            ref = self._ref(tenant, asset_id)
            del self._data.assets[(tenant, asset_id)]
            self._free_unreferenced(tenant, {ref.sha256})
