"""What an :class:`~.saver.OwnstateSaver` knows of a LangGraph thread, and how it names and
packs what it stores: the session and holder-run ids derived from a thread id, checkpoint
payload packing, the checkpoints on their way (so writes can wait for them), and the waits
that work on a loop or on a thread. Plain data and pure functions; no storage. It may touch
the public API's types, :mod:`._history`, the error tree, the limits and the model, and
LangGraph's checkpoint types."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
)
from langgraph.checkpoint.serde.types import TASKS

from ...api import AsyncSession
from ...errors import (
    InvalidInput,
)
from ...limits import SESSION_ID_RE
from ...model import (
    CheckpointScope,
)
from ._history import History

FRAMEWORK = "langgraph"
#: The type tag of the checkpoints this saver stores.
TYPE_TAG = "langgraph.v1"
_THREAD_LABEL = "langgraph.thread_id"
# Channel values at least this large (serialized) are stored once per version.
_SHARED_BYTES = 256
# Channels whose update means another step is due: the graph has not finished.
_TRIGGER_PREFIX = "branch:to:"
_TRIGGERS = frozenset({"__start__", TASKS})


# Payloads and writes at least this large are compressed when that makes them smaller.
_PACK_BYTES = 128
_ZLIB = "+zlib"


def _pack(payload: bytes) -> bytes:
    """A checkpoint payload as stored: a marker byte, then msgpack, compressed or not."""
    if len(payload) >= _PACK_BYTES:
        packed = zlib.compress(payload, 1)
        if len(packed) < len(payload):
            return b"z" + packed
    return b"m" + payload


def _unpack(stored: bytes) -> bytes:
    marker, body = stored[:1], stored[1:]
    if marker == b"z":
        return zlib.decompress(body)
    if marker == b"m":
        return body
    raise InvalidInput("checkpoint payload is malformed", field="payload")


async def _wait(future: concurrent.futures.Future[Any]) -> Any:
    """The result of a future another call of this saver is completing: awaited on an
    event loop, waited for on a thread that drives coroutines without one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return future.result()
    return await asyncio.wrap_future(future)


async def _wait_event(event: threading.Event, timeout: float) -> bool:
    """Wait for an event another call of this saver sets, as :func:`_wait` does."""
    if event.is_set():
        return True
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return event.wait(timeout)
    return await loop.run_in_executor(None, event.wait, timeout)


def _session_id(thread_id: str) -> str:
    if SESSION_ID_RE.fullmatch(thread_id):
        return thread_id
    return "lg-" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


def _holder_id(store: str, session_id: str) -> str:
    digest = hashlib.sha256(f"{store}\x00{session_id}".encode()).hexdigest()
    return f"lgt_{digest[:32]}"


def _thread_id(config: RunnableConfig) -> str:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise InvalidInput("config['configurable']['thread_id'] is required", field="thread_id")
    return str(thread_id)


def _namespace(config: RunnableConfig) -> str:
    return str((config.get("configurable") or {}).get("checkpoint_ns") or "")


def _finished(checkpoint: Checkpoint) -> bool:
    """Whether the graph that wrote this checkpoint has no step left to run."""
    updated = checkpoint.get("updated_channels")
    if updated is None:
        return False
    return not any(c in _TRIGGERS or c.startswith(_TRIGGER_PREFIX) for c in updated)


def _json_value(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


_HOLDER = "\x00holder"  # the key of the holder's creation among a thread's claims


def _key(config: RunnableConfig, checkpoint_id: str | None) -> tuple[str, str, str | None]:
    configurable = config.get("configurable") or {}
    return (str(configurable.get("thread_id")), _namespace(config), checkpoint_id)


class _Arrivals:
    """Which checkpoints this saver has stored or read, and which it is storing, so that
    writes can wait for a checkpoint that is on its way instead of failing."""

    def __init__(self, remember: int = 4096) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._waiting: dict[tuple[Any, ...], threading.Event] = {}
        self._remember = remember

    def expect(self, key: tuple[Any, ...]) -> threading.Event:
        with self._lock:
            return self._waiting.setdefault(key, threading.Event())

    def arrived(self, key: tuple[Any, ...], event: threading.Event | None = None) -> None:
        with self._lock:
            self._known[key] = None
            self._known.move_to_end(key)
            while len(self._known) > self._remember:
                self._known.popitem(last=False)
            self._waiting.pop(key, None)
        if event is not None:
            event.set()

    def storing(self, thread_id: str, namespace: str) -> list[threading.Event]:
        """The puts of a thread's namespace this saver has under way."""
        with self._lock:
            return [event for (thread, ns, _), event in self._waiting.items()
                    if thread == thread_id and ns == namespace and not event.is_set()]

    def give_up(self, key: tuple[Any, ...], event: threading.Event) -> None:
        """Stop waiting for a checkpoint no put of this saver announced in time."""
        with self._lock:
            if not event.is_set() and self._waiting.get(key) is event:
                del self._waiting[key]

    def pending(self, key: tuple[Any, ...]) -> threading.Event | None:
        """``None`` when the checkpoint is known here; else the event its put will set."""
        with self._lock:
            if key in self._known:
                return None
            return self._waiting.setdefault(key, threading.Event())


@dataclass
class _Thread:
    """What this process knows about one thread; the database is always the authority."""

    thread_id: str
    session: AsyncSession
    scope: CheckpointScope
    history: History
    held: bool = False  # the thread's first run (the checkpoints' holder) is known to exist
    active: str | None = None  # the invocation run this process last saw active
    token: int | None = None  # the fencing token of this process's lease on it
    renew_at: float = 0.0  # when to extend that lease (time.monotonic())
    ended: tuple[str, int] | None = None  # the run this process closed last, and its token
    first_step: int | None = None  # the LangGraph step that run began at
    resumed_from: str | None = None  # the checkpoint this saver last resumed the run from
    # run id -> the claim of its lease in progress (or made) by this saver
    claims: dict[str, concurrent.futures.Future[None]] = field(default_factory=dict)
    # (namespace, channel, version) -> id of the checkpoint holding that value
    origins: dict[tuple[str, str, Any], str] = field(default_factory=dict)
    # (namespace, channel, version) -> the stored form of a history channel
    references: dict[tuple[str, str, Any], list[Any]] = field(default_factory=dict)

