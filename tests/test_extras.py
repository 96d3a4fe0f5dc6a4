"""A missing optional dependency is one typed error naming the extra to install, for every
backend, adapter and the server, and one line (no traceback) from the command.

Each case runs a fresh interpreter in which the package is made uninstalled: a finder at
the head of ``sys.meta_path`` refuses to import it, exactly as Python does for a package
that is not there.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

import ownstate
from ownstate._extras import requires

_BLOCKER = textwrap.dedent("""
    import sys

    BLOCKED = {blocked!r}

    class Uninstalled:
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Uninstalled())
""")


def _python(blocked: list[str], code: str) -> subprocess.CompletedProcess[str]:
    script = _BLOCKER.format(blocked=blocked) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)


def _cli(blocked: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return _python(blocked, f"""
        sys.argv = ["ownstate", *{list(args)!r}]
        from ownstate.cli import main
        main()
    """)


@pytest.mark.parametrize(("blocked", "url", "extra"), [
    (["psycopg"], "postgresql://nobody@127.0.0.1:1/none", "postgres"),
    (["psycopg_pool"], "postgresql://nobody@127.0.0.1:1/none", "postgres"),
    (["redis"], "redis://127.0.0.1:1/0", "redis"),
    (["redis"], "redis+cluster://127.0.0.1:1", "redis"),
    (["httpx"], "http://127.0.0.1:1", "http"),
], ids=["psycopg", "psycopg_pool", "redis", "redis-cluster", "httpx"])
@pytest.mark.parametrize("command", [["check"], ["sessions", "list"]], ids=["check", "list"])
def test_a_backend_without_its_extra_is_one_line(blocked: list[str], url: str, extra: str,
                                                 command: list[str]) -> None:
    result = _cli(blocked, "--url", url, *command)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert f"pip install 'ownstate[{extra}]'" in lines[0]


def test_distill_without_its_extra_is_one_line() -> None:
    result = _cli(["httpx"], "--url", "memory://", "memory", "distill", "--store", "mem",
                  "--since", "1h", "--model", "m")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert "pip install 'ownstate[distill]'" in result.stderr


@pytest.mark.parametrize(("blocked", "command", "extra"), [
    (["uvicorn", "fastapi"], "serve", "server"),
    (["mcp"], "mcp", "mcp"),
], ids=["serve", "mcp"])
def test_a_server_command_without_its_extra_is_one_line(blocked: list[str], command: str,
                                                        extra: str) -> None:
    result = _cli(blocked, "--url", "memory://", command)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert f"pip install 'ownstate[{extra}]'" in result.stderr


@pytest.mark.parametrize(("blocked", "code", "extra"), [
    (["psycopg"], "ownstate.connect('postgresql://nobody@127.0.0.1:1/none')", "postgres"),
    (["redis"], "ownstate.connect('redis://127.0.0.1:1/0')", "redis"),
    (["httpx"], "ownstate.connect('http://127.0.0.1:1', token='x')", "http"),
    (["h11"], "ownstate.connect('http://127.0.0.1:1', token='x')", "http"),
    (["fastapi"], "__import__('ownstate.server').server.create_app('memory://')", "server"),
    (["langgraph"], "import ownstate.adapters.langgraph", "langgraph"),
    (["langchain_core"], "import ownstate.adapters.langgraph", "langgraph"),
    (["langchain_core"], "import ownstate.formats.langchain", "langgraph"),
    (["agents"], "import ownstate.adapters.openai_agents", "openai-agents"),
    (["google.adk"], "import ownstate.adapters.adk", "adk"),
    (["claude_agent_sdk"], "import ownstate.adapters.claude_agent_sdk", "claude"),
    (["httpx"], "__import__('ownstate.distill').distill.ChatCompletionsExtractor('m')",
     "distill"),
    (["mcp"], "__import__('ownstate.mcp').mcp.http_app('memory://')", "mcp"),
], ids=["postgres", "redis", "http", "http-h11", "server", "langgraph", "langchain-core",
        "langchain-format", "openai-agents", "adk", "claude", "distill", "mcp"])
def test_every_missing_extra_is_a_typed_error_naming_it(blocked: list[str], code: str,
                                                        extra: str) -> None:
    result = _python(blocked, f"""
        import ownstate
        try:
            {code}
        except ownstate.MissingExtra as exc:
            assert isinstance(exc, ImportError)
            print(exc.code, exc.extra, exc.module)
            print(exc)
        else:
            print("imported")
    """)
    assert result.returncode == 0, result.stderr
    code_line, message = result.stdout.splitlines()
    assert code_line.split()[:2] == ["missing_extra", extra]
    assert code_line.split()[2].split(".")[0] in {b.split(".")[0] for b in blocked}
    assert f"needs the '{extra}' extra: pip install 'ownstate[{extra}]'" in message


def test_import_ownstate_needs_no_extra() -> None:
    result = _python(["psycopg", "psycopg_pool", "redis", "httpx", "fastapi", "uvicorn",
                      "langgraph", "langchain_core", "agents", "google", "claude_agent_sdk",
                      "mcp"],
                     """
        import ownstate
        with ownstate.connect("memory://") as client:
            client.session_stores.create("plain")
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_a_broken_import_inside_ownstate_is_not_taken_for_a_missing_extra() -> None:
    with pytest.raises(ModuleNotFoundError) as err, requires("postgres", "the test"):
        importlib.import_module("ownstate.no_such_module")
    assert not isinstance(err.value, ownstate.MissingExtra)
