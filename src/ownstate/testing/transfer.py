"""State of every kind, for tests of the transfer port, archives and copies.

:func:`fill_every_kind` writes, through the public API, at least one row of every part an
archive holds: stores, sessions (with labels, and a fork), items with non-ASCII text and
mixed JSON (appended with idempotency keys), a store that does not index its items
(``index_items=False``) holding one, every version of a corrected and of a forgotten
fact, a run awaiting a human with its lease token, a run a human has decided on, an
effect and checkpoints with pending writes in two namespaces, a closed run with a cost,
assets shared by content and loose, grants and an API key.
:func:`part_rows` reads every row of a backend back a few at a time, so that paging is
exercised on every part.

It may touch the public sync API, the transfer port's part names and row shape
(``ownstate.backends.ports.transfer``) and the model; never a backend directly.
"""

from __future__ import annotations

from typing import Any

import ownstate
from ownstate.backends.ports.transfer import PARTS, Row
from ownstate.model import PendingWrite

__all__ = ["fill_every_kind", "first_items", "part_rows"]


def first_items(items: int = 7) -> list[dict[str, Any]]:
    """What :func:`fill_every_kind` appends to each session first, in one call with the
    idempotency key ``fill-N`` (N the session's number): retried, it writes nothing."""
    return [{"type": "message", "role": "user", "content": f"hi {j} ünï", "z": 1,
             "a": [1.5, None, True]} for j in range(items)]


def fill_every_kind(client: ownstate.Client, *, sessions: int = 3, items: int = 7) -> None:
    """Write state of every kind into the client's tenant (see the module docstring)."""
    store = client.session_stores.create("st-one")
    other = client.session_stores.create("st-two")
    made = []
    for i in range(sessions):
        session = store.add(actor_id=f"user:{i}", session_id=f"s{i}",
                            metadata={"b": "1", "a": str(i)})
        session.append_items(first_items(items), idempotency_key=f"fill-{i}")
        made.append(session)
    made[0].fork(session_id="s0-child")
    lonely = other.add(actor_id="user:9", session_id="lonely")
    quiet = client.session_stores.create("st-quiet", index_items=False)
    hush = quiet.add(actor_id="user:8", session_id="hush")
    hush.append_items([{"type": "message", "role": "user", "content": "whispered secret"}])
    memory = client.memory_stores.create("mem")
    memory.remember("user:1", "k", "v", confidence=0.5)
    memory.remember("user:1", "k", {"nested": [1, 2], "b": 1})
    memory.remember("user:1", "tz", "UTC")
    memory.forget("user:1", "tz")
    run = client.runs.open_run(made[0], framework="langgraph", thread_key="t", owner="w1")
    client.runs.record_effect(run.run_id, "call-1", {"ok": True, "n": 3})
    scope = run.checkpoint_scope()
    client.checkpoints.put(scope, "cp-2", type_tag="msgpack", payload=b"\x00\x01two",
                           metadata={"step": 2, "a": "x"})
    client.checkpoints.put(scope, "cp-1", type_tag="msgpack", payload=b"one",
                           parent_checkpoint_id="cp-2", namespace="sub")
    client.checkpoints.put_writes(scope, "cp-2", [
        PendingWrite("task", 0, "messages", "json", b"[1]"),
        PendingWrite("task", 1, "x", "json", b"{}", "p")])
    client.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "refund",
                                           "payload": {"amount": 5}}, fencing_token=1)
    decided = client.runs.open_run(hush, framework="langgraph", thread_key="d")
    client.runs.mark_awaiting(decided.run_id, {"kind": "approval"},
                              fencing_token=decided.fencing_token)
    client.runs.decide(decided.run_id, "approve", comment="fine ✓", payload={"amount": 4},
                       decided_by="alice")
    closed = client.runs.open_run(lonely, framework="openai")
    client.runs.close_run(closed.run_id, status="done", usd_cost=0.25)
    client.assets.put(b"\x89PNG bytes", "image/png", session=lonely, metadata={"k": "v"})
    client.assets.put(b"\x89PNG bytes", "image/png")
    client.assets.put(b"other", "text/plain")
    store.grant_permission("alice", "WRITE")
    memory.grant_permission("bob", "READ")
    client.api_keys.create("svc", admin=True)


def part_rows(client: ownstate.Client, *, page: int = 3) -> dict[str, list[Row]]:
    """Every row of every part of the client's tenant, read ``page`` rows at a time."""
    backend, tenant = client.backend, client.tenant

    async def read(part: str) -> list[Row]:
        rows: list[Row] = []
        after: Any = None
        while True:
            found, after = await backend.export_rows(tenant, part, after, page)
            rows.extend(found)
            if after is None:
                return rows

    return {part: client._portal.call(read(part)) for part in PARTS}
