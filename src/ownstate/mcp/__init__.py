"""The MCP server: memory, sessions and runs as tools for agents (``ownstate mcp``).

:mod:`.tools` defines the tools over the public async API; :mod:`.server` serves them with
the official MCP SDK over stdio and streamable HTTP; :mod:`.cli` is the command. Needs the
``mcp`` extra: ``pip install 'ownstate[mcp]'``. See docs/mcp.md.

It may touch only :mod:`.server`, and ``ownstate._extras`` to name the ``mcp`` extra, both
on first use of a name.
"""

from __future__ import annotations

from typing import Any

__all__ = ["http_app", "run_stdio"]


def http_app(url: str | None = None, **options: Any) -> Any:
    """The ASGI app serving MCP over streamable HTTP at ``/mcp`` for the API keys of one
    tenant; options as in :func:`ownstate.mcp.server.http_app`.

    Raises :class:`~ownstate.errors.MissingExtra` when the ``mcp`` extra is missing.
    """
    from .._extras import requires

    with requires("mcp", "the MCP server"):
        from .server import http_app as build

    return build(url, **options)


async def run_stdio(url: str | None = None, **options: Any) -> None:
    """Serve MCP on stdin and stdout; options as in :func:`ownstate.mcp.server.run_stdio`.

    Raises :class:`~ownstate.errors.MissingExtra` when the ``mcp`` extra is missing.
    """
    from .._extras import requires

    with requires("mcp", "the MCP server"):
        from .server import run_stdio as serve

    await serve(url, **options)
