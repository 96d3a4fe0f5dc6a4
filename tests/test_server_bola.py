"""Every route, called with ids that belong to someone else (broken object-level
authorization, swept).

Two servers answer the same requests: one whose database holds the victim's state (a
tenant with a session store, a session with items, a memory store with a fact, a run that
awaits a human with an effect and a checkpoint, an asset, API keys and grants), and one
whose database holds none of it. Two attackers call every route with the victim's ids:
an admin of another tenant, and a principal of the victim's tenant with no grant on the
victim's stores. On both servers they must get the same status and, for every refusal,
byte-identical bodies: nothing tells them the victim's ids exist. A principal with READ on
the victim's stores must be refused every change. Afterwards the victim's state is exactly
as it was. The sweep covers every operation in /openapi.json, so a new route cannot skip
it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import ownstate
from ownstate.model import CheckpointScope
from ownstate.testing.server import LiveServer

VICTIM = "victim"
ATTACKER = "attacker"


@dataclass
class World:
    """One server and the keys of everyone who calls it."""

    server: LiveServer
    keys: dict[str, str]
    ids: dict[str, str]


def _build(with_victim: bool) -> World:
    database = f"memory://bola-{uuid.uuid4().hex}"
    server = LiveServer(database, key_cache_seconds=0)
    keys = {
        "foreign-admin": server.mint_key(tenant=ATTACKER, principal="eve", admin=True),
        "outsider": server.mint_key(tenant=VICTIM, principal="mallory"),
        "reader": server.mint_key(tenant=VICTIM, principal="reader"),
        "owner": server.mint_key(tenant=VICTIM, principal="alice"),
    }
    ids = {"store": "victim-store", "memory": "victim-memory", "session_id": "victim-session",
           "actor_id": "actor-v", "run_id": "run_victim", "checkpoint_id": "cp-victim",
           "tool_call_id": "call-victim", "item_id": "itm_" + "0" * 32,
           "fact_id": "fct_" + "0" * 32, "asset_id": "ast_" + "0" * 32,
           "key_id": keys["owner"].split("_")[1], "subject": "user:victim"}
    with ownstate.connect(server.url, token=keys["outsider"]) as outsider:
        outsider.session_stores.create("mallory-store")
        outsider.memory_stores.create("mallory-memory")
    if with_victim:
        with ownstate.connect(server.url, token=keys["owner"]) as owner:
            store = owner.session_stores.create(ids["store"])
            session = store.add(actor_id=ids["actor_id"], session_id=ids["session_id"],
                                metadata={"secret": "VICTIM-LABEL"})
            items = session.append_items([
                {"type": "message", "role": "user", "content": "VICTIM-SECRET-TEXT"},
                {"type": "message", "role": "assistant", "content": "VICTIM-ANSWER"}])
            ids["item_id"] = items[0].item_id
            memory = owner.memory_stores.create(ids["memory"])
            fact = memory.remember(ids["subject"], "secret", "VICTIM-SECRET-VALUE",
                                   source=items[0])
            ids["fact_id"] = fact.fact_id
            owner.runs.open_run(session, framework="langgraph", run_id=ids["run_id"],
                                owner="worker")
            owner.runs.record_effect(ids["run_id"], ids["tool_call_id"], {"ok": "VICTIM-EFFECT"},
                                     fencing_token=1)
            scope = CheckpointScope(ids["actor_id"], ids["store"], ids["session_id"],
                                    ids["run_id"])
            owner.checkpoints.put(scope, checkpoint_id=ids["checkpoint_id"], type_tag="json",
                                  payload=b"VICTIM-CHECKPOINT")
            owner.runs.mark_awaiting(ids["run_id"], {"kind": "approval", "tool": "refund"})
            asset = owner.assets.put(b"VICTIM-ASSET-BYTES", media_type="text/plain",
                                     session=session)
            ids["asset_id"] = asset.asset_id
            store.grant_permission("reader", "READ")
            memory.grant_permission("reader", "READ")
    return World(server, keys, ids)


@pytest.fixture(scope="module")
def worlds() -> Iterator[tuple[World, World]]:
    victim, empty = _build(True), _build(False)
    yield victim, empty
    victim.server.stop()
    empty.server.stop()


# one request per operation ---------------------------------------------------------------

Request = dict[str, Any]
A = "/api/2.0/agents"
S = A + "/session-stores/{store}/sessions/{session_id}"
R = S + "/runs/{run_id}"


def _checkpoint_body(ids: dict[str, str]) -> bytes:
    envelope = {"checkpoint_id": ids["checkpoint_id"], "type_tag": "json", "namespace": "",
                "parent_checkpoint_id": None, "metadata": {}}
    return json.dumps(envelope).encode() + b"\nATTACK"


def _writes_body(ids: dict[str, str]) -> bytes:
    envelope = {"checkpoint_id": ids["checkpoint_id"], "namespace": "",
                "writes": [{"task_id": "t", "index": 0, "channel": "c", "type_tag": "json",
                            "task_path": "", "size": 6}]}
    return json.dumps(envelope).encode() + b"\nATTACK"


def _scope(ids: dict[str, str]) -> dict[str, str]:
    return {"actor_id": ids["actor_id"]}


#: (method, path template) -> request for it, from the victim's ids
OPERATIONS: dict[tuple[str, str], Callable[[dict[str, str]], Request]] = {
    ("GET", A + "/whoami"): lambda i: {},
    ("GET", A + "/whoami/grants"): lambda i: {},
    ("GET", A + "/api-keys"): lambda i: {},
    ("POST", A + "/api-keys"): lambda i: {"json": {"principal": "intruder", "admin": True}},
    ("POST", A + "/api-keys/{key_id}:revoke"): lambda i: {},
    ("POST", A + "/session-stores"): lambda i: {"json": {"name": "intruder-store"}},
    ("GET", A + "/session-stores"): lambda i: {},
    ("GET", A + "/session-stores/{store}"): lambda i: {},
    ("DELETE", A + "/session-stores/{store}"): lambda i: {"params": {"force": "true"}},
    ("POST", A + "/session-stores/{store}/permissions:grant"): lambda i: {
        "json": {"principal": {"name": "mallory"}, "permission": "MANAGE"}},
    ("POST", A + "/session-stores/{store}/permissions:revoke"): lambda i: {
        "json": {"principal": {"name": "reader"}}},
    ("GET", A + "/session-stores/{store}/permissions"): lambda i: {},
    ("POST", A + "/session-stores/{store}/sessions"): lambda i: {
        "json": {"actor_id": i["actor_id"], "session_id": "intruder-session"}},
    ("GET", A + "/session-stores/{store}/sessions"): lambda i: {},
    ("GET", S): lambda i: {},
    ("PATCH", S): lambda i: {"json": {"metadata": {"secret": "ATTACKER"}}},
    ("DELETE", S): lambda i: {"params": {"force": "true"}},
    ("POST", A + "/session-stores/{store}/sessions:fork"): lambda i: {
        "json": {"source_session_id": i["session_id"], "session_id": "intruder-fork"}},
    ("POST", S + "/items:append"): lambda i: {
        "json": {"items": [{"data": {"role": "user", "content": "ATTACK"}}]}},
    ("GET", S + "/items"): lambda i: {},
    ("GET", S + "/items/{item_id}"): lambda i: {},
    ("POST", S + "/items:pop"): lambda i: {},
    ("POST", S + "/items:clear"): lambda i: {},
    ("GET", S + "/history"): lambda i: {},
    ("POST", A + "/memory-stores"): lambda i: {"json": {"name": "intruder-memory"}},
    ("GET", A + "/memory-stores"): lambda i: {},
    ("GET", A + "/memory-stores/{memory}"): lambda i: {},
    ("DELETE", A + "/memory-stores/{memory}"): lambda i: {},
    ("POST", A + "/memory-stores/{memory}/permissions:grant"): lambda i: {
        "json": {"principal": {"name": "mallory"}, "permission": "WRITE"}},
    ("POST", A + "/memory-stores/{memory}/permissions:revoke"): lambda i: {
        "json": {"principal": {"name": "reader"}}},
    ("GET", A + "/memory-stores/{memory}/permissions"): lambda i: {},
    ("POST", A + "/memory-stores/{memory}/facts"): lambda i: {
        "json": {"subject": i["subject"], "key": "secret", "value": "ATTACK"}},
    ("POST", A + "/memory-stores/{memory}/facts:batch"): lambda i: {
        "json": {"facts": [{"subject": i["subject"], "key": "secret", "value": "ATTACK"}]}},
    ("POST", A + "/memory-stores/{memory}/facts:recall"): lambda i: {
        "json": {"subject": i["subject"]}},
    ("GET", A + "/memory-stores/{memory}/facts:history"): lambda i: {
        "params": {"subject": i["subject"], "key": "secret"}},
    ("GET", A + "/memory-stores/{memory}/subjects"): lambda i: {"params": {"page_size": 5}},
    ("POST", A + "/memory-stores/{memory}/facts:search"): lambda i: {
        "json": {"query": "VICTIM"}},
    ("POST", A + "/items:search"): lambda i: {
        "json": {"query": "VICTIM", "store": i["store"]}},
    ("POST", A + "/memory-stores/{memory}/facts:forget"): lambda i: {
        "json": {"subject": i["subject"], "key": "secret"}},
    ("GET", A + "/memory-stores/{memory}/facts/{fact_id}"): lambda i: {},
    ("GET", A + "/memory-stores/{memory}/facts/{fact_id}/explanation"): lambda i: {},
    ("POST", A + "/subjects:erase"): lambda i: {
        "json": {"subject": i["subject"], "include_sessions": True}},
    ("GET", A + "/subjects:export"): lambda i: {"params": {"subject": i["subject"]}},
    ("GET", A + "/subjects:facts"): lambda i: {"params": {"subject": i["subject"]}},
    ("POST", S + "/runs"): lambda i: {"json": {"framework": "langgraph"}},
    ("GET", A + "/runs/{run_id}"): lambda i: {},
    ("GET", A + "/runs"): lambda i: {},
    ("GET", A + "/runs:outstanding"): lambda i: {},
    ("POST", A + "/runs/{run_id}:await"): lambda i: {"json": {"awaiting": {"kind": "x"}}},
    ("POST", A + "/runs/{run_id}:resume"): lambda i: {"json": {"owner": "intruder"}},
    ("POST", A + "/runs/{run_id}:heartbeat"): lambda i: {"json": {"fencing_token": 1}},
    ("POST", A + "/runs/{run_id}:close"): lambda i: {"json": {"status": "cancelled"}},
    ("PUT", A + "/runs/{run_id}/effects/{tool_call_id}"): lambda i: {
        "json": {"result": "ATTACK"}},
    ("GET", A + "/runs/{run_id}/effects/{tool_call_id}"): lambda i: {},
    ("GET", A + "/runs:awaiting"): lambda i: {},
    ("POST", A + "/runs/{run_id}:decide"): lambda i: {"json": {"outcome": "approve"}},
    ("GET", A + "/runs/{run_id}/decision"): lambda i: {},
    ("POST", R + "/checkpoints:put"): lambda i: {
        "params": _scope(i), "content": _checkpoint_body(i),
        "headers": {"content-type": "application/octet-stream"}},
    ("POST", R + "/checkpoints:put_writes"): lambda i: {
        "params": _scope(i), "content": _writes_body(i),
        "headers": {"content-type": "application/octet-stream"}},
    ("GET", R + "/checkpoints:get"): lambda i: {"params": _scope(i)},
    ("GET", R + "/checkpoints"): lambda i: {"params": _scope(i)},
    ("DELETE", R + "/checkpoints"): lambda i: {"params": _scope(i)},
    ("POST", R + "/checkpoints:delete"): lambda i: {
        "params": _scope(i), "json": {"checkpoint_ids": [i["checkpoint_id"]]}},
    ("DELETE", S + "/checkpoints"): lambda i: {"params": _scope(i)},
    ("POST", R + "/checkpoints:copy"): lambda i: {
        "params": _scope(i), "json": {"target": {
            "actor_id": i["actor_id"], "store": i["store"], "session_id": i["session_id"],
            "run_id": i["run_id"]}}},
    ("POST", A + "/checkpoints:apply_retention"): lambda i: {"json": {"keep_last": 1}},
    ("GET", A + "/checkpoints:usage"): lambda i: {"params": {"run_id": i["run_id"]}},
    ("POST", A + "/assets"): lambda i: {
        "params": {"store": i["store"], "session_id": i["session_id"]},
        "content": b"ATTACK", "headers": {"content-type": "text/plain"}},
    ("GET", A + "/assets/{asset_id}"): lambda i: {},
    ("DELETE", A + "/assets/{asset_id}"): lambda i: {},
    ("GET", A + "/assets/{asset_id}/content"): lambda i: {},
    ("GET", S + "/assets"): lambda i: {},
}

#: requests that read, though their method is POST
READS_BY_POST = {"/facts:recall", "/facts:search", "/items:search"}



def _template(path: str) -> str:
    """The OpenAPI path with the memory store's parameter told apart from the session
    store's (both are ``{store}`` in the document)."""
    return path.replace("/memory-stores/{store}", "/memory-stores/{memory}")


def _send(world: World, who: str, method: str, template: str) -> httpx.Response:
    ids = world.ids
    request = dict(OPERATIONS[(method, template)](ids))
    path = template.format(**ids)
    headers = {"authorization": f"Bearer {world.keys[who]}", **request.pop("headers", {})}
    return httpx.request(method, world.server.url + path, headers=headers, timeout=30,
                         **request)


def _markers(world: World) -> list[str]:
    ids = world.ids
    return ["VICTIM-", ids["item_id"], ids["fact_id"], ids["asset_id"], ids["key_id"]]


def _snapshot(world: World) -> dict[str, Any]:
    """Everything the victim's tenant holds, as plain data."""
    ids = world.ids
    with ownstate.connect(world.server.backend_url, tenant=VICTIM) as direct:
        store = direct.session_stores.get(ids["store"])
        session = store.get(ids["session_id"])
        memory = direct.memory_stores.get(ids["memory"])
        scope = CheckpointScope(ids["actor_id"], ids["store"], ids["session_id"], ids["run_id"])
        return {
            # Others may add stores of their own; the victim's must all stay.
            "stores": [s.name for s in direct.session_stores.list()
                       if s.name.startswith("victim")],
            "sessions": [(s.session_id, s.metadata) for s in store.list_sessions()],
            "items": [(i.item_id, i.data) for i in session.list_items()],
            "grants": store.permissions() + memory.permissions(),
            "facts": memory.history(ids["subject"], "secret"),
            "run": direct.runs.get(ids["run_id"]),
            "effect": direct.runs.get_effect(ids["run_id"], ids["tool_call_id"]),
            "checkpoints": list(direct.checkpoints.list(scope)),
            "assets": direct.assets.list(session),
            "asset": direct.assets.get(ids["asset_id"]),
            "keys": direct.api_keys.list(),
        }


def test_the_sweep_covers_every_operation(worlds: tuple[World, World]) -> None:
    victim, _ = worlds
    documented = {(method.upper(), _template(path))
                  for path, operations in victim.server.app.openapi()["paths"].items()
                  for method in operations}
    assert documented == set(OPERATIONS)


@pytest.mark.parametrize("who", ["foreign-admin", "outsider"])
def test_others_ids_get_exactly_what_missing_ids_get(worlds: tuple[World, World],
                                                     who: str) -> None:
    victim, empty = worlds
    before = _snapshot(victim)
    empty.ids.update(victim.ids)  # the same ids, where none of them exist
    for method, template in OPERATIONS:
        there = _send(victim, who, method, template)
        nowhere = _send(empty, who, method, template)
        label = f"{who} {method} {template}"
        assert there.status_code < 500, (label, there.text)
        assert there.status_code == nowhere.status_code, (label, there.text, nowhere.text)
        if there.status_code >= 400:
            assert there.content == nowhere.content, (label, there.text, nowhere.text)
            assert there.headers["content-type"] == "application/problem+json"
        else:
            for marker in _markers(victim):
                assert marker not in there.text, (label, marker, there.text)
    assert _snapshot(victim) == before


def test_a_reader_may_read_and_is_refused_every_change(worlds: tuple[World, World]) -> None:
    victim, _ = worlds
    before = _snapshot(victim)
    for method, template in OPERATIONS:
        if "{" not in template or "api-keys" in template:
            continue  # not about the victim's stores
        reads = method == "GET" or any(template.endswith(p) for p in READS_BY_POST)
        response = _send(victim, "reader", method, template)
        label = f"{method} {template}"
        if reads:
            assert response.status_code == 200, (label, response.text)
        else:
            assert response.status_code == 403, (label, response.text)
            assert response.json()["code"] == "permission_denied"
    assert _snapshot(victim) == before


def test_a_taken_store_name_is_a_clash_for_everyone_in_the_tenant(
        worlds: tuple[World, World]) -> None:
    """Names are unique in a tenant, so creating a taken one must fail whoever asks; the
    answer says the name is taken and nothing more, and changes nothing."""
    victim, _ = worlds
    before = _snapshot(victim)
    for collection, name in (("session-stores", victim.ids["store"]),
                             ("memory-stores", victim.ids["memory"])):
        answer = httpx.post(f"{victim.server.url}{A}/{collection}", json={"name": name},
                            headers={"authorization": f"Bearer {victim.keys['outsider']}"})
        assert answer.status_code == 409
        assert answer.json()["code"] == "already_exists"
        assert answer.json()["details"] == {"store": name}
    assert _snapshot(victim) == before
