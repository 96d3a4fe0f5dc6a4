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

It may touch PostgreSQL through ``_core``, and psycopg's SQL composition.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..._extras import requires
from ._core import Cursor

with requires("postgres", "the PostgreSQL backend"):
    from psycopg import sql

__all__ = ["GROWTH", "LOG", "MIN_PAGES", "analyze_grown"]

LOG = logging.getLogger("ownstate.postgres")

#: A table is analyzed again once it holds this many times the pages it held when it was
#: last analyzed (or vacuumed, which counts its pages too).
GROWTH = 2
#: ... and at least this many pages (1 MB): a smaller table is read whole by any plan.
MIN_PAGES = 128

_GROWN = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind = 'r' "
    "AND pg_has_role(c.relowner, 'USAGE') "
    "AND pg_relation_size(c.oid) / current_setting('block_size')::int "
    ">= greatest(%s * c.relpages, %s) ORDER BY c.relname")


async def analyze_grown(cur: Cursor, schema: str, tables: Sequence[str]) -> list[str]:
    """Analyze those of ``tables`` (of ``schema``) that grew as the module docstring
    says; returns their names."""
    await cur.execute(_GROWN, (schema, list(tables), GROWTH, MIN_PAGES))
    grown = [str(r[0]) for r in await cur.fetchall()]
    if grown:
        await cur.execute(sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(
            sql.SQL(", ").join(sql.Identifier(schema, t) for t in grown)))
    return grown
