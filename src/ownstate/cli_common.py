"""What the modules of the ``ownstate`` command share: the click type for spans of time
(``90s``, ``15m``, ``2h``, ``7d``) and finding a session by id across session stores.
It may touch only click and the public sync API (``ownstate``, and ``ownstate.embeddings``
to load an embedder)."""

from __future__ import annotations

from typing import Any

import click

import ownstate

__all__ = ["Duration", "find_session", "load_embedder"]

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class Duration(click.ParamType[float]):
    """A span of time: seconds, or a number with s, m, h, d or w (``90s``, ``2h``, ``7d``)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        text = str(value).strip().lower()
        unit = _DURATION_UNITS.get(text[-1:])
        number = text[:-1] if unit is not None else text
        try:
            seconds = float(number) * (unit or 1)
        except ValueError:
            self.fail(f"{value!r} is not a duration like 90, 90s, 15m, 2h or 7d", param, ctx)
        if seconds < 0:
            self.fail(f"{value!r} is negative", param, ctx)
        return seconds


def find_session(client: ownstate.Client, session_id: str, store: str | None, *,
                 option: str = "--store") -> ownstate.Session:
    """The session ``session_id`` of ``store``, else of whichever session store holds it;
    a usage error (naming ``option``) when several do."""
    if store is not None:
        return client.session_stores.get(store).get(session_id)
    matches: list[ownstate.Session] = []
    for candidate in client.session_stores.list():
        try:
            matches.append(candidate.get(session_id))
        except ownstate.SessionNotFound:
            continue
    if not matches:
        raise click.ClickException(f"no session {session_id!r} in any session store")
    if len(matches) > 1:
        names = ", ".join(m.store for m in matches)
        raise click.UsageError(f"session {session_id!r} is in several stores ({names}); "
                               f"choose one with {option}")
    return matches[0]


def load_embedder(spec: str | None) -> Any:
    """The embedder ``spec`` names: ``minilm`` (the bundled
    :class:`~ownstate.embeddings.MiniLM`, extra ``embed``) or ``module:attribute``, an
    :class:`~ownstate.embeddings.Embedder` or a callable taking no arguments that makes
    one; None for none."""
    if not spec:
        return None
    if spec.lower() == "minilm":
        from ownstate.embeddings import MiniLM

        return MiniLM().load()
    module, _, attribute = spec.partition(":")
    if not module or not attribute:
        raise click.BadParameter("give minilm or module:attribute", param_hint="--embedder")
    import importlib

    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load {spec!r}: {exc}",
                                 param_hint="--embedder") from exc
    from ownstate.embeddings import Embedder

    return found if isinstance(found, Embedder) and not isinstance(found, type) else found()
