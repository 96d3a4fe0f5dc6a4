"""Assets over HTTP: raw bodies bounded while they stream, permissions per level, and
not-found answers that say nothing about what another principal holds."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import ownstate
from ownstate.errors import AssetNotFound, LimitExceeded
from ownstate.limits import Limits
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

ASSETS = "/api/2.0/agents/assets"
SMALL = 1024


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://assets-{uuid.uuid4().hex}", key_cache_seconds=0)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def small_server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://small-assets-{uuid.uuid4().hex}",
                      limits=Limits(max_asset_bytes=SMALL))
    yield live
    live.stop()


@dataclass
class Tenant:
    """A fresh tenant on a server: its admin token, a direct client on the server's
    database, a store with one session, and keys for principals with each grant."""

    server: LiveServer
    name: str
    admin: str
    direct: ownstate.Client
    store: str = "pics"
    session_id: str = "s1"

    def key(self, principal: str, grant: str | None = None) -> str:
        if grant is not None:
            self.direct.session_stores.get(self.store).grant_permission(principal, grant)
        return self.server.mint_key(tenant=self.name, principal=principal)

    def http(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.server.url,
                            headers={"authorization": f"Bearer {token}"}, timeout=30)

    def stored(self) -> list[tuple[str, bytes]]:
        """Every asset of the session with its bytes, read directly."""
        session = self.direct.session_stores.get(self.store).get(self.session_id)
        return [(ref.sha256, self.direct.assets.get(ref.asset_id))
                for ref in self.direct.assets.list(session)]


def _tenant(server: LiveServer) -> Iterator[Tenant]:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = server.mint_key(tenant=name, principal="admin", admin=True)
    direct = ownstate.connect(server.backend_url, tenant=name)
    direct.session_stores.create("pics").add(actor_id="a", session_id="s1")
    yield Tenant(server, name, admin, direct)
    direct.close()


@pytest.fixture
def tenant(server: LiveServer) -> Iterator[Tenant]:
    yield from _tenant(server)


@pytest.fixture
def small(small_server: LiveServer) -> Iterator[Tenant]:
    yield from _tenant(small_server)


def _put(http: httpx.Client, content: Any, media_type: str = "application/octet-stream",
         **params: str) -> httpx.Response:
    return http.post(ASSETS, params={"store": "pics", "session_id": "s1", **params},
                     content=content, headers={"content-type": media_type})


# the size bound ----------------------------------------------------------------------


def test_the_bound_holds_for_declared_and_streamed_bodies(small: Tenant) -> None:
    with small.http(small.admin) as http:
        assert _put(http, b"x" * SMALL).status_code == 200
        kept = small.stored()
        declared = _put(http, b"y" * (SMALL + 1))
        problem = _problem(declared, 413, "limit_exceeded")
        assert problem["details"]["field"] == "request_body"
        assert problem["details"]["limit"] == SMALL

        def pieces() -> Iterator[bytes]:
            for _ in range(8):
                yield b"z" * 512

        _problem(_put(http, pieces()), 413, "limit_exceeded")
    assert small.stored() == kept


def test_a_declared_length_above_the_bound_is_refused_before_the_body(small: Tenant) -> None:
    # The body is never sent: an answer proves the server did not wait to read it.
    host, port = small.server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest("POST", f"{ASSETS}?store=pics&session_id=s1")
        conn.putheader("authorization", f"Bearer {small.admin}")
        conn.putheader("content-type", "application/octet-stream")
        conn.putheader("content-length", str(10**12))
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413
        assert json.loads(response.read())["details"]["actual"] == 10**12
    finally:
        conn.close()
    assert small.stored() == []


def test_the_client_reports_the_servers_bound(small: Tenant) -> None:
    with ownstate.connect(small.server.url, token=small.admin) as client:
        session = client.session_stores.session("pics", "s1")
        with pytest.raises(LimitExceeded) as err:
            client.assets.put(b"q" * (2 * SMALL), "text/plain", session=session)
    assert (err.value.field, err.value.limit) == ("request_body", SMALL)
    assert small.stored() == []


# round trips -------------------------------------------------------------------------


def test_megabytes_round_trip_streamed(tenant: Tenant) -> None:
    data = os.urandom(5 * 1024 * 1024 + 17)
    digest = hashlib.sha256(data).hexdigest()
    with ownstate.connect(tenant.server.url, token=tenant.admin) as client:
        session = client.session_stores.session("pics", "s1")
        ref = client.assets.put(data, "video/mp4", session=session, metadata={"take": "2"})
        assert (ref.sha256, ref.size, ref.metadata) == (digest, len(data), {"take": "2"})
        assert hashlib.sha256(client.assets.get(ref.asset_id)).hexdigest() == digest
        assert client.assets.list(session) == [ref]
    with tenant.http(tenant.admin) as http:
        received = hashlib.sha256()
        with http.stream("GET", f"{ASSETS}/{ref.asset_id}/content") as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "video/mp4"
            assert response.headers["etag"] == f'"{digest}"'
            assert response.headers["content-length"] == str(len(data))
            assert response.headers["x-content-type-options"] == "nosniff"
            for chunk in response.iter_bytes():
                received.update(chunk)
        assert received.hexdigest() == digest

        def upload() -> Iterator[bytes]:
            for start in range(0, len(data), 64 * 1024):
                yield data[::-1][start:start + 64 * 1024]

        chunked = _put(http, upload(), "application/octet-stream",
                       sha256=hashlib.sha256(data[::-1]).hexdigest())
        assert chunked.status_code == 200
        assert chunked.json()["size"] == len(data)


def test_a_current_copy_is_not_sent_again(tenant: Tenant) -> None:
    with tenant.http(tenant.admin) as http:
        ref = _put(http, b"cached", "text/plain").json()
        content = f"{ASSETS}/{ref['asset_id']}/content"
        etag = http.get(content).headers["etag"]
        unchanged = http.get(content, headers={"if-none-match": etag})
        assert (unchanged.status_code, unchanged.content) == (304, b"")
        assert http.get(content, headers={"if-none-match": '"other"'}).content == b"cached"


def test_ids_no_path_can_carry_are_unknown(tenant: Tenant) -> None:
    with ownstate.connect(tenant.server.url, token=tenant.admin) as client:
        for odd in ("..", ".", "a/b", "x?y#z%2F", "ünï"):
            with pytest.raises(AssetNotFound) as err:
                client.assets.get_ref(odd)
            assert err.value.asset_id == odd


# refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(("params", "headers", "field", "status", "code"), [
    ({}, {"content-type": "image/png; charset=x"}, "media_type", 400, "invalid_input"),
    ({}, {"content-type": "png"}, "media_type", 400, "invalid_input"),
    ({}, {"x-ownstate-metadata": "{not json"}, "metadata", 400, "invalid_input"),
    ({}, {"x-ownstate-metadata": '["k"]'}, "metadata", 400, "invalid_input"),
    ({}, {"x-ownstate-metadata": '{"k": 1}'}, "metadata", 400, "invalid_input"),
    ({"sha256": "0" * 64}, {}, "sha256", 400, "invalid_input"),
    ({"sha256": "nothex"}, {}, "sha256", 400, "invalid_input"),
    ({"session_id": None}, {}, "session_id", 400, "invalid_input"),
    ({"session_id": "nobody"}, {}, None, 404, "session_not_found"),
])
def test_bad_uploads_change_nothing(tenant: Tenant, params: dict[str, Any],
                                    headers: dict[str, str], field: str | None,
                                    status: int, code: str) -> None:
    with tenant.http(tenant.admin) as http:
        assert _put(http, b"kept").status_code == 200
        before = tenant.stored()
        query = {k: v for k, v in {"store": "pics", "session_id": "s1", **params}.items()
                 if v is not None}
        sent = {"content-type": "text/plain", **headers}
        response = http.post(ASSETS, params=query, content=b"new", headers=sent)
        problem = _problem(response, status, code)
        if field is not None:
            assert problem["details"]["field"] == field
    assert tenant.stored() == before


def test_an_upload_needs_a_media_type(tenant: Tenant) -> None:
    with tenant.http(tenant.admin) as http:
        response = http.post(ASSETS, params={"store": "pics", "session_id": "s1"},
                             content=b"bare")
    assert _problem(response, 400, "invalid_input")["details"]["field"] == "media_type"
    assert tenant.stored() == []


# permissions -------------------------------------------------------------------------


def test_permissions_per_level(tenant: Tenant) -> None:
    reader = tenant.key("reader", "READ")
    writer = tenant.key("writer", "WRITE")
    stranger = tenant.key("stranger")
    with tenant.http(stranger) as http:
        _problem(_put(http, b"from a stranger"), 404, "store_not_found")
    with tenant.http(reader) as http:
        _problem(_put(http, b"from a reader"), 403, "permission_denied")
    with tenant.http(writer) as http:
        made = _put(http, b"from a writer", "text/plain")
        assert made.status_code == 200
        ref = made.json()
        loose = http.post(ASSETS, content=b"loose", headers={"content-type": "text/plain"})
        assert loose.status_code == 403
    assert [data for _, data in tenant.stored()] == [b"from a writer"]

    one = f"{ASSETS}/{ref['asset_id']}"
    listing = "/api/2.0/agents/session-stores/pics/sessions/s1/assets"
    with tenant.http(reader) as http:
        assert http.get(one).json() == ref
        assert http.get(f"{one}/content").content == b"from a writer"
        assert http.get(listing).json() == {"assets": [ref]}
        _problem(http.delete(one), 403, "permission_denied")
    with tenant.http(stranger) as http:
        assert [http.get(one).status_code, http.get(f"{one}/content").status_code,
                http.delete(one).status_code] == [404, 404, 404]
        _problem(http.get(listing), 404, "store_not_found")
    assert [data for _, data in tenant.stored()] == [b"from a writer"]
    with tenant.http(writer) as http:
        assert http.delete(one).status_code == 200
    assert tenant.stored() == []


def test_assets_of_nobody_need_an_admin_key(tenant: Tenant) -> None:
    manager = tenant.key("manager", "MANAGE")
    with tenant.http(tenant.admin) as http:
        made = http.post(ASSETS, content=b"logo", headers={"content-type": "image/svg+xml"})
        assert made.status_code == 200
        ref = made.json()
        assert (ref["store"], ref["session_id"]) == (None, None)
        assert http.get(f"{ASSETS}/{ref['asset_id']}/content").content == b"logo"
    with tenant.http(manager) as http:
        _problem(http.get(f"{ASSETS}/{ref['asset_id']}"), 404, "asset_not_found")
        assert http.delete(f"{ASSETS}/{ref['asset_id']}").status_code == 404
    assert tenant.direct.assets.get(ref["asset_id"]) == b"logo"


def test_unknown_and_unseen_assets_answer_alike(tenant: Tenant, server: LiveServer) -> None:
    stranger = tenant.key("stranger")
    other_tenant = server.mint_key(tenant=f"o-{uuid.uuid4().hex[:12]}", principal="admin",
                                   admin=True)
    with tenant.http(tenant.admin) as http:
        owned = _put(http, b"private").json()["asset_id"]
        loose = http.post(ASSETS, content=b"loose",
                          headers={"content-type": "text/plain"}).json()["asset_id"]

    def answers(token: str, asset_id: str) -> list[tuple[int, str, bytes]]:
        with tenant.http(token) as http:
            found = [http.get(f"{ASSETS}/{asset_id}"),
                     http.get(f"{ASSETS}/{asset_id}/content"),
                     http.delete(f"{ASSETS}/{asset_id}")]
        return [(r.status_code, r.headers["content-type"], r.content) for r in found]

    unseen = {(token, asset_id): answers(token, asset_id)
              for token in (stranger, other_tenant) for asset_id in (owned, loose)}
    assert tenant.direct.assets.get(owned) == b"private"
    tenant.direct.assets.delete(owned)
    tenant.direct.assets.delete(loose)
    for (token, asset_id), before in unseen.items():
        assert before[0][0] == 404
        assert answers(token, asset_id) == before
