"""The transfer port's SQL, shared by the SQLite and PostgreSQL backends.

Each export query selects a part's fields in the order :data:`PART_FIELDS` lists them,
then the columns of its keyset cursor, for one tenant, after a cursor, in the export
order (text compared by code point: ``COLLATE "C"`` on PostgreSQL, SQLite's default).
Each restore statement inserts one row and does nothing when its key is stored. What
differs between the two databases (placeholders, casts to and from JSON, how times are
stored) comes in a :class:`Dialect`. Items, the part that is large, are paged by each
backend its own way. A run's decisions are read out in one spelling whatever the column
(SQLite's text, PostgreSQL's ``jsonb``): compact JSON of
:meth:`~ownstate.model.Decision.to_json`, as the memory backend writes it. It may touch the
transfer port and the model alone: no driver, no connection.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import Decision
from .ports.transfer import PART_FIELDS, Row

__all__ = ["CHECKPOINT_WRITES", "EXPORTS", "LARGE_ROWS", "RESTORES", "TENANTS", "Dialect",
           "checkpoint_page", "decision_text", "export_query", "make_row", "restore_sql",
           "stored_row"]

#: the most rows of a part whose rows hold payloads of any size that one page reads, so
#: that a page of them stays far from filling memory (their bytes are bounded per row)
LARGE_ROWS = {"checkpoints": 64, "asset_contents": 8}


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one database spells what the shared statements leave open."""

    #: the driver's placeholder
    p: str
    #: appended to a text column in ORDER BY and cursor comparisons
    collate: str
    #: how a JSON column is read as text (``{}`` is the column)
    json_out: str
    #: the placeholder for JSON text going in, and for bytes
    json_in: str
    bytes_in: str
    #: a stored time as the row's datetime, and back
    time_out: Callable[[Any], Any]
    time_in: Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Export:
    """One part's export query: its columns (``{j}`` marks a JSON column), its tables and
    tenant column, and the cursor columns with whether each is text."""

    columns: tuple[str, ...]
    source: str
    tenant: str
    cursor: tuple[tuple[str, bool], ...]


EXPORTS: dict[str, Export] = {
    "session_stores": Export(("name", "create_time", "index_items"), "session_stores",
                             "tenant", (("name", True),)),
    "sessions": Export(
        ("store", "session_id", "actor_id", "parent_session_id", "root_session_id",
         "{j}metadata", "create_time", "last_activity_time"), "sessions", "tenant",
        (("store", True), ("create_time", False), ("session_id", True))),
    "idempotency_keys": Export(
        ("s.store", "s.session_id", "k.key", "k.request_hash", "{j}k.item_ids"),
        "idempotency_keys k JOIN sessions s ON s.sid = k.sid", "k.tenant",
        (("s.store", True), ("s.session_id", True), ("k.key", True))),
    "memory_stores": Export(("name", "create_time"), "memory_stores", "tenant",
                            (("name", True),)),
    "facts": Export(
        ("memory_store", "fact_id", "subject", "key", "{j}value", "confidence",
         "source_type", "source_store", "source_session_id", "source_item_id", "valid_from",
         "valid_to", "recorded_at", "superseded_at", "supersedes", "closed_reason"),
        "facts", "tenant",
        (("memory_store", True), ("recorded_at", False), ("fact_id", True))),
    "runs": Export(
        ("run_id", "store", "session_id", "actor_id", "framework", "thread_key", "status",
         "status_since", "{j}awaiting", "step_count", "usd_cost", "started_at", "ended_at",
         "lease_owner", "lease_expires_at", "fencing_token", "{j}decision", "{j}decisions"),
        "runs", "tenant",
        (("started_at", False), ("run_id", True))),
    "effects": Export(
        ("r.run_id", "e.tool_call_id", "{j}e.result", "e.recorded_at"),
        "run_effects e JOIN runs r ON r.rid = e.rid", "e.tenant",
        (("r.run_id", True), ("e.tool_call_id", True))),
    "checkpoints": Export(
        ("r.run_id", "c.namespace", "c.checkpoint_id", "c.parent_checkpoint_id",
         "c.type_tag", "{j}c.metadata", "c.create_time", "c.payload"),
        "checkpoints c JOIN runs r ON r.rid = c.rid", "c.tenant",
        (("r.run_id", True), ("c.cid", False))),
    "asset_contents": Export(("sha256", "data"), "asset_blobs", "tenant",
                             (("sha256", True),)),
    "assets": Export(
        ("a.asset_id", "a.sha256", "a.size", "a.media_type", "s.store", "s.session_id",
         "{j}a.metadata", "a.create_time"),
        "assets a LEFT JOIN sessions s ON s.sid = a.sid", "a.tenant",
        (("a.create_time", False), ("a.asset_id", True))),
    "grants": Export(("kind", "store", "principal", "level"), "store_grants", "tenant",
                     (("kind", True), ("store", True), ("principal", True))),
    "api_keys": Export(("key_id", "principal", "admin", "create_time", "revoked_at",
                        "secret_hash"), "api_keys", "tenant", (("key_id", True),)),
}

#: every tenant holding a row; runs, items and the rest belong to a store's tenant
TENANTS = ("SELECT tenant FROM session_stores UNION SELECT tenant FROM memory_stores "
           "UNION SELECT tenant FROM assets UNION SELECT tenant FROM store_grants "
           "UNION SELECT tenant FROM api_keys ORDER BY 1")


def export_query(d: Dialect, part: str, after: Sequence[Any] | None,
                 limit: int) -> tuple[str, list[Any]]:
    """The page query of a part (not items) and its parameters."""
    spec = EXPORTS[part]
    columns = [d.json_out.format(c[3:]) if c.startswith("{j}") else c for c in spec.columns]
    cursor = [c for c, _ in spec.cursor]
    ordered = [c + (d.collate if text else "") for c, text in spec.cursor]
    where = f"{spec.tenant} = {d.p}"
    params: list[Any] = []
    if after is not None:
        marks = ", ".join([d.p] * len(cursor))
        where += f" AND ({', '.join(ordered)}) > ({marks})"
        params.extend(after)
    sql = (f"SELECT {', '.join(columns + cursor)} FROM {spec.source} WHERE {where} "
           f"ORDER BY {', '.join(ordered)} LIMIT {int(limit)}")
    return sql, params


#: the columns of a checkpoint's pending writes that a checkpoints page reads, by ``cid``;
#: each backend adds its own ``WHERE cid`` test (an array on PostgreSQL, chunks of
#: placeholders on SQLite)
CHECKPOINT_WRITES = ("SELECT cid, task_id, idx, channel, type_tag, payload, task_path FROM "
                     "checkpoint_writes")


def checkpoint_page(d: Dialect, found: Sequence[Sequence[Any]], limit: int,
                    writes: Iterable[Sequence[Any]]) -> tuple[list[Row], tuple[Any, ...] | None]:
    """A checkpoints page from up to ``limit + 1`` rows of its export query (``found``)
    and the :data:`CHECKPOINT_WRITES` rows of the first ``limit`` (``writes``, in write
    order): each checkpoint's row carries its writes; the cursor is there when more
    rows follow."""
    held: dict[int, list[Row]] = {}
    for w in writes:
        held.setdefault(w[0], []).append(
            {"task_id": w[1], "index": w[2], "channel": w[3], "type_tag": w[4],
             "payload": bytes(w[5]), "task_path": w[6]})
    rows = []
    for r in found[:limit]:
        row = make_row(d, "checkpoints", r[:8])
        row["writes"] = held.get(r[9], [])
        rows.append(row)
    return rows, (tuple(found[limit - 1][8:]) if len(found) > limit else None)


def make_row(d: Dialect, part: str, values: Sequence[Any]) -> Row:
    """A part's row from the values its export query selected (in field order)."""
    row: Row = {}
    for (name, kind), value in zip(PART_FIELDS[part].items(), values, strict=False):
        if value is None:
            row[name] = None
        elif kind == "time":
            row[name] = d.time_out(value)
        elif kind == "labels":
            row[name] = json.loads(value)
        elif kind == "bool":
            row[name] = bool(value)
        elif kind == "bytes":
            row[name] = bytes(value)
        elif kind == "float":
            row[name] = float(value)
        else:
            row[name] = value
    if part == "idempotency_keys":
        # compact, as the other backends hold it (PostgreSQL's jsonb reads back spaced)
        row["item_ids"] = json.dumps(json.loads(row["item_ids"]), ensure_ascii=False,
                                     separators=(",", ":"))
    if part == "runs":
        row["decision"] = decision_text(row["decision"], many=False)
        row["decisions"] = decision_text(row["decisions"], many=True)
    return row


def decision_text(stored: str | None, *, many: bool) -> str | None:
    """A stored decision (or list of them) as compact JSON of ``Decision.to_json``."""
    if stored is None:
        return None
    found = json.loads(stored)
    value = ([Decision.from_json(d).to_json() for d in found] if many
             else Decision.from_json(found).to_json())
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _sid(p: str) -> str:
    return f"(SELECT sid FROM sessions WHERE tenant = {p} AND store = {p} AND session_id = {p})"


#: per part (not items, facts, checkpoints: each backend writes those its own way), the
#: INSERT of one row and the row's parameters in order (times already as stored)
RESTORES: dict[str, tuple[str, Callable[[str, Row], tuple[Any, ...]]]] = {
    "session_stores": (
        "INSERT INTO session_stores (tenant, name, create_time, index_items) "
        "VALUES ({p}, {p}, {p}, {p}) ON CONFLICT DO NOTHING",
        lambda t, r: (t, r["name"], r["create_time"], r["index_items"])),
    "sessions": (
        "INSERT INTO sessions (tenant, store, session_id, actor_id, parent_session_id, "
        "root_session_id, metadata, create_time, last_activity_time) "
        "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {j}, {p}, {p}) ON CONFLICT DO NOTHING",
        lambda t, r: (t, r["store"], r["session_id"], r["actor_id"], r["parent_session_id"],
                      r["root_session_id"], json.dumps(r["metadata"], ensure_ascii=False),
                      r["create_time"], r["last_activity_time"])),
    # the key's create time, which nothing reads, is the time of the restore
    "idempotency_keys": (
        "INSERT INTO idempotency_keys (sid, key, tenant, request_hash, item_ids, create_time) "
        "SELECT sid, {p}, {p}, {p}, {j}, {p} FROM sessions "
        "WHERE tenant = {p} AND store = {p} AND session_id = {p} ON CONFLICT DO NOTHING",
        lambda t, r: (r["key"], t, r["request_hash"], r["item_ids"], r["_now"], t, r["store"],
                      r["session_id"])),
    "memory_stores": (
        "INSERT INTO memory_stores (tenant, name, create_time) VALUES ({p}, {p}, {p}) "
        "ON CONFLICT DO NOTHING",
        lambda t, r: (t, r["name"], r["create_time"])),
    "runs": (
        "INSERT INTO runs (sid, tenant, run_id, store, session_id, actor_id, framework, "
        "thread_key, status, status_since, awaiting, step_count, usd_cost, started_at, "
        "ended_at, lease_owner, lease_expires_at, fencing_token, decision, decisions) "
        "SELECT sid, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {j}, {p}, {p}, {p}, {p}, "
        "{p}, {p}, {p}, {j}, {j} FROM sessions "
        "WHERE tenant = {p} AND store = {p} AND session_id = {p} ON CONFLICT DO NOTHING",
        lambda t, r: (t, r["run_id"], r["store"], r["session_id"], r["actor_id"],
                      r["framework"], r["thread_key"], r["status"], r["status_since"],
                      r["awaiting"], r["step_count"], r["usd_cost"], r["started_at"],
                      r["ended_at"], r["lease_owner"], r["lease_expires_at"],
                      r["fencing_token"], r["decision"], r["decisions"], t, r["store"],
                      r["session_id"])),
    "effects": (
        "INSERT INTO run_effects (rid, tool_call_id, tenant, result, recorded_at) "
        "SELECT rid, {p}, {p}, {j}, {p} FROM runs WHERE tenant = {p} AND run_id = {p} "
        "ON CONFLICT DO NOTHING",
        lambda t, r: (r["tool_call_id"], t, r["result"], r["recorded_at"], t, r["run_id"])),
    "asset_contents": (
        "INSERT INTO asset_blobs (tenant, sha256, size, create_time, data) "
        "VALUES ({p}, {p}, {p}, {p}, {b}) ON CONFLICT DO NOTHING",
        lambda t, r: (t, r["sha256"], len(r["data"]), r["_now"], r["data"])),
    "assets": (
        "INSERT INTO assets (tenant, asset_id, sid, sha256, size, media_type, metadata, "
        "create_time) VALUES ({p}, {p}, " + _sid("{p}") + ", {p}, {p}, {p}, {j}, {p}) "
        "ON CONFLICT DO NOTHING",
        lambda t, r: (t, r["asset_id"], t, r["store"], r["session_id"], r["sha256"],
                      r["size"], r["media_type"], json.dumps(r["metadata"], ensure_ascii=False),
                      r["create_time"])),
    "grants": (
        "INSERT INTO store_grants (tenant, kind, store, principal, level) "
        "VALUES ({p}, {p}, {p}, {p}, {p}) ON CONFLICT DO NOTHING",
        lambda t, r: (t, r["kind"], r["store"], r["principal"], r["level"])),
    "api_keys": (
        "INSERT INTO api_keys (key_id, tenant, principal, admin, create_time, revoked_at, "
        "secret_hash) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT DO NOTHING",
        lambda t, r: (r["key_id"], t, r["principal"], r["admin"], r["create_time"],
                      r["revoked_at"], r["secret_hash"])),
}


def restore_sql(d: Dialect, part: str) -> str:
    """The INSERT of :data:`RESTORES` for ``part`` in the dialect's spelling."""
    return RESTORES[part][0].format(p=d.p, j=d.json_in, b=d.bytes_in)


def stored_row(d: Dialect, part: str, row: Row) -> Row:
    """``row`` with its times as the database stores them."""
    out = dict(row)
    for name, kind in PART_FIELDS[part].items():
        if kind == "time" and out.get(name) is not None:
            out[name] = d.time_in(out[name])
    return out
