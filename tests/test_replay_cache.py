"""The replay cache of the SQL backends (see ``backends/_replay.py``): every replay it
serves is what the database holds, whoever changed it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import ownstate


@pytest.fixture(params=["sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(kind: str, make_url: Callable[[str], str]) -> str:
    return make_url(kind)


def _with_cache(url: str, items: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}replay_cache={items}"


def _replay(session: ownstate.Session) -> list[Any]:
    return [(i.seq, i.item_id, i.data) for i in session.list_items(order_by="create_time asc")]


def test_replays_see_every_change_made_anywhere(url: str) -> None:
    with ownstate.connect(url) as reader, ownstate.connect(url) as writer:
        store = reader.session_stores.create("replays")
        mine = store.add(actor_id="a", session_id="s")
        theirs = writer.session_stores.get("replays").get("s")
        mine.append_items([{"n": n} for n in range(5)])
        first = _replay(mine)
        assert [d["n"] for _, _, d in first] == [0, 1, 2, 3, 4]
        first[0][2]["n"] = "changed by the caller"  # returned data is the caller's own
        assert _replay(mine) == _replay(theirs)
        assert _replay(mine)[0][2] == {"n": 0}

        theirs.append_items([{"n": 5}])  # appended elsewhere: read as new
        assert [d["n"] for _, _, d in _replay(mine)] == [0, 1, 2, 3, 4, 5]
        theirs.pop_item()
        theirs.pop_item()
        theirs.append_items([{"n": "new 5"}, {"n": "new 6"}])  # seq 5 and 6 reused
        assert _replay(mine) == _replay(theirs)
        assert [d["n"] for _, _, d in _replay(mine)][-3:] == [3, "new 5", "new 6"]

        theirs.clear()
        theirs.append_items([{"n": n} for n in range(7)])  # same length, other items
        assert _replay(mine) == _replay(theirs)
        assert [d["n"] for _, _, d in _replay(mine)] == list(range(7))

        theirs.delete()
        again = writer.session_stores.get("replays").add(actor_id="a", session_id="s")
        again.append_items([{"n": "reborn"}])
        assert [d for _, _, d in _replay(mine)] == [{"n": "reborn"}]
        again.delete()
        with pytest.raises(ownstate.SessionNotFound):
            _replay(mine)


def test_replays_page_through_long_sessions_and_small_caches(url: str) -> None:
    for cache in ("0", "3", "20000"):
        with ownstate.connect(_with_cache(url, cache)) as client:
            store = client.session_stores.create(f"pages-{cache}")
            sessions = [store.add(actor_id="a") for _ in range(3)]
            for n, session in enumerate(sessions):
                session.append_items([{"n": k} for k in range(5 + n)])
            for _ in range(2):
                for n, session in enumerate(sessions):
                    paged = [i.data["n"] for token in _tokens(session, 2)
                             for i in session.list_items_page(order_by="create_time asc",
                                                              page_size=2,
                                                              page_token=token).items]
                    assert paged == list(range(5 + n))
                    assert [i.data["n"] for i in session.list_items(
                        order_by="create_time asc")] == list(range(5 + n))


def _tokens(session: ownstate.Session, size: int) -> list[str | None]:
    tokens: list[str | None] = [None]
    while True:
        page = session.list_items_page(order_by="create_time asc", page_size=size,
                                       page_token=tokens[-1])
        if page.next_page_token is None:
            return tokens
        tokens.append(page.next_page_token)


def test_a_session_made_again_in_a_reused_slot_is_read_afresh(url: str) -> None:
    """SQLite may give a new session the internal id of the last one deleted."""
    with ownstate.connect(url) as reader, ownstate.connect(url) as writer:
        mine = reader.session_stores.create("replays").add(actor_id="a", session_id="s")
        mine.append_items([{"n": n} for n in range(3)])
        assert [d["n"] for _, _, d in _replay(mine)] == [0, 1, 2]
        writer.session_stores.get("replays").get("s").delete()
        again = writer.session_stores.get("replays").add(actor_id="a", session_id="s")
        again.append_items([{"n": n} for n in ("a", "b", "c", "d")])
        assert _replay(mine) == _replay(again)


def test_replays_hand_every_caller_its_own_copy_of_what_is_stored(url: str) -> None:
    """Data served from the cache is exactly what was appended, and no caller's change to
    it (however deep) shows in another replay, held at the same time or made later."""
    deep: Any = "bottom"
    for level in range(126):
        deep = [deep] if level % 2 else {"k": deep}
    values: list[Any] = [
        {"role": "user", "content": [{"type": "input_text", "text": "caf\u00e9 \U0001f600"}]},
        {"ints": [0, -1, 2**63 - 1, -(2**63)], "floats": [0.1, -0.0, 1e300, 2.5e-300, 1.0],
         "flags": [True, False, None], "empty": [{}, [], ""], "escaped": "a\u0000b\"\\"},
        {}, {"v": []}, {"v": "just text"}, {"v": 42}, {"v": 1.5}, {"v": None}, {"v": deep},
    ]
    with ownstate.connect(url) as client:
        session = client.session_stores.create("copies").add(actor_id="a")
        session.append_items(values[:4])
        session.append_items(values[4:])

        def replay() -> list[Any]:
            return [i.data for i in session.list_items(order_by="create_time asc")]

        expected = json.dumps(values)
        held = [replay() for _ in range(3)]  # the first fills the cache
        assert all(json.dumps(r) == expected for r in held)
        held[1][0]["content"][0]["text"] = "changed"
        held[1][1]["ints"].append(7)
        held[1][8]["v"][0]["k"] = "cut"
        held[2][1]["empty"][0]["new"] = 1
        assert json.dumps(held[0]) == expected == json.dumps(replay())
        session.append_items([{"after": [1]}])  # read afresh, then served from the cache
        for _ in range(2):
            again = replay()
            assert json.dumps(again) == json.dumps([*values, {"after": [1]}])
            again[-1]["after"].append(2)
