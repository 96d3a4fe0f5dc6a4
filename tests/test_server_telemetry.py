"""The server's telemetry: spans with ids, counts and outcomes but never the data, metrics
per app at /metrics, and access-log lines without bodies, query strings or tokens; and,
read from those spans, that an id the caller may not see costs what an unknown one does.

The tracer provider is handed to each app (never set globally), so these tests leave the
process's OpenTelemetry state as they found it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import ownstate
from ownstate.api import AsyncClient
from ownstate.backends import Backend
from ownstate.backends.memory import MemoryBackend
from ownstate.errors import RunNotFound, SessionNotFound
from ownstate.model import CheckpointScope
from ownstate.server.telemetry import ACCESS_LOGGER, Telemetry
from ownstate.testing.fixtures import run_async
from ownstate.testing.server import LiveServer

ITEM_SECRET = f"item-secret-{uuid.uuid4().hex}"
FACT_SECRET = f"fact-secret-{uuid.uuid4().hex}"
QUERY_SECRET = f"query-secret-{uuid.uuid4().hex}"
AGENTS = "/api/2.0/agents"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(exporter))
    yield made
    made.shutdown()


@pytest.fixture(scope="module")
def server(provider: TracerProvider) -> Iterator[LiveServer]:
    live = LiveServer(f"memory://telemetry-{uuid.uuid4().hex}", tracer_provider=provider)
    yield live
    live.stop()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Callable[[], list[ReadableSpan]]:
    exporter.clear()
    return lambda: list(exporter.get_finished_spans())


def _everything_said(span: ReadableSpan) -> str:
    """Every piece of text a span carries to a tracing backend."""
    parts: list[Any] = [span.name, span.status.description]
    parts += list((span.attributes or {}).items())
    for event in span.events:
        parts += [event.name, *(event.attributes or {}).items()]
    for link in span.links:
        parts += list((link.attributes or {}).items())
    return repr(parts)


def _named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def _eventually(check: Callable[[], Any], seconds: float = 5.0) -> Any:
    """The first truthy result of ``check``: the server logs and counts a request just
    after answering it, so the client may look a moment too early."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.02)


# spans -------------------------------------------------------------------------------


def test_spans_carry_ids_counts_and_outcomes_but_no_data(
        server: LiveServer, spans: Callable[[], list[ReadableSpan]]) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    token = server.mint_key(tenant=tenant, principal="agent-1", admin=True)
    with ownstate.connect(server.url, token=token) as client:
        session = client.session_stores.create("chat").add(actor_id="a", session_id="s1")
        session.append_items([{"role": "user", "content": f"my code is {ITEM_SECRET}"},
                              {"role": "assistant", "content": "noted"}])
        facts = client.memory_stores.create("facts")
        facts.remember("user:1", "door_code", {"code": FACT_SECRET})
        with pytest.raises(SessionNotFound):
            client.session_stores.get("chat").get("absent")
    found = spans()

    (append,) = _named(found, "ownstate.append_items")
    assert dict(append.attributes or {}) == {
        "ownstate.tenant": tenant, "ownstate.store": "chat", "ownstate.session_id": "s1",
        "ownstate.count": 2, "ownstate.outcome": "ok"}
    assert append.status.status_code is StatusCode.UNSET
    (remember,) = _named(found, "ownstate.remember")
    assert remember.attributes is not None
    assert (remember.attributes["ownstate.store"], remember.attributes["ownstate.count"],
            remember.attributes["ownstate.outcome"]) == ("facts", 1, "ok")
    missing = [s for s in _named(found, "ownstate.get_session")
               if (s.attributes or {}).get("ownstate.outcome") != "ok"]
    assert len(missing) == 1
    (failed,) = missing
    assert failed.attributes is not None
    assert failed.attributes["ownstate.outcome"] == "session_not_found"
    assert failed.attributes["error.type"] == "session_not_found"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "session_not_found"
    assert failed.events == ()
    assert all(s.end_time is not None and s.start_time is not None
               and s.end_time >= s.start_time for s in found)
    assert failed.attributes["ownstate.session_id"] == "absent"
    for span in found:
        said = _everything_said(span)
        for secret in (ITEM_SECRET, FACT_SECRET, token):
            assert secret not in said


def test_the_wrapper_keeps_the_backend_and_measures_each_call(
        provider: TracerProvider, spans: Callable[[], list[ReadableSpan]]) -> None:
    telemetry = Telemetry(provider)
    traced = telemetry.traced(MemoryBackend())
    assert isinstance(traced, Backend)
    assert type(traced).capabilities == MemoryBackend.capabilities

    async def scenario() -> None:
        async with AsyncClient(traced, tenant="t-wrap") as client:
            store = await client.session_stores.create("chat")
            session = await store.add(actor_id="a", session_id="s1")
            await session.append_items([{"role": "user", "content": ITEM_SECRET}] * 3)
            page = await store.list_sessions_page()
            assert len(page.items) == 1
            asset = await client.assets.put(ITEM_SECRET.encode(), "text/plain",
                                            session=session)
            assert await client.assets.get(asset.asset_id) == ITEM_SECRET.encode()
            with pytest.raises(RunNotFound):
                await traced.delete_run_checkpoints(
                    "t-wrap", CheckpointScope(actor_id="a", store="chat", session_id="s1",
                                              run_id="run_x"))

    run_async(scenario())
    found = spans()
    assert {"ownstate.create_store", "ownstate.create_session", "ownstate.append_items",
            "ownstate.list_sessions", "ownstate.put_asset",
            "ownstate.get_asset"} <= {s.name for s in found}
    (listed,) = _named(found, "ownstate.list_sessions")
    assert (listed.attributes or {})["ownstate.count"] == 1
    (put,) = _named(found, "ownstate.put_asset")
    assert (put.attributes or {})["ownstate.asset_id"].startswith("ast_")
    (got,) = _named(found, "ownstate.get_asset")
    assert "ownstate.count" not in (got.attributes or {})
    (create,) = _named(found, "ownstate.create_store")
    assert (create.attributes or {})["ownstate.store"] == "chat"
    (checkpoints,) = _named(found, "ownstate.delete_run_checkpoints")
    assert dict(checkpoints.attributes or {}) == {
        "ownstate.tenant": "t-wrap", "ownstate.store": "chat", "ownstate.session_id": "s1",
        "ownstate.run_id": "run_x", "ownstate.outcome": "run_not_found",
        "error.type": "run_not_found"}
    for span in found:
        assert ITEM_SECRET not in _everything_said(span)
    sample = telemetry.registry.get_sample_value
    assert sample("ownstate_storage_operation_duration_seconds_count",
                  {"operation": "append_items", "outcome": "ok"}) == 1
    assert sample("ownstate_storage_operation_duration_seconds_count",
                  {"operation": "delete_run_checkpoints", "outcome": "run_not_found"}) == 1


def test_without_a_tracer_calls_still_work() -> None:
    traced = Telemetry().traced(MemoryBackend())

    async def scenario() -> int:
        async with AsyncClient(traced, tenant="t-quiet") as client:
            store = await client.session_stores.create("quiet")
            session = await store.add(actor_id="a")
            return len(await session.append_items([{"role": "user", "content": "hi"}]))

    assert run_async(scenario()) == 1


def test_a_decision_through_the_traced_backend_wakes_its_waiters() -> None:
    # The waiters listen on the wrapped backend; a traced one with a signal of its own
    # would leave them to find the decision only at their next bounded re-check.
    inner = MemoryBackend()
    traced = Telemetry().traced(inner)
    assert traced.decision_signal is inner.decision_signal

    async def scenario() -> list[object]:
        async with AsyncClient(traced, tenant="t-decide") as client:
            store = await client.session_stores.create("decide")
            run = await client.runs.open_run(await store.add(actor_id="a"), "langgraph")
            await client.runs.mark_awaiting(run.run_id, {"kind": "approval"})
            woken: list[object] = []
            with inner.decision_signal.subscribe() as subscription:
                await client.runs.decide(run.run_id, "approve")
                woken.append(subscription.flag.is_set())
            got = await client.runs.wait_for_decision(run.run_id, timeout=0)
            woken.append(got is not None and got.decided)
            return woken

    assert run_async(scenario()) == [True, True]


# metrics -----------------------------------------------------------------------------


def _scrape(url: str, token: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{url}/metrics", headers=headers, timeout=10)


def test_metrics_count_requests_by_route_and_storage_calls_by_outcome(
        server: LiveServer) -> None:
    token = server.mint_key(tenant=f"t-{uuid.uuid4().hex[:12]}", principal="ops", admin=True)
    auth = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=10) as http:
        assert http.post("/api/2.0/agents/session-stores", json={"name": "metered"}
                         ).status_code == 200
        assert http.get("/api/2.0/agents/session-stores/nowhere").status_code == 404
        assert http.get("/api/2.0/agents/whoami").status_code == 200

    def exposed() -> str | None:
        response = _scrape(server.url)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        text = response.text
        wanted = [
            'ownstate_http_requests_total{method="POST",route="/api/2.0/agents/'
            'session-stores",status="200"}',
            'ownstate_http_requests_total{method="GET",route="/api/2.0/agents/'
            'session-stores/{store}",status="404"}',
            'ownstate_http_request_duration_seconds_count{method="GET",route="/api/2.0/'
            'agents/whoami"}',
            'ownstate_storage_operation_duration_seconds_count{operation="create_store",'
            'outcome="ok"}',
            'ownstate_storage_operation_duration_seconds_count{operation="get_store",'
            'outcome="store_not_found"}',
        ]
        return text if all(w in text for w in wanted) else None

    assert _eventually(exposed), _scrape(server.url).text
    assert token not in _scrape(server.url).text


def test_metrics_are_per_app_and_can_need_a_token() -> None:
    live = LiveServer(f"memory://metrics-{uuid.uuid4().hex}", metrics_token="scrape-me")
    try:
        refused = _scrape(live.url)
        assert refused.status_code == 401
        assert refused.json()["code"] == "unauthenticated"
        assert _scrape(live.url, "wrong").status_code == 401
        admin = live.mint_key(tenant="t-metrics", principal="admin", admin=True)
        assert _scrape(live.url, admin).status_code == 401
        scraped = _scrape(live.url, "scrape-me")
        assert scraped.status_code == 200
        # Another app's storage calls are never counted here.
        assert "ownstate_storage_operation_duration_seconds_count" not in scraped.text
        openapi = httpx.get(f"{live.url}/openapi.json", timeout=10).json()
        assert "/metrics" not in openapi["paths"]
    finally:
        live.stop()


def test_an_empty_metrics_token_is_refused() -> None:
    from ownstate.errors import InvalidInput
    from ownstate.server import create_app

    with pytest.raises(InvalidInput) as err:
        create_app("memory://", metrics_token=" ")
    assert err.value.field == "metrics_token"


# the access log ----------------------------------------------------------------------


def test_access_log_lines_name_the_caller_not_the_data(
        server: LiveServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    token = server.mint_key(tenant=tenant, principal="agent-7", admin=True)
    auth = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=10) as http:
        assert http.post("/api/2.0/agents/session-stores", json={"name": "logged"},
                         headers={"x-request-id": "req-42"}).status_code == 200
        echoed = http.post("/api/2.0/agents/session-stores/logged/sessions",
                           json={"actor_id": "a", "session_id": "s1"})
        assert echoed.status_code == 200
        generated = echoed.headers["x-request-id"]
        appended = http.post(
            "/api/2.0/agents/session-stores/logged/sessions/s1/items:append",
            params={"note": QUERY_SECRET},
            json={"items": [{"data": {"role": "user", "content": ITEM_SECRET}}]},
            headers={"x-request-id": "bad id\twith junk"})
        assert appended.status_code == 200
        assert appended.headers["x-request-id"] != "bad id\twith junk"
        unauthenticated = httpx.get(f"{server.url}/api/2.0/agents/whoami", timeout=10)
        assert unauthenticated.status_code == 401

    def lines() -> list[logging.LogRecord] | None:
        records = [r for r in caplog.records if r.name == ACCESS_LOGGER]
        return records if len([r for r in records if getattr(r, "tenant", None) == tenant
                               or getattr(r, "http_status", None) == 401]) >= 4 else None

    records = _eventually(lines)
    assert records, [r.getMessage() for r in caplog.records]
    mine = [r for r in records if getattr(r, "tenant", None) == tenant]
    first = next(r for r in mine if getattr(r, "request_id", None) == "req-42")
    message = first.getMessage()
    assert message.startswith("POST /api/2.0/agents/session-stores 200 ")
    assert "principal=agent-7" in message
    assert f"tenant={tenant}" in message
    assert "request_id=req-42" in message
    assert first.levelno == logging.INFO
    assert vars(first)["http_route"] == "/api/2.0/agents/session-stores"
    assert any(getattr(r, "request_id", None) == generated for r in mine)
    append = next(r for r in mine if r.getMessage().startswith(
        "POST /api/2.0/agents/session-stores/logged/sessions/s1/items:append 200 "))
    assert vars(append)["http_route"] == (
        "/api/2.0/agents/session-stores/{store}/sessions/{session_id}/items:append")
    assert vars(append)["key_id"] not in ("-", None)
    refused = next(r for r in records if getattr(r, "http_status", None) == 401)
    assert "principal=-" in refused.getMessage()
    for record in records:
        said = repr(vars(record)) + record.getMessage()
        for secret in (ITEM_SECRET, QUERY_SECRET, token, "Bearer"):
            assert secret not in said


# an id the caller may not see costs what an unknown id costs ---------------------------
# The same storage calls, in the same order, counted from the server's own spans (never
# timed), so that neither the answer nor the time to it tells a run or asset of an
# unreadable store from no such thing.


@pytest.fixture(scope="module")
def lookup_server(provider: TracerProvider) -> Iterator[LiveServer]:
    # Every request checks its key (no cache), so each makes the same calls to do so.
    live = LiveServer(f"memory://lookups-{uuid.uuid4().hex}", key_cache_seconds=0,
                      tracer_provider=provider)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def world(lookup_server: LiveServer) -> dict[str, str]:
    """A run and an asset in a store the stranger may not read, an asset of the tenant,
    and the stranger's key (no grant anywhere)."""
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    with ownstate.connect(lookup_server.backend_url, tenant=tenant) as direct:
        session = direct.session_stores.create("hidden").add(actor_id="a", session_id="s1")
        run = direct.runs.open_run(session, framework="langgraph", thread_key="t")
        asset = direct.assets.put(b"private", "text/plain", session=session)
        loose = direct.assets.put(b"loose", "text/plain")
    return {"stranger": lookup_server.mint_key(tenant=tenant, principal="stranger"),
            "run": run.run_id, "asset": asset.asset_id, "loose": loose.asset_id}


def _calls(lookup_server: LiveServer, exporter: InMemorySpanExporter, token: str, method: str,
           path: str) -> tuple[int, list[str]]:
    """The status of one request and the storage calls it made, in order."""
    exporter.clear()
    with httpx.Client(base_url=lookup_server.url,
                      headers={"authorization": f"Bearer {token}"}) as http:
        status = http.request(method, path).status_code
    return status, [s.name for s in exporter.get_finished_spans()]


@pytest.mark.parametrize(("method", "template"), [
    ("GET", "/runs/{run}"),
    ("GET", "/runs/{run}/effects/call-1"),
])
def test_a_run_of_an_unreadable_store_costs_what_an_unknown_run_costs(
        lookup_server: LiveServer, exporter: InMemorySpanExporter, world: dict[str, str],
        method: str, template: str) -> None:
    unseen = _calls(lookup_server, exporter, world["stranger"], method,
                    AGENTS + template.format(run=world["run"]))
    unknown = _calls(lookup_server, exporter, world["stranger"], method,
                     AGENTS + template.format(run="run-" + uuid.uuid4().hex))
    assert unseen[0] == 404
    assert unseen == unknown
    assert "ownstate.get_grant" in unseen[1]


@pytest.mark.parametrize(("method", "template"), [
    ("GET", "/assets/{asset}"),
    ("GET", "/assets/{asset}/content"),
    ("DELETE", "/assets/{asset}"),
])
def test_an_asset_the_caller_may_not_see_costs_what_an_unknown_asset_costs(
        lookup_server: LiveServer, exporter: InMemorySpanExporter, world: dict[str, str],
        method: str, template: str) -> None:
    answers = [_calls(lookup_server, exporter, world["stranger"], method,
                      AGENTS + template.format(asset=asset))
               for asset in (world["asset"], world["loose"], "ast_" + uuid.uuid4().hex)]
    assert answers[0][0] == 404
    assert answers[0] == answers[1] == answers[2]
