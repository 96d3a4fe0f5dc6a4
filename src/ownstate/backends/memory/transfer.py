"""Exact export and restore of every record, in memory (the transfer port).

Reads the records the other parts of the backend keep in ``_data`` and writes them back
under the same keys, with their own times, sequence numbers and tokens; restoring a row
whose key is held already leaves it alone. Every call works under the data lock.

It may touch the in-memory data (``_data``) and the checkpoint, fact and run parts beside
it, the transfer and search ports, an item's derived columns (``formats.derive``), the
model and errors, nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from ...errors import InvalidInput, SessionNotFound
from ...formats.derive import DerivedColumns
from ...model import (
    ApiKey,
    AssetRef,
    CheckpointRecord,
    Decision,
    Fact,
    MemoryStoreRecord,
    PendingWrite,
    Run,
    SessionRecord,
    SessionStoreRecord,
)
from ..ports.search import fact_text, item_text, terms
from ..ports.transfer import Cursor, Row, missing_parent, order_key
from ._data import MemoryBase, _StoredItem, _StoredSession
from .checkpoints import _RunCheckpoints, _StoredCheckpoint
from .facts import _StoredFact, _StoreFacts
from .runs import _StoredRun

__all__ = ["TransferInMemory"]


def _compact(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _keyed(part: str, rows: Iterator[Row]) -> list[tuple[Cursor, Row]]:
    return [(order_key(part, row), row) for row in rows]


def _put_new(table: dict[Any, Any], key: Any, make: Callable[[], Any]) -> bool:
    """The restore rule: store ``make()`` under ``key`` unless the key is held already;
    returns whether it stored."""
    if key in table:
        return False
    table[key] = make()
    return True


class TransferInMemory(MemoryBase):
    """The transfer port over ``_data``."""

    async def transfer_tenants(self) -> list[str]:
        d = self._data
        with d.lock:
            found = {k[0] for table in (d.stores, d.sessions, d.memory_stores, d.runs,
                                        d.assets, d.grants) for k in table}
            found.update(key.tenant for key, _ in d.api_keys.values())
        return sorted(found)

    # export ----------------------------------------------------------------------------

    def _rows(self, tenant: str, part: str) -> list[tuple[Cursor, Row]]:
        """Every row of the part with its place in the export order."""
        d = self._data
        if part == "session_stores":
            return _keyed(part, ({"name": r.name, "create_time": r.create_time,
                                  "index_items": (t, r.name) not in d.unindexed}
                                 for (t, _), r in d.stores.items() if t == tenant))
        if part == "sessions":
            return _keyed(part, (_session_row(s.record) for (t, _, _), s in d.sessions.items()
                                 if t == tenant))
        if part == "idempotency_keys":
            return _keyed(part, ({"store": store, "session_id": sid, "key": key,
                                  "request_hash": request_hash, "item_ids": _compact(ids)}
                                 for (t, store, sid), s in d.sessions.items() if t == tenant
                                 for key, (request_hash, ids) in s.idempotency.items()))
        if part == "memory_stores":
            return _keyed(part, ({"name": s.record.name, "create_time": s.record.create_time}
                                 for (t, _), s in d.memory_stores.items() if t == tenant))
        if part == "facts":
            return _keyed(part, (_fact_row(f.record, f.value_json)
                                 for (t, _), s in d.memory_stores.items() if t == tenant
                                 for chain in s.chains.values() for f in chain))
        if part == "runs":
            return _keyed(part, (_run_row(s.record, s.since)
                                 for (t, _), s in d.runs.items() if t == tenant))
        if part == "effects":
            return _keyed(part, ({"run_id": run_id, "tool_call_id": call, "result": result,
                                  "recorded_at": at}
                                 for (t, run_id, call), (result, at) in d.effects.items()
                                 if t == tenant))
        if part == "checkpoints":
            return [((run_id, c.ordinal), _checkpoint_row(c.record, c.metadata_json,
                                                          c.writes.values()))
                    for (t, run_id), held in d.checkpoints.items() if t == tenant
                    for c in held.entries.values()]
        if part == "asset_contents":
            return _keyed(part, ({"sha256": sha, "data": data}
                                 for (t, sha), data in d.blobs.items() if t == tenant))
        if part == "assets":
            return _keyed(part, (_asset_row(ref) for (t, _), ref in d.assets.items()
                                 if t == tenant))
        if part == "grants":
            return _keyed(part, ({"kind": kind, "store": store, "principal": p, "level": lv}
                                 for (t, kind, store), held in d.grants.items() if t == tenant
                                 for p, lv in held.items()))
        if part == "api_keys":
            return _keyed(part, ({"key_id": k.key_id, "principal": k.principal,
                                  "admin": k.admin, "create_time": k.create_time,
                                  "revoked_at": k.revoked_at, "secret_hash": digest}
                                 for k, digest in d.api_keys.values() if k.tenant == tenant))
        raise InvalidInput(f"no part named {part!r}", field="part")

    async def export_rows(self, tenant: str, part: str, after: Cursor | None,
                          limit: int) -> tuple[list[Row], Cursor | None]:
        with self._data.lock:
            if part == "items":
                return self._item_page(tenant, after, limit)
            keyed = self._rows(tenant, part)
        keyed.sort(key=lambda kv: kv[0])
        if after is not None:
            keyed = [kv for kv in keyed if kv[0] > tuple(after)]
        page = keyed[:limit]
        return [row for _, row in page], (page[-1][0] if len(keyed) > limit else None)

    def _item_page(self, tenant: str, after: Cursor | None,
                   limit: int) -> tuple[list[Row], Cursor | None]:
        sessions = sorted((k[1], k[2]) for k in self._data.sessions if k[0] == tenant)
        start = (after[0], after[1]) if after is not None else None
        rows: list[Row] = []
        for store, session_id in sessions:
            if start is not None and (store, session_id) < start:
                continue
            # seq n is at index n - 1: the rows after seq m start at index m
            first = int(after[2]) if after is not None and (store, session_id) == start else 0
            items = self._data.sessions[(tenant, store, session_id)].items
            for index in range(first, len(items)):
                if len(rows) == limit:
                    last = rows[-1]
                    return rows, (last["store"], last["session_id"], last["seq"])
                it = items[index]
                rows.append({"store": store, "session_id": session_id, "seq": it.seq,
                             "item_id": it.item_id, "create_time": it.create_time,
                             "format": it.format, "data": it.data_json,
                             **it.columns._asdict()})
        return rows, None

    # restore ---------------------------------------------------------------------------

    async def restore_rows(self, tenant: str, part: str, rows: Sequence[Row]) -> int:
        put = self._restorers().get(part)
        if put is None:
            raise InvalidInput(f"no part named {part!r}", field="part")
        with self._data.lock:
            # check every row first, so a batch is stored whole or not at all
            for row in rows:
                self._check_refs(tenant, part, row)
            return sum(1 for row in rows if put(tenant, row))

    def _restorers(self) -> dict[str, Callable[[str, Row], bool]]:
        return {"session_stores": self._put_store, "sessions": self._put_session,
                "items": self._put_item, "idempotency_keys": self._put_idempotency,
                "memory_stores": self._put_memory_store,
                "facts": self._put_fact, "runs": self._put_run, "effects": self._put_effect,
                "checkpoints": self._put_checkpoint, "asset_contents": self._put_content,
                "assets": self._put_asset, "grants": self._put_grant,
                "api_keys": self._put_key}

    def _check_refs(self, tenant: str, part: str, row: Row) -> None:
        d = self._data
        if part == "sessions" and (tenant, row["store"]) not in d.stores:
            raise missing_parent("sessions", "store", row["store"])
        owned = part in ("items", "idempotency_keys", "runs") or (
            part == "assets" and row["store"] is not None)
        if owned and (tenant, row["store"], row["session_id"]) not in d.sessions:
            raise SessionNotFound(store=row["store"], session_id=row["session_id"])
        if part == "facts" and (tenant, row["memory_store"]) not in d.memory_stores:
            raise missing_parent("facts", "memory store", row["memory_store"])
        if part in ("effects", "checkpoints") and (tenant, row["run_id"]) not in d.runs:
            raise missing_parent(part, "run", row["run_id"])
        if part == "assets" and (tenant, row["sha256"]) not in d.blobs:
            raise InvalidInput(f"asset {row['asset_id']!r} has no content", field="assets")

    def _put_store(self, tenant: str, row: Row) -> bool:
        key = (tenant, row["name"])
        if not _put_new(self._data.stores, key,
                        lambda: SessionStoreRecord(tenant, row["name"], row["create_time"])):
            return False
        if row["index_items"]:
            self._data.unindexed.discard(key)
        else:
            self._data.unindexed.add(key)
        return True

    def _put_session(self, tenant: str, row: Row) -> bool:
        record = SessionRecord(
            tenant=tenant, store=row["store"], session_id=row["session_id"],
            actor_id=row["actor_id"], parent_session_id=row["parent_session_id"],
            root_session_id=row["root_session_id"], metadata=dict(row["metadata"]),
            create_time=row["create_time"], last_activity_time=row["last_activity_time"])
        if not _put_new(self._data.sessions, (tenant, row["store"], row["session_id"]),
                        lambda: _StoredSession(record=record,
                                               ordinal=self._data.next_ordinal)):
            return False
        self._data.next_ordinal += 1
        return True

    def _put_item(self, tenant: str, row: Row) -> bool:
        stored = self._data.sessions[(tenant, row["store"], row["session_id"])]
        if row["seq"] <= len(stored.items):
            return False
        if row["seq"] != len(stored.items) + 1:
            raise InvalidInput(f"item {row['item_id']!r} has seq {row['seq']} but session "
                               f"{row['session_id']!r} holds {len(stored.items)} items",
                               field="items")
        stored.items.append(_StoredItem(
            item_id=row["item_id"], seq=row["seq"], create_time=row["create_time"],
            data_json=row["data"], format=row["format"],
            columns=DerivedColumns._make(row[name] for name in DerivedColumns._fields),
            terms=(() if (tenant, row["store"]) in self._data.unindexed
                   else tuple(terms(item_text(json.loads(row["data"])))))))
        return True

    def _put_idempotency(self, tenant: str, row: Row) -> bool:
        held = self._data.sessions[(tenant, row["store"], row["session_id"])].idempotency
        return _put_new(held, row["key"],
                        lambda: (row["request_hash"], list(json.loads(row["item_ids"]))))

    def _put_memory_store(self, tenant: str, row: Row) -> bool:
        return _put_new(self._data.memory_stores, (tenant, row["name"]), lambda: _StoreFacts(
            MemoryStoreRecord(tenant, row["name"], row["create_time"])))

    def _put_fact(self, tenant: str, row: Row) -> bool:
        facts = self._data.memory_stores[(tenant, row["memory_store"])]
        if row["fact_id"] in facts.by_id:
            return False
        record = Fact(
            fact_id=row["fact_id"], memory_store=row["memory_store"], subject=row["subject"],
            key=row["key"], value=None, confidence=row["confidence"],
            source_type=row["source_type"], source_session_id=row["source_session_id"],
            source_item_id=row["source_item_id"], valid_from=row["valid_from"],
            valid_to=row["valid_to"], recorded_at=row["recorded_at"],
            superseded_at=row["superseded_at"], supersedes=row["supersedes"],
            closed_reason=row["closed_reason"], source_store=row["source_store"])
        chain = facts.chains.setdefault((row["subject"], row["key"]), [])
        chain.append(_StoredFact(record, row["value"],
                                 tuple(terms(fact_text(row["key"], json.loads(row["value"])))),
                                 self._data.next("facts")))
        chain.sort(key=_record_order)
        facts.by_id[row["fact_id"]] = (row["subject"], row["key"])
        return True

    def _put_run(self, tenant: str, row: Row) -> bool:
        def stored() -> _StoredRun:
            awaiting = None if row["awaiting"] is None else json.loads(row["awaiting"])
            run = Run(run_id=row["run_id"], store=row["store"], session_id=row["session_id"],
                      actor_id=row["actor_id"], framework=row["framework"],
                      thread_key=row["thread_key"], status=row["status"], awaiting=awaiting,
                      step_count=row["step_count"], usd_cost=row["usd_cost"],
                      started_at=row["started_at"], ended_at=row["ended_at"],
                      lease_owner=row["lease_owner"],
                      lease_expires_at=row["lease_expires_at"],
                      fencing_token=row["fencing_token"],
                      decision=_decision(row["decision"]),
                      decisions=tuple(Decision.from_json(d)
                                      for d in json.loads(row["decisions"] or "[]")))
            return _StoredRun(run, self._data.next("runs"), row["status_since"])
        return _put_new(self._data.runs, (tenant, row["run_id"]), stored)

    def _put_effect(self, tenant: str, row: Row) -> bool:
        return _put_new(self._data.effects, (tenant, row["run_id"], row["tool_call_id"]),
                        lambda: (row["result"], row["recorded_at"]))

    def _put_checkpoint(self, tenant: str, row: Row) -> bool:
        run: Run = self._data.runs[(tenant, row["run_id"])].record
        held = self._data.checkpoints.get((tenant, run.run_id))
        if held is None:
            held = _RunCheckpoints(run.store, run.session_id, run.actor_id)
            self._data.checkpoints[(tenant, run.run_id)] = held

        def stored() -> _StoredCheckpoint:
            record = CheckpointRecord(
                run_id=run.run_id, namespace=row["namespace"],
                checkpoint_id=row["checkpoint_id"],
                parent_checkpoint_id=row["parent_checkpoint_id"], type_tag=row["type_tag"],
                payload=bytes(row["payload"]), metadata={}, create_time=row["create_time"])
            entry = _StoredCheckpoint(self._data.next("checkpoint"), record, row["metadata"])
            for w in row["writes"]:
                entry.writes[(w["task_id"], w["index"])] = PendingWrite(
                    w["task_id"], w["index"], w["channel"], w["type_tag"],
                    bytes(w["payload"]), w["task_path"])
            return entry
        return _put_new(held.entries, (row["namespace"], row["checkpoint_id"]), stored)

    def _put_content(self, tenant: str, row: Row) -> bool:
        return _put_new(self._data.blobs, (tenant, row["sha256"]), lambda: bytes(row["data"]))

    def _put_asset(self, tenant: str, row: Row) -> bool:
        return _put_new(self._data.assets, (tenant, row["asset_id"]), lambda: AssetRef(
            asset_id=row["asset_id"], sha256=row["sha256"], size=row["size"],
            media_type=row["media_type"], store=row["store"], session_id=row["session_id"],
            metadata=dict(row["metadata"]), create_time=row["create_time"]))

    def _put_grant(self, tenant: str, row: Row) -> bool:
        held = self._data.grants.setdefault((tenant, row["kind"], row["store"]), {})
        return _put_new(held, row["principal"], lambda: row["level"])

    def _put_key(self, tenant: str, row: Row) -> bool:
        key = ApiKey(key_id=row["key_id"], tenant=tenant, principal=row["principal"],
                     admin=row["admin"], create_time=row["create_time"],
                     revoked_at=row["revoked_at"])
        return _put_new(self._data.api_keys, row["key_id"], lambda: (key, row["secret_hash"]))


def _record_order(stored: _StoredFact) -> tuple[datetime, bool, int]:
    """A (subject, key) chain's order: by record time, the current fact last."""
    record = stored.record
    return (record.recorded_at, record.superseded_at is None, stored.order)


def _session_row(r: SessionRecord) -> Row:
    return {"store": r.store, "session_id": r.session_id, "actor_id": r.actor_id,
            "parent_session_id": r.parent_session_id, "root_session_id": r.root_session_id,
            "metadata": dict(r.metadata), "create_time": r.create_time,
            "last_activity_time": r.last_activity_time}


def _fact_row(f: Fact, value_json: str) -> Row:
    return {"memory_store": f.memory_store, "fact_id": f.fact_id, "subject": f.subject,
            "key": f.key, "value": value_json, "confidence": f.confidence,
            "source_type": f.source_type, "source_store": f.source_store,
            "source_session_id": f.source_session_id, "source_item_id": f.source_item_id,
            "valid_from": f.valid_from, "valid_to": f.valid_to, "recorded_at": f.recorded_at,
            "superseded_at": f.superseded_at, "supersedes": f.supersedes,
            "closed_reason": f.closed_reason}


def _run_row(r: Run, since: datetime) -> Row:
    return {"run_id": r.run_id, "store": r.store, "session_id": r.session_id,
            "actor_id": r.actor_id, "framework": r.framework, "thread_key": r.thread_key,
            "status": r.status, "status_since": since, "awaiting": _compact(r.awaiting),
            "step_count": r.step_count, "usd_cost": r.usd_cost, "started_at": r.started_at,
            "ended_at": r.ended_at, "lease_owner": r.lease_owner,
            "lease_expires_at": r.lease_expires_at, "fencing_token": r.fencing_token,
            "decision": _compact(None if r.decision is None else r.decision.to_json()),
            "decisions": _compact([d.to_json() for d in r.decisions] or None)}


def _decision(text: str | None) -> Decision | None:
    return None if text is None else Decision.from_json(json.loads(text))


def _checkpoint_row(c: CheckpointRecord, metadata_json: str,
                    writes: Any) -> Row:
    return {"run_id": c.run_id, "namespace": c.namespace, "checkpoint_id": c.checkpoint_id,
            "parent_checkpoint_id": c.parent_checkpoint_id, "type_tag": c.type_tag,
            "metadata": metadata_json, "create_time": c.create_time, "payload": c.payload,
            "writes": [{"task_id": w.task_id, "index": w.index, "channel": w.channel,
                        "type_tag": w.type_tag, "payload": w.payload,
                        "task_path": w.task_path} for w in writes]}


def _asset_row(a: AssetRef) -> Row:
    return {"asset_id": a.asset_id, "sha256": a.sha256, "size": a.size,
            "media_type": a.media_type, "store": a.store, "session_id": a.session_id,
            "metadata": dict(a.metadata), "create_time": a.create_time}
