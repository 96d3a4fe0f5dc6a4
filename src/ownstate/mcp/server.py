"""The MCP server over the tools of :mod:`ownstate.mcp.tools`, on the official MCP SDK's
low-level server, and its two transports.

- stdio: one client (the process that started it), acting as one configured caller of one
  tenant: the tenant's admin, or a principal held to its store grants.
- streamable HTTP: every request carries an API key (``Authorization: Bearer osk_...``),
  checked as ``ownstate serve`` checks it (:class:`~ownstate.server.auth.KeyCheck`); a key
  of another tenant, a revoked or unknown one, or none gets 401 problem+json before the
  request reaches MCP. Each tool call acts for the key of the request that carries it, and
  an MCP session can only be continued with the key that opened it.

A tool's failure is an MCP tool result with ``isError`` set, whose text is the library's
message and whose structured content carries the error's ``code`` and ids; nothing is
written by a call that fails.

It may touch the public API (``ownstate.api``, ``api.access``), the backend it opens
(``ownstate.backends``), :mod:`.tools`, the server's key check (``ownstate.server.auth``),
the wire form of errors (``ownstate._wire``), the error tree, the limits and the model, and
the MCP SDK, starlette and pydantic.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from .. import __version__, _wire
from .._extras import requires
from ..api import AsyncClient, connect_async
from ..api.access import UNKNOWN_KEY
from ..backends import open_backend, resolve_url
from ..errors import OwnstateError, Unauthenticated
from ..limits import Limits
from ..model import ApiKey
from ..server.auth import Caller, KeyCheck
from .tools import Arguments, Tool, ToolDefaults, plain, tools

with requires("mcp", "the MCP server"):
    import mcp_types as types
    from mcp.server import Server, ServerRequestContext
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from mcp.server.stdio import stdio_server
    from pydantic import TypeAdapter
    from starlette.datastructures import Headers
    from starlette.responses import JSONResponse
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["build_server", "http_app", "run_stdio", "stdio_caller"]

log = logging.getLogger("ownstate.mcp")

INSTRUCTIONS = (
    "ownstate keeps this application's agent state. Memory holds durable facts about "
    "subjects (user:8814, account:ACME): recall them before you answer, remember what "
    "stays true, forget what stopped being true. Sessions hold past conversations item by "
    "item; runs are agent runs in flight or waiting on a human. stores_list names the "
    "stores you may use.")
#: Where the caller of an HTTP request is kept in its ASGI scope.
_CALLER = "ownstate.caller"


def _result(payload: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    text = payload["message"] if error else json.dumps(payload, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=payload, is_error=error)


def _refusal(exc: OwnstateError) -> types.CallToolResult:
    return _result({"code": exc.code, "message": exc.message,
                    "details": plain(dict(sorted(exc.details.items())))},
                   error=True)


def _listing(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name, title=tool.title, description=tool.description,
        input_schema=tool.input_schema,
        output_schema=TypeAdapter(tool.output).json_schema(mode="serialization"),
        annotations=types.ToolAnnotations(
            title=tool.title, read_only_hint=tool.read_only,
            destructive_hint=tool.destructive, idempotent_hint=tool.read_only,
            open_world_hint=False))


def build_server(caller_of: Any, served: list[Tool]) -> Server[Any]:
    """The MCP server offering ``served``; ``caller_of(request_context)`` gives the caller a
    tool call acts for."""
    by_name = {tool.name: tool for tool in served}
    listing = types.ListToolsResult(tools=[_listing(tool) for tool in served])

    async def list_tools(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listing

    async def call_tool(ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            return _result({"code": "invalid_input", "details": {"field": "name"},
                            "message": f"no tool {params.name!r}; the tools are "
                                       f"{', '.join(sorted(by_name))}"}, error=True)
        try:
            caller: Caller = caller_of(ctx)
            arguments = Arguments(tool.name, tool.input_schema, params.arguments)
            return _result(await tool.handler(caller, arguments))
        except OwnstateError as exc:
            return _refusal(exc)
        except Exception:
            log.exception("tool %s failed unexpectedly", tool.name)
            return _result({"code": "internal_error", "details": {},
                            "message": "the tool failed unexpectedly"}, error=True)

    return Server("ownstate", version=__version__, instructions=INSTRUCTIONS,
                  get_tool_input_schema=lambda name: (by_name[name].input_schema
                                                      if name in by_name else None),
                  on_list_tools=list_tools, on_call_tool=call_tool)


# stdio -------------------------------------------------------------------------------------


def stdio_caller(client: AsyncClient, principal: str | None) -> Caller:
    """The caller a stdio server acts as: the tenant's admin, or ``principal`` with only its
    store grants."""
    key = ApiKey(key_id="stdio", tenant=client.tenant, principal=principal or "stdio",
                 admin=principal is None, create_time=datetime.now(UTC))
    return Caller(key, client)


async def run_stdio(url: str | None, *, tenant: str | None = None,
                    principal: str | None = None, defaults: ToolDefaults | None = None,
                    migrate: bool = True) -> None:
    """Serve MCP on this process's stdin and stdout until the client closes them."""
    async with await connect_async(url, tenant=tenant, migrate=migrate) as client:
        caller = stdio_caller(client, principal)
        server = build_server(lambda ctx: caller, tools(client.limits, defaults))
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


# streamable HTTP ---------------------------------------------------------------------------


class _KeyRequired:
    """Admits a request with a live API key of the tenant (the key check of ``ownstate
    serve``) and keeps its caller in the request's scope; answers any other with 401."""

    def __init__(self, app: ASGIApp, keys: KeyCheck, tenant: str) -> None:
        self.app = app
        self.keys = keys
        self.tenant = tenant

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            caller = await self.keys.caller(Headers(scope=scope).get("authorization"))
            if caller.tenant != self.tenant:
                raise Unauthenticated(UNKNOWN_KEY)  # exactly as for a key that is not there
        except OwnstateError as exc:
            body = _wire.problem_for(exc)
            headers = ({"www-authenticate": 'Bearer realm="ownstate"'}
                       if body["status"] == 401 else {})
            response = JSONResponse(body, status_code=int(str(body["status"])),
                                    media_type=_wire.PROBLEM_MEDIA_TYPE, headers=headers)
            await response(scope, receive, send)
            return
        scope[_CALLER] = caller
        # The SDK binds each MCP session to the credential that opened it.
        scope["user"] = AuthenticatedUser(AccessToken(
            token=caller.key.key_id, client_id=caller.key.key_id, scopes=[],
            subject=caller.principal))
        await self.app(scope, receive, send)


def _request_caller(ctx: ServerRequestContext[Any]) -> Caller:
    request = ctx.request
    caller = getattr(request, "scope", {}).get(_CALLER)
    if not isinstance(caller, Caller):
        raise Unauthenticated(UNKNOWN_KEY)
    return caller


def http_app(url: str | None = None, *, tenant: str = "default",
             defaults: ToolDefaults | None = None, limits: Limits | None = None,
             key_cache_seconds: float = 2.0, migrate: bool = True, host: str = "127.0.0.1",
             path: str = "/mcp") -> ASGIApp:
    """The ASGI app serving MCP over streamable HTTP at ``path``, on the backend for ``url``
    (opened at startup, closed at shutdown), for API keys of ``tenant``."""
    chosen = limits or Limits()
    backend = open_backend(resolve_url(url))
    keys = KeyCheck(backend, chosen, key_cache_seconds)
    server = build_server(_request_caller, tools(chosen, defaults))
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    inner_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(started: Any) -> AsyncIterator[None]:
        await backend.setup(migrate=migrate)
        try:
            async with inner_lifespan(started):
                yield
        finally:
            await backend.close()

    app.router.lifespan_context = lifespan
    return _KeyRequired(app, keys, tenant)
