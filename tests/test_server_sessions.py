"""Sessions and items over HTTP: problem bodies, bounds that refuse a request and leave
what is stored alone, permissions per level, not-found answers that say nothing about
what another principal or tenant holds, and both ways of paging a listing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import ownstate
from ownstate.errors import InvalidInput, SessionNotFound
from ownstate.limits import Limits
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

AGENTS = "/api/2.0/agents"
STORE = "chats"
SESSIONS = f"{AGENTS}/session-stores/{STORE}/sessions"
S1 = f"{SESSIONS}/s1"
ITEMS = f"{S1}/items"
# Small bounds, so that refusing a request over them costs little to send.
LIMITS = Limits(max_item_bytes=2048, max_batch_items=5, max_batch_bytes=4096)


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://server-sessions-{uuid.uuid4().hex}", key_cache_seconds=0,
                      limits=LIMITS)
    yield live
    live.stop()


@dataclass
class Tenant:
    """A fresh tenant on the server: its admin token, a direct client on the server's
    database, and the store ``chats`` holding session ``s1`` with two items."""

    server: LiveServer
    name: str
    admin: str
    direct: ownstate.Client

    def key(self, principal: str, grant: str | None = None) -> str:
        if grant is not None:
            self.direct.session_stores.get(STORE).grant_permission(principal, grant)
        return self.server.mint_key(tenant=self.name, principal=principal)

    def http(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.server.url,
                            headers={"authorization": f"Bearer {token}"}, timeout=30)

    def stored(self) -> Any:
        """Everything the store holds, read directly: each session's record and items."""
        found = self.direct.session_stores.get(STORE)
        return [(s.record, [(i.item_id, i.seq, i.data, i.format)
                            for i in s.list_items(order_by="create_time asc")])
                for s in sorted(found.list_sessions(), key=lambda s: s.session_id)]


def _tenant(server: LiveServer) -> Iterator[Tenant]:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin = server.mint_key(tenant=name, principal="admin", admin=True)
    direct = ownstate.connect(server.backend_url, tenant=name, limits=LIMITS)
    session = direct.session_stores.create(STORE).add(actor_id="alice", session_id="s1",
                                                      metadata={"channel": "web"})
    session.append_items([{"role": "user", "content": "hello"},
                          {"role": "assistant", "content": "hi"}])
    yield Tenant(server, name, admin, direct)
    direct.close()


@pytest.fixture
def tenant(server: LiveServer) -> Iterator[Tenant]:
    yield from _tenant(server)


@pytest.fixture
def other(server: LiveServer) -> Iterator[Tenant]:
    yield from _tenant(server)


@pytest.fixture
def admin(tenant: Tenant) -> Iterator[httpx.Client]:
    with tenant.http(tenant.admin) as http:
        yield http


# the handle every session route acts through ---------------------------------------------


def test_a_session_handle_made_without_a_read(client: ownstate.Client) -> None:
    """``session_stores.session()`` reads nothing (on every backend, this one included):
    operations act on what is stored; the record waits for refresh()."""
    client.session_stores.create("handles").add(actor_id="alice", session_id="s1")
    handle = client.session_stores.session("handles", "s1")
    assert (handle.store, handle.session_id) == ("handles", "s1")
    with pytest.raises(InvalidInput):
        _ = handle.actor_id
    assert [i.seq for i in handle.append_items([{"a": 1}])] == [1]
    assert handle.refresh().actor_id == "alice"
    assert handle.record.session_id == "s1"
    for ghost in (client.session_stores.session("handles", "nope"),
                  client.session_stores.session("no-such-store", "s1")):
        with pytest.raises(SessionNotFound):
            ghost.append_items([{"a": 1}])
        with pytest.raises(SessionNotFound):
            ghost.list_items_page()
    for store, session_id in (("BAD", "s1"), ("handles", ""), ("handles", None)):
        with pytest.raises(InvalidInput):
            client.session_stores.session(store, session_id)  # type: ignore[arg-type]


# shapes ----------------------------------------------------------------------------------


def test_a_turn_in_the_databricks_shape(admin: httpx.Client) -> None:
    made = admin.post(SESSIONS, json={"actor_id": "bob", "session_id": "case-456",
                                      "metadata": {"channel": "web"}})
    assert made.status_code == 200, made.text
    session = made.json()
    assert session["name"] == f"session-stores/{STORE}/sessions/case-456"
    assert (session["actor_id"], session["root_session_id"]) == ("bob", "case-456")
    assert session["parent_session_id"] is None
    appended = admin.post(f"{SESSIONS}/case-456/items:append", json={
        "items": [{"data": {"role": "user", "content": "I need help"}},
                  {"data": {"note": 1}, "format": "json"}]})
    assert appended.status_code == 200, appended.text
    items = appended.json()["session_items"]
    assert [(i["seq"], i["data"], i["format"], i["role"]) for i in items] == [
        (1, {"role": "user", "content": "I need help"}, "openai.responses", "user"),
        (2, {"note": 1}, "json", None)]
    listed = admin.get(f"{SESSIONS}/case-456/items", params={"order_by": "create_time asc"})
    assert [i["item_id"] for i in listed.json()["session_items"]] == [
        i["item_id"] for i in items]
    assert listed.json()["next_page_token"] is None
    one = admin.get(f"{SESSIONS}/case-456/items/{items[0]['item_id']}")
    assert one.json() == items[0]
    forked = admin.post(f"{SESSIONS}:fork", json={"source_session_id": "case-456",
                                                   "up_to_item_id": items[0]["item_id"],
                                                   "session_id": "case-456-b"})
    assert forked.status_code == 200, forked.text
    child = forked.json()["session"]
    assert (child["parent_session_id"], child["actor_id"]) == ("case-456", "bob")
    history = admin.get(f"{SESSIONS}/case-456-b/history",
                        params={"as_format": "openai.responses"})
    assert history.json() == {"as_format": "openai.responses",
                              "items": [{"role": "user", "content": "I need help"}],
                              "next_page_token": None}
    popped = admin.post(f"{SESSIONS}/case-456/items:pop")
    assert popped.json()["session_item"]["data"] == {"note": 1}
    assert admin.post(f"{SESSIONS}/case-456/items:clear").json() == {"items_cleared": 1}
    assert admin.post(f"{SESSIONS}/case-456/items:pop").json() == {"session_item": None}
    patched = admin.patch(f"{SESSIONS}/case-456",
                          json={"metadata": {"channel": None, "tier": "gold"}})
    assert patched.json()["metadata"] == {"tier": "gold"}
    refused = admin.delete(f"{SESSIONS}/case-456")
    assert _problem(refused, 409, "has_children")["details"]["children"] == ["case-456-b"]
    deleted = admin.delete(f"{SESSIONS}/case-456", params={"force": "true"})
    assert deleted.json() == {"sessions_deleted": 2}


def test_a_missing_session_is_a_problem_built_from_its_ids(admin: httpx.Client) -> None:
    body = _problem(admin.get(f"{SESSIONS}/nope"), 404, "session_not_found")
    assert body["details"] == {"store": STORE, "session_id": "nope"}
    assert body["detail"] == f"no session with session_id='nope', store='{STORE}'"
    item = _problem(admin.get(f"{ITEMS}/itm_missing"), 404, "item_not_found")
    assert item["details"] == {"session_id": "s1", "item_id": "itm_missing"}
    # a session of a store that does not exist is a missing session, as in the library
    gone = _problem(admin.get(f"{AGENTS}/session-stores/nostore/sessions/s1/items"), 404,
                    "session_not_found")
    assert gone["details"] == {"store": "nostore", "session_id": "s1"}
    for params in ({}, {"limit": 5}):
        listing = _problem(admin.get(f"{AGENTS}/session-stores/nostore/sessions",
                                     params=params), 404, "store_not_found")
        assert listing["details"] == {"store": "nostore"}


def test_a_method_a_route_does_not_serve_is_refused_naming_those_it_does(
        admin: httpx.Client) -> None:
    for method, path, allowed in (("PUT", f"{ITEMS}:append", "POST"),
                                  ("DELETE", ITEMS, "GET"),
                                  ("PUT", S1, "DELETE, GET, PATCH"),
                                  # /runs/{run_id} would take "r1:await" too: the path is
                                  # /runs/{run_id}:await's, which serves POST alone
                                  ("OPTIONS", f"{AGENTS}/runs/r1:await", "POST")):
        refused = admin.request(method, path)
        assert _problem(refused, 405, "invalid_input")["details"] == {"field": "method"}
        assert refused.headers["allow"] == allowed
    assert _problem(admin.get(f"{AGENTS}/no-such-thing"), 404, "not_found")


# bounds: refused, and nothing stored changes -------------------------------------------------


def _big(size: int) -> dict[str, str]:
    return {"text": "x" * (size - len('{"text":""}'))}


@pytest.mark.parametrize(("body", "status", "code"), [
    pytest.param({"items": [{"data": _big(2049)}]}, 400, "limit_exceeded", id="item-too-big"),
    pytest.param({"items": [{"data": {"n": i}} for i in range(6)]}, 400, "limit_exceeded",
                 id="too-many-items"),
    pytest.param({"items": [{"data": _big(2000)}, {"data": _big(2000)},
                            {"data": _big(200)}]}, 400, "limit_exceeded",
                 id="batch-too-big"),
    pytest.param({"items": [{"data": _big(2000)}] * 600}, 413, "limit_exceeded",
                 id="body-over-the-server-bound"),
    pytest.param({"items": []}, 400, "invalid_input", id="no-items"),
    pytest.param({"items": [{"data": {"a": 1}}], "extra": 1}, 400, "invalid_input",
                 id="unknown-field"),
    pytest.param({"items": [{"data": {"a": 1}, "role": "user"}]}, 400, "invalid_input",
                 id="unknown-item-field"),
    pytest.param({"items": [{"data": [1, 2]}]}, 400, "invalid_input", id="data-not-object"),
    pytest.param({"items": [{"data": "text"}]}, 400, "invalid_input", id="data-a-string"),
    pytest.param({"items": {"data": {}}}, 400, "invalid_input", id="items-not-a-list"),
    pytest.param({"items": [{"data": {"a": 1}, "format": 7}]}, 400, "invalid_input",
                 id="format-not-text"),
    pytest.param({"items": [{"data": {"a": 1}, "format": "Not A Format"}]}, 400,
                 "invalid_input", id="format-malformed"),
    pytest.param({"items": [{"data": {"a": 1}}], "idempotency_key": 5}, 400,
                 "invalid_input", id="key-not-text"),
    pytest.param({"items": [{"data": {"a": 1}}], "idempotency_key": "k" * 257}, 400,
                 "limit_exceeded", id="key-too-long"),
    pytest.param({"items": [{"data": {"a": 1}}], "idempotency_key": "a\nb"}, 400,
                 "invalid_input", id="key-with-control-char"),
    pytest.param({"items": [{"data": {"role": "user", "content": "x"}, "format": "json"},
                            {"data": {"a": 1}, "format": "langchain"}]}, 400,
                 "invalid_input", id="mixed-formats"),
    pytest.param({}, 400, "invalid_input", id="empty-body"),
])
def test_a_refused_append_stores_nothing(tenant: Tenant, admin: httpx.Client,
                                         body: dict[str, Any], status: int,
                                         code: str) -> None:
    kept = tenant.stored()
    _problem(admin.post(f"{ITEMS}:append", json=body), status, code)
    assert tenant.stored() == kept


@pytest.mark.parametrize("raw", [
    pytest.param(b'{"items": [{"data": {"a": NaN}}]}', id="nan"),
    pytest.param(b'{"items": [{"data": {"a": Infinity}}]}', id="infinity"),
    pytest.param(b'{"items": [{"data": {"a": 1e400}}]}', id="float-overflow"),
    pytest.param(b'{"items": [{"data": {"a": ' + b"9" * 5000 + b"}}]}", id="huge-int"),
    pytest.param(b'{"items": [{"data": {"a": "\\ud800"}}]}', id="lone-surrogate"),
    pytest.param(b'{"items": [', id="truncated"),
    pytest.param(b"\xff\xfe", id="not-utf8"),
    pytest.param(b"null", id="null"),
])
def test_json_that_cannot_be_stored_is_refused(tenant: Tenant, admin: httpx.Client,
                                               raw: bytes) -> None:
    kept = tenant.stored()
    response = admin.post(f"{ITEMS}:append", content=raw,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert tenant.stored() == kept


def test_items_in_their_inferred_formats_may_be_mixed(tenant: Tenant,
                                                      admin: httpx.Client) -> None:
    response = admin.post(f"{ITEMS}:append", json={"items": [
        {"data": {"role": "user", "content": "x"}, "format": "openai.responses"},
        {"data": {"a": 1}, "format": "json"},
        {"data": {"b": 2}}]})
    assert response.status_code == 200, response.text
    assert [i["format"] for i in response.json()["session_items"]] == [
        "openai.responses", "json", "json"]


def test_an_idempotent_retry_over_http_writes_once(tenant: Tenant,
                                                   admin: httpx.Client) -> None:
    body = {"items": [{"data": {"n": 1}}], "idempotency_key": "turn-7"}
    first = admin.post(f"{ITEMS}:append", json=body).json()
    kept = tenant.stored()
    assert admin.post(f"{ITEMS}:append", json=body).json() == first
    assert tenant.stored() == kept
    changed = {"items": [{"data": {"n": 2}}], "idempotency_key": "turn-7"}
    _problem(admin.post(f"{ITEMS}:append", json=changed), 409, "idempotency_key_reused")
    assert tenant.stored() == kept


@pytest.mark.parametrize(("method", "path", "body", "code"), [
    ("POST", SESSIONS, {"session_id": "s9"}, "invalid_input"),
    ("POST", SESSIONS, {"actor_id": ""}, "invalid_input"),
    ("POST", SESSIONS, {"actor_id": "   "}, "invalid_input"),
    ("POST", SESSIONS, {"actor_id": "a" * 257}, "limit_exceeded"),
    ("POST", SESSIONS, {"actor_id": 12}, "invalid_input"),
    ("POST", SESSIONS, {"actor_id": "a", "session_id": "_leading"}, "invalid_input"),
    ("POST", SESSIONS, {"actor_id": "a", "session_id": "s1"}, "already_exists"),
    ("POST", SESSIONS, {"actor_id": "a", "metadata": {"k": 1}}, "invalid_input"),
    ("POST", SESSIONS, {"actor_id": "a", "metadata": {"bad key": "v"}}, "invalid_input"),
    ("POST", SESSIONS, {"actor_id": "a", "metadata": {f"k{i}": "v" for i in range(33)}},
     "limit_exceeded"),
    ("POST", SESSIONS, {"actor_id": "a", "owner": "me"}, "invalid_input"),
    ("PATCH", S1, {"metadata": {f"k{i}": "v" for i in range(32)}}, "limit_exceeded"),
    ("PATCH", S1, {"metadata": {"k": 3}}, "invalid_input"),
    ("PATCH", S1, {"metadata": {"channel": "x" * 257}}, "limit_exceeded"),
    ("PATCH", S1, {"actor_id": "mallory"}, "invalid_input"),
    ("PATCH", S1, {}, "invalid_input"),
    ("POST", f"{SESSIONS}:fork", {"source_session_id": "s1", "session_id": "s1"},
     "already_exists"),
    ("POST", f"{SESSIONS}:fork", {"source_session_id": "s1", "up_to_item_id": "itm_x"},
     "item_not_found"),
    ("POST", f"{SESSIONS}:fork", {"source_session_id": "s1", "actor_id": "b"},
     "invalid_input"),
    ("POST", f"{SESSIONS}:fork", {}, "invalid_input"),
])
def test_a_refused_session_change_changes_nothing(tenant: Tenant, admin: httpx.Client,
                                                  method: str, path: str,
                                                  body: dict[str, Any], code: str) -> None:
    kept = tenant.stored()
    response = admin.request(method, path, json=body)
    assert response.status_code in (400, 404, 409), response.text
    _problem(response, response.status_code, code)
    assert tenant.stored() == kept


def test_path_ids_are_judged_as_the_library_judges_them(tenant: Tenant,
                                                       admin: httpx.Client) -> None:
    kept = tenant.stored()
    # a malformed store name is invalid input, as for session_stores.get()
    for path in (f"{AGENTS}/session-stores/NO/sessions/s1/items",
                 f"{AGENTS}/session-stores/{'a' * 56}/sessions"):
        _problem(admin.get(path), 400, "invalid_input")
    # a session id no session can have is simply not found, as for store.get()
    for session_id in ("x" * 200, "-lead", "with space", "ünï"):
        path = f"{SESSIONS}/{session_id}/items"
        _problem(admin.get(path), 404, "session_not_found")
        _problem(admin.post(f"{path}:append", json={"items": [{"data": {}}]}), 404,
                 "session_not_found")
    _problem(admin.get(f"{ITEMS}/not an item id"), 404, "item_not_found")
    # control characters never reach the database
    for path in (f"{SESSIONS}/a%00b/items", f"{SESSIONS}/a%0Ab", f"{ITEMS}/i%7F",
                 f"{SESSIONS}/{'x' * 1025}"):
        _problem(admin.get(path), 400, "invalid_input")
    _problem(admin.post(f"{SESSIONS}:fork", json={"source_session_id": "s\u0000"}), 400,
             "invalid_input")
    assert tenant.stored() == kept


# listings ----------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [
    {"page_size": 0}, {"page_size": 1001}, {"page_size": "ten"}, {"page_size": 2**70},
    {"page_token": "not-a-token"}, {"page_token": ""}, {"page_token": "x" * 3000},
    {"order_by": "seq desc"}, {"order_by": "create_time sideways"},
    {"limit": 0}, {"limit": 1002}, {"limit": 5, "page_size": 5},
    {"limit": 5, "page_token": "abc"}, {"after_seq": -1}, {"after_seq": 2**63},
    {"after_seq": 1.5},
])
def test_bad_item_listings_are_refused(admin: httpx.Client, params: dict[str, Any]) -> None:
    response = admin.get(ITEMS, params=params)
    assert response.status_code == 400, response.text
    assert response.json()["code"] in ("invalid_input", "limit_exceeded")


def test_a_page_token_belongs_to_its_listing(admin: httpx.Client) -> None:
    admin.post(f"{ITEMS}:append", json={"items": [{"data": {"n": n}} for n in range(3)]})
    token = admin.get(ITEMS, params={"page_size": 1}).json()["next_page_token"]
    assert token is not None
    reordered = admin.get(ITEMS, params={"page_size": 1, "page_token": token,
                                         "order_by": "create_time asc"})
    assert _problem(reordered, 400, "invalid_input")["details"]["field"] == "page_token"
    elsewhere = admin.get(SESSIONS, params={"page_size": 1, "page_token": token})
    _problem(elsewhere, 400, "invalid_input")


def test_items_page_by_token_or_by_keyset(admin: httpx.Client) -> None:
    admin.post(f"{ITEMS}:append", json={"items": [{"data": {"n": n}} for n in range(5)]})
    seen, token = [], None
    while True:
        page = admin.get(ITEMS, params={"page_size": 3, "order_by": "create_time asc",
                                        **({"page_token": token} if token else {})}).json()
        seen += [i["seq"] for i in page["session_items"]]
        token = page["next_page_token"]
        if token is None:
            break
    assert seen == [1, 2, 3, 4, 5, 6, 7]
    keyset = admin.get(ITEMS, params={"limit": 3, "after_seq": 2,
                                      "order_by": "create_time asc"}).json()
    assert [i["seq"] for i in keyset["session_items"]] == [3, 4, 5]
    assert keyset["next_page_token"] is None
    newest = admin.get(ITEMS, params={"limit": 2, "after_seq": 7}).json()
    assert [i["seq"] for i in newest["session_items"]] == [6, 5]
    # after_seq also starts a page in token mode, as the library's list_items_page does
    paged = admin.get(ITEMS, params={"page_size": 2, "after_seq": 5}).json()
    assert [i["seq"] for i in paged["session_items"]] == [4, 3]
    assert paged["next_page_token"] is not None


def test_sessions_page_by_token_or_by_keyset(tenant: Tenant, admin: httpx.Client) -> None:
    for n in range(5):
        admin.post(SESSIONS, json={"actor_id": "bob" if n % 2 else "carol",
                                   "session_id": f"k{n}", "metadata": {"n": str(n)}})
    everyone = ["k4", "k3", "k2", "k1", "k0", "s1"]
    seen, token = [], None
    while True:
        page = admin.get(SESSIONS, params={"page_size": 4,
                                           **({"page_token": token} if token else {})}).json()
        assert "next_after" not in page or page["next_after"] is None
        seen += [s["session_id"] for s in page["sessions"]]
        token = page["next_page_token"]
        if token is None:
            break
    assert seen == everyone
    seen, after = [], None
    while True:
        page = admin.get(SESSIONS, params={"limit": 4, **({"after": after} if after else {})}
                         ).json()
        assert page["next_page_token"] is None
        seen += [s["session_id"] for s in page["sessions"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == everyone
    by_activity = admin.get(SESSIONS, params={"limit": 2,
                                              "order_by": "last_activity_time asc"}).json()
    assert len(json.loads(by_activity["next_after"])) == 2
    rest = admin.get(SESSIONS, params={"limit": 10, "after": by_activity["next_after"],
                                       "order_by": "last_activity_time asc"}).json()
    assert len(by_activity["sessions"]) + len(rest["sessions"]) == 6


@pytest.mark.parametrize(("text", "expected"), [
    ('actor_id = "bob"', ["k1", "k3"]),
    ('metadata.n = "2"', ["k2"]),
    ('actor_id = "carol" AND metadata.n = "4"', ["k4"]),
    ('actor_id="carol" and metadata.n="0"', ["k0"]),
    ('metadata.n = "\\u0032"', ["k2"]),
    ('actor_id = "nobody"', []),
])
def test_sessions_filter_by_actor_and_labels(admin: httpx.Client, text: str,
                                             expected: list[str]) -> None:
    for n in range(5):
        admin.post(SESSIONS, json={"actor_id": "bob" if n % 2 else "carol",
                                   "session_id": f"k{n}", "metadata": {"n": str(n)}})
    for params in ({"filter": text}, {"filter": text, "limit": 50}):
        found = admin.get(SESSIONS, params=params)
        assert found.status_code == 200, found.text
        assert sorted(s["session_id"] for s in found.json()["sessions"]) == expected


@pytest.mark.parametrize("params", [
    {"filter": "actor_id = bob"}, {"filter": 'actor_id = "a" OR actor_id = "b"'},
    {"filter": 'actor_id = "a" AND actor_id = "b"'}, {"filter": 'role = "x"'},
    {"filter": 'metadata.bad key = "x"'}, {"filter": 'actor_id = "\\x"'},
    {"filter": 'actor_id = "a" AND'}, {"filter": 'actor_id = "' + "a" * 300 + '"'},
    {"page_size": 0}, {"page_size": 1001}, {"page_token": "junk"},
    {"order_by": "name asc"}, {"limit": 0}, {"limit": 1002},
    {"limit": 2, "page_size": 2}, {"after": "[1]", "page_token": "x"},
    {"after": "not json"}, {"after": "[]"}, {"after": '["x"]'}, {"after": "[true]"},
    {"after": "[-1]"}, {"after": f"[{2**64}]"}, {"after": "[1, 2]"}, {"after": "{}"},
    {"after": '["2024-13-01T00:00:00Z", 1]', "order_by": "last_activity_time asc"},
    {"after": '["yesterday", 1]', "order_by": "last_activity_time asc"},
    {"after": '[1, "2024-01-01T00:00:00Z"]', "order_by": "last_activity_time asc"},
    {"after": "[1]", "order_by": "last_activity_time asc"},
])
def test_bad_session_listings_are_refused(admin: httpx.Client,
                                          params: dict[str, Any]) -> None:
    response = admin.get(SESSIONS, params=params)
    assert response.status_code == 400, response.text
    assert response.json()["code"] in ("invalid_input", "limit_exceeded")


def test_history_refuses_an_unknown_format(admin: httpx.Client) -> None:
    _problem(admin.get(f"{S1}/history", params={"as_format": "klingon"}), 400,
             "invalid_input")


def test_a_client_may_ask_for_fewer_labels_than_the_server_allows(
        tenant: Tenant, admin: httpx.Client) -> None:
    kept = tenant.stored()
    refused = admin.patch(S1, params={"max_labels": 2},
                          json={"metadata": {"a": "1", "b": "2"}})
    assert _problem(refused, 400, "limit_exceeded")["details"]["limit"] == 2
    assert tenant.stored() == kept
    allowed = admin.patch(S1, params={"max_labels": 2}, json={"metadata": {"a": "1"}})
    assert allowed.json()["metadata"] == {"channel": "web", "a": "1"}


# permissions -------------------------------------------------------------------------------


def test_read_may_look_but_not_change(tenant: Tenant) -> None:
    token = tenant.key("reader", "READ")
    item_id = tenant.direct.session_stores.get(STORE).get("s1").list_items_page(
        page_size=1).items[0].item_id
    with tenant.http(token) as http:
        assert http.get(SESSIONS).status_code == 200
        assert http.get(S1).json()["actor_id"] == "alice"
        assert len(http.get(ITEMS).json()["session_items"]) == 2
        assert http.get(ITEMS, params={"limit": 10}).status_code == 200
        assert http.get(f"{ITEMS}/{item_id}").status_code == 200
        assert http.get(f"{S1}/history").status_code == 200
        kept = tenant.stored()
        for method, path, body in [
            ("POST", f"{ITEMS}:append", {"items": [{"data": {"a": 1}}]}),
            ("POST", f"{ITEMS}:pop", None),
            ("POST", f"{ITEMS}:clear", None),
            ("PATCH", S1, {"metadata": {"x": "y"}}),
            ("DELETE", S1, None),
            ("POST", SESSIONS, {"actor_id": "a"}),
            ("POST", f"{SESSIONS}:fork", {"source_session_id": "s1"}),
        ]:
            refused = http.request(method, path, json=body)
            details = _problem(refused, 403, "permission_denied")["details"]
            assert details == {"store": STORE, "needed": "WRITE"}
        assert tenant.stored() == kept


def test_write_may_change_contents(tenant: Tenant) -> None:
    token = tenant.key("writer", "WRITE")
    with tenant.http(token) as http:
        appended = http.post(f"{ITEMS}:append", json={"items": [{"data": {"a": 1}}]})
        assert appended.status_code == 200, appended.text
        assert appended.json()["session_items"][0]["seq"] == 3
        assert http.post(SESSIONS, json={"actor_id": "a", "session_id": "w1"}
                         ).status_code == 200
        assert http.post(f"{ITEMS}:pop").json()["session_item"]["data"] == {"a": 1}
        assert http.delete(f"{SESSIONS}/w1").json() == {"sessions_deleted": 1}
        # deleting the store itself needs MANAGE
        _problem(http.delete(f"{AGENTS}/session-stores/{STORE}"), 403, "permission_denied")


def test_no_grant_reads_exactly_like_no_store(server: LiveServer, tenant: Tenant,
                                              other: Tenant) -> None:
    """A principal without a grant, another tenant's admin, and anyone asking about a store
    that does not exist get the same bytes back: nothing tells them the store is there."""
    paths = [S1, ITEMS, f"{ITEMS}?limit=5", f"{ITEMS}/itm_x", f"{S1}/history", SESSIONS,
             f"{SESSIONS}?limit=5"]
    writes = [("POST", f"{ITEMS}:append", {"items": [{"data": {"a": 1}}]}),
              ("POST", f"{ITEMS}:pop", None), ("POST", f"{SESSIONS}:fork",
                                                  {"source_session_id": "s1"}),
              ("PATCH", S1, {"metadata": {"x": "y"}}), ("DELETE", S1, None),
              ("POST", SESSIONS, {"actor_id": "a"})]

    def answers(token: str) -> list[tuple[int, str, bytes]]:
        with httpx.Client(base_url=server.url, timeout=30,
                          headers={"authorization": f"Bearer {token}"}) as http:
            got = [http.get(p) for p in paths]
            got += [http.request(m, p, json=b) for m, p, b in writes]
        return [(r.status_code, r.headers["content-type"], r.content) for r in got]

    # the same tenant, before the store exists and after, for a principal with no grant
    name = f"t-{uuid.uuid4().hex[:12]}"
    stranger = server.mint_key(tenant=name, principal="stranger")
    before = answers(stranger)
    with ownstate.connect(server.backend_url, tenant=name) as direct:
        direct.session_stores.create(STORE, owner="someone").add(actor_id="a",
                                                                 session_id="s1")
        assert answers(stranger) == before
        # a grant on another store reveals nothing about this one
        direct.session_stores.create("elsewhere").grant_permission("stranger", "MANAGE")
        assert answers(stranger) == before
    assert {status for status, _, _ in before} == {404}
    # another tenant's admin, where the store does not exist
    other.direct.session_stores.delete(STORE, force=True)
    assert answers(other.admin) == before
    # and the tenant that holds it is untouched
    kept = tenant.stored()
    assert answers(tenant.key("nobody")) == before
    assert tenant.stored() == kept


# the remote client -------------------------------------------------------------------------


def test_the_remote_client_finds_odd_ids_missing_as_a_local_database_does(
        tenant: Tenant) -> None:
    """Ids that no session or item has, including ones a URL path cannot carry as they
    are (a slash, a dot-segment, a control character), are not found, not malformed."""
    with ownstate.connect(tenant.server.url, token=tenant.admin) as remote:
        store = remote.session_stores.get(STORE)
        session = store.get("s1")
        for odd in (".", "..", "a/b", "%2F", "?x=1", "#frag", "é ü", "x\ty", "x" * 2000):
            with pytest.raises(ownstate.SessionNotFound) as missing:
                store.get(odd)
            assert missing.value.details == {"store": STORE, "session_id": odd}
            with pytest.raises(ownstate.ItemNotFound) as no_item:
                session.get_item(odd)
            assert no_item.value.details == {"session_id": "s1", "item_id": odd}
            with pytest.raises(ownstate.ItemNotFound):
                session.fork(up_to_item_id=odd)
        with pytest.raises(ownstate.SessionNotFound):
            remote.session_stores.session(STORE, "a/b").fork()
        with pytest.raises(ownstate.SessionNotFound):
            remote.session_stores.session(STORE, "a/b").get_item("x/y")
        assert [s.session_id for s in store.list_sessions()] == ["s1"]


def test_a_remote_replay_cache_follows_every_change_made_elsewhere(tenant: Tenant) -> None:
    """The remote client keeps replayed items and asks only for newer ones; whatever
    another client does to the session (pop, append in its place, clear, delete and make
    again), the next replay is exactly what is stored."""
    direct = tenant.direct.session_stores.get(STORE)

    def stored(session_id: str) -> list[Any]:
        return [(i.item_id, i.data) for i in
                direct.get(session_id).list_items(order_by="create_time asc")]

    with ownstate.connect(tenant.server.url, token=tenant.admin) as remote:
        session = remote.session_stores.get(STORE).get("s1")

        def replay() -> list[Any]:
            return [(i.item_id, i.data) for i in
                    session.list_items(order_by="create_time asc", page_size=3)]

        other = direct.get("s1")
        assert replay() == stored("s1")
        # Reading on from exactly where the cache ends, with the largest page there is.
        last = len(stored("s1"))
        assert session.list_items_page(order_by="create_time asc", page_size=1000,
                                       after_seq=last).items == []
        other.append_items([{"role": "user", "content": "next"}])
        page = session.list_items_page(order_by="create_time asc", page_size=1000,
                                       after_seq=last)
        assert [(i.item_id, i.data) for i in page.items] == stored("s1")[last:]
        other.append_items([{"role": "user", "content": f"m{n}"} for n in range(5)])
        assert replay() == stored("s1")  # served from the cache, plus what is new
        replayed = session.list_items(order_by="create_time asc")
        first = next(iter(replayed))
        first.data["content"] = "changed by the caller"
        assert replay() == stored("s1")  # handed-out data is the caller's own
        other.pop_item()
        other.pop_item()
        other.append_items([{"role": "user", "content": "in place of the popped"}])
        assert replay() == stored("s1")
        other.clear()
        assert replay() == []
        other.append_items([{"role": "user", "content": "after the clear"}])
        assert replay() == stored("s1")
        other.delete()
        made_again = direct.add(actor_id="alice", session_id="s1")
        made_again.append_items([{"role": "user", "content": "a new session, same id"}])
        assert replay() == stored("s1")
        assert replay()[0][1]["content"] == "a new session, same id"
