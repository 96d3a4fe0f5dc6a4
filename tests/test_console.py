"""The operator's console, end to end: a real ``ownstate serve`` process, driven by a real
headless Chromium (Debian's ``chromium``, through Playwright), with agents that pause and
resume through the LangGraph and OpenAI Agents adapters over the server's HTTP API.

Without chromium or Playwright these tests skip, unless OWNSTATE_REQUIRE_BACKENDS names
``browser`` (CI sets it). With OWNSTATE_SCREENSHOTS=docs/img/console they also write the
screenshots docs/console.md shows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import _require
from test_server_security import _free_port, _wait_ready

import ownstate

pytestmark = pytest.mark.timeout(120)

SHOTS = os.environ.get("OWNSTATE_SCREENSHOTS")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
#: How long a test waits for the page or a worker (generous: the machine may be busy).
PATIENCE_MS = 15_000


@dataclass
class Served:
    base: str
    url: str
    admin: str
    reader: str

    def client(self, token: str | None = None) -> ownstate.Client:
        """A client of the served API (as an agent or a worker would use it)."""
        return ownstate.connect(self.base, token=token or self.admin)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = f"sqlite:///{tmp_path_factory.mktemp('console') / 'state.db'}"
    with ownstate.connect(url, tenant="default") as direct:
        _, admin = direct.api_keys.create("admin", admin=True)
        _, reader = direct.api_keys.create("viewer")
        for name in ("support", "langgraph", "openai-agents"):
            direct.session_stores.create(name).grant_permission("viewer", "READ")
        direct.memory_stores.create("support-memory").grant_permission("viewer", "READ")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ownstate", "--url", url, "serve", "--port", str(port),
         "--no-bootstrap", "--log-level", "warning", "--key-cache", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, base, admin)
        yield Served(base, url, admin, reader)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require("browser")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=shutil.which("chromium"),
                                     args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(PATIENCE_MS)
    opened = context.new_page()
    yield opened
    context.close()


def shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"))


def sign_in(page: Any, served: Served, token: str) -> None:
    page.goto(f"{served.base}/console/sign-in")
    page.fill("input[name=api_key]", token)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/console/inbox"))


def csrf_of(page: Any) -> str:
    value = page.get_attribute("input[name=csrf_token]", "value")
    assert value
    return str(value)


def in_thread(coro: Any) -> Any:
    """Run ``coro`` to its end on a thread of its own (Playwright's sync API holds an event
    loop on this one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# -- signing in -------------------------------------------------------------------------------


def test_sign_in_with_a_key_and_out(page: Any, served: Served) -> None:
    page.goto(f"{served.base}/console/inbox")
    page.wait_for_url(re.compile(r"/console/sign-in"))  # not signed in: sent to sign in
    page.fill("input[name=api_key]", "osk_nope_nope")
    page.click("button[type=submit]")
    assert "not one this server accepts" in page.inner_text(".failure")
    shot(page, "sign-in")
    sign_in(page, served, served.admin)
    assert "default / admin" in page.inner_text("header")
    cookie = next(c for c in page.context.cookies() if c["name"] == "ownstate_console")
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert served.admin not in cookie["value"]
    page.click("text=Sign out")
    page.wait_for_url(re.compile(r"/console/sign-in"))
    page.goto(f"{served.base}/console/runs")
    page.wait_for_url(re.compile(r"/console/sign-in"))


def test_console_pages_carry_a_strict_policy_and_docs_need_no_network(
        served: Served) -> None:
    response = httpx.get(f"{served.base}/console/sign-in")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert response.headers["x-frame-options"] == "DENY"
    docs = httpx.get(f"{served.base}/docs").text
    assert "cdn" not in docs.lower()
    assert "http" not in re.sub(r"https?://127\.0\.0\.1[^\"']*", "", docs).replace(
        "http-equiv", "")
    for asset in re.findall(r"(?:src|href)=\"(/docs/static/[^\"]+)\"", docs):
        assert httpx.get(served.base + asset).status_code == 200


# -- LangGraph: paused at an interrupt, approved in the inbox, resumed by a worker ----------


def test_a_paused_langgraph_graph_is_approved_in_the_inbox_and_resumed(
        page: Any, served: Served) -> None:
    from langchain_core.messages import HumanMessage
    from test_langgraph import approval_graph

    from ownstate.adapters.langgraph import OwnstateSaver, resume_decided

    sign_in(page, served, served.admin)
    with served.client() as client:
        graph = approval_graph(OwnstateSaver(client, actor_id="customer-17"))
        cfg = {"configurable": {"thread_id": "case-17"}}
        paused = graph.invoke({"messages": [HumanMessage("refund 40", id="h1")]}, cfg)
        assert paused["__interrupt__"]
        (run,) = [r for r in client.runs.outstanding() if r.framework == "langgraph"]
        # the open inbox finds it without a reload
        row = page.locator(f"tr.inbox-run[data-run='{run.run_id}']")
        row.wait_for()
        assert "refund" in row.inner_text()
        assert '"amount": 40' in row.inner_text()  # the interrupt's value, laid out
        shot(page, "inbox")
        row.locator("a.review").click()
        page.fill("textarea[name=comment]", "The parcel arrived damaged; refund it.")
        shot(page, "review")
        page.click("button.approve")
        page.wait_for_selector(".decision")
        assert "Approved" in page.inner_text(".decision")
        # the worker: woken by the decision, it resumes the thread through the adapter
        decided = client.runs.wait_for_decision(run.run_id, timeout=15)
        assert decided is not None
        assert decided.decision is not None
        assert (decided.decision.outcome, decided.decision.comment,
                decided.decision.decided_by) == (
            "approve", "The parcel arrived damaged; refund it.", "admin")
        worker = approval_graph(OwnstateSaver(client))
        (resumed,) = resume_decided(worker, client)
        assert resumed.run.run_id == run.run_id
        assert resumed.result["messages"][-1].content.startswith("approved: ")
        assert "'approved': True" in resumed.result["messages"][-1].content
        assert client.runs.get(run.run_id).status == "done"
    page.goto(f"{served.base}/console/inbox")
    assert page.locator(f"tr.inbox-run[data-run='{run.run_id}']").count() == 0
    # the thread's transcript, as the adapter stored it (LangChain messages)
    page.goto(f"{served.base}/console/sessions/{run.store}/{run.session_id}")
    assert "refund" in page.locator(".msg.role-assistant .toolcall").first.inner_text()
    assert "approved: " in page.locator(".msg.role-assistant").last.inner_text()


# -- OpenAI Agents SDK: a tool approval -------------------------------------------------------


def test_an_openai_agents_tool_approval_is_decided_in_the_inbox_and_resumed(
        page: Any, served: Served) -> None:
    from agents import RunConfig, Runner
    from test_openai_agents import CannedModel, call, say, support_agent

    from ownstate.adapters.openai_agents import OwnstateSession, resume_decided

    config = RunConfig(tracing_disabled=True)
    refunds: list[int] = []
    sign_in(page, served, served.admin)
    with served.client() as client:
        session = OwnstateSession("case-oa", client, store="openai-agents",
                                  actor_id="customer-9")

        async def pause() -> Any:
            agent = support_agent(CannedModel(call("refund", {"amount": 25}, "call_9")),
                                   refunds)
            result = await Runner.run(agent, "Refund my order", session=session,
                                      run_config=config)
            return await session.hold_for_approval(result)

        held = in_thread(pause())
        row = page.locator(f"tr.inbox-run[data-run='{held.run_id}']")
        row.wait_for()
        assert "refund" in row.inner_text()
        assert "support" in row.inner_text()
        row.locator("a.review").click()
        page.fill("textarea[name=comment]", "ok")
        page.click("button.approve")
        page.wait_for_selector(".decision")
        decided = client.runs.wait_for_decision(held.run_id, timeout=15)
        assert decided is not None
        assert decided.decision is not None
        assert decided.decision.outcome == "approve"

        async def resume() -> Any:
            model = CannedModel(say("Refunded 25.", "msg_done"))
            return await resume_decided(client, support_agent(model, refunds),
                                        run_config=config)

        (resumed,) = in_thread(resume())
        assert resumed.run.run_id == held.run_id
        resumed = resumed.result
        assert resumed.final_output == "Refunded 25."
        assert refunds == [25]
        assert client.runs.get(held.run_id).status == "done"
    # the session's transcript, as the adapter stored it (Responses items)
    page.goto(f"{served.base}/console/sessions/openai-agents/case-oa")
    assert "refund" in page.locator(".toolcall").first.inner_text()
    assert "refunded 25" in page.locator(".msg.role-tool").first.inner_text()
    assert "Refunded 25." in page.locator(".msg.role-assistant").last.inner_text()


# -- transcripts, facts and provenance -------------------------------------------------------


def _png(width: int = 160, height: int = 90) -> bytes:
    """A small PNG (a colour gradient), made here."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"".join(bytes((200, 60 + y, 40 + x % 200))
                                        for x in range(width)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def conversation(served: Served) -> dict[str, Any]:
    """A support conversation with a tool call, a fact learned from it, and hostile text."""
    with ownstate.connect(served.url, tenant="default") as direct:
        store = direct.session_stores.get("support")
        session = store.add(actor_id="customer-42", session_id="case-42",
                            metadata={"channel": "web"})
        items = session.append_items([
            {"type": "message", "role": "user",
             "content": "My email is ada@example.com <script>window.pwned = 1</script>"},
            {"type": "message", "role": "assistant", "model": "gpt-4.1",
             "usage": {"input_tokens": 812, "output_tokens": 19},
             "content": [{"type": "reasoning", "text": "The customer wants a refund."},
                         {"type": "text", "text": "Let me look up the order."}],
             "tool_calls": [{"id": "call_7", "name": "lookup_order",
                             "arguments": {"order": "A-42"}}]},
            {"type": "message", "role": "tool", "tool_call_id": "call_7",
             "content": '{"status": "shipped"}'},
            {"type": "message", "role": "assistant",
             "content": [{"type": "text", "text": "It shipped."},
                         {"type": "file", "url": "javascript:window.pwned=2",
                          "name": "click me"},
                         {"type": "image", "url": "javascript:window.pwned=3"}]},
        ], format="ownstate.message")
        photo = direct.assets.put(_png(), "image/png", session=session)
        session.append_items([{"type": "message", "role": "user", "content": [
            {"type": "text", "text": "Here is the damage."},
            {"type": "image", "asset": photo.to_json(), "media_type": "image/png"}]}],
            format="ownstate.message")
        session.fork(up_to_item_id=items[0].item_id, session_id="case-42-retry")
        memory = direct.memory_stores.get("support-memory")
        fact = memory.remember("user:42", "email", "ada@example.com", confidence=0.9,
                               source=items[0])
        # a later correction, so the fact has versions
        memory.remember("user:42", "tier", "silver")
        memory.remember("user:42", "tier", "gold", confidence=0.6)
        long_session = store.add(actor_id="customer-43", session_id="case-long")
        for start in range(0, 5000, 1000):
            long_session.append_items(
                [{"type": "message", "role": "user" if n % 2 else "assistant",
                  "content": f"message {n}"} for n in range(start, start + 1000)],
                format="ownstate.message")
    return {"items": items, "fact": fact}


def test_a_transcript_shows_each_role_tool_calls_and_folded_reasoning(
        page: Any, served: Served, conversation: dict[str, Any]) -> None:
    sign_in(page, served, served.admin)
    page.goto(f"{served.base}/console/sessions/support/case-42")
    assistant = page.locator(".msg.role-assistant").first
    assert "Let me look up the order." in assistant.inner_text()
    assert "gpt-4.1" in assistant.inner_text()
    assert "812 in" in assistant.inner_text()
    call = assistant.locator(".toolcall")
    assert "lookup_order" in call.inner_text()
    assert '"order": "A-42"' in call.inner_text()
    reasoning = assistant.locator("details.reasoning")
    assert reasoning.get_attribute("open") is None  # folded
    assert "call_7" in page.locator(".msg.role-tool").inner_text()
    assert "shipped" in page.locator(".msg.role-tool").inner_text()
    image = page.locator(".msg.role-user img")
    image.wait_for()
    assert image.evaluate("img => img.complete && img.naturalWidth") == 160  # the asset
    assert "case-42-retry" in page.inner_text(".tree")  # its fork
    shot(page, "transcript")


def test_a_long_transcript_loads_in_slices_as_it_is_scrolled(
        page: Any, served: Served, conversation: dict[str, Any]) -> None:
    sign_in(page, served, served.admin)
    page.goto(f"{served.base}/console/sessions/support/case-long")
    assert page.locator(".msg").count() == 100
    page.locator(".more").scroll_into_view_if_needed()
    page.locator(".msg").nth(199).wait_for()  # the next slice, appended
    assert "message 100" in page.locator(".msg").nth(100).inner_text()


def test_a_fact_links_to_the_exact_item_it_came_from(
        page: Any, served: Served, conversation: dict[str, Any]) -> None:
    sign_in(page, served, served.admin)
    # the store's page lists its subjects, each a link to its facts
    page.goto(f"{served.base}/console/memory/support-memory")
    assert page.locator("form.filters input[name=subject]").count() == 1
    listed = page.locator("li.subject a")
    assert "user:42" in listed.all_inner_texts()
    listed.filter(has_text="user:42").click()
    page.wait_for_url(re.compile(r"subject=user%3A42$"))
    row = page.locator("tr.fact[data-key=email]")
    assert "0.90" in row.inner_text()
    assert page.locator("tr.fact[data-key=tier]").locator("text=gold").count() == 1
    shot(page, "memory")
    row.locator("a.source").click()
    source = conversation["items"][0]
    page.wait_for_url(re.compile(rf"#item-{source.item_id}$"))
    target = page.locator(f"#item-{source.item_id}")
    assert "ada@example.com" in target.inner_text()
    assert page.evaluate("document.querySelector(':target').id") == f"item-{source.item_id}"
    # the fact's versions and an as-of view
    page.goto(f"{served.base}/console/memory/support-memory?subject=user:42")
    page.locator("tr.fact[data-key=tier] a").first.click()
    versions = page.locator(".version")
    assert versions.count() == 2
    assert "superseded" in versions.nth(1).inner_text()
    # as of a moment before anything was learned, nothing was known
    page.goto(f"{served.base}/console/memory/support-memory?subject=user:42"
              "&as_of=2000-01-01")
    assert page.locator("tr.fact").count() == 0
    assert page.locator("form.forget").count() == 0  # the past is not forgotten


def test_forgetting_with_a_reason_and_erasing_a_subject_once_confirmed(
        page: Any, served: Served) -> None:
    with ownstate.connect(served.url, tenant="default") as direct:
        memory = direct.memory_stores.get("support-memory")
        memory.remember("user:gone", "city", "Lisbon")
        memory.remember("user:gone", "plan", "pro")
    sign_in(page, served, served.admin)
    page.goto(f"{served.base}/console/memory/support-memory?subject=user:gone")
    form = page.locator("tr.fact[data-key=city] form.forget")
    form.locator("input[name=reason]").fill("moved away")
    form.locator("button").click()
    page.wait_for_url(re.compile(r"subject=user"))
    assert page.locator("tr.fact").count() == 1  # only plan is current


    def erase(confirm: str) -> None:
        page.goto(f"{served.base}/console/memory")
        page.fill("#erase-form input[name=subject]", "user:gone")
        page.fill("#erase-form input[name=confirm]", confirm)
        page.click("#erase-form button")

    erase("user:gon")  # mistyped: refused, nothing erased
    assert "confirm" in page.inner_text(".failure")
    with ownstate.connect(served.url, tenant="default") as direct:
        memory = direct.memory_stores.get("support-memory")
        assert [f.key for f in memory.recall("user:gone")] == ["plan"]
        assert memory.history("user:gone", "city")[-1].closed_reason == "forgotten: moved away"
    erase("user:gone")
    assert "Erased" in page.inner_text("h1")
    with ownstate.connect(served.url, tenant="default") as direct:
        memory = direct.memory_stores.get("support-memory")
        assert memory.recall("user:gone") == []
        assert memory.history("user:gone", "city") == []
    page.goto(f"{served.base}/console/memory/support-memory")
    assert "user:gone" not in page.locator("li.subject a").all_inner_texts()


def test_content_with_script_or_javascript_links_renders_inert(
        page: Any, served: Served, conversation: dict[str, Any]) -> None:
    sign_in(page, served, served.admin)
    page.goto(f"{served.base}/console/sessions/support/case-42")
    user = page.locator(".msg.role-user").first
    assert "<script>window.pwned = 1</script>" in user.inner_text()  # shown as text
    assert page.evaluate("window.pwned") is None
    assert page.locator("a[href^='javascript']").count() == 0
    assert page.locator("img[src^='javascript']").count() == 0
    assert page.locator("script:not([src])").count() == 0


# -- permissions and CSRF -------------------------------------------------------------------


def _awaiting_run(served: Served, session_id: str) -> Any:
    with ownstate.connect(served.url, tenant="default") as direct:
        store = direct.session_stores.get("support")
        session = store.add(actor_id="customer-5", session_id=session_id)
        run = direct.runs.open_run(session, "custom", thread_key=session_id)
        return direct.runs.mark_awaiting(run.run_id, {
            "kind": "approval", "tool": "wire_money", "arguments": {"usd": 900},
            "requested_by": "payments-agent"})


def test_a_read_only_key_sees_no_decision_or_forget_control_and_its_posts_are_refused(
        page: Any, served: Served, conversation: dict[str, Any]) -> None:
    run = _awaiting_run(served, "case-ro")
    sign_in(page, served, served.reader)
    row = page.locator(f"tr.inbox-run[data-run='{run.run_id}']")
    row.wait_for()
    row.locator("a.review").click()
    page.wait_for_selector("#read-only")
    assert page.locator("button.approve, button.reject").count() == 0
    token = csrf_of(page)
    forged = page.request.post(f"{served.base}/console/inbox/{run.run_id}/decide",
                               form={"csrf_token": token, "outcome": "approve",
                                     "comment": "forged"})
    assert forged.status == 403
    page.goto(f"{served.base}/console/memory/support-memory?subject=user:42")
    assert page.locator("form.forget").count() == 0
    forget = page.request.post(f"{served.base}/console/memory/support-memory/forget",
                               form={"csrf_token": token, "subject": "user:42",
                                     "key": "email", "reason": "forged"})
    assert forget.status == 403
    erase = page.request.post(f"{served.base}/console/memory/erase",
                              form={"csrf_token": token, "subject": "user:42",
                                    "confirm": "user:42"})
    assert erase.status == 403
    assert page.locator("text=Admin").count() == 0
    with ownstate.connect(served.url, tenant="default") as direct:
        assert direct.runs.get(run.run_id).status == "awaiting_human"
        assert direct.runs.get(run.run_id).decision is None
        memory = direct.memory_stores.get("support-memory")
        assert [f.key for f in memory.recall("user:42")] == ["email", "tier"]


def test_a_post_without_the_csrf_token_is_refused(page: Any, served: Served) -> None:
    run = _awaiting_run(served, "case-csrf")
    sign_in(page, served, served.admin)
    page.goto(f"{served.base}/console/inbox/{run.run_id}")
    for form in ({"outcome": "approve"}, {"outcome": "approve", "csrf_token": "guess"}):
        refused = page.request.post(f"{served.base}/console/inbox/{run.run_id}/decide",
                                    form=form)
        assert refused.status == 403
        assert "CSRF" in refused.text()
    with ownstate.connect(served.url, tenant="default") as direct:
        assert direct.runs.get(run.run_id).decision is None
    # the form's own token works
    page.click("button.reject")
    page.wait_for_selector(".decision")
    assert "Rejected" in page.inner_text(".decision")


def test_admin_creates_a_key_shown_once_and_revokes_it(page: Any, served: Served) -> None:
    sign_in(page, served, served.admin)
    page.goto(f"{served.base}/console/admin")
    page.fill("input[name=principal]", "support-bot")
    page.click("text=Create key")
    token = page.inner_text("#new-key .token")
    assert token.startswith("osk_")
    assert httpx.get(f"{served.base}/api/2.0/agents/whoami",
                     headers={"authorization": f"Bearer {token}"}).status_code == 200
    shot(page, "admin")
    page.goto(f"{served.base}/console/admin")
    assert token not in page.content()  # shown once
    page.locator("tr.key", has_text="support-bot").locator("text=Revoke").click()
    page.wait_for_url(re.compile(r"/console/admin"))
    assert httpx.get(f"{served.base}/api/2.0/agents/whoami",
                     headers={"authorization": f"Bearer {token}"}).status_code == 401
    # a grant on a store, then its revocation
    grant = page.locator("form[action='/console/admin/grants']")
    grant.locator("select[name=kind]").select_option("session_store")
    grant.locator("input[name=store]").fill("support")
    grant.locator("input[name=principal]").fill("support-bot")
    grant.locator("select[name=level]").select_option("WRITE")
    grant.locator("button").click()
    page.wait_for_url(re.compile(r"/console/admin"))
    badge = page.locator("tr", has_text="support").locator("form", has_text="support-bot")
    assert "WRITE" in badge.inner_text()
    with ownstate.connect(served.url, tenant="default") as direct:
        assert direct.api_keys.permission_of("support-bot", "session_store",
                                             "support") == "WRITE"
    badge.locator("button").click()
    page.wait_for_url(re.compile(r"/console/admin"))
    with ownstate.connect(served.url, tenant="default") as direct:
        assert direct.api_keys.permission_of("support-bot", "session_store",
                                             "support") is None
    page.goto(f"{served.base}/console/runs")
    assert page.inner_text("h1").startswith("Runs")
    shot(page, "runs")


def test_a_retention_policy_is_previewed_before_it_is_applied(
        page: Any, served: Served) -> None:
    with ownstate.connect(served.url, tenant="default") as direct:
        session = direct.session_stores.get("support").add(actor_id="customer-8")
        run = direct.runs.open_run(session, "custom", owner="w", ttl=60)
        for n in range(3):
            direct.checkpoints.put(run.checkpoint_scope(), f"cp-{n}", type_tag="raw",
                                   payload=b"x" * 1000, fencing_token=run.fencing_token)
    sign_in(page, served, served.admin)
    page.goto(f"{served.base}/console/retention")
    page.fill("input[name=keep_last]", "1")
    page.click("button[value=preview]")
    row = page.locator("tr", has_text=run.run_id)
    assert row.locator("td").nth(4).inner_text() == "2"  # would drop two of three
    shot(page, "retention")
    with ownstate.connect(served.url, tenant="default") as direct:
        assert direct.checkpoints.usage(run.run_id)[0].checkpoints == 3  # nothing yet
    page.click("button[value=apply]")
    assert "Deleted" in page.inner_text(".success")
    with ownstate.connect(served.url, tenant="default") as direct:
        assert direct.checkpoints.usage(run.run_id)[0].checkpoints == 1


def test_every_console_template_compiles() -> None:
    from ownstate.server.console import _web

    environment = _web._templates
    names = environment.list_templates()
    assert "inbox.html" in names
    for name in names:
        environment.get_template(name)
