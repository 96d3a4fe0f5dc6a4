"""Derived item columns: role, type, tool name, model and token counts read off ``data``.

The derivation is best-effort and never fails: a shape it does not know yields ``None``
columns. It understands OpenAI Responses items (with the Agents SDK's ``provider_data``), Chat
Completions style messages, the plain ``{"role": ..., "content": ...}`` message, Claude
transcript entries (the message under ``message``) and ADK events (``content.parts``; the
``model`` role is reported as ``assistant``).

It may touch nothing else of ownstate's and no outside library.
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


def _tokens(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    return (_int(usage.get("input_tokens", usage.get("prompt_tokens",
                                                    usage.get("prompt_token_count")))),
            _int(usage.get("output_tokens", usage.get("completion_tokens",
                                                     usage.get("candidates_token_count")))))


def _nested(data: dict[str, Any]) -> DerivedColumns | None:
    """Columns of shapes that keep the message one level down: a Claude transcript entry
    (``message``) and an ADK event (``content`` with ``parts``)."""
    message = data.get("message")
    if isinstance(message, dict) and "role" in message:
        blocks = message.get("content")
        tools: list[str] = [
            b["name"] for b in blocks if isinstance(b, dict)
            and b.get("type") == "tool_use" and isinstance(b.get("name"), str)
        ] if isinstance(blocks, list) else []
        in_tokens, out_tokens = _tokens(message.get("usage"))
        return DerivedColumns(_str(message.get("role")), _str(data.get("type")) or "message",
                              ",".join(tools) or None, _str(message.get("model")),
                              in_tokens, out_tokens)
    content = data.get("content")
    if isinstance(content, dict) and isinstance(content.get("parts"), list):
        role = _str(content.get("role"))
        calls = [p["function_call"].get("name") for p in content["parts"]
                 if isinstance(p, dict) and isinstance(p.get("function_call"), dict)]
        in_tokens, out_tokens = _tokens(data.get("usage_metadata"))
        return DerivedColumns("assistant" if role == "model" else role, "message",
                              ",".join(n for n in calls if isinstance(n, str)) or None,
                              _str(data.get("model_version")), in_tokens, out_tokens)
    return None


def derive_columns(data: dict[str, Any]) -> DerivedColumns:
    """The queryable columns ``data``'s shape states; ``None`` where it states nothing."""
    return DerivedColumns._make(derived_row(data))


#: role, type, tool_name, model, in_tokens, out_tokens
Row = tuple[str | None, str | None, str | None, str | None, int | None, int | None]


def derived_row(data: dict[str, Any]) -> Row:
    """:func:`derive_columns` as a plain tuple, in the same order.

    Every append derives them for every item, so the common shapes (a message with a
    role, a Responses item with a type) are read inline, without a call per column, and
    the columns are returned without the named tuple's constructor (a sixth of the time).
    """
    get = data.get
    stated_role = get("role")
    role = stated_role if isinstance(stated_role, str) and stated_role else None
    item_type = get("type")
    if not (isinstance(item_type, str) and item_type):
        item_type = None
    if role is None:
        nested = _nested(data)
        if nested is not None:
            return nested
    elif item_type is None:
        item_type = "message"
    usage = get("usage")
    in_tokens, out_tokens = (None, None) if usage is None else _tokens(usage)
    model = get("model")
    if not (isinstance(model, str) and model):
        model = None
    provider = get("provider_data")
    if isinstance(provider, dict):  # where the Agents SDK keeps a response's metadata
        model = model or _str(provider.get("model"))
        if in_tokens is None and out_tokens is None:
            in_tokens, out_tokens = _tokens(provider.get("usage"))
    if item_type == "message" and stated_role != "tool" and get("tool_calls") is None:
        tool_name = None  # what _tool_name finds for such a message, without the call
    else:
        tool_name = _tool_name(data, item_type)
    return role, item_type, tool_name, model, in_tokens, out_tokens


def infer_format(data: dict[str, Any]) -> str:
    """``openai.responses`` for Responses items and role/content messages, else ``json``."""
    item_type = data.get("type")
    if item_type in RESPONSES_TYPES or ("role" in data and "content" in data):
        return "openai.responses"
    return "json"
