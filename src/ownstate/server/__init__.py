"""The HTTP service: ``ownstate serve``, a thin shell over the public API.

:func:`create_app` builds the ASGI app (FastAPI) on one backend; every replica built on the
same database serves the same state, so a deployment runs as many as it needs behind a
load balancer. Needs the ``server`` extra: ``pip install 'ownstate[server]'``.

It may touch only :mod:`.app`, and ``ownstate._extras`` to name the ``server`` extra, both
when :func:`create_app` is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ServerSettings

__all__ = ["ServerSettings", "create_app"]


def create_app(url: str | None = None, **settings: Any) -> Any:
    """The ASGI app serving ``url`` (default: ``OWNSTATE_URL``, else
    ``sqlite:///ownstate.db``); keyword settings as in :class:`ServerSettings`.

    Raises :class:`~ownstate.errors.MissingExtra` when the ``server`` extra is missing.
    """
    from .._extras import requires

    with requires("server", "the HTTP server"):
        from .app import create_app as build

    return build(url, **settings)


def __getattr__(name: str) -> Any:
    if name == "ServerSettings":
        from .app import ServerSettings

        return ServerSettings
    raise AttributeError(name)
