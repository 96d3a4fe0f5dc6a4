"""An extractor for any OpenAI-compatible chat-completions endpoint, with structured output.

:class:`ChatCompletionsExtractor` sends one ``POST {base_url}/chat/completions`` per slice
of items: a system message saying what to extract, and a user message holding the
subject, its known facts and the items, one line each as ``[item_id] role: text``. It asks
for ``response_format`` ``json_schema`` (strict) with :data:`FACTS_SCHEMA`, so the answer is
``{"facts": [{"key", "value", "confidence", "item_ids"}, ...]}``, and checks the answer
against that schema before any of it becomes a candidate. Every failure (unreachable,
timeout, an error status, a refusal, an answer that is not that JSON) is one
:class:`~ownstate.errors.ExtractorFailed` that names the reason and never the payload.

It may touch the error tree, the model and neutral messages (``ownstate.formats.neutral``),
and talks HTTP with httpx (the ``distill`` extra), imported when an extractor is made.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from .._extras import requires
from ..errors import ExtractorFailed, InvalidInput
from ..formats.neutral import to_neutral
from ..model import JSON, Candidate, Fact, Item

__all__ = ["FACTS_SCHEMA", "SYSTEM_PROMPT", "ChatCompletionsExtractor", "render_item"]

#: The JSON schema the endpoint's answer must follow (strict structured output).
FACTS_SCHEMA: dict[str, JSON] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "value": {"anyOf": [{"type": "string"}, {"type": "number"},
                                        {"type": "boolean"}]},
                    "confidence": {"type": "number"},
                    "item_ids": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["key", "value", "confidence", "item_ids"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["facts"],
    "additionalProperties": False,
}

SYSTEM_PROMPT = """\
You extract durable facts about one subject from a conversation, for a long-term memory.
A durable fact stays true beyond this conversation: a preference, a name, a plan, a
relationship, an account detail. Skip small talk, questions, and what the assistant says
unless the user confirms it. For each fact give:
- key: a short snake_case name (reuse the key of a known fact when it is the same thing);
- value: a string, number or boolean;
- confidence: from 0 to 1, how sure the conversation makes it;
- item_ids: the ids (in brackets) of the items that state it, the latest last.
Report a known fact again only when the conversation changes its value. Answer with JSON
that follows the schema; with no new facts, answer {"facts": []}."""

#: How many characters of one item the prompt carries.
MAX_ITEM_CHARS = 4000
#: How many of the subject's known facts the prompt lists (the most recently recorded).
MAX_KNOWN_FACTS = 200


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part["text"] for part in content if isinstance(part, dict)
                        and part.get("type") == "text" and isinstance(part.get("text"), str))
    return ""


def render_item(item: Item) -> str:
    """One item as the line an extractor's prompt shows: ``[item_id] role: text``, its
    tool calls as ``name(arguments)``; an item that is no message shows its JSON."""
    try:
        messages = to_neutral([item])
    except InvalidInput:
        messages = []
    parts: list[str] = []
    role = item.role or "item"
    for message in messages:
        role = str(message.get("role") or role)
        text = _text(message.get("content"))
        if text:
            parts.append(text)
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                arguments = call.get("arguments")
                shown = arguments if isinstance(arguments, str) else json.dumps(
                    arguments, ensure_ascii=False, sort_keys=True)
                parts.append(f"{call.get('name')}({shown})")
    if not messages:
        parts.append(json.dumps(item.data, ensure_ascii=False, sort_keys=True, default=str))
    body = " ".join(" ".join(parts).split())
    if len(body) > MAX_ITEM_CHARS:
        body = body[:MAX_ITEM_CHARS - 1] + "…"
    return f"[{item.item_id}] {role}: {body}"


def prompt(items: Sequence[Item], subject: str, known: Sequence[Fact]) -> str:
    """The user message for one slice."""
    lines = [f"Subject: {subject}", "", "Known facts:"]
    shown = sorted(known, key=lambda f: f.recorded_at, reverse=True)[:MAX_KNOWN_FACTS]
    lines += [f"- {fact.key} = {json.dumps(fact.value, ensure_ascii=False, sort_keys=True)}"
              for fact in sorted(shown, key=lambda f: f.key)] or ["(none)"]
    lines += ["", "Conversation items, oldest first:"]
    lines += [render_item(item) for item in items]
    return "\n".join(lines)


def _malformed(where: str) -> ExtractorFailed:
    return ExtractorFailed(f"the endpoint's answer is not the structured output asked for: "
                           f"{where}", reason="malformed")


def _candidates(content: object, subject: str) -> list[Candidate]:
    """The candidates in the answer's content, checked against :data:`FACTS_SCHEMA`."""
    if not isinstance(content, str):
        raise _malformed("the message has no content")
    try:
        answer = json.loads(content)
    except ValueError:
        raise _malformed("the content is not JSON") from None
    if not isinstance(answer, dict) or set(answer) != {"facts"} or not isinstance(
            answer["facts"], list):
        raise _malformed('the content is not an object with exactly "facts", a list')
    found = []
    for index, fact in enumerate(answer["facts"]):
        where = f"facts[{index}]"
        if not isinstance(fact, dict) or set(fact) != {"key", "value", "confidence",
                                                       "item_ids"}:
            raise _malformed(f"{where} is not an object with key, value, confidence, item_ids")
        key, value, confidence, item_ids = (fact["key"], fact["value"], fact["confidence"],
                                            fact["item_ids"])
        if not isinstance(key, str):
            raise _malformed(f"{where}.key is not a string")
        if not isinstance(value, (str, int, float)) or (
                isinstance(value, float) and not math.isfinite(value)):
            raise _malformed(f"{where}.value is not a string, number or boolean")
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
            raise _malformed(f"{where}.confidence is not a number")
        if not isinstance(item_ids, list) or not all(isinstance(i, str) for i in item_ids):
            raise _malformed(f"{where}.item_ids is not a list of strings")
        found.append(Candidate(subject, key, value, float(confidence), tuple(item_ids)))
    return found


def _error_detail(response: Any) -> str:
    """The ``error.message`` of an error answer, shortened, when it has one."""
    try:
        body = response.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        return ""
    message = " ".join(message.split())
    return f": {message[:200]}"


class ChatCompletionsExtractor(AbstractContextManager["ChatCompletionsExtractor"]):
    """Candidate facts from a chat model behind an OpenAI-compatible endpoint.

    ``model`` is the model name the endpoint knows. ``base_url`` is the API root (the
    part before ``/chat/completions``), by default ``OPENAI_BASE_URL`` or OpenAI's.
    ``api_key`` is sent as a bearer token, by default ``OPENAI_API_KEY`` (none when
    unset, for local servers). ``timeout`` bounds each request in seconds (connect, read
    and write each); ``temperature`` is 0 by default so that the same items give the same
    facts. ``headers`` are added to every request.

    Raises :class:`~ownstate.errors.MissingExtra` without httpx (``ownstate[distill]``),
    :class:`~ownstate.errors.InvalidInput` for an empty model or base URL or a timeout
    that is not a positive number.
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, temperature: float = 0.0,
                 headers: Mapping[str, str] | None = None) -> None:
        with requires("distill", "the chat-completions extractor"):
            import httpx
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput("model must be a non-empty string", field="model")
        url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput("base_url must be an http:// or https:// URL", field="base_url")
        if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                or not math.isfinite(timeout) or timeout <= 0):
            raise InvalidInput("timeout must be a positive number of seconds", field="timeout")
        self.model = model
        self.base_url = url.rstrip("/")
        self.timeout = float(timeout)
        self.temperature = temperature
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        sent = {"Content-Type": "application/json", **(headers or {})}
        if key:
            sent["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(timeout=httpx.Timeout(self.timeout), headers=sent)

    def __repr__(self) -> str:
        return f"<ChatCompletionsExtractor {self.model} at {self.base_url}>"

    def close(self) -> None:
        """Close the extractor's HTTP connections."""
        self._http.close()

    def __exit__(self, *exc: object) -> None:  # __enter__ (returning self) is inherited
        self.close()

    def request(self, items: Sequence[Item], subject: str,
                known: Sequence[Fact]) -> dict[str, JSON]:
        """The chat-completions request body for one slice of items."""
        return {
            "model": self.model,
            "temperature": self.temperature,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": prompt(items, subject, known)}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "distilled_facts", "strict": True, "schema": FACTS_SCHEMA}},
        }

    def extract(self, items: Sequence[Item], *, subject: str,
                known: Sequence[Fact]) -> list[Candidate]:
        """The candidate facts about ``subject`` in ``items``, each naming its items.

        Raises :class:`~ownstate.errors.ExtractorFailed`.
        """
        import httpx

        url = f"{self.base_url}/chat/completions"
        try:
            response = self._http.post(url, json=self.request(items, subject, known))
        except httpx.TimeoutException:
            raise ExtractorFailed(f"{url} did not answer within {self.timeout:g}s",
                                  reason="timeout") from None
        except httpx.HTTPError as exc:
            raise ExtractorFailed(f"{url} could not be reached ({type(exc).__name__})",
                                  reason="unreachable") from None
        if response.status_code != 200:
            raise ExtractorFailed(
                f"{url} answered {response.status_code}{_error_detail(response)}",
                reason="status", status=response.status_code)
        try:
            body = response.json()
        except ValueError:
            raise _malformed("the body is not JSON") from None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
                or not isinstance(choices[0].get("message"), dict):
            raise _malformed("it has no choices[0].message")
        choice = choices[0]
        message = choice["message"]
        if message.get("refusal"):
            raise ExtractorFailed("the model refused to answer", reason="refused")
        if choice.get("finish_reason") == "length":
            raise _malformed("the model stopped at its length limit")
        return _candidates(message.get("content"), subject)
