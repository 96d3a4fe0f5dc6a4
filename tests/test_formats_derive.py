"""Derived item columns read off each framework's shape (pure, no database)."""

from __future__ import annotations

from typing import Any

import pytest

from ownstate.formats.derive import DerivedColumns, derive_columns, derived_row

CASES: list[tuple[str, dict[str, Any], DerivedColumns]] = [
    ("plain message", {"role": "user", "content": "hi"},
     DerivedColumns("user", "message", None, None, None, None)),
    ("chat completions call",
     {"role": "assistant", "content": None, "model": "gpt-4.1",
      "tool_calls": [{"id": "c1", "function": {"name": "refund", "arguments": "{}"}}],
      "usage": {"prompt_tokens": 10, "completion_tokens": 2}},
     DerivedColumns("assistant", "message", "refund", "gpt-4.1", 10, 2)),
    ("responses function call",
     {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
     DerivedColumns(None, "function_call", "lookup", None, None, None)),
    ("agents SDK provider data",
     {"type": "message", "role": "assistant", "content": [],
      "provider_data": {"model": "gpt-4.1-mini", "usage": {"input_tokens": 7,
                                                           "output_tokens": 3}}},
     DerivedColumns("assistant", "message", None, "gpt-4.1-mini", 7, 3)),
    ("claude transcript entry",
     {"type": "assistant", "uuid": "u1",
      "message": {"role": "assistant", "model": "claude-sonnet",
                  "content": [{"type": "text", "text": "ok"},
                              {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}},
                              {"type": "tool_use", "id": "t2", "name": "Read", "input": {}}],
                  "usage": {"input_tokens": 12, "output_tokens": 5}}},
     DerivedColumns("assistant", "assistant", "Bash,Read", "claude-sonnet", 12, 5)),
    ("adk event",
     {"author": "support", "invocation_id": "e-1",
      "content": {"role": "model", "parts": [{"function_call": {"name": "lookup",
                                                                "args": {}}}]},
      "model_version": "gemini-2.5-flash",
      "usage_metadata": {"prompt_token_count": 30, "candidates_token_count": 4}},
     DerivedColumns("assistant", "message", "lookup", "gemini-2.5-flash", 30, 4)),
    ("adk user event", {"author": "user", "content": {"role": "user",
                                                      "parts": [{"text": "hi"}]}},
     DerivedColumns("user", "message", None, None, None, None)),
    # the message shapes derive_columns reads inline, and their neighbours that it does not
    ("responses message", {"type": "message", "role": "assistant", "content": []},
     DerivedColumns("assistant", "message", None, None, None, None)),
    ("tool result message", {"type": "message", "role": "tool", "name": "refund",
                             "content": "ok"},
     DerivedColumns("tool", "message", "refund", None, None, None)),
    ("tool result without a type", {"role": "tool", "name": "refund", "content": "ok"},
     DerivedColumns("tool", "message", "refund", None, None, None)),
    ("message with a call by name", {"type": "message", "role": "assistant",
                                     "tool_calls": [{"name": "lookup"}, "x"]},
     DerivedColumns("assistant", "message", "lookup", None, None, None)),
    ("message with empty tool calls", {"role": "assistant", "tool_calls": []},
     DerivedColumns("assistant", "message", None, None, None, None)),
    ("message with usage", {"role": "assistant", "usage": {"input_tokens": True,
                                                           "output_tokens": 4}},
     DerivedColumns("assistant", "message", None, None, None, 4)),
    ("unknown shape", {"kind": "note", "text": "x"},
     DerivedColumns(None, None, None, None, None, None)),
    ("wrong types never fail", {"role": 3, "message": "x", "content": {"parts": "no"},
                                "usage": [1], "provider_data": "x"},
     DerivedColumns(None, None, None, None, None, None)),
]


@pytest.mark.parametrize(("data", "expected"), [(d, e) for _, d, e in CASES],
                         ids=[name for name, _, _ in CASES])
def test_derived_columns(data: dict[str, Any], expected: DerivedColumns) -> None:
    columns = derive_columns(data)
    assert type(columns) is DerivedColumns
    assert columns == expected
    assert derived_row(data) == tuple(expected)  # what an append stores
