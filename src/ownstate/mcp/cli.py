"""``ownstate mcp``: the CLI shell over :mod:`ownstate.mcp.server`.

It takes the global ``--url`` and ``--tenant`` like every other command and needs the
``mcp`` extra only when it runs (so ``ownstate --help`` imports no MCP SDK).

It may touch the public API, URL parsing (``ownstate.backends.resolve_url``), and, when the
command runs, this package's server and tools, the server's uvicorn settings
(``ownstate.server.serving``) and uvicorn; click throughout.
"""

from __future__ import annotations

import asyncio
import logging

import click

from ..api import connect_async
from ..backends import resolve_url

__all__ = ["mcp_command"]


async def _isolation_bypass(url: str | None, tenant: str, migrate: bool) -> str | None:
    async with await connect_async(url, tenant=tenant, migrate=migrate) as client:
        return await client.isolation_bypass()


@click.command("mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio",
              show_default=True,
              help="stdio: serve the process that started this one (an MCP client's "
                   "configuration); http: serve streamable HTTP at /mcp, with API keys.")
@click.option("--memory-store", metavar="NAME",
              help="The memory store the memory tools use when a call names none.")
@click.option("--session-store", metavar="NAME",
              help="The session store sessions_read uses when a call names none.")
@click.option("--principal", metavar="NAME",
              help="stdio: act as this principal, with only its store grants (default: "
                   "the tenant's admin). Over http each API key is its own principal.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="http: the interface to listen on.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8090,
              show_default=True, help="http: the port to listen on.")
@click.option("--key-cache", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="http: seconds a checked key is remembered.")
@click.option("--no-migrate", is_flag=True,
              help="Only verify the schema at start; never change it.")
@click.option("--allow-rls-bypass", is_flag=True,
              help="http: serve on a non-loopback address even though row-level security "
                   "does not bind the database role.")
@click.pass_context
def mcp_command(ctx: click.Context, transport: str, memory_store: str | None,
                session_store: str | None, principal: str | None, host: str, port: int,
                key_cache: float, no_migrate: bool, allow_rls_bypass: bool) -> None:
    """Serve memory, sessions and runs to agents over MCP (the Model Context Protocol).

    Tools: memory_remember, memory_recall, memory_search, memory_history, memory_explain,
    memory_forget, sessions_search, sessions_read, runs_outstanding, stores_list. See
    docs/mcp.md.
    """
    from .._extras import requires

    with requires("mcp", "the MCP server"):
        import uvicorn

        from ..server.serving import loopback, uvicorn_config
        from .server import http_app, run_stdio
        from .tools import ToolDefaults

    parent = ctx.find_root().obj
    url = getattr(parent, "url", None)
    given_tenant = getattr(parent, "tenant", None)
    defaults = ToolDefaults(memory_store=memory_store, session_store=session_store)
    if transport == "stdio":
        asyncio.run(run_stdio(url, tenant=given_tenant, principal=principal,
                              defaults=defaults, migrate=not no_migrate))
        return
    tenant = given_tenant or "default"
    if principal is not None:
        raise click.UsageError("--principal is for stdio; over http each API key is its "
                               "own principal")
    bypass = asyncio.run(_isolation_bypass(url, tenant, not no_migrate))
    if bypass is not None:
        if not allow_rls_bypass and not loopback(host):
            raise click.ClickException(
                f"{bypass}. Refusing to serve on {host}, which is not a loopback address; "
                "give --allow-rls-bypass to serve anyway")
        click.echo(f"Warning: {bypass}", err=True)
    app = http_app(url, tenant=tenant, defaults=defaults, key_cache_seconds=key_cache,
                   migrate=not no_migrate, host=host)
    click.echo(f"Serving MCP for tenant {tenant!r} of {resolve_url(url)} on "
               f"http://{host}:{port}/mcp (Ctrl-C stops).", err=True)
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.Server(uvicorn_config(app, host=host, port=port, log_level="info",
                                  log_config=None)).run()
