"""A live ownstate server for tests: uvicorn on a free port, in a thread of this process.

Run the conformance suite over HTTP by giving each test a fresh tenant on one shared
server (tenants are isolated, so a fresh tenant is an empty database)::

    server = LiveServer("memory://shared-for-http-tests")
    token = server.mint_key(tenant="t-123", principal="tester", admin=True)
    client = ownstate.connect(server.url, token=token)

It may touch the public sync API and, when a server starts, the server (``ownstate.server``,
``ownstate.server.serving``) and uvicorn.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import ownstate

if TYPE_CHECKING:
    from ..server.serving import HttpBounds

__all__ = ["LiveServer", "problem"]


class LiveServer:
    """An ownstate server over ``backend_url``, listening on 127.0.0.1 until :meth:`stop`.

    ``settings`` go to :func:`ownstate.server.create_app`; ``bounds`` are those of
    ``ownstate serve`` (:class:`~ownstate.server.serving.HttpBounds`, its defaults when
    None). Raises RuntimeError when the
    server does not start within ``start_timeout`` seconds.
    """

    def __init__(self, backend_url: str, *, start_timeout: float = 20.0,
                 bounds: HttpBounds | None = None, **settings: Any) -> None:
        import uvicorn

        from ..server import create_app
        from ..server.serving import uvicorn_config

        self.backend_url = backend_url
        self.app = create_app(backend_url, **settings)
        # The configuration ``ownstate serve`` runs with, so tests see what production does.
        config = uvicorn_config(self.app, host="127.0.0.1", port=0, bounds=bounds,
                                log_level="warning", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="ownstate-test-server",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the ownstate test server did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def mint_key(self, *, tenant: str, principal: str, admin: bool = False) -> str:
        """A new API key's token, made directly in the server's database."""
        with ownstate.connect(self.backend_url, tenant=tenant) as direct:
            _, token = direct.api_keys.create(principal, admin=admin)
        return token

    def url_with(self, token: str) -> str:
        """The server's URL carrying ``token`` as its password, for code that takes a URL."""
        return self.url.replace("http://", f"http://:{token}@", 1)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """The problem+json body of ``response`` (an ``httpx.Response``), asserted to be one:
    the status, the media type, every member and the stable ``code``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"type", "title", "status", "code", "detail", "details"}, body
    assert (body["status"], body["code"]) == (status, code), body
    assert body["type"] == f"urn:ownstate:error:{code}"
    return body
