"""``OwnstateRunPlugin``: an ADK plugin that records each invocation as an ownstate run
in the session an :class:`~.sessions.OwnstateSessionService` keeps. Touches runs only."""

from __future__ import annotations

from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from ...errors import SessionNotFound
from .._kernel import close_run, lease_owner, track_run
from .sessions import OwnstateSessionService

#: The ``framework`` of the runs that record invocations.
FRAMEWORK = "adk"


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
        self._owner = lease_owner(FRAMEWORK)

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
            return await track_run(self._service._client, handle, FRAMEWORK, thread_key,
                                   owner=self._owner)
        except SessionNotFound:  # deleted meanwhile: nothing to record
            return None

    async def _finish(self, run_id: str, token: int) -> None:
        await close_run(self._service._client, run_id, "done", fencing_token=token)

