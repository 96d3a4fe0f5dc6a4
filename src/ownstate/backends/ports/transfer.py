"""The transfer port: every stored row of a tenant read out exactly, and written back exactly.

Export and copy (:mod:`ownstate.archive`) move a whole deployment between backends. The
other ports cannot do that: they stamp their own times, draw their own sequence numbers
and fencing tokens, and never show a fact's record times or a key's secret hash as
writable. This port reads and writes the rows themselves, part by part.

Parts and rows. :data:`PARTS` lists the parts in the order they are restored (a part
only refers to rows of the parts before it). A row is a flat ``dict`` whose fields are
those :data:`PART_FIELDS` lists for its part, plus ``tenant`` on reading; each field has
one of the kinds of :data:`FieldKind`:

- ``text``, ``int``, ``float``, ``bool``: the Python value, or None
- ``time``: an aware :class:`~datetime.datetime`, or None
- ``json``: compact JSON text, exactly as the backend stores it (the public API encoded
  it), or None; a restore stores the text as given
- ``labels``: a ``dict[str, str]`` (session and asset metadata)
- ``bytes``: :class:`bytes`
- ``writes``: a checkpoint's pending writes, a list of rows of :data:`WRITE_FIELDS` in
  the order first stored

Order. ``export_rows`` returns a part's rows of one tenant in one order every backend
agrees on (:data:`PART_ORDER`: by the named fields, text compared by code point), except
``checkpoints``, which come per run (by run id) in the order the run stored them, so that
a restore keeps that order. Paging is by an opaque cursor the backend returns.

Restoring is idempotent: a row whose key (:data:`PART_KEYS`) is already stored is left
as it is and not counted, so a restore stopped part-way and run again stores each row
once. A restore writes a batch in one transaction (on Redis, which has none across
hash slots, one script per slot, each row's slots in the order its own writes use).
Backends that keep derived state (a session's item count, a search index, a run's place
in the status index) bring it up to date with the rows.

It may touch the errors alone, and no datastore: each backend implements it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

from ...errors import InvalidInput

__all__ = ["PARTS", "PART_FIELDS", "PART_KEYS", "PART_ORDER", "WRITE_FIELDS", "Cursor",
           "FieldKind", "Row", "TransferPort", "missing_parent", "order_key", "page_of"]

Row = dict[str, Any]
Cursor = tuple[Any, ...]
FieldKind = Literal["text", "int", "float", "bool", "time", "json", "labels", "bytes",
                    "writes"]

#: The fields of a pending write inside a checkpoint row.
WRITE_FIELDS: dict[str, FieldKind] = {
    "task_id": "text", "index": "int", "channel": "text", "type_tag": "text",
    "payload": "bytes", "task_path": "text",
}

#: Each part's fields and their kinds, in restore order.
PART_FIELDS: dict[str, dict[str, FieldKind]] = {
    "session_stores": {"name": "text", "create_time": "time", "index_items": "bool"},
    "sessions": {
        "store": "text", "session_id": "text", "actor_id": "text",
        "parent_session_id": "text", "root_session_id": "text", "metadata": "labels",
        "create_time": "time", "last_activity_time": "time",
    },
    "items": {
        "store": "text", "session_id": "text", "seq": "int", "item_id": "text",
        "create_time": "time", "format": "text", "data": "json", "role": "text",
        "type": "text", "tool_name": "text", "model": "text", "in_tokens": "int",
        "out_tokens": "int",
    },
    "idempotency_keys": {"store": "text", "session_id": "text", "key": "text",
                         "request_hash": "text", "item_ids": "json"},
    "memory_stores": {"name": "text", "create_time": "time"},
    "facts": {
        "memory_store": "text", "fact_id": "text", "subject": "text", "key": "text",
        "value": "json", "confidence": "float", "source_type": "text",
        "source_store": "text", "source_session_id": "text", "source_item_id": "text",
        "valid_from": "time", "valid_to": "time", "recorded_at": "time",
        "superseded_at": "time", "supersedes": "text", "closed_reason": "text",
    },
    "runs": {
        "run_id": "text", "store": "text", "session_id": "text", "actor_id": "text",
        "framework": "text", "thread_key": "text", "status": "text",
        "status_since": "time", "awaiting": "json", "step_count": "int",
        "usd_cost": "float", "started_at": "time", "ended_at": "time",
        "lease_owner": "text", "lease_expires_at": "time", "fencing_token": "int",
        "decision": "json", "decisions": "json",
    },
    "effects": {"run_id": "text", "tool_call_id": "text", "result": "json",
                "recorded_at": "time"},
    "checkpoints": {
        "run_id": "text", "namespace": "text", "checkpoint_id": "text",
        "parent_checkpoint_id": "text", "type_tag": "text", "metadata": "json",
        "create_time": "time", "payload": "bytes", "writes": "writes",
    },
    "asset_contents": {"sha256": "text", "data": "bytes"},
    "assets": {
        "asset_id": "text", "sha256": "text", "size": "int", "media_type": "text",
        "store": "text", "session_id": "text", "metadata": "labels", "create_time": "time",
    },
    "grants": {"kind": "text", "store": "text", "principal": "text", "level": "text"},
    "api_keys": {"key_id": "text", "principal": "text", "admin": "bool",
                 "create_time": "time", "revoked_at": "time", "secret_hash": "text"},
}

PARTS: tuple[str, ...] = tuple(PART_FIELDS)

#: What names a row within its tenant: a restore skips a row whose key is stored.
PART_KEYS: dict[str, tuple[str, ...]] = {
    "session_stores": ("name",),
    "sessions": ("store", "session_id"),
    "items": ("store", "session_id", "seq"),
    "idempotency_keys": ("store", "session_id", "key"),
    "memory_stores": ("name",),
    "facts": ("fact_id",),
    "runs": ("run_id",),
    "effects": ("run_id", "tool_call_id"),
    "checkpoints": ("run_id", "namespace", "checkpoint_id"),
    "asset_contents": ("sha256",),
    "assets": ("asset_id",),
    "grants": ("kind", "store", "principal"),
    "api_keys": ("key_id",),
}

#: The order of a part's rows in an export (checkpoints: by run, then as stored). Where
#: the backends keep an order of their own (sessions, runs, facts and assets as made),
#: rows come in the order their times give, which a restore makes the stored order.
PART_ORDER: dict[str, tuple[str, ...]] = {
    **PART_KEYS,
    "sessions": ("store", "create_time", "session_id"),
    "facts": ("memory_store", "recorded_at", "fact_id"),
    "runs": ("started_at", "run_id"),
    "checkpoints": ("run_id",),
    "assets": ("create_time", "asset_id"),
}


def missing_parent(part: str, what: str, name: str) -> InvalidInput:
    """The refusal of a restore batch of ``part`` whose rows name a ``what`` (a store, a
    memory store, a run) that is not stored: the same words on every backend."""
    return InvalidInput(f"a row of {part} names the missing {what} {name!r}", field=part)


def _unsupported(backend: object) -> InvalidInput:
    return InvalidInput(f"{type(backend).__name__} cannot export or restore rows exactly "
                        "(it does not declare Capability.TRANSFER)", field="url")


class TransferPort:
    """Exact bulk reads and writes of stored rows (see the module docstring).

    A backend that cannot offer them (a remote server) does not declare
    :attr:`~ownstate.backends.Capability.TRANSFER`, and its methods raise
    :class:`~ownstate.errors.InvalidInput`.
    """

    async def transfer_tenants(self) -> list[str]:
        """Every tenant that holds any row, sorted."""
        raise _unsupported(self)

    def export_snapshot(self) -> AbstractAsyncContextManager[None]:
        """Within it (in this task and the tasks it starts), ``transfer_tenants`` and
        ``export_rows`` of this backend read one consistent snapshot of the database,
        where the backend can keep one: SQLite (one read transaction on a connection of
        its own) and PostgreSQL (an exported snapshot every page's REPEATABLE READ
        transaction adopts). Elsewhere each page reads what is there when it is read
        (memory: each page under the data lock; Redis: each read as of itself)."""
        return _no_snapshot()

    async def export_rows(self, tenant: str, part: str, after: Cursor | None,
                          limit: int) -> tuple[list[Row], Cursor | None]:
        """Up to ``limit`` rows of ``part`` in the tenant, strictly after ``after``, in
        the export order; and the cursor to continue from, None when none remain."""
        raise _unsupported(self)

    async def restore_rows(self, tenant: str, part: str, rows: Sequence[Row]) -> int:
        """Store the rows exactly, in one transaction, skipping those whose key is
        already stored; returns how many were stored. Rows of a part refer only to rows
        of earlier parts, which are restored first.

        Raises :class:`~ownstate.errors.InvalidInput` for a row that refers to a row that
        is not stored (an item of a missing session)."""
        raise _unsupported(self)


@asynccontextmanager
async def _no_snapshot() -> AsyncIterator[None]:
    yield


def order_key(part: str, row: Row) -> Cursor:
    """Where ``row`` stands in its part's export order (for checkpoints: the run only)."""
    return tuple(row[name] for name in PART_ORDER[part])


def page_of(part: str, rows: Sequence[Row], after: Cursor | None,
            limit: int) -> tuple[list[Row], Cursor | None]:
    """One page of ``rows`` (every row of a part, in any order) in the export order, for a
    backend that builds the part in memory: the rows after the cursor ``after`` (an
    :func:`order_key`), and the cursor of the last one when more remain."""
    ordered = sorted(rows, key=lambda row: order_key(part, row))
    if after is not None:
        ordered = [row for row in ordered if order_key(part, row) > tuple(after)]
    page = ordered[:limit]
    return page, (order_key(part, page[-1]) if len(ordered) > limit else None)
