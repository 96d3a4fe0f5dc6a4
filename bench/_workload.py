"""The conversation-turn workload shared by the session benchmarks (not a benchmark itself).

``sessions_sqlite.py``, ``redis.py`` and ``postgres.py`` measure the same things the same
way: a deterministic, varied conversation of OpenAI Responses-shaped messages; a "turn"
that loads the whole history in replay order and appends one user and one assistant
message; implementations advanced in lockstep, in an order that rotates; medians over the
first and last turns; and Markdown tables. What differs between them (where a database
lives, which competitor runs, how the event loop is driven) stays in each script and is
passed in.

The leading underscore keeps this module from shadowing anything: no installed package is
called ``_workload``. The scripts put their directory at the *end* of ``sys.path`` (after
site-packages) before importing it, so it is found while ``bench/redis.py`` still cannot
shadow the ``redis`` package.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import ownstate

T = TypeVar("T")
Pair = tuple[dict[str, Any], dict[str, Any]]
Clock = Callable[[], float]

# --------------------------------------------------------------------------------------
# deterministic, varied message text

_WORD_TEXT = """
the a an and or but if then when while because although order refund account invoice
payment card shipping delivery package tracking number address customer support agent
ticket issue problem error message screen button settings profile password email phone
please thanks sorry happy help need want would could should will can may might must
check look find open close update change cancel confirm verify review send receive return
today tomorrow yesterday week month year morning evening hour minute day time date
first second third last next previous new old same different other another every each
price cost total amount discount coupon code plan subscription upgrade downgrade trial
product item size color model version store online app website browser device laptop
order-4471 SKU-99812 v2.3.1 14:30 2024-11-02 $49.99 12% #A1B2 user@example.com
large small quick slow early late easy hard simple clear exact similar possible likely
about above across after against along among around before behind below between beyond
during except inside into near outside over since through toward under until upon within
"""
_WORDS = _WORD_TEXT.split()


def make_text(rng: random.Random, size: int) -> str:
    """Roughly ``size`` bytes of sentence-like text drawn from a fixed word list."""
    sentences: list[str] = []
    length = 0
    while length < size:
        words = rng.choices(_WORDS, k=rng.randint(6, 16))
        sentence = " ".join(words)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(".?!.")
        sentences.append(sentence)
        length += len(sentence) + 1
    return " ".join(sentences)[:size].rstrip()


def conversation(turns: int, *, seed: int = 1234, size: int = 400) -> list[Pair]:
    """``turns`` pairs of OpenAI Responses-shaped (user, assistant) message items."""
    rng = random.Random(seed)
    pairs = []
    for turn in range(turns):
        user = {"role": "user", "content": make_text(rng, size)}
        assistant = {
            "id": f"msg_{turn:06d}{rng.getrandbits(64):016x}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": make_text(rng, size),
                         "annotations": []}],
        }
        pairs.append((user, assistant))
    return pairs


def flat_items(count: int, *, seed: int = 99) -> list[dict[str, Any]]:
    return [item for pair in conversation((count + 1) // 2, seed=seed) for item in pair][:count]


# --------------------------------------------------------------------------------------
# CPU of other processes


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU seconds the processes have used so far, from ``/proc`` (gone
    ones count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(url: str, application: str) -> float:
    """:func:`cpu_seconds` of the PostgreSQL server processes (at ``url``, on this
    machine) whose connections name ``application`` as their ``application_name``."""
    import psycopg  # only the PostgreSQL benchmarks need it

    with psycopg.connect(url, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application,))]
    return cpu_seconds(pids)


# --------------------------------------------------------------------------------------
# statistics and tables


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000


def rotate(names: Sequence[T], r: int) -> list[T]:
    """Run order number ``r``: rotated by ``r``, and reversed every other cycle."""
    order = list(names[r % len(names):]) + list(names[: r % len(names)])
    return order[::-1] if (r // len(names)) % 2 else order


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        cells = [c.rjust(w) if c[:1].isdigit() else c.ljust(w)
                 for c, w in zip(row, widths, strict=True)]
        print("| " + " | ".join(cells) + " |")
    print()


# --------------------------------------------------------------------------------------
# conversation turns


class OwnstateSyncTurns:
    """ownstate's sync client (called from the benchmark's loop thread, which it blocks)."""

    name = "ownstate sync"
    tag = "sync"

    async def open(self, url: str, session_id: str = "bench-session") -> None:
        self.client = ownstate.connect(url)
        try:
            store = self.client.session_stores.create("bench-sessions")
        except ownstate.AlreadyExists:
            store = self.client.session_stores.get("bench-sessions")
        self.session = store.add(actor_id="bench-user", session_id=session_id)

    async def turn(self, user: dict[str, Any], assistant: dict[str, Any]) -> list[Any]:
        history = [item.data for item in self.session.list_items(order_by="create_time asc")]
        self.session.append_items([user, assistant])
        return history

    async def close(self) -> None:
        self.client.close()


class OwnstateAsyncTurns:
    """ownstate's async client."""

    name = "ownstate async"
    tag = "async"

    async def open(self, url: str, session_id: str = "bench-session") -> None:
        self.client = await ownstate.connect_async(url)
        try:
            store = await self.client.session_stores.create("bench-sessions")
        except ownstate.AlreadyExists:
            store = await self.client.session_stores.get("bench-sessions")
        self.session = await store.add(actor_id="bench-user", session_id=session_id)

    async def turn(self, user: dict[str, Any], assistant: dict[str, Any]) -> list[Any]:
        history = [item.data async for item in
                   self.session.list_items(order_by="create_time asc")]
        await self.session.append_items([user, assistant])
        return history

    async def close(self) -> None:
        await self.client.close()


async def turns_round(variants: Sequence[Any], open_variant: Callable[[Any], Awaitable[None]],
                      pairs: list[Pair], r: int, *,
                      clock: Clock = time.perf_counter) -> dict[str, list[float]]:
    """One conversation per implementation, advanced in lockstep: turn n of every
    implementation runs back to back (in an order that rotates), so a burst of machine
    noise hits them alike. ``open_variant`` opens one (each script knows where its
    databases live); each implementation has a ``name``, ``turn(user, assistant)`` (returning
    the history it loaded) and ``close()``. Returns each implementation's per-turn seconds."""
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    history: dict[str, list[Any]] = {}
    opened: list[Any] = []
    try:
        for v in variants:
            await open_variant(v)
            opened.append(v)
        for n, (user, assistant) in enumerate(pairs):
            for v in rotate(variants, r + n):
                start = clock()
                history[v.name] = await v.turn(user, assistant)
                times[v.name].append(clock() - start)
    finally:
        for v in opened:
            await v.close()
    expected = [item for pair in pairs[:-1] for item in pair]
    for name, replayed in history.items():
        if replayed != expected:
            raise SystemExit(f"{name} replayed a different history")
    return times


def print_turns_header(rounds: int, window: int) -> None:
    print(f"## turns: load the whole history, append a user and an assistant message "
          f"({rounds} rounds; median ms per turn over the first and last {window} "
          f"turns)\n")


def turns_rows(turns: int, names: Sequence[str], baseline: str, window: int,
               rounds: Sequence[dict[str, list[float]]]) -> list[list[str]]:
    """The table rows of one conversation length: per implementation, the median ms of
    the first and last ``window`` turns over all ``rounds``, the median whole-conversation
    seconds, and the ratio of the last-window median to ``baseline``'s."""
    first: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, list[float]] = {n: [] for n in names}
    total: dict[str, list[float]] = {n: [] for n in names}
    for times_by_name in rounds:
        for name, times in times_by_name.items():
            first[name] += times[:window]
            last[name] += times[-window:]
            total[name].append(sum(times))
    base = statistics.median(last[baseline])
    rows = []
    for name in names:
        ratio = statistics.median(last[name]) / base
        rows.append([str(turns), name, f"{median_ms(first[name]):.2f}",
                     f"{median_ms(last[name]):.2f}",
                     f"{statistics.median(total[name]):.2f}",
                     "1.00 (baseline)" if name == baseline else f"{ratio:.2f}"])
    return rows


def print_turns_table(rows: Sequence[Sequence[str]], window: int, competitor: str) -> None:
    print_table(["T", "implementation", f"first {window} turns, ms", f"last {window} turns, ms",
                 "whole conversation, s", f"ratio to {competitor}, last {window}"], rows)
