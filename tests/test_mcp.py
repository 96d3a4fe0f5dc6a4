"""``ownstate mcp``, driven by the MCP SDK's own client: over stdio against the command in
a subprocess, and over streamable HTTP against the app on a local port, with the API keys
and store permissions of ``ownstate serve``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

import ownstate
from ownstate.limits import MAX_NAME_CHARS
from ownstate.mcp import http_app
from ownstate.testing.server import problem

SRC = Path(ownstate.__file__).resolve().parent.parent
TOOLS = {"memory_remember", "memory_recall", "memory_search", "memory_history",
         "memory_explain", "memory_forget", "sessions_search", "sessions_read",
         "runs_outstanding", "stores_list"}


def _seed(url: str, tenant: str = "default") -> dict[str, str]:
    """A memory store with a fact learned from a session item, a second memory store, and
    a run waiting on a human."""
    with ownstate.connect(url, tenant=tenant) as client:
        chats = client.session_stores.create("chats")
        session = chats.add(actor_id="user:8814", session_id="case-1")
        asked, _ = session.append_items([
            {"type": "message", "role": "user", "content": "Email me, never call."},
            {"type": "message", "role": "assistant", "content": "Noted: email only."},
        ])
        facts = client.memory_stores.create("facts")
        fact = facts.remember("user:8814", "preferred_channel", "email", confidence=0.9,
                              source=asked)
        client.memory_stores.create("secret").remember("user:8814", "salary", 100)
        run = client.runs.open_run(session, framework="langgraph", thread_key="t-1")
        client.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "refund"})
        return {"fact_id": fact.fact_id, "item_id": asked.item_id, "run_id": run.run_id}


def _current(url: str, store: str, subject: str, tenant: str = "default") -> list[Any]:
    with ownstate.connect(url, tenant=tenant) as client:
        return [(f.key, f.value) for f in client.memory_stores.get(store).recall(subject)]


async def _call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def _refused(session: ClientSession, tool: str, code: str,
                   **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    body = result.structured_content
    assert body is not None
    assert body["code"] == code, body
    assert result.content[0].text == body["message"]  # type: ignore[union-attr]
    return body


# stdio -----------------------------------------------------------------------------------


def test_stdio_serves_every_tool_with_a_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    seeded = _seed(url)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ownstate", "--url", url, "mcp", "--memory-store", "facts",
              "--session-store", "chats"],
        env={"PYTHONPATH": str(SRC), "OWNSTATE_URL": "memory://"})

    async def main() -> None:
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                await _exercise(session, seeded)

    anyio.run(main)
    assert _current(url, "facts", "user:8814") == [("preferred_channel", "sms"),
                                                   ("timezone", "Europe/Paris")]


async def _exercise(session: ClientSession, seeded: dict[str, str]) -> None:
    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        assert len(tool.description or "") > 40
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        # the client checks every answer against it
        assert tool.output_schema is not None
        assert tool.output_schema["type"] == "object"
        for name, spec in tool.input_schema["properties"].items():
            assert spec.get("description"), (tool.name, name)
    remember = listed["memory_remember"]
    assert remember.input_schema["required"] == ["subject", "key", "value"]  # store defaults
    assert remember.input_schema["properties"]["subject"]["maxLength"] == MAX_NAME_CHARS
    assert remember.input_schema["properties"]["confidence"]["maximum"] == 1
    assert remember.annotations is not None
    assert remember.annotations.read_only_hint is False
    recall, forget = listed["memory_recall"].annotations, listed["memory_forget"].annotations
    assert recall is not None
    assert recall.read_only_hint is True
    assert forget is not None
    assert forget.destructive_hint is True

    recalled = await _call(session, "memory_recall", subject="user:8814")
    assert [(f["key"], f["value"]) for f in recalled["facts"]] == [("preferred_channel",
                                                                     "email")]
    new = (await _call(session, "memory_remember", subject="user:8814",
                       key="preferred_channel", value="sms", confidence=0.6,
                       source={"store": "chats", "session_id": "case-1",
                               "item_id": seeded["item_id"]}))["fact"]
    assert new["supersedes"] == seeded["fact_id"]
    assert new["source_item_id"] == seeded["item_id"]
    await _call(session, "memory_remember", subject="user:8814", key="timezone",
                value="Europe/Paris", valid_from="2026-01-01T00:00:00Z")
    await _call(session, "memory_remember", subject="user:8814", key="nickname",
                value="Bo")
    assert (await _call(session, "memory_forget", subject="user:8814", key="nickname",
                        reason="asked to"))["fact"]["closed_reason"] == "forgotten: asked to"
    history = (await _call(session, "memory_history", subject="user:8814",
                           key="preferred_channel"))["facts"]
    assert [f["value"] for f in history] == ["email", "sms"]
    explained = await _call(session, "memory_explain", fact_id=new["fact_id"])
    assert explained["superseded"]["fact_id"] == seeded["fact_id"]
    assert explained["source_item"]["data"]["content"] == "Email me, never call."
    hits = (await _call(session, "memory_search", query="Which timezone, Paris?"))["hits"]
    assert [h["fact"]["key"] for h in hits] == ["timezone"]
    assert hits[0]["score"] > 0
    hits = (await _call(session, "memory_search", query="email", as_of="2025-01-01T00:00:00Z"))
    assert hits == {"hits": []}  # nothing was remembered yet then

    found = (await _call(session, "sessions_search", query="email only?"))["hits"]
    assert [(h["store"], h["item"]["session_id"], h["item"]["seq"]) for h in found] == [
        ("chats", "case-1", 2), ("chats", "case-1", 1)]
    assert found[0]["score"] > found[1]["score"]
    assert found[0]["actor_id"] == "user:8814"
    narrowed = await _call(session, "sessions_search", query="email", actor_id="user:1")
    assert narrowed == {"hits": []}

    read = await _call(session, "sessions_read", session_id="case-1", limit=1)
    assert read["session"]["actor_id"] == "user:8814"
    assert [i["seq"] for i in read["items"]] == [1]
    assert read["next_after_seq"] == 1
    rest = await _call(session, "sessions_read", session_id="case-1", after_seq=1)
    assert [i["data"]["role"] for i in rest["items"]] == ["assistant"]
    assert rest["next_after_seq"] is None
    runs = (await _call(session, "runs_outstanding"))["runs"]
    assert [(r["run_id"], r["awaiting"]["tool"]) for r in runs] == [(seeded["run_id"],
                                                                     "refund")]
    assert await _call(session, "stores_list") == {
        "memory_stores": ["facts", "secret"], "session_stores": ["chats"]}

    # bad input: the library's error and message, and nothing stored
    body = await _refused(session, "memory_remember", "invalid_input", subject="user:8814",
                          key="preferred_channel", value="fax", confidence=2)
    assert body["details"]["field"] == "confidence"
    await _refused(session, "memory_remember", "invalid_input", subject=" ",
                   key="preferred_channel", value="fax")
    await _refused(session, "memory_remember", "limit_exceeded", subject="user:8814",
                   key="preferred_channel", value="x" * (1024 * 1024 + 1))
    await _refused(session, "memory_remember", "invalid_input", subject="user:8814",
                   key="preferred_channel", value="fax", valid_from="yesterday")
    body = await _refused(session, "memory_remember", "invalid_input", subject="user:8814",
                          key="preferred_channel", value="fax", colour="red")
    assert body["details"]["field"] == "colour"
    body = await _refused(session, "memory_recall", "invalid_input")
    assert (body["message"], body["details"]) == ("subject is required", {"field": "subject"})
    await _refused(session, "memory_remember", "item_not_found", subject="user:8814",
                   key="preferred_channel", value="fax",
                   source={"store": "chats", "session_id": "case-1", "item_id": "nope"})
    await _refused(session, "memory_recall", "store_not_found", store="nowhere",
                   subject="user:8814")
    await _refused(session, "sessions_read", "session_not_found", session_id="case-2")
    await _refused(session, "sessions_read", "invalid_input", session_id="case-1",
                   limit=1001)
    await _refused(session, "runs_outstanding", "invalid_input", status="done")
    await _refused(session, "memory_search", "invalid_input", query="?!")
    await _refused(session, "memory_search", "limit_exceeded", query="a" * 2001)
    await _refused(session, "sessions_search", "limit_exceeded", query="email", limit=0)
    await _refused(session, "sessions_search", "store_not_found", query="email",
                   store="nowhere")
    await _refused(session, "no_such_tool", "invalid_input")


def test_stdio_as_a_principal_sees_only_its_grants(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    _seed(url)
    with ownstate.connect(url) as client:
        client.memory_stores.get("facts").grant_permission("bob", "READ")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ownstate", "mcp", "--url", url, "--principal", "bob"],
        env={"PYTHONPATH": str(SRC)})

    async def main() -> None:
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                assert (await _call(session, "stores_list")) == {
                    "memory_stores": ["facts"], "session_stores": []}
                await _call(session, "memory_recall", store="facts", subject="user:8814")
                await _refused(session, "memory_remember", "permission_denied",
                               store="facts", subject="user:8814", key="k", value=1)
                await _refused(session, "memory_recall", "store_not_found", store="secret",
                               subject="user:8814")

    anyio.run(main)
    assert _current(url, "facts", "user:8814") == [("preferred_channel", "email")]


# streamable HTTP ---------------------------------------------------------------------------


class _Served:
    def __init__(self, url: str, tenant: str) -> None:
        import uvicorn

        from ownstate.server.serving import uvicorn_config

        app = http_app(url, tenant=tenant, key_cache_seconds=0)
        config = uvicorn_config(app, host="127.0.0.1", port=0, log_level="warning",
                                lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            assert self._thread.is_alive()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[_Served, str, dict[str, str]]]:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    seeded = _seed(url, tenant="acme")
    _seed(url, tenant="other")
    server = _Served(url, "acme")
    try:
        yield server, url, seeded
    finally:
        server.stop()


def _token(url: str, principal: str, *, tenant: str = "acme", admin: bool = False,
           grants: dict[str, str] | None = None) -> str:
    with ownstate.connect(url, tenant=tenant) as client:
        for store, level in (grants or {}).items():
            client.memory_stores.get(store).grant_permission(principal, level)
        return client.api_keys.create(principal, admin=admin)[1]


@asynccontextmanager
async def _http_session(endpoint: str, token: str) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
            streamable_http_client(endpoint, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def test_http_acts_for_the_key_of_each_request(
        served: tuple[_Served, str, dict[str, str]]) -> None:
    server, url, seeded = served
    admin = _token(url, "ops", admin=True)

    async def main() -> None:
        async with _http_session(server.endpoint, admin) as session:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            await _call(session, "memory_remember", store="facts", subject="user:1",
                        key="plan", value={"tier": "pro"})
            explained = await _call(session, "memory_explain", store="facts",
                                    fact_id=seeded["fact_id"])
            assert explained["source_item"]["item_id"] == seeded["item_id"]
            runs = (await _call(session, "runs_outstanding"))["runs"]
            assert [r["run_id"] for r in runs] == [seeded["run_id"]]

    anyio.run(main)
    assert _current(url, "facts", "user:1", tenant="acme") == [("plan", {"tier": "pro"})]
    assert _current(url, "facts", "user:1", tenant="other") == []


def test_http_a_read_key_reads_and_is_refused_writes(
        served: tuple[_Served, str, dict[str, str]]) -> None:
    server, url, seeded = served
    reader = _token(url, "bob", grants={"facts": "READ"})

    async def main() -> None:
        async with _http_session(server.endpoint, reader) as session:
            recalled = await _call(session, "memory_recall", store="facts",
                                   subject="user:8814")
            assert [f["value"] for f in recalled["facts"]] == ["email"]
            body = await _refused(session, "memory_remember", "permission_denied",
                                  store="facts", subject="user:8814",
                                  key="preferred_channel", value="fax")
            assert body["details"] == {"needed": "WRITE", "store": "facts"}
            await _refused(session, "memory_forget", "permission_denied", store="facts",
                           subject="user:8814", key="preferred_channel")
            # a store it may not read, and a session store: exactly as if none were there
            await _refused(session, "memory_recall", "store_not_found", store="secret",
                           subject="user:8814")
            await _refused(session, "sessions_read", "session_not_found", store="chats",
                           session_id="case-1")
            await _refused(session, "sessions_search", "store_not_found", query="email",
                           store="chats")
            assert await _call(session, "sessions_search", query="email") == {"hits": []}
            hits = (await _call(session, "memory_search", store="facts",
                                query="email"))["hits"]
            assert [h["fact"]["fact_id"] for h in hits] == [seeded["fact_id"]]
            assert (await _call(session, "runs_outstanding"))["runs"] == []
            # the fact's source item is in a session store it may not read
            explained = await _call(session, "memory_explain", store="facts",
                                    fact_id=seeded["fact_id"])
            assert explained["source_item"] is None
            assert await _call(session, "stores_list") == {"memory_stores": ["facts"],
                                                          "session_stores": []}

    anyio.run(main)
    assert _current(url, "facts", "user:8814", tenant="acme") == [("preferred_channel",
                                                                   "email")]


def test_http_a_writer_names_only_sources_it_may_read(
        served: tuple[_Served, str, dict[str, str]]) -> None:
    server, url, seeded = served
    writer = _token(url, "wes", grants={"facts": "WRITE"})
    source = {"store": "chats", "session_id": "case-1", "item_id": seeded["item_id"]}

    async def main() -> None:
        async with _http_session(server.endpoint, writer) as session:
            body = await _refused(session, "memory_remember", "item_not_found",
                                  store="facts", subject="user:8814", key="preferred_channel",
                                  value="fax", source=source)
            assert body["details"] == {"item_id": seeded["item_id"], "session_id": "case-1"}
            await _call(session, "memory_remember", store="facts", subject="user:8814",
                        key="timezone", value="UTC")

    anyio.run(main)
    assert _current(url, "facts", "user:8814", tenant="acme") == [
        ("preferred_channel", "email"), ("timezone", "UTC")]


def test_http_refuses_a_missing_bad_or_foreign_key_with_401(
        served: tuple[_Served, str, dict[str, str]]) -> None:
    server, url, _ = served
    foreign = _token(url, "ops", tenant="other", admin=True)
    revoked = _token(url, "old", admin=True)
    with ownstate.connect(url, tenant="acme") as client:
        client.api_keys.revoke(revoked.split("_")[1])
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"accept": "application/json, text/event-stream"}
    for authorization in (None, "Bearer osk_nope", "Basic abc", f"Bearer {foreign}",
                          f"Bearer {revoked}"):
        sent = dict(headers, **({"authorization": authorization} if authorization else {}))
        response = httpx.post(server.endpoint, json=initialize, headers=sent)
        problem(response, 401, "unauthenticated")
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_http_a_session_goes_on_only_with_the_key_that_opened_it(
        served: tuple[_Served, str, dict[str, str]]) -> None:
    server, url, _ = served
    first, second = _token(url, "ann", admin=True), _token(url, "ben", admin=True)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"accept": "application/json, text/event-stream"}
    opened = httpx.post(server.endpoint, json=initialize,
                        headers=dict(accept, authorization=f"Bearer {first}"))
    assert opened.status_code == 200, opened.text
    session_id = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    taken = httpx.post(server.endpoint, json=listing, headers=dict(
        accept, authorization=f"Bearer {second}", **{"mcp-session-id": session_id,
                                                     "mcp-protocol-version": "2025-06-18"}))
    assert taken.status_code == 404
