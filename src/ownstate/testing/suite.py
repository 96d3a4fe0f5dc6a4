"""Which modules of the conformance suite a test module runs (see :mod:`.plugin`).

It may touch nothing of ownstate's but the suite's own modules, imported by name
(``importlib``).
"""

from __future__ import annotations

import importlib
import importlib.util
import types

__all__ = ["MODULES", "Suite"]

#: The modules of :mod:`ownstate.testing` that hold tests, which ``Suite()`` runs.
MODULES = ("access", "assets", "checkpoints", "concurrency", "conformance", "decisions",
           "memory", "memory_stateful", "runs", "search", "stateful")


class Suite:
    """Modules of the conformance suite to run in the test module that holds this object.

    ``modules`` are names of modules of :mod:`ownstate.testing` (default: :data:`MODULES`).
    Raises :class:`ValueError` for a name that is not such a module.
    """

    def __init__(self, *modules: str) -> None:
        for name in modules:
            if "." in name or importlib.util.find_spec(f"ownstate.testing.{name}") is None:
                raise ValueError(f"ownstate.testing has no module {name!r}; the suite's "
                                 f"modules are {', '.join(MODULES)}")
        self.modules: tuple[str, ...] = modules or MODULES

    def __repr__(self) -> str:
        return f"Suite({', '.join(map(repr, self.modules))})"

    def exports(self) -> list[tuple[types.ModuleType, list[str]]]:
        """Each module with what ``from ownstate.testing.<module> import *`` binds."""
        found = []
        for module_name in self.modules:
            module = importlib.import_module(f"ownstate.testing.{module_name}")
            exported = getattr(module, "__all__", None)
            if exported is None:
                exported = [n for n in vars(module)
                            if not n.startswith("_") and n != "pytestmark"]
            found.append((module, list(exported)))
        return found

    def names(self) -> dict[str, types.ModuleType]:
        """What star imports of the modules, in order, bind: a later module's name replaces
        an earlier one's (several modules have a ``test_tenants_do_not_see_each_other``)."""
        return {name: module for module, exported in self.exports() for name in exported}
