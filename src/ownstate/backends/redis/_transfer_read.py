"""Reading a tenant's rows out of Redis in the transfer port's order (its export half).

Redis keeps no index in the export order of most parts (sessions by create time, facts by
record time, runs by start time, items by session id): its indexes follow creation
ordinals, which two writers racing may number out of time order. So the first page of a
part walks the part's indexes once, with ``SCAN``/``ZRANGE`` and pipelined ``HMGET``s in
batches, and keeps what orders each row and where it lives (its sort key and locator, not
the row); every page then reads only its own rows, in one pipeline. Pages go on from the
cursor by bisection, so a held order that is dropped (another export of the same part, a
restarted process) is simply rebuilt and paging continues where it was. Items are read a
run of sessions at a time, each session's span of its item log in one ``GETRANGE``.

What the export sees is per slot as of each read: Redis has no snapshot across slots, so
rows written while an export runs may be in it or not (``docs/archive.md``).

It may touch Redis through ``_core``, the spelling of decisions that the SQL backends share
(``backends._transfer_sql``), the transfer port and the time format (``ownstate._ids``).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..._ids import parse_time
from .._transfer_sql import decision_text
from ..ports.transfer import Cursor, Row
from ._core import OFFSET_WIDTH, RedisCore, text, unpack

__all__ = ["BATCH", "HeldOrder", "item_id_of", "read_assets", "read_checkpoints",
           "read_effects", "read_facts", "read_grants", "read_idempotency", "read_items",
           "read_keys", "read_runs", "read_sessions", "read_stores", "value_text"]

#: commands per pipeline
BATCH = 1000
_W = OFFSET_WIDTH
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
#: an order held for a page: the sorted keys and what each locates
HeldOrder = tuple[list[Cursor], list[Any]]


def _chunks(seq: Sequence[Any], size: int = BATCH) -> list[Sequence[Any]]:
    return [seq[i:i + size] for i in range(0, len(seq), size)]


async def _batched(core: RedisCore, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    out: list[Any] = []
    for chunk in _chunks(commands):
        out += await core._read(chunk)
    return out


def _time(value: Any) -> Any:
    return None if value is None else parse_time(text(value))


def _maybe(value: Any) -> str | None:
    return None if value is None else text(value)


def value_text(raw: str, head_fields: dict[str, Any]) -> str:
    """The JSON text spliced after ``head`` in a stored record (item or fact): as stored
    when the record reads as written, else the value re-encoded compactly."""
    head = _dumps(head_fields)
    lead = head[:-1] + ',"v":'
    if raw.startswith(lead):
        return raw[len(lead):-1]
    value = json.loads(raw)["v"]
    return str(_dumps(value))


def item_id_of(key: str) -> str:
    """An item id from its spelling in the item index (see ``item_key``)."""
    return key if "\\" not in key and '"' not in key else str(json.loads(f'"{key}"'))


# -- held orders -------------------------------------------------------------------------


async def held(core: RedisCore, tenant: str, part: str, after: Cursor | None,
               build: Callable[[], Awaitable[list[tuple[Cursor, Any]]]]) -> HeldOrder:
    """The part's order: built anew for a first page, else the one held since."""
    cache: dict[tuple[str, str], HeldOrder] = core.__dict__.setdefault("_held_orders", {})
    key = (tenant, part)
    if after is None or key not in cache:
        found = sorted(await build(), key=lambda entry: entry[0])
        if len(cache) > 32:
            cache.clear()
        cache[key] = ([k for k, _ in found], [v for _, v in found])
    return cache[key]


def page_of(core: RedisCore, tenant: str, part: str, order: HeldOrder,
            after: Cursor | None, limit: int) -> tuple[list[Cursor], list[Any], bool]:
    """The keys and locators of one page after ``after``, and whether more follow (the
    held order is let go after its last page)."""
    keys, where = order
    start = 0 if after is None else bisect_right(keys, tuple(after))
    more = start + limit < len(keys)
    if not more:
        core.__dict__.get("_held_orders", {}).pop((tenant, part), None)
    return keys[start:start + limit], where[start:start + limit], more


# -- stores ------------------------------------------------------------------------------


async def read_stores(core: RedisCore, tenant: str, index: str,
                      record: Callable[[str], str]) -> list[tuple[str, Any]]:
    """``(name, create time)`` of each live store listed in the tenant's ``index``."""
    names = [text(n) for n in await core._command(
        "ZRANGE", core.tenant_key(tenant) + index, 0, -1, write=False)]
    states = await _batched(core, [("HMGET", record(n), "state", "ct") for n in names])
    return [(n, parse_time(text(s[1]))) for n, s in zip(names, states, strict=True)
            if s[0] == b"live"]


# -- sessions and items ------------------------------------------------------------------

_SESSION = ("actor", "parent", "root", "meta", "ct", "lat", "ord")


async def read_sessions(core: RedisCore, tenant: str,
                        stores: Sequence[str]) -> list[tuple[str, str, str, list[Any]]]:
    """``(store, session id, root, fields)`` of every live session of the stores (the
    index entries whose session exists as that creation)."""
    found = []
    for store in stores:
        members = [core.parse_member(m) for m in await core._command(
            "ZRANGE", core.store_key(tenant, store) + "index", 0, -1, write=False)]
        rows = await _batched(core, [
            ("HMGET", core.tree_key(tenant, store, root) + "s:" + sid, *_SESSION)
            for _, sid, root in members])
        found += [(store, sid, root, row) for (ordinal, sid, root), row
                  in zip(members, rows, strict=True)
                  if row[0] is not None and row[6] is not None and int(row[6]) == ordinal]
    return found


def session_row(store: str, session_id: str, f: Sequence[Any]) -> Row:
    return {"store": store, "session_id": session_id, "actor_id": text(f[0]),
            "parent_session_id": _maybe(f[1]), "root_session_id": text(f[2]),
            "metadata": json.loads(f[3]), "create_time": parse_time(text(f[4])),
            "last_activity_time": parse_time(text(f[5]))}


def _item_rows(store: str, session_id: str, first: int, span: bytes,
               ends: Sequence[int], start: int) -> list[Row]:
    """Rows of items ``first..`` from a span of the log that begins at offset ``start``;
    ``ends`` are the items' end offsets."""
    rows = []
    previous = start
    for n, end in enumerate(ends):
        element = span[previous - start + 1:end - start].decode()
        previous = end
        f = json.loads(element)
        head = _dumps(f[:9])
        data = (element[len(head):-1] if element.startswith(head[:-1] + ",")
                else str(_dumps(f[9])))
        rows.append({"store": store, "session_id": session_id, "seq": first + n,
                     "item_id": f[0], "create_time": parse_time(f[1]), "format": f[2],
                     "data": data, "role": f[3], "type": f[4], "tool_name": f[5],
                     "model": f[6], "in_tokens": f[7], "out_tokens": f[8]})
    return rows


async def read_items(core: RedisCore, tenant: str, order: HeldOrder, after: Cursor | None,
                     limit: int) -> tuple[list[Row], Cursor | None]:
    """A page of items; ``order`` holds (store, session id) -> root."""
    keys, roots = order
    resume = (after[0], after[1]) if after is not None else None
    index = 0 if resume is None else bisect_left(keys, resume)
    rows: list[Row] = []
    while index < len(keys) and len(rows) < limit:
        chunk = range(index, min(index + 256, len(keys)))
        index = chunk[-1] + 1
        counts = await core._read([
            ("STRLEN", core.tree_key(tenant, keys[i][0], roots[i]) + "o:" + keys[i][1])
            for i in chunk])
        wanted: list[tuple[int, int, int]] = []  # position, first seq, last seq
        budget = limit - len(rows)
        for i, length in zip(chunk, counts, strict=True):
            count = int(length) // _W
            first = int(after[2]) + 1 if after is not None and keys[i] == resume else 1
            if count >= first and budget > 0:
                last = min(count, first + budget - 1)
                wanted.append((i, first, last))
                budget -= last - first + 1
        bases = [core.tree_key(tenant, keys[i][0], roots[i]) for i, _, _ in wanted]
        spans = await core._read([
            ("GETRANGE", base + "o:" + keys[i][1], (first - 2) * _W if first > 1 else 0,
             last * _W - 1) for base, (i, first, last) in zip(bases, wanted, strict=True)])
        cuts = []
        for (_, first, _), offsets in zip(wanted, spans, strict=True):
            numbers = [int(offsets[j:j + _W]) for j in range(0, len(offsets), _W)]
            cuts.append((numbers.pop(0) if first > 1 else 0, numbers))
        logs = await core._read([
            ("GETRANGE", base + "l:" + keys[i][1], begin, (ends[-1] if ends else begin) - 1)
            for base, (i, _, _), (begin, ends) in zip(bases, wanted, cuts, strict=True)])
        for (i, first, _), (begin, ends), log in zip(wanted, cuts, logs, strict=True):
            if ends and len(log) == ends[-1] - begin:  # else changed since: left out
                rows += _item_rows(keys[i][0], keys[i][1], first, log, ends, begin)
    if len(rows) >= limit:
        tail = rows[-1]
        return rows, (tail["store"], tail["session_id"], tail["seq"])
    return rows, None


async def read_idempotency(core: RedisCore, tenant: str, keys: Sequence[Cursor],
                           where: Sequence[Any]) -> list[Row]:
    """Rows of the idempotency keys at ``keys`` ((store, session, key); where: root)."""
    found = await _batched(core, [
        ("HGET", core.tree_key(tenant, k[0], root) + "ik:" + k[1], k[2])
        for k, root in zip(keys, where, strict=True)])
    rows = []
    for k, raw in zip(keys, found, strict=True):
        if raw is None:
            continue
        request_hash, _, ids = text(raw).partition("\n")
        rows.append({"store": k[0], "session_id": k[1], "key": k[2],
                     "request_hash": request_hash,
                     "item_ids": _dumps([item_id_of(i) for i in json.loads(ids)])})
    return rows


# -- facts -------------------------------------------------------------------------------

_FACT_HEAD = ("id", "s", "k", "c", "st", "ss", "si", "sst", "vf", "vt", "ra", "sa", "sup",
              "cr", "w", "tf", "tl")


def fact_row(store: str, raw: bytes) -> Row:
    decoded = raw.decode()
    f = json.loads(decoded)
    head = {k: f[k] for k in f if k != "v"}
    return {"memory_store": store, "fact_id": f["id"], "subject": f["s"], "key": f["k"],
            "value": value_text(decoded, head), "confidence": f["c"],
            "source_type": f["st"], "source_store": f["sst"],
            "source_session_id": f["ss"], "source_item_id": f["si"],
            "valid_from": parse_time(f["vf"]), "valid_to": _time(f["vt"]),
            "recorded_at": parse_time(f["ra"]), "superseded_at": _time(f["sa"]),
            "supersedes": f["sup"], "closed_reason": f["cr"]}


async def read_facts(core: RedisCore, tenant: str,
                     stores: Sequence[str]) -> list[tuple[Cursor, Any]]:
    """(memory store, recorded at, fact id) of every fact, by HSCAN of each store's facts."""
    found: list[tuple[Cursor, Any]] = []
    for store in stores:
        key = core.memory_key(tenant, store) + "f"
        cursor = 0
        while True:
            cursor, page = await core._command("HSCAN", key, cursor, "COUNT", BATCH,
                                               write=False)
            pairs = page.items() if isinstance(page, dict) else zip(
                page[::2], page[1::2], strict=True)
            for fact_id, raw in pairs:
                at = raw.find(b'"ra":"')
                found.append(((store, parse_time(raw[at + 6:at + 33].decode()),
                               text(fact_id)), None))
            if int(cursor) == 0:
                break
    return found


# -- runs, effects, checkpoints ------------------------------------------------------------

_RUN = ("store", "sid", "actor", "fw", "tk", "st", "aw", "steps", "cost", "started",
        "ended", "lo", "le", "tok", "since", "dc", "dl")


def run_row(run_id: str, f: Sequence[Any]) -> Row:
    return {"run_id": run_id, "store": text(f[0]), "session_id": text(f[1]),
            "actor_id": text(f[2]), "framework": text(f[3]), "thread_key": _maybe(f[4]),
            "status": text(f[5]), "status_since": parse_time(text(f[14])),
            "awaiting": _maybe(f[6]), "step_count": int(f[7]), "usd_cost": float(f[8]),
            "started_at": parse_time(text(f[9])), "ended_at": _time(f[10]),
            "lease_owner": _maybe(f[11]), "lease_expires_at": _time(f[12]),
            "fencing_token": int(f[13]),
            "decision": decision_text(_maybe(f[15]), many=False),
            "decisions": (decision_text("[" + text(f[16]) + "]", many=True)
                          if f[16] else None)}


async def read_runs(core: Any, tenant: str) -> list[tuple[str, tuple[str, str, str], Any]]:
    """``(run id, (store, session, root), started)`` of every run of the tenant."""
    ids = [text(r) for r in await core._command(
        "ZRANGE", core.tenant_key(tenant) + "run-order", 0, -1, write=False)]
    found = []
    for chunk in _chunks(ids):
        located = await core._locate_runs(tenant, chunk)
        started = await core._read([
            ("HGET", core.tree_key(tenant, s, root) + "r:" + r, "started")
            for r, (s, _, root) in located.items()])
        found += [(r, home, parse_time(text(at)))
                  for (r, home), at in zip(located.items(), started, strict=True)
                  if at is not None]
    return found


async def run_rows(core: RedisCore, tenant: str, keys: Sequence[Cursor],
                   where: Sequence[Any]) -> list[Row]:
    found = await core._read([
        ("HMGET", core.tree_key(tenant, home[0], home[2]) + "r:" + k[1], *_RUN)
        for k, home in zip(keys, where, strict=True)])
    return [run_row(k[1], f) for k, f in zip(keys, found, strict=True) if f[0] is not None]


async def read_effects(core: RedisCore, tenant: str,
                       runs: Sequence[tuple[str, tuple[str, str, str]]]
                       ) -> list[tuple[Cursor, Any]]:
    found: list[tuple[Cursor, Any]] = []
    for chunk in _chunks(runs):
        calls = await core._read([("HKEYS", core.tree_key(tenant, h[0], h[2]) + "e:" + r)
                                  for r, h in chunk])
        found += [((r, text(call)), h) for (r, h), held_calls in zip(chunk, calls, strict=True)
                  for call in held_calls]
    return found


async def effect_rows(core: RedisCore, tenant: str, keys: Sequence[Cursor],
                      where: Sequence[Any]) -> list[Row]:
    found = await core._read([("HGET", core.tree_key(tenant, h[0], h[2]) + "e:" + k[0], k[1])
                              for k, h in zip(keys, where, strict=True)])
    rows = []
    for k, raw in zip(keys, found, strict=True):
        if raw is not None:
            stamp, _, result = raw.partition(b"\n")
            rows.append({"run_id": k[0], "tool_call_id": k[1], "result": result.decode(),
                         "recorded_at": parse_time(stamp.decode())})
    return rows


async def read_checkpoints(core: RedisCore, tenant: str,
                           runs: Sequence[tuple[str, tuple[str, str, str]]]
                           ) -> list[tuple[Cursor, Any]]:
    found: list[tuple[Cursor, Any]] = []
    for chunk in _chunks(runs):
        held_members = await core._read([
            ("ZRANGE", core.tree_key(tenant, h[0], h[2]) + "c:" + r, 0, -1, "WITHSCORES")
            for r, h in chunk])
        for (r, h), members in zip(chunk, held_members, strict=True):
            pairs = members if members and isinstance(members[0], (list, tuple)) else list(
                zip(members[::2], members[1::2], strict=True))
            found += [((r, float(score)), (h, bytes(m))) for m, score in pairs]
    return found


def _writes(raw: bytes) -> list[Row]:
    fields = unpack(raw)
    return [{"task_id": fields[i].decode(), "index": int(fields[i + 1]),
             "channel": fields[i + 2].decode(), "type_tag": fields[i + 3].decode(),
             "payload": fields[i + 5], "task_path": fields[i + 4].decode()}
            for i in range(0, len(fields), 6)]


async def checkpoint_rows(core: RedisCore, tenant: str, keys: Sequence[Cursor],
                          where: Sequence[Any]) -> list[Row]:
    commands: list[tuple[Any, ...]] = []
    for k, (h, member) in zip(keys, where, strict=True):
        base = core.tree_key(tenant, h[0], h[2])
        commands += [("HGET", f"{base}cd:{k[0]}", member), ("HGET", f"{base}cz:{k[0]}", member),
                     ("HGET", f"{base}cw:{k[0]}", member)]
    found = await core._read(commands)
    rows = []
    for n, (k, (_, member)) in enumerate(zip(keys, where, strict=True)):
        data, sizes, writes = found[3 * n:3 * n + 3]
        if data is None or sizes is None:
            continue  # expired or deleted since
        namespace, _, checkpoint_id = member.partition(b"\x00")
        parent, type_tag, metadata, payload = unpack(data)
        rows.append({"run_id": k[0], "namespace": namespace.decode(),
                     "checkpoint_id": checkpoint_id.decode(),
                     "parent_checkpoint_id": parent.decode() or None,
                     "type_tag": type_tag.decode(), "metadata": metadata.decode(),
                     "create_time": parse_time(sizes.split(b" ", 3)[3].decode()),
                     "payload": payload, "writes": _writes(writes or b"")})
    return rows


# -- assets, grants, keys -------------------------------------------------------------------


async def read_assets(core: RedisCore, tenant: str) -> list[tuple[Cursor, Row]]:
    """Every asset reference of the tenant, keyed (create time, id)."""
    directory = await core._command("HGETALL", core.tenant_key(tenant) + "assets",
                                    write=False)
    pairs = directory.items() if isinstance(directory, dict) else zip(
        directory[::2], directory[1::2], strict=True)
    entries = [(text(a), text(w)) for a, w in pairs]
    commands: list[tuple[Any, ...]] = []
    owners: list[tuple[str | None, str | None]] = []
    for asset_id, where in entries:
        if where == "":
            commands.append(("HGET", core.tenant_key(tenant) + "loose", asset_id))
            owners.append((None, None))
            continue
        store, session_id = where.split("\x00")
        root = await _root(core, tenant, store, session_id)
        commands.append(("HGET", core.tree_key(tenant, store, root or session_id)
                         + "ar:" + session_id, asset_id))
        owners.append((store, session_id))
    found = await _batched(core, commands)
    rows = []
    for (asset_id, _), (owner, owner_session), raw in zip(entries, owners, found,
                                                           strict=True):
        if raw is None:
            continue
        sha256, size, media_type, metadata, created = json.loads(raw)
        row = {"asset_id": asset_id, "sha256": sha256, "size": size, "media_type": media_type,
               "store": owner, "session_id": owner_session, "metadata": metadata,
               "create_time": parse_time(created)}
        rows.append(((row["create_time"], asset_id), row))
    return rows


async def _root(core: RedisCore, tenant: str, store: str, session_id: str) -> str | None:
    """The root of a session's tree, None when the session does not exist."""
    guess = core._root_guess(tenant, store, session_id)
    found = await core._command("HGET", core.tree_key(tenant, store, guess) + "s:"
                                + session_id, "root", write=False)
    if found is not None:
        return text(found)
    claim = await core._command("GET", core.tree_key(tenant, store, session_id) + "fork",
                                write=False)
    if claim is None:
        return None
    root = text(claim).split("|")[0]
    found = await core._command("HGET", core.tree_key(tenant, store, root) + "s:"
                                + session_id, "root", write=False)
    return text(found) if found is not None else None


async def read_grants(core: RedisCore, tenant: str, session_stores: Sequence[str],
                      memory_stores: Sequence[str]) -> list[tuple[Cursor, Row]]:
    named = [("session_store", s) for s in session_stores] + [
        ("memory_store", s) for s in memory_stores]
    found = await _batched(core, [("HGETALL", f"{core.tenant_key(tenant)}grants:{k}:{s}")
                                  for k, s in named])
    rows = []
    for (kind, store), held_grants in zip(named, found, strict=True):
        pairs = held_grants.items() if isinstance(held_grants, dict) else zip(
            held_grants[::2], held_grants[1::2], strict=True)
        for principal, level in pairs:
            row = {"kind": kind, "store": store, "principal": text(principal),
                   "level": text(level)}
            rows.append(((kind, store, row["principal"]), row))
    return rows


_KEY = ("tenant", "principal", "admin", "ct", "rv", "hash")


async def read_keys(core: RedisCore, tenant: str,
                    key_base: Callable[[str], str]) -> list[tuple[Cursor, Row]]:
    ids = [text(m) for m in await core._command(
        "ZRANGE", core.tenant_key(tenant) + "api-keys", 0, -1, write=False)]
    found = await _batched(core, [("HMGET", key_base(i) + "key", *_KEY) for i in ids])
    return [((i,), {"key_id": i, "principal": text(f[1]), "admin": text(f[2]) == "1",
                    "create_time": parse_time(text(f[3])), "revoked_at": _time(f[4]),
                    "secret_hash": text(f[5])})
            for i, f in zip(ids, found, strict=True)
            if f[0] is not None and text(f[0]) == tenant]
