"""Conformance tests for names and ids: a name or id made of any character the library
accepts (``ownstate.limits``) works end to end on every backend, a remote server
included, whose paths, queries and bodies must carry it unchanged.

Star-import this module in a test file that provides a ``target`` fixture.

It may touch the public sync API, the limits and the shared fixtures, and pytest; never a
backend directly.
"""
# ruff: noqa: F403

from __future__ import annotations

from dataclasses import replace

import pytest

import ownstate
from ownstate.limits import (
    FRAMEWORK_RE,
    LABEL_KEY_RE,
    MAX_NAME_CHARS,
    MAX_SESSION_ID_CHARS,
    MAX_STORE_NAME_CHARS,
    PRINCIPAL_RE,
    SESSION_ID_RE,
    STORE_NAME_RE,
)

from .fixtures import *

Client = ownstate.Client


def _of_length(alphabet: str, length: int, first: str = "") -> str:
    """``first`` then ``alphabet`` repeated, ``length`` characters in all."""
    return (first + alphabet * length)[:length]


#: Every class of ``[a-z0-9_-]``, at both length bounds, leading with each kind.
STORE_NAMES = ["a_0-z", "_-9", "-a_", _of_length("z9_-", MAX_STORE_NAME_CHARS)]
#: Every class of session and run ids (``[A-Za-z0-9][A-Za-z0-9._:@-]*``), at both bounds;
#: an id that looks like a generated one (``ses_...``) is a valid chosen one too.
SESSION_IDS = ["case_1", "Z.9_a:B@c-d", "7", "ses_chosen",
               _of_length("a.B_c:D@e-", MAX_SESSION_ID_CHARS, first="Q")]
#: Free-text names: anything printable, including what a URL would otherwise read as
#: structure (``/ ? # % & + .``), quotes, non-ASCII letters and symbols beyond the BMP.
TEXTS = ["user:8814/é ?#%&+=.", "..", " padded ", "\"quoted\" 'and' <angled> \\back\\",
         "Ünïcödé 名前 😀", _of_length("x/?#% ", MAX_NAME_CHARS)]
FRAMEWORK = "lang_graph.v-2"
LABEL_KEY = "a.B_0:c/d-e"
PRINCIPAL = "svc.bot+ci@example.com_x-1:Y"


def test_the_ids_used_here_are_the_library_rules_own() -> None:
    """This module's ids cover the rules' every character class (a rule that grew one
    fails here, until its ids are added)."""
    assert all(STORE_NAME_RE.fullmatch(n) for n in STORE_NAMES)
    assert set("".join(STORE_NAMES)) >= {"_", "-", "a", "0"}
    assert all(SESSION_ID_RE.fullmatch(s) for s in SESSION_IDS)
    assert set("".join(SESSION_IDS)) >= set("._:@-Za9")
    assert FRAMEWORK_RE.fullmatch(FRAMEWORK)
    assert LABEL_KEY_RE.fullmatch(LABEL_KEY)
    assert PRINCIPAL_RE.fullmatch(PRINCIPAL)


@pytest.mark.parametrize("name", STORE_NAMES)
def test_store_names_of_every_allowed_character(client: Client, name: str) -> None:
    store = client.session_stores.create(name)
    assert client.session_stores.get(name).name == name
    assert [s.name for s in client.session_stores.list()] == [name]
    store.grant_permission(PRINCIPAL, "READ")
    # (a store made through a server also lists its owner, the key's principal)
    assert (PRINCIPAL, "READ") in [(g.principal, g.level) for g in store.permissions()]
    session = store.add(actor_id="a", session_id="s1")
    session.append_items([{"role": "user", "content": "hi"}])
    assert [i.data["content"] for i in client.session_stores.get(name).get("s1")
            .list_items()] == ["hi"]
    memory = client.memory_stores.create(name)
    memory.remember("user:1", "k", "v")
    assert [f.value for f in client.memory_stores.get(name).recall("user:1")] == ["v"]
    assert [s.name for s in client.memory_stores.list()] == [name]
    assert client.memory_stores.delete(name) == 1
    assert client.session_stores.delete(name, force=True) == 1
    assert list(client.session_stores.list()) == []


@pytest.mark.parametrize("session_id", SESSION_IDS)
def test_session_ids_of_every_allowed_character(client: Client, session_id: str) -> None:
    store = client.session_stores.create(STORE_NAMES[0])
    actor = TEXTS[0]
    made = store.add(actor_id=actor, session_id=session_id, metadata={LABEL_KEY: TEXTS[4]})
    assert (made.session_id, made.actor_id, made.metadata) == (
        session_id, actor, {LABEL_KEY: TEXTS[4]})
    found = client.session_stores.get(STORE_NAMES[0]).get(session_id)
    assert found.record == made.record
    items = found.append_items([{"role": "user", "content": t} for t in TEXTS])
    assert [i.session_id for i in items] == [session_id] * len(TEXTS)
    assert found.get_item(items[-1].item_id).data["content"] == TEXTS[-1]
    assert [i.data["content"] for i in found.list_items(order_by="create_time asc")] == TEXTS
    assert [s.session_id for s in store.list_sessions(actor_id=actor)] == [session_id]
    assert [s.session_id for s in store.list_sessions(metadata={LABEL_KEY: TEXTS[4]})] == [
        session_id]
    child_id = _of_length(session_id, MAX_SESSION_ID_CHARS, first="F")
    child = found.fork(up_to_item_id=items[1].item_id, session_id=child_id)
    assert (child.session_id, child.parent_session_id) == (child_id, session_id)
    assert [i.data["content"] for i in child.list_items(order_by="create_time asc")] == (
        TEXTS[:2])
    assert found.pop_item() is not None
    assert found.clear() == len(TEXTS) - 1
    assert found.delete(force=True) == 2
    with pytest.raises(ownstate.SessionNotFound):
        store.get(session_id)


@pytest.mark.parametrize("run_id", SESSION_IDS)
def test_run_ids_of_every_allowed_character(client: Client, run_id: str) -> None:
    store = client.session_stores.create(STORE_NAMES[1])
    session = store.add(actor_id="a", session_id=SESSION_IDS[1])
    thread_key, owner, tool_call_id = TEXTS[0], TEXTS[4], TEXTS[3]
    run = client.runs.open_run(session, FRAMEWORK, thread_key, run_id=run_id)
    assert (run.run_id, run.store, run.session_id, run.framework, run.thread_key) == (
        run_id, STORE_NAMES[1], SESSION_IDS[1], FRAMEWORK, thread_key)
    assert client.runs.get(run_id) == run
    lease = client.runs.resume(run_id, owner)
    assert client.runs.get(run_id).lease_owner == owner
    effect = client.runs.record_effect(run_id, tool_call_id, {"ok": TEXTS[2]},
                                       fencing_token=lease.fencing_token)
    assert (effect.run_id, effect.tool_call_id, effect.recorded) == (run_id, tool_call_id, True)
    assert client.runs.get_effect(run_id, tool_call_id) == replace(effect, recorded=False)
    awaiting = client.runs.mark_awaiting(run_id, {"kind": "approval"}, requested_by=owner,
                                         fencing_token=lease.fencing_token)
    assert awaiting.status == "awaiting_human"
    assert [r.run_id for r in client.runs.outstanding(framework=FRAMEWORK)] == [run_id]
    assert [r.run_id for r in client.runs.list_page(session=session).items] == [run_id]
    assert client.runs.close_run(run_id, "done").status == "done"


@pytest.mark.parametrize("text", TEXTS)
def test_fact_subjects_and_keys_of_every_printable_character(client: Client,
                                                             text: str) -> None:
    memory = client.memory_stores.create(STORE_NAMES[2])
    first = memory.remember(text, text, "email")
    second = memory.remember(text, text, {"channel": text})
    assert (second.subject, second.key, second.supersedes) == (text, text, first.fact_id)
    assert client.memory_stores.get(STORE_NAMES[2]).recall(text) == [second]
    assert memory.recall(text, keys=[text]) == [second]
    assert [f.fact_id for f in memory.history(text, text)] == [first.fact_id, second.fact_id]
    assert memory.get(second.fact_id) == second
    assert memory.explain(second.fact_id).fact == second
    assert [h.fact.fact_id for h in memory.search("channel", subject=text)] == [second.fact_id]
    forgotten = memory.forget(text, text)
    assert forgotten is not None
    assert forgotten.fact_id == second.fact_id
    assert memory.recall(text) == []


@pytest.mark.parametrize("session_id", SESSION_IDS)
def test_assets_of_sessions_with_ids_of_every_allowed_character(client: Client,
                                                                session_id: str) -> None:
    store = client.session_stores.create(STORE_NAMES[3])
    session = store.add(actor_id="a", session_id=session_id)
    ref = client.assets.put(b"bytes", "text/plain", session=session,
                            metadata={LABEL_KEY: TEXTS[0]})
    assert (ref.store, ref.session_id, dict(ref.metadata)) == (
        STORE_NAMES[3], session_id, {LABEL_KEY: TEXTS[0]})
    assert client.assets.get_ref(ref.asset_id) == ref
    assert client.assets.get(ref.asset_id) == b"bytes"
    assert client.assets.list(store.get(session_id)) == [ref]
    client.assets.delete(ref.asset_id)
    assert client.assets.list(session) == []
