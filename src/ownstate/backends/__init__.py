"""Backends, chosen by URL scheme; each driver is imported only when its scheme is used.

A backend outside this package gets a scheme of its own through an entry point in the
``ownstate.backends`` group: the entry point's name is the scheme, its value a callable
taking the URL and returning a :class:`Backend` (not yet set up)::

    # pyproject.toml of the distribution that ships the backend
    [project.entry-points."ownstate.backends"]
    mine = "mine_backend:open_backend"

The built-in schemes come first; an entry point is loaded only when its scheme is used.

It may touch the interface (``base``) and errors, each built-in backend package only when
its scheme is used, and other distributions' entry points (``importlib.metadata``); never
the API above it.
"""

from __future__ import annotations

import os
import re
from importlib.metadata import entry_points
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit, urlunsplit

from ..errors import InvalidInput
from .base import Backend, Capability, NewItem

__all__ = ["DEFAULT_URL", "ENTRY_POINT_GROUP", "Backend", "Capability", "NewItem", "open_backend",
           "resolve_url"]

DEFAULT_URL = "sqlite:///ownstate.db"
#: The entry-point group naming the backends other distributions provide, by URL scheme.
ENTRY_POINT_GROUP = "ownstate.backends"
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def resolve_url(url: str | None) -> str:
    """The argument, else ``OWNSTATE_URL``, else the embedded default ``sqlite:///ownstate.db``."""
    return url or os.environ.get("OWNSTATE_URL") or DEFAULT_URL


def _float_option(options: dict[str, list[str]], name: str, default: float) -> float:
    if name not in options:
        return default
    try:
        return float(options[name][-1])
    except ValueError as exc:
        raise InvalidInput(f"URL option {name}= must be a number", field="url") from exc


_BOOLEANS = {"true": True, "1": True, "on": True, "yes": True,
             "false": False, "0": False, "off": False, "no": False}


def _bool_option(options: dict[str, list[str]], name: str, default: bool) -> bool:
    if name not in options:
        return default
    value = options[name][-1].lower()
    if value not in _BOOLEANS:
        raise InvalidInput(f"URL option {name}= must be true or false", field="url")
    return _BOOLEANS[value]


def open_backend(url: str, *, inline: bool = False, token: str | None = None) -> Backend:
    """A backend for ``url``, not yet set up.

    - ``memory://`` (private) or ``memory://NAME`` (shared within this process)
    - ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``; options
      ``?busy_timeout=SECONDS&synchronous=normal|full&replay_cache=ITEMS``
    - ``postgresql://user@host:5432/db``; options ``?schema=NAME`` (default ``ownstate``),
      ``pool_min``, ``pool_max``, ``pool_timeout``, ``replay_cache``,
      ``synchronous_checkpoints=true`` (checkpoint writes wait for their WAL flush, as
      every other write does); other options go to libpq
    - ``redis://host:6379/0``, ``rediss://...`` (TLS), ``redis+cluster://host:7000`` and
      ``rediss+cluster://...`` (Redis Cluster); options ``?prefix=NAME`` (default
      ``ownstate``) and ``checkpoint_ttl=SECONDS``; other options go to redis-py
    - any other scheme an installed distribution registers in the ``ownstate.backends``
      entry-point group (its factory gets the whole URL)

    Raises :class:`~ownstate.errors.InvalidInput` for an unknown scheme or a malformed URL,
    and :class:`TypeError` when a registered factory returns something that is not a
    :class:`Backend`.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    options = parse_qs(parts.query)
    if token is not None and scheme not in ("http", "https"):
        raise InvalidInput("token= is for http:// and https:// URLs", field="token")
    if scheme == "memory":
        from .memory import MemoryBackend

        return MemoryBackend(name=(parts.netloc + parts.path).strip("/") or None)
    if scheme == "sqlite":
        from .sqlite import SqliteBackend

        path = unquote(parts.path)
        if parts.netloc or not path or path == "/":
            raise InvalidInput(
                f"a SQLite URL looks like sqlite:///relative.db or sqlite:////abs/path.db, "
                f"not {url!r}", field="url")
        return SqliteBackend(
            path[1:],
            busy_timeout=_float_option(options, "busy_timeout", 10.0),
            synchronous=options.get("synchronous", ["normal"])[-1],
            inline=inline,
            replay_cache=int(_float_option(options, "replay_cache", 20_000)),
        )
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresBackend

        own = {"schema", "pool_min", "pool_max", "pool_timeout", "replay_cache",
               "synchronous_checkpoints"}
        libpq_query = urlencode([(k, v) for k, vs in options.items() if k not in own
                                 for v in vs], quote_via=quote)
        conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, libpq_query, ""))
        schema = options.get("schema", ["ownstate"])[-1]
        if not _SCHEMA_RE.fullmatch(schema):
            raise InvalidInput(f"schema= must be a plain identifier, not {schema!r}",
                               field="url")
        return PostgresBackend(
            conninfo, schema=schema, inline=inline,
            min_size=int(_float_option(options, "pool_min", 1)),
            max_size=int(_float_option(options, "pool_max", 10)),
            timeout=_float_option(options, "pool_timeout", 10.0),
            replay_cache=int(_float_option(options, "replay_cache", 20_000)),
            synchronous_checkpoints=_bool_option(options, "synchronous_checkpoints", False),
        )
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        from .redis import RedisBackend

        return RedisBackend.from_url(url)
    if scheme in ("http", "https"):
        from .http import HttpBackend

        return HttpBackend(url, token, inline=inline)
    for entry in entry_points(group=ENTRY_POINT_GROUP, name=scheme):
        backend = entry.load()(url)
        if not isinstance(backend, Backend):
            raise TypeError(f"the {ENTRY_POINT_GROUP} entry point {entry.name} = {entry.value} "
                            f"returned {type(backend).__name__}, not a Backend")
        return backend
    raise InvalidInput(f"no backend for URL scheme {parts.scheme!r} (try memory:// or "
                       "sqlite:///path.db)", field="url")

