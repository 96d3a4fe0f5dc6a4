"""What every port over HTTP shares: the transport to the server."""

from __future__ import annotations

from .._replay import ReplayCache
from ._transport import Transport

__all__ = ["HttpBase"]


class HttpBase:
    """Holds the transport; each port mixin turns its calls into requests on it."""

    _http: Transport
    #: the items of sessions replayed lately, or None when turned off (``replay_cache=0``)
    _replay: ReplayCache | None
