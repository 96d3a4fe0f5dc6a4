"""LangChain messages to neutral messages and back, and histories read in every shape."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)

import ownstate
from ownstate.errors import InvalidInput
from ownstate.formats import langchain, neutral

HISTORY = [
    SystemMessage("Be brief.", id="s-1"),
    HumanMessage("Refund orders A1 and B2", id="h-1"),
    AIMessage("", id="a-1", tool_calls=[
        {"name": "refund", "args": {"order": "A1"}, "id": "call_a"},
        {"name": "refund", "args": {"order": "B2"}, "id": "call_b"}],
        usage_metadata={"input_tokens": 30, "output_tokens": 9, "total_tokens": 39},
        response_metadata={"model_name": "gpt-4.1"}),
    ToolMessage("refunded A1", tool_call_id="call_a", id="t-1"),
    ToolMessage("B2 not found", tool_call_id="call_b", id="t-2", status="error"),
    AIMessage("A1 is refunded; B2 was not found.", id="a-2"),
]


def test_a_history_round_trips_exactly() -> None:
    dicts = [message_to_dict(m) for m in HISTORY]
    messages = langchain.to_neutral(dicts)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool",
                                             "assistant"]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["call_a", "call_b"]  # parallel
    assert messages[2]["model"] == "gpt-4.1"
    assert messages[2]["usage"] == {"input_tokens": 30, "output_tokens": 9}
    assert langchain.from_neutral(messages) == dicts
    assert langchain.to_messages(messages) == HISTORY


def test_orphans_are_repaired_for_chat_models() -> None:
    messages = langchain.to_neutral([message_to_dict(m) for m in [
        HumanMessage("hi", id="h"),
        ToolMessage("stray result", tool_call_id="nobody", id="t-0"),
        AIMessage("", id="a", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]),
        HumanMessage("still there?", id="h2"),
    ]])
    repaired = langchain.to_messages(messages)
    assert [m.type for m in repaired] == ["human", "ai", "tool", "human"]
    assert repaired[2].tool_call_id == "c1"
    assert repaired[2].status == "error"
    # the rest of a history keeps results whose calls came earlier
    rest = langchain.to_messages(messages[1:2], calls=["nobody"])
    assert [m.type for m in rest] == ["tool"]


def test_messages_written_by_hand_convert() -> None:
    built = langchain.to_messages([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi", "tool_calls": [
            {"id": "c", "name": "look", "arguments": {"q": 1}}]},
        {"role": "tool", "content": "found", "tool_call_id": "c"},
    ])
    assert [type(m) for m in built] == [HumanMessage, AIMessage, ToolMessage]
    assert built[1].tool_calls[0]["args"] == {"q": 1}


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidInput):
        langchain.to_neutral([{"type": "nonsense", "data": {}}])
    with pytest.raises(InvalidInput):
        langchain.message_to_item("not a message")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        langchain.item_to_message({"role": "user"})


# -- session.history over every backend ------------------------------------------------


def mixed_session(client: ownstate.Client) -> ownstate.Session:
    """A conversation four frameworks wrote parts of."""
    session = client.session_stores.create("mixed").add(actor_id="customer")
    session.append_items([langchain.message_to_item(HumanMessage("broken order", id="h-1"))],
                         format=neutral.FORMAT)
    session.append_items([
        {"type": "function_call", "call_id": "call_1", "name": "lookup",
         "arguments": "{\"order\": \"A1\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "{\"total\": 40}"},
        {"role": "assistant", "content": "A1 cost 40."},
    ], format="openai.responses")
    session.append_items([
        {"id": "e1", "author": "user", "invocation_id": "i1", "timestamp": 1.0,
         "content": {"role": "user", "parts": [{"text": "refund it"}]}},
        {"id": "e2", "author": "support", "invocation_id": "i1", "timestamp": 2.0,
         "content": {"role": "model", "parts": [{"text": "Refunded."}]}},
        {"id": "e3", "author": "support", "invocation_id": "i1", "timestamp": 3.0,
         "actions": {"state_delta": {"refunded": True}}},
    ], format="adk.event")
    session.append_items([{"kind": "audit", "note": "not a message"}], format="json")
    return session


def texts(history: list[dict[str, Any]]) -> str:
    return repr(history)


@pytest.mark.parametrize("fmt", sorted(neutral.FORMATS))
def test_history_in_every_shape(client: ownstate.Client, fmt: str) -> None:
    session = mixed_session(client)
    history = session.history(as_format=fmt)
    dump = texts(history)
    for said in ("broken order", "lookup", "A1 cost 40.", "refund it", "Refunded."):
        assert said in dump, (fmt, said)
    assert "not a message" not in dump


def test_history_neutral_pairs_calls_and_results(client: ownstate.Client) -> None:
    history = mixed_session(client).history()
    roles = [m["role"] for m in history]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert history[1]["tool_calls"][0]["id"] == history[2]["tool_call_id"] == "call_1"


def test_history_of_one_format_comes_back_as_stored(client: ownstate.Client) -> None:
    session = client.session_stores.create("plain").add(actor_id="a")
    items = [{"role": "user", "content": "hi"},
             {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
              "content": [{"type": "output_text", "text": "hello", "annotations": []}]}]
    session.append_items(items, format="openai.responses")
    assert session.history(as_format="openai.responses") == items


def test_history_refuses_an_unknown_shape(client: ownstate.Client) -> None:
    session = mixed_session(client)
    for bad in ["markdown", "", None, 3]:
        with pytest.raises(InvalidInput):
            session.history(as_format=bad)  # type: ignore[arg-type]


def test_a_chat_message_keeps_the_role_it_names() -> None:
    critic = ChatMessage("too long", role="critic", id="c-1")
    item = langchain.message_to_item(critic)
    assert item["role"] == "critic"
    assert langchain.item_to_message(item) == critic
    # a message of another type is never asked for a role, even when it carries one
    assert langchain.message_to_item(HumanMessage("hi", role="critic"))["role"] == "user"
