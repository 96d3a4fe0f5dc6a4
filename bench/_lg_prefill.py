"""A target database that already holds what an import of many threads left, for
``import_langgraph.py --prefill COPIES``.

Not a benchmark. The threads of the source are imported once into the schema ``seed`` of
a template database (through the importer itself, so every row is as an import writes
it), then copied ``COPIES`` times in SQL into the schema ``ownstate`` under new ids:
sessions (``<thread>-p<k>``), their items (item ids of the same layout, time first, the
time moved back so that every copy sorts before what is imported next), runs (new run
ids, as random as the importer's), checkpoints and pending writes. Every copy is its own
transaction, in the order an import writes (sessions, items, runs, checkpoints, writes),
and every index is kept up as the rows go in, so the indexes grow as an import grows them.
``search_stats`` and the search-term counts are those of the copies (the seed's times
``COPIES``, the term log folded). The seed is dropped and the template kept between runs;
each run starts from a copy of it (``CREATE DATABASE ... TEMPLATE``). Nothing vacuums or
analyzes it: the planner has no statistics of the copies, as it has none of a target
that an import filled on a server without autovacuum (``analyze=True`` in :func:`clone`
gives them).

The copies' checkpoints still refer to the seed's item ids: they are there to be stored,
not resumed.

The leading underscore keeps this module from shadowing anything; see ``_workload.py``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import psycopg

__all__ = ["build_template", "clone"]

#: one copy of the seed (``%(k)s``: its number, from 1; ``%(copies)s``: how many)
_COPY = (
    """
    INSERT INTO ownstate.sessions (tenant, store, session_id, actor_id, parent_session_id,
        root_session_id, metadata, create_time, last_activity_time, item_count)
    SELECT tenant, store, session_id || '-p' || %(k)s, actor_id, NULL,
           session_id || '-p' || %(k)s, metadata,
           create_time - (%(copies)s + 1 - %(k)s) * interval '1 hour',
           last_activity_time - (%(copies)s + 1 - %(k)s) * interval '1 hour', item_count
    FROM seed.sessions ORDER BY sid
    """,
    """
    CREATE TEMP TABLE smap ON COMMIT DROP AS
    SELECT o.sid AS old, n.sid AS new FROM seed.sessions o
    JOIN ownstate.sessions n ON n.tenant = o.tenant AND n.store = o.store
     AND n.session_id = o.session_id || '-p' || %(k)s
    """,
    """
    INSERT INTO ownstate.items (sid, seq, tenant, item_id, create_time, format, data, role,
        type, tool_name, model, in_tokens, out_tokens, terms, terms_len)
    SELECT m.new, i.seq, i.tenant,
           'itm_' || lpad(to_hex(('x' || substr(i.item_id, 5, 12))::bit(48)::bigint
                                 - (%(copies)s + 1 - %(k)s) * 3600000), 12, '0')
                  || substr(i.item_id, 17),
           i.create_time - (%(copies)s + 1 - %(k)s) * interval '1 hour', i.format, i.data,
           i.role, i.type, i.tool_name, i.model, i.in_tokens, i.out_tokens, i.terms,
           i.terms_len
    FROM smap m JOIN seed.items i ON i.sid = m.old ORDER BY i.id
    """,
    """
    CREATE TEMP TABLE rmap ON COMMIT DROP AS
    WITH made AS (
        INSERT INTO ownstate.runs (sid, tenant, run_id, store, session_id, actor_id,
            framework, thread_key, status, status_since, awaiting, step_count, usd_cost,
            started_at, ended_at, lease_owner, lease_expires_at, fencing_token, decision,
            decisions)
        SELECT m.new, r.tenant, 'lgt_' || md5(r.run_id || '-p' || %(k)s), r.store,
               r.session_id || '-p' || %(k)s, r.actor_id, r.framework,
               r.thread_key || '-p' || %(k)s, r.status, r.status_since, r.awaiting,
               r.step_count, r.usd_cost, r.started_at, r.ended_at, r.lease_owner,
               r.lease_expires_at, r.fencing_token, r.decision, r.decisions
        FROM smap m JOIN seed.runs r ON r.sid = m.old ORDER BY r.rid
        RETURNING rid, run_id)
    SELECT r.rid AS old, made.rid AS new FROM made
    JOIN seed.runs r ON made.run_id = 'lgt_' || md5(r.run_id || '-p' || %(k)s)
    """,
    """
    CREATE TEMP TABLE cmap ON COMMIT DROP AS
    WITH made AS (
        INSERT INTO ownstate.checkpoints (rid, tenant, namespace, checkpoint_id,
            parent_checkpoint_id, type_tag, metadata, create_time, size, payload)
        SELECT m.new, c.tenant, c.namespace, c.checkpoint_id, c.parent_checkpoint_id,
               c.type_tag, c.metadata, c.create_time, c.size, c.payload
        FROM rmap m JOIN seed.checkpoints c ON c.rid = m.old ORDER BY c.cid
        RETURNING cid, rid, namespace, checkpoint_id)
    SELECT c.cid AS old, made.cid AS new FROM made JOIN rmap m ON m.new = made.rid
    JOIN seed.checkpoints c ON c.rid = m.old AND c.namespace = made.namespace
     AND c.checkpoint_id = made.checkpoint_id
    """,
    """
    INSERT INTO ownstate.checkpoint_writes (cid, tenant, task_id, idx, channel, type_tag,
        task_path, size, payload)
    SELECT m.new, w.tenant, w.task_id, w.idx, w.channel, w.type_tag, w.task_path, w.size,
           w.payload
    FROM cmap m JOIN seed.checkpoint_writes w ON w.cid = m.old ORDER BY w.wid
    """,
)

#: the counts of the copies: the seed's times ``%(copies)s``
_COUNTS = (
    """
    INSERT INTO ownstate.search_stats (tenant, kind, scope, shard, docs, length)
    SELECT tenant, kind, scope, shard, docs * %(copies)s, length * %(copies)s
    FROM seed.search_stats
    """,
    """
    INSERT INTO ownstate.search_terms (tenant, kind, lexeme, shard, docs)
    SELECT t.tenant, t.kind, t.lexeme, 0, sum(t.docs) * %(copies)s FROM (
        SELECT tenant, kind, lexeme COLLATE "C", docs FROM seed.search_terms
        UNION ALL
        SELECT g.tenant, g.kind, g.prefix || u.term, u.docs FROM seed.search_term_log g,
        unnest(string_to_array(g.terms, ' '), string_to_array(g.counts, ' ')::bigint[])
        AS u (term, docs)) AS t (tenant, kind, lexeme, docs)
    GROUP BY t.tenant, t.kind, t.lexeme ORDER BY t.lexeme COLLATE "C"
    """,
)


def _say(began: float, text: str) -> None:
    print(f"prefill: {text} ({time.monotonic() - began:.0f}s)", file=sys.stderr)


def build_template(admin: psycopg.Connection, template: str, url_of: Callable[[str], str],
                   copies: int, import_seed: Callable[[str], object],
                   migrate: Callable[[str], object]) -> None:
    """Make the database ``template`` (unless it is there, marked finished): the source's
    threads imported into its schema ``seed`` by ``import_seed(url)``, the schema
    ``ownstate`` made by ``migrate(url)``, then ``copies`` copies of the seed in it."""
    found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (template,)
                          ).fetchone()
    if found:
        with psycopg.connect(url_of(template)) as conn:
            done = conn.execute("SELECT to_regclass('public.bench_prefill') IS NOT NULL"
                                ).fetchone()
            marked = done is not None and done[0] and conn.execute(
                "SELECT copies FROM public.bench_prefill").fetchone() == (copies,)
        if marked:
            print(f"prefill: template {template} is current ({copies} copies)",
                  file=sys.stderr)
            return
        admin.execute(f"DROP DATABASE {template} WITH (FORCE)")
    began = time.monotonic()
    admin.execute(f"CREATE DATABASE {template}")
    import_seed(url_of(template) + "?schema=seed")
    migrate(url_of(template))
    with psycopg.connect(url_of(template)) as conn:
        _say(began, "seed imported")
        conn.execute("INSERT INTO ownstate.session_stores SELECT * FROM seed.session_stores")
        for k in range(1, copies + 1):
            for statement in _COPY:
                conn.execute(statement, {"k": k, "copies": copies})
            conn.commit()
            if k % 4 == 0 or k == copies:
                _say(began, f"{k} of {copies} copies")
        for statement in _COUNTS:
            conn.execute(statement, {"copies": copies})
        conn.execute("DROP SCHEMA seed CASCADE")
        conn.execute("CREATE TABLE public.bench_prefill (copies integer)")
        conn.execute("INSERT INTO public.bench_prefill VALUES (%s)", (copies,))
        conn.commit()
    with psycopg.connect(url_of(template), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        items = conn.execute("SELECT count(*) FROM ownstate.items").fetchone()
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))"
                            ).fetchone()
    _say(began, f"template {template}: {items[0] if items else 0} items, "
                f"{size[0] if size else '?'}")


def clone(admin: psycopg.Connection, template: str, target: str, url: str, *,
          analyze: bool) -> None:
    """``target`` dropped and made again as a copy of ``template`` (its files copied);
    with ``analyze``, its tables analyzed."""
    admin.execute(f"DROP DATABASE IF EXISTS {target} WITH (FORCE)")
    admin.execute(f"CREATE DATABASE {target} TEMPLATE {template} STRATEGY FILE_COPY")
    if analyze:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
