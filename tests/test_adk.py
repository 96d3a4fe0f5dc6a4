"""The Google ADK adapter over every backend: DatabaseSessionService's documented behaviour,
the memory service, and a real Runner driven by a scripted model."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Coroutine
from typing import Any, TypeVar

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.memory import InMemoryMemoryService
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.models._capabilities import LlmCapabilities
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from pydantic import Field

import ownstate
from ownstate.adapters.adk import (
    EVENT_FORMAT,
    STATE_FORMAT,
    OwnstateMemoryService,
    OwnstateSessionService,
    ownstate_session_id,
)
from ownstate.errors import InvalidInput, LimitExceeded
from ownstate.testing import Target

T = TypeVar("T")
APP = "support"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def service(client: ownstate.Client) -> OwnstateSessionService:
    return OwnstateSessionService(client)


def text_event(author: str, text: str, *, state: dict[str, Any] | None = None,
               timestamp: float | None = None, invocation: str = "inv-1") -> Event:
    extra: dict[str, Any] = {"timestamp": timestamp} if timestamp is not None else {}
    role = "user" if author == "user" else "model"
    return Event(author=author, invocation_id=invocation,
                 content=types.Content(role=role, parts=[types.Part(text=text)]),
                 actions=EventActions(state_delta=state or {}), **extra)


def stored_items(client: ownstate.Client, user: str, session_id: str) -> list[ownstate.Item]:
    session = client.session_stores.get("adk").get(ownstate_session_id(APP, user, session_id))
    return list(session.list_items(order_by="create_time asc"))


# create / get / list / delete --------------------------------------------------------------


def test_create_with_and_without_id(client: ownstate.Client,
                                    service: OwnstateSessionService) -> None:
    async def main() -> None:
        named = await service.create_session(app_name=APP, user_id="u1", session_id="s-1",
                                             state={"topic": "billing"})
        assert (named.id, named.app_name, named.user_id) == ("s-1", APP, "u1")
        assert named.state == {"topic": "billing"}
        assert named.events == []
        generated = await service.create_session(app_name=APP, user_id="u1")
        assert generated.id
        assert generated.id != named.id
        again = await service.get_session(app_name=APP, user_id="u1", session_id=generated.id)
        assert again is not None
        assert again.id == generated.id
        assert again.state == {}
        assert again.last_update_time == pytest.approx(generated.last_update_time)
        # ADK names a session by (app, user, id): another user may use the same id.
        other = await service.create_session(app_name=APP, user_id="u2", session_id="s-1")
        assert other.state == {}
        assert await service.get_session(app_name="other-app", user_id="u1",
                                         session_id="s-1") is None

    run(main())
    # A service closes only a client it opened itself.
    service.close()
    assert [s.name for s in client.session_stores.list()] == ["adk"]


def test_duplicate_id_is_refused_and_changes_nothing(service: OwnstateSessionService) -> None:
    async def main() -> None:
        await service.create_session(app_name=APP, user_id="u1", session_id="dup",
                                     state={"k": 1, "app:a": 1})
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id="u1", session_id="dup",
                                         state={"k": 2, "app:a": 2, "user:b": 2})
        session = await service.get_session(app_name=APP, user_id="u1", session_id="dup")
        assert session is not None
        assert session.state == {"k": 1, "app:a": 1}

    run(main())


def test_events_round_trip_equal(client: ownstate.Client,
                                 service: OwnstateSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="rt")
        call = Event(
            author="agent", invocation_id="inv-9", branch="root.agent",
            content=types.Content(role="model", parts=[
                types.Part(text="checking"),
                types.Part(function_call=types.FunctionCall(id="c1", name="lookup",
                                                            args={"order": 42}))]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=12, candidates_token_count=5),
            custom_metadata={"trace": "t-1"},
            actions=EventActions(state_delta={"step": 1, "nested": {"a": [1, 2]}}))
        result = Event(author="agent", invocation_id="inv-9", content=types.Content(
            role="user", parts=[types.Part(function_response=types.FunctionResponse(
                id="c1", name="lookup", response={"status": "shipped"}))]))
        sent = [text_event("user", "where is my order?"), call, result]
        for event in sent:
            await service.append_event(session, event)
        loaded = await service.get_session(app_name=APP, user_id="u1", session_id="rt")
        assert loaded is not None
        assert loaded.events == sent
        assert loaded.events == session.events
        assert loaded.state == {"step": 1, "nested": {"a": [1, 2]}}
        fresh = OwnstateSessionService(client, event_cache_size=0)
        uncached = await fresh.get_session(app_name=APP, user_id="u1", session_id="rt")
        assert uncached is not None
        assert uncached.events == sent

    run(main())
    items = stored_items(client, "u1", "rt")
    assert [i.format for i in items] == [EVENT_FORMAT] * 3
    assert items[1].data["content"]["parts"][1]["function_call"]["name"] == "lookup"


def test_get_session_config_filters(service: OwnstateSessionService) -> None:
    async def main() -> None:
        for sid, state in (("stateless", None), ("stateful", {"n": 0})):
            session = await service.create_session(app_name=APP, user_id="u1",
                                                   session_id=sid, state=state)
            for n in range(1, 6):
                delta = {"n": n} if state else {}
                await service.append_event(session, text_event(
                    "user", f"message {n}", state=delta, timestamp=1000.0 + n))

            async def get(config: GetSessionConfig | None, sid: str = sid) -> Any:
                found = await service.get_session(app_name=APP, user_id="u1",
                                                  session_id=sid, config=config)
                assert found is not None
                return [e.content.parts[0].text for e in found.events], found.state

            texts, full_state = await get(None)
            assert texts == [f"message {n}" for n in range(1, 6)]
            recent, recent_state = await get(GetSessionConfig(num_recent_events=2))
            assert recent == ["message 4", "message 5"]
            assert recent_state == full_state  # the state always covers the whole history
            assert (await get(GetSessionConfig(num_recent_events=0)))[0] == []
            assert (await get(GetSessionConfig(num_recent_events=50)))[0] == texts
            after, _ = await get(GetSessionConfig(after_timestamp=1003.0))
            assert after == ["message 3", "message 4", "message 5"]
            both, _ = await get(GetSessionConfig(after_timestamp=1002.0, num_recent_events=2))
            assert both == ["message 4", "message 5"]
            if state:
                assert full_state == {"n": 5}
        with pytest.raises(ValueError, match="num_recent_events"):
            GetSessionConfig(num_recent_events=-1)

    run(main())


def test_a_session_read_with_a_filter_can_be_appended_to(
        service: OwnstateSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="f")
        await service.append_event(session, text_event("user", "one"))
        await service.append_event(session, text_event("user", "two"))
        partial = await service.get_session(app_name=APP, user_id="u1", session_id="f",
                                            config=GetSessionConfig(num_recent_events=0))
        assert partial is not None
        assert partial.events == []
        await service.append_event(partial, text_event("user", "three", state={"x": 1}))
        # Another partial read of the now stateful session folds the whole history.
        again = await service.get_session(app_name=APP, user_id="u1", session_id="f",
                                          config=GetSessionConfig(num_recent_events=1))
        assert again is not None
        assert again.state == {"x": 1}
        assert [e.content.parts[0].text for e in again.events] == ["three"]

    run(main())


def test_list_sessions(service: OwnstateSessionService) -> None:
    async def main() -> None:
        a = await service.create_session(app_name=APP, user_id="u1", session_id="a",
                                         state={"k": "a", "app:shared": 1})
        await service.create_session(app_name=APP, user_id="u2", session_id="b",
                                     state={"user:name": "Bo"})
        await service.create_session(app_name="elsewhere", user_id="u1", session_id="c")
        await service.append_event(a, text_event("user", "hello", state={"k": "a2"}))

        mine = (await service.list_sessions(app_name=APP, user_id="u1")).sessions
        assert [s.id for s in mine] == ["a"]
        assert mine[0].events == []
        assert mine[0].state == {"k": "a2", "app:shared": 1}
        everyone = (await service.list_sessions(app_name=APP)).sessions
        # Oldest update first: "b" was made after "a" but "a" was appended to since.
        assert [(s.user_id, s.id) for s in everyone] == [("u2", "b"), ("u1", "a")]
        assert everyone[0].state == {"user:name": "Bo", "app:shared": 1}
        assert (await service.list_sessions(app_name=APP, user_id="nobody")).sessions == []

    run(main())


def test_delete_session(service: OwnstateSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="d",
                                               state={"user:keep": 1, "app:keep": 2})
        await service.append_event(session, text_event("user", "bye"))
        await service.delete_session(app_name=APP, user_id="u1", session_id="d")
        assert await service.get_session(app_name=APP, user_id="u1", session_id="d") is None
        await service.delete_session(app_name=APP, user_id="u1", session_id="d")  # no error
        with pytest.raises(SessionNotFoundError):
            await service.append_event(session, text_event("user", "anyone?"))
        assert await service.get_user_state(app_name=APP, user_id="u1") == {"keep": 1}
        other = await service.create_session(app_name=APP, user_id="u3")
        assert other.state == {"app:keep": 2}
        # The id can be used again, for a new, empty session.
        reborn = await service.create_session(app_name=APP, user_id="u1", session_id="d")
        assert reborn.events == []
        assert reborn.state == {"user:keep": 1, "app:keep": 2}

    run(main())


# state scoping ---------------------------------------------------------------------------


def test_state_scoping_across_sessions(client: ownstate.Client,
                                       service: OwnstateSessionService) -> None:
    async def main() -> None:
        s1 = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1",
            state={"own": 1, "app:greeting": "hi", "user:lang": "en", "temp:scratch": 9})
        assert s1.state == {"own": 1, "app:greeting": "hi", "user:lang": "en"}
        event = text_event("agent", "noted", state={
            "own": 2, "app:greeting": "hello", "user:lang": "fr", "temp:step": "x"})
        await service.append_event(s1, event)
        # temp: reaches the session object for the rest of the invocation, never storage.
        assert s1.state["temp:step"] == "x"
        assert "temp:step" not in event.actions.state_delta

        s2 = await service.create_session(app_name=APP, user_id="u1", session_id="s2")
        assert s2.state == {"app:greeting": "hello", "user:lang": "fr"}
        s3 = await service.create_session(app_name=APP, user_id="u2", session_id="s3")
        assert s3.state == {"app:greeting": "hello"}
        elsewhere = await service.create_session(app_name="other", user_id="u1")
        assert elsewhere.state == {}

        await service.append_event(s3, text_event("agent", "ok", state={"user:lang": "de"}))
        reread = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert reread is not None
        assert reread.state == {"own": 2, "app:greeting": "hello", "user:lang": "fr"}
        assert await service.get_user_state(app_name=APP, user_id="u2") == {"lang": "de"}
        assert await service.get_user_state(app_name=APP, user_id="nobody") == {}

    run(main())
    # Stored where the docs say: app and user state as facts naming their source event.
    facts = client.memory_stores.get("adk-state")
    user_facts = {f.key: f for f in facts.recall("u1")}
    assert user_facts[f"{APP}:user:lang"].value == "fr"
    assert user_facts[f"{APP}:user:lang"].source_item_id is not None
    assert {f.key: f.value for f in facts.recall(f"app:{APP}")} == {
        f"{APP}:app:greeting": "hello"}
    assert [f.value for f in facts.history("u1", f"{APP}:user:lang")] == ["en", "fr"]
    formats = [i.format for i in stored_items(client, "u1", "s1")]
    assert formats == [STATE_FORMAT, EVENT_FORMAT]


def test_names_with_separators_stay_apart(service: OwnstateSessionService) -> None:
    async def main() -> None:
        a = await service.create_session(app_name="a:b", user_id="u", state={"user:c": 1})
        b = await service.create_session(app_name="a", user_id="u", state={"user:b:c": 2})
        assert a.state == {"user:c": 1}
        assert b.state == {"user:b:c": 2}

    run(main())


# stale sessions ----------------------------------------------------------------------------


def test_stale_session_is_refused(target: Target, client: ownstate.Client,
                                  service: OwnstateSessionService) -> None:
    async def main() -> None:
        await service.create_session(app_name=APP, user_id="u1", session_id="st")
        first = await service.get_session(app_name=APP, user_id="u1", session_id="st")
        second = await service.get_session(app_name=APP, user_id="u1", session_id="st")
        assert first is not None
        assert second is not None
        await service.append_event(first, text_event("user", "first writer"))
        late = text_event("user", "second writer", state={"user:x": 1, "y": 2})
        with pytest.raises(StaleSessionError):
            await service.append_event(second, late)
        assert second.events == []
        assert second.state == {}
        # Another process (a fresh service) moves the session on: also detected.
        other = OwnstateSessionService.from_url(target.url)
        try:
            theirs = await other.get_session(app_name=APP, user_id="u1", session_id="st")
            assert theirs is not None
            await other.append_event(theirs, text_event("agent", "from elsewhere"))
        finally:
            other.close()
        with pytest.raises(StaleSessionError):
            await service.append_event(first, text_event("user", "too late"))
        # After reloading, appending works again.
        reloaded = await service.get_session(app_name=APP, user_id="u1", session_id="st")
        assert reloaded is not None
        await service.append_event(reloaded, text_event("user", "fresh"))
        assert [e.content.parts[0].text for e in reloaded.events] == [
            "first writer", "from elsewhere", "fresh"]
        assert await service.get_user_state(app_name=APP, user_id="u1") == {}

    run(main())
    assert len(stored_items(client, "u1", "st")) == 3


def test_concurrent_appends_at_one_revision_let_exactly_one_through(
        target: Target, service: OwnstateSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="c")
        writers = [OwnstateSessionService.from_url(target.url) for _ in range(3)]
        try:
            copies = [await w.get_session(app_name=APP, user_id="u1", session_id="c")
                      for w in writers]
            outcomes = await asyncio.gather(
                *(w.append_event(c, text_event("user", f"writer {n}", state={"n": n}))
                  for n, (w, c) in enumerate(zip(writers, copies, strict=True))
                  if c is not None),
                return_exceptions=True)
        finally:
            for w in writers:
                w.close()
        assert sum(isinstance(o, Event) for o in outcomes) == 1
        assert sum(isinstance(o, StaleSessionError) for o in outcomes) == 2
        (winner,) = [o for o in outcomes if isinstance(o, Event)]
        stored = await service.get_session(app_name=APP, user_id="u1", session_id="c")
        assert stored is not None
        assert stored.events == [winner]
        assert stored.state == winner.actions.state_delta
        assert session.events == []

    run(main())


def test_listed_or_handmade_session_objects(client: ownstate.Client,
                                            service: OwnstateSessionService) -> None:
    async def main() -> None:
        created = await service.create_session(app_name=APP, user_id="u1", session_id="l")
        # A listed session carries no events. While the stored history has none either,
        # it may be appended to...
        (listed,) = (await service.list_sessions(app_name=APP, user_id="u1")).sessions
        await service.append_event(listed, text_event("user", "one"))
        # ...but once it has some, a listed session is stale: read it with get_session.
        (listed,) = (await service.list_sessions(app_name=APP, user_id="u1")).sessions
        with pytest.raises(StaleSessionError):
            await service.append_event(listed, text_event("user", "two"))
        # A session object built by hand (or by another service) holding the same events
        # as storage is current.
        loaded = await service.get_session(app_name=APP, user_id="u1", session_id="l")
        assert loaded is not None
        handmade = type(loaded)(id="l", app_name=APP, user_id="u1",
                                events=list(loaded.events))
        await service.append_event(handmade, text_event("user", "two"))
        # The object create_session returned has seen none of this.
        with pytest.raises(StaleSessionError):
            await service.append_event(created, text_event("user", "three"))

    run(main())
    assert len(stored_items(client, "u1", "l")) == 2


def test_popped_items_do_not_wedge_a_session(client: ownstate.Client,
                                             service: OwnstateSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="p")
        await service.append_event(session, text_event("user", "keep"))
        await service.append_event(session, text_event("user", "drop"))
        # Someone removes the last item through ownstate directly.
        handle = client.session_stores.get("adk").get(ownstate_session_id(APP, "u1", "p"))
        assert handle.pop_item() is not None
        reloaded = await service.get_session(app_name=APP, user_id="u1", session_id="p")
        assert reloaded is not None
        await service.append_event(reloaded, text_event("user", "again"))
        await service.append_event(reloaded, text_event("user", "and again"))
        final = await service.get_session(app_name=APP, user_id="u1", session_id="p")
        assert final is not None
        assert [e.content.parts[0].text for e in final.events] == ["keep", "again",
                                                                   "and again"]

    run(main())


def test_redelivered_and_partial_events(client: ownstate.Client,
                                        service: OwnstateSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="r")
        event = text_event("user", "once")
        await service.append_event(session, event)
        await service.append_event(session, event)  # an equal re-delivery is a no-op
        chunk = text_event("agent", "stream")
        chunk.partial = True
        assert await service.append_event(session, chunk) is chunk
        assert session.events == [event]

    run(main())
    assert len(stored_items(client, "u1", "r")) == 1


# the read cache ---------------------------------------------------------------------------


def texts_of(session: Any) -> list[str]:
    return [e.content.parts[0].text for e in session.events]


def test_cached_reads_follow_changes_made_elsewhere(target: Target, client: ownstate.Client,
                                                    service: OwnstateSessionService) -> None:
    key = ownstate_session_id(APP, "u1", "cc")

    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="cc",
                                               state={"k": 0})
        for n in range(3):
            await service.append_event(session, text_event(
                "user", f"m{n}", state={"k": n + 1}, timestamp=1000.0 + n))

        async def read(**config: Any) -> tuple[list[str], dict[str, Any]]:
            found = await service.get_session(
                app_name=APP, user_id="u1", session_id="cc",
                config=GetSessionConfig(**config) if config else None)
            assert found is not None
            return texts_of(found), found.state

        assert await read() == (["m0", "m1", "m2"], {"k": 3})
        other = OwnstateSessionService.from_url(target.url)  # another process
        try:
            async def theirs() -> Any:
                found = await other.get_session(app_name=APP, user_id="u1", session_id="cc")
                assert found is not None
                return found

            # appended elsewhere: the next read has it, filters included
            await other.append_event(await theirs(), text_event(
                "agent", "m3", state={"k": 4, "j": 1}, timestamp=1003.0))
            assert await read() == (["m0", "m1", "m2", "m3"], {"k": 4, "j": 1})
            assert await read(num_recent_events=2) == (["m2", "m3"], {"k": 4, "j": 1})
            assert await read(after_timestamp=1002.0) == (["m2", "m3"], {"k": 4, "j": 1})
            handle = client.session_stores.get("adk").get(key)
            # popped: the event and the state it set are gone
            handle.pop_item()
            assert await read() == (["m0", "m1", "m2"], {"k": 3})
            # popped and replaced by another item at the same position
            handle.pop_item()
            await other.append_event(await theirs(), text_event("agent", "m2b",
                                                                state={"k": 9}))
            assert await read() == (["m0", "m1", "m2b"], {"k": 9})
            # cleared (the initial state went with the items), then appended to
            handle.clear()
            assert await read() == ([], {})
            await other.append_event(await theirs(), text_event("agent", "after clear"))
            assert await read() == (["after clear"], {})
            # deleted, then made again with other state
            await other.delete_session(app_name=APP, user_id="u1", session_id="cc")
            assert await service.get_session(app_name=APP, user_id="u1",
                                             session_id="cc") is None
            await other.create_session(app_name=APP, user_id="u1", session_id="cc",
                                       state={"fresh": True})
            assert await read() == ([], {"fresh": True})
            # deleted and made again between two reads, holding as many items as before
            await other.delete_session(app_name=APP, user_id="u1", session_id="cc")
            await other.create_session(app_name=APP, user_id="u1", session_id="cc",
                                       state={"again": 1})
            assert await read() == ([], {"again": 1})
            await other.delete_session(app_name=APP, user_id="u1", session_id="cc")
            await other.create_session(app_name=APP, user_id="u1", session_id="cc",
                                       state={"third": 1})
            await other.append_event(await theirs(), text_event("agent", "n0"))
            assert await read() == (["n0"], {"third": 1})
            # another framework's message: converted, and the session keeps working
            client.session_stores.get("adk").get(key).append_items(
                [{"type": "message", "role": "user", "content": "from elsewhere"}],
                format="ownstate.message")
            assert (await read())[0] == ["n0", "from elsewhere"]
            assert (await read(num_recent_events=1))[0] == ["from elsewhere"]
            loaded = await service.get_session(app_name=APP, user_id="u1", session_id="cc")
            assert loaded is not None
            await service.append_event(loaded, text_event("agent", "n1", state={"x": 1}))
            assert await read() == (["n0", "from elsewhere", "n1"], {"third": 1, "x": 1})
        finally:
            other.close()

    run(main())


def test_a_warm_read_fetches_only_the_new_items(client: ownstate.Client,
                                                service: OwnstateSessionService,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> list[int]:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="w")
        for n in range(30):
            await service.append_event(session, text_event("user", f"m{n}"))
        assert len(texts_of(await service.get_session(app_name=APP, user_id="u1",
                                                      session_id="w"))) == 30
        fetched.clear()
        await service.append_event(session, text_event("user", "new 1"))
        await service.append_event(session, text_event("user", "new 2", state={"s": 1}))
        again = await service.get_session(app_name=APP, user_id="u1", session_id="w")
        assert again is not None
        assert texts_of(again)[-3:] == ["m29", "new 1", "new 2"]
        assert len(again.events) == 32
        assert again.state == {"s": 1}
        return fetched

    fetched: list[int] = []
    original = client.backend.list_items

    async def counting(*args: Any, **kwargs: Any) -> Any:
        found = await original(*args, **kwargs)
        fetched.append(len(found))
        return found

    monkeypatch.setattr(client.backend, "list_items", counting)
    # the last item read before (which proves the cache still holds) and the two new ones
    assert run(main()) == [3]


def test_changing_a_returned_session_changes_nothing_cached(
        service: OwnstateSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="m",
                                               state={"k": {"deep": [1]}, "app:a": 1})
        await service.append_event(session, text_event("user", "one", state={"j": 1}))
        await service.append_event(session, text_event("user", "two"))

        async def read() -> Any:
            found = await service.get_session(app_name=APP, user_id="u1", session_id="m")
            assert found is not None
            return found

        first = await read()
        first.state["k"]["deep"].append(2)
        first.state["j"] = "changed"
        first.state["app:a"] = "changed"
        first.events.pop(0)
        first.events.append(text_event("user", "never stored"))
        second = await read()
        assert texts_of(second) == ["one", "two"]
        assert second.state == {"k": {"deep": [1]}, "j": 1, "app:a": 1}
        assert second.events is not first.events

    run(main())


def test_stale_sessions_are_caught_with_warm_caches(target: Target,
                                                    service: OwnstateSessionService) -> None:
    async def main() -> None:
        await service.create_session(app_name=APP, user_id="u1", session_id="race")
        other = OwnstateSessionService.from_url(target.url)  # another process
        try:
            async def read(svc: OwnstateSessionService) -> Any:
                found = await svc.get_session(app_name=APP, user_id="u1", session_id="race")
                assert found is not None
                return found

            ours, theirs = await read(service), await read(other)  # both caches warm
            await service.append_event(ours, text_event("user", "ours"))
            with pytest.raises(StaleSessionError):
                await other.append_event(theirs, text_event("user", "theirs"))
            theirs = await read(other)
            assert texts_of(theirs) == ["ours"]
            await other.append_event(theirs, text_event("agent", "theirs"))
            with pytest.raises(StaleSessionError):
                await service.append_event(ours, text_event("user", "ours again"))
            # Several rounds of both racing from fresh reads: one append through each time.
            for n in range(3):
                ours, theirs = await read(service), await read(other)
                outcomes = await asyncio.gather(
                    service.append_event(ours, text_event("user", f"ours {n}")),
                    other.append_event(theirs, text_event("agent", f"theirs {n}")),
                    return_exceptions=True)
                assert sorted(type(o).__name__ for o in outcomes) == ["Event",
                                                                     "StaleSessionError"]
            mine, yours = await read(service), await read(other)
            assert texts_of(mine) == texts_of(yours)
            assert len(mine.events) == 5
            # A re-delivered event (the same object, or an equal copy) stays a no-op with
            # a warm cache; a new one is stored.
            await service.append_event(mine, mine.events[1])
            await service.append_event(mine, Event.model_validate(
                mine.events[2].model_dump(mode="json")))
            await service.append_event(mine, text_event("user", "last"))
            assert texts_of(await read(other))[-2:] == [texts_of(mine)[-2], "last"]
            assert len((await read(other)).events) == 6
        finally:
            other.close()

    run(main())


def test_the_cache_is_bounded(client: ownstate.Client) -> None:
    small = OwnstateSessionService(client, event_cache_size=4)

    async def main() -> None:
        for sid, count in (("a", 3), ("b", 3), ("c", 6)):
            session = await small.create_session(app_name=APP, user_id="u1", session_id=sid)
            for n in range(count):
                await small.append_event(session, text_event("user", f"{sid}{n}"))
        for _ in range(2):
            for sid, count in (("a", 3), ("b", 3), ("c", 6)):
                found = await small.get_session(app_name=APP, user_id="u1", session_id=sid)
                assert found is not None
                assert texts_of(found) == [f"{sid}{n}" for n in range(count)]
                await small.append_event(found, text_event("user", f"{sid}+"))
                assert found.events[-1].content.parts[0].text == f"{sid}+"
                found.events.pop()  # so that the next round expects the same
                handle = client.session_stores.get("adk").get(
                    ownstate_session_id(APP, "u1", sid))
                handle.pop_item()
        assert small._cached_events <= 4

    run(main())
    with pytest.raises(InvalidInput):
        OwnstateSessionService(client, event_cache_size=-1)


# bad input --------------------------------------------------------------------------------


def test_bad_input_is_refused_and_changes_nothing(client: ownstate.Client,
                                                  service: OwnstateSessionService) -> None:
    async def main() -> None:
        for app, user, sid in (("", "u1", "x"), (APP, " ", "x"), (APP, "u1", "a\nb"),
                               (APP, "u1", "s" * 129)):
            with pytest.raises(InvalidInput):
                await service.create_session(app_name=app, user_id=user, session_id=sid)
        # A session id no session can have is one that does not exist, as in ADK.
        for sid in ("", "a\nb", "s" * 129):
            assert await service.get_session(app_name=APP, user_id="u1", session_id=sid) is None
        with pytest.raises(InvalidInput):
            await service.get_session(app_name="", user_id="u1", session_id="x")
        with pytest.raises(InvalidInput):
            await service.list_sessions(app_name="")
        with pytest.raises(InvalidInput):  # a state key no fact can hold
            await service.create_session(app_name=APP, user_id="u1", session_id="bad",
                                         state={"user:" + "k" * 300: 1})
        with pytest.raises(InvalidInput):  # NaN is not JSON
            await service.create_session(app_name=APP, user_id="u1", session_id="bad",
                                         state={"score": math.nan})
        assert await service.get_session(app_name=APP, user_id="u1", session_id="bad") is None
        assert (await service.list_sessions(app_name=APP)).sessions == []

        session = await service.create_session(app_name=APP, user_id="u1", session_id="ok",
                                               state={"user:n": 1})
        await service.append_event(session, text_event("user", "fine"))
        before = session.model_copy(deep=True)
        huge = text_event("user", "x" * (client.limits.max_item_bytes + 1))
        with pytest.raises(LimitExceeded):
            await service.append_event(session, huge)
        bad_state = text_event("agent", "hm", state={"user:n": 2, "temp:t": 1,
                                                     "user:bad\x01key": 3})
        with pytest.raises(InvalidInput):
            await service.append_event(session, bad_state)
        assert session == before
        assert "temp:t" in bad_state.actions.state_delta  # the event is untouched too
        reread = await service.get_session(app_name=APP, user_id="u1", session_id="ok")
        assert reread is not None
        assert reread.events == before.events
        assert reread.state == {"user:n": 1}

    run(main())
    with pytest.raises(InvalidInput):
        OwnstateSessionService(client, store="Not A Store")
    with pytest.raises(InvalidInput):
        OwnstateMemoryService(client, max_results=0)


async def _padded_ids(service: Any) -> list[Any]:
    """Session ids with surrounding whitespace and blank ones, as an ADK app may pass them."""
    seen: list[Any] = []
    made = await service.create_session(app_name=APP, user_id="u1", session_id="order-42\n")
    got = await service.get_session(app_name=APP, user_id="u1", session_id="  order-42\t")
    assert got is not None
    seen += [made.id, got.id]
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id="u1", session_id=" order-42 ")
    blank = await service.create_session(app_name=APP, user_id="u1", session_id=" \n ")
    empty = await service.create_session(app_name=APP, user_id="u1", session_id="")
    seen.append(len({blank.id, empty.id, "order-42"}) == 3
                and blank.id == blank.id.strip() != "")
    seen += [await service.get_session(app_name=APP, user_id="u1", session_id=" "),
             await service.get_session(app_name=APP, user_id="u1", session_id="")]
    padded = got.model_copy(update={"id": "order-42\n"})
    with pytest.raises(SessionNotFoundError):
        await service.append_event(padded, text_event("user", "lost"))
    await service.append_event(got, text_event("user", "hello"))
    again = await service.get_session(app_name=APP, user_id="u1", session_id="order-42 ")
    assert again is not None
    seen.append([e.content.parts[0].text for e in again.events])
    await service.delete_session(app_name=APP, user_id="u1", session_id="  ")  # nothing
    await service.delete_session(app_name=APP, user_id="u1", session_id="\torder-42\n")
    seen.append(await service.get_session(app_name=APP, user_id="u1", session_id="order-42"))
    listed = await service.list_sessions(app_name=APP, user_id="u1")
    seen.append(sorted(s.id for s in listed.sessions) == sorted([blank.id, empty.id]))
    return seen


def test_session_ids_are_stripped_as_adk_strips_them(service: OwnstateSessionService,
                                                     tmp_path: Any) -> None:
    async def main() -> None:
        expected = await _padded_ids(InMemorySessionService())
        assert expected == ["order-42", "order-42", True, None, None, ["hello"], None, True]
        sqlite = SqliteSessionService(str(tmp_path / "adk.db"))
        assert await _padded_ids(sqlite) == expected
        await sqlite.close()
        assert await _padded_ids(service) == expected

    run(main())


# memory -----------------------------------------------------------------------------------


def test_memory_service_add_and_search(client: ownstate.Client,
                                       service: OwnstateSessionService) -> None:
    memory = OwnstateMemoryService(client)

    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="m")
        for event in (text_event("user", "My favourite colour is teal."),
                      text_event("agent", "Noted: teal it is."),
                      text_event("user", "I live in Lisbon."),
                      Event(author="agent", invocation_id="inv-1")):  # no text: skipped
            await service.append_event(session, event)
        await memory.add_session_to_memory(session)
        await memory.add_session_to_memory(session)  # again: nothing new is added

        found = await memory.search_memory(app_name=APP, user_id="u1",
                                           query="Which colour is my favourite?")
        # Best first: the event sharing the most words with the query.
        assert [m.content.parts[0].text for m in found.memories] == [
            "My favourite colour is teal.", "Noted: teal it is."]
        best = found.memories[0]
        assert best.author == "user"
        assert best.id == session.events[0].id
        assert best.timestamp is not None
        lisbon = await memory.search_memory(app_name=APP, user_id="u1", query="LISBON")
        assert [m.content.parts[0].text for m in lisbon.memories] == ["I live in Lisbon."]
        assert (await memory.search_memory(app_name=APP, user_id="u2",
                                           query="teal")).memories == []
        assert (await memory.search_memory(app_name="other", user_id="u1",
                                           query="teal")).memories == []
        assert (await memory.search_memory(app_name=APP, user_id="u1",
                                           query="?!")).memories == []
        await memory.add_events_to_memory(app_name="other", user_id="u1", events=[
            text_event("user", "teal elsewhere")])
        other = await memory.search_memory(app_name="other", user_id="u1", query="teal")
        assert [m.content.parts[0].text for m in other.memories] == ["teal elsewhere"]
        with pytest.raises(InvalidInput):
            await memory.search_memory(app_name="", user_id="u1", query="teal")

    run(main())
    facts = client.memory_stores.get("adk-memory").recall("u1")
    assert len([f for f in facts if f.key.startswith(f"{APP}:")]) == 3
    mine = [f for f in facts if f.key.startswith(f"{APP}:")]
    assert all(len(client.memory_stores.get("adk-memory").history("u1", f.key)) == 1
               for f in mine)
    # Each memory names the session item it came from.
    item_ids = {i.item_id for i in stored_items(client, "u1", "m")}
    assert {f.source_item_id for f in mine} <= item_ids
    assert all(f.source_item_id for f in mine)


def _found(response: Any) -> list[tuple[str, str, str | None]]:
    return [(m.id, m.content.parts[0].text, m.author) for m in response.memories]


def test_the_same_event_remembered_from_two_sessions_is_two_memories(
        client: ownstate.Client) -> None:
    """A session and its copy (a fork, a rewind) share event ids; ADK keeps the memories of
    both, so forgetting nothing depends on which session was remembered first."""
    shared = text_event("user", "My locker code is 4711", timestamp=1000.0)
    first = Session(id="s-1", app_name=APP, user_id="u1", events=[
        shared, text_event("agent", "Noted the code.", timestamp=1001.0)])
    second = Session(id="s-2", app_name=APP, user_id="u1", events=[
        shared.model_copy(deep=True), text_event("user", "The code is 4711 again",
                                                 timestamp=1002.0)])

    async def script(memory: Any) -> list[list[tuple[str, str, str | None]]]:
        for session in (first, second, first):  # the third: nothing new
            await memory.add_session_to_memory(session)
        await memory.add_events_to_memory(app_name=APP, user_id="u1", events=[shared])
        return [_found(await memory.search_memory(app_name=APP, user_id="u1", query=q))
                for q in ("locker code 4711", "code", "noted")]

    expected = run(script(InMemoryMemoryService()))
    assert [text for _, text, _ in expected[0]].count("My locker code is 4711") == 3
    assert run(script(OwnstateMemoryService(client))) == expected
    keys = {f.key for f in client.memory_stores.get("adk-memory").recall("u1")}
    assert {f"{APP}:s-1:{shared.id}", f"{APP}:s-2:{shared.id}", f"{APP}::{shared.id}"} <= keys


def test_search_finds_words_as_in_memory_memory_service_does(client: ownstate.Client) -> None:
    texts = ["私の名前は太郎です", "私はPythonでADKを使っています", "Café au lait",
             "Cafe\u0301 noir", "python and cafe", "I drink café, python coder"]
    events = [text_event("user", t, timestamp=2000.0 + n) for n, t in enumerate(texts)]
    queries = ["太郎", "名前", "Python", "ADK", "thon", "Café", "Cafe\u0301", "CAFÉ python",
               "python café coder", "cafe", "?!", ""]

    async def script(memory: Any) -> list[list[tuple[str, str, str | None]]]:
        await memory.add_events_to_memory(app_name=APP, user_id="u1", events=events[:3],
                                          session_id="s-1")
        await memory.add_events_to_memory(app_name=APP, user_id="u1", events=events[3:],
                                          session_id="s-2")
        return [_found(await memory.search_memory(app_name=APP, user_id="u1", query=q))
                for q in queries]

    expected = run(script(InMemoryMemoryService()))
    texts_found = [[text for _, text, _ in found] for found in expected]
    assert texts_found[0] == [texts[0]]  # a word inside text written without spaces
    assert texts_found[2] == [texts[1], texts[4], texts[5]]  # oldest first among equals
    assert texts_found[5] == texts_found[6] == [texts[2], texts[3], texts[5]]
    assert run(script(OwnstateMemoryService(client))) == expected


# a real Runner ----------------------------------------------------------------------------


class ScriptedModel(BaseLlm):
    """A model that answers from a script and records how much history it was shown."""

    replies: list[str]
    seen: list[list[str]] = Field(default_factory=list)

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append([p.text or "" for c in llm_request.contents for p in c.parts or []])
        yield LlmResponse(content=types.Content(
            role="model", parts=[types.Part(text=self.replies.pop(0))]))


async def _converse(service: OwnstateSessionService, model: ScriptedModel,
                    messages: list[str], session_id: str) -> list[Event]:
    agent = LlmAgent(name="helper", model=model, instruction="Be brief.",
                     output_key="last_reply")
    runner = Runner(app_name=APP, agent=agent, session_service=service)
    events = []
    for message in messages:
        async for event in runner.run_async(
                user_id="u1", session_id=session_id,
                new_message=types.Content(role="user", parts=[types.Part(text=message)])):
            events.append(event)
    await runner.close()
    return events


def test_runner_two_turns_then_a_fresh_service_sees_everything(target: Target) -> None:
    async def main() -> None:
        client = await ownstate.connect_async(target.url)
        service = OwnstateSessionService(client)
        session = await service.create_session(app_name=APP, user_id="u1",
                                               state={"user:name": "Ana"})
        model = ScriptedModel(model="scripted", replies=["Hello Ana.", "Teal, noted."],
                              seen=[])
        produced = await _converse(service, model, ["hi", "I like teal"], session.id)
        assert [e.content.parts[0].text for e in produced] == ["Hello Ana.", "Teal, noted."]
        # The second call saw the first turn: the history came back from ownstate.
        assert model.seen[1] == ["hi", "Hello Ana.", "I like teal"]
        await client.close()

        # A new process: a new client and service on the same database.
        fresh = OwnstateSessionService.from_url(target.url)
        try:
            loaded = await fresh.get_session(app_name=APP, user_id="u1",
                                             session_id=session.id)
            assert loaded is not None
            assert [(e.author, e.content.parts[0].text) for e in loaded.events] == [
                ("user", "hi"), ("helper", "Hello Ana."),
                ("user", "I like teal"), ("helper", "Teal, noted.")]
            assert loaded.state == {"user:name": "Ana", "last_reply": "Teal, noted."}
            # And the conversation continues there.
            model2 = ScriptedModel(model="scripted", replies=["Still teal."], seen=[])
            await _converse(fresh, model2, ["remind me?"], session.id)
            assert model2.seen[0][:4] == ["hi", "Hello Ana.", "I like teal", "Teal, noted."]
        finally:
            fresh.close()

    run(main())


# invocations as runs ------------------------------------------------------------------------


def test_the_run_plugin_records_each_invocation(target: Target) -> None:
    from google.adk.apps import App

    from ownstate.adapters.adk import OwnstateRunPlugin

    async def main() -> None:
        client = await ownstate.connect_async(target.url)
        service = OwnstateSessionService(client)
        session = await service.create_session(app_name=APP, user_id="u1")
        model = ScriptedModel(model="scripted", replies=["One.", "Two.", "Three."], seen=[])
        agent = LlmAgent(name="helper", model=model, instruction="Be brief.")
        runner = Runner(app=App(name=APP, root_agent=agent,
                                plugins=[OwnstateRunPlugin(service)]),
                        session_service=service)
        for text in ["first", "second"]:
            async for _ in runner.run_async(
                    user_id="u1", session_id=session.id,
                    new_message=types.Content(role="user", parts=[types.Part(text=text)])):
                pass
        runs = [r async for r in client.runs.list()]
        assert [(r.framework, r.status, r.thread_key) for r in runs] == [
            ("adk", "done", session.id)] * 2

        # while another framework drives the session, nothing is recorded for ADK
        handle = await (await client.session_stores.get("adk")).get(
            ownstate_session_id(APP, "u1", session.id))
        other = await client.runs.open_run(handle, "langgraph")
        async for _ in runner.run_async(
                user_id="u1", session_id=session.id,
                new_message=types.Content(role="user", parts=[types.Part(text="third")])):
            pass
        assert len([r async for r in client.runs.list()]) == 3
        assert (await client.runs.get(other.run_id)).status == "running"
        await runner.close()
        await client.close()

    run(main())
