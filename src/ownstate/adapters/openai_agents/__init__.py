"""The OpenAI Agents SDK adapter: its ``Session`` protocol and human approvals over ownstate.

:class:`OwnstateSession` is an ``agents.memory.Session``: pass it to ``Runner.run(...,
session=...)``. It keeps the conversation in one ownstate session (store ``openai-agents``
by default, session id = the SDK's session id), items stored exactly as the SDK gives them,
with format ``openai.responses``.

When a run stops for tool approvals (``needs_approval=True`` tools),
:meth:`OwnstateSession.hold_for_approval` keeps the SDK's serialized ``RunState`` as a
checkpoint of an ownstate run in status ``awaiting_human``, so that any process on the same
database can find it with ``client.runs.outstanding()``, load it
(:meth:`OwnstateSession.load_approval`), approve or reject each call, and carry on with the
real ``Runner`` (:meth:`OwnstateSession.resume_from_approval`), which closes the run when
the agent is done. :func:`resume_decided` does that for every run a human has decided
(``client.runs.decide``). See ``docs/openai-agents.md``.

It may touch only the modules of this package, and ``ownstate._extras`` to name the
``openai-agents`` extra when the SDK is missing.
"""

from ..._extras import requires

with requires("openai-agents", "the OpenAI Agents SDK adapter"):
    from .approvals import FRAMEWORK, PendingApproval, StaleApproval
    from .decisions import apply_decision, resume_decided
    from .session import (
        DEFAULT_ACTOR_ID,
        DEFAULT_ITEM_CACHE_SIZE,
        DEFAULT_STORE,
        FORMAT,
        InvalidType,
        OwnstateSession,
    )

__all__ = [
    "DEFAULT_ACTOR_ID",
    "DEFAULT_ITEM_CACHE_SIZE",
    "DEFAULT_STORE",
    "FORMAT",
    "FRAMEWORK",
    "InvalidType",
    "OwnstateSession",
    "PendingApproval",
    "StaleApproval",
    "apply_decision",
    "resume_decided",
]
