"""Checkpoints, always under their full run scope, over HTTP.

It may touch the server through the transport of ``_base``, the run part beside it, the
checkpoint port, page tokens (``ownstate._tokens``), the wire format (``ownstate._wire``),
the limits and the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ... import _wire, model
from ..._tokens import decode_token, encode_token
from ...limits import SESSION_ID_RE
from ...model import JSON, CheckpointRecord, CheckpointScope, PendingWrite, RunUsage
from ..ports.checkpoints import Fence, NewCheckpoint, listing_scope
from ._base import API, HttpBase, json_object, segment, session_path
from .runs import missing_run

__all__ = ["CheckpointsOverHttp"]

_UPLOAD = {"content-type": "application/octet-stream"}
#: Below this many, a listing asks the server for exactly what it still needs.
_SMALL_PAGE = 100


def _run_base(scope: CheckpointScope) -> str:
    """The path of the scope's run; a scope whose ids no session or run could have names
    no run, and gets the server's not-found without a request."""
    if not (SESSION_ID_RE.fullmatch(scope.session_id) and SESSION_ID_RE.fullmatch(scope.run_id)):
        raise missing_run(scope.run_id)
    return f"{session_path(scope.store, scope.session_id)}/runs/{segment(scope.run_id)}"


def _envelope(fields: Mapping[str, Any], raw: Mapping[str, str] | None = None) -> bytes:
    """The upload's head: one line of JSON, which the payload bytes follow."""
    return (json_object(fields, raw or {}) + "\n").encode()


def _fence(fence: Fence | None) -> dict[str, Any]:
    if fence is None:
        return {}
    return {"fencing_token": fence.fencing_token, "fencing_run_id": fence.run_id}


class CheckpointsOverHttp(HttpBase):
    """The checkpoints port as calls to the server's routes."""

    async def put_checkpoint(self, tenant: str, scope: CheckpointScope,
                             checkpoint: NewCheckpoint, fence: Fence | None,
                             now: datetime) -> CheckpointRecord:
        head = _envelope({"checkpoint_id": checkpoint.checkpoint_id,
                          "type_tag": checkpoint.type_tag,
                          "namespace": checkpoint.namespace,
                          "parent_checkpoint_id": checkpoint.parent_checkpoint_id,
                          **_fence(fence)},
                         {"metadata": checkpoint.metadata_json})
        body = await self._http.call(
            "POST", f"{_run_base(scope)}/checkpoints:put", params={"actor_id": scope.actor_id},
            content=head + checkpoint.payload, headers=_UPLOAD)
        return _wire.load(CheckpointRecord, body)

    async def put_writes(self, tenant: str, scope: CheckpointScope, namespace: str,
                         checkpoint_id: str, writes: Sequence[PendingWrite],
                         fence: Fence | None, now: datetime) -> None:
        head = _envelope({"checkpoint_id": checkpoint_id, "namespace": namespace,
                          **_fence(fence),
                          "writes": [{"task_id": w.task_id, "index": w.index,
                                      "channel": w.channel, "type_tag": w.type_tag,
                                      "task_path": w.task_path, "size": len(w.payload)}
                                     for w in writes]})
        await self._http.call(
            "POST", f"{_run_base(scope)}/checkpoints:put_writes",
            params={"actor_id": scope.actor_id},
            content=b"".join([head, *(w.payload for w in writes)]), headers=_UPLOAD)

    async def get_checkpoint(self, tenant: str, scope: CheckpointScope, namespace: str,
                             checkpoint_id: str | None) -> CheckpointRecord | None:
        body = await self._http.call("GET", f"{_run_base(scope)}/checkpoints:get", params={
            "actor_id": scope.actor_id, "namespace": namespace,
            "checkpoint_id": checkpoint_id})
        found = body.get("checkpoint")
        return _wire.load(CheckpointRecord, found) if found is not None else None

    async def _page(self, scope: CheckpointScope, namespace: str | None,
                    metadata: Mapping[str, JSON], before: str | None, page_size: int | None,
                    page_token: str | None, page_bytes: int | None = None
                    ) -> tuple[list[CheckpointRecord], str | None]:
        """One page of the server's listing, bounded in bytes by the server too."""
        wanted = (json.dumps(dict(metadata), ensure_ascii=False, separators=(",", ":"))
                  if metadata else None)
        body = await self._http.call("GET", f"{_run_base(scope)}/checkpoints", params={
            "actor_id": scope.actor_id, "namespace": namespace, "metadata": wanted,
            "before": before, "page_size": page_size, "page_token": page_token,
            "page_bytes": page_bytes})
        return ([_wire.load(CheckpointRecord, r) for r in body["checkpoints"]],
                body.get("next_page_token"))

    async def list_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, limit: int | None) -> list[CheckpointRecord]:
        # every page of the server's listing in turn (of the server's default size, or
        # what is left of the limit), until the limit is reached
        found: list[CheckpointRecord] = []
        token = None
        while True:
            left = None if limit is None else limit - len(found)
            wanted = max(1, left) if left is not None and left < _SMALL_PAGE else None
            page, token = await self._page(scope, namespace, metadata, before, wanted, token)
            found.extend(page)
            if token is None or (limit is not None and len(found) >= limit):
                return found if limit is None else found[:limit]

    async def page_checkpoints(self, tenant: str, scope: CheckpointScope,
                               namespace: str | None, metadata: Mapping[str, JSON],
                               before: str | None, after: int | None, limit: int,
                               max_bytes: int) -> tuple[list[CheckpointRecord], int | None]:
        # the server's page tokens hold the same positions as the library's own
        listing = listing_scope(scope, namespace, metadata, before)
        token = encode_token(listing, [after]) if after is not None else None
        page, following = await self._page(scope, namespace, metadata, before, limit, token,
                                           max_bytes)
        return page, decode_token(following, listing)[0] if following is not None else None

    async def delete_checkpoints(self, tenant: str, scope: CheckpointScope,
                                 namespace: str | None, checkpoint_ids: Sequence[str],
                                 fence: Fence | None) -> int:
        body = await self._http.call(
            "POST", f"{_run_base(scope)}/checkpoints:delete",
            params={"actor_id": scope.actor_id},
            json={"checkpoint_ids": list(checkpoint_ids), "namespace": namespace,
                  **_fence(fence)})
        return int(body["deleted"])

    async def delete_run_checkpoints(self, tenant: str, scope: CheckpointScope) -> int:
        body = await self._http.call("DELETE", f"{_run_base(scope)}/checkpoints",
                                     params={"actor_id": scope.actor_id})
        return int(body["deleted"])

    async def delete_session_checkpoints(self, tenant: str, actor_id: str, store: str,
                                         session_id: str) -> int:
        body = await self._http.call("DELETE", f"{session_path(store, session_id)}/checkpoints",
                                     params={"actor_id": actor_id})
        return int(body["deleted"])

    async def copy_checkpoints(self, tenant: str, source: CheckpointScope,
                               target: CheckpointScope) -> int:
        origin = _run_base(source)
        _run_base(target)
        body = await self._http.call(
            "POST", f"{origin}/checkpoints:copy",
            params={"actor_id": source.actor_id},
            json={"target": {"actor_id": target.actor_id, "store": target.store,
                             "session_id": target.session_id, "run_id": target.run_id}})
        return int(body["copied"])

    async def apply_retention(self, tenant: str, policy: model.RetentionPolicy,
                              now: datetime) -> model.RetentionReport:
        body = await self._http.call("POST", f"{API}/checkpoints:apply_retention", json={
            "keep_last": policy.keep_last, "max_age_seconds": policy.max_age_seconds,
            "drop_when_run_ends": policy.drop_when_run_ends})
        return _wire.load(model.RetentionReport, body)

    async def checkpoint_usage(self, tenant: str, run_id: str | None) -> list[RunUsage]:
        body = await self._http.call("GET", f"{API}/checkpoints:usage",
                                     params={"run_id": run_id})
        return [_wire.load(RunUsage, u) for u in body["usage"]]
