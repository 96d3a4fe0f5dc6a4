"""The pytest plugin that runs the conformance suite in a test module that asks for it.

Installing ownstate registers this module as a plugin (entry point ``pytest11``, named
``ownstate.testing.plugin``; ``-p no:ownstate.testing.plugin`` turns it off). It collects
nothing and provides no fixture until a test module holds a :class:`Suite`::

    ownstate_suite = Suite("conformance")   # Suite("conformance", "runs"); Suite(): all

That module then collects the tests of those modules of :mod:`ownstate.testing` as its own
(``test_my_backend.py::test_append_and_list[...]``) and sees their fixtures, all built on
the one fixture it (or a conftest) provides: ``target``, a :class:`~ownstate.testing.Target`.
A name the test module defines itself wins over the suite's name, as after a star import.
Where plugins are not loaded automatically (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), load it
with ``-p ownstate.testing.plugin`` or ``pytest_plugins = ["ownstate.testing.plugin"]`` in
the root conftest. It needs pytest 9.1 or newer.

It may touch only :mod:`.suite` and pytest.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from .suite import Suite

__all__ = ["pytest_pycollect_makeitem"]

#: Per test module: each name the suites in it contribute, with the module it comes from.
_CONTRIBUTED = pytest.StashKey[dict[str, tuple[types.ModuleType, Any]]]()


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Module | pytest.Class, name: str,
                              obj: object) -> list[pytest.Item | pytest.Collector] | None:
    """Collect a :class:`Suite`'s tests where the test module holds it; nothing else."""
    if not isinstance(collector, pytest.Module):
        if isinstance(obj, Suite):
            raise TypeError(f"{name} = {obj!r} is in a class: a Suite runs from a test "
                            "module's namespace")
        return None
    if _CONTRIBUTED not in collector.stash:
        # The first name of the module: register the suites' fixtures before any of the
        # module's own tests are collected, so that those may use them too.
        collector.stash[_CONTRIBUTED] = _contribute(collector)
    if not isinstance(obj, Suite):
        return None
    contributed = collector.stash[_CONTRIBUTED]
    made: list[pytest.Item | pytest.Collector] = []
    for module, exported in obj.exports():
        mine = {name: contributed[name][1] for name in exported
                if name in contributed and contributed[name][0] is module}
        if len(obj.modules) > 1:
            # This module's fixtures in force while its tests are collected (each test
            # keeps the fixtures it was collected with): memory and runs both have a clock.
            _register(collector, {name: getattr(module, name) for name in exported
                                  if name in contributed})
        for suite_name, suite_obj in mine.items():
            found = collector.ihook.pytest_pycollect_makeitem(
                collector=collector, name=suite_name, obj=suite_obj)
            if found is None:
                continue
            for node in found if isinstance(found, list) else [found]:
                for mark in _marks(module):
                    node.add_marker(mark)
                made.append(node)
    return made


def _contribute(collector: pytest.Module) -> dict[str, tuple[types.ModuleType, Any]]:
    """The names the module's suites bring in (those the module does not define), with
    the suites' fixtures registered for this module only."""
    own = vars(collector.obj)
    contributed: dict[str, tuple[types.ModuleType, Any]] = {}
    suites = [value for value in own.values() if isinstance(value, Suite)]
    if suites and not any(line.split(":")[0].strip() == "slow"
                          for line in collector.config.getini("markers")):
        # before the suite's modules are imported: some of their tests are marked slow
        collector.config.addinivalue_line("markers", "slow: longer concurrency or property "
                                          "tests of ownstate's conformance suite")
    for suite in suites:
        for name, module in suite.names().items():
            if name not in own:
                contributed[name] = (module, getattr(module, name))
    if contributed:
        if pytest.version_tuple < (9, 1):
            raise pytest.UsageError(f"ownstate.testing.Suite needs pytest 9.1 or newer, not "
                                    f"{pytest.__version__}")
        bound = {name: obj for name, (_, obj) in contributed.items()}
        # Bound in the test module, as a star import would: other plugins look a collected
        # name up on the module.
        vars(collector.obj).update(bound)
        _register(collector, bound)
    return contributed


def _register(collector: pytest.Module, names: dict[str, Any]) -> None:
    """Register the fixtures among ``names`` for the test module (visible to its tests
    only), after those registered before: later registered, more specific."""
    holder = types.ModuleType(f"{collector.obj.__name__}[ownstate suite]")
    vars(holder).update(names)
    # pytest's documented way to register an object's fixtures for a given node; it has
    # no public wrapper.
    collector.session._fixturemanager.parsefactories(holder=holder, node=collector)


def _marks(module: types.ModuleType) -> list[pytest.Mark | pytest.MarkDecorator]:
    marks = getattr(module, "pytestmark", [])
    return list(marks) if isinstance(marks, list) else [marks]
