"""Checkpoints, always under the full scope of their run.

Every route names the run's store, session and run in its path and the run's actor in the
``actor_id`` query parameter, and all of it is applied where the data is read: a run that
does not exist, a run outside the scope and a run in a store the caller may not read all
answer with the same 404 ``run_not_found``.

Checkpoint payloads may be far larger than a JSON body is allowed to be, so storing them
(``checkpoints:put`` and ``checkpoints:put_writes``) takes an upload body: one line of
JSON (the envelope: ids, type tags, metadata), a line feed, then the payload bytes as they
are. Reads return payloads as base64 text in JSON.

It may touch the caller's client and the permission checks, the routing base,
:mod:`._common` and the shared schemas, the error tree, the limits and the model, and
FastAPI and pydantic; never a backend.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import Query, Request
from pydantic import AfterValidator, BaseModel, Field, ValidationError

from ...errors import InvalidInput, LimitExceeded, NotFound, RunNotFound
from ...limits import MAX_NAME_CHARS, TYPE_TAG_RE, Limits, anchored, decode_json, printable
from ...model import CheckpointRecord, CheckpointScope, PendingWrite, RetentionPolicy
from ..auth import Caller
from ..permissions import require_run
from ..routing import CallerDep, upload_body
from ..schemas import Empty, StrictModel
from ._common import (
    MAX_BIGINT,
    STORE_PATTERN,
    PageSize,
    PageToken,
    StorePath,
    api_router,
    json_utf8,
    require_admin,
    require_session,
    require_session_store,
    utf8_text,
)

__all__ = ["router"]

router = api_router("checkpoints")

RUN = "/session-stores/{store}/sessions/{session_id}/runs/{run_id}"

M = TypeVar("M", bound=StrictModel)

ActorId = Annotated[str, Query(min_length=1, max_length=4096, description=(
    "The run's actor: part of the scope, checked with the rest of it."))]
Id = Annotated[str, Field(pattern=printable(MAX_NAME_CHARS)), AfterValidator(utf8_text)]
Namespace = Annotated[str, Field(pattern=printable(MAX_NAME_CHARS, least=0)),
                      AfterValidator(utf8_text)]
TypeTag = Annotated[str, Field(pattern=anchored(TYPE_TAG_RE))]


def upload_bound(limits: Limits) -> int:
    """The largest upload body: a full payload, the largest metadata and an envelope for
    the most writes one call may carry."""
    return (limits.max_checkpoint_bytes + limits.max_item_bytes
            + limits.max_batch_items * 2048 + 65536)


class PendingWriteOut(BaseModel):
    task_id: str
    index: int
    channel: str
    type_tag: str
    payload: str = Field(description="Base64.")
    task_path: str


class CheckpointOut(BaseModel):
    run_id: str
    namespace: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type_tag: str
    payload: str = Field(description="Base64.")
    metadata: dict[str, Any]
    create_time: datetime
    pending_writes: list[PendingWriteOut]


class CheckpointLookup(BaseModel):
    checkpoint: CheckpointOut | None


class CheckpointsOut(BaseModel):
    checkpoints: list[CheckpointOut]
    next_page_token: str | None = None


class DeletedOut(BaseModel):
    deleted: int


class CopiedOut(BaseModel):
    copied: int


class RetentionOut(BaseModel):
    checkpoints_deleted: int
    bytes_freed: int


class UsageOut(BaseModel):
    run_id: str
    checkpoints: int
    stored_bytes: int


class UsagesOut(BaseModel):
    usage: list[UsageOut]


FencingToken = Annotated[int | None, Field(strict=True, ge=0, le=MAX_BIGINT, description=(
    "The fencing token of the lease the writer holds: the write is refused (409 "
    "stale_lease, or run_closed once the run has ended) unless it is current. Without "
    "one the write is not fenced."))]
FencingRun = Annotated[str | None, Field(min_length=1, max_length=256, description=(
    "The run of this session whose lease fencing_token belongs to; this run when absent."
)), AfterValidator(lambda v: v if v is None else utf8_text(v))]


class Fenced(StrictModel):
    """The fence a write may carry."""

    fencing_token: FencingToken = None
    fencing_run_id: FencingRun = None


class PutEnvelope(Fenced):
    """The first line of a ``checkpoints:put`` body."""

    checkpoint_id: Id
    type_tag: TypeTag
    namespace: Namespace = ""
    parent_checkpoint_id: Id | None = None
    metadata: dict[str, Any] | None = None


class WriteHeader(StrictModel):
    task_id: Id
    index: Annotated[int, Field(strict=True, ge=-MAX_BIGINT - 1, le=MAX_BIGINT)]
    channel: Id
    type_tag: TypeTag
    task_path: Annotated[str, Field(max_length=1024), AfterValidator(utf8_text)] = ""
    size: Annotated[int, Field(strict=True, ge=0, description=(
        "How many of the payload bytes after the envelope are this write's."))]


class WritesEnvelope(Fenced):
    """The first line of a ``checkpoints:put_writes`` body; the writes' payloads follow,
    one after another, in this order."""

    checkpoint_id: Id
    namespace: Namespace = ""
    writes: list[WriteHeader]


class DeleteCheckpoints(Fenced):
    checkpoint_ids: list[Annotated[str, Field(max_length=256), AfterValidator(utf8_text)]]
    namespace: Namespace | None = Field(default=None, description=(
        "Only in this namespace; every namespace when absent."))


class ScopeIn(StrictModel):
    actor_id: Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(utf8_text)]
    store: Annotated[str, Field(pattern=STORE_PATTERN)]
    session_id: Id
    run_id: Id


class CopyCheckpoints(StrictModel):
    target: ScopeIn = Field(description="The run whose checkpoints are replaced.")


class Retention(StrictModel):
    keep_last: Annotated[int, Field(strict=True, ge=1, le=MAX_BIGINT)] | None = None
    # About a thousand years: an age beyond the calendar cannot be subtracted from now.
    max_age_seconds: Annotated[float, Field(strict=True, gt=0, le=3.15e10,
                                            allow_inf_nan=False)] | None = None
    drop_when_run_ends: Annotated[bool, Field(strict=True)] = False


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _out(record: CheckpointRecord) -> CheckpointOut:
    return CheckpointOut(
        run_id=record.run_id, namespace=record.namespace, checkpoint_id=record.checkpoint_id,
        parent_checkpoint_id=record.parent_checkpoint_id, type_tag=record.type_tag,
        payload=_b64(record.payload), metadata=record.metadata,
        create_time=record.create_time,
        pending_writes=[PendingWriteOut(task_id=w.task_id, index=w.index, channel=w.channel,
                                        type_tag=w.type_tag, payload=_b64(w.payload),
                                        task_path=w.task_path)
                        for w in record.pending_writes])


async def _authorize(caller: Caller, scope: CheckpointScope, level: str) -> None:
    """Pass when the caller may act at ``level`` on the scope's store; a store it may not
    read is reported as the run missing, exactly as the scoped operation would."""
    try:
        await require_session_store(caller, scope.store, level)
    except NotFound as exc:
        raise RunNotFound(f"no run {scope.run_id!r}", run_id=scope.run_id) from exc


def _split_upload(body: bytes) -> tuple[bytes, memoryview]:
    end = body.find(b"\n")
    if end < 0:
        raise InvalidInput("the body must start with one line of JSON (the envelope) "
                           "and a line feed", field="envelope")
    return bytes(body[:end]), memoryview(body)[end + 1:]


def _envelope(model: type[M], line: bytes) -> M:
    try:
        return model.model_validate_json(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "envelope"
        raise InvalidInput(f"envelope.{where}: {first['msg']}", field=where) from exc


_UPLOAD_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}


@router.post(RUN + "/checkpoints:put", response_model=CheckpointOut,
             openapi_extra=_UPLOAD_BODY)
@upload_body(upload_bound)
async def put_checkpoint(store: StorePath, session_id: str, run_id: str,
                         actor_id: ActorId, request: Request,
                         caller: CallerDep) -> CheckpointOut:
    """Store a checkpoint of the run (WRITE). The body is the envelope as one line of
    JSON (checkpoint_id, type_tag, namespace, parent_checkpoint_id, metadata), a line
    feed, then the payload bytes; storing an id again replaces it in place."""
    scope = CheckpointScope(actor_id, store, session_id, run_id)
    await _authorize(caller, scope, "WRITE")
    line, payload = _split_upload(await request.body())
    envelope = _envelope(PutEnvelope, line)
    json_utf8(envelope.metadata, "metadata")
    record = await caller.client.checkpoints.put(
        scope, envelope.checkpoint_id, type_tag=envelope.type_tag, payload=bytes(payload),
        namespace=envelope.namespace, parent_checkpoint_id=envelope.parent_checkpoint_id,
        metadata=envelope.metadata, fencing_token=envelope.fencing_token,
        fencing_run_id=envelope.fencing_run_id)
    return _out(record)


@router.post(RUN + "/checkpoints:put_writes", response_model=Empty,
             openapi_extra=_UPLOAD_BODY)
@upload_body(upload_bound)
async def put_writes(store: StorePath, session_id: str, run_id: str, actor_id: ActorId,
                     request: Request, caller: CallerDep) -> Empty:
    """Store pending writes against a stored checkpoint, all or none (WRITE). The body is
    the envelope as one line of JSON (checkpoint_id, namespace, writes: task_id, index,
    channel, type_tag, task_path and the payload's size), a line feed, then the writes'
    payloads one after another."""
    scope = CheckpointScope(actor_id, store, session_id, run_id)
    await _authorize(caller, scope, "WRITE")
    limits = caller.client.limits
    line, rest = _split_upload(await request.body())
    envelope = _envelope(WritesEnvelope, line)
    if len(envelope.writes) > limits.max_batch_items:
        raise LimitExceeded.too_many("writes per call", limits.max_batch_items,
                                     len(envelope.writes), field="writes")
    total = sum(w.size for w in envelope.writes)
    if total != len(rest):
        raise InvalidInput(f"the writes' sizes add up to {total} bytes, but {len(rest)} "
                           "follow the envelope", field="writes")
    writes: list[PendingWrite] = []
    start = 0
    for header in envelope.writes:
        writes.append(PendingWrite(
            task_id=header.task_id, index=header.index, channel=header.channel,
            type_tag=header.type_tag, payload=bytes(rest[start:start + header.size]),
            task_path=header.task_path))
        start += header.size
    await caller.client.checkpoints.put_writes(
        scope, envelope.checkpoint_id, writes, namespace=envelope.namespace,
        fencing_token=envelope.fencing_token, fencing_run_id=envelope.fencing_run_id)
    return Empty()


@router.get(RUN + "/checkpoints:get", response_model=CheckpointLookup)
async def get_checkpoint(
    store: StorePath, session_id: str, run_id: str, actor_id: ActorId, caller: CallerDep,
    checkpoint_id: Annotated[str | None, Query(min_length=1, max_length=256, description=(
        "This checkpoint; the newest in the namespace when absent."))] = None,
    namespace: Annotated[str, Query(max_length=256)] = "",
) -> CheckpointLookup:
    """A checkpoint of the run with its pending writes, or ``checkpoint: null`` (READ)."""
    scope = CheckpointScope(actor_id, store, session_id, run_id)
    await _authorize(caller, scope, "READ")
    record = await caller.client.checkpoints.get(scope, checkpoint_id, namespace=namespace)
    return CheckpointLookup(checkpoint=_out(record) if record is not None else None)


@router.get(RUN + "/checkpoints", response_model=CheckpointsOut)
async def list_checkpoints(
    store: StorePath, session_id: str, run_id: str, actor_id: ActorId, caller: CallerDep,
    namespace: Annotated[str | None, Query(max_length=256, description=(
        "Only this namespace; every namespace when absent."))] = None,
    metadata: Annotated[str | None, Query(max_length=8192, description=(
        "A JSON object: only checkpoints whose metadata holds each key with an equal "
        "JSON value."))] = None,
    before: Annotated[str | None, Query(min_length=1, max_length=256, description=(
        "Only checkpoints stored before this one."))] = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
    page_bytes: Annotated[int | None, Query(ge=1, le=MAX_BIGINT, description=(
        "At most this many payload bytes a page (the server's bound when larger)."))
    ] = None,
) -> CheckpointsOut:
    """One page of the run's checkpoints, newest first, with their pending writes (READ).

    A page holds at most ``page_size`` checkpoints and stops before the one that would
    take its payload bytes past ``page_bytes`` or the server's ``Limits.max_page_bytes``,
    but always holds one; ``next_page_token`` asks for the next."""
    scope = CheckpointScope(actor_id, store, session_id, run_id)
    await _authorize(caller, scope, "READ")
    wanted: Mapping[str, Any] | None = None
    if metadata is not None:
        parsed = decode_json(metadata, field="metadata")
        if not isinstance(parsed, dict):
            raise InvalidInput("metadata must be a JSON object", field="metadata")
        json_utf8(parsed, "metadata")
        wanted = parsed
    page = await caller.client.checkpoints.list_page(
        scope, namespace=namespace, metadata=wanted, before=before, page_size=page_size,
        page_token=page_token,
        page_bytes=min(page_bytes or MAX_BIGINT, caller.client.limits.max_page_bytes))
    return CheckpointsOut(checkpoints=[_out(r) for r in page.items],
                          next_page_token=page.next_page_token)


@router.post(RUN + "/checkpoints:delete", response_model=DeletedOut)
async def delete_checkpoints(store: StorePath, session_id: str, run_id: str,
                             actor_id: ActorId, body: DeleteCheckpoints,
                             caller: CallerDep) -> DeletedOut:
    """Delete the named checkpoints of the run with their pending writes, in one atomic
    step; ids not stored are ignored (WRITE)."""
    scope = CheckpointScope(actor_id, store, session_id, run_id)
    await _authorize(caller, scope, "WRITE")
    count = await caller.client.checkpoints.delete(
        scope, body.checkpoint_ids, namespace=body.namespace,
        fencing_token=body.fencing_token, fencing_run_id=body.fencing_run_id)
    return DeletedOut(deleted=count)


@router.delete(RUN + "/checkpoints", response_model=DeletedOut)
async def delete_run_checkpoints(store: StorePath, session_id: str, run_id: str,
                                 actor_id: ActorId, caller: CallerDep) -> DeletedOut:
    """Delete every checkpoint of the run; the run itself stays (WRITE)."""
    scope = CheckpointScope(actor_id, store, session_id, run_id)
    await _authorize(caller, scope, "WRITE")
    return DeletedOut(deleted=await caller.client.checkpoints.delete_run(scope))


@router.delete("/session-stores/{store}/sessions/{session_id}/checkpoints",
               response_model=DeletedOut)
async def delete_session_checkpoints(store: StorePath, session_id: str, actor_id: ActorId,
                                     caller: CallerDep) -> DeletedOut:
    """Delete every checkpoint of every run of the session, which must be the actor's;
    the session, its items and its runs stay (WRITE)."""
    await require_session(caller, store, session_id, "WRITE")
    count = await caller.client.checkpoints.delete_session(actor_id, store, session_id)
    return DeletedOut(deleted=count)


@router.post(RUN + "/checkpoints:copy", response_model=CopiedOut)
async def copy_checkpoints(store: StorePath, session_id: str, run_id: str,
                           actor_id: ActorId, body: CopyCheckpoints,
                           caller: CallerDep) -> CopiedOut:
    """Replace the target run's checkpoints with copies of this run's (READ here, WRITE
    on the target's store)."""
    source = CheckpointScope(actor_id, store, session_id, run_id)
    t = body.target
    target = CheckpointScope(t.actor_id, t.store, t.session_id, t.run_id)
    await _authorize(caller, source, "READ")
    await _authorize(caller, target, "WRITE")
    return CopiedOut(copied=await caller.client.checkpoints.copy(source, target))


@router.post("/checkpoints:apply_retention", response_model=RetentionOut)
async def apply_retention(body: Retention, caller: CallerDep) -> RetentionOut:
    """Delete, across the tenant, every checkpoint the policy names (admin)."""
    require_admin(caller, "apply retention across the tenant")
    report = await caller.client.checkpoints.apply_retention(RetentionPolicy(
        keep_last=body.keep_last, max_age_seconds=body.max_age_seconds,
        drop_when_run_ends=body.drop_when_run_ends))
    return RetentionOut(checkpoints_deleted=report.checkpoints_deleted,
                        bytes_freed=report.bytes_freed)


@router.get("/checkpoints:usage", response_model=UsagesOut)
async def checkpoint_usage(
    caller: CallerDep,
    run_id: Annotated[str | None, Query(min_length=1, max_length=256, description=(
        "Only this run (any key that may read it; an empty list when it holds none)."))
    ] = None,
) -> UsagesOut:
    """Checkpoints and stored payload bytes per run, largest first: across the tenant
    (admin), or of one run."""
    if run_id is None:
        require_admin(caller, "see usage across the tenant")
    elif not caller.admin:
        try:
            await require_run(caller, run_id, "READ")
        except RunNotFound:
            # A run the caller may not read holds nothing it may see.
            return UsagesOut(usage=[])
    usage = await caller.client.checkpoints.usage(run_id)
    return UsagesOut(usage=[UsageOut(run_id=u.run_id, checkpoints=u.checkpoints,
                                     stored_bytes=u.stored_bytes) for u in usage])
