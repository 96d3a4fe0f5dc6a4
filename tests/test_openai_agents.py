"""The OpenAI Agents SDK adapter on every backend: the Session protocol side by side with
the SDK's own SQLiteSession, real ``Runner.run`` turns over a scripted model, and the
approval flow across two clients."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    SessionSettings,
    SQLiteSession,
    function_tool,
)
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.memory import Session
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import ownstate
from ownstate.adapters.openai_agents import (
    DEFAULT_STORE,
    OwnstateSession,
    PendingApproval,
    StaleApproval,
)
from ownstate.errors import (
    ActiveRunExists,
    InvalidInput,
    LeaseHeld,
    LimitExceeded,
    RunClosed,
    RunNotFound,
    StoreNotFound,
)
from ownstate.testing import Target

CONFIG = RunConfig(tracing_disabled=True)

ITEMS: list[TResponseInputItem] = [
    {"role": "user", "content": "I need a refund ✓"},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "Which order?", "annotations": []}]},
    {"role": "user", "content": "Order 42"},
    {"type": "function_call", "call_id": "call_1", "name": "lookup", "id": "fc_1",
     "arguments": "{\"order\": 42}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "{\"total\": 40}"},
    {"role": "assistant", "content": "Order 42 cost 40."},
    {"role": "user", "content": [{"type": "input_text", "text": "Refund it"}]},
    {"role": "assistant", "content": "Done."},
]


# a scripted model: canned responses, no network ------------------------------------------


class CannedModel(Model):
    """Answers each call with the next canned output and records the input it was given."""

    def __init__(self, *outputs: TResponseOutputItem) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                           previous_response_id: Any, conversation_id: Any,
                           prompt: Any) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input if isinstance(input, list) else [input]))
        return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("streaming is not scripted")
        yield  # pragma: no cover  (makes this an async generator)


def say(text: str, item_id: str = "msg_a") -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])])


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(id=f"fc_{call_id}", call_id=call_id, type="function_call",
                                    name=name, arguments=json.dumps(arguments))


def support_agent(model: Model, refunds: list[int]) -> Agent[Any]:
    """The agent as each process builds it: same name, same tool (which needs approval)."""

    @function_tool(needs_approval=True)
    def refund(amount: int) -> str:
        """Refund an amount to the customer."""
        refunds.append(amount)
        return f"refunded {amount}"

    return Agent(name="support", instructions="Help with refunds.", model=model, tools=[refund])


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


def texts(items: list[Any]) -> list[str]:
    """The readable text of model input items, for asserting what the model saw."""
    found = []
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            found.append(content)
        elif isinstance(content, list):
            found.extend(part.get("text", "") for part in content)
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            found.append(str(item.get("output")))
    return found


@pytest.fixture
def other_client(target: Target) -> Iterator[ownstate.Client]:
    """A second client on the same database: another process, as far as ownstate knows."""
    c = ownstate.connect(target.url)
    yield c
    c.close()


# the Session protocol, side by side with SQLiteSession -----------------------------------


async def protocol_script(session: Any) -> list[Any]:
    """Every Session operation in an order that exercises its edges; returns each answer."""
    seen: list[Any] = [await session.get_items(), await session.pop_item()]
    await session.clear_session()
    await session.add_items(ITEMS[:3])
    await session.add_items([])
    await session.add_items(ITEMS[3:6])
    for limit in (None, 0, 1, 2, 6, 7, 1000):
        seen.append(await session.get_items(limit=limit))
    seen.append(await session.get_items(3))
    seen.append(await session.pop_item())
    seen.append(await session.get_items(2))
    await session.clear_session()
    seen += [await session.get_items(), await session.get_items(1), await session.pop_item()]
    await session.add_items(ITEMS[6:])
    await session.add_items(ITEMS[:1])
    seen.append(await session.get_items())
    while (item := await session.pop_item()) is not None:
        seen.append(item)
    seen += [await session.get_items(), await session.pop_item()]
    return seen


def test_session_protocol_matches_sqlite_session(client: ownstate.Client) -> None:
    ours = OwnstateSession("conv-1", client)
    reference = SQLiteSession("conv-1")
    assert isinstance(ours, Session)
    assert run(protocol_script(ours)) == run(protocol_script(reference))
    reference.close()


def test_session_settings_limit_matches_sqlite_session(client: ownstate.Client) -> None:
    async def script(session: Any) -> list[Any]:
        await session.add_items(ITEMS)
        return [await session.get_items(), await session.get_items(limit=5),
                await session.get_items(limit=0), await session.get_items(limit=None),
                session.session_settings.limit]

    ours = OwnstateSession("conv-1", client, session_settings=SessionSettings(limit=3))
    as_dict = OwnstateSession("conv-2", client, session_settings={"limit": 3})
    reference = SQLiteSession("conv-1", session_settings=SessionSettings(limit=3))
    expected = run(script(reference))
    assert expected[0] == ITEMS[-3:]
    assert run(script(ours)) == expected
    assert run(script(as_dict)) == expected
    reference.close()


def test_sessions_are_isolated_like_sqlite_sessions(client: ownstate.Client,
                                                     tmp_path: Any) -> None:
    async def script(a: Any, b: Any, c: Any) -> list[Any]:
        await a.add_items(ITEMS[:2])
        await b.add_items(ITEMS[2:5])
        await c.add_items(ITEMS[5:])
        seen = [await a.get_items(), await b.get_items(), await c.get_items(1)]
        seen.append(await b.pop_item())
        await a.clear_session()
        seen += [await a.get_items(), await b.get_items(), await c.get_items()]
        return seen

    db = tmp_path / "agents.db"
    reference = [SQLiteSession(name, db) for name in ("a", "b", "c")]
    ours = [OwnstateSession("a", client), OwnstateSession("b", client),
            OwnstateSession("a", client, store="other-store")]  # same id, another store
    assert run(script(*ours)) == run(script(*reference))
    for session in reference:
        session.close()


# the read cache: another process changes the conversation between reads -------------------


async def interleaved_script(mine: Any, theirs: Any) -> list[Any]:
    """Reads through ``mine`` while ``theirs`` (another process) changes the same
    conversation between them; returns every answer."""
    seen = [await mine.get_items()]
    await theirs.add_items(ITEMS[:3])
    seen += [await mine.get_items(), await mine.get_items(2)]
    await mine.add_items(ITEMS[3:4])
    await theirs.add_items(ITEMS[4:5])
    seen += [await mine.get_items(), await mine.get_items(2), await mine.get_items(0)]
    seen.append(await theirs.pop_item())  # an item mine has read
    seen.append(await mine.get_items())
    seen.append(await theirs.pop_item())
    await theirs.add_items(ITEMS[5:7])  # other items where the popped ones were
    seen += [await mine.get_items(), await mine.get_items(1)]
    seen.append(await mine.pop_item())
    seen += [await mine.get_items(), await theirs.get_items()]
    await theirs.clear_session()
    seen += [await mine.get_items(), await mine.get_items(3), await mine.pop_item()]
    await theirs.add_items(ITEMS[7:])
    await mine.add_items(ITEMS[:2])
    seen += [await mine.get_items(), await theirs.get_items(2)]
    await mine.clear_session()
    await theirs.add_items(ITEMS[2:3])
    seen += [await theirs.get_items(), await mine.get_items(), await mine.get_items(5)]
    return seen


def test_reads_follow_changes_made_elsewhere_like_sqlite_sessions(
        client: ownstate.Client, other_client: ownstate.Client, tmp_path: Any) -> None:
    db = tmp_path / "agents.db"
    reference = [SQLiteSession("conv-x", db), SQLiteSession("conv-x", db)]
    expected = run(interleaved_script(*reference))
    for session in reference:
        session.close()
    assert expected[1] == ITEMS[:3]
    mine = OwnstateSession("conv-x", client)
    theirs = OwnstateSession("conv-x", other_client)
    assert run(interleaved_script(mine, theirs)) == expected
    # the same, with the session made by the first write of either side
    mine = OwnstateSession("conv-y", other_client)
    theirs = OwnstateSession("conv-y", client, item_cache_size=0)
    assert run(interleaved_script(mine, theirs)) == expected


def test_reads_follow_a_session_deleted_and_made_again(client: ownstate.Client,
                                                       other_client: ownstate.Client) -> None:
    mine = OwnstateSession("conv-d", client)
    run(mine.add_items(ITEMS[:3]))
    assert run(mine.get_items()) == ITEMS[:3]
    store = other_client.session_stores.get(DEFAULT_STORE)
    store.get("conv-d").delete()
    assert run(mine.get_items()) == []
    assert run(mine.pop_item()) is None
    store.add(actor_id="someone", session_id="conv-d").append_items(
        ITEMS[4:7], format="openai.responses")
    assert run(mine.get_items()) == ITEMS[4:7]
    # deleted and made again between two reads, as long as before
    store.get("conv-d").delete()
    store.add(actor_id="someone", session_id="conv-d").append_items(
        ITEMS[1:4], format="openai.responses")
    assert run(mine.get_items()) == ITEMS[1:4]
    assert run(mine.get_items(1)) == ITEMS[3:4]
    # deleted, then written by this session: made again by it
    store.get("conv-d").delete()
    run(mine.add_items(ITEMS[:1]))
    assert run(mine.get_items()) == ITEMS[:1]
    assert store.get("conv-d").actor_id == "openai-agents"


def test_another_frameworks_items_between_reads(client: ownstate.Client,
                                                other_client: ownstate.Client) -> None:
    mine = OwnstateSession("conv-f", client)
    run(mine.add_items(ITEMS[:2]))
    assert run(mine.get_items()) == ITEMS[:2]
    handle = other_client.session_stores.get(DEFAULT_STORE).get("conv-f")
    handle.append_items([{"type": "message", "role": "user", "content": "from elsewhere"}],
                        format="ownstate.message")
    converted = handle.history(as_format="openai.responses")
    assert converted[:2] == ITEMS[:2]
    assert converted[-1]["content"] == "from elsewhere"
    assert run(mine.get_items()) == converted
    assert run(mine.get_items(1)) == converted[-1:]
    run(mine.add_items(ITEMS[2:3]))
    assert run(mine.get_items()) == converted + ITEMS[2:3]
    assert run(mine.pop_item()) == ITEMS[2]
    assert run(mine.get_items()) == converted


def test_changing_returned_items_changes_no_later_read(client: ownstate.Client) -> None:
    session = OwnstateSession("conv-m", client)
    given = copy.deepcopy(ITEMS)
    run(session.add_items(given))
    given[1]["content"][0]["text"] = "changed by the caller after add_items"
    for limit in (None, 3, None, 3):  # a cold read, then warm ones
        handed = run(session.get_items(limit))
        for item in handed:
            item["role"] = "tampered"
            content = item.get("content")
            if isinstance(content, list):
                content[0]["text"] = "tampered"
                content.append({"type": "input_text", "text": "injected"})
        handed.append({"role": "user", "content": "injected"})
        assert run(session.get_items()) == ITEMS
        assert run(session.get_items(3)) == ITEMS[-3:]
    popped = run(session.pop_item())
    assert popped == ITEMS[-1]
    popped["content"] = "tampered"
    assert run(session.get_items()) == ITEMS[:-1]


def test_a_warm_read_fetches_only_the_new_items(client: ownstate.Client,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    session = OwnstateSession("conv-w", client)
    run(session.add_items([{"role": "user", "content": f"m{i}"} for i in range(50)]))
    assert len(run(session.get_items())) == 50
    fetched: list[int] = []
    original = client.backend.list_items

    async def counting(*args: Any, **kwargs: Any) -> Any:
        found = await original(*args, **kwargs)
        fetched.append(len(found))
        return found

    monkeypatch.setattr(client.backend, "list_items", counting)
    run(session.add_items(ITEMS[:2]))
    assert run(session.get_items())[-3:] == [{"role": "user", "content": "m49"}, *ITEMS[:2]]
    # the last item read before (which proves the cache still holds) and the two new ones
    assert fetched == [3]
    fetched.clear()
    assert run(session.get_items(2)) == ITEMS[:2]
    assert fetched == [1]
    # popping the newest item through the session keeps the rest cached; clearing it
    # leaves nothing to check
    assert run(session.pop_item()) == ITEMS[1]
    fetched.clear()
    assert run(session.get_items(1)) == ITEMS[:1]
    assert fetched == [1]
    run(session.clear_session())
    run(session.add_items(ITEMS[2:3]))
    fetched.clear()
    assert run(session.get_items()) == ITEMS[2:3]
    assert fetched == [1]
    run(session.add_items([{"role": "user", "content": f"m{i}"} for i in range(50)]))
    # the cache is bounded: a history longer than item_cache_size is read whole each time
    small = OwnstateSession("conv-w", client, item_cache_size=10)
    fetched.clear()
    for _ in range(2):
        assert len(run(small.get_items())) == 51
    assert fetched == [51, 51]
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(InvalidInput):
            OwnstateSession("conv-w", client, item_cache_size=bad)  # type: ignore[arg-type]


def test_items_are_stored_as_given_in_one_ownstate_session(client: ownstate.Client) -> None:
    session = OwnstateSession("case-456", client, store="support-agents",
                              actor_id="customer-123", metadata={"channel": "web"})
    assert (session.store, session.actor_id) == ("support-agents", "customer-123")
    run(session.add_items(ITEMS))
    stored = client.session_stores.get("support-agents").get("case-456")
    assert stored.actor_id == "customer-123"
    assert stored.metadata == {"channel": "web"}
    items = list(stored.list_items(order_by="create_time asc"))
    assert [i.data for i in items] == ITEMS
    assert {i.format for i in items} == {"openai.responses"}
    assert [i.role for i in items][:3] == ["user", "assistant", "user"]
    # an existing session is used as it is, whatever actor the adapter would give it
    again = OwnstateSession("case-456", client, store="support-agents", actor_id="someone")
    assert run(again.get_items(2)) == ITEMS[-2:]
    # the default store
    run(OwnstateSession("case-1", client).add_items(ITEMS[:1]))
    assert client.session_stores.get(DEFAULT_STORE).get("case-1").actor_id == "openai-agents"


def test_limited_reads_fetch_only_the_newest_items(client: ownstate.Client,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    session = OwnstateSession("long", client)
    for start in range(0, 200, 50):
        run(session.add_items([{"role": "user", "content": f"m{i}"}
                               for i in range(start, start + 50)]))
    backend = client.backend
    fetched: list[int] = []
    original = backend.list_items

    async def counting(*args: Any, **kwargs: Any) -> Any:
        found = await original(*args, **kwargs)
        fetched.append(len(found))
        return found

    monkeypatch.setattr(backend, "list_items", counting)
    assert [i["content"] for i in run(session.get_items(3))] == ["m197", "m198", "m199"]
    assert fetched == [4]  # one page: the newest three and one to see whether more exist
    fetched.clear()
    assert len(run(session.get_items())) == 200
    assert sum(fetched) == 200


def test_built_from_an_async_client_or_a_url(target: Target) -> None:
    async def with_async_client() -> list[Any]:
        async with await ownstate.connect_async(target.url) as aclient:
            session = OwnstateSession("conv-9", aclient)
            await session.add_items(ITEMS[:2])
            return await session.get_items()

    assert run(with_async_client()) == ITEMS[:2]
    session = OwnstateSession.from_url("conv-9", target.url)
    try:
        assert run(session.get_items(1)) == ITEMS[1:2]
        run(session.add_items(ITEMS[2:3]))
        assert run(session.pop_item()) == ITEMS[2]
    finally:
        session.close()
    with pytest.raises(InvalidInput):
        OwnstateSession.from_url("not valid!", target.url)


def test_bad_input_is_refused_and_changes_nothing(client: ownstate.Client) -> None:
    fresh = OwnstateSession("fresh", client)
    # refused before the first write could create a store or a session
    for bad in ([{"ok": 1}, {"bad": float("nan")}], [ITEMS[0], "text"], [{"x": object()}]):
        with pytest.raises(InvalidInput):
            run(fresh.add_items(bad))  # type: ignore[arg-type]
    with pytest.raises(StoreNotFound):
        client.session_stores.get(DEFAULT_STORE)

    session = OwnstateSession("conv-1", client)
    run(session.add_items(ITEMS[:2]))
    for bad_items in ("text", {"role": "user"}, None, [ITEMS[2], {"n": float("inf")}]):
        with pytest.raises(InvalidInput):
            run(session.add_items(bad_items))  # type: ignore[arg-type]
    with pytest.raises(LimitExceeded):
        run(session.add_items([{"role": "user", "content": "x"}] * 1001))
    for bad_limit in (-1, True, "2", 1.5):
        with pytest.raises(InvalidInput):
            run(session.get_items(limit=bad_limit))  # type: ignore[arg-type]
    assert run(session.get_items()) == ITEMS[:2]

    with pytest.raises(InvalidInput):
        OwnstateSession("has space", client)
    with pytest.raises(InvalidInput):
        OwnstateSession("ok", client, store="No")
    with pytest.raises(InvalidInput):
        OwnstateSession("ok", client, actor_id="")
    with pytest.raises(InvalidInput):
        OwnstateSession("ok", client, session_settings={"limit": -1})
    with pytest.raises(TypeError):
        OwnstateSession("ok", "sqlite:///x.db")  # type: ignore[arg-type]
    assert [s.session_id for s in client.session_stores.get(DEFAULT_STORE).list_sessions()] \
        == ["conv-1"]


def _raised(call: Any) -> type[BaseException] | None:
    try:
        run(call())
    except Exception as exc:  # the type is what is compared
        return type(exc)
    return None


def test_type_refusals_are_type_errors_as_in_sqlite_session(client: ownstate.Client) -> None:
    """What SQLiteSession refuses with TypeError, OwnstateSession refuses with an error
    that is a TypeError and an InvalidInput, storing nothing."""
    reference = SQLiteSession("conv-t")
    ours = OwnstateSession("conv-t", client)
    run(ours.add_items(ITEMS[:1]))
    for bad in ([{"x": object()}], [ITEMS[1], object()], object(), [{"n": {1, 2}}]):
        assert _raised(lambda bad=bad: reference.add_items(bad)) is TypeError
        with pytest.raises(TypeError) as refused:
            run(ours.add_items(bad))
        assert isinstance(refused.value, InvalidInput)
        assert refused.value.field == "items"
    assert run(ours.get_items()) == ITEMS[:1]
    assert run(reference.get_items()) == []
    reference.close()

    for settings in ({"limitt": 1}, {"limit": 2, "extra": True}, 5):
        with pytest.raises(TypeError) as sdk:
            SQLiteSession("conv-s", session_settings=settings)  # type: ignore[arg-type]
        with pytest.raises(TypeError) as mine:
            OwnstateSession("conv-s", client, session_settings=settings)  # type: ignore[arg-type]
        assert isinstance(mine.value, InvalidInput)
        assert str(sdk.value) in str(mine.value)


def test_every_call_after_close_raises_as_in_sqlite_session(client: ownstate.Client) -> None:
    reference = SQLiteSession("conv-c")
    ours = OwnstateSession("conv-c", client)
    run(ours.add_items(ITEMS[:2]))
    run(reference.add_items(ITEMS[:2]))
    reference.close()
    ours.close()
    ours.close()  # closing again does nothing
    calls = [lambda s: s.get_items(), lambda s: s.get_items(0), lambda s: s.get_items(-1),
             lambda s: s.add_items([]), lambda s: s.add_items(ITEMS[2:3]),
             lambda s: s.pop_item(), lambda s: s.clear_session()]
    for call in calls:
        assert _raised(lambda call=call: call(reference)) is RuntimeError
        with pytest.raises(RuntimeError, match="OwnstateSession is closed"):
            run(call(ours))
    with pytest.raises(RuntimeError, match="OwnstateSession is closed"):
        ours.run_hooks()
    with pytest.raises(RuntimeError, match="OwnstateSession is closed"):
        run(ours.cancel_approval("run-1"))
    # the client passed in stays open, and nothing stored changed
    assert run(OwnstateSession("conv-c", client).get_items()) == ITEMS[:2]


# Runner.run over the session --------------------------------------------------------------


def test_runner_keeps_history_across_turns(client: ownstate.Client) -> None:
    async def two_turns(session: Any) -> tuple[CannedModel, list[Any]]:
        model = CannedModel(say("Hello Ada.", "msg_1"), say("Your name is Ada.", "msg_2"))
        agent = Agent(name="assistant", instructions="Be brief.", model=model)
        first = await Runner.run(agent, "My name is Ada.", session=session, run_config=CONFIG)
        assert first.final_output == "Hello Ada."
        second = await Runner.run(agent, "What is my name?", session=session,
                                  run_config=CONFIG)
        assert second.final_output == "Your name is Ada."
        return model, await session.get_items()

    model, history = run(two_turns(OwnstateSession("conv-ada", client)))
    assert texts(model.inputs[1]) == ["My name is Ada.", "Hello Ada.", "What is my name?"]
    reference = SQLiteSession("conv-ada")
    _, expected = run(two_turns(reference))
    reference.close()
    assert history == expected
    assert len(history) == 4
    stored = client.session_stores.get(DEFAULT_STORE).get("conv-ada")
    items = list(stored.list_items(order_by="create_time asc"))
    assert [(i.role, i.format) for i in items] == [
        ("user", "openai.responses"), ("assistant", "openai.responses")] * 2


def test_runner_run_sync_over_a_sync_client(client: ownstate.Client) -> None:
    model = CannedModel(say("One."), say("Two."))
    agent = Agent(name="assistant", model=model)
    session = OwnstateSession("conv-sync", client)
    try:
        assert Runner.run_sync(agent, "first", session=session,
                               run_config=CONFIG).final_output == "One."
        # run_sync reuses its loop after shutting down its async generators
        assert Runner.run_sync(agent, "second", session=session,
                               run_config=CONFIG).final_output == "Two."
    finally:
        # run_sync leaves the thread's default loop open on purpose; close it here
        asyncio.get_event_loop_policy().get_event_loop().close()
        asyncio.set_event_loop(None)
    assert texts(model.inputs[1]) == ["first", "One.", "second"]


# human approvals across two clients --------------------------------------------------------


async def interrupted(session: OwnstateSession, refunds: list[int], *calls: Any) -> Any:
    """Client A: run until the agent asks to refund, and hold the run for a human."""
    agent = support_agent(CannedModel(*calls), refunds)
    result = await Runner.run(agent, "Refund my order", session=session, run_config=CONFIG)
    assert result.interruptions
    assert result.final_output is None
    return result


def test_approval_flow_across_two_clients(client: ownstate.Client,
                                          other_client: ownstate.Client) -> None:
    refunds: list[int] = []
    session_a = OwnstateSession("case-7", client, actor_id="customer-7")
    result = run(interrupted(session_a, refunds, call("refund", {"amount": 40}, "call_1")))
    held = run(session_a.hold_for_approval(result))
    assert held.status == "awaiting_human"
    assert (held.framework, held.thread_key, held.actor_id) == ("openai.agents", "case-7",
                                                                "customer-7")
    assert held.awaiting is not None
    assert held.awaiting["kind"] == "approval"
    assert held.awaiting["tool"] == "refund"
    assert held.awaiting["requests"] == [{"call_id": "call_1", "tool": "refund",
                                          "arguments": "{\"amount\": 40}", "agent": "support"}]
    assert held.awaiting["requested_by"] == "support"
    assert refunds == []
    checkpoint = client.checkpoints.get(held.checkpoint_scope())
    assert checkpoint is not None
    assert checkpoint.type_tag == "json"
    assert json.loads(checkpoint.payload)["current_agent"]["name"] == "support"

    # client B: finds it, approves, resumes with the real Runner
    [waiting] = other_client.runs.outstanding(framework="openai.agents")
    assert waiting.run_id == held.run_id
    session_b = OwnstateSession(waiting.session_id, other_client, store=waiting.store)
    model_b = CannedModel(say("Refunded 40.", "msg_done"))

    async def approve_and_resume() -> Any:
        pending = await session_b.load_approval(waiting.run_id, support_agent(model_b, refunds))
        assert [(i.name, i.call_id) for i in pending.interruptions] == [("refund", "call_1")]
        assert pending.requests == held.awaiting["requests"]
        pending.approve("call_1")
        return pending, await session_b.resume_from_approval(pending, run_config=CONFIG)

    pending, resumed = run(approve_and_resume())
    assert resumed.final_output == "Refunded 40."
    assert refunds == [40]
    assert "refunded 40" in texts(model_b.inputs[0])
    done = other_client.runs.get(held.run_id)
    assert (done.status, done.awaiting, done.lease_owner) == ("done", None, None)
    assert other_client.runs.outstanding() == []
    history = run(session_a.get_items())
    assert [i.get("type", "message") for i in history] == [
        "message", "function_call", "function_call_output", "message"]
    assert texts(history) == ["Refund my order", "refunded 40", "Refunded 40."]

    # resuming the same decision again is refused and changes nothing
    with pytest.raises(RunClosed):
        run(session_b.resume_from_approval(pending, run_config=CONFIG))
    with pytest.raises(RunClosed):
        run(session_b.load_approval(held.run_id, support_agent(CannedModel(), refunds)))
    assert refunds == [40]
    assert run(session_a.get_items()) == history
    assert other_client.runs.get(held.run_id).status == "done"


def test_rejection_tells_the_model_and_runs_no_tool(client: ownstate.Client,
                                                    other_client: ownstate.Client) -> None:
    refunds: list[int] = []
    session_a = OwnstateSession("case-8", client)
    result = run(interrupted(session_a, refunds, call("refund", {"amount": 90}, "call_9")))
    held = run(session_a.hold_for_approval(result, requested_by="refund-bot"))
    assert held.awaiting is not None
    assert held.awaiting["requested_by"] == "refund-bot"

    [waiting] = other_client.runs.outstanding()
    session_b = OwnstateSession(waiting.session_id, other_client, store=waiting.store)
    model_b = CannedModel(say("I cannot refund that; a manager will call you."))

    async def reject_and_resume() -> Any:
        pending = await session_b.load_approval(waiting.run_id, support_agent(model_b, refunds))
        pending.reject(message="Refunds over 50 need a manager.")
        return await session_b.resume_from_approval(pending, run_config=CONFIG)

    resumed = run(reject_and_resume())
    assert resumed.final_output == "I cannot refund that; a manager will call you."
    assert refunds == []
    assert texts(model_b.inputs[0])[-1] == "Refunds over 50 need a manager."
    assert other_client.runs.get(held.run_id).status == "done"
    assert other_client.runs.outstanding() == []


def test_cancelling_closes_the_run_without_resuming(client: ownstate.Client,
                                                    other_client: ownstate.Client) -> None:
    refunds: list[int] = []
    session_a = OwnstateSession("case-9", client)
    result = run(interrupted(session_a, refunds, call("refund", {"amount": 5}, "call_5")))
    held = run(session_a.hold_for_approval(result))
    before = run(session_a.get_items())
    session_b = OwnstateSession("case-9", other_client)
    cancelled = run(session_b.cancel_approval(held.run_id))
    assert cancelled.status == "cancelled"
    assert other_client.runs.outstanding() == []
    with pytest.raises(RunClosed):
        run(session_b.cancel_approval(held.run_id))
    with pytest.raises(RunClosed):
        run(session_b.load_approval(held.run_id, support_agent(CannedModel(), refunds)))
    assert run(session_a.get_items()) == before
    assert refunds == []
    # the session takes a new run once the old one is closed
    again = run(interrupted(session_a, refunds, call("refund", {"amount": 6}, "call_6")))
    assert run(session_a.hold_for_approval(again)).status == "awaiting_human"


def test_a_second_pause_makes_older_approvals_stale(client: ownstate.Client,
                                                    other_client: ownstate.Client) -> None:
    refunds: list[int] = []
    session_a = OwnstateSession("case-10", client)
    result = run(interrupted(session_a, refunds, call("refund", {"amount": 10}, "call_a")))
    held = run(session_a.hold_for_approval(result))
    session_b = OwnstateSession("case-10", other_client)
    agent_c = support_agent(CannedModel(say("Both refunded.")), refunds)
    stale: PendingApproval = run(session_a.load_approval(held.run_id, agent_c))

    # B approves the first refund; the agent then asks for a second one: paused again
    agent_b = support_agent(CannedModel(call("refund", {"amount": 20}, "call_b")), refunds)

    async def approve_first() -> Any:
        pending = await session_b.load_approval(held.run_id, agent_b)
        pending.approve()
        return await session_b.resume_from_approval(pending, run_config=CONFIG)

    second = run(approve_first())
    assert [i.call_id for i in second.interruptions] == ["call_b"]
    assert refunds == [10]
    paused = other_client.runs.get(held.run_id)
    assert paused.status == "awaiting_human"
    assert paused.awaiting is not None
    assert paused.awaiting["revision"] == 2
    assert [r["call_id"] for r in paused.awaiting["requests"]] == ["call_b"]

    # an approval loaded before the second pause is refused and the pause stays as it was
    stale.approve()
    with pytest.raises(StaleApproval):
        run(session_a.resume_from_approval(stale, run_config=CONFIG))
    now = other_client.runs.get(held.run_id)
    assert now.status == "awaiting_human"
    assert now.lease_owner is None
    assert now.awaiting is not None
    assert now.awaiting["requests"] == paused.awaiting["requests"]
    assert now.awaiting["requested_by"] == paused.awaiting["requested_by"]
    assert refunds == [10]

    async def approve_second() -> Any:
        pending = await session_a.load_approval(held.run_id, agent_c)
        assert (pending.revision, pending.checkpoint_id) == (2, "run-state-2")
        pending.approve("call_b")
        return await session_a.resume_from_approval(pending, run_config=CONFIG)

    assert run(approve_second()).final_output == "Both refunded."
    assert refunds == [10, 20]
    assert client.runs.get(held.run_id).status == "done"
    history = run(session_b.get_items())  # each step stored once, across three processes
    assert [(i.get("type", "message"), i.get("call_id")) for i in history] == [
        ("message", None), ("function_call", "call_a"), ("function_call_output", "call_a"),
        ("function_call", "call_b"), ("function_call_output", "call_b"), ("message", None)]


def test_approval_refusals_change_nothing(client: ownstate.Client,
                                          other_client: ownstate.Client) -> None:
    refunds: list[int] = []
    session = OwnstateSession("case-11", client)

    async def finished() -> Any:
        agent = support_agent(CannedModel(say("Hi.")), refunds)
        return await Runner.run(agent, "Hello", session=session, run_config=CONFIG)

    with pytest.raises(InvalidInput):  # nothing to approve
        run(session.hold_for_approval(run(finished())))
    with pytest.raises(InvalidInput):
        run(session.hold_for_approval("not a result"))  # type: ignore[arg-type]
    assert list(client.runs.list()) == []

    result = run(interrupted(session, refunds, call("refund", {"amount": 1}, "call_1")))
    held = run(session.hold_for_approval(result))
    with pytest.raises(ActiveRunExists):  # one active run per session
        run(session.hold_for_approval(result))
    assert [r.run_id for r in client.runs.list()] == [held.run_id]

    agent = support_agent(CannedModel(say("ok")), refunds)
    with pytest.raises(RunNotFound):
        run(session.load_approval("run_unknown", agent))
    with pytest.raises(RunNotFound):  # a run of another session is not found from here
        run(OwnstateSession("case-12", client).load_approval(held.run_id, agent))
    with pytest.raises(InvalidInput):  # a state the given agent cannot restore
        run(session.load_approval(held.run_id, Agent(name="someone-else")))

    async def bad_decisions() -> None:
        pending = await session.load_approval(held.run_id, agent)
        with pytest.raises(InvalidInput):
            pending.approve("call_nope")
        with pytest.raises(InvalidInput):
            pending.reject("call_1", message=7)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            await session.resume_from_approval(pending, session=session)
        with pytest.raises(InvalidInput):
            await OwnstateSession("case-12", client).resume_from_approval(pending)
        # another worker holds the run: loading and resuming are refused
        other_client.runs.resume(held.run_id, owner="replica-2")
        with pytest.raises(LeaseHeld):
            await session.load_approval(held.run_id, agent)
        with pytest.raises(LeaseHeld):
            await session.resume_from_approval(pending, run_config=CONFIG)

    run(bad_decisions())
    now = client.runs.get(held.run_id)
    assert (now.status, now.lease_owner) == ("running", "replica-2")
    assert refunds == []
    assert len(run(session.get_items())) == 4  # the finished turn and the held one


def test_the_lease_is_heartbeated_while_the_runner_runs(client: ownstate.Client,
                                                       other_client: ownstate.Client) -> None:
    refunds: list[int] = []
    session = OwnstateSession("case-14", client)
    held = run(session.hold_for_approval(
        run(interrupted(session, refunds, call("refund", {"amount": 2}, "call_2")))))
    claims: list[str] = []

    class SlowModel(CannedModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            await asyncio.sleep(0.45)  # well past the 0.3 s lease, unless it is extended
            try:
                other_client.runs.resume(held.run_id, owner="thief")
                claims.append("taken")
            except LeaseHeld as held_by:
                claims.append(str(held_by.owner))
            return await super().get_response(*args, **kwargs)

    async def resume() -> Any:
        pending = await session.load_approval(
            held.run_id, support_agent(SlowModel(say("Done.")), refunds))
        pending.approve()
        return await session.resume_from_approval(pending, owner="worker-1", lease_ttl=0.3,
                                                  run_config=CONFIG)

    assert run(resume()).final_output == "Done."
    assert claims == ["worker-1"]
    assert client.runs.get(held.run_id).status == "done"


def test_a_failing_resume_closes_the_run_failed(client: ownstate.Client) -> None:
    refunds: list[int] = []
    session = OwnstateSession("case-13", client)
    held = run(session.hold_for_approval(
        run(interrupted(session, refunds, call("refund", {"amount": 3}, "call_3")))))
    model = CannedModel()  # no answer scripted: the model call fails

    async def resume() -> None:
        pending = await session.load_approval(held.run_id, support_agent(model, refunds))
        pending.approve()
        await session.resume_from_approval(pending, run_config=CONFIG)

    with pytest.raises(IndexError):
        run(resume())
    assert client.runs.get(held.run_id).status == "failed"


# runs recorded by run hooks --------------------------------------------------------------


def test_run_hooks_record_each_run_and_approvals_park_that_run(client: ownstate.Client
                                                               ) -> None:
    session = OwnstateSession("case-hooks", client)
    model = CannedModel(say("Hello."), call("refund", {"amount": 5}, "call_h"))
    refunds: list[int] = []
    agent = support_agent(model, refunds)

    first = run(Runner.run(agent, "hi", session=session, hooks=session.run_hooks(),
                           run_config=CONFIG))
    assert first.final_output == "Hello."
    (done,) = client.runs.list(framework="openai.agents")
    assert (done.status, done.thread_key) == ("done", "case-hooks")

    paused = run(Runner.run(agent, "refund please", session=session,
                            hooks=session.run_hooks(), run_config=CONFIG))
    assert paused.interruptions
    (running,) = client.runs.outstanding(status="running")
    held = run(session.hold_for_approval(paused))
    assert held.run_id == running.run_id  # the hooks' run is the one that waits
    assert [r.run_id for r in client.runs.outstanding()] == [held.run_id]
    assert len(list(client.runs.list(framework="openai.agents"))) == 2


def test_run_hooks_record_nothing_while_another_framework_runs(client: ownstate.Client
                                                               ) -> None:
    session = OwnstateSession("case-busy", client)
    run(session.add_items([{"role": "user", "content": "hi"}]))
    handle = client.session_stores.get("openai-agents").get("case-busy")
    other = client.runs.open_run(handle, "langgraph")
    agent = support_agent(CannedModel(say("Hello.")), [])
    result = run(Runner.run(agent, "hi again", session=session, hooks=session.run_hooks(),
                            run_config=CONFIG))
    assert result.final_output == "Hello."
    assert [r.run_id for r in client.runs.list()] == [other.run_id]
    assert client.runs.get(other.run_id).status == "running"
