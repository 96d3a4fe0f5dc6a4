"""Conformance tests for assets: content-addressed bytes owned by sessions.

Star-import this module in a test file that provides a ``target`` fixture.

It may touch the public sync API, the error tree, the limits, the model, the shared fixtures
and targets, and pytest; never a backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest

import ownstate
from ownstate.errors import (
    AssetNotFound,
    InvalidInput,
    LimitExceeded,
    NotFound,
    SessionNotFound,
)
from ownstate.limits import Limits
from ownstate.model import AssetRef

from .fixtures import *
from .fixtures import run_async, snapshot
from .targets import Target

Client = ownstate.Client


def _assets(client: Client) -> Any:
    """Every session's assets with their bytes, and the sessions themselves."""
    held = []
    for st in client.session_stores.list():
        for s in st.list_sessions(order_by="create_time asc"):
            held.append((s.session_id, [(a, client.assets.get(a.asset_id))
                                        for a in client.assets.list(s)]))
    return held, snapshot(client)


def _bytes_of(client: Client, *refs: AssetRef) -> list[bytes | None]:
    found: list[bytes | None] = []
    for ref in refs:
        try:
            found.append(client.assets.get(ref.asset_id))
        except AssetNotFound:
            found.append(None)
    return found


# put and get -------------------------------------------------------------------------


def test_put_computes_what_it_trusts(client: Client, session: ownstate.Session) -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    ref = client.assets.put(data, "Image/PNG", session=session, metadata={"origin": "upload"})
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert ref.size == len(data)
    assert ref.media_type == "image/png"
    assert (ref.store, ref.session_id) == (session.store, session.session_id)
    assert ref.metadata == {"origin": "upload"}
    assert ref.asset_id
    assert client.assets.get(ref.asset_id) == data
    assert client.assets.get_ref(ref.asset_id) == ref
    assert client.assets.list(session) == [ref]


def test_ref_json_resolves_back(client: Client, session: ownstate.Session) -> None:
    ref = client.assets.put(b"%PDF-1.7", "application/pdf", session=session)
    held = ref.to_json()
    assert held == {"$asset": ref.asset_id, "media_type": "application/pdf", "size": 8}
    session.append_items([{"role": "user", "content": "see attached", "attachment": held}])
    stored = next(iter(session.list_items())).data["attachment"]
    assert client.assets.resolve(stored) == ref
    forged = {**held, "size": 1, "media_type": "text/plain"}
    assert client.assets.resolve(forged) == ref


@pytest.mark.parametrize("ref", [None, "sha256:abc", [], {"asset": "x"}, {"$asset": 5},
                                 {"$asset": ""}])
def test_resolve_refuses_what_is_not_a_reference(client: Client, ref: Any) -> None:
    with pytest.raises(InvalidInput) as err:
        client.assets.resolve(ref)
    assert err.value.field == "ref"


def test_unknown_assets(client: Client) -> None:
    with pytest.raises(AssetNotFound) as err:
        client.assets.get("ast_unknown")
    assert err.value.asset_id == "ast_unknown"
    assert isinstance(err.value, NotFound)
    with pytest.raises(AssetNotFound):
        client.assets.get_ref("ast_unknown")
    with pytest.raises(AssetNotFound):
        client.assets.resolve({"$asset": "ast_unknown"})
    with pytest.raises(AssetNotFound):
        client.assets.delete("ast_unknown")


def test_assets_without_an_owner(client: Client, session: ownstate.Session) -> None:
    ref = client.assets.put(b"shared logo", "image/svg+xml")
    assert (ref.store, ref.session_id) == (None, None)
    assert client.assets.get(ref.asset_id) == b"shared logo"
    assert client.assets.list(session) == []
    assert client.assets.put(b"shared logo", "image/svg+xml") == ref


def test_empty_content_and_bytes_likes(client: Client, session: ownstate.Session) -> None:
    empty = client.assets.put(b"", "application/octet-stream", session=session)
    assert (empty.size, empty.sha256) == (0, hashlib.sha256(b"").hexdigest())
    assert client.assets.get(empty.asset_id) == b""
    buffer = bytearray(b"mutable")
    from_buffer = client.assets.put(buffer, "text/plain", session=session)  # type: ignore[arg-type]
    buffer[0] = ord("M")
    view = client.assets.put(memoryview(b"viewed"), "text/plain",  # type: ignore[arg-type]
                             session=session)
    assert client.assets.get(from_buffer.asset_id) == b"mutable"
    assert client.assets.get(view.asset_id) == b"viewed"
    assert type(client.assets.get(view.asset_id)) is bytes


def test_list_is_oldest_first_and_per_session(client: Client, store: ownstate.SessionStore,
                                              session: ownstate.Session) -> None:
    other = store.add(actor_id="customer-9", session_id="case-9")
    made = [client.assets.put(f"file {n}".encode(), "text/plain", session=session)
            for n in range(3)]
    client.assets.put(b"elsewhere", "text/plain", session=other)
    assert client.assets.list(session) == made
    assert [a.session_id for a in client.assets.list(other)] == ["case-9"]


# content addressing ------------------------------------------------------------------


def test_same_bytes_same_owner_is_one_reference(client: Client,
                                                session: ownstate.Session) -> None:
    first = client.assets.put(b"same", "text/plain", session=session, metadata={"n": "1"})
    again = client.assets.put(b"same", "application/octet-stream", session=session,
                              metadata={"n": "2"})
    assert again == first
    assert client.assets.list(session) == [first]


def test_same_bytes_other_owners_share_content(client: Client, store: ownstate.SessionStore,
                                               session: ownstate.Session) -> None:
    other = store.add(actor_id="customer-9", session_id="case-9")
    mine = client.assets.put(b"shared bytes", "text/plain", session=session)
    theirs = client.assets.put(b"shared bytes", "text/plain", session=other)
    loose = client.assets.put(b"shared bytes", "text/plain")
    assert len({mine.asset_id, theirs.asset_id, loose.asset_id}) == 3
    assert mine.sha256 == theirs.sha256 == loose.sha256
    client.assets.delete(mine.asset_id)
    assert _bytes_of(client, mine, theirs, loose) == [None, b"shared bytes", b"shared bytes"]
    assert client.assets.list(session) == []
    client.assets.delete(theirs.asset_id)
    client.assets.delete(loose.asset_id)
    assert _bytes_of(client, theirs, loose) == [None, None]
    back = client.assets.put(b"shared bytes", "text/plain", session=session)
    assert back.asset_id != mine.asset_id
    assert client.assets.get(back.asset_id) == b"shared bytes"


def test_delete_twice(client: Client, session: ownstate.Session) -> None:
    ref = client.assets.put(b"once", "text/plain", session=session)
    client.assets.delete(ref.asset_id)
    with pytest.raises(AssetNotFound):
        client.assets.delete(ref.asset_id)
    with pytest.raises(AssetNotFound):
        client.assets.get_ref(ref.asset_id)


# cascades ----------------------------------------------------------------------------


def test_assets_go_with_their_session(client: Client, store: ownstate.SessionStore,
                                      session: ownstate.Session) -> None:
    other = store.add(actor_id="customer-9", session_id="case-9")
    only_mine = client.assets.put(b"only mine", "text/plain", session=session)
    shared_mine = client.assets.put(b"shared", "text/plain", session=session)
    shared_theirs = client.assets.put(b"shared", "text/plain", session=other)
    child = session.fork()
    in_child = client.assets.put(b"child's", "text/plain", session=child)
    session.delete(force=True)
    assert _bytes_of(client, only_mine, shared_mine, in_child, shared_theirs) == [
        None, None, None, b"shared"]
    with pytest.raises(SessionNotFound):
        client.assets.list(session)
    assert client.assets.list(other) == [shared_theirs]


def test_assets_go_with_their_store(client: Client, store: ownstate.SessionStore,
                                    session: ownstate.Session) -> None:
    kept_store = client.session_stores.create("kept-store")
    kept = kept_store.add(actor_id="a", session_id="k")
    doomed = client.assets.put(b"doomed", "text/plain", session=session)
    survivor = client.assets.put(b"doomed", "text/plain", session=kept)
    loose = client.assets.put(b"loose", "text/plain")
    client.session_stores.delete(store.name, force=True)
    assert _bytes_of(client, doomed, survivor, loose) == [None, b"doomed", b"loose"]


def test_put_into_a_deleted_session(client: Client, session: ownstate.Session) -> None:
    session.delete()
    with pytest.raises(SessionNotFound) as err:
        client.assets.put(b"late", "text/plain", session=session)
    assert (err.value.store, err.value.session_id) == (session.store, session.session_id)


# bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"data": "text is not bytes"}, "data"),
    ({"data": None}, "data"),
    ({"data": [1, 2]}, "data"),
    ({"media_type": ""}, "media_type"),
    ({"media_type": "png"}, "media_type"),
    ({"media_type": "image/"}, "media_type"),
    ({"media_type": "/png"}, "media_type"),
    ({"media_type": "image/png; charset=x"}, "media_type"),
    ({"media_type": "im age/png"}, "media_type"),
    ({"media_type": "image/png/x"}, "media_type"),
    ({"media_type": None}, "media_type"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"metadata": {"bad key": "v"}}, "metadata"),
    ({"metadata": ["k"]}, "metadata"),
    ({"session": "case-456"}, "session"),
])
def test_bad_put_is_refused_and_changes_nothing(client: Client, session: ownstate.Session,
                                                kwargs: dict[str, Any], field: str) -> None:
    client.assets.put(b"kept", "text/plain", session=session)
    before = _assets(client)
    arguments: dict[str, Any] = {"data": b"new", "media_type": "text/plain",
                                 "session": session}
    arguments.update(kwargs)
    with pytest.raises(InvalidInput) as err:
        client.assets.put(arguments.pop("data"), arguments.pop("media_type"), **arguments)
    assert err.value.field == field
    assert _assets(client) == before


def test_size_is_bounded(make_client: Callable[..., Client]) -> None:
    client = make_client(limits=Limits(max_asset_bytes=4))
    session = client.session_stores.create("bounded").add(actor_id="a", session_id="s")
    assert client.assets.put(b"1234", "text/plain", session=session).size == 4
    before = _assets(client)
    with pytest.raises(LimitExceeded) as err:
        client.assets.put(b"12345", "text/plain", session=session)
    assert (err.value.field, err.value.limit, err.value.actual) == ("data", 4, 5)
    assert _assets(client) == before


@pytest.mark.parametrize("asset_id", ["", None, 5, "x" * 257])
def test_bad_asset_ids_are_refused(client: Client, session: ownstate.Session,
                                   asset_id: Any) -> None:
    client.assets.put(b"kept", "text/plain", session=session)
    before = _assets(client)
    for call in (client.assets.get, client.assets.get_ref, client.assets.delete):
        with pytest.raises(InvalidInput) as err:
            call(asset_id)
        assert err.value.field == "asset_id"
    assert _assets(client) == before


def test_list_needs_a_session_handle(client: Client, session: ownstate.Session) -> None:
    with pytest.raises(InvalidInput):
        client.assets.list(session.session_id)  # type: ignore[arg-type]


# tenants -----------------------------------------------------------------------------


def test_tenants_do_not_see_each_other(client: Client, other_tenant: Client,
                                       session: ownstate.Session) -> None:
    mine = client.assets.put(b"private", "text/plain", session=session)
    with pytest.raises(AssetNotFound):
        other_tenant.assets.get(mine.asset_id)
    with pytest.raises(AssetNotFound):
        other_tenant.assets.resolve(mine.to_json())
    with pytest.raises(AssetNotFound):
        other_tenant.assets.delete(mine.asset_id)
    theirs = other_tenant.assets.put(b"private", "text/plain")
    assert theirs.asset_id != mine.asset_id
    other_tenant.assets.delete(theirs.asset_id)
    assert client.assets.get(mine.asset_id) == b"private"
    assert client.assets.list(session) == [mine]


# the async client --------------------------------------------------------------------


def test_async_client_has_the_same_assets(target: Target) -> None:
    async def scenario() -> bytes:
        async with await target.connect_async() as client:
            store = await client.session_stores.create("async-store")
            session = await store.add(actor_id="a", session_id="s")
            big = b"x" * (2 * 1024 * 1024)
            ref = await client.assets.put(big, "application/octet-stream", session=session)
            assert ref.sha256 == hashlib.sha256(big).hexdigest()
            assert await client.assets.list(session) == [ref]
            return await client.assets.get((await client.assets.resolve(ref.to_json())).asset_id)

    assert run_async(scenario()) == b"x" * (2 * 1024 * 1024)
