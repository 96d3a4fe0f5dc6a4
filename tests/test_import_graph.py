"""The package's shape: an acyclic import graph, and a docstring opening every module that
says what lives there and what the module may touch.

The graph is read from the source (no module is imported): an edge A -> B for each
``import`` in A that names B, at any depth of A (a deferred import inside a function still
ties the two modules together), except under ``if TYPE_CHECKING:``, which never runs.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "ownstate"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom,
             modules: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = node.module or ""
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    targets = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            targets.add(f"{base}.{alias.name}")
        elif base in modules:
            targets.add(base)
    return targets


def import_graph() -> dict[str, set[str]]:
    """Each module of ownstate and the modules of ownstate it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        edges: set[str] = set()
        for node in _imports(tree):
            edges |= _targets(name, path, node, modules)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def test_the_graph_sees_relative_and_deferred_imports() -> None:
    graph = import_graph()
    assert "ownstate.errors" in graph["ownstate"]                  # from .errors import ...
    assert "ownstate.limits" in graph["ownstate.api.memory"]      # from .. import limits
    assert "ownstate.backends.http" in graph["ownstate.backends"]  # deferred, in a function


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_has_no_cycles() -> None:
    assert cycles(import_graph()) == []


def test_every_module_opens_with_a_docstring() -> None:
    missing = [name for name, path in _modules().items()
               if not ast.get_docstring(ast.parse(path.read_text()))]
    assert missing == []


def says_what_it_may_touch(docstring: str) -> bool:
    """Whether a module's docstring has the sentence naming what the module may touch."""
    return "may touch" in " ".join(docstring.split())


def test_the_touch_sentence_is_found_across_a_line_break() -> None:
    assert says_what_it_may_touch("It may\n    touch the ports.")
    assert not says_what_it_may_touch("The runs port on SQLite.")


def test_every_module_says_what_it_may_touch() -> None:
    silent = [name for name, path in _modules().items()
              if not says_what_it_may_touch(ast.get_docstring(ast.parse(path.read_text())) or "")]
    assert silent == []


#: The shells over the library (the server, the CLI, the framework adapters), each a package
#: (or module) free to use its own private modules, and the library's private modules they
#: may still import, with why.
SHELLS = ("ownstate.server", "ownstate.cli", "ownstate.adapters")
SHELL_MAY_IMPORT = {
    "ownstate._extras": "the guard that names the extra an optional dependency comes with",
    "ownstate._wire": "the wire protocol the server speaks and the HTTP backend reads",
    "ownstate._ids": "the library's clock, which tests move, and its time format",
}


def _shell_of(module: str) -> str | None:
    return next((s for s in SHELLS if module == s or module.startswith(s + ".")), None)


def private_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) where a shell imports a private module of the library: one
    with a name beginning with ``_`` outside the shell itself."""
    found = []
    for module, targets in sorted(graph.items()):
        shell = _shell_of(module)
        if shell is None:
            continue
        for target in sorted(targets):
            if _shell_of(target) == shell or target in SHELL_MAY_IMPORT:
                continue
            if any(part.startswith("_") for part in target.split(".")[1:]):
                found.append((module, target))
    return found


def test_private_import_finder_finds_one() -> None:
    graph = {"ownstate.server.app": {"ownstate.api._paging", "ownstate.server._x"},
             "ownstate.api.aio": {"ownstate.api._paging"},
             "ownstate.adapters.adk": {"ownstate.adapters._kernel", "ownstate._tokens"}}
    assert private_imports(graph) == [("ownstate.adapters.adk", "ownstate._tokens"),
                                      ("ownstate.server.app", "ownstate.api._paging")]


def test_server_cli_and_adapters_use_only_public_names() -> None:
    assert private_imports(import_graph()) == []
