"""Optional dependencies: turning a failed import into one line that names the extra.

Backends, adapters and the server import their third-party packages inside
:func:`requires`, so a missing package surfaces as :class:`~ownstate.errors.MissingExtra`
(``pip install 'ownstate[postgres]'``) rather than a bare ``ModuleNotFoundError``.

It may touch only the error tree (``ownstate.errors``); the packages it imports are the ones
its callers name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .errors import MissingExtra

__all__ = ["requires"]


@contextmanager
def requires(extra: str, what: str) -> Iterator[None]:
    """Run the imports of ``what`` (e.g. ``"the PostgreSQL backend"``), which come with the
    extra ``extra``; an import that fails raises :class:`~ownstate.errors.MissingExtra`.

    A failure inside ownstate's own modules is a bug, not a missing extra, and propagates.
    """
    try:
        yield
    except MissingExtra:
        raise  # a nested guard already named the extra
    except ImportError as exc:
        module = exc.name or ""
        if module == "ownstate" or module.startswith("ownstate."):
            raise
        raise MissingExtra(
            f"{what} needs the {extra!r} extra: pip install 'ownstate[{extra}]' ({exc})",
            extra=extra, module=module) from exc
