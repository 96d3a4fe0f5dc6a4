"""Exact export and restore of every row, in Redis (the transfer port).

Export (``_transfer_read.py``) pages each part in the port's order from the indexes the
rest of the backend keeps. Restore (``_transfer_write.py``) writes each batch with
pipelined scripts, one per slot, and brings every Redis-side index up to date with the
rows exactly as the backend's own writes do: a store's listing and its ``unindexed``
flag, a session's index entry (with a new ordinal, in the order restored, so listings by
creation follow the rows' create times), a fork's claim and its parent's children, the
item log, its offsets and its id index (a session's last activity kept as the row has
it), a fact's chain in record order, its subject and key sets, the current set and the
term index with the store's total length, the run directory with run order and the set
of runs that may be active, a session's runs and active run, checkpoints with their
counters (and their expiry, when ``checkpoint_ttl`` is set, counted from the restore as a
write counts it), asset content holds, the asset directory and per-session order, the
grants with their index by principal, API keys with the tenant's index of them.

Every row that refers to another (an item to its session, a fact to its memory store, a
checkpoint to its run, an asset to its content) is checked before the batch writes
anything. A batch is not one transaction across slots: each slot's script is atomic, and
a batch stopped part-way is finished by restoring it again (rows stored are skipped).

It may touch Redis through ``_core``, ``_transfer_read`` and ``_transfer_write``, the
access, checkpoint and run parts beside it, the page bounds that the SQL backends share
(``backends._transfer_sql``), the transfer and search ports, the time format
(``ownstate._ids``), JSON decoding (``ownstate._jsontext``), the model and errors.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..._ids import format_time
from ..._jsontext import decode_json
from ...errors import InvalidInput, SessionNotFound
from ...model import ACTIVE_RUN_STATUSES
from .._transfer_sql import LARGE_ROWS
from ..ports.search import fact_text, item_text, terms
from ..ports.transfer import Cursor, Row, missing_parent
from . import _transfer_read as rd
from ._core import OFFSET_WIDTH, encode_item, item_key, pack, search_document, text
from ._transfer_write import eval_all, write_all
from .access import AccessInRedis
from .checkpoints import CheckpointsInRedis
from .runs import micros

__all__ = ["TransferInRedis"]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
Build = Callable[[str], Awaitable[list[tuple[Cursor, Any]]]]
Fetch = Callable[[str, Sequence[Cursor], Sequence[Any]], Awaitable[list[Row]]]


class TransferInRedis(CheckpointsInRedis, AccessInRedis):
    """The transfer port over the Redis key layout (see ``_core.py``)."""

    async def transfer_tenants(self) -> list[str]:
        found: set[str] = set()
        for suffix in ("stores", "mstores", "assets", "api-keys"):
            async for key in self._r.scan_iter(match=f"{self.prefix}:{{*}}:{suffix}",
                                               count=1000):
                tag = text(key)[len(self.prefix) + 2:-len(suffix) - 2]
                if tag and not set(tag) & set("/#$!{}"):
                    found.add(tag)
        return sorted(found)

    # export ----------------------------------------------------------------------------

    async def export_rows(self, tenant: str, part: str, after: Cursor | None,
                          limit: int) -> tuple[list[Row], Cursor | None]:
        limit = min(limit, LARGE_ROWS.get(part, limit))
        if part == "items":
            order = await rd.held(self, tenant, part, after, lambda: self._item_places(tenant))
            rows, cursor = await rd.read_items(self, tenant, order, after, limit)
            if cursor is None:
                self.__dict__.get("_held_orders", {}).pop((tenant, part), None)
            return rows, cursor
        plan = self._export_plan().get(part)
        if plan is None:
            raise InvalidInput(f"no part named {part!r}", field="part")
        build, fetch = plan
        order = await rd.held(self, tenant, part, after, lambda: build(tenant))
        keys, where, more = rd.page_of(self, tenant, part, order, after, limit)
        rows = list(where) if fetch is None else await fetch(tenant, keys, where)
        return rows, (keys[-1] if more and keys else None)

    def _export_plan(self) -> dict[str, tuple[Build, Fetch | None]]:
        return {
            "session_stores": (self._store_rows, None),
            "sessions": (self._session_keys, self._session_rows),
            "idempotency_keys": (self._idempotency_keys,
                                 lambda t, k, w: rd.read_idempotency(self, t, k, w)),
            "memory_stores": (self._memory_store_rows, None),
            "facts": (self._fact_keys, self._fact_rows),
            "runs": (self._run_keys, lambda t, k, w: rd.run_rows(self, t, k, w)),
            "effects": (self._effect_keys, lambda t, k, w: rd.effect_rows(self, t, k, w)),
            "checkpoints": (self._checkpoint_keys,
                            lambda t, k, w: rd.checkpoint_rows(self, t, k, w)),
            "asset_contents": (self._content_keys, self._content_rows),
            "assets": (lambda t: rd.read_assets(self, t), None),
            "grants": (self._grant_rows, None),
            "api_keys": (lambda t: rd.read_keys(self, t, self.api_key_key), None),
        }

    async def _live_stores(self, tenant: str) -> list[tuple[str, Any]]:
        return await rd.read_stores(self, tenant, "stores",
                                    lambda n: self.store_key(tenant, n) + "store")

    async def _live_memory_stores(self, tenant: str) -> list[tuple[str, Any]]:
        return await rd.read_stores(self, tenant, "mstores",
                                    lambda n: self.memory_key(tenant, n) + "mstore")

    async def _store_rows(self, tenant: str) -> list[tuple[Cursor, Any]]:
        unindexed = {text(n) for n in await self._command(
            "SMEMBERS", self.tenant_key(tenant) + "unindexed", write=False)}
        return [((name,), {"name": name, "create_time": at, "index_items": name not in unindexed})
                for name, at in await self._live_stores(tenant)]

    async def _memory_store_rows(self, tenant: str) -> list[tuple[Cursor, Any]]:
        return [((name,), {"name": name, "create_time": at})
                for name, at in await self._live_memory_stores(tenant)]

    async def _sessions(self, tenant: str) -> list[tuple[str, str, str, list[Any]]]:
        stores = [name for name, _ in await self._live_stores(tenant)]
        return await rd.read_sessions(self, tenant, stores)

    async def _session_keys(self, tenant: str) -> list[tuple[Cursor, Any]]:
        return [((store, rd.session_row(store, sid, f)["create_time"], sid), root)
                for store, sid, root, f in await self._sessions(tenant)]

    async def _session_rows(self, tenant: str, keys: Sequence[Cursor],
                            where: Sequence[Any]) -> list[Row]:
        found = await self._read([
            ("HMGET", self.tree_key(tenant, k[0], root) + "s:" + k[2], "actor", "parent",
             "root", "meta", "ct", "lat") for k, root in zip(keys, where, strict=True)])
        return [rd.session_row(k[0], k[2], f) for k, f in zip(keys, found, strict=True)
                if f[0] is not None]

    async def _item_places(self, tenant: str) -> list[tuple[Cursor, Any]]:
        return [((store, sid), root) for store, sid, root, _ in await self._sessions(tenant)]

    async def _idempotency_keys(self, tenant: str) -> list[tuple[Cursor, Any]]:
        sessions = await self._sessions(tenant)
        found: list[tuple[Cursor, Any]] = []
        for chunk in rd._chunks(sessions):
            held = await self._read([("HKEYS", self.tree_key(tenant, s, root) + "ik:" + sid)
                                     for s, sid, root, _ in chunk])
            found += [((s, sid, text(k)), root) for (s, sid, root, _), ks
                      in zip(chunk, held, strict=True) for k in ks]
        return found

    async def _fact_keys(self, tenant: str) -> list[tuple[Cursor, Any]]:
        stores = [name for name, _ in await self._live_memory_stores(tenant)]
        return await rd.read_facts(self, tenant, stores)

    async def _fact_rows(self, tenant: str, keys: Sequence[Cursor],
                         where: Sequence[Any]) -> list[Row]:
        found = await self._read([("HGET", self.memory_key(tenant, k[0]) + "f", k[2])
                                  for k in keys])
        return [rd.fact_row(k[0], raw) for k, raw in zip(keys, found, strict=True)
                if raw is not None]

    async def _run_homes_by_id(self, tenant: str) -> list[tuple[str, tuple[str, str, str]]]:
        return sorted((r, home) for r, home, _ in await rd.read_runs(self, tenant))

    async def _run_keys(self, tenant: str) -> list[tuple[Cursor, Any]]:
        return [((started, r), home) for r, home, started in await rd.read_runs(self, tenant)]

    async def _effect_keys(self, tenant: str) -> list[tuple[Cursor, Any]]:
        return await rd.read_effects(self, tenant, await self._run_homes_by_id(tenant))

    async def _checkpoint_keys(self, tenant: str) -> list[tuple[Cursor, Any]]:
        return await rd.read_checkpoints(self, tenant, await self._run_homes_by_id(tenant))

    async def _content_keys(self, tenant: str) -> list[tuple[Cursor, Any]]:
        head = f"{self.prefix}:{{{tenant}$"
        found = []
        async for key in self._r.scan_iter(match=f"{head}*}}:blob", count=1000):
            name = text(key)
            found.append(((name[len(head):-len("}:blob")],), None))
        return found

    async def _content_rows(self, tenant: str, keys: Sequence[Cursor],
                            where: Sequence[Any]) -> list[Row]:
        found = await self._read([("GET", self.content_key(tenant, k[0]) + "blob")
                                  for k in keys])
        return [{"sha256": k[0], "data": bytes(data)}
                for k, data in zip(keys, found, strict=True) if data is not None]

    async def _grant_rows(self, tenant: str) -> list[tuple[Cursor, Any]]:
        stores = [name for name, _ in await self._live_stores(tenant)]
        memory = [name for name, _ in await self._live_memory_stores(tenant)]
        return await rd.read_grants(self, tenant, stores, memory)

    # restore ---------------------------------------------------------------------------

    async def restore_rows(self, tenant: str, part: str, rows: Sequence[Row]) -> int:
        put = {"session_stores": self._put_stores, "sessions": self._put_sessions,
               "items": self._put_items, "idempotency_keys": self._put_idempotency,
               "memory_stores": self._put_memory_stores, "facts": self._put_facts,
               "runs": self._put_runs, "effects": self._put_effects,
               "checkpoints": self._put_checkpoints, "asset_contents": self._put_contents,
               "assets": self._put_assets, "grants": self._put_grants,
               "api_keys": self._put_keys}.get(part)
        if put is None:
            raise InvalidInput(f"no part named {part!r}", field="part")
        if not rows:
            return 0
        return await put(tenant, rows)

    async def _put_named(self, tenant: str, rows: Sequence[Row], record: str,
                         kind: str, index: str, key: Callable[[str], str]) -> int:
        states = await self._read([("EXISTS", key(r["name"]) + record) for r in rows])
        stored = 0
        for row, held in zip(rows, states, strict=True):
            if int(held):
                continue
            nonce = self.nonce()
            flag = "" if record == "mstore" else ("0" if row["index_items"] else "1")
            # listed first: a stop in between leaves a listed name without a record,
            # which listings skip and a restore run again completes
            await self._eval("xfer_store_list", [self.tenant_key(tenant)],
                             [kind, row["name"], index, nonce, flag])
            reply = await self._eval(f"xfer_{record}", [key(row["name"])],
                                     [format_time(row["create_time"]), nonce])
            stored += reply[0] == b"ok"
        return stored

    async def _put_stores(self, tenant: str, rows: Sequence[Row]) -> int:
        return await self._put_named(tenant, rows, "store", "session_store", "stores",
                                     lambda n: self.store_key(tenant, n))

    async def _put_memory_stores(self, tenant: str, rows: Sequence[Row]) -> int:
        return await self._put_named(tenant, rows, "mstore", "memory_store", "mstores",
                                     lambda n: self.memory_key(tenant, n))

    async def _live(self, part: str, stores: Sequence[str], record: Callable[[str], str],
                    what: str) -> None:
        """InvalidInput unless every one of the stores is live."""
        states = await self._read([("HGET", record(s), "state") for s in stores])
        for store, state in zip(stores, states, strict=True):
            if state != b"live":
                raise missing_parent(part, what, store)

    async def _put_sessions(self, tenant: str, rows: Sequence[Row]) -> int:
        stores = sorted({r["store"] for r in rows})
        await self._live("sessions", stores, lambda s: self.store_key(tenant, s) + "store",
                         "store")
        held = await self._read([
            c for r in rows for c in (
                ("EXISTS", self.tree_key(tenant, r["store"], r["root_session_id"]) + "s:"
                 + r["session_id"]),
                ("EXISTS", self.tree_key(tenant, r["store"], r["session_id"]) + "s:"
                 + r["session_id"]))])
        fresh = [r for n, r in enumerate(rows) if not int(held[2 * n]) and not int(held[2 * n + 1])]
        if not fresh:
            return 0
        ordinals: dict[tuple[str, str], int] = {}
        for store in stores:
            mine = [r for r in fresh if r["store"] == store]
            if not mine:
                continue
            reply = await self._eval("xfer_reserve", [self.store_key(tenant, store)],
                                     [x for r in mine for x in (r["session_id"],
                                                                r["root_session_id"])])
            for r, ordinal in zip(mine, reply[1:], strict=True):
                ordinals[(store, r["session_id"])] = int(ordinal)
        claims: dict[tuple[str, str], str] = {}
        commands = []
        for r in fresh:
            if r["root_session_id"] != r["session_id"]:
                claim = f"{r['root_session_id']}|0|{self.nonce()}"
                claims[(r["store"], r["session_id"])] = claim
                commands.append(("SET", self.tree_key(tenant, r["store"], r["session_id"])
                                 + "fork", claim))
        await write_all(self, commands)
        unindexed = {text(n) for n in await self._command(
            "SMEMBERS", self.tenant_key(tenant) + "unindexed", write=False)}
        trees: dict[str, list[Any]] = {}
        for r in fresh:
            key = (r["store"], r["session_id"])
            trees.setdefault(self.tree_key(tenant, r["store"], r["root_session_id"]), []).extend(
                [r["session_id"], r["actor_id"], r["parent_session_id"] or "",
                 r["root_session_id"], json.dumps(dict(r["metadata"]), ensure_ascii=False),
                 format_time(r["create_time"]), format_time(r["last_activity_time"]),
                 ordinals[key], claims.get(key, ""), "1" if r["store"] in unindexed else ""])
        replies = await eval_all(self, [("xfer_sessions", [tree], args)
                                        for tree, args in trees.items()])
        return sum(int(reply[1]) for reply in replies)

    async def _tree_roots(self, tenant: str,
                          keys: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The tree root of each (store, session); SessionNotFound for one missing."""
        ordered = sorted(keys)
        guesses = [self._root_guess(tenant, s, x) for s, x in ordered]
        found = await self._read([("HGET", self.tree_key(tenant, s, g) + "s:" + x, "root")
                                  for (s, x), g in zip(ordered, guesses, strict=True)])
        roots: dict[tuple[str, str], str] = {}
        for key, root in zip(ordered, found, strict=True):
            if root is None:
                real = await rd._root(self, tenant, *key)
                if real is None:
                    raise SessionNotFound(store=key[0], session_id=key[1])
                self._remember_root(tenant, key[0], key[1], real)
                roots[key] = real
            else:
                roots[key] = text(root)
        return roots

    async def _put_items(self, tenant: str, rows: Sequence[Row]) -> int:
        roots = await self._tree_roots(tenant, {(r["store"], r["session_id"]) for r in rows})
        sessions = sorted(roots)
        counts = await self._read([
            ("STRLEN", self.tree_key(tenant, s, roots[(s, x)]) + "o:" + x) for s, x in sessions])
        have = {key: int(n) // OFFSET_WIDTH for key, n in zip(sessions, counts, strict=True)}
        per: dict[tuple[str, str], list[Row]] = {}
        for r in rows:
            key = (r["store"], r["session_id"])
            if r["seq"] > have[key]:
                per.setdefault(key, []).append(r)
        calls = []
        for key, mine in per.items():
            mine.sort(key=lambda r: r["seq"])
            expected = have[key] + 1
            for r in mine:
                if r["seq"] != expected:
                    raise InvalidInput(f"item {r['item_id']!r} has seq {r['seq']} but session "
                                       f"{key[1]!r} holds {expected - 1} items", field="items")
                expected += 1
            encoded = [encode_item(r["item_id"], format_time(r["create_time"]), r["format"],
                                   (r["role"], r["type"], r["tool_name"], r["model"],
                                    r["in_tokens"], r["out_tokens"]), r["data"]) for r in mine]
            calls.append(("xfer_items", [self.tree_key(tenant, key[0], roots[key])],
                          [key[1], have[key], len(mine), *(item_key(r["item_id"]) for r in mine),
                           *encoded,
                           *(search_document(item_text(decode_json(r["data"]))) for r in mine)]))
        stored = 0
        for key, reply in zip(per, await eval_all(self, calls), strict=True):
            if reply[0] == b"@gone":
                raise SessionNotFound(store=key[0], session_id=key[1])
            if reply[0] != b"ok":
                raise InvalidInput(f"the items of session {key[1]!r} changed during the "
                                   f"restore ({text(reply[0])}); restore again", field="items")
            stored += int(reply[1])
        return stored

    async def _put_idempotency(self, tenant: str, rows: Sequence[Row]) -> int:
        roots = await self._tree_roots(tenant, {(r["store"], r["session_id"]) for r in rows})
        commands = [("HSETNX", self.tree_key(tenant, r["store"],
                                             roots[(r["store"], r["session_id"])])
                     + "ik:" + r["session_id"], r["key"],
                     r["request_hash"] + "\n" + json.dumps(
                         [item_key(i) for i in json.loads(r["item_ids"])]))
                    for r in rows]
        return sum(int(n) for n in await write_all(self, commands))

    async def _put_facts(self, tenant: str, rows: Sequence[Row]) -> int:
        stores = sorted({r["memory_store"] for r in rows})
        await self._live("facts", stores, lambda s: self.memory_key(tenant, s) + "mstore",
                         "memory store")
        calls = []
        for store in stores:
            args: list[Any] = []
            for r in rows:
                if r["memory_store"] != store:
                    continue
                found = terms(fact_text(r["key"], json.loads(r["value"])))
                counts = Counter(found)
                record = {
                    "id": r["fact_id"], "s": r["subject"], "k": r["key"], "c": r["confidence"],
                    "st": r["source_type"], "ss": r["source_session_id"],
                    "si": r["source_item_id"], "sst": r["source_store"],
                    "vf": format_time(r["valid_from"]),
                    "vt": None if r["valid_to"] is None else format_time(r["valid_to"]),
                    "ra": format_time(r["recorded_at"]),
                    "sa": None if r["superseded_at"] is None else format_time(r["superseded_at"]),
                    "sup": r["supersedes"], "cr": r["closed_reason"],
                    "w": list(counts), "tf": list(counts.values()), "tl": len(found)}
                head = _dumps(record)
                current = r["superseded_at"] is None
                args += [r["fact_id"], f'{head[:-1]},"v":{r["value"]}}}', r["subject"],
                         r["key"], record["ra"] + ("1" if current else "0"),
                         "1" if current else "0", len(found), len(counts), *counts]
            calls.append(("xfer_facts", [self.memory_key(tenant, store)], args))
        return sum(int(reply[1]) for reply in await eval_all(self, calls))

    async def _put_runs(self, tenant: str, rows: Sequence[Row]) -> int:
        roots = await self._tree_roots(tenant, {(r["store"], r["session_id"]) for r in rows})
        opened = [r["status"] in ACTIVE_RUN_STATUSES for r in rows]
        reply = await self._eval("xfer_run_claims", [self.tenant_key(tenant)], [
            self.nonce(), *(x for r, o in zip(rows, opened, strict=True)
                            for x in (r["run_id"], r["store"], r["session_id"],
                                      "1" if o else "0"))])
        trees: dict[str, list[Any]] = {}
        for n, (r, is_open) in enumerate(zip(rows, opened, strict=True)):
            status, ordinal, value = (text(x) for x in reply[1 + 3 * n:4 + 3 * n])
            if status == "taken":
                continue
            fields = _run_fields(r, value, ordinal)
            trees.setdefault(self.tree_key(tenant, r["store"], roots[(r["store"],
                                                                      r["session_id"])]),
                             []).extend([r["run_id"], r["session_id"], ordinal,
                                         "1" if is_open else "0", len(fields) // 2, *fields])
        replies = await eval_all(self, [("xfer_runs", [tree], args)
                                        for tree, args in trees.items()])
        return sum(int(x[1]) for x in replies)

    async def _run_places(self, tenant: str, part: str,
                          rows: Sequence[Row]) -> dict[str, str]:
        """The tree of each run the rows name; InvalidInput for one missing."""
        wanted = sorted({r["run_id"] for r in rows})
        located = await self._locate_runs(tenant, wanted)
        for run_id in wanted:
            if run_id not in located:
                raise missing_parent(part, "run", run_id)
        return {run_id: self.tree_key(tenant, store, root)
                for run_id, (store, _, root) in located.items()}

    async def _put_effects(self, tenant: str, rows: Sequence[Row]) -> int:
        places = await self._run_places(tenant, "effects", rows)
        return sum(int(n) for n in await write_all(self, [
            ("HSETNX", places[r["run_id"]] + "e:" + r["run_id"], r["tool_call_id"],
             format_time(r["recorded_at"]) + "\n" + r["result"]) for r in rows]))

    async def _put_checkpoints(self, tenant: str, rows: Sequence[Row]) -> int:
        places = await self._run_places(tenant, "checkpoints", rows)
        ttl = str(self.checkpoint_ttl) if self.checkpoint_ttl is not None else ""
        calls = []
        for r in rows:
            writes = list(r["writes"])
            written = sum(len(w["payload"]) for w in writes)
            packed = pack([(r["parent_checkpoint_id"] or "").encode(), r["type_tag"].encode(),
                           r["metadata"].encode(), bytes(r["payload"])])
            sizes = (f"{micros(r['create_time'])} {len(r['payload'])} {written} "
                     f"{format_time(r['create_time'])}")
            blob = b"".join(pack([w["task_id"].encode(), str(w["index"]).encode(),
                                  w["channel"].encode(), w["type_tag"].encode(),
                                  w["task_path"].encode(), bytes(w["payload"])])
                            for w in writes)
            calls.append(("xfer_checkpoint", [places[r["run_id"]]],
                          [r["run_id"], ttl, f"{r['namespace']}\x00{r['checkpoint_id']}",
                           packed, sizes, blob, len(r["payload"]) + written]))
        return sum(int(reply[1]) for reply in await eval_all(self, calls))

    async def _put_contents(self, tenant: str, rows: Sequence[Row]) -> int:
        found = await write_all(self, [("SET", self.content_key(tenant, r["sha256"]) + "blob",
                                        bytes(r["data"]), "NX") for r in rows])
        return sum(1 for x in found if x)

    async def _put_assets(self, tenant: str, rows: Sequence[Row]) -> int:
        blobs = await self._read([("EXISTS", self.content_key(tenant, r["sha256"]) + "blob")
                                  for r in rows])
        for r, held in zip(rows, blobs, strict=True):
            if not int(held):
                raise InvalidInput(f"asset {r['asset_id']!r} has no content", field="assets")
        roots = await self._tree_roots(tenant, {(r["store"], r["session_id"]) for r in rows
                                           if r["store"] is not None})
        stored = 0
        for r in rows:
            record = json.dumps([r["sha256"], r["size"], r["media_type"], dict(r["metadata"]),
                                 format_time(r["create_time"])], ensure_ascii=False)
            owner = (r["store"], r["session_id"]) if r["store"] is not None else None
            if owner is None:
                held = await self._command("HEXISTS", self.tenant_key(tenant) + "loose",
                                           r["asset_id"], write=False)
            else:
                held = await self._command(
                    "HEXISTS", self.tree_key(tenant, owner[0], roots[owner]) + "ar:"
                    + owner[1], r["asset_id"], write=False)
            if int(held):
                continue
            # the content's hold and the directory first, as a put writes them
            await self._command("SADD", self.content_key(tenant, r["sha256"]) + "refs",
                                r["asset_id"], write=True)
            if owner is None:
                reply = await self._eval("xfer_asset_loose", [self.tenant_key(tenant)],
                                         [r["asset_id"], r["sha256"], record])
            else:
                await self._command("HSET", self.tenant_key(tenant) + "assets", r["asset_id"],
                                    f"{owner[0]}\x00{owner[1]}", write=True)
                reply = await self._eval("xfer_asset", [self.tree_key(tenant, owner[0],
                                                                      roots[owner])],
                                         [owner[1], r["asset_id"], r["sha256"], record])
            stored += int(reply[1])
        return stored

    async def _put_grants(self, tenant: str, rows: Sequence[Row]) -> int:
        reply = await self._eval("xfer_grants", [self.tenant_key(tenant)], [
            x for r in rows for x in (r["kind"], r["store"], r["principal"], r["level"])])
        return int(reply[1])

    async def _put_keys(self, tenant: str, rows: Sequence[Row]) -> int:
        stored = 0
        index = self.tenant_key(tenant) + "api-keys"
        for r in rows:
            added = await self._command("ZADD", index, "NX", micros(r["create_time"]),
                                        r["key_id"], write=True)
            revoked = format_time(r["revoked_at"]) if r["revoked_at"] is not None else ""
            reply = await self._eval("api_key_create", [self.api_key_key(r["key_id"])], [
                tenant, r["principal"], "1" if r["admin"] else "0",
                format_time(r["create_time"]), revoked, r["secret_hash"]])
            if reply[0] == b"ok":
                stored += 1
            elif int(added) and text(reply[1]) != tenant:
                await self._command("ZREM", index, r["key_id"], write=True)
        return stored


def _run_fields(r: Row, directory: str, ordinal: str) -> list[Any]:
    """A run's hash as the runs port writes it."""
    fields: list[Any] = [
        "store", r["store"], "sid", r["session_id"], "actor", r["actor_id"],
        "fw", r["framework"], "st", r["status"], "since", format_time(r["status_since"]),
        "steps", r["step_count"], "cost", repr(float(r["usd_cost"])),
        "started", format_time(r["started_at"]), "tok", r["fencing_token"], "ord", ordinal,
        "dir", directory]
    optional = {"tk": r["thread_key"], "aw": r["awaiting"],
                "ended": r["ended_at"] and format_time(r["ended_at"]),
                "lo": r["lease_owner"],
                "le": r["lease_expires_at"] and format_time(r["lease_expires_at"]),
                "leu": r["lease_expires_at"] and micros(r["lease_expires_at"])}
    if r["decision"] is not None:
        optional["dc"] = json.dumps(json.loads(r["decision"]), separators=(",", ":"))
    if r["decisions"] is not None:
        optional["dl"] = ",".join(json.dumps(d, separators=(",", ":"))
                                  for d in json.loads(r["decisions"]))
    for name, value in optional.items():
        if value is not None:
            fields += [name, value]
    return fields
