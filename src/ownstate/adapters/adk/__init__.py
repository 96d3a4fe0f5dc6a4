"""Google ADK on ownstate: a session service and a memory service.

:class:`OwnstateSessionService` implements ADK's ``BaseSessionService`` and
:class:`OwnstateMemoryService` its ``BaseMemoryService``. Where ADK's state goes:

- An ADK session is an ownstate session in one session store (``"adk"`` by default). Its
  ownstate ``session_id`` is derived from ADK's ``(app_name, user_id, session_id)``
  (:func:`ownstate_session_id`), its ``actor_id`` is the ADK ``user_id``, and the labels
  ``adk.app_name`` and ``adk.session_id`` hold the rest.
- Each event is one item of format ``adk.event`` whose data is the event's JSON, as
  ADK's ``DatabaseSessionService`` stores it; it loads back into an equal ``Event``.
- Session-scoped state lives in the history itself: the state given to
  ``create_session`` is an item of format ``adk.state``, and every event carries its own
  ``state_delta``. Reading a session folds them, so a session's state is written in the
  same atomic append as the event that changes it and goes wherever the session goes.
- ``app:`` and ``user:`` state are memory facts (store ``"adk-state"``): app state under
  the subject ``app:<app_name>``, user state under the subject ``<user_id>``, with keys
  ``<app>:app:<key>`` and ``<app>:user:<key>``. Each fact names the event item that set
  it as its source. ``temp:`` state is never stored.
- The memory service keeps one fact per remembered event (store ``"adk-memory"``),
  subject ``<user_id>``, key ``<app>:<session id>:<event id>``.

Because the user's sessions carry their ``actor_id`` and the user's facts their subject,
``client.memory_stores.erase_subject(user_id, include_sessions=True)`` removes everything
these services stored about a user. :class:`OwnstateRunPlugin` records each invocation
as a run and pauses it when a tool asks for confirmation; :func:`resume_decided` answers
each decided one with ADK's ``ToolConfirmation``. See ``docs/adk.md``.

It may touch only the modules of this package, and ``ownstate._extras`` to name the ``adk``
extra when ADK is missing.
"""

from ..._extras import requires

with requires("adk", "the Google ADK adapter"):
    from ._state import EVENT_FORMAT, STATE_FORMAT, ownstate_session_id
    from .decisions import confirmation_message, resume_decided
    from .memory import OwnstateMemoryService
    from .runs import OwnstateRunPlugin, confirmation_requests
    from .sessions import OwnstateSessionService

__all__ = [
    "EVENT_FORMAT",
    "STATE_FORMAT",
    "OwnstateMemoryService",
    "OwnstateRunPlugin",
    "OwnstateSessionService",
    "confirmation_message",
    "confirmation_requests",
    "ownstate_session_id",
    "resume_decided",
]
