"""The ADK event and Claude transcript converters: exact round trips of real histories,
conversion across formats, parallel calls, orphans, media and reasoning, and that what
they write is accepted by ADK (Event validation and a real Runner turn) and by the
Claude Agent SDK's transcript readers."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import uuid
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from functools import cache
from typing import Any

import pytest
from claude_agent_sdk import (
    InMemorySessionStore,
    get_session_messages_from_store,
    project_key_for_directory,
)
from claude_agent_sdk._internal.message_parser import parse_message
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.models._capabilities import LlmCapabilities
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, State
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import Field

from ownstate.errors import InvalidInput
from ownstate.formats import adk, claude, neutral
from ownstate.model import Item

APP = "shop"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF = b"%PDF-1.4 minimal"
PDF_URL = "data:application/pdf;base64," + base64.b64encode(PDF).decode()


# ADK: a real history from a Runner ------------------------------------------------------


class ScriptedModel(BaseLlm):
    """Answers from a script (one Content per call) and records each request's contents."""

    script: list[types.Content]
    seen: list[list[types.Content]] = Field(default_factory=list)

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append([c.model_copy(deep=True) for c in llm_request.contents])
        yield LlmResponse(
            content=self.script.pop(0), model_version="gemini-scripted",
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=40, candidates_token_count=7))


def lookup(order: int, tool_context: ToolContext) -> dict[str, Any]:
    """Look an order up."""
    tool_context.state["last_order"] = order
    return {"order": order, "status": "shipped" if order == 7 else "late"}


def refund(order: int) -> dict[str, Any]:
    """Refund an order."""
    return {"error": f"refunding order {order} needs approval"}


def explain(topic: str) -> str:
    """Explain a topic."""
    return f"{topic}: see the policy"


def _text(text: str, **extra: Any) -> types.Part:
    return types.Part(text=text, **extra)


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def _stored(event: Event) -> dict[str, Any]:
    """An event's JSON as ownstate's ADK session service stores it."""
    data: dict[str, Any] = event.model_dump(exclude_none=True, mode="json")
    actions = data.get("actions")
    if isinstance(actions, dict) and isinstance(actions.get("state_delta"), dict):
        actions["state_delta"] = {k: v for k, v in actions["state_delta"].items()
                                  if not k.startswith(State.TEMP_PREFIX)}
    return data


async def _adk_history() -> list[dict[str, Any]]:
    model = ScriptedModel(model="scripted", script=[
        types.Content(role="model", parts=[
            _text("Two orders: look both up.", thought=True, thought_signature=b"sig-1"),
            _text("Checking both orders."), _call("lookup", order=7), _call("lookup", order=8)]),
        types.Content(role="model", parts=[_text("Order 7 shipped; order 8 is late.")]),
        types.Content(role="model", parts=[_call("refund", order=8), _call("explain",
                                                                          topic="refunds")]),
        types.Content(role="model", parts=[_text("The refund needs approval.")]),
        types.Content(role="model", parts=[_text("That is the refund policy.")]),
    ])
    agent = LlmAgent(name="helper", model=model, instruction="Be brief.",
                     tools=[lookup, refund, explain], output_key="last_reply")
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id="u1")
    runner = Runner(app_name=APP, agent=agent, session_service=service)
    prompts = [
        types.Content(role="user", parts=[
            _text("Where are orders 7 and 8?"),
            types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG))]),
        types.Content(role="user", parts=[_text("Refund 8, and explain refunds.")]),
        types.Content(role="user", parts=[
            types.Part(file_data=types.FileData(file_uri="gs://shop/policy.pdf",
                                                mime_type="application/pdf",
                                                display_name="policy.pdf")),
            _text("Is it in here?")]),
    ]
    for prompt in prompts:
        async for _ in runner.run_async(user_id="u1", session_id=session.id,
                                        new_message=prompt):
            pass
        if prompt is prompts[0]:
            # A pure state change between turns: an event without content.
            current = await service.get_session(app_name=APP, user_id="u1",
                                                session_id=session.id)
            assert current is not None
            await service.append_event(current, Event(
                author="user", invocation_id="e-state",
                actions=EventActions(state_delta={"mood": "curious"})))
    await runner.close()
    loaded = await service.get_session(app_name=APP, user_id="u1", session_id=session.id)
    assert loaded is not None
    return [_stored(e) for e in loaded.events]


@cache
def _adk_events_cached() -> str:
    return json.dumps(asyncio.run(_adk_history()))


def adk_events() -> list[dict[str, Any]]:
    """A fresh copy of a real ADK history (run once per test process)."""
    events: list[dict[str, Any]] = json.loads(_adk_events_cached())
    return events


def test_adk_round_trip_is_exact() -> None:
    events = adk_events()
    messages = adk.to_neutral(events)
    assert adk.from_neutral(messages) == events
    # The neutral messages are JSON, and converting does not change its input.
    assert json.loads(json.dumps(messages)) == messages
    assert events == adk_events()
    # The state-only event rides in the original of the message before it.
    carried = [e for m in messages for e in m["original"].get("items", [])]
    assert carried == events


def test_adk_to_neutral_fields() -> None:
    events = adk_events()
    messages = adk.to_neutral(events)
    assert [m["role"] for m in messages] == [
        "user", "assistant", "tool", "tool", "assistant",
        "user", "assistant", "tool", "tool", "assistant",
        "user", "assistant"]
    first = messages[0]
    assert first["content"] == [{"type": "text", "text": "Where are orders 7 and 8?"},
                                {"type": "image", "url": PNG_URL, "media_type": "image/png"}]
    assert first["message_id"] == events[0]["id"]
    assert "name" not in first
    turn = messages[1]
    assert turn["content"] == [{"type": "reasoning", "text": "Two orders: look both up."},
                               {"type": "text", "text": "Checking both orders."}]
    assert turn["name"] == "helper"
    assert turn["model"] == "gemini-scripted"
    assert turn["usage"] == {"input_tokens": 40, "output_tokens": 7}
    # Parallel calls: one message, two calls, each answered by its own tool message.
    calls = turn["tool_calls"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("lookup", {"order": 7}),
                                                            ("lookup", {"order": 8})]
    assert all(c["id"].startswith("adk-") for c in calls)
    results = messages[2:4]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]
    assert [json.loads(r["content"]) for r in results] == [
        {"order": 7, "status": "shipped"}, {"order": 8, "status": "late"}]
    assert {r["name"] for r in results} == {"lookup"}
    # Both results came from one event: the second points at the first's original.
    assert results[0]["original"]["items"][0]["id"] == results[1]["original"]["item"]
    refund_result, explain_result = messages[7:9]
    assert refund_result["is_error"] is True
    assert refund_result["content"] == "refunding order 8 needs approval"
    assert explain_result["content"] == "refunds: see the policy"  # {"result": str}
    assert "is_error" not in explain_result
    assert messages[10]["content"] == [
        {"type": "file", "url": "gs://shop/policy.pdf", "media_type": "application/pdf",
         "name": "policy.pdf"},
        {"type": "text", "text": "Is it in here?"}]
    assert messages[11]["content"] == "That is the refund policy."


def test_adk_history_without_messages_converts_to_nothing() -> None:
    state_only = _stored(Event(author="user", invocation_id="e-1",
                               actions=EventActions(state_delta={"k": 1})))
    assert adk.to_neutral([state_only]) == []
    assert adk.to_neutral([]) == []
    assert adk.from_neutral([]) == []


# Claude: a transcript shaped like Claude Code's ----------------------------------------


def claude_transcript() -> list[dict[str, Any]]:
    """A Claude Code session as the SDK mirrors it: split assistant entries sharing
    ``message.id``, parallel tool results written between them, thinking, an image, a
    failed tool, and bookkeeping entries."""
    sid = "5a0ddcd0-5487-4794-99ac-143f6bb9e248"
    u = [str(uuid.UUID(int=i + 1)) for i in range(16)]
    base = {"isSidechain": False, "userType": "external", "cwd": "/home/ana/shop",
            "sessionId": sid, "version": "2.1.12", "gitBranch": "main"}

    def ts(second: int) -> str:
        return f"2026-01-20T11:57:{second:02d}.716Z"

    def assistant(uid: str, parent: str, second: int, msg_id: str,
                  content: list[dict[str, Any]], stop: str | None = None) -> dict[str, Any]:
        return {"parentUuid": parent, **base, "message": {
            "model": "claude-sonnet-4-5-20250929", "id": msg_id, "type": "message",
            "role": "assistant", "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {
                "input_tokens": 3, "cache_creation_input_tokens": 187,
                "cache_read_input_tokens": 19024, "output_tokens": 25 + second,
                "service_tier": "standard"}},
            "requestId": f"req_{msg_id[4:]}", "type": "assistant", "uuid": uid,
            "timestamp": ts(second)}

    def user(uid: str, parent: str | None, second: int, content: Any,
             **extra: Any) -> dict[str, Any]:
        return {"parentUuid": parent, **base, "type": "user",
                "message": {"role": "user", "content": content}, "uuid": uid,
                "timestamp": ts(second), **extra}

    return [
        {"type": "file-history-snapshot", "messageId": u[0], "snapshot": {
            "messageId": u[0], "trackedFileBackups": {}, "timestamp": ts(0)},
         "isSnapshotUpdate": False},
        user(u[0], None, 1, "Where are orders 7 and 8?",
             thinkingMetadata={"level": "high", "disabled": False, "triggers": []},
             todos=[]),
        assistant(u[1], u[0], 2, "msg_01AAA", [
            {"type": "thinking", "thinking": "Two lookups, in parallel.",
             "signature": "EqQBCkYIBRgCKkBmc2lnbmF0dXJl"}]),
        assistant(u[2], u[1], 3, "msg_01AAA", [
            {"type": "text", "text": "I'll look both up."}]),
        assistant(u[3], u[2], 4, "msg_01AAA", [
            {"type": "tool_use", "id": "toolu_01X", "name": "mcp__shop__lookup",
             "input": {"order": 7}}]),
        user(u[4], u[3], 5, [{"tool_use_id": "toolu_01X", "type": "tool_result",
                              "content": "shipped"}],
             toolUseResult={"stdout": "shipped", "stderr": "", "interrupted": False},
             sourceToolAssistantUUID=u[3]),
        assistant(u[5], u[3], 5, "msg_01AAA", [
            {"type": "tool_use", "id": "toolu_01Y", "name": "mcp__shop__lookup",
             "input": {"order": 8}}], stop="tool_use"),
        user(u[6], u[5], 6, [{"tool_use_id": "toolu_01Y", "type": "tool_result",
                              "content": [{"type": "text", "text": "late"}]}],
             toolUseResult=[{"type": "text", "text": "late"}], sourceToolAssistantUUID=u[5]),
        assistant(u[7], u[6], 8, "msg_01BBB", [
            {"type": "text", "text": "Order 7 shipped; 8 is late."}], stop="end_turn"),
        {"parentUuid": u[7], **base, "type": "system", "subtype": "turn_duration",
         "durationMs": 6200, "isMeta": False, "uuid": u[8], "timestamp": ts(8)},
        user(u[9], u[8], 20, [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(PNG).decode()}},
            {"type": "text", "text": "Refund this one."}], imagePasteIds=[1]),
        assistant(u[10], u[9], 21, "msg_01CCC", [
            {"type": "tool_use", "id": "toolu_01Z", "name": "mcp__shop__refund",
             "input": {"order": 8}}], stop="tool_use"),
        user(u[11], u[10], 22, [{"type": "tool_result", "tool_use_id": "toolu_01Z",
                                 "content": "<tool_use_error>needs approval</tool_use_error>",
                                 "is_error": True}],
             toolUseResult="Error: needs approval", sourceToolAssistantUUID=u[10]),
        assistant(u[12], u[11], 23, "msg_01DDD", [
            {"type": "text", "text": "The refund needs approval."}], stop="end_turn"),
        {"type": "custom-title", "customTitle": "Orders 7 and 8", "sessionId": sid,
         "uuid": u[13], "timestamp": ts(30)},
        {"type": "summary", "summary": "Order lookup and refund", "leafUuid": u[12]},
    ]


def test_claude_round_trip_is_exact() -> None:
    entries = claude_transcript()
    messages = claude.to_neutral(entries)
    assert claude.from_neutral(messages) == entries
    assert claude.from_neutral(messages, session_id="ignored-for-carried") == entries
    assert entries == claude_transcript()
    assert [e for m in messages for e in m["original"].get("items", [])] == entries


def test_claude_to_neutral_fields() -> None:
    entries = claude_transcript()
    messages = claude.to_neutral(entries)
    assert [m["role"] for m in messages] == [
        "user", "assistant", "tool", "tool", "assistant", "user", "assistant", "tool",
        "assistant"]
    assert messages[0]["content"] == "Where are orders 7 and 8?"
    assert messages[0]["message_id"] == entries[1]["uuid"]
    # Four entries of one response (written between its tool results) are one message.
    turn = messages[1]
    assert turn["message_id"] == "msg_01AAA"
    assert turn["content"] == [{"type": "reasoning", "text": "Two lookups, in parallel."},
                               {"type": "text", "text": "I'll look both up."}]
    assert turn["tool_calls"] == [
        {"id": "toolu_01X", "name": "mcp__shop__lookup", "arguments": {"order": 7}},
        {"id": "toolu_01Y", "name": "mcp__shop__lookup", "arguments": {"order": 8}}]
    assert turn["model"] == "claude-sonnet-4-5-20250929"
    assert turn["usage"] == {"input_tokens": 3, "output_tokens": 30}
    assert turn["original"]["items"] == entries[2:8]
    assert [(m["tool_call_id"], m["content"], m["name"]) for m in messages[2:4]] == [
        ("toolu_01X", "shipped", "mcp__shop__lookup"),
        ("toolu_01Y", "late", "mcp__shop__lookup")]
    assert messages[2]["original"] == {"format": claude.FORMAT, "item": entries[5]["uuid"]}
    assert messages[5]["content"] == [{"type": "image", "url": PNG_URL,
                                       "media_type": "image/png"},
                                      {"type": "text", "text": "Refund this one."}]
    failed = messages[7]
    assert failed["is_error"] is True
    assert failed["content"] == "<tool_use_error>needs approval</tool_use_error>"
    # Bookkeeping rides with the message before it (the first message for leading ones).
    assert messages[0]["original"]["items"] == entries[:2]
    assert messages[8]["original"]["items"] == entries[13:]


def test_claude_transcript_without_messages_converts_to_nothing() -> None:
    assert claude.to_neutral([{"type": "summary", "summary": "x", "leafUuid": "y"}]) == []
    assert claude.to_neutral([]) == []
    assert claude.from_neutral([]) == []


# hand-written neutral history -----------------------------------------------------------

ASSET = {"$asset": "ast_0123456789", "media_type": "image/jpeg", "size": 2048}


def neutral_history() -> list[dict[str, Any]]:
    """A history from another framework: parallel calls answered out of order, arguments
    as text, a call never answered, a result whose call is not there, media and an asset
    reference, reasoning, and a system message."""
    return [
        {"type": "message", "role": "system", "content": "You are the shop assistant."},
        {"type": "message", "role": "user", "message_id": "m1",
         "content": [{"type": "text", "text": "Where are orders 7 and 8?"},
                     {"type": "image", "url": PNG_URL, "media_type": "image/png"}]},
        {"type": "message", "role": "assistant", "message_id": "m2", "model": "gpt-4.1",
         "usage": {"input_tokens": 812, "output_tokens": 19},
         "content": [{"type": "reasoning", "text": "Look both up at once."},
                     {"type": "text", "text": "Checking."}],
         "tool_calls": [{"id": "call_7", "name": "lookup", "arguments": {"order": 7}},
                        {"id": "call_8", "name": "lookup", "arguments": '{"order": 8}'}]},
        {"type": "message", "role": "tool", "tool_call_id": "call_8",
         "content": '{"status": "late"}'},
        {"type": "message", "role": "tool", "tool_call_id": "call_7", "content": "shipped"},
        {"type": "message", "role": "assistant", "content": "7 shipped, 8 is late."},
        {"type": "message", "role": "user", "content": "Refund 8."},
        {"type": "message", "role": "assistant", "content": "",
         "tool_calls": [{"id": "call_r", "name": "refund", "arguments": {"order": 8}}]},
        # The refund never got a result; this one answers a call that is not there.
        {"type": "message", "role": "tool", "tool_call_id": "call_ghost", "content": "?"},
        {"type": "message", "role": "user",
         "content": [{"type": "text", "text": "Here is the receipt."},
                     {"type": "file", "url": PDF_URL, "media_type": "application/pdf",
                      "name": "receipt.pdf"},
                     {"type": "image", "asset": ASSET}]},
        {"type": "message", "role": "assistant", "content": "Thanks, noted.",
         "tool_calls": [{"id": "call_n", "name": "note", "arguments": "not json"}]},
        {"type": "message", "role": "tool", "tool_call_id": "call_n",
         "content": "disk full", "is_error": True},
    ]


def test_neutral_to_adk_events() -> None:
    events = adk.from_neutral(neutral_history(), agent_name="helper")
    for event in events:
        validated = Event.model_validate(event)
        # What ADK would store for it holds exactly what was written.
        assert _stored(validated)["content"] == event["content"]
    assert [(e["author"], e["content"]["role"]) for e in events] == [
        ("user", "user"), ("helper", "model"), ("helper", "user"), ("helper", "model"),
        ("user", "user"), ("helper", "model"), ("helper", "user"), ("user", "user"),
        ("helper", "model"), ("helper", "user")]
    user, turn, results = events[0], events[1], events[2]
    assert user["content"]["parts"] == [
        {"text": "Where are orders 7 and 8?"},
        {"inline_data": {"data": base64.urlsafe_b64encode(PNG).decode(),
                         "mime_type": "image/png"}}]
    # Reasoning without the model's signature is left out.
    assert turn["content"]["parts"] == [
        {"text": "Checking."},
        {"function_call": {"id": "call_7", "args": {"order": 7}, "name": "lookup"}},
        {"function_call": {"id": "call_8", "args": {"order": 8}, "name": "lookup"}}]
    assert turn["model_version"] == "gpt-4.1"
    assert turn["usage_metadata"] == {"prompt_token_count": 812, "candidates_token_count": 19}
    # Parallel results: one event, in the order of the calls, named after them.
    assert results["content"]["parts"] == [
        {"function_response": {"id": "call_7", "name": "lookup",
                               "response": {"result": "shipped"}}},
        {"function_response": {"id": "call_8", "name": "lookup",
                               "response": {"status": "late"}}}]
    # The unanswered refund gets an error result; the ghost result is dropped.
    assert events[6]["content"]["parts"] == [{"function_response": {
        "id": "call_r", "name": "refund", "response": {"error": adk.NO_RESULT}}}]
    assert "call_ghost" not in json.dumps(events)
    assert "shop assistant" not in json.dumps(events)  # system messages are left out
    receipt = events[7]["content"]["parts"]
    assert receipt[1] == {"inline_data": {"data": base64.urlsafe_b64encode(PDF).decode(),
                                          "mime_type": "application/pdf"}}
    assert "ast_0123456789" in receipt[2]["text"]
    assert events[8]["content"]["parts"][1] == {"function_call": {
        "id": "call_n", "args": {"input": "not json"}, "name": "note"}}
    assert events[9]["content"]["parts"][0]["function_response"]["response"] == {
        "error": "disk full"}
    # Fresh ids; increasing timestamps; a new invocation at each user message.
    assert len({e["id"] for e in events}) == len(events)
    stamps = [e["timestamp"] for e in events]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == len(stamps)
    invocations = [e["invocation_id"] for e in events]
    assert invocations[0] == invocations[3] != invocations[4] == invocations[6]
    assert invocations[6] != invocations[7] == invocations[9]


def test_neutral_to_adk_uses_the_default_author() -> None:
    events = adk.from_neutral(neutral_history())
    assert {e["author"] for e in events} == {"user", adk.DEFAULT_AUTHOR}


async def _continue_in_adk(events: list[dict[str, Any]], agent_name: str
                           ) -> list[list[types.Content]]:
    """Append ``events`` to a new ADK session and run one more turn on it."""
    model = ScriptedModel(model="scripted", script=[
        types.Content(role="model", parts=[_text("Anything else?")])])
    agent = LlmAgent(name=agent_name, model=model, instruction="Be brief.")
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id="u2")
    for data in events:
        await service.append_event(session, Event.model_validate(data))
    runner = Runner(app_name=APP, agent=agent, session_service=service)
    replies = [e async for e in runner.run_async(
        user_id="u2", session_id=session.id,
        new_message=types.Content(role="user", parts=[_text("One more thing.")]))]
    await runner.close()
    assert [p.text for e in replies if e.content for p in e.content.parts or []] == [
        "Anything else?"]
    return model.seen


def _check_gemini_pairing(contents: list[types.Content]) -> None:
    """Each function-call turn is followed by a turn answering every call in it."""
    for index, content in enumerate(contents):
        calls = [p.function_call for p in content.parts or [] if p.function_call]
        if calls:
            answer = contents[index + 1]
            responses = [p.function_response for p in answer.parts or []
                         if p.function_response]
            assert sorted(r.name or "" for r in responses) == sorted(
                c.name or "" for c in calls)


def test_converted_history_runs_in_a_real_adk_runner() -> None:
    events = adk.from_neutral(neutral_history(), agent_name="helper")
    [contents] = asyncio.run(_continue_in_adk(events, "helper"))
    texts = [p.text for c in contents for p in c.parts or [] if p.text]
    assert texts[0] == "Where are orders 7 and 8?"
    assert "7 shipped, 8 is late." in texts
    assert texts[-1] == "One more thing."
    assert [c.role for c in contents if any(p.function_call for p in c.parts or [])] == [
        "model", "model", "model"]
    _check_gemini_pairing(contents)
    # Under another agent's name the turns reach the model as quoted context.
    [quoted] = asyncio.run(_continue_in_adk(adk.from_neutral(neutral_history()), "helper"))
    assert all(c.role == "user" for c in quoted)
    assert any("[assistant]" in (p.text or "") for c in quoted for p in c.parts or [])


def test_neutral_to_claude_entries() -> None:
    sid = str(uuid.uuid4())
    entries = claude.from_neutral(neutral_history(), session_id=sid)
    assert [e["type"] for e in entries] == [
        "user", "assistant", "user", "assistant", "user", "assistant", "user", "user",
        "assistant", "user"]
    # A linear chain of fresh entries, each in the session, with increasing times.
    assert entries[0]["parentUuid"] is None
    assert [e["parentUuid"] for e in entries[1:]] == [e["uuid"] for e in entries[:-1]]
    assert len({e["uuid"] for e in entries}) == len(entries)
    assert {e["sessionId"] for e in entries} == {sid}
    stamps = [datetime.fromisoformat(e["timestamp"]) for e in entries]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == len(stamps)
    assert all(e["timestamp"].endswith("Z") for e in entries)
    assert entries[0]["message"]["content"] == [
        {"type": "text", "text": "Where are orders 7 and 8?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(PNG).decode()}}]
    turn = entries[1]["message"]
    # Reasoning without Claude's signature is left out.
    assert turn["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_7", "name": "lookup", "input": {"order": 7}},
        {"type": "tool_use", "id": "call_8", "name": "lookup", "input": {"order": 8}}]
    assert (turn["id"], turn["model"], turn["stop_reason"]) == ("m2", "gpt-4.1", "tool_use")
    assert turn["usage"] == {"input_tokens": 812, "output_tokens": 19}
    assert entries[2]["message"]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_7", "content": "shipped"},
        {"type": "tool_result", "tool_use_id": "call_8", "content": '{"status": "late"}'}]
    assert entries[2]["sourceToolAssistantUUID"] == entries[1]["uuid"]
    assert entries[4]["message"]["content"] == "Refund 8."
    assert entries[6]["message"]["content"] == [{
        "type": "tool_result", "tool_use_id": "call_r", "content": claude.NO_RESULT,
        "is_error": True}]
    assert "call_ghost" not in json.dumps(entries)
    assert "shop assistant" not in json.dumps(entries)
    receipt = entries[7]["message"]["content"]
    assert receipt[1] == {"type": "document", "title": "receipt.pdf", "source": {
        "type": "base64", "media_type": "application/pdf",
        "data": base64.b64encode(PDF).decode()}}
    assert receipt[2]["type"] == "text"
    assert "ast_0123456789" in receipt[2]["text"]
    assert entries[8]["message"]["content"][1]["input"] == {"input": "not json"}
    assert entries[9]["message"]["content"] == [{
        "type": "tool_result", "tool_use_id": "call_n", "content": "disk full",
        "is_error": True}]
    assert "sessionId" not in claude.from_neutral(neutral_history())[0]


def _sdk_messages(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the SDK reads back from a store holding ``entries``: the conversation chain's
    visible messages, as entry-shaped dicts."""
    sid = str(uuid.uuid4())
    store = InMemorySessionStore()

    async def main() -> list[dict[str, Any]]:
        key = {"project_key": project_key_for_directory("/tmp/shop"), "session_id": sid}
        await store.append(key, copy.deepcopy(entries))  # type: ignore[arg-type]
        found = await get_session_messages_from_store(store, sid, directory="/tmp/shop")
        return [{"type": m.type, "uuid": m.uuid, "message": m.message} for m in found]

    return asyncio.run(main())


def _check_claude_api_rules(messages: list[dict[str, Any]]) -> None:
    """Every tool_use is answered in the next user message and every tool_result answers
    a tool_use of the assistant message before it (results first in the content)."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        parse_message({"type": message["type"], "message": message["message"]})
        content = message["message"]["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        last = merged[-1] if merged else None
        same_response = (last is not None and message["type"] == "assistant"
                         and last["type"] == "assistant"
                         and last["id"] == message["message"].get("id"))
        if last is not None and (same_response or message["type"] == last["type"] == "user"):
            last["blocks"].extend(blocks)
        else:
            merged.append({"type": message["type"], "blocks": list(blocks),
                           "id": message["message"].get("id")})
    for index, message in enumerate(merged):
        calls = {b["id"] for b in message["blocks"] if b["type"] == "tool_use"}
        results = [b["tool_use_id"] for b in message["blocks"] if b["type"] == "tool_result"]
        if results:
            before = merged[index - 1]
            assert set(results) <= {b["id"] for b in before["blocks"]
                                    if b["type"] == "tool_use"}
            kinds = [b["type"] for b in message["blocks"]]
            assert kinds[:len(results)] == ["tool_result"] * len(results)
        if calls:
            after = merged[index + 1]
            assert calls == {b["tool_use_id"] for b in after["blocks"]
                             if b["type"] == "tool_result"}


def test_claude_sdk_reads_converted_transcripts() -> None:
    entries = claude.from_neutral(neutral_history())
    read = _sdk_messages(entries)
    # The chain reaches every entry, in order.
    assert [m["uuid"] for m in read] == [e["uuid"] for e in entries]
    _check_claude_api_rules(read)
    # Claude Code's own transcript reads back whole too (its parallel results recovered).
    original = claude_transcript()
    read_back = _sdk_messages(claude.from_neutral(claude.to_neutral(original)))
    assert read_back == _sdk_messages(original)
    _check_claude_api_rules(read_back)


# across formats -------------------------------------------------------------------------


def test_adk_history_to_claude() -> None:
    entries = claude.from_neutral(adk.to_neutral(adk_events()))
    read = _sdk_messages(entries)
    assert [m["uuid"] for m in read] == [e["uuid"] for e in entries]
    _check_claude_api_rules(read)
    blocks = [b for e in entries if isinstance(e["message"]["content"], list)
              for b in e["message"]["content"]]
    assert [b["name"] for b in blocks if b["type"] == "tool_use"] == [
        "lookup", "lookup", "refund", "explain"]
    failed = [b for b in blocks if b["type"] == "tool_result" and b.get("is_error")]
    assert [b["content"] for b in failed] == ["refunding order 8 needs approval"]
    # ADK's image is inlined; its Cloud Storage file cannot be fetched by Claude, so a
    # note stands in for it.
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                        "data": base64.b64encode(PNG).decode()}} in blocks
    assert {"type": "text", "text": "[file: policy.pdf (not included)]"} in blocks


def test_claude_transcript_to_adk_runs() -> None:
    events = adk.from_neutral(claude.to_neutral(claude_transcript()), agent_name="helper")
    for event in events:
        Event.model_validate(event)
    parts = [p for e in events for p in e["content"]["parts"]]
    assert [p["function_call"]["id"] for p in parts if "function_call" in p] == [
        "toolu_01X", "toolu_01Y", "toolu_01Z"]
    assert [p["function_response"]["response"] for p in parts if "function_response" in p] \
        == [{"result": "shipped"}, {"result": "late"},
            {"error": "<tool_use_error>needs approval</tool_use_error>"}]
    # Claude's thinking is bound to its signature: it does not reach Gemini.
    assert "Two lookups" not in json.dumps(events)
    [contents] = asyncio.run(_continue_in_adk(events, "helper"))
    _check_gemini_pairing(contents)
    texts = [p.text for c in contents for p in c.parts or [] if p.text]
    assert texts == ["Where are orders 7 and 8?", "I'll look both up.",
                     "Order 7 shipped; 8 is late.", "Refund this one.",
                     "The refund needs approval.", "One more thing."]


def test_mixed_history_converts_through_neutral() -> None:
    """A conversation begun in ADK and continued in Claude, converted to either."""
    adk_items = adk_events()[:5]
    claude_items = claude_transcript()
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    items = [Item(f"i{n}", "s", n + 1, stamp, data, fmt) for n, (data, fmt) in enumerate(
        [(e, adk.FORMAT) for e in adk_items] + [(e, claude.FORMAT) for e in claude_items])]

    entries = neutral.convert(items, claude.FORMAT)
    assert entries[-len(claude_items):][0] == claude_items[0]  # the snapshot, unlinked
    fresh = entries[:-len(claude_items)]
    assert all(e["type"] in ("user", "assistant") for e in fresh)
    # The first carried-over message entry is linked to the history written before it.
    relinked = entries[len(fresh) + 1]
    assert relinked["uuid"] == claude_items[1]["uuid"]
    assert relinked["parentUuid"] == fresh[-1]["uuid"]
    assert entries[len(fresh) + 2:] == claude_items[2:]
    read = _sdk_messages(entries)
    # Every message entry is on the chain (the SDK puts parallel results after the calls).
    assert sorted(m["uuid"] for m in read) == sorted(
        e["uuid"] for e in entries if e["type"] in ("user", "assistant"))
    assert read[0]["message"]["content"][0]["text"] == "Where are orders 7 and 8?"
    _check_claude_api_rules(read)

    events = neutral.convert(items, adk.FORMAT)
    assert events[:len(adk_items)] == adk_items
    for event in events:
        Event.model_validate(event)
    stamps = [e["timestamp"] for e in events]
    assert stamps[len(adk_items):] == sorted(stamps[len(adk_items):])
    assert min(stamps[len(adk_items):]) > max(stamps[:len(adk_items)])


def test_edited_neutral_history_falls_back_to_neutral_fields() -> None:
    """A message that points into an original no longer there is written from its own
    fields (here: the first of two parallel results was removed with its owner)."""
    messages = adk.to_neutral(adk_events())
    kept = [messages[1], messages[3]]  # the calls, and the second result of their event
    kept[0] = {k: v for k, v in kept[0].items() if k != "original"}
    events = adk.from_neutral(kept, agent_name="helper")
    responses = [p["function_response"] for p in events[1]["content"]["parts"]]
    assert [r["response"] for r in responses] == [
        {"error": adk.NO_RESULT}, {"order": 8, "status": "late"}]


def test_carried_orphans_are_left_as_the_framework_wrote_them() -> None:
    """A Claude transcript that ends on an unanswered call comes back as it was; a new
    result may answer a carried call, and a second result for an answered call is
    dropped."""
    interrupted = claude_transcript()[:12]  # ends with the refund call, unanswered
    messages = claude.to_neutral(interrupted)
    assert claude.from_neutral(messages) == interrupted
    more = [*messages,
            {"type": "message", "role": "tool", "tool_call_id": "toolu_01Z", "content": "ok"},
            {"type": "message", "role": "tool", "tool_call_id": "toolu_01X", "content": "2nd"},
            {"type": "message", "role": "user", "content": "Next."}]
    entries = claude.from_neutral(more)
    assert entries[:12] == interrupted
    assert [e["message"]["content"] for e in entries[12:]] == [
        [{"type": "tool_result", "tool_use_id": "toolu_01Z", "content": "ok"}], "Next."]
    assert entries[12]["parentUuid"] == interrupted[-1]["uuid"]
    _check_claude_api_rules(_sdk_messages(entries))


def test_claude_inline_sidechain_and_mixed_user_entries() -> None:
    entries = claude_transcript()[:9]
    side = {**entries[1], "uuid": str(uuid.uuid4()), "isSidechain": True,
            "message": {"role": "user", "content": "subagent prompt"}}
    mixed = {**entries[1], "uuid": str(uuid.uuid4()), "parentUuid": entries[8]["uuid"],
             "message": {"role": "user", "content": [
                 {"type": "tool_result", "tool_use_id": "toolu_01Y", "content": "again"},
                 {"type": "text", "text": "Also, hi."}]}}
    history = [*entries[:3], side, *entries[3:], mixed]
    messages = claude.to_neutral(history)
    assert claude.from_neutral(messages) == history
    assert "subagent prompt" not in json.dumps([m["content"] for m in messages])
    tool, user = messages[-2:]
    assert (tool["role"], tool["content"], user["role"], user["content"]) == (
        "tool", "again", "user", "Also, hi.")
    assert tool["original"]["items"] == [mixed]
    assert user["original"] == {"format": claude.FORMAT, "item": mixed["uuid"]}


def test_media_and_ids_across_formats() -> None:
    history = [
        {"type": "message", "role": "user", "content": [
            {"type": "image", "url": "https://example.com/a/cat.jpg"},
            {"type": "file", "url": "data:text/plain;base64," + base64.b64encode(
                b"line one").decode(), "media_type": "text/plain", "name": "notes.txt"},
            {"type": "file", "url": "https://example.com/spec.pdf"},
            {"type": "file", "url": "data:application/zip;base64,UEsDBA==",
             "media_type": "application/zip", "name": "logs.zip"},
            {"type": "image", "url": "data:image/png;base64,not base64!"}]},
        {"type": "message", "role": "assistant", "content": "",
         "tool_calls": [{"id": "fc:1.a", "name": "ocr", "arguments": {}}]},
        {"type": "message", "role": "tool", "tool_call_id": "fc:1.a",
         "content": [{"type": "text", "text": "a cat"},
                     {"type": "image", "url": PNG_URL, "media_type": "image/png"}]},
    ]
    user, turn, result = claude.from_neutral(history)
    assert user["message"]["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a/cat.jpg"}},
        {"type": "document", "title": "notes.txt",
         "source": {"type": "text", "media_type": "text/plain", "data": "line one"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/spec.pdf"}},
        {"type": "text", "text": "[file: logs.zip (not included)]"},
        {"type": "text", "text": "[image: attachment (unreadable data URL)]"}]
    # Call ids follow the API's pattern, consistently in the result.
    assert turn["message"]["content"][0]["id"] == "fc_1_a"
    assert result["message"]["content"] == [{
        "type": "tool_result", "tool_use_id": "fc_1_a", "content": [
            {"type": "text", "text": "a cat"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(PNG).decode()}}]}]

    user_event, call_event, result_event = adk.from_neutral(history)
    assert user_event["content"]["parts"] == [
        {"file_data": {"file_uri": "https://example.com/a/cat.jpg", "mime_type": "image/jpeg"}},
        {"inline_data": {"data": base64.urlsafe_b64encode(b"line one").decode(),
                         "mime_type": "text/plain"}},
        {"file_data": {"file_uri": "https://example.com/spec.pdf",
                       "mime_type": "application/pdf"}},
        {"inline_data": {"data": "UEsDBA==", "mime_type": "application/zip"}},
        {"text": "[image: attachment (unreadable data URL)]"}]
    assert call_event["content"]["parts"][0]["function_call"]["id"] == "fc:1.a"
    assert result_event["content"]["parts"][0]["function_response"]["response"] == {
        "result": "a cat\n[image: attachment (not included)]"}
    for event in (user_event, call_event, result_event):
        Event.model_validate(event)


# bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [adk, claude])
def test_bad_input_is_refused(module: Any) -> None:
    with pytest.raises(InvalidInput):
        module.to_neutral([{"type": "user"}, "not an entry"])
    with pytest.raises(InvalidInput):
        module.from_neutral([{"role": "user", "content": "hi"}, 42])


def test_bad_options_are_refused() -> None:
    for name in ("", "user", 3):
        with pytest.raises(InvalidInput):
            adk.from_neutral([], agent_name=name)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        claude.from_neutral([], session_id="")
