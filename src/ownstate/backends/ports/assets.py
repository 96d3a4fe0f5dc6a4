"""The assets port: bytes stored once per content hash, referenced by id.

It may touch the model alone, and no datastore: each backend implements it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime

from ...model import AssetRef

__all__ = ["AssetPort"]


class AssetPort(ABC):
    """Storage for assets.

    Content is stored once per tenant and sha256; each ``put`` in a different owner
    (a session, or none) makes a reference with its own id. Putting the same content into
    the same owner again returns the existing reference unchanged. References go with
    their session (and with its store); content goes, in the same transaction, when its
    last reference goes.
    """

    @abstractmethod
    async def put_asset(self, tenant: str, store: str | None, session_id: str | None,
                        asset_id: str, sha256: str, data: bytes, media_type: str,
                        metadata: Mapping[str, str], now: datetime) -> AssetRef:
        """Store a reference named ``asset_id`` (and the content, unless stored already);
        or return the owner's existing reference to this content. ``store`` and
        ``session_id`` are both given or both ``None``. Raises SessionNotFound."""

    @abstractmethod
    async def get_asset(self, tenant: str, asset_id: str) -> tuple[AssetRef, bytes]:
        """Raises AssetNotFound."""

    @abstractmethod
    async def get_asset_ref(self, tenant: str, asset_id: str) -> AssetRef:
        """The reference without the bytes. Raises AssetNotFound."""

    @abstractmethod
    async def list_assets(self, tenant: str, store: str, session_id: str) -> list[AssetRef]:
        """The session's assets, oldest first. Raises SessionNotFound."""

    @abstractmethod
    async def delete_asset(self, tenant: str, asset_id: str) -> None:
        """Delete the reference, and the content when no other reference holds it.
        Raises AssetNotFound."""
