"""What an append works out per item, and what it leaves until a store needs it."""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from pathlib import Path

import pytest

import ownstate
from ownstate import limits
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


class _Label(str):
    pass


class _Count(int):
    pass


class _Ratio(float):
    pass


class _Record(dict):  # type: ignore[type-arg]
    pass


class _Masked(dict):  # type: ignore[type-arg]
    """A dict that shows JSON other items than it holds."""

    def items(self) -> list[tuple[str, str]]:  # type: ignore[override]
        return [("role", "masked")]


def _nested(depth: int, leaf: object = 1, *, tuples: bool = False) -> object:
    """``depth`` levels of arrays (tuples with ``tuples``) and objects around ``leaf``."""
    value: object = leaf
    for n in range(depth):
        value = ((value,) if tuples else [value]) if n % 2 else {"d": value}
    return value


def _typed(value: object) -> object:
    """``value`` with the exact type of every part beside it, so that equal values of
    other types (a tuple and a list, a subclass and its base) compare unequal."""
    if isinstance(value, dict):
        return (type(value), [(type(k), k, _typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value), [_typed(v) for v in value])
    return (type(value), value)


# Items that hold more than the exact JSON types, or sit at a bound: the append copies
# only the plain ones itself, and the rest must come back as a read returns them.
ODD_ITEMS = {
    "tuple": {"role": "user", "content": ("a", ("b", 1))},
    "tuple deep inside": {"role": "user", "content": [{"parts": ("x",)}]},
    "str subclass value": {"role": _Label("user"), "content": [_Label("hi")]},
    "str subclass key": {_Label("role"): "user", "content": {_Label("k"): "v"}},
    "int subclass": {"role": "user", "n": [_Count(3)], "ok": True},
    "float subclass": {"role": "user", "x": {"y": _Ratio(0.5)}, "z": -0.0},
    "dict subclass inside": {"role": "user", "content": [_Record(a=[1, 2.5, None])]},
    "dict subclass": _Record(role="user", content="hi"),
    "dict subclass showing other items": _Masked(role="user"),
    "dict subclass showing other items inside": {"role": "user", "c": [_Masked(role="x")]},
    "int64 bounds deep inside": {"content": [{"n": [2**63 - 1, -(2**63)]}]},
    "128 deep": {"role": "user", "c": _nested(127, "leaf")},
    "128 deep in tuples": {"role": "user", "c": _nested(127, "leaf", tuples=True)},
}


@pytest.mark.parametrize("item", list(ODD_ITEMS.values()), ids=list(ODD_ITEMS))
def test_appended_items_read_back_as_returned(local_url: str, item: dict[str, object]) -> None:
    with ownstate.connect(local_url) as client:
        session = client.session_stores.create(f"odd-{uuid.uuid4().hex[:8]}",
                                               index_items=False).add(actor_id="u")
        (appended,) = session.append_items([{"role": "user", "content": "plain"}, item])[1:]
        (read,) = list(session.list_items())[:1]
        assert _typed(appended.data) == _typed(read.data)
        assert _typed(appended.data) == _typed(session.get_item(appended.item_id).data)


# What the shape check refuses, at the top and deep inside, plain and beside a subclass:
# each refused with its message and index, and nothing stored.
REFUSED = {
    "int key": ({"role": "user", 1: "a"}, "has an object key that is not a string"),
    "int key deep inside": ({"content": [{"parts": [{2: "x"}]}]},
                            "has an object key that is not a string"),
    "None key in a dict subclass": (_Record({None: 1}), "has an object key that is not a string"),
    "int past int64 deep inside": ({"content": [{"n": [1, 2**63]}]},
                                   "holds an integer outside the signed 64-bit range"),
    "int below int64 in a tuple": ({"content": ({"n": -(2**63) - 1},)},
                                   "holds an integer outside the signed 64-bit range"),
    "int subclass past int64": ({"n": _Count(2**64)},
                                "holds an integer outside the signed 64-bit range"),
    "129 deep": ({"c": _nested(128)}, "nests deeper than 128 levels"),
    "129 deep in tuples": ({"c": _nested(128, tuples=True)}, "nests deeper than 128 levels"),
    "129 deep in a dict subclass": (_Record(c=_nested(128)), "nests deeper than 128 levels"),
}


@pytest.mark.parametrize(("item", "problem"), list(REFUSED.values()), ids=list(REFUSED))
def test_the_shape_check_refuses_with_its_message(local_url: str, item: dict[str, object],
                                                  problem: str) -> None:
    with pytest.raises(ownstate.InvalidInput) as expected:
        limits.encode_json(item, field="items", index=1)
    assert str(expected.value).startswith(f"items (item 1) {problem}")
    with ownstate.connect(local_url) as client:
        session = client.session_stores.create(f"odd-{uuid.uuid4().hex[:8]}").add(actor_id="u")
        with pytest.raises(ownstate.InvalidInput) as raised:
            session.append_items([{"role": "user", "content": "fine"}, item])
        assert str(raised.value) == str(expected.value)
        assert (raised.value.field, raised.value.index) == ("items", 1)
        assert list(session.list_items()) == []


@pytest.fixture(params=["orjson", "standard"])
def encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The append's encoding with orjson (the ``speedups`` extra) and without it."""
    if request.param == "standard":
        monkeypatch.setattr(limits, "_fast_dumps", None)
    elif limits._fast_dumps is None:
        pytest.skip("orjson is not installed")
    return str(request.param)


# Every code point but the surrogates, in a key and in a value; integers at their bounds;
# floats that orjson spells otherwise than the standard encoder (1e-7 for 1e-07) and
# their neighbours; a float beside a plain item is no reason to spell the rest otherwise.
_EVERY_CHAR = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
SPELLED = [
    *({"role": "user", "content": [_EVERY_CHAR[n:n + 0x30000]]}  # each within 1 MiB
      for n in range(0, len(_EVERY_CHAR), 0x30000)),
    {_EVERY_CHAR[:0x3000]: {"": _EVERY_CHAR[:0x3000]}},
    {"n": [2**63 - 1, -(2**63), 0, -1, True, False, None], "e": [], "o": {}, "d": [[{}]]},
    {"x": [1e-07, 1e16, 1e22, 5e-324, 1.7976931348623157e308, -0.0, 0.1, 1.0, 2.5e-05]},
    {"role": "assistant", "content": [{"type": "output_text", "text": "caf\u00e9 \u2028 \x7f"}],
     "logprob": -1e-08},
    {"role": "user", "content": "\"quoted\" \\ back\\slash \n\t\r\b\f\x00\x1f"},
    {"c": _nested(127, "leaf")},
]


def test_stored_text_is_the_standard_compact_encoding(local_url: str, encoder: str) -> None:
    """What an append stores is, character for character, what ``json.dumps`` makes of the
    item (compact, ``ensure_ascii=False``), with orjson or without it."""
    expected = [json.dumps(i, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
                for i in SPELLED]
    assert limits.Limits().encode_items(SPELLED) == expected
    assert limits.Limits().encode_items_copied(SPELLED) == (expected, SPELLED)
    with ownstate.connect(local_url) as client:
        session = client.session_stores.create(f"spelled-{uuid.uuid4().hex[:8]}",
                                                 index_items=False).add(actor_id="u")
        appended = session.append_items(SPELLED)
        assert [_typed(i.data) for i in appended] == [_typed(i) for i in SPELLED]
        assert [_typed(i.data) for i in session.list_items(order_by="create_time asc")] == [
            _typed(i) for i in SPELLED]
    if local_url.startswith("sqlite"):
        with sqlite3.connect(local_url.removeprefix("sqlite:///")) as conn:
            stored = [row[0] for row in conn.execute("SELECT data FROM items ORDER BY seq")]
        assert stored == expected


# What JSON (or every datastore) cannot hold inside otherwise plain items, which orjson
# would write (NaN as null, an integer up to 2**64 - 1) or refuse in its own words: each
# refused as without orjson, in encode_json's words (None) or the size check's.
_SURROGATE = "item 1 holds text that is not valid Unicode (a lone surrogate)"
REFUSED_PLAIN = {
    "NaN deep inside": ({"role": "user", "content": [{"score": math.nan}]}, None),
    "Infinity": ({"role": "user", "x": math.inf}, None),
    "-Infinity in a list": ({"role": "user", "x": [1, -math.inf]}, None),
    "int past int64, within uint64": ({"role": "user", "n": [2**64 - 1]}, None),
    "a lone surrogate": ({"role": "user", "content": "half \ud83d"}, _SURROGATE),
    "a lone surrogate in a key": ({"role": "user", "c": {"\udfff": 1}}, _SURROGATE),
}


@pytest.mark.parametrize(("item", "message"), list(REFUSED_PLAIN.values()),
                         ids=list(REFUSED_PLAIN))
def test_plain_items_json_cannot_hold_are_refused(local_url: str, encoder: str,
                                                  item: dict[str, object],
                                                  message: str | None) -> None:
    if message is None:
        with pytest.raises(ownstate.InvalidInput) as expected:
            limits.encode_json(item, field="items", index=1)
        message = str(expected.value)
    with pytest.raises(ownstate.InvalidInput) as refused:
        limits.Limits().encode_items([{"role": "user"}, item])
    assert str(refused.value) == message
    with ownstate.connect(local_url) as client:
        session = client.session_stores.create(f"refused-{uuid.uuid4().hex[:8]}",
                                                 index_items=False).add(actor_id="u")
        with pytest.raises(ownstate.InvalidInput) as raised:
            session.append_items([{"role": "user", "content": "fine"}, item])
        assert str(raised.value) == message
        assert (raised.value.field, raised.value.index) == ("items", 1)
        assert list(session.list_items()) == []
