"""Planner statistics kept current by the writes that grow tables fastest, in PostgreSQL.

Without statistics the planner takes an equality on ``tenant`` to keep 0.5% of a table's
rows. A read of a hundred sessions' items (``tenant = %s AND sid = ANY(%s)``) is then
planned as a bitmap AND of the items' ``(sid, seq)`` index with a scan of their
``(tenant, item_id)`` index over the whole tenant: every item stored is read, for every
batch, and a bulk import that verifies what it wrote slows down as the table grows
(two million items: 0.3-0.4 s per batch of 100 sessions, where the ``(sid, seq)`` index
alone takes 1-2 ms). The runs' and sessions' reads go the same way. Autovacuum analyzes
a table as it grows, but it may be off, or not have come round yet.

So a bulk write (``bulk.py``) ends by analyzing each of the tables it grows that now
holds :data:`GROWTH` times the pages its statistics were taken at (``pg_class.relpages``,
0 for a table never analyzed) and at least :data:`MIN_PAGES`: a table analyzed a handful
of times over its growth, about half a second each at two million items (ANALYZE reads
a sample of 30,000 rows, whatever the size). ``SKIP_LOCKED``: a table another session is
analyzing or vacuuming is left to it. Only tables the role may analyze (its own, or its
roles' own) are: a runtime role that does not own the schema relies on autovacuum. The
write is committed before: an ANALYZE that fails is logged (``ownstate.postgres``), and
the write still succeeds.

The writes that open runs do the same, rarely: a conversation grows its tables a few rows
a turn, and a prepared statement's generic plan (which the checkpoint operations use) is
made once per connection, at the table's size then. Planned without statistics, or at a
handful of rows, a lookup of a run by its id or of a checkpoint by its id ties with an
index on a prefix of its key (``tenant``, ``rid, namespace``) and scans every run of the
tenant and every checkpoint of the thread; planned at a few pages it scans the table. The
plan then stays, however large the table grows, until the table's statistics change: at
500 turns of one LangGraph thread that was two thirds of the server's time a turn. So the
write that opens the run whose ``rid`` is a power of two from :data:`FIRST_CHECKED` ends
by analyzing those of :data:`RUN_TABLES` that doubled since their statistics were taken
(or have none), whatever their size: a few milliseconds at first, log-spaced, each making
the connections plan those statements again for the table as it is.

It may touch PostgreSQL through ``_core``, and psycopg's SQL composition.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..._extras import requires
from ...errors import OwnstateError
from ._core import Cursor, PostgresCore

with requires("postgres", "the PostgreSQL backend"):
    from psycopg import sql

__all__ = ["FIRST_CHECKED", "GROWTH", "LOG", "MIN_PAGES", "RUN_TABLES", "Analyzing",
           "analyze_grown"]

LOG = logging.getLogger("ownstate.postgres")

#: A table is analyzed again once it holds this many times the pages it held when it was
#: last analyzed (or vacuumed, which counts its pages too).
GROWTH = 2
#: ... and at least this many pages (1 MB): a smaller table is read whole by any plan.
MIN_PAGES = 128
#: The tables the runs of a conversation grow, which the write that opens a run checks.
RUN_TABLES = ("checkpoint_writes", "checkpoints", "items", "runs", "sessions")
#: The first ``rid`` whose opening write checks them; then every power of two after it.
FIRST_CHECKED = 32

_GROWN = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind = 'r' "
    "AND pg_has_role(c.relowner, 'USAGE') "
    "AND pg_relation_size(c.oid) / current_setting('block_size')::int "
    ">= greatest(%s * c.relpages, %s) ORDER BY c.relname")


async def analyze_grown(cur: Cursor, schema: str, tables: Sequence[str],
                        min_pages: int | None = None) -> list[str]:
    """Analyze those of ``tables`` (of ``schema``) that grew as the module docstring
    says, of at least ``min_pages`` pages (:data:`MIN_PAGES` by default); returns their
    names."""
    await cur.execute(_GROWN, (schema, list(tables), GROWTH,
                               MIN_PAGES if min_pages is None else min_pages))
    grown = [str(r[0]) for r in await cur.fetchall()]
    if grown:
        await cur.execute(sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(
            sql.SQL(", ").join(sql.Identifier(schema, t) for t in grown)))
    return grown


class Analyzing(PostgresCore):
    """The writes that keep statistics current, as the module docstring says."""

    async def _analyze_grown(self, tables: Sequence[str], grown_by: str,
                             min_pages: int | None = None) -> None:
        """Analyze those of ``tables`` that grew (:func:`analyze_grown`) in a transaction
        of its own; a failure is logged, naming what grew them (``grown_by``)."""
        try:
            await self._write(None, lambda cur: analyze_grown(cur, self.schema, tables,
                                                              min_pages))
        except OwnstateError as exc:  # what grew them is stored: statistics only help plans
            LOG.warning("analyzing the tables %s grew failed: %s", grown_by, exc)

    async def _run_opened(self, rid: int) -> None:
        """After the write that opened run ``rid``: analyze those of :data:`RUN_TABLES`
        that doubled, when ``rid`` is a power of two from :data:`FIRST_CHECKED`."""
        if rid >= FIRST_CHECKED and not rid & (rid - 1):
            await self._analyze_grown(RUN_TABLES, "runs", min_pages=1)
