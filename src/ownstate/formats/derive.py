"""Derived item columns: role, type, tool name, model and token counts read off ``data``.

The derivation is best-effort and never fails: a shape it does not know yields ``None``
columns. It understands OpenAI Responses items, Chat Completions style messages and the
plain ``{"role": ..., "content": ...}`` message.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["DerivedColumns", "derive_columns", "infer_format"]

#: Responses item types, as the OpenAI Responses API and the Agents SDK write them.
RESPONSES_TYPES = frozenset({
    "message", "function_call", "function_call_output", "reasoning",
    "file_search_call", "web_search_call", "computer_call", "computer_call_output",
    "code_interpreter_call", "image_generation_call", "local_shell_call",
    "local_shell_call_output", "mcp_call", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "custom_tool_call", "custom_tool_call_output",
    "item_reference", "compaction", "shell_call", "shell_call_output",
    "apply_patch_call", "apply_patch_call_output",
})

_NAMED_CALLS = frozenset({"function_call", "custom_tool_call", "mcp_call",
                          "mcp_approval_request"})


class DerivedColumns(NamedTuple):
    role: str | None
    type: str | None
    tool_name: str | None
    model: str | None
    in_tokens: int | None
    out_tokens: int | None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tool_name(data: dict[str, Any], item_type: str | None) -> str | None:
    if item_type in _NAMED_CALLS:
        return _str(data.get("name"))
    if item_type is not None and item_type.endswith("_call") and item_type != "function_call":
        return item_type.removesuffix("_call")
    calls = data.get("tool_calls")
    if isinstance(calls, list) and calls:
        names = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            name = _str(function.get("name")) if isinstance(function, dict) else None
            if name is None and isinstance(call, dict):
                name = _str(call.get("name"))
            if name is not None:
                names.append(name)
        return ",".join(names) if names else None
    if data.get("role") == "tool":
        return _str(data.get("name"))
    return None


def derive_columns(data: dict[str, Any]) -> DerivedColumns:
    """The queryable columns ``data``'s shape states; ``None`` where it states nothing."""
    role = _str(data.get("role"))
    item_type = _str(data.get("type"))
    if item_type is None and role is not None:
        item_type = "message"
    usage = data.get("usage")
    in_tokens = out_tokens = None
    if isinstance(usage, dict):
        in_tokens = _int(usage.get("input_tokens", usage.get("prompt_tokens")))
        out_tokens = _int(usage.get("output_tokens", usage.get("completion_tokens")))
    return DerivedColumns(
        role=role,
        type=item_type,
        tool_name=_tool_name(data, item_type),
        model=_str(data.get("model")),
        in_tokens=in_tokens,
        out_tokens=out_tokens,
    )


def infer_format(data: dict[str, Any]) -> str:
    """``openai.responses`` for Responses items and role/content messages, else ``json``."""
    item_type = data.get("type")
    if item_type in RESPONSES_TYPES or ("role" in data and "content" in data):
        return "openai.responses"
    return "json"
