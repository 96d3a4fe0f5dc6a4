"""LangGraph on ownstate: a checkpointer whose threads are sessions, and a store over memory.

Needs the ``langgraph`` extra. See docs/langgraph.md and docs/langgraph-store.md.

It may touch only the modules of this package, and ``ownstate._extras`` to name the
``langgraph`` extra when LangGraph is missing.
"""

from ..._extras import requires

with requires("langgraph", "the LangGraph adapter"):
    from .decisions import aresume_decided, decision_value, resume_command, resume_decided
    from .rebuild import acatch_up, arebuild, catch_up, rebuild
    from .saver import OwnstateSaver
    from .store import OwnstateStore

__all__ = ["OwnstateSaver", "OwnstateStore", "acatch_up", "arebuild", "aresume_decided",
           "catch_up", "decision_value", "rebuild", "resume_command", "resume_decided"]
