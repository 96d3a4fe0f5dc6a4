"""The public surface: curated, documented, importable without extras, twins in step."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import ownstate
from ownstate.api import sync

ROOT = Path(__file__).resolve().parent.parent


def test_all_is_sorted_and_complete() -> None:
    public = {name for name in vars(ownstate) if not name.startswith("_")} - {"annotations"}
    modules = {name for name in public if inspect.ismodule(getattr(ownstate, name))}
    assert sorted(ownstate.__all__) == ownstate.__all__
    assert set(ownstate.__all__) == public - modules


def test_public_names_have_docstrings() -> None:
    for name in ownstate.__all__:
        obj = getattr(ownstate, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


def test_import_needs_no_optional_dependency() -> None:
    code = (
        "import sys, ownstate; "
        "loaded = {m.split('.')[0] for m in sys.modules}; "
        "bad = loaded & {'psycopg', 'redis', 'langgraph', 'agents', 'google', 'fastapi', "
        "'claude_agent_sdk', 'pytest', 'hypothesis', 'click'}; "
        "print(sorted(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_sync_client_is_current() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_sync.py"),
                             "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_sync_twins_mirror_every_async_method() -> None:
    pairs = [(type_, twin) for type_, twin in vars(sync)["_TWINS"].items()]
    assert len(pairs) >= 9
    for async_cls, sync_cls in pairs:
        members = {name: member for klass in reversed(async_cls.__mro__[:-1])
                   for name, member in vars(klass).items()}  # inherited ones too
        for name, member in members.items():
            if name.startswith("_"):
                continue
            assert hasattr(sync_cls, name), f"{sync_cls.__name__} lacks {name}"
            if callable(member):
                async_params = list(inspect.signature(member).parameters)
                sync_params = list(inspect.signature(getattr(sync_cls, name)).parameters)
                assert async_params == sync_params, f"{sync_cls.__name__}.{name} drifted"


def test_errors_form_one_tree() -> None:
    for name in ownstate.errors.__all__:
        error = getattr(ownstate.errors, name)
        assert issubclass(error, ownstate.OwnstateError)
        assert error.code
        assert inspect.getdoc(error)
    assert issubclass(ownstate.StoreNotFound, ownstate.NotFound)
    assert issubclass(ownstate.AlreadyExists, ownstate.Conflict)
    assert issubclass(ownstate.LimitExceeded, ownstate.InvalidInput)


def test_build_item_makes_the_same_frozen_item() -> None:
    import dataclasses
    from datetime import UTC, datetime

    from ownstate.model import Item, build_item

    fields = ("itm_1", "ses_1", 3, datetime.now(UTC), {"role": "user"}, "openai.responses",
              "user", "message", None, "gpt-x", 12, 3)
    built, constructed = build_item(*fields), Item(*fields)
    assert built == constructed
    assert repr(built) == repr(constructed)
    assert dataclasses.astuple(built) == fields
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.seq = 4  # type: ignore[misc]


def test_a_client_says_whether_its_backend_works_on_the_callers_thread(target) -> None:
    """Adapters ask the client, not its backend, whether coroutines may run one after
    another on the calling thread: a sync client does on every backend it drives over
    blocking calls (PostgreSQL over psycopg's sync connections, a plain http:// server
    over sockets of its own), but not on Redis; an async client only on the in-memory
    one."""
    import asyncio

    with target.connect() as client:
        assert client.runs_inline is (target.name in {"memory", "sqlite", "postgres",
                                                      "http"})
        assert client.runs_inline is client.backend.runs_inline

    async def asynchronously() -> bool:
        async with await target.connect_async() as aclient:
            return aclient.runs_inline

    assert asyncio.run(asynchronously()) is (target.name == "memory")
