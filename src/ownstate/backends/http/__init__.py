"""The HTTP backend: an ownstate server, reached with an API key.

``http://host:8080`` or ``https://...``; the token comes from ``connect(url, token=...)``,
else the URL's password (``http://:TOKEN@host:8080``), else ``OWNSTATE_TOKEN``. Options:
``?timeout=SECONDS`` (default 30) and ``?replay_cache=ITEMS`` (default 20000; 0 turns it
off): the items of sessions replayed lately, so that replaying one again asks the server
only for what is new, checked against the server on every replay. The key decides the
tenant: a client on this backend acts for the key's tenant and principal, with exactly the
permissions the server grants it.
Validation runs in the client (so a bad call fails before a request is made) and again in
the server (which trusts no client).

It may touch the interface (``base``), its own parts, the replay cache
(``backends._replay``) and errors; it reaches the server only through ``_transport``, and
never a database or the server's code.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from ...errors import InvalidInput, SchemaVersion
from .._replay import ReplayCache
from ..base import Backend, Capability
from ._base import API
from ._transport import Transport
from .access import AccessOverHttp
from .assets import AssetsOverHttp
from .checkpoints import CheckpointsOverHttp
from .facts import FactsOverHttp
from .runs import RunsOverHttp
from .sessions import SessionsOverHttp

__all__ = ["API_VERSION", "HttpBackend"]

#: The version of the wire contract this client speaks; the server reports its own.
API_VERSION = 1
WHOAMI = f"{API}/whoami"


class HttpBackend(SessionsOverHttp, FactsOverHttp, RunsOverHttp, CheckpointsOverHttp,
                  AssetsOverHttp, AccessOverHttp, Backend):
    """Every port as requests to an ownstate server.

    Give it a URL and a token, or a ready ``httpx.AsyncClient`` (``client=``, with its
    ``base_url`` set; it is used and never closed). With ``inline=True`` (how the sync
    client opens a URL), calls to a plain ``http://`` server with no proxy block the
    calling thread and the backend :attr:`runs_inline`. Raises
    :class:`~ownstate.errors.InvalidInput` for a malformed URL, and
    :class:`~ownstate.errors.MissingExtra` without ``httpx``.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset(
        {Capability.MULTIPROCESS, Capability.PERSISTENT, Capability.TEXT_SEARCH,
         Capability.SERVER_RANKED})

    def __init__(self, url: str, token: str | None = None, *, client: Any = None,
                 inline: bool = False) -> None:
        parts = urlsplit(url)
        try:
            port = parts.port  # a malformed port raises ValueError
            valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            valid = False
        if not valid or parts.hostname is None:
            raise InvalidInput(f"an ownstate server URL looks like http://host:8080, "
                               f"not {url!r}", field="url")
        options = parse_qs(parts.query)
        try:
            timeout = float(options.get("timeout", ["30"])[-1])
            replay = int(options.get("replay_cache", ["20000"])[-1])
        except ValueError as exc:
            raise InvalidInput("URL options timeout= and replay_cache= must be numbers",
                               field="url") from exc
        self._replay = ReplayCache(replay) if replay > 0 else None
        token = token or (unquote(parts.password) if parts.password else None) \
            or os.environ.get("OWNSTATE_TOKEN")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        netloc = host if port is None else f"{host}:{port}"
        self.base_url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._http = Transport(self.base_url, token, timeout=timeout, client=client,
                               inline=inline)
        self.principal = None
        self.admin = False
        self._tenant: str | None = None

    @property
    def runs_inline(self) -> bool:
        return self._http.inline

    @property
    def bound_tenant(self) -> str | None:
        return self._tenant

    async def setup(self, *, migrate: bool) -> None:
        """Learn who the key belongs to; the server's schema is the server's business.

        Raises :class:`~ownstate.errors.Unauthenticated` for a missing, unknown or revoked
        key, :class:`~ownstate.errors.SchemaVersion` for a server speaking another version
        of the API, :class:`~ownstate.errors.BackendUnavailable` when it is unreachable.
        """
        body = await self._http.call("GET", WHOAMI)
        if body.get("api_version") != API_VERSION:
            raise SchemaVersion(
                f"the server speaks API version {body.get('api_version')}, this client "
                f"{API_VERSION}", found=body.get("api_version"), expected=API_VERSION)
        self._tenant = body["tenant"]
        self.principal = body["principal"]
        self.admin = bool(body["admin"])

    async def schema_status(self) -> tuple[int, int]:
        return (API_VERSION, API_VERSION)

    async def close(self) -> None:
        await self._http.close()
