"""The rows of ``scale.py``'s bulk load, as ownstate itself would derive them.

Not a benchmark. Items are drawn from a pool of payloads whose stored form (JSON text,
format, the derived ``role``/``type``/``tool_name``/``model``/token columns and the search
terms) is computed once, with the same functions the public API and the backends use on
an append; a fact's value and terms likewise. What varies per row (ids, times, sequence
numbers, which session and subject) is made here. ``scale.py`` writes a few items, facts
and runs through the public API first, checks that these rows match what that wrote, and
copies the rest of each row's shape (columns it does not set) from those rows.

The leading underscore keeps this module from shadowing anything; see ``_workload.py``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from _workload import make_text

from ownstate._ids import format_time
from ownstate.backends.ports.search import item_text
from ownstate.backends.postgres.search import fact_vector, item_vector
from ownstate.backends.sqlite.search import fact_terms, item_terms
from ownstate.formats.derive import derive_columns, infer_format
from ownstate.limits import Limits

TENANT = "default"
STORE = "scale"
MEMORY = "scale-memory"
FRAMEWORK = "langgraph"
KEYS_PER_SUBJECT = 10  # 9 current facts and one superseded version per subject
POOL = 4000
#: the shape of the item at each position of a session, repeating every 10 items
PATTERN = ("user", "call", "output", "assistant", "user", "assistant", "user", "assistant",
           "user", "assistant")
KEY_NAMES = ("preferred_channel", "timezone", "language", "plan", "city", "company",
             "role", "nickname", "last_topic")
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Spec:
    items: int
    sessions: int
    facts: int
    awaiting: int

    @property
    def per_session(self) -> int:
        return self.items // self.sessions

    @property
    def subjects(self) -> int:
        return self.facts // KEYS_PER_SUBJECT

    @property
    def tag(self) -> str:
        return f"i{self.items}_s{self.sessions}_f{self.facts}_a{self.awaiting}"

    def check(self) -> None:
        if self.items % self.sessions or self.facts % KEYS_PER_SUBJECT:
            raise SystemExit("--items must be a multiple of --sessions, --facts of 10")
        if not 0 < self.awaiting <= self.sessions:
            raise SystemExit("--awaiting must be 1 to --sessions")


def session_id(k: int) -> str:
    return f"s{k:08d}"


def subject(n: int) -> str:
    return f"user:{n:08d}"


def actor(k: int, spec: Spec) -> str:
    return subject(k % max(spec.subjects, 1))


def is_awaiting(k: int, spec: Spec) -> bool:
    return k % (spec.sessions // spec.awaiting) == 0 and k // (
        spec.sessions // spec.awaiting) < spec.awaiting


_EPOCH_S = int(EPOCH.timestamp())
_random = random.Random(5).getrandbits


def session_time(k: int) -> datetime:
    return EPOCH + timedelta(seconds=20 * k)


def _stamp(seconds: int) -> str:
    """``format_time`` of a whole number of seconds since the Unix epoch, faster."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(seconds))


def _id(prefix: str, moment: datetime, digits: int) -> str:
    """An id as ownstate makes it: a time prefix that sorts, then random hex."""
    if digits == 12:  # items, sessions, runs: milliseconds (``_ids.new_id``)
        return f"{prefix}_{int(moment.timestamp() * 1000):012x}{_random(80):020x}"
    head = f"{int(moment.timestamp() * 1_000_000):013x}"  # facts: microseconds
    return f"{prefix}_{head}{_random(76):019x}"


# --------------------------------------------------------------------------------------
# item payloads


@dataclass(frozen=True)
class Payload:
    data: dict[str, Any]
    data_json: str
    format: str
    columns: tuple[Any, ...]  # role, type, tool_name, model, in_tokens, out_tokens
    sqlite_terms: str
    pg_terms: str
    pg_terms_len: int


def _payload_data(j: int, rng: random.Random) -> dict[str, Any]:
    shape = PATTERN[j % len(PATTERN)]
    if shape == "user":
        return {"role": "user", "content": make_text(rng, rng.randint(60, 400))}
    if shape == "call":
        return {"type": "function_call", "name": rng.choice(("lookup_order", "refund",
                                                             "search_kb", "send_email")),
                "call_id": f"call_{rng.getrandbits(96):024x}",
                "arguments": json.dumps({"order": f"order-{rng.randint(1000, 9999)}",
                                         "note": make_text(rng, 40)})}
    if shape == "output":
        return {"type": "function_call_output", "call_id": f"call_{rng.getrandbits(96):024x}",
                "output": json.dumps({"status": rng.choice(("shipped", "refunded", "open")),
                                      "detail": make_text(rng, rng.randint(40, 200))})}
    return {"id": f"msg_{rng.getrandbits(96):024x}", "type": "message", "role": "assistant",
            "status": "completed", "model": "gpt-4.1-mini",
            "usage": {"input_tokens": rng.randint(200, 4000),
                      "output_tokens": rng.randint(20, 400)},
            "content": [{"type": "output_text", "text": make_text(rng, rng.randint(80, 600)),
                         "annotations": []}]}


def payloads(count: int = POOL, seed: int = 7) -> list[Payload]:
    """``count`` item payloads in their stored form, position ``j`` of shape
    ``PATTERN[j % 10]``."""
    rng = random.Random(seed)
    limits = Limits()
    made = []
    for j in range(count):
        data = _payload_data(j, rng)
        (text,) = limits.encode_items([data])
        found = item_text(data)
        vector, length, _ = item_vector(TENANT, found)
        made.append(Payload(data, text, infer_format(data), tuple(derive_columns(data)),
                            item_terms(TENANT, found), vector, length))
    return made


# --------------------------------------------------------------------------------------
# rows, each a dict of the columns that vary; times as ownstate's fixed-width text


@dataclass(frozen=True)
class Ids:
    """The first internal row id of each table (those of the seed rows come before)."""

    sid: int
    id: int
    fid: int
    rid: int


def sessions(spec: Spec, ids: Ids) -> Iterator[dict[str, Any]]:
    for k in range(spec.sessions):
        made = session_time(k)
        last = made + timedelta(seconds=spec.per_session)
        yield {"sid": ids.sid + k, "session_id": session_id(k), "actor_id": actor(k, spec),
               "root_session_id": session_id(k), "create_time": format_time(made),
               "last_activity_time": format_time(last), "item_count": spec.per_session}


def items(spec: Spec, ids: Ids, pool: list[Payload]) -> Iterator[tuple[int, int, int, str, str,
                                                                       Payload]]:
    """(id, sid, seq, item_id, create_time, payload) in id order."""
    n = 0
    size = len(pool)
    for k in range(spec.sessions):
        start = _EPOCH_S + 20 * k
        for seq in range(1, spec.per_session + 1):
            moment = start + seq
            yield (ids.id + n, ids.sid + k, seq, f"itm_{moment * 1000:012x}{_random(80):020x}",
                   _stamp(moment), pool[n % size])
            n += 1


@dataclass(frozen=True)
class FactRow:
    fid: int
    fact_id: str
    subject: str
    key: str
    value_json: str
    confidence: float
    valid_from: str
    recorded_at: str
    superseded_at: str | None  # also valid_to; closed_reason is then 'superseded'
    supersedes: str | None
    sqlite_terms: str
    pg_terms: str
    pg_terms_len: int


def _value(rng: random.Random, key: str) -> Any:
    if key == "preferred_channel":
        return rng.choice(("email", "sms", "phone", "chat"))
    if key == "timezone":
        return rng.choice(("Europe/Paris", "America/New_York", "Asia/Tokyo", "UTC"))
    if key == "plan":
        return {"tier": rng.choice(("free", "pro", "team")), "seats": rng.randint(1, 50)}
    return make_text(rng, rng.randint(8, 60))


def _fact_values(key: str, rng: random.Random, count: int = 200,
                 ) -> list[tuple[str, str, str, int]]:
    """(value JSON, SQLite terms, PostgreSQL terms, their number) of ``count`` values."""
    made = []
    for _ in range(count):
        value = json.dumps(_value(rng, key), ensure_ascii=False)
        vector, length, _ = fact_vector(TENANT, MEMORY, key, json.loads(value))
        made.append((value, fact_terms(TENANT, MEMORY, key, value), vector, length))
    return made


def facts(spec: Spec, ids: Ids, seed: int = 11) -> Iterator[FactRow]:
    """Per subject: an earlier value of its first key, superseded, then one current fact
    for each of :data:`KEY_NAMES`, each value drawn from 200 per key."""
    rng = random.Random(seed)
    values = {key: _fact_values(key, rng) for key in KEY_NAMES}
    fid = ids.fid
    for n in range(spec.subjects):
        who = subject(n)
        start = EPOCH + timedelta(seconds=30 * n)
        changed = start + timedelta(seconds=5)
        earlier = None
        for step, key in enumerate((KEY_NAMES[0], *KEY_NAMES)):
            value, sqlite_terms, vector, length = values[key][rng.randrange(200)]
            closed = step == 0
            # the superseded fact closes when its successor (step 1) is recorded
            moment = start if closed else changed + timedelta(microseconds=step)
            fact_id = _id("fct", moment, 13)
            yield FactRow(fid, fact_id, who, key, value, round(rng.uniform(0.5, 1.0), 2),
                          format_time(moment), format_time(moment),
                          format_time(changed + timedelta(microseconds=1)) if closed else None,
                          earlier if step == 1 else None,
                          sqlite_terms, vector, length)
            if closed:
                earlier = fact_id
            fid += 1


def runs(spec: Spec, ids: Ids) -> Iterator[dict[str, Any]]:
    """One run per session: awaiting a human for ``spec.awaiting`` of them, done for the
    rest. ``awaiting`` is filled in by the caller from the seed run's."""
    for k in range(spec.sessions):
        started = session_time(k) + timedelta(seconds=2)
        waiting = is_awaiting(k, spec)
        since = started + timedelta(seconds=spec.per_session)
        yield {"rid": ids.rid + k, "sid": ids.sid + k, "run_id": _id("run", started, 12),
               "session_id": session_id(k), "actor_id": actor(k, spec),
               "thread_key": f"t-{k}", "status": "awaiting_human" if waiting else "done",
               "status_since": format_time(since), "started_at": format_time(started),
               "ended_at": None if waiting else format_time(since),
               "step_count": 3 + k % 7, "awaiting_since": format_time(since)}
