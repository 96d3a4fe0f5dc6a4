"""Memory over HTTP: problem bodies, refusals that change nothing, what each permission
level may do, stores a key may not see answering byte for byte as missing ones, provenance
that never reveals an unreadable session, and the admin-only subject operations."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

import ownstate
from ownstate.errors import (
    FactNotFound,
    InvalidInput,
    ItemNotFound,
    PermissionDenied,
    StoreNotFound,
)
from ownstate.limits import Limits
from ownstate.testing.server import LiveServer
from ownstate.testing.server import problem as _problem

API = "/api/2.0/agents"
MEM = f"{API}/memory-stores/mem"
LIMITS = Limits(max_item_bytes=2000, max_batch_items=5, max_page_size=50,
                default_page_size=20)
BODY_LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer(f"memory://memory-{uuid.uuid4().hex}", key_cache_seconds=0,
                      limits=LIMITS, max_body_bytes=BODY_LIMIT)
    yield live
    live.stop()


@dataclass
class Tenant:
    """A fresh tenant with a memory store ``mem`` holding one fact about ``user:1``, a
    session store ``chats`` with one item, a direct client on the server's database and
    HTTP clients per principal."""

    server: LiveServer
    name: str
    direct: ownstate.Client
    admin: httpx.Client
    item: ownstate.Item
    fact_id: str
    clients: list[httpx.Client] = field(default_factory=list)

    def http(self, token: str) -> httpx.Client:
        made = httpx.Client(base_url=self.server.url,
                            headers={"authorization": f"Bearer {token}"})
        self.clients.append(made)
        return made

    def token(self, principal: str, *, memory: str | None = None,
              chats: str | None = None) -> str:
        """A key's token for a non-admin ``principal``, given these grants first."""
        if memory is not None:
            self.direct.memory_stores.get("mem").grant_permission(principal, memory)
        if chats is not None:
            self.direct.session_stores.get("chats").grant_permission(principal, chats)
        return self.server.mint_key(tenant=self.name, principal=principal)

    def key(self, principal: str, *, memory: str | None = None,
            chats: str | None = None) -> httpx.Client:
        """An HTTP client for a non-admin ``principal`` with these grants."""
        return self.http(self.token(principal, memory=memory, chats=chats))

    def state(self) -> dict[str, Any]:
        """Everything the tenant stores about its subjects, to prove nothing changed."""
        found: dict[str, Any] = {"stores": [m.name for m in self.direct.memory_stores.list()]}
        for subject in ("user:1", "user:2"):
            exported = self.direct.memory_stores.export_subject(subject)
            del exported["exported_at"]
            found[subject] = exported
        found["grants"] = [(g.principal, g.level) for g in
                           self.direct.memory_stores.get("mem").permissions()]
        return found


def _tenant(server: LiveServer) -> Tenant:
    name = f"m-{uuid.uuid4().hex[:12]}"
    direct = ownstate.connect(server.backend_url, tenant=name)
    memory = direct.memory_stores.create("mem")
    chats = direct.session_stores.create("chats")
    session = chats.add(actor_id="user:1", session_id="case-1")
    (item,) = session.append_items([{"role": "user", "content": "please email me"}])
    fact = memory.remember("user:1", "channel", "email", source=item)
    admin = httpx.Client(base_url=server.url, headers={
        "authorization": f"Bearer {server.mint_key(tenant=name, principal='root', admin=True)}"})
    return Tenant(server, name, direct, admin, item, fact.fact_id)


@pytest.fixture
def tenant(server: LiveServer) -> Iterator[Tenant]:
    made = _tenant(server)
    yield made
    for client in [made.admin, *made.clients]:
        client.close()
    made.direct.close()


# problem bodies ------------------------------------------------------------------------


def test_errors_are_problem_documents(tenant: Tenant) -> None:
    missing = _problem(tenant.admin.get(f"{API}/memory-stores/nope"), 404, "store_not_found")
    assert missing == {"type": "urn:ownstate:error:store_not_found", "title": "Not Found",
                       "status": 404, "code": "store_not_found",
                       "detail": "no store with store='nope'", "details": {"store": "nope"}}
    fact = _problem(tenant.admin.get(f"{MEM}/facts/fct_missing"), 404, "fact_not_found")
    assert fact["details"] == {"fact_id": "fct_missing", "store": "mem"}
    exists = _problem(tenant.admin.post(f"{API}/memory-stores", json={"name": "mem"}), 409,
                      "already_exists")
    assert exists["details"]["store"] == "mem"
    bad = _problem(tenant.admin.post(f"{MEM}/facts", json={"subject": "", "key": "k",
                                                           "value": 1}), 400, "invalid_input")
    assert bad["details"] == {"field": "subject"}


# bounds and bad input ------------------------------------------------------------------

_FACT = {"subject": "user:1", "key": "channel", "value": "sms"}
_BAD: list[tuple[str, str, Any, str, str]] = [
    # (what, path under the store, body, code, field)
    ("blank subject", "/facts", {**_FACT, "subject": "   "}, "invalid_input", "subject"),
    ("long subject", "/facts", {**_FACT, "subject": "x" * 257}, "invalid_input", "subject"),
    ("control char", "/facts", {**_FACT, "subject": "tab\there"}, "invalid_input",
     "subject"),
    ("subject type", "/facts", {**_FACT, "subject": 8814}, "invalid_input", "subject"),
    ("no key", "/facts", {"subject": "user:1", "value": 1}, "invalid_input", "key"),
    ("no value", "/facts", {"subject": "user:1", "key": "k"}, "invalid_input", "value"),
    ("NaN value", "/facts", '{"subject":"user:1","key":"channel","value":NaN}',
     "invalid_input", "value"),
    ("huge float", "/facts", '{"subject":"user:1","key":"channel","value":1e999}',
     "invalid_input", "value"),
    ("surrogate value", "/facts", '{"subject":"user:1","key":"channel","value":"\\ud800"}',
     "invalid_input", "value"),
    ("surrogate key in value", "/facts",
     '{"subject":"user:1","key":"channel","value":{"\\udfff":1}}', "invalid_input", "value"),
    ("surrogate subject", "/facts", '{"subject":"\\ud800","key":"channel","value":1}',
     "invalid_input", "subject"),
    ("surrogate in batch", "/facts:batch", '{"facts":[{"subject":"user:1","key":"a",'
     '"value":1},{"subject":"user:1","key":"b","value":"\\ud800"}]}', "invalid_input",
     "value"),
    ("big value", "/facts", {**_FACT, "value": "x" * 1999}, "limit_exceeded", "value"),
    ("deep value", "/facts", '{"subject":"user:1","key":"channel","value":'
     + "[" * 5000 + "]" * 5000 + "}", "invalid_input", "request"),
    ("confidence high", "/facts", {**_FACT, "confidence": 1.5}, "invalid_input",
     "confidence"),
    ("confidence bool", "/facts", {**_FACT, "confidence": True}, "invalid_input",
     "confidence"),
    ("confidence text", "/facts", {**_FACT, "confidence": "0.5"}, "invalid_input",
     "confidence"),
    ("source type", "/facts", {**_FACT, "source_type": "robot"}, "invalid_input",
     "source_type"),
    ("naive time", "/facts", {**_FACT, "valid_from": "2024-01-01T00:00:00"},
     "invalid_input", "valid_from"),
    ("epoch time", "/facts", {**_FACT, "valid_from": 1700000000}, "invalid_input",
     "valid_from"),
    ("early time", "/facts", {**_FACT, "valid_from": "0999-01-01T00:00:00Z"},
     "invalid_input", "valid_from"),
    ("own fact id", "/facts", {**_FACT, "fact_id": "fct_mine"}, "invalid_input", "fact_id"),
    ("partial source", "/facts", {**_FACT, "source": {"store": "chats"}}, "invalid_input",
     "source.session_id"),
    ("not an object", "/facts", [_FACT], "invalid_input", "request"),
    ("batch too big", "/facts:batch", {"facts": [_FACT] * 6}, "limit_exceeded", "facts"),
    ("bad in batch", "/facts:batch", {"facts": [_FACT, {**_FACT, "confidence": -1}]},
     "invalid_input", "facts.1.confidence"),
    ("late bad in batch", "/facts:batch",
     {"facts": [_FACT, {**_FACT, "subject": "user:\x7f"}]}, "invalid_input",
     "facts.1.subject"),
    ("facts not a list", "/facts:batch", {"facts": _FACT}, "invalid_input", "facts"),
    ("recall keys", "/facts:recall", {"subject": "user:1", "keys": ["k"] * 51},
     "limit_exceeded", "keys"),
    ("recall time", "/facts:recall", {"subject": "user:1", "as_of": "soon"},
     "invalid_input", "as_of"),
    ("search words", "/facts:search", {"query": "?!"}, "invalid_input", "query"),
    ("search limit", "/facts:search", {"query": "email", "limit": 51}, "limit_exceeded",
     "limit"),
    ("search huge limit", "/facts:search", {"query": "email", "limit": 10**30},
     "invalid_input", "limit"),
    ("search zero", "/facts:search", {"query": "email", "limit": 0}, "invalid_input",
     "limit"),
    ("forget reason", "/facts:forget", {"subject": "user:1", "key": "channel",
                                        "reason": "x" * 1001}, "invalid_input", "reason"),
    ("grant level", "/permissions:grant", {"principal": {"name": "bob"},
                                           "permission": "OWNER"}, "invalid_input",
     "permission"),
]


@pytest.mark.parametrize(("what", "path", "body", "code", "field_name"), _BAD,
                         ids=[case[0] for case in _BAD])
def test_bad_input_is_refused_and_nothing_changes(tenant: Tenant, what: str, path: str,
                                                  body: Any, code: str,
                                                  field_name: str) -> None:
    before = tenant.state()
    if isinstance(body, str):
        response = tenant.admin.post(f"{MEM}{path}", content=body,
                                     headers={"content-type": "application/json"})
    else:
        response = tenant.admin.post(f"{MEM}{path}", json=body)
    problem = _problem(response, 400, code)
    assert problem["details"]["field"] == field_name
    assert tenant.state() == before


def test_bad_query_parameters_and_bodies_are_refused(tenant: Tenant) -> None:
    before = tenant.state()
    cases = [
        tenant.admin.get(f"{MEM}/facts:history", params={"subject": "user:1"}),
        tenant.admin.get(f"{MEM}/facts:history", params={"subject": "", "key": "k"}),
        tenant.admin.get(f"{MEM}/facts:history", params={"subject": "a\x00", "key": "k"}),
        tenant.admin.get(f"{API}/memory-stores", params={"limit": 10**30}),
        tenant.admin.get(f"{API}/memory-stores", params={"limit": 2, "page_size": 2}),
        tenant.admin.get(f"{API}/memory-stores", params={"page_token": "forged"}),
        tenant.admin.post(f"{API}/memory-stores", json={"name": "Bad Name"}),
        tenant.admin.post(f"{API}/subjects:erase", json={"subject": "user:1",
                                                         "include_sessions": "yes"}),
        tenant.admin.get(f"{API}/subjects:export", params={"subject": " "}),
    ]
    for response in cases:
        _problem(response, 400, response.json()["code"])
        assert response.json()["code"] in ("invalid_input", "limit_exceeded")
    big = tenant.admin.post(f"{MEM}/facts", json={**_FACT, "value": "x" * BODY_LIMIT})
    assert _problem(big, 413, "limit_exceeded")["details"]["field"] == "request_body"
    assert tenant.state() == before


# permission levels ---------------------------------------------------------------------

_RANK = {"READ": 1, "WRITE": 2, "MANAGE": 3}


def _operations(t: Tenant) -> list[tuple[str, str, str, Any]]:
    """(level needed, method, path, body) of every route on the store but delete."""
    return [
        ("READ", "GET", MEM, None),
        ("READ", "GET", f"{MEM}/permissions", None),
        ("READ", "POST", f"{MEM}/facts:recall", {"subject": "user:1"}),
        ("READ", "GET", f"{MEM}/facts:history?subject=user:1&key=channel", None),
        ("READ", "POST", f"{MEM}/facts:search", {"query": "email"}),
        ("READ", "GET", f"{MEM}/subjects?page_size=5", None),
        ("READ", "GET", f"{MEM}/subjects?after=user:0&limit=5", None),
        ("READ", "GET", f"{MEM}/facts/{t.fact_id}", None),
        ("READ", "GET", f"{MEM}/facts/{t.fact_id}/explanation", None),
        ("WRITE", "POST", f"{MEM}/facts", {"subject": "user:2", "key": "k", "value": 1}),
        ("WRITE", "POST", f"{MEM}/facts:batch", {"facts": [{"subject": "user:2", "key": "k",
                                                            "value": 2}]}),
        ("WRITE", "POST", f"{MEM}/facts:forget", {"subject": "user:2", "key": "none"}),
        ("MANAGE", "POST", f"{MEM}/permissions:grant",
         {"principal": {"name": "somebody"}, "permission": "READ"}),
        ("MANAGE", "POST", f"{MEM}/permissions:revoke", {"principal": {"name": "somebody"}}),
    ]


@pytest.mark.parametrize("level", ["READ", "WRITE", "MANAGE"])
def test_each_level_may_do_what_it_grants(tenant: Tenant, level: str) -> None:
    http = tenant.key(f"p-{level.lower()}", memory=level)
    for needed, method, path, body in _operations(tenant):
        before = tenant.state()
        response = http.request(method, path, json=body)
        if _RANK[level] >= _RANK[needed]:
            assert response.status_code == 200, (method, path, response.text)
        else:
            problem = _problem(response, 403, "permission_denied")
            assert problem["details"] == {"needed": needed, "store": "mem"}
            assert tenant.state() == before, (method, path)
    before = tenant.state()
    response = http.delete(MEM)
    if level == "MANAGE":
        assert response.json() == {"facts_deleted": 3}
        with pytest.raises(StoreNotFound):
            tenant.direct.memory_stores.get("mem")
    else:
        _problem(response, 403, "permission_denied")
        assert tenant.state() == before


def test_a_reader_uses_the_library_over_http(tenant: Tenant) -> None:
    token = tenant.token("reader", memory="READ")
    with ownstate.connect(tenant.server.url, token=token) as client:
        memory = client.memory_stores.get("mem")
        (fact,) = memory.recall("user:1")
        assert (fact.fact_id, fact.value) == (tenant.fact_id, "email")
        assert [h.fact for h in memory.search("email")] == [fact]
        assert memory.history("user:1", "channel") == [fact]
        assert "user:1" in memory.subjects().items
        assert [m.name for m in client.memory_stores.list()] == ["mem"]
        before = tenant.state()
        with pytest.raises(PermissionDenied):
            memory.remember("user:1", "channel", "sms")
        with pytest.raises(PermissionDenied):
            memory.forget("user:1", "channel")
        with pytest.raises(PermissionDenied):
            client.memory_stores.delete("mem")
        with pytest.raises(PermissionDenied):
            memory.grant_permission("reader", "MANAGE")
        assert tenant.state() == before


def test_without_a_grant_a_store_reads_exactly_as_missing(server: LiveServer,
                                                          tenant: Tenant) -> None:
    """Every route on ``mem``, from a principal of the tenant with no grant on it, answers
    byte for byte as from another tenant, which has no such store at all."""
    other = _tenant(server)
    try:
        other.direct.memory_stores.delete("mem")
        stranger = tenant.key("stranger")
        elsewhere = other.key("stranger")
        operations = [*_operations(tenant), ("MANAGE", "DELETE", MEM, None)]
        before = tenant.state()
        for _, method, path, body in operations:
            seen = [client.request(method, path, json=body)
                    for client in (stranger, elsewhere, other.admin)]
            for response in seen:
                _problem(response, 404, "store_not_found")
            assert len({r.content for r in seen}) == 1, (method, path)
        assert tenant.state() == before
    finally:
        other.admin.close()
        for client in other.clients:
            client.close()
        other.direct.close()


def test_a_fact_of_another_store_reads_as_missing(tenant: Tenant) -> None:
    tenant.direct.memory_stores.create("other")
    tenant.direct.memory_stores.get("other").grant_permission("reader", "READ")
    reader = tenant.key("reader", memory="READ")
    theirs = reader.get(f"{API}/memory-stores/other/facts/{tenant.fact_id}")
    _problem(theirs, 404, "fact_not_found")
    tenant.direct.memory_stores.get("mem").remember("user:1", "channel", "sms")
    tenant.direct.memory_stores.delete("mem")
    gone = tenant.admin.get(f"{API}/memory-stores/other/facts/{tenant.fact_id}")
    assert theirs.content == gone.content


def test_the_creator_owns_a_store_and_others_do_not_see_it(tenant: Tenant) -> None:
    alice = tenant.key("alice")
    bob = tenant.key("bob")
    created = alice.post(f"{API}/memory-stores", json={"name": "alice-notes"})
    assert created.status_code == 200
    grants = alice.get(f"{API}/memory-stores/alice-notes/permissions").json()["grants"]
    assert [(g["principal"], g["level"]) for g in grants] == [("alice", "OWNER")]
    _problem(bob.get(f"{API}/memory-stores/alice-notes"), 404, "store_not_found")
    assert alice.post(f"{API}/memory-stores/alice-notes/facts",
                      json=_FACT).json()["memory_store"] == "alice-notes"
    assert alice.delete(f"{API}/memory-stores/alice-notes").json() == {"facts_deleted": 1}


def test_listing_by_token_and_by_keyset(tenant: Tenant) -> None:
    for name in ("mem-b", "mem-a", "mem-c"):
        tenant.direct.memory_stores.create(name)
    tenant.direct.memory_stores.get("mem-c").grant_permission("reader", "READ")
    reader = tenant.key("reader", memory="READ")
    names = ["mem", "mem-a", "mem-b", "mem-c"]
    first = tenant.admin.get(f"{API}/memory-stores", params={"page_size": 3}).json()
    second = tenant.admin.get(f"{API}/memory-stores", params={
        "page_size": 3, "page_token": first["next_page_token"]}).json()
    assert [s["name"] for s in first["memory_stores"] + second["memory_stores"]] == names
    assert second["next_page_token"] is None
    keyset = tenant.admin.get(f"{API}/memory-stores", params={"after": "mem", "limit": 2})
    assert [s["name"] for s in keyset.json()["memory_stores"]] == ["mem-a", "mem-b"]
    assert keyset.json()["next_page_token"] is None
    mine = reader.get(f"{API}/memory-stores", params={"limit": 10}).json()["memory_stores"]
    assert [s["name"] for s in mine] == ["mem", "mem-c"]
    after = reader.get(f"{API}/memory-stores", params={"after": "mem", "limit": 10}).json()
    assert [s["name"] for s in after["memory_stores"]] == ["mem-c"]
    page = reader.get(f"{API}/memory-stores", params={"page_size": 1}).json()
    rest = reader.get(f"{API}/memory-stores", params={
        "page_size": 1, "page_token": page["next_page_token"]}).json()
    assert [s["name"] for s in page["memory_stores"] + rest["memory_stores"]] == names[::3]
    assert rest["next_page_token"] is None
    stranger = tenant.key("stranger")
    assert stranger.get(f"{API}/memory-stores", params={"limit": 10}).json() == {
        "memory_stores": [], "next_page_token": None}


# provenance ----------------------------------------------------------------------------


def test_explain_shows_a_source_item_only_to_readers_of_its_session(tenant: Tenant) -> None:
    path = f"{MEM}/facts/{tenant.fact_id}/explanation"
    reader = tenant.key("reader", memory="READ")
    hidden = reader.get(path)
    assert hidden.status_code == 200
    assert hidden.json()["source_item"] is None
    assert hidden.json()["fact"]["source_item_id"] == tenant.item.item_id  # ids, no content
    shown = tenant.admin.get(path)
    assert shown.json()["source_item"]["data"] == {"role": "user",
                                                   "content": "please email me"}
    tenant.direct.session_stores.get("chats").grant_permission("reader", "READ")
    assert reader.get(path).content == shown.content
    tenant.direct.session_stores.get("chats").revoke_permission("reader")
    assert reader.get(path).content == hidden.content
    # to a reader without the grant, the item reads exactly as one since deleted
    tenant.direct.session_stores.get("chats").get("case-1").delete()
    assert tenant.admin.get(path).content == hidden.content


def test_a_source_must_be_readable_to_be_named(tenant: Tenant) -> None:
    writer = tenant.key("writer", memory="WRITE")
    item = tenant.item
    named = {"store": "chats", "session_id": item.session_id, "item_id": item.item_id}
    unnamed = {"session_id": item.session_id, "item_id": item.item_id}
    before = tenant.state()
    refused = [writer.post(f"{MEM}/facts", json={**_FACT, "source": source})
               for source in (named, unnamed)]
    missing = tenant.admin.post(f"{MEM}/facts", json={**_FACT, "source": {
        **named, "store": "no-such-store"}})
    for response in [*refused, missing]:
        _problem(response, 404, "item_not_found")
    assert len({r.content for r in [*refused, missing]}) == 1
    batch = writer.post(f"{MEM}/facts:batch", json={"facts": [_FACT, {**_FACT,
                                                                      "source": named}]})
    _problem(batch, 404, "item_not_found")
    assert tenant.state() == before

    tenant.direct.session_stores.get("chats").grant_permission("writer", "READ")
    for source in (named, unnamed):
        made = writer.post(f"{MEM}/facts", json={**_FACT, "source": source}).json()
        assert (made["source_store"], made["source_session_id"], made["source_item_id"]) == (
            "chats", item.session_id, item.item_id)


def test_provenance_through_the_library_with_a_writer_key(tenant: Tenant) -> None:
    token = tenant.token("writer", memory="WRITE")
    with ownstate.connect(tenant.server.url, token=token) as client:
        memory = client.memory_stores.get("mem")
        with pytest.raises(ItemNotFound):
            memory.remember("user:1", "channel", "sms", source=tenant.item)
        tenant.direct.session_stores.get("chats").grant_permission("writer", "READ")
        fact = memory.remember("user:1", "channel", "sms", source=tenant.item)
        assert fact.source_store == "chats"
        assert memory.explain(fact.fact_id).source_item == tenant.item


# the library's calls over HTTP -----------------------------------------------------------


def test_values_and_odd_ids_travel_faithfully(tenant: Tenant) -> None:
    token = tenant.server.mint_key(tenant=tenant.name, principal="root", admin=True)
    from ownstate.limits import MAX_INT64, MAX_JSON_DEPTH, MIN_INT64

    deep: Any = "bottom"
    for _ in range(MAX_JSON_DEPTH):  # as deep as may be stored
        deep = [deep]
    with ownstate.connect(tenant.server.url, token=token) as client:
        memory = client.memory_stores.get("mem")
        values: list[Any] = [deep, MAX_INT64, MIN_INT64, -1.25, "caf\u00e9 \U0001f600",
                             {"a": [None, True]}]
        for n, value in enumerate(values):
            fact = memory.remember("user:2", f"k{n}", value)
            assert fact.value == value
            assert memory.get(fact.fact_id).value == value
            assert json.dumps(memory.recall("user:2", [f"k{n}"])[0].value) == json.dumps(value)
        for odd in ("a/b", "..", ".", "x y", "fct_%2F", "id:explanation"):
            with pytest.raises(FactNotFound) as err:
                memory.get(odd)
            assert (err.value.fact_id, err.value.store) == (odd, "mem")
            with pytest.raises(FactNotFound):
                memory.explain(odd)
        with pytest.raises(StoreNotFound):
            _gone(client).get("a/b")
        forgotten = memory.forget("user:2", "k1", "wrong")
        assert forgotten is not None
        assert forgotten.closed_reason == "forgotten: wrong"
        forgotten = memory.forget("user:2", "k2", "")
        assert forgotten is not None
        assert forgotten.closed_reason == "forgotten"


def _gone(client: ownstate.Client) -> Any:
    store = client.memory_stores.create("short-lived")
    client.memory_stores.delete("short-lived")
    return store


# subjects, tenant-wide ---------------------------------------------------------------------


def test_subject_operations_need_an_admin_key(tenant: Tenant) -> None:
    manager = tenant.key("manager", memory="MANAGE", chats="MANAGE")
    before = tenant.state()
    for response in (
        manager.post(f"{API}/subjects:erase", json={"subject": "user:1",
                                                    "include_sessions": True}),
        manager.get(f"{API}/subjects:export", params={"subject": "user:1"}),
        manager.get(f"{API}/subjects:facts", params={"subject": "user:1"}),
    ):
        _problem(response, 403, "permission_denied")
    assert tenant.state() == before
    token = tenant.server.mint_key(tenant=tenant.name, principal="manager")
    with ownstate.connect(tenant.server.url, token=token) as client:
        with pytest.raises(PermissionDenied):
            client.memory_stores.erase_subject("user:1")
        with pytest.raises(PermissionDenied):
            client.memory_stores.export_subject("user:1")
    assert tenant.state() == before

    exported = tenant.admin.get(f"{API}/subjects:export", params={"subject": "user:1"})
    want = tenant.direct.memory_stores.export_subject("user:1")
    got = exported.json()
    assert {k: v for k, v in got.items() if k != "exported_at"} == {
        k: v for k, v in want.items() if k != "exported_at"}
    facts = tenant.admin.get(f"{API}/subjects:facts", params={"subject": "user:1"}).json()
    assert [f["fact_id"] for f in facts["facts"]] == [tenant.fact_id]
    erased = tenant.admin.post(f"{API}/subjects:erase", json={"subject": "user:1",
                                                              "include_sessions": True})
    assert erased.json() == {"facts": 1, "sessions": 1}
    assert tenant.direct.memory_stores.get("mem").recall("user:1") == []
    with pytest.raises(InvalidInput):
        tenant.direct.memory_stores.erase_subject("")


def test_subjects_are_listed_a_page_at_a_time(tenant: Tenant) -> None:
    tenant.direct.memory_stores.get("mem").remember("user:0", "tz", "UTC")
    http = tenant.key("lister", memory="READ")
    first = http.get(f"{MEM}/subjects", params={"page_size": 1}).json()
    assert first["subjects"] == ["user:0"]
    rest = http.get(f"{MEM}/subjects", params={"page_token": first["next_page_token"]}).json()
    assert rest == {"subjects": ["user:1"], "next_page_token": None}
    assert http.get(f"{MEM}/subjects", params={"after": "user:0"}).json()["subjects"] == [
        "user:1"]
    problem = _problem(http.get(f"{MEM}/subjects", params={"page_token": "junk"}), 400,
                       "invalid_input")
    assert problem["details"]["field"] == "page_token"
    _problem(http.get(f"{MEM}/subjects", params={"page_size": 1, "limit": 1}), 400,
             "invalid_input")
