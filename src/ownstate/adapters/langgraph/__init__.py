"""LangGraph on ownstate: a checkpointer whose threads are sessions, and a store over memory.

Needs the ``langgraph`` extra. See docs/langgraph.md and docs/langgraph-store.md.
"""

from .saver import OwnstateSaver, acatch_up, arebuild, catch_up, rebuild
from .store import OwnstateStore

__all__ = ["OwnstateSaver", "OwnstateStore", "acatch_up", "arebuild", "catch_up", "rebuild"]
