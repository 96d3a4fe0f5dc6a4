"""Human approvals of the OpenAI Agents SDK adapter: a paused run loaded for a decision
(:class:`PendingApproval`), the error of a stale one, and what a pause stores (the run
state's checkpoint payload and the awaiting description), checked before anything is
written. It may touch no storage (:class:`~.session.OwnstateSession` writes what is built
here): only the error tree, the limits, the model, and the SDK's ``RunState`` and exceptions
(``agents``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from agents import (
    Agent,
    RunResult,
    RunResultStreaming,
    RunState,
    ToolApprovalItem,
)
from agents.exceptions import UserError

from ... import limits as _validate
from ...errors import (
    Conflict,
    InvalidInput,
    LimitExceeded,
)
from ...limits import Limits
from ...model import JSON, Run

#: The ``framework`` of the runs that hold approvals.
FRAMEWORK = "openai.agents"
_TYPE_TAG = "json"
_CHECKPOINT_PREFIX = "run-state-"
#: Arguments longer than this are cut in the awaiting description (the checkpoint keeps
#: them whole), so that what a console lists stays small whatever a tool is given.
_MAX_DESCRIBED_ARGUMENT_CHARS = 4096
#: Room left in ``Limits.max_item_bytes`` for what mark_awaiting adds to the description.
_DESCRIPTION_SLACK_BYTES = 1024
_MAX_TEXT_CHARS = 256


class StaleApproval(Conflict):
    """The approval was loaded from a state that has since been replaced: the run was
    resumed and paused again after :meth:`OwnstateSession.load_approval`. Load it again.

    Carries ``run_id``, ``checkpoint_id`` (the one loaded) and ``current`` (the newest).
    """

    code = "stale_approval"


@dataclass(eq=False)
class PendingApproval:
    """A paused run, loaded for a decision: the ownstate run, the SDK's restored
    ``RunState`` and what it waits for.

    Decide with :meth:`approve` and :meth:`reject` (they change only this object), then
    hand it to :meth:`OwnstateSession.resume_from_approval`.
    """

    run: Run
    """The ownstate run, as read when loaded (status ``awaiting_human``)."""
    agent: Agent[Any]
    """The starting agent the state was restored with; the resumed run starts from it."""
    state: RunState[Any, Agent[Any]]
    """The SDK's run state, restored from the run's newest checkpoint."""
    checkpoint_id: str
    """The checkpoint the state came from (``run-state-<revision>``)."""
    revision: int
    """How many times the run has been paused: 1 for the first approval."""

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def requests(self) -> list[dict[str, JSON]]:
        """What the run waits for, one entry per tool call (``call_id``, ``tool``,
        ``arguments``, ``agent``), as stored in ``run.awaiting["requests"]``."""
        awaiting = self.run.awaiting or {}
        requests = awaiting.get("requests")
        return [dict(r) for r in requests if isinstance(r, dict)] if isinstance(
            requests, list) else []

    @property
    def interruptions(self) -> list[ToolApprovalItem]:
        """The SDK's approval items still waiting for a decision."""
        return self.state.get_interruptions()

    def approve(self, call_id: str | None = None, *, always: bool = False) -> None:
        """Approve the tool call ``call_id`` (every waiting call when ``None``).

        ``always=True`` approves every later call of the same tool in this run too.
        Raises :class:`~ownstate.errors.InvalidInput` for a ``call_id`` the run does not
        wait for.
        """
        for item in self._select(call_id):
            self.state.approve(item, always_approve=always)

    def reject(
        self, call_id: str | None = None, *, message: str | None = None, always: bool = False
    ) -> None:
        """Reject the tool call ``call_id`` (every waiting call when ``None``): the tool
        does not run and the model is told so (``message`` when given, else the SDK's
        default text) when the run resumes.

        Raises :class:`~ownstate.errors.InvalidInput` for a ``call_id`` the run does not
        wait for, or a ``message`` that is not a string.
        """
        if message is not None and not isinstance(message, str):
            raise InvalidInput("message must be a string", field="message")
        for item in self._select(call_id):
            self.state.reject(item, always_reject=always, rejection_message=message)

    def _select(self, call_id: str | None) -> list[ToolApprovalItem]:
        waiting = self.interruptions
        if call_id is None:
            return waiting
        chosen = [item for item in waiting if item.call_id == call_id]
        if not chosen:
            raise InvalidInput(f"run {self.run_id!r} waits for no tool call {call_id!r}",
                               field="call_id", run_id=self.run_id, call_id=call_id)
        return chosen


def _printable(value: object, field: str) -> str:
    if (not isinstance(value, str) or not value or len(value) > _MAX_TEXT_CHARS
            or any(ch < " " or ch == "\x7f" for ch in value)):
        raise InvalidInput(f"{field} must be 1-{_MAX_TEXT_CHARS} printable chars", field=field)
    return value


def _describe(item: ToolApprovalItem) -> dict[str, JSON]:
    """The awaiting description of one tool call: what a human needs to decide."""
    arguments = item.arguments
    described: dict[str, JSON] = {
        "call_id": item.call_id,
        "tool": item.qualified_name or item.name,
        "arguments": arguments,
        "agent": getattr(item.agent, "name", None),
    }
    if arguments is not None and len(arguments) > _MAX_DESCRIBED_ARGUMENT_CHARS:
        described["arguments"] = arguments[:_MAX_DESCRIBED_ARGUMENT_CHARS]
        described["arguments_truncated"] = True
    return described


@dataclass(frozen=True)
class _Parked:
    """A run state ready to store: the checkpoint payload and the awaiting description."""

    payload: bytes
    awaiting: dict[str, JSON]
    requested_by: str | None


def to_state(result: object) -> RunState[Any, Any]:
    """The run state of a ``RunResult`` or ``RunResultStreaming``."""
    convert = getattr(result, "to_state", None)
    if not isinstance(result, (RunResult, RunResultStreaming)) or not callable(convert):
        raise InvalidInput("result must be a RunResult, RunResultStreaming or RunState",
                           field="result")
    return cast(RunState[Any, Any], convert())


def park_data(limits: Limits, state: RunState[Any, Any], revision: int,
              requested_by: str | None, context_serializer: Any) -> _Parked:
    """Everything a pause stores, checked before anything is written."""
    interruptions = state.get_interruptions()
    if not interruptions:
        raise InvalidInput("the run has no interruptions to approve", field="result")
    try:
        snapshot = (state.to_json(context_serializer=context_serializer)
                    if context_serializer is not None else state.to_json())
        text = json.dumps(snapshot,
                          ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (UserError, TypeError, ValueError) as exc:
        raise InvalidInput(f"the RunState cannot be serialized: {exc}",
                           field="result") from exc
    payload = text.encode()
    if len(payload) > limits.max_checkpoint_bytes:
        raise LimitExceeded(f"the RunState is {len(payload)} bytes; the limit is "
                            f"{limits.max_checkpoint_bytes}", field="result",
                            limit=limits.max_checkpoint_bytes, actual=len(payload))
    requests = [_describe(item) for item in interruptions]
    awaiting: dict[str, JSON] = {"kind": "approval", "tool": requests[0]["tool"],
                                 "revision": revision, "requests": cast(JSON, requests)}
    size = len(_validate.encode_json(awaiting, field="awaiting").encode())
    room = limits.max_item_bytes - _DESCRIPTION_SLACK_BYTES
    if size > room:
        raise LimitExceeded(f"the approval requests take {size} bytes; the limit is "
                            f"{room}", field="awaiting", limit=room, actual=size)
    if requested_by is not None:
        by: str | None = _printable(requested_by, "requested_by")
    else:
        name = getattr(interruptions[0].agent, "name", None)
        try:
            by = _printable(name, "requested_by")
        except InvalidInput:  # an agent name we cannot store as a requester: say nothing
            by = None
    return _Parked(payload, awaiting, by)

