"""An id the caller may not see costs what an unknown id costs: the same storage calls, in
the same order, counted from the server's own spans (never timed), so that neither the
answer nor the time to it tells a run or asset of an unreadable store from no such thing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ownstate
from ownstate.testing.server import LiveServer

AGENTS = "/api/2.0/agents"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def server(exporter: InMemorySpanExporter) -> Iterator[LiveServer]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    live = LiveServer(f"memory://lookups-{uuid.uuid4().hex}", key_cache_seconds=0,
                      tracer_provider=provider)
    yield live
    live.stop()
    provider.shutdown()


@pytest.fixture(scope="module")
def world(server: LiveServer) -> dict[str, str]:
    """A run and an asset in a store the stranger may not read, an asset of the tenant,
    and the stranger's key (no grant anywhere)."""
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    with ownstate.connect(server.backend_url, tenant=tenant) as direct:
        session = direct.session_stores.create("hidden").add(actor_id="a", session_id="s1")
        run = direct.runs.open_run(session, framework="langgraph", thread_key="t")
        asset = direct.assets.put(b"private", "text/plain", session=session)
        loose = direct.assets.put(b"loose", "text/plain")
    return {"stranger": server.mint_key(tenant=tenant, principal="stranger"),
            "run": run.run_id, "asset": asset.asset_id, "loose": loose.asset_id}


def _calls(server: LiveServer, exporter: InMemorySpanExporter, token: str, method: str,
           path: str) -> tuple[int, list[str]]:
    """The status of one request and the storage calls it made, in order."""
    exporter.clear()
    with httpx.Client(base_url=server.url,
                      headers={"authorization": f"Bearer {token}"}) as http:
        status = http.request(method, path).status_code
    return status, [s.name for s in exporter.get_finished_spans()]


@pytest.mark.parametrize(("method", "template"), [
    ("GET", "/runs/{run}"),
    ("GET", "/runs/{run}/effects/call-1"),
])
def test_a_run_of_an_unreadable_store_costs_what_an_unknown_run_costs(
        server: LiveServer, exporter: InMemorySpanExporter, world: dict[str, str],
        method: str, template: str) -> None:
    unseen = _calls(server, exporter, world["stranger"], method,
                    AGENTS + template.format(run=world["run"]))
    unknown = _calls(server, exporter, world["stranger"], method,
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
        server: LiveServer, exporter: InMemorySpanExporter, world: dict[str, str],
        method: str, template: str) -> None:
    answers = [_calls(server, exporter, world["stranger"], method,
                      AGENTS + template.format(asset=asset))
               for asset in (world["asset"], world["loose"], "ast_" + uuid.uuid4().hex)]
    assert answers[0][0] == 404
    assert answers[0] == answers[1] == answers[2]
