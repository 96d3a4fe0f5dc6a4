"""Distillation on every backend, against a local OpenAI-compatible chat-completions server.

The server (tests/chat_server.py) is a real HTTP server whose "model" extracts facts from
the messages it is sent; it checks every request with the ``openai`` package's request
types. Each test asserts what is stored afterwards: the facts, their provenance, the
watermark, and the run that recorded the pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from chat_server import ChatServer
from click.testing import CliRunner

import ownstate
from ownstate import Candidate, Fact, Item
from ownstate.cli import cli
from ownstate.distill import ChatCompletionsExtractor

SUBJECT = "user:8814"
WATERMARK = "ownstate:distill"


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.stop()


@pytest.fixture
def server(chat: ChatServer) -> Iterator[ChatServer]:
    chat.reset()
    yield chat
    assert chat.rejected == []  # every request was a valid chat-completions request


@pytest.fixture
def extractor(server: ChatServer) -> Iterator[ChatCompletionsExtractor]:
    with ChatCompletionsExtractor("test-model", base_url=server.base_url, api_key="sk-test",
                                  timeout=5) as made:
        yield made


@pytest.fixture
def mem(client: ownstate.Client) -> ownstate.MemoryStore:
    return client.memory_stores.create("support-memory")


@pytest.fixture
def chat_session(client: ownstate.Client) -> ownstate.Session:
    return client.session_stores.create("support").add(actor_id=SUBJECT, session_id="case-1")


def say(session: ownstate.Session, *texts: str, role: str = "user") -> list[Item]:
    return session.append_items([{"type": "message", "role": role, "content": text}
                                 for text in texts])


def facts(mem: ownstate.MemoryStore) -> dict[str, Any]:
    return {f.key: f.value for f in mem.recall(SUBJECT)}


def everything(mem: ownstate.MemoryStore) -> list[Fact]:
    """Every fact of the store, history included (the watermark's too)."""
    found = []
    for subject in (SUBJECT, WATERMARK):
        for fact in mem.recall(subject):
            found += mem.history(subject, fact.key)
    return sorted(found, key=lambda f: f.fact_id)


def watermark(mem: ownstate.MemoryStore, session: ownstate.Session) -> Any:
    found = mem.recall(WATERMARK, [f"{session.store}/{session.session_id}"])
    return found[0].value["seq"] if found else None


def distill_runs(client: ownstate.Client, session: ownstate.Session) -> list[ownstate.Run]:
    return list(client.runs.list(session=session, framework="ownstate.distill"))


def test_a_pass_learns_facts_with_their_items_and_records_a_run(
        client: ownstate.Client, mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        server: ChatServer, extractor: ChatCompletionsExtractor) -> None:
    first, _, third = say(chat_session, "Hi, my city is Paris", "how are you?",
                          "and my favourite colour is green")
    say(chat_session, "my city is Lyon", role="assistant")  # the assistant's words are no fact
    done = mem.distill(chat_session, extractor=extractor)
    assert facts(mem) == {"city": "Paris", "favourite_colour": "green"}
    by_key = {f.key: f for f in done.facts}
    assert by_key["city"].source_item_id == first.item_id
    assert by_key["favourite_colour"].source_item_id == third.item_id
    assert {(f.source_store, f.source_session_id, f.source_type) for f in done.facts} == {
        ("support", "case-1", "pipeline")}
    assert by_key["city"].confidence == 0.9
    assert (done.from_seq, done.to_seq, done.items_read) == (0, 4, 4)
    assert watermark(mem, chat_session) == 4
    (run,) = distill_runs(client, chat_session)
    assert (run.run_id, run.status, run.thread_key, run.step_count) == (
        done.run_id, "done", "support-memory", 1)
    outcome = client.runs.get_effect(run.run_id, "outcome")
    assert outcome is not None
    assert outcome.result["status"] == "done"
    assert outcome.result["written"] == 2
    # what the server received was a valid chat-completions request, with the API key
    assert server.rejected == []
    assert server.authorization == ["Bearer sk-test"]
    assert server.requests[0]["model"] == "test-model"
    assert server.item_ids_sent() == [i.item_id for i in chat_session.list_items(
        order_by="create_time asc")]


def test_a_second_pass_sends_only_the_new_items(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session, server: ChatServer,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris", "my dog is Rex")
    mem.distill(chat_session, extractor=extractor)
    new = say(chat_session, "my job is plumber")
    done = mem.distill(chat_session, extractor=extractor)
    assert server.item_ids_sent() == [new[0].item_id]
    assert (done.from_seq, done.to_seq, done.items_read) == (2, 3, 1)
    assert facts(mem) == {"city": "Paris", "dog": "Rex", "job": "plumber"}
    # the model was shown the known facts, so it can reuse their keys
    prompt = server.requests[-1]["messages"][1]["content"]
    assert '- city = "Paris"' in prompt


def test_a_rerun_with_nothing_new_writes_nothing_and_opens_no_run(
        client: ownstate.Client, mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        server: ChatServer, extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris")
    mem.distill(chat_session, extractor=extractor)
    before = everything(mem)
    again = mem.distill(chat_session, extractor=extractor)
    assert (again.run_id, again.items_read, again.facts) == (None, 0, [])
    assert everything(mem) == before
    assert len(server.requests) == 1
    assert len(distill_runs(client, chat_session)) == 1


def test_a_candidate_equal_to_the_current_value_writes_no_fact(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris")
    mem.distill(chat_session, extractor=extractor)
    (current,) = mem.history(SUBJECT, "city")
    say(chat_session, "as I said, my city is Paris")
    done = mem.distill(chat_session, extractor=extractor)
    assert (done.facts, done.unchanged, done.items_read) == ([], 1, 1)
    assert mem.history(SUBJECT, "city") == [current]
    assert watermark(mem, chat_session) == 2  # the watermark still moves on


def test_a_new_value_supersedes_the_current_one_with_its_exact_item(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris")
    mem.distill(chat_session, extractor=extractor)
    (old,) = mem.recall(SUBJECT)
    say(chat_session, "hello again")
    moved = say(chat_session, "I moved: my city is Rome now")[0]
    done = mem.distill(chat_session, extractor=extractor)
    (new,) = done.facts
    assert (new.value, new.supersedes, new.source_item_id) == ("Rome", old.fact_id,
                                                               moved.item_id)
    why = mem.explain(new.fact_id)
    assert why.superseded is not None
    assert why.superseded.fact_id == old.fact_id
    assert why.source_item is not None
    assert why.source_item.item_id == moved.item_id
    assert [f.value for f in mem.history(SUBJECT, "city")] == ["Paris", "Rome"]


def test_the_latest_item_wins_among_candidates_for_one_key(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        extractor: ChatCompletionsExtractor) -> None:
    _, last = say(chat_session, "my city is Paris", "no wait, my city is Nice")
    (fact,) = mem.distill(chat_session, extractor=extractor).facts
    assert (fact.value, fact.source_item_id) == ("Nice", last.item_id)
    assert len(mem.history(SUBJECT, "city")) == 1


def test_candidates_below_the_threshold_are_skipped(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "maybe my city is Paris", "my age is 41")
    done = mem.distill(chat_session, extractor=extractor, min_confidence=0.5)
    assert facts(mem) == {"age": 41}
    assert done.below_threshold == 1
    say(chat_session, "maybe my pet is Tom")
    mem.distill(chat_session, extractor=extractor, min_confidence=0.2)
    assert facts(mem) == {"age": 41, "pet": "Tom"}


@pytest.mark.parametrize("mode", ["status", "not_json", "wrong_shape", "refusal", "slow"])
def test_a_failing_endpoint_fails_the_run_and_writes_nothing(
        target: Any, client: ownstate.Client, mem: ownstate.MemoryStore,
        chat_session: ownstate.Session, server: ChatServer, mode: str) -> None:
    if mode in ("not_json", "wrong_shape", "refusal") and target.name != "memory":
        pytest.skip("reading the answer is the extractor's part, the same on every backend")
    say(chat_session, "my city is Paris")
    with ChatCompletionsExtractor("m", base_url=server.base_url) as first:
        mem.distill(chat_session, extractor=first)
    say(chat_session, "my city is Rome", "my dog is Rex")
    before = everything(mem)
    server.mode, server.delay = mode, 2.0
    timeout = 0.3 if mode == "slow" else 10  # a loaded machine must not turn a 500 into one
    with ChatCompletionsExtractor("m", base_url=server.base_url, timeout=timeout) as failing, \
            pytest.raises(ownstate.ExtractorFailed) as caught:
        mem.distill(chat_session, extractor=failing)
    reason = {"status": "status", "slow": "timeout", "refusal": "refused"}.get(mode,
                                                                               "malformed")
    assert caught.value.reason == reason
    assert everything(mem) == before
    assert watermark(mem, chat_session) == 1
    failed = distill_runs(client, chat_session)[0]
    assert (failed.run_id, failed.status) == (caught.value.run_id, "failed")
    outcome = client.runs.get_effect(failed.run_id, "outcome")
    assert outcome is not None
    assert outcome.result["error"]["code"] == "extractor_failed"
    assert outcome.result["status"] == "failed"
    assert outcome.result["written"] == 0
    assert "Rome" not in outcome.result["error"]["message"]  # no payload in the record
    # once the endpoint answers again, the next pass reads the same items
    server.mode = "ok"
    with ChatCompletionsExtractor("m", base_url=server.base_url) as working:
        done = mem.distill(chat_session, extractor=working)
    assert (done.from_seq, done.items_read) == (1, 2)
    assert facts(mem) == {"city": "Rome", "dog": "Rex"}


def test_a_failure_after_some_slices_keeps_the_slices_written_whole(
        client: ownstate.Client, mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        server: ChatServer, extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris", "my dog is Rex", "my job is baker", "my car is red")
    server.mode, server.fail_after = "fail_after", 1
    with pytest.raises(ownstate.ExtractorFailed):
        mem.distill(chat_session, extractor=extractor, batch_size=2)
    assert facts(mem) == {"city": "Paris", "dog": "Rex"}
    assert watermark(mem, chat_session) == 2
    (run,) = distill_runs(client, chat_session)
    assert (run.status, run.step_count) == ("failed", 2)
    server.mode = "ok"
    done = mem.distill(chat_session, extractor=extractor, batch_size=2)
    assert (done.from_seq, done.to_seq) == (2, 4)
    assert server.item_ids_sent()[0] == chat_session.list_items_page(
        order_by="create_time asc").items[2].item_id
    assert facts(mem) == {"city": "Paris", "dog": "Rex", "job": "baker", "car": "red"}


class Scripted:
    """An extractor in plain Python (the protocol allows any), proposing fixed candidates."""

    def __init__(self, propose: Any) -> None:
        self.propose = propose

    def extract(self, items: Sequence[Item], *, subject: str,
                known: Sequence[Fact]) -> list[Candidate]:
        result: list[Candidate] = self.propose(items, subject)
        return result


def test_a_slice_whose_facts_cannot_be_stored_writes_nothing_not_even_the_watermark(
        client: ownstate.Client, mem: ownstate.MemoryStore,
        chat_session: ownstate.Session) -> None:
    (item,) = say(chat_session, "hello")
    good = Candidate(SUBJECT, "city", "Paris", 0.9, (item.item_id,))
    bad = Candidate(SUBJECT, "blob", "x" * (client.limits.max_item_bytes + 10), 0.9,
                    (item.item_id,))
    with pytest.raises(ownstate.LimitExceeded):
        mem.distill(chat_session, extractor=Scripted(lambda items, subject: [good, bad]))
    assert everything(mem) == []
    assert distill_runs(client, chat_session)[0].status == "failed"


def test_an_extractor_error_is_recorded_without_its_text(
        client: ownstate.Client, mem: ownstate.MemoryStore,
        chat_session: ownstate.Session) -> None:
    say(chat_session, "my secret is hunter2")

    def propose(items: Sequence[Item], subject: str) -> list[Candidate]:
        raise ValueError(f"cannot read {items[0].data}")

    with pytest.raises(ValueError, match="hunter2"):
        mem.distill(chat_session, extractor=Scripted(propose))
    (run,) = distill_runs(client, chat_session)
    outcome = client.runs.get_effect(run.run_id, "outcome")
    assert outcome is not None
    assert outcome.result["error"] == {"code": "ValueError", "message": ""}
    assert run.status == "failed"
    assert everything(mem) == []


def test_candidates_about_others_or_citing_other_items_are_rejected(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session) -> None:
    (item,) = say(chat_session, "hello")

    def propose(items: Sequence[Item], subject: str) -> list[Candidate]:
        return [Candidate("user:admin", "role", "superuser", 1.0, (item.item_id,)),
                Candidate(subject, "city", "Paris", 0.9, ("itm_elsewhere",)),
                Candidate(subject, "city", "Paris", 0.9, ()),
                Candidate(subject, " ", "Paris", 0.9, (item.item_id,)),
                Candidate(subject, "city", "Paris", 1.5, (item.item_id,)),
                Candidate(subject, "lang", "fr", 0.8, (item.item_id,))]

    done = mem.distill(chat_session, extractor=Scripted(propose))
    assert (done.rejected, [f.key for f in done.facts]) == (5, ["lang"])
    assert mem.recall("user:admin") == []


def test_a_session_with_another_active_run_is_refused(
        client: ownstate.Client, mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris")
    agent = client.runs.open_run(chat_session, "langgraph", "t-1")
    with pytest.raises(ownstate.ActiveRunExists):
        mem.distill(chat_session, extractor=extractor)
    assert everything(mem) == []
    client.runs.close_run(agent.run_id, "done")
    assert mem.distill(chat_session, extractor=extractor).facts


def test_a_crashed_pass_whose_lease_lapsed_is_closed_as_failed(
        client: ownstate.Client, mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris")
    crashed = client.runs.open_run(chat_session, "ownstate.distill", "support-memory",
                                   owner="gone", ttl=0.05)
    time.sleep(0.1)
    done = mem.distill(chat_session, extractor=extractor)
    assert facts(mem) == {"city": "Paris"}
    assert client.runs.get(crashed.run_id).status == "failed"
    outcome = client.runs.get_effect(crashed.run_id, "outcome")
    assert outcome is not None
    assert outcome.result["error"]["code"] == "abandoned"
    assert client.runs.get(str(done.run_id)).status == "done"


def test_a_history_rewritten_below_the_watermark_is_read_again(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session, server: ChatServer,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris", "my dog is Rex")
    mem.distill(chat_session, extractor=extractor)
    chat_session.pop_item()
    replaced = say(chat_session, "my dog is Fido")  # takes seq 2, the watermark's seq
    done = mem.distill(chat_session, extractor=extractor)
    assert done.from_seq == 0
    assert replaced[0].item_id in server.item_ids_sent()
    assert facts(mem) == {"city": "Paris", "dog": "Fido"}
    assert len(mem.history(SUBJECT, "city")) == 1  # read again, written once


def test_the_subject_can_be_chosen(
        mem: ownstate.MemoryStore, chat_session: ownstate.Session,
        extractor: ChatCompletionsExtractor) -> None:
    say(chat_session, "my city is Paris")
    mem.distill(chat_session, extractor=extractor, subject="account:ACME")
    assert [f.value for f in mem.recall("account:ACME")] == ["Paris"]
    assert mem.recall(SUBJECT) == []


@pytest.mark.parametrize("bad", [{"min_confidence": 1.5}, {"min_confidence": True},
                                 {"batch_size": 0}, {"subject": ""},
                                 {"extractor": object()}])
def test_bad_arguments_are_refused_before_anything_is_read(
        target: Any, client: ownstate.Client, mem: ownstate.MemoryStore,
        chat_session: ownstate.Session, extractor: ChatCompletionsExtractor,
        bad: dict[str, Any]) -> None:
    if target.name != "memory":
        pytest.skip("arguments are checked before any backend is called")
    say(chat_session, "my city is Paris")
    with pytest.raises(ownstate.InvalidInput):
        mem.distill(chat_session, **{"extractor": extractor, **bad})
    assert everything(mem) == []
    assert distill_runs(client, chat_session) == []


def test_the_async_client_distills_too(target: Any, server: ChatServer,
                                       extractor: ChatCompletionsExtractor) -> None:
    if target.name not in ("memory", "sqlite"):
        pytest.skip("one async run is enough: the pass is the same code on every backend")

    async def scenario() -> dict[str, Any]:
        async with await target.connect_async() as aclient:
            amem = await aclient.memory_stores.create("async-memory")
            session = await (await aclient.session_stores.create("s-async")).add(
                actor_id=SUBJECT)
            await session.append_items([{"role": "user", "content": "my city is Oslo"}])

            class Async:
                async def extract(self, items: Sequence[Item], *, subject: str,
                                  known: Sequence[Fact]) -> list[Candidate]:
                    return await asyncio.to_thread(extractor.extract, items,
                                                   subject=subject, known=known)

            await amem.distill(session, extractor=Async())
            await session.append_items([{"role": "user", "content": "my dog is Rex"}])
            await amem.distill(session, extractor=extractor)  # a plain one, in a thread
            return {f.key: f.value for f in await amem.recall(SUBJECT)}

    assert asyncio.run(scenario()) == {"city": "Oslo", "dog": "Rex"}


def test_the_command_distills_a_session_and_recent_sessions(
        tmp_path: Any, server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    with ownstate.connect(url) as client:
        client.memory_stores.create("facts")
        store = client.session_stores.create("chats")
        say(store.add(actor_id="user:1", session_id="a"), "my city is Paris")
        say(store.add(actor_id="user:2", session_id="b"), "my city is Rome")
    monkeypatch.setenv("OWNSTATE_DISTILL_API_KEY", "sk-cli")
    runner = CliRunner()
    base = ["--url", url, "memory", "distill", "--store", "facts", "--model", "m",
            "--base-url", server.base_url]
    one = runner.invoke(cli, [*base, "--session", "a"])
    assert one.exit_code == 0, one.output
    assert "chats/a: read 1 items (seq 1-1), wrote 1 facts" in one.output
    assert server.authorization == ["Bearer sk-cli"]
    recent = runner.invoke(cli, [*base, "--since", "1h"])
    assert recent.exit_code == 0, recent.output
    assert "chats/a: nothing new" in recent.output
    assert "chats/b: read 1 items" in recent.output
    with ownstate.connect(url) as client:
        mem = client.memory_stores.get("facts")
        assert [f.value for f in mem.recall("user:2")] == ["Rome"]
        say(client.session_stores.get("chats").get("a"), "my dog is Rex")
    server.mode = "status"
    failed = runner.invoke(cli, [*base, "--session", "a"])
    assert failed.exit_code == 1
    assert "chats/a: failed:" in failed.output
    assert "answered 500" in failed.output
    listed = runner.invoke(cli, ["--url", url, "runs", "list", "--status", "failed",
                                 "--framework", "ownstate.distill"])
    assert listed.exit_code == 0, listed.output
    (row,) = listed.output.splitlines()[1:]
    assert "chats/a" in row
    assert "failed" in row
    usage = runner.invoke(cli, [*base])
    assert usage.exit_code == 2
    assert "--session ID or --since" in usage.output
