"""``OwnstateRunPlugin``: an ADK plugin that records each invocation as an ownstate run
in the session an :class:`~.sessions.OwnstateSessionService` keeps, and pauses it for a
human when a tool asks for confirmation. It may touch runs only (through the adapters'
kernel and the session service), and ADK's ``BasePlugin`` and ``google.genai`` types."""

from __future__ import annotations

import contextlib
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from ...errors import SessionNotFound
from ...model import JSON
from .._kernel import BOOKKEEPING_CLOSE_IGNORES, close_run, lease_owner, track_run
from .sessions import OwnstateSessionService

#: The function call ADK makes when a tool asks for confirmation (``require_confirmation``
#: or ``tool_context.request_confirmation``), which the client answers with a function
#: response carrying a ``ToolConfirmation``.
REQUEST_CONFIRMATION = "adk_request_confirmation"
#: The ``framework`` of the runs this plugin records.
FRAMEWORK = "adk"


def confirmation_requests(event: Any) -> list[dict[str, JSON]]:
    """What a human is asked to confirm in ``event``: one entry per confirmation request
    (``request_id``, the ``tool``, its ``call_id`` and ``args``, the tool's ``hint`` and
    ``payload``)."""
    found: list[dict[str, JSON]] = []
    for call in event.get_function_calls() if event.content else []:
        if call.name != REQUEST_CONFIRMATION or not call.id:
            continue
        args = call.args or {}
        original = args.get("originalFunctionCall") or {}
        confirmation = args.get("toolConfirmation") or {}
        found.append({"request_id": call.id, "tool": original.get("name"),
                      "call_id": original.get("id"), "args": original.get("args"),
                      "hint": confirmation.get("hint"), "payload": confirmation.get("payload")})
    return found


class OwnstateRunPlugin(BasePlugin):
    """Records each ADK invocation as an ownstate run:
    ``Runner(..., session_service=service, plugins=[OwnstateRunPlugin(service)])``.

    Before the invocation runs, a run (framework ``adk``, thread key the ADK session id) is
    opened in the invocation's session; when it has run, the run is closed ``done``, or,
    when a tool asked for confirmation, marked ``awaiting_human`` with what it asks
    (``awaiting["requests"]``, see :func:`confirmation_requests`), for a human to decide
    and :func:`~.decisions.resume_decided` to answer. A session that already has an active
    run (another framework's) is left as it is and nothing is recorded for that
    invocation.
    """

    def __init__(self, service: OwnstateSessionService, *, name: str = "ownstate_runs"
                 ) -> None:
        super().__init__(name=name)
        self._service = service
        self._open: dict[str, tuple[str, int]] = {}  # invocation id -> (run id, token)
        self._owner = lease_owner(FRAMEWORK)
        self._asked: dict[str, list[dict[str, JSON]]] = {}  # invocation id -> requests
        self._adopted: dict[str, tuple[str, int]] = {}  # session key -> (run id, token)

    @property
    def service(self) -> OwnstateSessionService:
        return self._service

    def adopt(self, app_name: str, user_id: str, session_id: str, run_id: str,
              token: int) -> None:
        """Drive the already claimed run ``run_id`` (with the lease's ``token``) as the
        next invocation's run in that ADK session, instead of opening one: how a resumed
        run goes on being recorded."""
        self._adopted[self._service._key(app_name, user_id, session_id)] = (run_id, token)

    async def before_run_callback(self, *, invocation_context: Any) -> types.Content | None:
        session = invocation_context.session
        key = self._service._key(session.app_name, session.user_id, session.id)
        adopted = self._adopted.pop(key, None)
        opened = adopted or await self._service._bridge.acall(self._start(key, session.id))
        if opened is not None:
            self._open[invocation_context.invocation_id] = opened
        return None

    async def on_event_callback(self, *, invocation_context: Any, event: Any) -> Any:
        if invocation_context.invocation_id in self._open:
            requests = confirmation_requests(event)
            if requests:
                self._asked.setdefault(invocation_context.invocation_id, []).extend(requests)
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        invocation = invocation_context.invocation_id
        opened = self._open.pop(invocation, None)
        asked = self._asked.pop(invocation, None)
        if opened is None:
            return
        if asked:
            session = invocation_context.session
            awaiting: dict[str, JSON] = {
                "kind": "tool_confirmation", "tool": asked[0]["tool"], "requests": asked,
                "adk": {"app_name": session.app_name, "user_id": session.user_id,
                        "session_id": session.id}}
            agent = getattr(invocation_context.agent, "name", None)
            await self._service._bridge.acall(self._pause(*opened, awaiting, agent))
        else:
            await self._service._bridge.acall(self._finish(*opened))

    async def _start(self, key: str, thread_key: str) -> tuple[str, int] | None:
        store, _ = await self._service._ready()
        try:
            handle = await store.get(key)
            return await track_run(self._service._client, handle, FRAMEWORK, thread_key,
                                   owner=self._owner)
        except SessionNotFound:  # deleted meanwhile: nothing to record
            return None

    async def _pause(self, run_id: str, token: int, awaiting: dict[str, JSON],
                     agent: str | None) -> None:
        with contextlib.suppress(*BOOKKEEPING_CLOSE_IGNORES):
            await self._service._client.runs.mark_awaiting(
                run_id, awaiting, requested_by=agent if isinstance(agent, str) else None,
                fencing_token=token)

    async def _finish(self, run_id: str, token: int) -> None:
        await close_run(self._service._client, run_id, "done", fencing_token=token)
