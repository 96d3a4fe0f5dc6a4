"""The server's routes, one module per kind of state.

It may touch only the route modules and FastAPI's ``APIRouter``.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import assets, checkpoints, keys, memory, runs, session_stores, sessions

__all__ = ["ROUTERS"]

ROUTERS: list[APIRouter] = [
    keys.router,
    session_stores.router,
    sessions.router,
    memory.router,
    runs.router,
    checkpoints.router,
    assets.router,
]
