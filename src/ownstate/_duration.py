"""How progress lines spell a duration: ``42s``, ``8m40s``, ``2h05m``.

It may touch nothing of ownstate's: the importers' progress and the migrations' both use
it.
"""

from __future__ import annotations

__all__ = ["duration_text"]


def duration_text(seconds: float) -> str:
    """``seconds`` as a person reads it, whole seconds only."""
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"
