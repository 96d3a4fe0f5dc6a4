"""Assets conformance, run over every backend in conftest.TARGETS, and what each backend
keeps underneath: content stored once, and freed with its last reference however that
reference went."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

import ownstate
from ownstate.api import AsyncClient
from ownstate.backends import Capability
from ownstate.backends.memory import MemoryBackend
from ownstate.testing import Suite, Target
from ownstate.testing.fixtures import run_async

ownstate_suite = Suite("assets")


def _exercise(client: ownstate.Client) -> list[str]:
    """Leave exactly one content behind (``kept``), after every way a reference can go."""
    store = client.session_stores.create("blob-store")
    first = store.add(actor_id="a", session_id="s1")
    second = store.add(actor_id="a", session_id="s2")
    doomed_store = client.session_stores.create("doomed-store")
    third = doomed_store.add(actor_id="a", session_id="s3")
    for session in (first, second, third):
        client.assets.put(b"shared", "text/plain", session=session)
    client.assets.put(b"only in s1", "text/plain", session=first)
    loose = client.assets.put(b"loose", "text/plain")
    client.assets.put(b"kept", "text/plain", session=second)
    first.delete()
    client.session_stores.delete("doomed-store", force=True)
    client.assets.delete(loose.asset_id)
    second.fork().delete()
    return [ref.sha256 for ref in client.assets.list(second)]


def test_sqlite_frees_content_with_its_last_reference(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    with ownstate.connect(f"sqlite:///{db}") as client:
        held = _exercise(client)
        session = client.session_stores.get("blob-store").get("s2")
        shared = client.assets.list(session)[0]
        client.assets.delete(shared.asset_id)
        held.remove(shared.sha256)
    conn = sqlite3.connect(db)
    stored = [r[0] for r in conn.execute("SELECT sha256 FROM asset_blobs ORDER BY bid")]
    references = conn.execute("SELECT count(*) FROM assets").fetchone()[0]
    conn.close()
    assert stored == held
    assert references == 1


def test_memory_frees_content_with_its_last_reference() -> None:
    backend = MemoryBackend()

    async def scenario() -> None:
        async with AsyncClient(backend) as client:
            store = await client.session_stores.create("blob-store")
            session = await store.add(actor_id="a", session_id="s1")
            await client.assets.put(b"shared", "text/plain", session=session)
            loose = await client.assets.put(b"shared", "text/plain")
            await client.assets.put(b"mine", "text/plain", session=session)
            await session.delete()
            assert len(backend._data.blobs) == 1
            await client.assets.delete(loose.asset_id)
            assert backend._data.blobs == {}
            assert backend._data.assets == {}

    run_async(scenario())


def test_putting_an_asset_again_under_its_own_id_keeps_it(target: Target) -> None:
    """A put that names an asset id already stored for that owner and content (a retried
    write, a restore run again) returns the stored reference and leaves it whole: still
    found by its id, its bytes still there."""
    if not target.has(Capability.OPERATOR):
        pytest.skip(f"{target.name} makes asset ids itself (not Capability.OPERATOR)")
    data = b"the same bytes"
    digest = hashlib.sha256(data).hexdigest()
    with target.connect() as client:
        session = client.session_stores.create("again-store").add(actor_id="a",
                                                                  session_id="s1")
        backend, tenant = client.backend, client.tenant
        when = datetime.now(UTC)

        async def put_twice(store: str | None, session_id: str | None, asset_id: str) -> None:
            for _ in range(2):
                ref = await backend.put_asset(tenant, store, session_id, asset_id, digest,
                                              data, "text/plain", {}, when)
                assert ref.asset_id == asset_id

        client._portal.call(put_twice("again-store", session.session_id, "ast_owned"))
        client._portal.call(put_twice(None, None, "ast_loose"))
        for asset_id in ("ast_owned", "ast_loose"):
            assert client.assets.get(asset_id) == data
        assert [r.asset_id for r in client.assets.list(session)] == ["ast_owned"]
