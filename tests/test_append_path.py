"""What an append works out per item, and what it leaves until a store needs it."""

from __future__ import annotations

from pathlib import Path

import pytest

import ownstate
from ownstate.backends.ports import search as search_rules
from ownstate.backends.ports import sessions as sessions_port


def test_items_are_indexed_as_stored(client: ownstate.Client) -> None:
    """Search terms come from the item as stored: a tuple is stored as a JSON array, and
    its text is found like a list's."""
    session = client.session_stores.create("chats").add(actor_id="u")
    session.append_items([{"role": "user", "content": ("cassowary", "sighting")},
                          {"role": "user", "content": "nothing here"}])
    assert [h.item.seq for h in client.session_stores.search_items("cassowary")] == [1]
    assert session.get_item(session.list_items_page().items[-1].item_id).data == {
        "role": "user", "content": ["cassowary", "sighting"]}


def test_appended_items_hold_their_own_data(client: ownstate.Client) -> None:
    given = {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    (item,) = client.session_stores.create("chats").add(actor_id="u").append_items([given])
    given["content"][0]["text"] = "changed"  # type: ignore[index]
    assert item.data == {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    item.data["role"] = "mine"  # type: ignore[index]
    assert given["role"] == "user"


@pytest.fixture(params=["memory", "sqlite"])
def local_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://append-path" if request.param == "memory" else f"sqlite:///{tmp_path}/a.db"


def test_unindexed_stores_never_work_out_search_text(
        local_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data: object) -> str:
        raise AssertionError("an item's search text was worked out for a store without search")

    monkeypatch.setattr(sessions_port, "item_text", refuse)
    monkeypatch.setattr(search_rules, "item_text", refuse)  # SQLite's, at the next search
    with ownstate.connect(local_url) as client:
        session = client.session_stores.create("quiet", index_items=False).add(actor_id="u")
        appended = session.append_items([{"role": "user", "content": "unsearched"}])
        assert [i.data for i in session.list_items()] == [a.data for a in appended]
        assert client.session_stores.search_items("unsearched") == []
        loud = client.session_stores.create("loud").add(actor_id="u")

        def append_and_search() -> None:
            # at the append, or (SQLite) at the search that indexes what it queued
            loud.append_items([{"role": "user", "content": "searched"}])
            client.session_stores.search_items("searched")

        with pytest.raises(AssertionError, match="search text"):
            append_and_search()


def test_an_item_that_contains_itself_is_refused(client: ownstate.Client) -> None:
    session = client.session_stores.create("chats").add(actor_id="u")
    looped: dict[str, object] = {"role": "user"}
    looped["content"] = [looped]
    with pytest.raises(ownstate.InvalidInput, match="not JSON-serialisable"):
        session.append_items([looped])
    assert list(session.list_items()) == []
