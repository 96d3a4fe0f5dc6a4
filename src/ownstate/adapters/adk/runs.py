"""``OwnstateRunPlugin``: an ADK plugin that records each invocation as an ownstate run
in the session an :class:`~.sessions.OwnstateSessionService` keeps. Touches runs only."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from ...errors import (
    ActiveRunExists,
    RunClosed,
    SessionNotFound,
    StaleLease,
)
from .sessions import OwnstateSessionService


class OwnstateRunPlugin(BasePlugin):
    """Records each ADK invocation as an ownstate run:
    ``Runner(..., session_service=service, plugins=[OwnstateRunPlugin(service)])``.

    Before the invocation runs, a run (framework ``adk``, thread key the ADK session id) is
    opened in the invocation's session; when it has run, the run is closed ``done``. A
    session that already has an active run (another framework's) is left as it is and
    nothing is recorded for that invocation.
    """

    def __init__(self, service: OwnstateSessionService, *, name: str = "ownstate_runs"
                 ) -> None:
        super().__init__(name=name)
        self._service = service
        self._open: dict[str, tuple[str, int]] = {}  # invocation id -> (run id, token)

    async def before_run_callback(self, *, invocation_context: Any) -> types.Content | None:
        session = invocation_context.session
        key = self._service._key(session.app_name, session.user_id, session.id)
        opened = await self._service._bridge.acall(self._start(key, session.id))
        if opened is not None:
            self._open[invocation_context.invocation_id] = opened
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        opened = self._open.pop(invocation_context.invocation_id, None)
        if opened is not None:
            await self._service._bridge.acall(self._finish(*opened))

    async def _start(self, key: str, thread_key: str) -> tuple[str, int] | None:
        store, _ = await self._service._ready()
        try:
            handle = await store.get(key)
            run = await self._service._client.runs.open_run(
                handle, "adk", thread_key[:256], owner=f"adk-{uuid.uuid4().hex[:12]}")
        except (ActiveRunExists, SessionNotFound):
            return None
        return run.run_id, run.fencing_token

    async def _finish(self, run_id: str, token: int) -> None:
        with contextlib.suppress(RunClosed, StaleLease):
            await self._service._client.runs.close_run(run_id, "done", fencing_token=token)

