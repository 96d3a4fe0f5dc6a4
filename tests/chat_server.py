"""A local server that speaks the OpenAI chat-completions protocol, for the distillation tests.

``ChatServer`` runs a FastAPI app under uvicorn on a free port in a thread and answers
``POST /v1/chat/completions``. Every request is checked to be a valid chat-completions
request by the ``openai`` package's own request types (unknown fields refused too) and to
ask for strict ``json_schema`` structured output; a request that is not gets a 400 in the
shape OpenAI answers with, and is recorded in ``rejected``.

Its "model" is deterministic: in the user message it reads the lines ``[item_id] user:
text`` and turns each ``my <words> is <value>`` into a fact (key: the words joined by
``_``; value: an integer when it is one), with confidence 0.3 when the line says
``maybe``, else 0.9, citing that item. ``mode`` makes it misbehave: ``"status"`` (500),
``"not_json"`` (content that is not JSON), ``"wrong_shape"`` (JSON off the schema),
``"refusal"``, ``"slow"`` (answers after ``delay`` seconds) or ``"fail_after"`` (answers the
first ``fail_after`` requests, then 500s).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

_LINE = re.compile(r"^\[(?P<item>[^\]]+)\] (?P<role>\w+): (?P<text>.*)$", re.MULTILINE)
_FACT = re.compile(r"\bmy (?P<words>[a-z]+(?: [a-z]+)?) is (?P<value>[\w-]+)", re.IGNORECASE)


def _problem(status: int, message: str) -> Any:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": None, "code": None}}, status_code=status)


def _check_request(body: Any) -> str | None:
    """Why ``body`` is not a valid chat-completions request with strict structured output,
    or None."""
    from openai.types.chat import completion_create_params as params
    from pydantic import TypeAdapter, ValidationError

    kind = params.CompletionCreateParamsNonStreaming
    if not isinstance(body, dict):
        return "the body is not an object"
    unknown = set(body) - (kind.__required_keys__ | kind.__optional_keys__)
    if unknown:
        return f"unknown fields {sorted(unknown)}"
    try:
        checked = TypeAdapter(kind).validate_python(body)
        list(checked["messages"])  # an iterable field is checked as it is consumed
    except ValidationError as exc:
        return str(exc)
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}) if isinstance(fmt, dict) else {}
    if fmt.get("type") != "json_schema" or schema.get("strict") is not True or not isinstance(
            schema.get("schema"), dict):
        return "the request does not ask for strict json_schema output"
    return None


def _extract(body: dict[str, Any]) -> list[dict[str, Any]]:
    user = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
    facts = []
    for line in _LINE.finditer(user):
        if line["role"] != "user":
            continue
        for found in _FACT.finditer(line["text"]):
            value: Any = found["value"]
            if value.isdigit():
                value = int(value)
            facts.append({"key": found["words"].lower().replace(" ", "_"), "value": value,
                          "confidence": 0.3 if "maybe" in line["text"].lower() else 0.9,
                          "item_ids": [line["item"]]})
    return facts


def _completion(body: dict[str, Any], content: str | None, refusal: str | None = None) -> Any:
    from openai.types.chat import ChatCompletion

    answer = {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
        "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": content,
                                 "refusal": refusal}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return ChatCompletion.model_validate(answer).model_dump(mode="json")  # a valid answer


class ChatServer:
    """The server; see the module docstring. ``requests`` holds every valid request."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.delay = 0.0
        self.fail_after = 0
        self.requests: list[dict[str, Any]] = []
        self.rejected: list[str] = []
        self.authorization: list[str | None] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> Any:
            try:
                body = json.loads(await request.body())
            except ValueError:
                self.rejected.append("not JSON")
                return _problem(400, "the body is not JSON")
            why = _check_request(body)
            if why is not None:
                self.rejected.append(why)
                return _problem(400, why)
            self.requests.append(body)
            self.authorization.append(request.headers.get("authorization"))
            mode = self.mode
            if mode == "fail_after":
                mode = "ok" if len(self.requests) <= self.fail_after else "status"
            if mode == "status":
                return _problem(500, "the model is overloaded")
            if mode == "slow":
                await asyncio.sleep(self.delay)
            if mode == "not_json":
                return _completion(body, "Sure! The facts are: city=Paris")
            if mode == "wrong_shape":
                return _completion(body, json.dumps({"facts": [{"key": "city"}]}))
            if mode == "refusal":
                return _completion(body, None, refusal="I cannot help with that.")
            return _completion(body, json.dumps({"facts": _extract(body)}))

        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="chat-test-server",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the chat test server did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def reset(self) -> None:
        self.mode, self.delay, self.fail_after = "ok", 0.0, 0
        self.requests.clear()
        self.rejected.clear()
        self.authorization.clear()

    def item_ids_sent(self, index: int = -1) -> list[str]:
        """The item ids the ``index``-th request showed the model."""
        user = "\n".join(m["content"] for m in self.requests[index]["messages"]
                         if m["role"] == "user")
        return [line["item"] for line in _LINE.finditer(user)]

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
