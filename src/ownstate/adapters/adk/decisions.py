"""Human decisions carried back into Google ADK: each decided run paused for a tool
confirmation (recorded by :class:`~.runs.OwnstateRunPlugin`) is answered with ADK's own
``ToolConfirmation``, sent as the function response to each ``adk_request_confirmation``
call, and the invocation runs on. It may touch runs through the public API only (the shared
``_decided`` loop and :mod:`.runs`), and ADK's runner, ``ToolConfirmation`` and
``google.genai`` types.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from google.adk.runners import Runner
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from ...errors import InvalidInput
from ...model import Decision, Run
from .._decided import Resumed, decision_of, each_decided
from .runs import FRAMEWORK, REQUEST_CONFIRMATION, OwnstateRunPlugin

__all__ = ["confirmation_message", "resume_decided"]


def confirmation_message(run: Run, decision: Decision) -> types.Content:
    """The user message that answers every confirmation request of ``run``: a function
    response per ``adk_request_confirmation`` call, its ``ToolConfirmation`` confirmed
    when the decision approves, with the decision's payload (the tool reads it as
    ``tool_context.tool_confirmation.payload``) and its comment as the hint.

    Raises :class:`~ownstate.errors.InvalidInput` for a run that asks for no confirmation.
    """
    awaiting = run.awaiting or {}
    requests = awaiting.get("requests")
    ids = [r.get("request_id") for r in requests if isinstance(r, Mapping)] if isinstance(
        requests, list) else []
    if not ids or not all(isinstance(i, str) for i in ids):
        raise InvalidInput(f"run {run.run_id!r} asks for no tool confirmation",
                           field="run_id")
    confirmation = ToolConfirmation(confirmed=decision.approved, payload=decision.payload,
                                    hint=decision.comment or "")
    response = confirmation.model_dump(by_alias=True, exclude_none=True)
    return types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(
            id=request_id, name=REQUEST_CONFIRMATION, response=response))
        for request_id in ids])


async def resume_decided(runner: Runner, plugin: OwnstateRunPlugin, *, limit: int = 100,
                         lease_ttl: float = 60.0) -> list[Resumed]:
    """Resume every decided ``adk`` run (up to ``limit``, oldest first) on ``runner``
    (whose app carries ``plugin``): claim it, then ``runner.run_async`` with
    :func:`confirmation_message`; the plugin records the invocation on the same run and
    closes it, or pauses it again at the next confirmation. Returns the runs resumed, each
    with the list of events the invocation produced; a run another worker resumed first is
    passed over.

    Raises whatever the invocation raises.
    """
    service = plugin.service
    client = service._client

    async def resume(run: Run) -> Any:
        message = confirmation_message(run, decision_of(run))
        where = (run.awaiting or {}).get("adk")
        if not isinstance(where, Mapping):
            raise InvalidInput(f"run {run.run_id!r} names no ADK session", field="run_id")
        app, user, session_id = where["app_name"], where["user_id"], where["session_id"]
        lease = await service._bridge.acall(client.runs.resume(
            run.run_id, f"adk-{uuid.uuid4().hex[:12]}", ttl=lease_ttl))
        plugin.adopt(app, user, session_id, run.run_id, lease.fencing_token)
        return [event async for event in runner.run_async(
            user_id=user, session_id=session_id, new_message=message)]

    return await each_decided(service._bridge, FRAMEWORK, resume, limit=limit)
