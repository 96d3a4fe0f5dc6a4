"""Assets: content-addressed bytes owned by sessions: the async public API (``client.assets``).

It may touch the backend's asset operations through its scope, nothing else.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping

from .. import _ids
from ..errors import InvalidInput
from ..limits import MAX_NAME_CHARS, bytes_copy
from ..model import JSON, AssetRef
from ._scope import Scope
from .session import AsyncSession

__all__ = ["AsyncAssets"]

_NAME = r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}"
_MEDIA_TYPE_RE = re.compile(rf"{_NAME}/{_NAME}")
#: above this size the digest is computed off the event loop
_HASH_INLINE_BYTES = 1024 * 1024


def _asset_id(value: object, field: str = "asset_id") -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"{field} must be a non-empty string of at most "
                           f"{MAX_NAME_CHARS} chars", field=field)
    return value


def _owner(session: object) -> tuple[str, str]:
    if not isinstance(session, AsyncSession):
        raise InvalidInput("session must be a session handle (from store.add or store.get)",
                           field="session")
    return session.store, session.session_id


def _loop_running() -> bool:
    """Whether an event loop drives this call (a sync client on an inline backend has none,
    and blocking is then the caller's own thread's business)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class AsyncAssets:
    """Bytes stored by content: ``client.assets``.

    Each content is stored once per tenant, however many references share it; each owner
    (a session, or none) holds at most one reference per content, with its own
    ``asset_id``. Items and checkpoints hold ``AssetRef.to_json()`` instead of the bytes,
    and :meth:`resolve` turns that back into the reference. A session's assets are deleted
    with it (and with its store); content goes when its last reference goes.
    """

    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    async def put(
        self,
        data: bytes,
        media_type: str,
        *,
        session: AsyncSession | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> AssetRef:
        """Store ``data`` (a ``bytearray`` or ``memoryview`` is copied) as an asset of
        ``session``, or of nobody; returns its reference.

        ``size`` and ``sha256`` are computed here. ``media_type`` is ``type/subtype``
        (stored in lower case); ``metadata`` holds string labels, as on sessions. Putting
        the same bytes into the same owner again returns the reference made the first
        time, unchanged (its media type and labels included).

        Raises :class:`~ownstate.errors.InvalidInput` (not bytes, bad media type or
        labels, not a session handle), :class:`~ownstate.errors.LimitExceeded` (over
        ``Limits.max_asset_bytes``, too many labels),
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        content = bytes_copy(data, s.limits.max_asset_bytes, field="data")
        kind = media_type.lower() if isinstance(media_type, str) else ""
        if not _MEDIA_TYPE_RE.fullmatch(kind):
            raise InvalidInput(f"media_type {media_type!r} must look like type/subtype "
                               "(for example image/png)", field="media_type")
        labels = s.limits.metadata(metadata)
        store, session_id = _owner(session) if session is not None else (None, None)
        if len(content) > _HASH_INLINE_BYTES and _loop_running():
            digest = await asyncio.to_thread(lambda: hashlib.sha256(content).hexdigest())
        else:
            digest = hashlib.sha256(content).hexdigest()
        return await s.backend.put_asset(s.tenant, store, session_id, _ids.new_id("ast"), digest,
                                         content, kind, labels, _ids.now())

    async def get(self, asset_id: str) -> bytes:
        """The asset's bytes. Raises :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.AssetNotFound`."""
        s = self._scope
        _, data = await s.backend.get_asset(s.tenant, _asset_id(asset_id))
        return data

    async def get_ref(self, asset_id: str) -> AssetRef:
        """The asset's reference (owner, size, sha256, media type, labels) without its
        bytes. Raises :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.AssetNotFound`."""
        s = self._scope
        return await s.backend.get_asset_ref(s.tenant, _asset_id(asset_id))

    async def resolve(self, ref: Mapping[str, JSON]) -> AssetRef:
        """The stored reference named by ``ref``, the JSON form an item or checkpoint holds
        (``AssetRef.to_json()``: ``{"$asset": id, ...}``). What the JSON claims besides the
        id is not trusted: the stored reference is returned.

        Raises :class:`~ownstate.errors.InvalidInput` (not such a JSON object),
        :class:`~ownstate.errors.AssetNotFound`.
        """
        if not isinstance(ref, Mapping) or "$asset" not in ref:
            raise InvalidInput('ref must be an asset reference: {"$asset": id, ...}',
                               field="ref")
        return await self.get_ref(_asset_id(ref["$asset"], "ref"))

    async def delete(self, asset_id: str) -> None:
        """Delete this reference; the bytes go too unless another reference holds them.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.AssetNotFound`.
        """
        s = self._scope
        await s.backend.delete_asset(s.tenant, _asset_id(asset_id))

    async def list(self, session: AsyncSession) -> list[AssetRef]:
        """The session's assets, oldest first.

        Raises :class:`~ownstate.errors.InvalidInput` (not a session handle),
        :class:`~ownstate.errors.SessionNotFound`.
        """
        s = self._scope
        store, session_id = _owner(session)
        return await s.backend.list_assets(s.tenant, store, session_id)
