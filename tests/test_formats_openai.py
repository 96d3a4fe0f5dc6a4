"""OpenAI Responses items <-> neutral messages: lossless round trips on histories the real
Agents SDK writes, the turn grouping, orphans, media, reasoning, unknown items, histories
from other frameworks, and the SDK accepting what ``from_neutral`` produces."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    SQLiteSession,
    ToolOutputFileContent,
    ToolOutputImage,
    function_tool,
)
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.models.interface import Model
from agents.models.openai_responses import OpenAIResponsesModel
from agents.usage import Usage
from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from ownstate.errors import InvalidInput
from ownstate.formats import neutral
from ownstate.formats.openai_responses import FORMAT, NO_RESULT, from_neutral, to_neutral
from ownstate.model import Item

CONFIG = RunConfig(tracing_disabled=True)
PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
PDF_B64 = base64.b64encode(b"%PDF-1.4 fake").decode()


# the real SDK over a scripted model ------------------------------------------------------


class CannedModel(Model):
    """Answers each call with the next canned output list and records its input."""

    def __init__(self, *outputs: list[TResponseOutputItem]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                           previous_response_id: Any, conversation_id: Any,
                           prompt: Any) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input if isinstance(input, list) else [input]))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("streaming is not scripted")
        yield  # pragma: no cover  (makes this an async generator)


def say(text: str, item_id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])])


def call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(id=f"fc_{call_id}", call_id=call_id, type="function_call",
                                    name=name, arguments=arguments)


def think(text: str, item_id: str) -> ResponseReasoningItem:
    return ResponseReasoningItem(id=item_id, type="reasoning",
                                 summary=[Summary(text=text, type="summary_text")])


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


@function_tool
def lookup(order: int) -> str:
    """Look an order up."""
    return json.dumps({"order": order, "total": 40})


@function_tool
def chart(order: int) -> ToolOutputImage:
    """Draw the order's chart."""
    return ToolOutputImage(image_url=PNG, detail="low")


@function_tool
def invoice(order: int) -> ToolOutputFileContent:
    """The order's invoice."""
    return ToolOutputFileContent(file_data=PDF_B64, filename="invoice.pdf")


@function_tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refund an amount."""
    return f"refunded {amount}"


async def session_items(model: CannedModel, inputs: list[Any],
                        tools: list[Any] | None = None) -> list[TResponseInputItem]:
    """Run ``inputs`` one turn each over a fresh SQLiteSession; the items it stored."""
    session = SQLiteSession("s", ":memory:")
    agent = Agent(name="support", instructions="Help.", model=model, tools=tools or [])
    for turn in inputs:
        await Runner.run(agent, turn, session=session, run_config=CONFIG)
    items = await session.get_items()
    session.close()
    return items


def chat_history() -> list[TResponseInputItem]:
    model = CannedModel([say("Hello! How can I help?", "msg_1")], [say("Bye ✓", "msg_2")])
    return run(session_items(model, ["Hi", "Thanks, that is all"]))


def tool_history() -> list[TResponseInputItem]:
    """Reasoning, a message and two parallel calls in one response; media in the input."""
    model = CannedModel(
        [think("The user wants two orders.", "rs_1"), say("Let me look.", "msg_1"),
         call("lookup", '{"order":1}', "call_1"), call("lookup", '{"order": 2}', "call_2")],
        [say("Order 1 and 2 cost 40 each.", "msg_2")])
    question = [{"role": "user", "content": [
        {"type": "input_text", "text": "What did orders 1 and 2 cost?"},
        {"type": "input_image", "image_url": "https://example.com/receipt.png",
         "detail": "auto"},
        {"type": "input_file", "file_id": "file-abc"}]}]
    return run(session_items(model, [question], tools=[lookup]))


def media_tool_history() -> list[TResponseInputItem]:
    """Tools that return an image and a file: function_call_output with a list output."""
    model = CannedModel(
        [call("chart", '{"order": 1}', "call_c"), call("invoice", '{"order": 1}', "call_i")],
        [say("Here they are.", "msg_3")])
    return run(session_items(model, ["Chart and invoice for order 1"],
                             tools=[chart, invoice]))


def approval_history() -> list[TResponseInputItem]:
    """A run interrupted for approval: the session holds the call and no output."""
    model = CannedModel([say("I will refund it.", "msg_r"), call("refund", '{"amount": 40}',
                                                               "call_r")])
    return run(session_items(model, ["Refund 40"], tools=[refund]))


@pytest.fixture(scope="module")
def sdk_histories() -> dict[str, list[TResponseInputItem]]:
    return {"chat": chat_history(), "tools": tool_history(), "media": media_tool_history(),
            "approval": approval_history()}


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as another framework would hand them over: neutral fields only."""
    return [{k: v for k, v in m.items() if k != "original"} for m in messages]


# hand-written items for what a scripted model cannot produce ------------------------------

EXOTIC: list[dict[str, Any]] = [
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA..."},
    {"type": "message", "role": "developer", "content": "Be terse."},
    {"role": "user", "content": [{"type": "input_text", "text": "Search the web"},
                                 {"type": "input_audio",
                                  "input_audio": {"data": "UklGR", "format": "wav"}}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "ownstate"}},
    {"id": "msg_w", "type": "message", "role": "assistant", "status": "completed",
     "phase": "final_answer",
     "content": [{"type": "output_text", "text": "Found it [1].", "logprobs": [],
                  "annotations": [{"type": "url_citation", "start_index": 10,
                                   "end_index": 13, "title": "t",
                                   "url": "https://example.com"}]}]},
    {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"],
     "results": None},
    {"type": "computer_call", "id": "cu_1", "call_id": "cc_1", "status": "completed",
     "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
     "pending_safety_checks": []},
    {"type": "computer_call_output", "call_id": "cc_1",
     "output": {"type": "computer_screenshot", "image_url": PNG}},
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "crm", "tools": []},
    {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "crm",
     "name": "delete", "arguments": "{}"},
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False},
    {"type": "mcp_call", "id": "mcp_1", "server_label": "crm", "name": "find",
     "arguments": "{\"q\": 1}", "output": "none"},
    {"type": "custom_tool_call", "id": "ctc_1", "call_id": "cust_1", "name": "patch",
     "input": "*** Begin Patch\n*** End Patch"},
    {"type": "custom_tool_call_output", "call_id": "cust_1", "output": "applied"},
    {"type": "item_reference", "id": "msg_old"},
    {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "enc=="},
    {"id": "__fake_id__", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "refusal", "refusal": "I cannot do that."}],
     "provider_data": {"model": "claude-sonnet-4", "response_id": "r1",
                       "usage": {"input_tokens": 9, "output_tokens": 3}}},
    {"type": "future_item_type", "payload": {"x": [1, 2]}},
    {"role": "user", "content": [
        {"type": "input_image", "file_id": "file-img", "detail": "high"},
        {"type": "input_image", "image_url": PNG, "detail": "auto"},
        {"type": "input_file", "file_data": "data:application/pdf;base64," + PDF_B64,
         "filename": "a.pdf"},
        {"type": "input_file", "file_data": PDF_B64, "filename": "b.pdf"},
        {"type": "input_file", "file_url": "https://example.com/c.pdf"},
        {"type": "input_image", "asset": {"$asset": "ast_1", "media_type": "image/png",
                                          "size": 10}, "detail": "auto"}]},
    {"type": "function_call", "call_id": "call_raw", "name": "echo", "arguments": "not json",
     "id": "fc_raw", "status": "completed"},
    {"type": "function_call", "call_id": "call_list", "name": "echo", "arguments": "[1, 2]"},
    {"type": "function_call_output", "call_id": "call_raw", "output": [
        {"type": "input_text", "text": "echoed"}], "status": "completed", "id": "fco_1"},
    {"type": "function_call_output", "call_id": "call_list", "output": "ok"},
    {"type": "reasoning", "id": "rs_last", "summary": [
        {"type": "summary_text", "text": "First"}, {"type": "summary_text", "text": "Second"}],
     "content": [{"type": "reasoning_text", "text": "raw thought"}]},
]


# lossless round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["chat", "tools", "media", "approval"])
def test_sdk_histories_round_trip_byte_for_byte(
        sdk_histories: dict[str, list[TResponseInputItem]], name: str) -> None:
    items = sdk_histories[name]
    messages = to_neutral(items)
    assert dumps(from_neutral(messages)) == dumps(items)
    # and the neutral messages are JSON that survives storage
    assert dumps(from_neutral(json.loads(dumps(messages)))) == dumps(items)


def test_exotic_items_round_trip_byte_for_byte() -> None:
    messages = to_neutral(EXOTIC)
    assert dumps(from_neutral(messages)) == dumps(EXOTIC)
    # no message needed to keep its items whole
    assert not any(m["original"].get("verbatim") for m in messages)


def test_every_prefix_and_suffix_round_trips() -> None:
    for cut in range(len(EXOTIC) + 1):
        for part in (EXOTIC[:cut], EXOTIC[cut:]):
            assert dumps(from_neutral(to_neutral(part))) == dumps(part)


def test_to_neutral_does_not_touch_its_input() -> None:
    items = copy.deepcopy(EXOTIC)
    messages = to_neutral(items)
    assert items == EXOTIC
    messages[2]["content"][0]["text"] = "changed"
    from_neutral(messages)
    assert items == EXOTIC


def test_original_does_not_store_carried_values_twice() -> None:
    [msg] = to_neutral([{"role": "user", "content": [
        {"type": "input_text", "text": "long text " * 100},
        {"type": "input_image", "image_url": PNG, "detail": "auto"}]}])
    assert "long text" not in dumps(msg["original"])
    assert PNG not in dumps(msg["original"])
    assert msg["original"]["items"][0]["content"][1] == {
        "type": "input_image", "image_url": "$neutral", "detail": "auto"}


def test_an_item_the_markers_cannot_describe_is_kept_verbatim() -> None:
    # a tool output that is not a string or list: other frameworks get its JSON text
    items = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c", "output": {"odd": True}},
             {"role": "user", "content": "$neutral"}]
    messages = to_neutral(items)
    assert messages[1]["content"] == '{"odd": true}'
    assert messages[1]["original"]["verbatim"] is True
    assert messages[2]["content"] == "$neutral"
    assert dumps(from_neutral(messages)) == dumps(items)


# the neutral shape -----------------------------------------------------------------------


def test_an_assistant_turn_is_one_message_with_its_calls(
        sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    messages = to_neutral(sdk_histories["tools"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    turn = messages[1]
    assert turn["content"] == [{"type": "reasoning", "text": "The user wants two orders."},
                               {"type": "text", "text": "Let me look."}]
    assert turn["message_id"] == "msg_1"
    assert turn["tool_calls"] == [{"id": "call_1", "name": "lookup", "arguments": {"order": 1}},
                                  {"id": "call_2", "name": "lookup", "arguments": {"order": 2}}]
    assert [i["type"] for i in turn["original"]["items"]] == [
        "reasoning", "message", "function_call", "function_call"]
    assert messages[2] == {
        "type": "message", "role": "tool", "content": '{"order": 1, "total": 40}',
        "tool_call_id": "call_1", "original": messages[2]["original"]}
    assert messages[3]["tool_call_id"] == "call_2"
    assert messages[4]["content"] == [{"type": "text", "text": "Order 1 and 2 cost 40 each."}]


def test_user_media_parts(sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    user = to_neutral(sdk_histories["tools"])[0]
    assert user["content"] == [
        {"type": "text", "text": "What did orders 1 and 2 cost?"},
        {"type": "image", "url": "https://example.com/receipt.png"},
        {"type": "file", "file_id": "file-abc"}]


def test_tool_results_with_image_and_file_parts(
        sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    messages = to_neutral(sdk_histories["media"])
    assert messages[1]["content"] == []  # a turn of calls only
    assert [c["name"] for c in messages[1]["tool_calls"]] == ["chart", "invoice"]
    image, file = messages[2], messages[3]
    assert image["tool_call_id"] == "call_c"
    assert image["content"] == [{"type": "image", "url": PNG, "media_type": "image/png"}]
    assert file["tool_call_id"] == "call_i"
    assert file["content"] == [{"type": "file", "url": "data:application/pdf;base64," + PDF_B64,
                                "media_type": "application/pdf", "name": "invoice.pdf"}]


def test_strings_stay_strings(sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    messages = to_neutral(sdk_histories["chat"])
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "Hi"),
        ("assistant", [{"type": "text", "text": "Hello! How can I help?"}]),
        ("user", "Thanks, that is all"),
        ("assistant", [{"type": "text", "text": "Bye ✓"}])]
    [turn] = to_neutral([{"role": "assistant", "content": "Done."},
                         {"type": "function_call", "call_id": "c", "name": "f",
                          "arguments": "{}"}])
    assert turn["content"] == "Done."
    assert turn["tool_calls"] == [{"id": "c", "name": "f", "arguments": {}}]


def test_exotic_items_in_neutral_terms() -> None:
    messages = to_neutral(EXOTIC)
    shape = [(m["role"], m["content"], [c["id"] for c in m.get("tool_calls", [])])
             for m in messages]
    assert shape == [
        # the compaction item rides on the first message
        ("developer", "Be terse.", []),
        # input_audio has no neutral part
        ("user", [{"type": "text", "text": "Search the web"}], []),
        # hosted calls and their outputs ride on the assistant turn
        ("assistant", [{"type": "text", "text": "Found it [1]."}], ["cust_1"]),
        ("tool", "applied", []),
        # an encrypted reasoning item without summary, then a refusal from another model
        ("assistant", [{"type": "text", "text": "I cannot do that."}], []),
        ("user", [
            {"type": "image", "file_id": "file-img"},
            {"type": "image", "url": PNG, "media_type": "image/png"},
            {"type": "file", "url": "data:application/pdf;base64," + PDF_B64,
             "media_type": "application/pdf", "name": "a.pdf"},
            {"type": "file", "url": "data:application/pdf;base64," + PDF_B64,
             "media_type": "application/pdf", "name": "b.pdf"},
            {"type": "file", "url": "https://example.com/c.pdf"},
            {"type": "image", "asset": {"$asset": "ast_1", "media_type": "image/png",
                                        "size": 10}}], []),
        ("assistant", [], ["call_raw", "call_list"]),
        ("tool", [{"type": "text", "text": "echoed"}], []),
        ("tool", "ok", []),
        # a reasoning item nothing follows: a message of its own
        ("assistant", [{"type": "reasoning", "text": "First"},
                       {"type": "reasoning", "text": "Second"},
                       {"type": "reasoning", "text": "raw thought"}], [])]
    assert [i["type"] for i in messages[0]["original"]["items"]] == ["compaction", "message"]
    custom = messages[2]
    assert custom["tool_calls"] == [{"id": "cust_1", "name": "patch",
                                     "arguments": "*** Begin Patch\n*** End Patch"}]
    assert messages[3]["tool_call_id"] == "cust_1"
    refusal = messages[4]
    assert refusal["model"] == "claude-sonnet-4"
    assert refusal["usage"] == {"input_tokens": 9, "output_tokens": 3}
    assert "message_id" not in refusal  # the SDK's placeholder id is no id
    calls = messages[6]["tool_calls"]
    assert [c["arguments"] for c in calls] == ["not json", "[1, 2]"]
    assert messages[7]["message_id"] == "fco_1"


def test_reasoning_goes_with_what_follows_it() -> None:
    items = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "a"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "b"}]},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
        {"type": "reasoning", "id": "rs_3", "summary": [{"type": "summary_text", "text": "c"}]},
        {"role": "user", "content": "interrupting"},
    ]
    messages = to_neutral(items)
    assert [(m["role"], m["content"]) for m in messages] == [
        ("assistant", [{"type": "reasoning", "text": "a"}]),
        ("assistant", [{"type": "reasoning", "text": "b"}]),
        ("tool", "1"), ("tool", "2"),
        ("assistant", [{"type": "reasoning", "text": "c"}]),
        ("user", "interrupting")]
    assert [c["id"] for c in messages[0]["tool_calls"]] == ["c1"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c2"]
    assert dumps(from_neutral(messages)) == dumps(items)


def test_a_history_of_items_without_neutral_meaning() -> None:
    items = [{"type": "compaction", "id": "c", "encrypted_content": "x"},
             {"type": "item_reference", "id": "msg_1"}]
    [msg] = to_neutral(items)
    assert msg["role"] == "assistant"
    assert msg["content"] == []
    assert from_neutral([msg]) == items
    assert to_neutral([]) == []
    assert from_neutral([]) == []


# edits to neutral fields -----------------------------------------------------------------


def test_an_edited_text_is_restored_into_the_original_items(
        sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    items = sdk_histories["tools"]
    messages = to_neutral(items)
    messages[1]["content"][1]["text"] = "Looking it up."
    messages[1]["tool_calls"][1]["arguments"] = {"order": 3}
    back = from_neutral(messages)
    expected = copy.deepcopy(items)
    expected[2]["content"][0]["text"] = "Looking it up."
    expected[4]["arguments"] = '{"order": 3}'
    assert dumps(back) == dumps(expected)
    # arguments kept byte for byte ('{"order":1}') give way to an edit too
    messages[1]["tool_calls"][0]["arguments"] = {"order": 7}
    assert from_neutral(messages)[3]["arguments"] == '{"order": 7}'


def test_a_message_that_no_longer_fits_its_items_is_rebuilt() -> None:
    items = [{"role": "user", "content": "Hi"},
             {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "Yes?", "annotations": []}]}]
    messages = to_neutral(items)
    messages[1]["content"].append({"type": "text", "text": "Anything else?"})
    messages[0]["role"] = "developer"
    assert from_neutral(messages) == [
        {"type": "message", "role": "developer", "content": "Hi"},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Yes?", "annotations": []},
            {"type": "output_text", "text": "Anything else?", "annotations": []}]}]


# from other frameworks -------------------------------------------------------------------

FOREIGN: list[dict[str, Any]] = [
    {"type": "message", "role": "system", "content": "You are a support agent."},
    {"type": "message", "role": "user", "message_id": "lc-1", "content": [
        {"type": "text", "text": "Refund order 42, see photo"},
        {"type": "image", "url": "https://example.com/p.jpg", "media_type": "image/jpeg"},
        {"type": "image", "asset": {"$asset": "ast_9", "media_type": "image/png", "size": 3}},
        {"type": "file", "url": "data:application/pdf;base64," + PDF_B64,
         "media_type": "application/pdf"},
        {"type": "file", "file_id": "file-x", "name": "terms.pdf"}]},
    {"type": "message", "role": "assistant", "message_id": "run-7", "model": "claude-x",
     "usage": {"input_tokens": 812, "output_tokens": 19},
     "content": [{"type": "reasoning", "text": "Need the order first."},
                 {"type": "text", "text": "Checking."}],
     "tool_calls": [{"id": "toolu_1", "name": "lookup", "arguments": {"order": 42}},
                    {"id": "toolu_2", "name": "history", "arguments": '{"order": 42}'}]},
    {"type": "message", "role": "tool", "tool_call_id": "toolu_1",
     "content": '{"total": 40}'},
    {"type": "message", "role": "tool", "tool_call_id": "toolu_2", "is_error": True,
     "content": [{"type": "text", "text": "no history"},
                 {"type": "image", "url": PNG}]},
    {"type": "message", "role": "assistant", "content": "Refunding 40.",
     "tool_calls": [{"id": "toolu_3", "name": "refund", "arguments": {"amount": 40}}]},
    {"type": "message", "role": "user", "content": "Thanks"},
]


def test_from_neutral_written_by_another_framework() -> None:
    assert from_neutral(FOREIGN) == [
        {"type": "message", "role": "system", "content": "You are a support agent."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Refund order 42, see photo"},
            {"type": "input_image", "image_url": "https://example.com/p.jpg",
             "detail": "auto"},
            {"type": "input_image", "asset": {"$asset": "ast_9", "media_type": "image/png",
                                              "size": 3}, "detail": "auto"},
            {"type": "input_file", "file_data": "data:application/pdf;base64," + PDF_B64,
             "filename": "file.pdf"},
            {"type": "input_file", "file_id": "file-x", "filename": "terms.pdf"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
         "provider_data": {"model": "claude-x",
                           "usage": {"input_tokens": 812, "output_tokens": 19}}},
        {"type": "function_call", "call_id": "toolu_1", "name": "lookup",
         "arguments": '{"order": 42}'},
        {"type": "function_call", "call_id": "toolu_2", "name": "history",
         "arguments": '{"order": 42}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": '{"total": 40}'},
        {"type": "function_call_output", "call_id": "toolu_2", "output": [
            {"type": "input_text", "text": "no history"},
            {"type": "input_image", "image_url": PNG, "detail": "auto"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Refunding 40.", "annotations": []}]},
        {"type": "function_call", "call_id": "toolu_3", "name": "refund",
         "arguments": '{"amount": 40}'},
        # the refund never got a result: a placeholder right after its turn
        {"type": "function_call_output", "call_id": "toolu_3", "output": NO_RESULT},
        {"type": "message", "role": "user", "content": "Thanks"},
    ]


def test_foreign_history_survives_openai_and_back() -> None:
    """other -> openai -> neutral keeps the neutral fields the format has."""
    again = to_neutral(from_neutral(FOREIGN))
    assert [(m["role"], m.get("tool_call_id")) for m in again] == [
        ("system", None), ("user", None), ("assistant", None), ("tool", "toolu_1"),
        ("tool", "toolu_2"), ("assistant", None), ("tool", "toolu_3"), ("user", None)]
    assert again[2]["tool_calls"] == [
        {"id": "toolu_1", "name": "lookup", "arguments": {"order": 42}},
        {"id": "toolu_2", "name": "history", "arguments": {"order": 42}}]
    assert again[2]["model"] == "claude-x"
    assert again[1]["content"][2] == {"type": "image", "asset": {
        "$asset": "ast_9", "media_type": "image/png", "size": 3}}
    assert again[6]["content"] == NO_RESULT


def test_orphaned_results_are_dropped_and_dangling_calls_answered() -> None:
    messages = [
        {"role": "tool", "tool_call_id": "gone", "content": "result of a trimmed call"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [],
         "tool_calls": [{"id": "a", "name": "f", "arguments": {}},
                        {"id": "b", "name": "f", "arguments": {}},
                        {"name": "g", "arguments": None}]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "b", "content": "B again"},
        {"role": "tool", "content": "no call id"},
        {"role": "assistant", "content": "done"},
    ]
    assert from_neutral(messages) == [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_ownstate_1", "name": "g",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": NO_RESULT},
        {"type": "function_call_output", "call_id": "call_ownstate_1", "output": NO_RESULT},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "done", "annotations": []}]},
    ]


def test_openai_orphans_are_kept_as_stored(
        sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    # the approval run left its call unanswered: resuming it will answer
    approval = sdk_histories["approval"]
    assert approval[-1]["type"] == "function_call"
    assert from_neutral(to_neutral(approval)) == approval
    # an output whose call was trimmed away (a session limit) is kept too
    trimmed = sdk_histories["tools"][5:]
    assert trimmed[0]["type"] == "function_call_output"
    assert from_neutral(to_neutral(trimmed)) == trimmed


def test_an_unanswered_openai_call_is_answered_once_another_framework_moved_on(
        sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    approval = sdk_histories["approval"]
    messages = [*to_neutral(approval), {"role": "user", "content": "Never mind"}]
    back = from_neutral(messages)
    assert back == [*approval,
                    {"type": "function_call_output", "call_id": "call_r", "output": NO_RESULT},
                    {"type": "message", "role": "user", "content": "Never mind"}]
    # answered by another framework instead: that result is used, in the call's own kind
    custom = to_neutral([{"type": "custom_tool_call", "call_id": "k", "name": "patch",
                          "input": "diff"}])
    answered = from_neutral([*custom, {"role": "tool", "tool_call_id": "k", "content": "ok"}])
    assert answered[-1] == {"type": "custom_tool_call_output", "call_id": "k", "output": "ok"}


def test_what_the_responses_api_cannot_take_is_left_out() -> None:
    assert from_neutral([
        {"role": "user", "content": [{"type": "reasoning", "text": "?"},
                                     {"type": "audio", "url": "x"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "text": "thinking"},
                                          {"type": "image", "url": PNG}]},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": ""},
        {"role": "tool", "tool_call_id": "x", "content": "orphan"},
    ]) == [{"type": "message", "role": "user", "content": ""}]


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidInput):
        to_neutral(["not an item"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput):
        from_neutral([42])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="role 'function'"):
        from_neutral([{"role": "function", "content": "x"}])
    with pytest.raises(InvalidInput, match="without a name"):
        from_neutral([{"role": "assistant", "content": "",
                       "tool_calls": [{"id": "c", "arguments": {}}]}])


def test_the_neutral_module_dispatches_here(
        sdk_histories: dict[str, list[TResponseInputItem]]) -> None:
    """A session holding SDK items then messages from another framework."""
    def item(seq: int, data: dict[str, Any], fmt: str) -> Item:
        return Item(item_id=f"i{seq}", session_id="s", seq=seq,
                    create_time=datetime(2025, 1, 1, tzinfo=UTC), data=data, format=fmt)

    sdk = sdk_histories["tools"]
    stored = [item(i, data, FORMAT) for i, data in enumerate(sdk)]
    stored += [item(100 + i, m, neutral.FORMAT) for i, m in enumerate(FOREIGN[-2:])]
    history = neutral.convert(stored, FORMAT)
    assert dumps(history[:len(sdk)]) == dumps(sdk)
    assert history[len(sdk):] == from_neutral(FOREIGN)[-4:]
    assert neutral.convert(stored[:len(sdk)], FORMAT) == sdk


# the real SDK accepts what from_neutral produces -----------------------------------------


def test_runner_accepts_from_neutral_output_as_input() -> None:
    items = from_neutral([*FOREIGN, *plain(to_neutral(EXOTIC[1:5]))])
    model = CannedModel([say("You are welcome.", "msg_end")])
    session = SQLiteSession("s", ":memory:")
    agent = Agent(name="support", model=model, tools=[lookup])

    async def go() -> Any:
        return await Runner.run(agent, items, session=session, run_config=CONFIG)

    result = run(go())
    assert result.final_output == "You are welcome."
    sent = model.inputs[0]
    assert [i.get("call_id") for i in sent if i.get("type") == "function_call_output"] == [
        "toolu_1", "toolu_2", "toolu_3"]
    stored = run(session.get_items())
    assert len(stored) == len(items) + 1
    session.close()


def test_runner_continues_a_foreign_history_over_the_openai_wire() -> None:
    """The real OpenAIResponsesModel, talking to a fake HTTP endpoint, sends the items."""
    requests: list[dict[str, Any]] = []

    def endpoint(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        return httpx.Response(200, json={
            "id": "resp_1", "object": "response", "created_at": 0, "status": "completed",
            "model": "gpt-4.1", "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "output": [{
                "type": "message", "id": "msg_x", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}]}]})

    # the asset reference is the caller's to resolve before sending
    foreign = [m for m in FOREIGN if m.get("message_id") != "lc-1"]
    items = from_neutral(foreign)

    async def go() -> Any:
        http = httpx.AsyncClient(transport=httpx.MockTransport(endpoint))
        client = AsyncOpenAI(api_key="test", base_url="http://responses.test/v1",
                             http_client=http)
        agent = Agent(name="support",
                      model=OpenAIResponsesModel(model="gpt-4.1", openai_client=client))
        session = SQLiteSession("s", ":memory:")
        try:
            return await Runner.run(agent, items, session=session, run_config=CONFIG)
        finally:
            session.close()
            await client.close()

    assert run(go()).final_output == "ok"
    sent = requests[0]["input"]
    assert not any("provider_data" in i for i in sent)  # the SDK strips it
    assert [i["type"] for i in sent] == [i["type"] for i in items]
    assert sent[1]["content"] == items[1]["content"]


def test_to_neutral_accepts_result_to_input_list() -> None:
    model = CannedModel([call("lookup", '{"order": 5}', "call_5")],
                        [say("Five costs 40.", "msg_5")])
    agent = Agent(name="support", model=model, tools=[lookup])

    async def go() -> Any:
        return await Runner.run(agent, "Order 5?", run_config=CONFIG)

    items = run(go()).to_input_list()
    messages = to_neutral(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert dumps(from_neutral(messages)) == dumps(items)

