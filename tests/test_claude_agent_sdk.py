"""The Claude Agent SDK adapter: its SessionStore conformance suite and our own contracts,
on every backend, with the SDK's own store helpers (no network, no CLI)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    SessionKey,
    SessionStore,
    fold_session_summary,
    fork_session_via_store,
    get_session_info_from_store,
    get_session_messages_from_store,
    get_subagent_messages_from_store,
    import_session_to_store,
    list_sessions_from_store,
    list_subagents_from_store,
    project_key_for_directory,
    rename_session_via_store,
    tag_session_via_store,
)
from claude_agent_sdk import (
    delete_session_via_store as sdk_delete_session,
)
from claude_agent_sdk.testing import run_session_store_conformance

import ownstate
from ownstate.adapters.claude_agent_sdk import (
    DEFAULT_STORE,
    FORMAT,
    OwnstateSessionStore,
)
from ownstate.errors import HasChildren, InvalidInput, LimitExceeded
from ownstate.testing import Target

OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")
KEY: SessionKey = {"project_key": "proj", "session_id": "sess"}


@pytest.fixture
def store(client: ownstate.Client) -> OwnstateSessionStore:
    return OwnstateSessionStore(client)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def entry(n: int, **extra: Any) -> dict[str, Any]:
    return {"type": "x", "uuid": f"u-{n}", "n": n, **extra}


# the SDK's conformance suite --------------------------------------------------------


def test_every_optional_method_is_implemented() -> None:
    for name in OPTIONAL:
        assert getattr(OwnstateSessionStore, name) is not getattr(SessionStore, name), name


def test_sdk_conformance(client: ownstate.Client) -> None:
    names = itertools.count()
    run(run_session_store_conformance(
        lambda: OwnstateSessionStore(client, store=f"conformance-{next(names)}"),
        skip_optional=frozenset()))


def test_sdk_conformance_on_an_async_client(target: Target) -> None:
    async def main() -> None:
        aclient = await ownstate.connect_async(target.url)
        try:
            names = itertools.count()
            # A cache of one transcript: every call past it reads from the database.
            await run_session_store_conformance(
                lambda: OwnstateSessionStore(aclient, store=f"conformance-{next(names)}",
                                             cache_sessions=1))
        finally:
            await aclient.close()

    run(main())


# what is stored, and where -----------------------------------------------------------


def test_entries_round_trip_exactly(store: OwnstateSessionStore) -> None:
    given = [
        {"type": "user", "uuid": "a", "z": 1, "a": 2, "message": {"role": "user",
         "content": [{"type": "text", "text": "héllo ☃ \u0000 \"q\" \\ 🐍"}]}},
        {"type": "assistant", "big": 2**63 - 1, "small": -(2**63), "neg": -0.0,
         "f": 1.0000000000000002,
         "tiny": 5e-324, "nested": [[], {}, [None, True, False]], "": "empty key"},
        {"type": "tag", "tag": ""},
        {"type": "x", "timestamp": "2025-01-01T00:00:00.000Z", "isSidechain": False},
    ]
    text = json.dumps(given)
    run(store.append(KEY, given))
    loaded = run(store.load(KEY))
    assert loaded == given
    assert json.dumps(loaded) == text  # same key order, same numbers
    loaded[0]["mutated"] = True  # what load returns is the caller's own
    assert run(store.load(KEY)) == json.loads(text)


def test_an_integer_beyond_64_bits_is_refused_and_nothing_is_stored(
        store: OwnstateSessionStore) -> None:
    run(store.append(KEY, [entry(1)]))
    with pytest.raises(InvalidInput):
        run(store.append(KEY, [entry(2), {"type": "assistant", "big": 2**70}]))
    assert run(store.load(KEY)) == [entry(1)]


def test_mapping_to_ownstate_sessions(client: ownstate.Client,
                                      store: OwnstateSessionStore) -> None:
    sid = str(uuid.uuid4())
    main: SessionKey = {"project_key": "-home-app", "session_id": sid}
    sub: SessionKey = {**main, "subpath": "subagents/agent-7"}
    run(store.append(main, [entry(1), entry(2)]))
    run(store.append(sub, [entry(3)]))

    sessions = client.session_stores.get(DEFAULT_STORE)
    session = sessions.get(store.session_id_for(main))
    assert session.session_id.startswith(sid + ".p")  # the Claude id stays readable
    assert session.actor_id == "-home-app"
    assert session.metadata == {"claude.project_key": "-home-app", "claude.session_id": sid,
                                "claude.kind": "main"}
    items = list(session.list_items(order_by="create_time asc"))
    assert [i.format for i in items] == [FORMAT, FORMAT]
    assert [i.seq for i in items] == [1, 2]
    assert [i.data for i in items] == [entry(1), entry(2)]

    child = sessions.get(store.session_id_for(sub))
    assert child.session_id != session.session_id
    assert child.metadata == {"claude.project_key": "-home-app", "claude.session_id": sid,
                              "claude.kind": "subpath", "claude.subpath": "subagents/agent-7"}
    assert [i.data for i in child.list_items()] == [entry(3)]


def test_keys_ownstate_ids_cannot_hold(store: OwnstateSessionStore) -> None:
    odd = "a.b/c d:é"
    key: SessionKey = {"project_key": "p" * 1000, "session_id": odd,
                       "subpath": "subagents/x" * 20}
    run(store.append(key, [entry(1)]))
    assert run(store.load(key)) == [entry(1)]
    main: SessionKey = {"project_key": "p" * 1000, "session_id": odd}
    assert run(store.load(main)) is None
    run(store.append(main, [entry(2)]))
    assert run(store.list_sessions("p" * 1000))[0]["session_id"] == odd
    assert run(store.list_subkeys(main)) == ["subagents/x" * 20]
    assert run(store.list_sessions("p" * 999)) == []


def test_named_store_and_tenant(target: Target) -> None:
    with target.connect() as c1, target.connect(tenant="t2") as c2:
        a = OwnstateSessionStore(c1, store="cc-a")
        b = OwnstateSessionStore(c1, store="cc-b")
        other_tenant = OwnstateSessionStore(c2, store="cc-a")
        run(a.append(KEY, [entry(1)]))
        assert a.store_name == "cc-a"
        assert run(b.load(KEY)) is None
        assert run(other_tenant.load(KEY)) is None
        assert run(other_tenant.list_sessions("proj")) == []
        assert [s.name for s in c1.session_stores.list()] == ["cc-a"]  # reads create nothing
    with pytest.raises(InvalidInput):
        OwnstateSessionStore.from_url(target.url, store="Bad Name")


# appending ---------------------------------------------------------------------------


def test_uuid_is_an_idempotency_key(client: ownstate.Client,
                                    store: OwnstateSessionStore) -> None:
    marker = {"type": "mode", "mode": "plan"}  # no uuid: appended every time
    run(store.append(KEY, [entry(1), marker, entry(2)]))
    run(store.append(KEY, [entry(2), entry(3), entry(3), marker]))  # a retried, grown batch
    run(store.append(KEY, [entry(1)]))
    assert run(store.load(KEY)) == [entry(1), marker, entry(2), entry(3), marker]
    # A store that has never seen the session learns its uuids from what is stored.
    fresh = OwnstateSessionStore(client)
    run(fresh.append(KEY, [entry(3), entry(4)]))
    assert run(store.load(KEY)) == [entry(1), marker, entry(2), entry(3), marker, entry(4)]


def test_large_batches_are_split(target: Target) -> None:
    limits = ownstate.Limits(max_batch_items=3, max_batch_bytes=2048, max_item_bytes=1024)
    with ownstate.connect(target.url, limits=limits) as c:
        store = OwnstateSessionStore(c)
        batch = [entry(n, pad="x" * 300) for n in range(10)]
        run(store.append(KEY, batch))
        assert run(store.load(KEY)) == batch
        with pytest.raises(LimitExceeded) as too_big:
            run(store.append(KEY, [entry(10), entry(11, pad="x" * 2000)]))
        assert too_big.value.index == 1
        assert run(store.load(KEY)) == batch


@pytest.mark.parametrize("bad", [
    [{"type": "x", "when": object()}],
    [{"type": "x", "n": float("nan")}],
    [{"type": "x", "tags": {"a", "b"}}],
    [{"type": "x", 1: "not a string key"}],
    [{"type": "x"}, "not an object"],
    [{"type": "x", "text": "\ud800"}],
    {"type": "x"},
    "entries",
])
def test_bad_entries_store_nothing(store: OwnstateSessionStore, bad: Any) -> None:
    with pytest.raises(InvalidInput):
        run(store.append(KEY, bad))
    assert run(store.load(KEY)) is None
    assert run(store.list_sessions("proj")) == []
    run(store.append(KEY, [entry(1)]))
    with pytest.raises(InvalidInput):
        run(store.append(KEY, [entry(2), *bad] if isinstance(bad, list) else bad))
    assert run(store.load(KEY)) == [entry(1)]


@pytest.mark.parametrize("key", [
    {"project_key": "", "session_id": "s"},
    {"project_key": "p", "session_id": ""},
    {"project_key": "p", "session_id": "s", "subpath": ""},
    {"project_key": "p", "session_id": 7},
    {"project_key": "p"},
    {"project_key": "p", "session_id": "s" * 257},
    "p/s",
])
def test_bad_keys(store: OwnstateSessionStore, key: Any) -> None:
    with pytest.raises(InvalidInput):
        run(store.append(key, [entry(1)]))
    with pytest.raises(InvalidInput):
        run(store.load(key))
    with pytest.raises(InvalidInput):
        run(store.list_sessions(""))


def test_concurrent_appends_from_two_stores(target: Target) -> None:
    with ownstate.connect(target.url) as c1, ownstate.connect(target.url) as c2:
        shared = OwnstateSessionStore(c1)
        # Two threads share one store; a third writes through another client.
        writers = {"a": shared, "b": shared, "c": OwnstateSessionStore(c2)}
        errors: list[BaseException] = []

        def write(name: str) -> None:
            async def main() -> None:
                for n in range(12):
                    await writers[name].append(KEY, [
                        {"type": "x", "uuid": f"{name}-{n}", "w": name, "n": 2 * n},
                        {"type": "x", "w": name, "n": 2 * n + 1}])
            try:
                run(main())
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(name,)) for name in writers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for reader in (shared, writers["c"]):
            loaded = run(reader.load(KEY))
            assert len(loaded) == 72
            for name in writers:
                assert [e["n"] for e in loaded if e["w"] == name] == list(range(24))
        # Each store has caught up with the others' writes.
        run(writers["c"].append(KEY, [{"type": "x", "uuid": "a-0", "w": "a", "n": 0}]))
        run(shared.append(KEY, [{"type": "x", "uuid": "c-0", "w": "c", "n": 0}]))
        assert len(run(shared.load(KEY))) == 72


def test_writes_by_others_are_seen(client: ownstate.Client) -> None:
    a, b = OwnstateSessionStore(client), OwnstateSessionStore(client)
    ts = "2025-01-01T00:00:0{}.000Z"
    run(a.append(KEY, [entry(1, timestamp=ts.format(1), customTitle="first")]))
    assert run(a.list_session_summaries("proj"))[0]["data"]["custom_title"] == "first"
    run(b.append(KEY, [entry(2, timestamp=ts.format(2), customTitle="second")]))
    assert run(a.list_session_summaries("proj"))[0]["data"]["custom_title"] == "second"
    run(a.append(KEY, [entry(2), entry(3)]))  # a knows entry 2 is there
    assert [e["n"] for e in run(b.load(KEY))] == [1, 2, 3]

    # History changed underneath (items popped through ownstate): a notices and re-reads.
    session = client.session_stores.get(DEFAULT_STORE).get(a.session_id_for(KEY))
    session.pop_item()
    session.pop_item()
    run(a.append(KEY, [entry(2), entry(4, customTitle="third")]))
    assert [e["n"] for e in run(b.load(KEY))] == [1, 2, 4]
    assert run(a.list_session_summaries("proj"))[0]["data"]["custom_title"] == "third"
    # Deleted and written again by another store.
    run(b.delete(KEY))
    run(b.append(KEY, [entry(5)]))
    run(a.append(KEY, [entry(1), entry(5)]))
    assert [e["n"] for e in run(b.load(KEY))] == [5, 1]
    summaries = run(a.list_session_summaries("proj"))
    assert "custom_title" not in summaries[0]["data"]
    assert summaries[0]["mtime"] == run(a.list_sessions("proj"))[0]["mtime"]
    # Whatever happened in between, the summary is the fold of what is stored.
    run(b.append(KEY, [entry(6, customTitle="fourth", gitBranch="dev")]))
    run(a.append(KEY, [entry(7, lastPrompt="go on", timestamp=ts.format(7))]))
    for reader in (a, b):
        [summary] = run(reader.list_session_summaries("proj"))
        assert summary["data"] == fold_session_summary(None, KEY, run(b.load(KEY)))["data"]
        assert summary["data"]["custom_title"] == "fourth"


# deleting ----------------------------------------------------------------------------


def test_forks_are_not_deleted_silently(client: ownstate.Client,
                                        store: OwnstateSessionStore) -> None:
    sub: SessionKey = {**KEY, "subpath": "subagents/agent-1"}
    run(store.append(KEY, [entry(1)]))
    run(store.append(sub, [entry(2)]))
    session = client.session_stores.get(DEFAULT_STORE).get(store.session_id_for(KEY))
    fork = session.fork()
    # The fork carries the same labels but is not the transcript: listings ignore it.
    assert [s["session_id"] for s in run(store.list_sessions("proj"))] == ["sess"]
    with pytest.raises(HasChildren):
        run(store.delete(KEY))
    assert run(store.load(KEY)) == [entry(1)]
    assert run(store.load(sub)) == [entry(2)]
    fork.delete()
    run(store.delete(KEY))
    assert run(store.load(KEY)) is None
    assert run(store.load(sub)) is None


def test_store_deleted_underneath(client: ownstate.Client,
                                  store: OwnstateSessionStore) -> None:
    sub: SessionKey = {**KEY, "subpath": "subagents/agent-1"}
    run(store.append(KEY, [entry(1)]))
    run(store.append(sub, [entry(2)]))
    client.session_stores.delete(DEFAULT_STORE, force=True)
    assert run(store.load(KEY)) is None
    assert run(store.list_sessions("proj")) == []
    assert run(store.list_session_summaries("proj")) == []
    assert run(store.list_subkeys(KEY)) == []
    run(store.delete(KEY))
    run(store.append(KEY, [entry(1)]))  # a new store, and the entry is new to it
    assert run(store.load(KEY)) == [entry(1)]
    client.session_stores.delete(DEFAULT_STORE, force=True)
    run(store.append(sub, [entry(2)]))
    assert run(store.list_subkeys(KEY)) == ["subagents/agent-1"]


# building and closing ----------------------------------------------------------------


def test_from_url(target: Target) -> None:
    store = OwnstateSessionStore.from_url(target.url, store="from-url")
    try:
        run(store.append(KEY, [entry(1)]))
        assert run(store.load(KEY)) == [entry(1)]
    finally:
        store.close()
        store.close()  # twice is fine


def test_close_closes_only_what_it_opened(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cc.db"
    with ownstate.connect(url) as client:
        borrowed = OwnstateSessionStore(client)
        run(borrowed.append(KEY, [entry(1)]))
        borrowed.close()
        assert client.session_stores.get(DEFAULT_STORE).get(borrowed.session_id_for(KEY))
        run(borrowed.append(KEY, [entry(2)]))

    owned = OwnstateSessionStore.from_url(url)
    assert run(owned.load(KEY)) == [entry(1), entry(2)]
    owned.close()
    with pytest.raises(ownstate.BackendUnavailable):
        run(owned.load({"project_key": "proj", "session_id": "other"}))


# the SDK's own helpers ---------------------------------------------------------------


def transcript(sid: str, cwd: str) -> list[dict[str, Any]]:
    u1, u2, u3, u4 = (str(uuid.uuid4()) for _ in range(4))
    base = {"sessionId": sid, "cwd": cwd, "isSidechain": False, "gitBranch": "main"}
    return [
        {"type": "user", "uuid": u1, "parentUuid": None, **base,
         "timestamp": "2025-01-01T00:00:00.000Z",
         "message": {"role": "user", "content": "Refund order 42"}},
        {"type": "assistant", "uuid": u2, "parentUuid": u1, **base,
         "timestamp": "2025-01-01T00:00:01.000Z",
         "message": {"role": "assistant", "model": "claude-x",
                     "content": [{"type": "text", "text": "Done."}]}},
        {"type": "user", "uuid": u3, "parentUuid": u2, **base,
         "timestamp": "2025-01-01T00:00:02.000Z",
         "message": {"role": "user", "content": "Thanks"}},
        {"type": "assistant", "uuid": u4, "parentUuid": u3, **base,
         "timestamp": "2025-01-01T00:00:03.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "Bye"}]}},
    ]


def test_sdk_store_helpers(store: OwnstateSessionStore, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    project = project_key_for_directory(cwd)
    sid, agent = str(uuid.uuid4()), "a1b2"
    lines = transcript(sid, cwd)
    sub_key: SessionKey = {"project_key": project, "session_id": sid,
                           "subpath": f"subagents/agent-{agent}"}
    sub_lines = [{**e, "isSidechain": True, "agentId": agent} for e in transcript(sid, cwd)[:2]]

    async def main() -> None:
        await store.append({"project_key": project, "session_id": sid}, lines[:2])
        await store.append({"project_key": project, "session_id": sid}, lines[2:])
        await store.append(sub_key, [*sub_lines, {"type": "agent_metadata",
                                                  "agentType": "researcher"}])

        messages = await get_session_messages_from_store(store, sid, directory=cwd)
        assert [m.uuid for m in messages] == [e["uuid"] for e in lines]
        assert messages[1].message["content"][0]["text"] == "Done."
        assert len(await get_session_messages_from_store(store, sid, directory=cwd,
                                                         limit=1, offset=2)) == 1

        [info] = await list_sessions_from_store(store, directory=cwd)
        assert (info.session_id, info.first_prompt, info.git_branch) == (
            sid, "Refund order 42", "main")
        assert info.last_modified == (await store.list_sessions(project))[0]["mtime"]
        single = await get_session_info_from_store(store, sid, directory=cwd)
        assert single is not None
        assert single.first_prompt == "Refund order 42"

        await rename_session_via_store(store, sid, "Refund case", directory=cwd)
        await tag_session_via_store(store, sid, "billing", directory=cwd)
        [info] = await list_sessions_from_store(store, directory=cwd)
        assert (info.custom_title, info.tag) == ("Refund case", "billing")

        assert await list_subagents_from_store(store, sid, directory=cwd) == [agent]
        sub_messages = await get_subagent_messages_from_store(store, sid, agent, directory=cwd)
        assert [m.uuid for m in sub_messages] == [e["uuid"] for e in sub_lines]

        forked = await fork_session_via_store(store, sid, directory=cwd,
                                              up_to_message_id=lines[1]["uuid"])
        fork_messages = await get_session_messages_from_store(store, forked.session_id,
                                                              directory=cwd)
        assert [m.message for m in fork_messages] == [e["message"] for e in lines[:2]]
        listed = await list_sessions_from_store(store, directory=cwd)
        assert {i.session_id for i in listed} == {sid, forked.session_id}

        await sdk_delete_session(store, sid, directory=cwd)
        assert await get_session_messages_from_store(store, sid, directory=cwd) == []
        assert await store.load(sub_key) is None
        assert [i.session_id for i in await list_sessions_from_store(store, directory=cwd)] \
            == [forked.session_id]

    run(main())


def test_import_from_disk_twice_adds_nothing_twice(store: OwnstateSessionStore,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    config, cwd = tmp_path / "config", tmp_path / "work"
    cwd.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    project = project_key_for_directory(str(cwd))
    sid = str(uuid.uuid4())
    lines = transcript(sid, str(cwd))
    project_dir = config / "projects" / project
    (project_dir / sid / "subagents").mkdir(parents=True)
    (project_dir / f"{sid}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    sub = [{**e, "isSidechain": True} for e in transcript(sid, str(cwd))]
    (project_dir / sid / "subagents" / "agent-z9.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in sub))

    async def main() -> None:
        await import_session_to_store(sid, store, directory=str(cwd), batch_size=3)
        await import_session_to_store(sid, store, directory=str(cwd), batch_size=2)
        key: SessionKey = {"project_key": project, "session_id": sid}
        assert await store.load(key) == lines
        assert await store.load({**key, "subpath": "subagents/agent-z9"}) == sub
        assert await store.list_subkeys(key) == ["subagents/agent-z9"]

    run(main())


def test_live_mirror_then_resume(store: OwnstateSessionStore, tmp_path: Path) -> None:
    """The path ``query(options=ClaudeAgentOptions(session_store=...))`` takes, short of
    the CLI: transcript_mirror frames batched into append, then a resume materialised
    from the store. These are the SDK's internal modules (no public entry point runs
    them without the CLI)."""
    from claude_agent_sdk import ClaudeAgentOptions
    from claude_agent_sdk._internal.session_resume import (
        build_mirror_batcher,
        materialize_resume_session,
    )

    config, cwd = tmp_path / "config", tmp_path / "work"
    cwd.mkdir()
    env = {"CLAUDE_CONFIG_DIR": str(config)}
    project = project_key_for_directory(str(cwd))
    sid = str(uuid.uuid4())
    lines = transcript(sid, str(cwd))
    sub = [{**e, "isSidechain": True} for e in transcript(sid, str(cwd))[:2]]
    failures: list[Any] = []

    async def on_error(key: Any, message: str) -> None:
        failures.append((key, message))

    async def main() -> None:
        batcher = build_mirror_batcher(store, None, env, on_error)
        projects = config / "projects" / project
        batcher.enqueue(str(projects / f"{sid}.jsonl"), lines[:1])
        batcher.enqueue(str(projects / f"{sid}.jsonl"), lines[1:3])
        batcher.enqueue(str(projects / sid / "subagents" / "agent-q.jsonl"), sub)
        await batcher.flush()
        batcher.enqueue(str(projects / f"{sid}.jsonl"), lines[3:])
        await batcher.close()
        assert failures == []

        for options in (ClaudeAgentOptions(cwd=str(cwd), env=env, session_store=store,
                                           resume=sid),
                        ClaudeAgentOptions(cwd=str(cwd), env=env, session_store=store,
                                           continue_conversation=True)):
            materialized = await materialize_resume_session(options)
            assert materialized is not None
            assert materialized.resume_session_id == sid
            try:
                base = materialized.config_dir / "projects" / project
                written = (base / f"{sid}.jsonl").read_text().splitlines()
                assert [json.loads(line) for line in written] == lines
                written = (base / sid / "subagents" / "agent-q.jsonl").read_text()
                assert [json.loads(line) for line in written.splitlines()] == sub
            finally:
                await materialized.cleanup()

    run(main())
