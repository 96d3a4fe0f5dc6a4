"""A backend written outside ownstate: opened by instance, by a URL scheme an installed
distribution registers, and run through the conformance suite by the pytest plugin, as
docs/testing.md tells its author to.

The outside backend is defined here (a subclass of the memory backend counting the
instances opened), and installed for real in a child process: a ``*.dist-info`` folder on
``sys.path`` is what ``importlib.metadata`` reads entry points from.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
import uuid
from pathlib import Path

import pytest

import ownstate
from ownstate.backends import Capability
from ownstate.backends.memory import MemoryBackend
from ownstate.testing import Suite, Target

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "testing.md"
SOURCES = Path(ownstate.__file__).resolve().parents[1]

BACKEND = '''
"""A backend outside ownstate."""
from ownstate.backends import Capability
from ownstate.backends.memory import MemoryBackend

class DictBackend(MemoryBackend):
    capabilities = frozenset({"operator"})  # a plain string declares a capability too
    opened = 0

    def __init__(self, name=None):
        super().__init__(name)
        type(self).opened += 1

def open_backend(url):
    return DictBackend(url.split("://", 1)[1])

def open_nothing(url):
    return object()
'''


def _install(where: Path, entry_points: dict[str, dict[str, str]]) -> None:
    """Make ``where`` hold ``dict_backend.py`` and a distribution declaring entry points."""
    (where / "dict_backend.py").write_text(BACKEND)
    dist = where / "dict_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dict-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in names.items())
        for group, names in entry_points.items()))


def _env(where: Path) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(where), str(SOURCES),
                                         env.get("PYTHONPATH", "")])
    return env


def test_a_registered_scheme_opens_the_backend_it_names(tmp_path: Path) -> None:
    _install(tmp_path, {"ownstate.backends": {"dict": "dict_backend:open_backend",
                                              "broken": "dict_backend:open_nothing"}})
    script = textwrap.dedent('''
        import sys
        import ownstate
        from dict_backend import DictBackend
        with ownstate.connect("dict://shared") as client:
            client.session_stores.create("chats").add(actor_id="a", session_id="s")
            print(type(client.backend).__name__, DictBackend.opened)
        with ownstate.connect("DICT://shared") as again:
            print([s.session_id for s in again.session_stores.get("chats").list_sessions()])
        for url in ("nope://x", "broken://x"):
            try:
                ownstate.connect(url)
            except ownstate.InvalidInput as exc:
                print("InvalidInput", exc.details, exc)
            except TypeError as exc:
                print("TypeError", exc)
        print("dict_backend" in sys.modules)
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "DictBackend 1",
        "['s']",
        "InvalidInput {'field': 'url'} no backend for URL scheme 'nope' (try memory:// or "
        "sqlite:///path.db)",
        "TypeError the ownstate.backends entry point broken = dict_backend:open_nothing "
        "returned object, not a Backend",
        "True",
    ]


def test_the_scheme_module_is_imported_only_when_its_scheme_is_used(tmp_path: Path) -> None:
    _install(tmp_path, {"ownstate.backends": {"dict": "dict_backend:open_backend"}})
    script = ("import sys, ownstate; ownstate.connect('memory://').close(); "
              "print('dict_backend' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr


def test_connect_takes_a_backend_instance() -> None:
    name = uuid.uuid4().hex
    with ownstate.connect(backend=MemoryBackend(name)) as client:
        client.session_stores.create("chats")
    with ownstate.connect(f"memory://{name}") as by_url:
        assert [s.name for s in by_url.session_stores.list()] == ["chats"]

    async def scenario() -> list[str]:
        async with await ownstate.connect_async(backend=MemoryBackend(name)) as aclient:
            return [s.name async for s in aclient.session_stores.list()]

    import asyncio

    assert asyncio.run(scenario()) == ["chats"]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"url": "memory://", "backend": MemoryBackend()}, "backend"),
    ({"backend": MemoryBackend(), "token": "osk_x"}, "token"),
    ({"backend": "memory://"}, "backend"),
])
def test_connect_refuses_a_backend_it_cannot_use(kwargs: dict[str, object],
                                                 field: str) -> None:
    with pytest.raises(ownstate.InvalidInput) as err:
        ownstate.connect(**kwargs)  # type: ignore[arg-type]
    assert err.value.details == {"field": field}

    async def scenario() -> None:
        await ownstate.connect_async(**kwargs)  # type: ignore[arg-type]

    import asyncio

    with pytest.raises(ownstate.InvalidInput):
        asyncio.run(scenario())


def test_capabilities_are_the_strings_they_name() -> None:
    assert Capability("persistent") is Capability.PERSISTENT
    assert Capability.MULTIPROCESS == "multiprocess"
    assert sorted(Capability) == sorted(["multiprocess", "persistent", "migrations",
                                         "text_search", "operator", "stepwise_stores",
                                         "transfer", "vectors", "bulk_sessions", "bulk_reads",
                                         "server_ranked", "checkpoint_items",
                                         "checkpoint_ends_run", "checkpoint_opens_run"])
    declared = Target("plain", url="memory://", capabilities=frozenset({"text_search"}))
    assert declared.has(Capability.TEXT_SEARCH)
    assert Capability.OPERATOR in MemoryBackend.capabilities


@pytest.mark.parametrize("kwargs", [
    {},
    {"url": "memory://", "backend": MemoryBackend},
    {"backend": MemoryBackend, "capabilities": frozenset({Capability.MULTIPROCESS})},
    {"backend": MemoryBackend, "opener": ownstate.connect},
])
def test_a_target_opens_its_database_one_way(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="target 'mine'"):
        Target("mine", **kwargs)  # type: ignore[arg-type]


def test_a_suite_names_modules_of_the_suite() -> None:
    assert Suite().modules == ("access", "assets", "checkpoints", "concurrency",
                               "conformance", "decisions", "memory", "memory_stateful",
                               "runs", "search", "stateful")
    for bad in ("nope", "targets.x", "plugin.x"):
        with pytest.raises(ValueError, match=r"ownstate\.testing has no module"):
            Suite(bad)


def _python_blocks() -> dict[str, str]:
    """docs/testing.md's python blocks, by the file name each opens with."""
    blocks = re.findall(r"```python\n# (\S+)\n(.*?)```", DOC.read_text(), re.S)
    return dict(blocks)


def _plugin_entry_points() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"]["pytest11"])


def _project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
             tests: dict[str, str]) -> None:
    """A project of its own with the documented conftest and ``tests``, where the plugin
    loads the way installing ownstate loads it: by the pytest11 entry point pyproject.toml
    declares."""
    _install(pytester.path, {"pytest11": _plugin_entry_points()})
    pytester.makeconftest(_python_blocks()["conftest.py"] + textwrap.dedent('''
        def pytest_sessionfinish(session):
            print(f"\\nDictBackend instances opened: {DictBackend.opened}")
    '''))
    for name, text in tests.items():
        pytester.makepyfile(**{name.removesuffix(".py"): text})
    monkeypatch.setenv("PYTHONPATH", _env(pytester.path)["PYTHONPATH"])


def _run(pytester: pytest.Pytester, *args: str) -> dict[str, int]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error",
                                           "-m", "not slow", *args, timeout=600)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == outcomes.get("errors", 0) == 0, result.stdout.str()
    found = re.search(r"DictBackend instances opened: (\d+)", result.stdout.str())
    assert found is not None
    outcomes["opened"] = int(found[1])
    assert not (pytester.path / "ownstate.db").exists()
    return outcomes


def test_the_documented_example_runs_the_suite_on_an_outside_backend(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/testing.md's conftest and test modules, as written: the sessions and runs
    modules of the suite (without the slow races) on a backend defined here."""
    tests = {name: text for name, text in _python_blocks().items() if name.startswith("test_")}
    assert sorted(tests) == ["test_ownstate_runs.py", "test_ownstate_sessions.py"]
    _project(pytester, monkeypatch, tests)
    outcomes = _run(pytester)
    assert outcomes["passed"] > 150
    assert outcomes["opened"] > 150


def test_a_suite_of_several_modules_gives_each_its_own_fixtures(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """memory and runs both have a ``clock`` fixture, each its own kind of clock."""
    _project(pytester, monkeypatch, {"test_both.py": textwrap.dedent('''
        from ownstate.testing import Suite

        ownstate_suite = Suite("memory", "runs")
    ''')})
    assert _run(pytester)["passed"] > 140


def test_the_plugin_does_nothing_in_a_project_without_a_suite(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(pytester, monkeypatch, {"test_own.py": textwrap.dedent('''
        def test_alone():
            pass

        def test_asks_for_a_suite_fixture(session):
            pass
    ''')})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error",
                                           "--fixtures", timeout=120)
    # the plugin's own fixtures would be listed from ownstate/testing (the path of the
    # checkout or of the venv may well contain "ownstate" elsewhere)
    listed = result.stdout.str().split("fixtures defined from conftest")[0]
    assert "ownstate/testing" not in listed
    assert "ownstate.testing" not in listed
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error",
                                           timeout=120)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*fixture 'session' not found*"])
    plugins = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--trace-config",
                                            "--collect-only", timeout=120)
    plugins.stdout.fnmatch_lines(["*ownstate.testing.plugin*"])
