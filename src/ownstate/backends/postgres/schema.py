"""The PostgreSQL schema, as a literal, append-only list of migrations.

A released migration is never edited, reordered or removed: a change to the schema is a
new migration at the end (``tests/test_schema_migrations.py`` pins every released one).
The SQL is written out here, not assembled from the modules that use the tables, so that
changing those modules cannot change what a migration does.

Each migration runs in one transaction, under an advisory lock so that concurrent
migrators wait for each other, inside the configured schema. Nothing in the default path
uses ``CREATE INDEX CONCURRENTLY`` (it cannot run in a transaction). Every tenant-scoped
table gets row-level security, forced even for the table owner::

    ALTER TABLE t ENABLE ROW LEVEL SECURITY;
    ALTER TABLE t FORCE ROW LEVEL SECURITY;
    CREATE POLICY tenant_isolation ON t
        USING (tenant = current_setting('ownstate.tenant', true))
        WITH CHECK (tenant = current_setting('ownstate.tenant', true));

The one exception is ``api_keys``, whose policy also shows the row that ``find_api_key``
is looking up, before the tenant is known (migration 3).

It may touch the migration record (``backends._migrations``) alone, and no connection: the
backend runs the migrations.
"""

from __future__ import annotations

from .._migrations import Migration

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration"]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "session stores, sessions, items and idempotency keys", (
        """
        CREATE TABLE session_stores (
            tenant      text NOT NULL,
            name        text NOT NULL,
            create_time timestamptz NOT NULL,
            PRIMARY KEY (tenant, name)
        )
        """,
        """
        CREATE TABLE sessions (
            sid                bigserial PRIMARY KEY,
            tenant             text NOT NULL,
            store              text NOT NULL,
            session_id         text NOT NULL,
            actor_id           text NOT NULL,
            parent_session_id  text,
            root_session_id    text NOT NULL,
            metadata           json NOT NULL DEFAULT '{}',
            create_time        timestamptz NOT NULL,
            last_activity_time timestamptz NOT NULL,
            item_count         bigint NOT NULL DEFAULT 0,
            UNIQUE (tenant, store, session_id),
            FOREIGN KEY (tenant, store) REFERENCES session_stores (tenant, name)
        )
        """,
        "CREATE INDEX sessions_by_store ON sessions (tenant, store, sid)",
        "CREATE INDEX sessions_by_actor ON sessions (tenant, store, actor_id, sid)",
        "CREATE INDEX sessions_by_activity ON sessions (tenant, store, last_activity_time, sid)",
        """
        CREATE INDEX sessions_by_parent ON sessions (tenant, store, parent_session_id)
               WHERE parent_session_id IS NOT NULL
        """,
        """
        CREATE TABLE items (
            id          bigserial PRIMARY KEY,
            sid         bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
            seq         bigint NOT NULL,
            tenant      text NOT NULL,
            item_id     text NOT NULL,
            create_time timestamptz NOT NULL,
            format      text NOT NULL,
            data        json NOT NULL,
            role        text,
            type        text,
            tool_name   text,
            model       text,
            in_tokens   bigint,
            out_tokens  bigint,
            UNIQUE (sid, seq)
        )
        """,
        "CREATE UNIQUE INDEX items_by_item_id ON items (tenant, item_id)",
        """
        CREATE TABLE idempotency_keys (
            sid          bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
            key          text NOT NULL,
            tenant       text NOT NULL,
            request_hash text NOT NULL,
            item_ids     jsonb NOT NULL,
            create_time  timestamptz NOT NULL,
            PRIMARY KEY (sid, key)
        )
        """,
        """
        CREATE VIEW session_items WITH (security_barrier, security_invoker) AS
        SELECT s.tenant, s.store, s.session_id, s.actor_id, i.seq, i.item_id,
               i.create_time, i.format, i.role, i.type, i.tool_name, i.model,
               i.in_tokens, i.out_tokens, i.data
        FROM items i JOIN sessions s ON s.sid = i.sid
        """,
        # row-level security
        "ALTER TABLE session_stores ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE session_stores FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON session_stores USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE sessions ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE sessions FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON sessions USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE items ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE items FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON items USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE idempotency_keys FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON idempotency_keys USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
    )),
    Migration(2, "memory facts, runs, checkpoints and assets", (
        # memory facts (facts.py)
        """
        CREATE TABLE memory_stores (
            tenant      text NOT NULL,
            name        text COLLATE "C" NOT NULL,
            create_time timestamptz NOT NULL,
            PRIMARY KEY (tenant, name)
        )
        """,
        """
        CREATE TABLE facts (
            fid               bigserial PRIMARY KEY,
            tenant            text NOT NULL,
            memory_store      text COLLATE "C" NOT NULL,
            fact_id           text NOT NULL,
            subject           text COLLATE "C" NOT NULL,
            key               text COLLATE "C" NOT NULL,
            value             json NOT NULL,
            confidence        double precision CHECK (confidence BETWEEN 0 AND 1),
            source_type       text NOT NULL
                              CHECK (source_type IN ('agent', 'pipeline', 'user', 'import')),
            source_store      text,
            source_session_id text,
            source_item_id    text,
            valid_from        timestamptz NOT NULL,
            valid_to          timestamptz,
            recorded_at       timestamptz NOT NULL,
            superseded_at     timestamptz,
            supersedes        text,
            closed_reason     text,
            search            tsvector,
            CHECK ((superseded_at IS NULL) = (valid_to IS NULL)
                   AND (superseded_at IS NULL) = (closed_reason IS NULL)),
            FOREIGN KEY (tenant, memory_store) REFERENCES memory_stores (tenant, name)
        )
        """,
        "CREATE UNIQUE INDEX facts_by_id ON facts (tenant, fact_id)",
        """
        CREATE UNIQUE INDEX facts_current ON facts (tenant, memory_store, subject, key)
               WHERE superseded_at IS NULL
        """,
        "CREATE INDEX facts_by_subject ON facts (tenant, subject, memory_store, key, fid)",
        "CREATE INDEX facts_search ON facts USING gin (search) WHERE superseded_at IS NULL",
        # runs and effects (runs.py)
        """
        CREATE TABLE runs (
            rid              bigserial PRIMARY KEY,
            sid              bigint NOT NULL REFERENCES sessions (sid) ON DELETE CASCADE,
            tenant           text NOT NULL,
            run_id           text NOT NULL,
            store            text NOT NULL,
            session_id       text NOT NULL,
            actor_id         text NOT NULL,
            framework        text NOT NULL,
            thread_key       text,
            status           text NOT NULL CHECK (status IN
                                 ('running', 'awaiting_human', 'done', 'failed', 'cancelled')),
            status_since     timestamptz NOT NULL,
            awaiting         json,
            step_count       bigint NOT NULL DEFAULT 0,
            usd_cost         double precision NOT NULL DEFAULT 0,
            started_at       timestamptz NOT NULL,
            ended_at         timestamptz,
            lease_owner      text,
            lease_expires_at timestamptz,
            fencing_token    bigint NOT NULL DEFAULT 0,
            UNIQUE (tenant, run_id)
        )
        """,
        """
        CREATE UNIQUE INDEX runs_one_active_per_session ON runs (sid)
               WHERE status IN ('running', 'awaiting_human')
        """,
        "CREATE INDEX runs_by_session ON runs (sid)",
        "CREATE INDEX runs_by_tenant ON runs (tenant, rid)",
        "CREATE INDEX runs_by_status ON runs (tenant, status, status_since, rid)",
        """
        CREATE TABLE run_effects (
            rid          bigint NOT NULL REFERENCES runs (rid) ON DELETE CASCADE,
            tool_call_id text NOT NULL,
            tenant       text NOT NULL,
            result       json NOT NULL,
            recorded_at  timestamptz NOT NULL,
            PRIMARY KEY (rid, tool_call_id)
        )
        """,
        # checkpoints (checkpoints.py)
        """
        CREATE TABLE checkpoints (
            cid                  bigserial PRIMARY KEY,
            rid                  bigint NOT NULL REFERENCES runs (rid) ON DELETE CASCADE,
            tenant               text NOT NULL,
            namespace            text NOT NULL,
            checkpoint_id        text NOT NULL,
            parent_checkpoint_id text,
            type_tag             text NOT NULL,
            metadata             json NOT NULL DEFAULT '{}',
            create_time          timestamptz NOT NULL,
            size                 bigint NOT NULL,
            payload              bytea NOT NULL,
            UNIQUE (rid, namespace, checkpoint_id)
        )
        """,
        "CREATE INDEX checkpoints_by_run ON checkpoints (rid, namespace, cid) INCLUDE "
        "(create_time, size)",
        """
        CREATE TABLE checkpoint_writes (
            wid       bigserial PRIMARY KEY,
            cid       bigint NOT NULL REFERENCES checkpoints (cid) ON DELETE CASCADE,
            tenant    text NOT NULL,
            task_id   text NOT NULL,
            idx       bigint NOT NULL,
            channel   text NOT NULL,
            type_tag  text NOT NULL,
            task_path text NOT NULL DEFAULT '',
            size      bigint NOT NULL,
            payload   bytea NOT NULL,
            UNIQUE (cid, task_id, idx)
        )
        """,
        # assets (assets.py)
        """
        CREATE TABLE asset_blobs (
            bid         bigserial PRIMARY KEY,
            tenant      text NOT NULL,
            sha256      text NOT NULL,
            size        bigint NOT NULL,
            create_time timestamptz NOT NULL,
            data        bytea NOT NULL,
            UNIQUE (tenant, sha256)
        )
        """,
        """
        CREATE TABLE assets (
            aid         bigserial PRIMARY KEY,
            tenant      text NOT NULL,
            asset_id    text NOT NULL,
            sid         bigint REFERENCES sessions (sid) ON DELETE CASCADE,
            sha256      text NOT NULL,
            size        bigint NOT NULL,
            media_type  text NOT NULL,
            metadata    json NOT NULL DEFAULT '{}',
            create_time timestamptz NOT NULL,
            FOREIGN KEY (tenant, sha256) REFERENCES asset_blobs (tenant, sha256)
        )
        """,
        "CREATE UNIQUE INDEX assets_by_id ON assets (tenant, asset_id)",
        "CREATE UNIQUE INDEX assets_by_owner ON assets (tenant, coalesce(sid, 0), sha256)",
        "CREATE INDEX assets_by_session ON assets (sid, aid)",
        "CREATE INDEX assets_by_content ON assets (tenant, sha256)",
        """
        CREATE FUNCTION assets_free_content() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            PERFORM 1 FROM asset_blobs
                WHERE tenant = OLD.tenant AND sha256 = OLD.sha256 FOR UPDATE;
            DELETE FROM asset_blobs b WHERE b.tenant = OLD.tenant AND b.sha256 = OLD.sha256
                AND NOT EXISTS (SELECT 1 FROM assets a
                                WHERE a.tenant = OLD.tenant AND a.sha256 = OLD.sha256);
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER assets_free_content AFTER DELETE ON assets
        FOR EACH ROW EXECUTE FUNCTION assets_free_content()
        """,
        # row-level security
        "ALTER TABLE memory_stores ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE memory_stores FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON memory_stores USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE facts ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE facts FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON facts USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE runs ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE runs FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON runs USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE run_effects ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE run_effects FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON run_effects USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE checkpoints ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE checkpoints FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON checkpoints USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE checkpoint_writes ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE checkpoint_writes FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON checkpoint_writes USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE asset_blobs ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE asset_blobs FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON asset_blobs USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE assets ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE assets FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON assets USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
    )),
    Migration(3, "API keys and store grants", (
        """
        CREATE TABLE api_keys (
            key_id      text COLLATE "C" PRIMARY KEY,
            tenant      text NOT NULL,
            principal   text COLLATE "C" NOT NULL,
            admin       boolean NOT NULL,
            create_time timestamptz NOT NULL,
            revoked_at  timestamptz,
            secret_hash text NOT NULL
        )
        """,
        "CREATE INDEX api_keys_by_tenant ON api_keys (tenant, create_time, key_id)",
        """
        CREATE TABLE store_grants (
            tenant    text NOT NULL,
            kind      text COLLATE "C" NOT NULL,
            store     text COLLATE "C" NOT NULL,
            principal text COLLATE "C" NOT NULL,
            level     text NOT NULL,
            PRIMARY KEY (tenant, kind, store, principal)
        )
        """,
        "CREATE INDEX store_grants_by_principal ON store_grants (tenant, principal, kind, store)",
        """
        CREATE FUNCTION find_api_key(wanted text) RETURNS SETOF api_keys LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            PERFORM set_config('ownstate.api_key', wanted, true);
            RETURN QUERY SELECT * FROM api_keys WHERE key_id = wanted;
            PERFORM set_config('ownstate.api_key', '', true);
        END
        $$
        """,
        # row-level security
        "ALTER TABLE store_grants ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE store_grants FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON store_grants USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        # api_keys: the tenant's rows, plus the one row find_api_key is looking up;
        # rows written must be the tenant's
        "ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE api_keys FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON api_keys USING (tenant = "
        "current_setting('ownstate.tenant', true) OR key_id = "
        "current_setting('ownstate.api_key', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
    )),
    Migration(4, "the API key lookup returns named columns", (
        # find_api_key returns named columns, not SETOF api_keys (which would return any
        # column added to the table later); STRICT: a NULL id finds nothing
        "DROP FUNCTION find_api_key(text)",
        """
        CREATE FUNCTION find_api_key(wanted text) RETURNS TABLE (
            key_id text, tenant text, principal text, admin boolean, create_time timestamptz,
            revoked_at timestamptz, secret_hash text
        ) LANGUAGE plpgsql STRICT SET search_path FROM CURRENT AS $$
        BEGIN
            PERFORM set_config('ownstate.api_key', wanted, true);
            RETURN QUERY SELECT k.key_id, k.tenant, k.principal, k.admin, k.create_time,
                                k.revoked_at, k.secret_hash
                         FROM api_keys k WHERE k.key_id = wanted;
            PERFORM set_config('ownstate.api_key', '', true);
        END
        $$
        """,
    )),
    Migration(5, "ranked search over facts and items", (
        # The terms and their statistics; backfill() in search.py fills them for rows
        # written before, in this migration's transaction.
        "ALTER TABLE facts DROP COLUMN search",
        "ALTER TABLE facts ADD COLUMN terms tsvector, ADD COLUMN terms_len integer",
        "CREATE INDEX facts_terms ON facts USING gin (terms)",
        "ALTER TABLE items ADD COLUMN terms tsvector, ADD COLUMN terms_len integer",
        "CREATE INDEX items_terms ON items USING gin (terms)",
        "ALTER TABLE session_stores ADD COLUMN index_items boolean NOT NULL DEFAULT true",
        """
        CREATE TABLE search_stats (
            tenant text NOT NULL,
            kind   text NOT NULL CHECK (kind IN ('fact', 'item')),
            scope  text NOT NULL,
            shard  integer NOT NULL,
            docs   bigint NOT NULL,
            length bigint NOT NULL,
            PRIMARY KEY (tenant, kind, scope, shard)
        )
        """,
        "ALTER TABLE search_stats ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE search_stats FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON search_stats USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        """
        CREATE FUNCTION facts_leave_search_stats() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            INSERT INTO search_stats AS s (tenant, kind, scope, shard, docs, length)
                SELECT tenant, 'fact', memory_store, pg_backend_pid() % 8, -count(*),
                       -sum(terms_len)
                FROM gone WHERE terms_len IS NOT NULL GROUP BY tenant, memory_store
                ORDER BY tenant, memory_store
            ON CONFLICT (tenant, kind, scope, shard)
            DO UPDATE SET docs = s.docs + excluded.docs, length = s.length + excluded.length;
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER facts_leave_search_stats AFTER DELETE ON facts
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
        EXECUTE FUNCTION facts_leave_search_stats()
        """,
        """
        CREATE FUNCTION items_leave_search_stats() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            INSERT INTO search_stats AS s (tenant, kind, scope, shard, docs, length)
                SELECT tenant, 'item', '', pg_backend_pid() % 8, -count(*), -sum(terms_len)
                FROM gone WHERE terms_len IS NOT NULL GROUP BY tenant ORDER BY tenant
            ON CONFLICT (tenant, kind, scope, shard)
            DO UPDATE SET docs = s.docs + excluded.docs, length = s.length + excluded.length;
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER items_leave_search_stats AFTER DELETE ON items
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
        EXECUTE FUNCTION items_leave_search_stats()
        """,
    )),
    Migration(6, "human decisions on awaiting runs", (
        # the decision on the current request, and every decision the run received
        "ALTER TABLE runs ADD COLUMN decision jsonb",
        "ALTER TABLE runs ADD COLUMN decisions jsonb",
        # the inbox (undecided) and the resume queue (decided), each oldest first
        "CREATE INDEX runs_awaiting_undecided ON runs (tenant, status_since, rid) "
        "WHERE status = 'awaiting_human' AND decision IS NULL",
        "CREATE INDEX runs_awaiting_decided ON runs (tenant, status_since, rid) "
        "WHERE status = 'awaiting_human' AND decision IS NOT NULL",
    )),
    Migration(7, "fact and item vectors for semantic search", (
        """
        CREATE TABLE fact_vectors (
            fid          bigint PRIMARY KEY REFERENCES facts (fid) ON DELETE CASCADE,
            tenant       text NOT NULL,
            memory_store text COLLATE "C" NOT NULL,
            model        text NOT NULL,
            vector       real[] NOT NULL
        )
        """,
        "CREATE INDEX fact_vectors_by_store ON fact_vectors (tenant, memory_store, model)",
        """
        CREATE TABLE item_vectors (
            id     bigint PRIMARY KEY REFERENCES items (id) ON DELETE CASCADE,
            tenant text NOT NULL,
            store  text COLLATE "C" NOT NULL,
            model  text NOT NULL,
            vector real[] NOT NULL
        )
        """,
        "CREATE INDEX item_vectors_by_store ON item_vectors (tenant, store, model)",
        "ALTER TABLE fact_vectors ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE fact_vectors FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON fact_vectors USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        "ALTER TABLE item_vectors ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE item_vectors FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON item_vectors USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
    )),
    Migration(8, "a memory store's subjects in order", (
        "CREATE INDEX facts_by_store_subject ON facts (tenant, memory_store, subject)",
    )),
    Migration(9, "document counts of search terms", (
        # Per lexeme (which names its scope), the documents holding it, in eight shards
        # as search_stats; filled here from the terms stored so far. Row-level security is
        # lifted for the transaction so that the schema's owner sees every tenant.
        """
        CREATE TABLE search_terms (
            tenant text NOT NULL,
            kind   text NOT NULL CHECK (kind IN ('fact', 'item')),
            lexeme text COLLATE "C" NOT NULL,
            shard  integer NOT NULL,
            docs   bigint NOT NULL,
            PRIMARY KEY (tenant, kind, lexeme, shard)
        ) WITH (fillfactor = 70)
        """,
        "ALTER TABLE facts NO FORCE ROW LEVEL SECURITY",
        "ALTER TABLE items NO FORCE ROW LEVEL SECURITY",
        """
        INSERT INTO search_terms (tenant, kind, lexeme, shard, docs)
        SELECT f.tenant, 'fact', u.lexeme, 0, count(*) FROM facts f
               CROSS JOIN LATERAL unnest(f.terms) AS u WHERE f.terms IS NOT NULL
               GROUP BY f.tenant, u.lexeme
        UNION ALL
        SELECT i.tenant, 'item', u.lexeme, 0, count(*) FROM items i
               CROSS JOIN LATERAL unnest(i.terms) AS u WHERE i.terms IS NOT NULL
               GROUP BY i.tenant, u.lexeme
        """,
        "ALTER TABLE facts FORCE ROW LEVEL SECURITY",
        "ALTER TABLE items FORCE ROW LEVEL SECURITY",
        "ALTER TABLE search_terms ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE search_terms FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON search_terms USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
        # deletes, cascades included, uncount their rows' terms (in lexeme order, as
        # writers count them, so that two never wait on each other's rows in turn)
        """
        CREATE FUNCTION facts_leave_search_terms() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            INSERT INTO search_terms AS s (tenant, kind, lexeme, shard, docs)
                SELECT g.tenant, 'fact', u.lexeme, pg_backend_pid() % 8, -count(*)
                FROM gone g CROSS JOIN LATERAL unnest(g.terms) AS u
                WHERE g.terms IS NOT NULL GROUP BY g.tenant, u.lexeme
                ORDER BY g.tenant, u.lexeme COLLATE "C"
            ON CONFLICT (tenant, kind, lexeme, shard) DO UPDATE SET docs = s.docs + excluded.docs;
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER facts_leave_search_terms AFTER DELETE ON facts
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
        EXECUTE FUNCTION facts_leave_search_terms()
        """,
        """
        CREATE FUNCTION items_leave_search_terms() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            INSERT INTO search_terms AS s (tenant, kind, lexeme, shard, docs)
                SELECT g.tenant, 'item', u.lexeme, pg_backend_pid() % 8, -count(*)
                FROM gone g CROSS JOIN LATERAL unnest(g.terms) AS u
                WHERE g.terms IS NOT NULL GROUP BY g.tenant, u.lexeme
                ORDER BY g.tenant, u.lexeme COLLATE "C"
            ON CONFLICT (tenant, kind, lexeme, shard) DO UPDATE SET docs = s.docs + excluded.docs;
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER items_leave_search_terms AFTER DELETE ON items
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
        EXECUTE FUNCTION items_leave_search_terms()
        """,
        # every search reads the whole of a GIN index's list of pending entries: keep it
        # short (the default, 4 MB, took most of a search's time after a bulk load)
        "ALTER INDEX facts_terms SET (gin_pending_list_limit = 256)",
        "ALTER INDEX items_terms SET (gin_pending_list_limit = 256)",
    )),
    Migration(10, "search term counts logged by writes, folded by searches", (
        # A write adds one row here (its documents per term, the terms without their scope
        # prefix, each list one space-separated text) instead of a row of search_terms
        # per lexeme; searches fold the rows of their tenant and kind into search_terms
        # before they read it, and so does a write that finds many (search.py). Empty at
        # first: search_terms already counts every stored document.
        """
        CREATE TABLE search_term_log (
            tenant  text NOT NULL,
            kind    text NOT NULL CHECK (kind IN ('fact', 'item')),
            prefix  text COLLATE "C" NOT NULL,
            terms   text COLLATE "C" NOT NULL,
            counts  text NOT NULL,
            entries integer NOT NULL
        )
        """,
        "CREATE INDEX search_term_log_by_scope ON search_term_log (tenant, kind) "
        "INCLUDE (entries)",
        "ALTER TABLE search_term_log ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE search_term_log FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON search_term_log USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
    )),
    Migration(11, "items indexed for search later, by the next search", (
        # An append to a store that indexes its items writes them without terms and adds
        # the range of their ids here; the next search in the tenant (or an append that
        # finds many queued) stores their terms, counts them and deletes the ranges
        # (items_search.py). Empty at first: every item stored so far has its terms.
        """
        CREATE TABLE item_index_queue (
            tenant text NOT NULL,
            first  bigint NOT NULL,
            last   bigint NOT NULL,
            PRIMARY KEY (tenant, first)
        )
        """,
        "ALTER TABLE item_index_queue ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE item_index_queue FORCE ROW LEVEL SECURITY",
        "CREATE POLICY tenant_isolation ON item_index_queue USING (tenant = "
        "current_setting('ownstate.tenant', true)) WITH CHECK (tenant = "
        "current_setting('ownstate.tenant', true))",
    )),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
