"""docs/schema.md checked against a real SQLite database.

A small, realistic database is built through the public API (conversations with
OpenAI-Responses-shaped items, a fork, runs, facts with sources, checkpoints, assets, and a
second tenant whose rows every query must leave out). Every ```sql block of the page must
run on it through a read-only connection, the main queries must return exactly what the
data says, and every table, view, index, trigger and column of a freshly migrated schema
must be named on the page.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import ownstate
from ownstate.model import PendingWrite

DOC = Path(__file__).resolve().parents[1] / "docs" / "schema.md"
DAY_1 = datetime(2025, 6, 2, tzinfo=UTC)
DAY_2 = DAY_1 + timedelta(days=1)
#: FTS5 keeps a virtual table's contents in tables named after it with these endings.
FTS5_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")


def sql_blocks() -> list[tuple[str, str]]:
    """Every ```sql block of the page, with the heading it appears under."""
    blocks: list[tuple[str, str]] = []
    heading = ""
    lines = iter(DOC.read_text().splitlines())
    for line in lines:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.strip() == "```sql":
            body: list[str] = []
            for inner in lines:
                if inner.strip() == "```":
                    break
                body.append(inner)
            blocks.append((heading, "\n".join(body)))
    return blocks


BLOCKS = sql_blocks()


def query(heading: str) -> str:
    """The single ```sql block under ``heading``."""
    found = [sql for under, sql in BLOCKS if under == heading]
    assert len(found) == 1, f"expected one sql block under {heading!r}, found {len(found)}"
    return found[0]


# the database ------------------------------------------------------------------------


class Clock:
    """The API's clock: a settable moment that moves one millisecond per reading."""

    def __init__(self) -> None:
        self.moment = DAY_1

    def at(self, moment: datetime) -> None:
        self.moment = moment

    def now(self) -> datetime:
        self.moment += timedelta(milliseconds=1)
        return self.moment


@dataclass
class Built:
    path: Path
    awaiting_run_id: str
    usage: list[tuple[str, int, int]]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]}


def assistant(text: str, model: str, tokens_in: int, tokens_out: int) -> dict[str, Any]:
    return {"id": f"msg_{tokens_in}", "type": "message", "role": "assistant",
            "status": "completed", "model": model,
            "content": [{"type": "output_text", "text": text, "annotations": []}],
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out,
                      "total_tokens": tokens_in + tokens_out}}


def call(name: str, call_id: str, arguments: str, model: str, tokens_in: int,
         tokens_out: int) -> dict[str, Any]:
    return {"id": f"fc_{call_id}", "type": "function_call", "status": "completed",
            "call_id": call_id, "name": name, "arguments": arguments, "model": model,
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out,
                      "total_tokens": tokens_in + tokens_out}}


def output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def build(path: Path, clock: Clock) -> Built:
    url = f"sqlite:///{path}"
    with ownstate.connect(url) as client, ownstate.connect(url, tenant="acme") as other:
        # another tenant, with the same names: every query must leave it out
        clock.at(DAY_1 + timedelta(hours=9))
        elsewhere = other.session_stores.create("support").add(
            actor_id="customer-123", session_id="order-1042")
        elsewhere.append_items([user("hello"), assistant("hi", "gpt-4o", 5000, 500)])
        other.memory_stores.create("support-memory").remember(
            "customer-123", "preferred_channel", "phone")
        run = other.runs.open_run(elsewhere, "langgraph")
        other.runs.mark_awaiting(run.run_id, {"kind": "approval", "tool": "issue_refund"})

        support = client.session_stores.create("support")
        memory = client.memory_stores.create("support-memory")

        clock.at(DAY_1 + timedelta(hours=8))
        memory.remember("customer-123", "preferred_channel", "sms", source_type="import")

        # day 1, 09:00: an order question answered with a tool call
        clock.at(DAY_1 + timedelta(hours=9))
        order = support.add(actor_id="customer-123", session_id="order-1042",
                            metadata={"channel": "web"})
        question, lookup = order.append_items([
            user("Where is my order 1042? Please email me updates."),
            call("lookup_order", "call_1", '{"order_id":"1042"}', "gpt-4o", 812, 23),
        ])
        clock.at(DAY_1 + timedelta(hours=9, seconds=5))
        result, _ = order.append_items([
            output("call_1", '{"order_id":"1042","status":"delayed"}'),
            assistant("Order 1042 is delayed; it should arrive Friday.", "gpt-4o", 901, 64),
        ])
        agents = client.runs.open_run(order, "openai.agents", owner="worker-1")
        client.checkpoints.put(agents.checkpoint_scope(), "ck-1", type_tag="msgpack",
                               payload=bytes(64))
        client.runs.close_run(agents.run_id, "done", usd_cost=0.0123, step_count=3,
                              fencing_token=agents.fencing_token)
        photo = b"\x89PNG\r\n\x1a\n" + bytes(120)
        client.assets.put(photo, "image/png", session=order)

        clock.at(DAY_1 + timedelta(hours=9, minutes=1))
        memory.remember("customer-123", "preferred_channel", "email", confidence=0.9,
                        source=question)
        memory.remember("customer-123", "order_status:1042", "delayed", confidence=1.0,
                        source=result)
        memory.remember("customer-123", "timezone", "Europe/Paris", source_type="user")

        # day 1, 14:00: a refund that waits for a human
        clock.at(DAY_1 + timedelta(hours=14))
        refund = support.add(actor_id="customer-456", session_id="refund-77")
        refund.append_items([
            user("I want a refund for order 77."),
            {"id": "ws_1", "type": "web_search_call", "status": "completed"},
            call("issue_refund", "call_refund_1", '{"order_id":"77","amount":40}',
                 "gpt-4o", 1200, 35),
        ])
        waiting = client.runs.open_run(refund, "langgraph", thread_key="thread-77",
                                       owner="worker-2")
        client.runs.mark_awaiting(waiting.run_id, {"kind": "approval", "tool": "issue_refund",
                                                   "payload": {"amount": 40}},
                                  requested_by="agent", fencing_token=waiting.fencing_token)

        clock.at(DAY_1 + timedelta(hours=15))
        memory.forget("customer-123", "timezone", reason="customer asked")

        # day 2, 10:00: a retry of the order question, forked after the tool call
        clock.at(DAY_2 + timedelta(hours=10))
        retry = order.fork(up_to_item_id=lookup.item_id, session_id="order-1042-retry")
        retry.append_items([
            output("call_1", '{"order_id":"1042","status":"shipped"}'),
            assistant("Good news: order 1042 has shipped.", "gpt-4o-mini", 300, 40),
        ])
        client.assets.put(photo, "image/png", session=retry)

        # day 2, 11:00: another customer, another tool call, a checkpointed run
        clock.at(DAY_2 + timedelta(hours=11))
        second = support.add(actor_id="customer-789", session_id="order-2001")
        second.append_items([
            user("Has order 2001 shipped?"),
            call("lookup_order", "call_2", '{"order_id":"2001"}', "gpt-4o-mini", 120, 18),
        ])
        graph = client.runs.open_run(second, "langgraph", thread_key="thread-2001",
                                     owner="worker-3")
        scope = graph.checkpoint_scope()
        client.checkpoints.put(scope, "cp-1", type_tag="msgpack", payload=bytes(100))
        client.checkpoints.put(scope, "cp-2", type_tag="msgpack", payload=bytes(150),
                               parent_checkpoint_id="cp-1", metadata={"step": 2})
        client.checkpoints.put_writes(scope, "cp-2", [
            PendingWrite("task-1", 0, "messages", "msgpack", bytes(30))])
        clock.at(DAY_2 + timedelta(hours=11, seconds=3))
        second.append_items([
            output("call_2", '{"order_id":"2001","status":"shipped"}'),
            assistant("Yes, order 2001 shipped yesterday.", "gpt-4o-mini", 150, 20),
        ])
        client.runs.close_run(graph.run_id, "done", usd_cost=0.0042, step_count=5,
                              fencing_token=graph.fencing_token)

        usage = [(u.run_id, u.checkpoints, u.stored_bytes) for u in client.checkpoints.usage()]
        return Built(path, waiting.run_id, usage)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    path = tmp_path_factory.mktemp("schema-doc") / "ownstate.db"
    clock = Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ownstate._ids.now", clock.now)
        patch.setattr("ownstate.api.aio.now", clock.now)
        return build(path, clock)


@pytest.fixture
def db(built: Built) -> Iterator[sqlite3.Connection]:
    """A read-only connection: the page's queries must not need to write."""
    with closing(sqlite3.connect(f"{built.path.as_uri()}?mode=ro", uri=True)) as conn:
        yield conn


def rows(conn: sqlite3.Connection, heading: str) -> list[tuple[Any, ...]]:
    return conn.execute(query(heading)).fetchall()


# every block runs ----------------------------------------------------------------------


def test_the_page_has_queries() -> None:
    assert len([sql for _, sql in BLOCKS if sql.lstrip().startswith("SELECT")]) >= 6


@pytest.mark.parametrize(("heading", "sql"), BLOCKS,
                         ids=[f"{n}-{h}" for n, (h, _) in enumerate(BLOCKS)])
def test_every_sql_block_runs(db: sqlite3.Connection, heading: str, sql: str) -> None:
    db.execute(sql).fetchall()  # one statement per block: execute() refuses several


# what the queries return ---------------------------------------------------------------


def test_token_usage_counts_each_response_once(db: sqlite3.Connection) -> None:
    # the fork's copy of the day-1 tool call is not counted again, nor the other tenant
    assert rows(db, "Token usage per model per day") == [
        ("2025-06-02", "gpt-4o", 3, 812 + 901 + 1200, 23 + 64 + 35),
        ("2025-06-03", "gpt-4o-mini", 3, 300 + 120 + 150, 40 + 18 + 20),
    ]


def test_tool_calls_per_tool(db: sqlite3.Connection) -> None:
    assert rows(db, "Tool calls per tool") == [
        ("lookup_order", "function_call", 2, 2),
        ("issue_refund", "function_call", 1, 1),
        ("web_search", "web_search_call", 1, 1),
    ]


def test_function_calls_without_a_result(db: sqlite3.Connection) -> None:
    found = rows(db, "Function calls that never got a result")
    assert [r[:7] for r in found] == [
        ("support", "refund-77", "customer-456", 3, "issue_refund", "call_refund_1",
         '{"order_id":"77","amount":40}'),
    ]
    assert found[0][7].startswith("2025-06-02T14:00:00.")


def test_sessions_per_actor(db: sqlite3.Connection) -> None:
    found = rows(db, "Sessions per actor")
    assert [r[:4] for r in found] == [
        ("customer-123", 2, 1, 8),
        ("customer-456", 1, 0, 3),
        ("customer-789", 1, 0, 4),
    ]
    first_seen, last_active = found[0][4:]
    assert first_seen.startswith("2025-06-02T09:00:00.")
    assert last_active.startswith("2025-06-03T10:00:00.")


def test_transcript(db: sqlite3.Connection) -> None:
    assert [r[:1] + r[2:] for r in rows(db, "A session's transcript")] == [
        (1, "message", "user", None, "Where is my order 1042? Please email me updates."),
        (2, "function_call", None, "lookup_order", '{"order_id":"1042"}'),
        (3, "function_call_output", None, None, '{"order_id":"1042","status":"delayed"}'),
        (4, "message", "assistant", None, "Order 1042 is delayed; it should arrive Friday."),
    ]


def test_runs_waiting_on_a_human(db: sqlite3.Connection, built: Built) -> None:
    found = rows(db, "Runs waiting on a human for more than an hour")
    assert [r[:7] for r in found] == [
        (built.awaiting_run_id, "support", "refund-77", "customer-456", "langgraph",
         "approval", "issue_refund"),
    ]
    assert found[0][7].startswith("2025-06-02T14:00:00.")
    assert found[0][8] > 24


def test_current_facts_with_their_source(db: sqlite3.Connection) -> None:
    found = rows(db, "A subject's current facts, with where each came from")
    assert [(r[0], r[1], r[2], r[3], r[4], *r[7:]) for r in found] == [
        ("support-memory", "order_status:1042", "delayed", 1.0, "agent", "order-1042", None,
         "function_call_output", '{"order_id":"1042","status":"delayed"}'),
        ("support-memory", "preferred_channel", "email", 0.9, "agent", "order-1042", "user",
         "message", "Where is my order 1042? Please email me updates."),
    ]


def test_what_we_believed_at_noon_on_day_one(db: sqlite3.Connection) -> None:
    # the timezone was forgotten at 15:00, so at noon it was still believed
    assert [r[:2] for r in rows(db, "What we believed at a given moment")] == [
        ("order_status:1042", "delayed"),
        ("preferred_channel", "email"),
        ("timezone", "Europe/Paris"),
    ]


def test_checkpoint_storage_matches_the_api(db: sqlite3.Connection, built: Built) -> None:
    found = rows(db, "Checkpoint storage per run")
    assert [(r[0], r[3], r[4]) for r in found] == built.usage
    assert [r[1:] for r in found] == [
        ("langgraph", "done", 2, 100 + 150 + 30),
        ("openai.agents", "done", 1, 64),
    ]


def test_times_are_fixed_width_utc_text(db: sqlite3.Connection) -> None:
    # what the page's Conventions say, checked on every time column that holds a value
    stored = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
    checked = 0
    for name, kind in schema_objects(db).items():
        if kind != "table" or name in ("ownstate_schema", "fact_search"):
            continue
        for column in [row[1] for row in db.execute(f'PRAGMA table_info("{name}")')]:
            if not (column.endswith(("_time", "_at", "_since"))
                    or column in ("valid_from", "valid_to")):
                continue
            for (value,) in db.execute(f'SELECT "{column}" FROM "{name}" '
                                       f'WHERE "{column}" IS NOT NULL'):
                assert stored.fullmatch(value), f"{name}.{column} holds {value!r}"
                checked += 1
    assert checked > 50
    applied = [at for (at,) in db.execute("SELECT applied_at FROM ownstate_schema")]
    assert all(re.fullmatch(r"[-0-9]{10}T[:0-9]{8}\.\d{3}Z", at) for at in applied)


# the page keeps up with the schema -----------------------------------------------------


def schema_objects(conn: sqlite3.Connection) -> dict[str, str]:
    """Name -> type of every table, view, index and trigger ownstate made, without
    SQLite's own objects and FTS5's storage tables."""
    found = dict(conn.execute(
        "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"))
    virtual = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' "
        "AND sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'")]
    shadows = {name + ending for name in virtual for ending in FTS5_SHADOWS}
    return {name: kind for name, kind in found.items() if name not in shadows}


def section(doc: str, table: str) -> str:
    """The text under the heading that names ``table``, up to the next heading."""
    heading = re.search(rf"^(#+) `{re.escape(table)}`.*$", doc, re.MULTILINE)
    assert heading is not None, f"docs/schema.md has no section for {table}"
    level = len(heading.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(doc, heading.end())
    return doc[heading.end():end.start() if end else len(doc)]


def test_every_schema_object_is_documented(db: sqlite3.Connection) -> None:
    doc = DOC.read_text()
    objects = schema_objects(db)
    assert {"sessions", "session_items", "fact_search", "facts_current"} <= set(objects)
    missing = sorted(name for name in objects if f"`{name}`" not in doc)
    assert not missing, f"docs/schema.md does not name {missing}"


def test_every_column_is_documented(db: sqlite3.Connection) -> None:
    doc = DOC.read_text()
    for name, kind in schema_objects(db).items():
        if kind not in ("table", "view"):
            continue
        text = section(doc, name)
        columns = [row[1] for row in db.execute(f'PRAGMA table_info("{name}")')]
        assert columns, name
        missing = [c for c in columns if f"`{c}`" not in text]
        assert not missing, f"the section on {name} does not name its columns {missing}"


def test_fts5_storage_tables_are_the_ones_expected(db: sqlite3.Connection) -> None:
    # if FTS5 starts making other tables, the page's list of them needs a look
    made = {name for (name,) in db.execute(
        "SELECT name FROM sqlite_master WHERE name LIKE 'fact\\_search\\_%' ESCAPE '\\'")}
    assert made <= {"fact_search" + ending for ending in FTS5_SHADOWS}
    assert all(f"`{name}`" in DOC.read_text() for name in made)
