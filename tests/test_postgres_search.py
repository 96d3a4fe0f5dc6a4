"""Ranked search in PostgreSQL: ``search_terms`` holds, per lexeme, the number of documents
whose ``terms`` hold it, through every write and delete path and the migration that made
it; searches over it rank as the reference does, pruned candidates included; a store
that does not index its items makes no terms for them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import test_postgres_roles as roles
from conftest import POSTGRES_URL

import ownstate
from ownstate import archive
from ownstate.api.bulk import BulkSession, add_sessions
from ownstate.backends.ports import search as search_rules
from ownstate.backends.ports.search import fact_text, item_text, query_terms, rank, terms
from ownstate.backends.postgres import items_search as pg_items_search
from ownstate.backends.postgres import search as pg_search

Maker = Callable[[str], str]
# the fixtures of real roles: a connection as the test URL's role, a new schema's name,
# roles made for a test, a schema made for an owner role
admin, schema, make_role, owned_schema = (roles.admin, roles.schema, roles.make_role,
                                          roles.owned_schema)


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


def _counts(url: str) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str, str], int]]:
    """The counts kept in ``search_terms`` and its log, and those recounted from every
    row's ``terms`` (as the schema's owner, whom row-level security does not bind here)."""
    schema = _schema(url)
    with psycopg.connect(POSTGRES_URL) as conn:
        kept = {(r[0], r[1], r[2]): int(r[3]) for r in conn.execute(
            f"SELECT tenant, kind, lexeme, sum(docs) FROM (SELECT tenant, kind, lexeme, docs "
            f"FROM {schema}.search_terms UNION ALL SELECT l.tenant, l.kind, "
            "l.prefix || u.term, u.docs FROM "
            f"{schema}.search_term_log l, unnest(string_to_array(l.terms, ' '), "
            "string_to_array(l.counts, ' ')::bigint[]) AS u (term, docs)) AS c "
            "GROUP BY tenant, kind, lexeme HAVING sum(docs) <> 0")}
        recounted = {(r[0], r[1], r[2]): int(r[3]) for r in conn.execute(
            f"SELECT f.tenant, 'fact', u.lexeme, count(*) FROM {schema}.facts f "
            "CROSS JOIN LATERAL unnest(f.terms) AS u GROUP BY f.tenant, u.lexeme UNION ALL "
            f"SELECT i.tenant, 'item', u.lexeme, count(*) FROM {schema}.items i "
            "CROSS JOIN LATERAL unnest(i.terms) AS u GROUP BY i.tenant, u.lexeme")}
    return kept, recounted


def _consistent(url: str) -> int:
    """Assert the kept counts are the recount; the number of lexemes counted."""
    kept, recounted = _counts(url)
    assert kept == recounted
    return len(kept)


def test_term_counts_follow_every_write_and_delete(make_url: Maker) -> None:
    url = make_url("postgres")
    with ownstate.connect(url) as client, ownstate.connect(url, tenant="acme") as other:
        memory = client.memory_stores.create("notes")
        memory.remember_many([{"subject": f"user:{n % 3}", "key": f"k{n % 4}",
                               "value": f"refund number {n} for order {n % 5}"}
                              for n in range(12)])  # later ones close earlier ones
        memory.remember("user:1", "k1", {"nested": ["refund", "again", 3]})
        other.memory_stores.create("notes").remember("user:1", "k1", "refund elsewhere")
        assert _consistent(url) > 10
        store = client.session_stores.create("chats")
        plain = client.session_stores.create("plain", index_items=False)
        session = store.add(actor_id="user:1", session_id="s1")
        session.append_items([{"role": "user", "content": f"where is refund {n}"}
                              for n in range(5)])
        session.append_items([{"role": "assistant", "content": "it ships today"}],
                             idempotency_key="once")
        session.append_items([{"role": "assistant", "content": "it ships today"}],
                             idempotency_key="once")  # a replay counts nothing
        plain.add(actor_id="user:1").append_items([{"role": "user", "content": "unseen"}])
        child = session.fork(up_to_item_id=session.list_items_after(limit=3)[2].item_id)
        child.append_items([{"role": "user", "content": "a refund for the child"}])
        _consistent(url)
        session.pop_item()
        _consistent(url)
        child.clear()
        _consistent(url)
        memory.erase_subject("user:2")
        _consistent(url)
        session.delete(force=True)  # its items go by cascade
        _consistent(url)
        client.memory_stores.delete("notes")
        client.session_stores.delete("chats", force=True)
        kept, _ = _counts(url)
        assert {k[0] for k in kept} == {"acme"}  # only the other tenant's fact is left
        _consistent(url)


def test_term_counts_of_bulk_sessions(make_url: Maker) -> None:
    url = make_url("postgres")

    async def main() -> None:
        client = await ownstate.connect_async(url)
        try:
            for name, indexed in (("bulk-store", True), ("bulk-plain", False)):
                store = await client.session_stores.create(name, index_items=indexed)
                made = await add_sessions(store, [
                    BulkSession(f"s{n}", "user:1", {}, [
                        {"type": "message", "role": "user", "content": f"refund {n} {m}"}
                        for m in range(3)], None, None) for n in range(4)])
                assert made == [True] * 4
        finally:
            await client.close()

    asyncio.run(main())
    assert _consistent(url) > 4
    with ownstate.connect(url) as client:
        hits = client.session_stores.search_items("refund 2", limit=50)
        assert {h.store for h in hits} == {"bulk-store"}
        assert len(hits) == 12


def _fill(url: str) -> None:
    with ownstate.connect(url) as client:
        memory = client.memory_stores.create("notes")
        memory.remember_many([{"subject": f"user:{n % 2}", "key": f"k{n % 3}",
                               "value": f"café number {n} 東京"} for n in range(7)])
        store = client.session_stores.create("chats")
        for n in range(3):
            store.add(actor_id="user:1").append_items(
                [{"role": "user", "content": f"refund {n} of {m} \uff21\uff22\uff23"}
                 for m in range(4)])
        client.session_stores.create("plain", index_items=False).add(
            actor_id="user:1").append_items([{"role": "user", "content": "refund"}])


def test_term_counts_of_a_copy_and_an_archive_import(make_url: Maker, tmp_path: Any) -> None:
    src, copied, imported = make_url("sqlite"), make_url("postgres"), make_url("postgres")
    _fill(src)
    assert archive.copy(src, copied, verify=True).ok
    assert _consistent(copied) > 10
    path = tmp_path / "all.tar"
    with ownstate.connect(src) as client:
        archive.export(client, path)
    with ownstate.connect(imported) as client:
        archive.import_archive(client, path)
    _consistent(imported)
    assert _counts(imported)[0] == _counts(copied)[0]


def test_migration_counts_the_terms_stored_before(make_url: Maker) -> None:
    """The schema as it was before ``search_terms``: migrating fills it from the rows'
    stored terms, and searches rank as before."""
    url = make_url("postgres")
    _fill(url)
    with ownstate.connect(url) as client:
        before = ([(h.fact.fact_id, h.score) for h in
                   client.memory_stores.get("notes").search("cafe number 3")],
                  [(h.item.item_id, h.score) for h in
                   client.session_stores.search_items("refund 1 abc")])
    expected = _counts(url)[0]
    schema = _schema(url)
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        conn.execute("DROP TABLE search_terms, search_term_log, item_index_queue")
        conn.execute("DROP FUNCTION facts_leave_search_terms() CASCADE")
        conn.execute("DROP FUNCTION items_leave_search_terms() CASCADE")
        conn.execute("DELETE FROM ownstate_schema WHERE version >= 9")
    with ownstate.connect(url) as client:
        client.migrate()
        found, expected_version = client.check()
        assert found == expected_version
        after = ([(h.fact.fact_id, h.score) for h in
                  client.memory_stores.get("notes").search("cafe number 3")],
                 [(h.item.item_id, h.score) for h in
                  client.session_stores.search_items("refund 1 abc")])
    assert _counts(url)[0] == expected
    _consistent(url)
    assert after == before
    assert before[0]
    assert before[1]


def test_a_store_without_item_indexing_makes_no_terms(
        make_url: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    url = make_url("postgres")
    made: list[str] = []
    real = pg_items_search.items_terms_binary

    def spy(prefix: str, found: list[list[str]], seen: Any) -> Any:
        made.extend(" ".join(f) for f in found)
        return real(prefix, found, seen)

    monkeypatch.setattr(pg_items_search, "items_terms_binary", spy)
    with ownstate.connect(url) as client:
        plain = client.session_stores.create("plain", index_items=False)
        session = plain.add(actor_id="user:1")
        session.append_items([{"role": "user", "content": "never indexed"}])
        session.append_items([{"role": "user", "content": "nor this"}],
                             idempotency_key="k")
        assert made == []
        assert client.session_stores.search_items("indexed") == []
        indexed = client.session_stores.create("indexed")
        indexed.add(actor_id="user:1").append_items([{"role": "user", "content": "indexed"}])
        assert len(client.session_stores.search_items("indexed")) == 1
        assert made == ["indexed"]  # by the search, which indexed what the append queued
    _consistent(url)


def test_an_append_follows_a_store_made_again_with_the_other_flag(make_url: Maker) -> None:
    """A client that saw a store made without item indexing still indexes the items of
    the store of that name made again, by another client, with it (and the other way)."""
    url = make_url("postgres")
    with ownstate.connect(url) as first, ownstate.connect(url) as second:
        first.session_stores.create("chats", index_items=False).add(
            actor_id="user:1", session_id="s").append_items([{"role": "user",
                                                              "content": "hidden"}])
        second.session_stores.delete("chats", force=True)
        second.session_stores.create("chats").add(actor_id="user:1", session_id="s")
        first.session_stores.get("chats").get("s").append_items(
            [{"role": "user", "content": "found"}])
        assert [h.item.seq for h in first.session_stores.search_items("found")] == [1]
        second.session_stores.delete("chats", force=True)
        second.session_stores.create("chats", index_items=False).add(
            actor_id="user:1", session_id="s")
        first.session_stores.get("chats").get("s").append_items(
            [{"role": "user", "content": "found again"}])
        assert first.session_stores.search_items("again") == []
        assert [i.seq for i in first.session_stores.get("chats").get("s").list_items_after()
                ] == [1]
    _consistent(url)


def _fact_reference(memory: ownstate.MemoryStore, subjects: list[str],
                    query: str) -> list[tuple[str, float]]:
    facts = sorted((f for s in subjects for f in memory.recall(s)), key=lambda f: f.fact_id)
    collection = [(f.key, terms(fact_text(f.key, f.value))) for f in facts]
    return rank(query_terms(query), collection, lambda _: True)


def test_fact_scores_are_the_references_through_erasure(make_url: Maker) -> None:
    with ownstate.connect(make_url("postgres"), tenant="acme") as client:
        memory = client.memory_stores.create("notes")
        other = client.memory_stores.create("other")
        for n in range(8):
            memory.remember(f"user:{n % 3}", f"k{n}", f"refund request number {n} common words")
            other.remember("user:9", f"k{n}", "refund refund refund elsewhere")
        memory.remember("user:1", "long", "refund " + " ".join(f"pad{i}" for i in range(20)))
        memory.erase_subject("user:2")
        got = [(h.fact.key, h.score) for h in memory.search("refund number 3 words")]
        want = _fact_reference(memory, ["user:0", "user:1"], "refund number 3 words")
        assert [k for k, _ in got] == [k for k, _ in want]
        assert [s for _, s in got] == [s for _, s in want]  # computed as the reference does


def test_item_scores_are_the_references_through_forks_and_pops(make_url: Maker) -> None:
    with ownstate.connect(make_url("postgres")) as client:
        store = client.session_stores.create("chats")
        session = store.add(actor_id="user:1")
        session.append_items([{"role": "user", "content": f"refund number {n} please"}
                              for n in range(6)])
        child = session.fork(up_to_item_id=session.list_items_after(limit=3)[2].item_id)
        session.pop_item()
        child.append_items([{"role": "user", "content": "a refund, a refund"}])
        items = [(s.session_id, i) for s in (session, child) for i in s.list_items_after()]
        collection = [((sid, i.seq), terms(item_text(i.data))) for sid, i in sorted(
            items, key=lambda x: (x[0], x[1].seq))]
        want = rank(query_terms("refund number 2"), collection, lambda _: True)
        got = client.session_stores.search_items("refund number 2", limit=20)
        assert [(h.item.session_id, h.item.seq) for h in got] == [d for d, _ in want]
        assert [h.score for h in got] == [s for _, s in want]


def test_pruned_candidates_still_give_the_best_hits(make_url: Maker,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with ownstate.connect(make_url("postgres")) as client:
        memory = client.memory_stores.create("notes")
        for n in range(30):
            memory.remember("user:1", f"c{n}", "common filler" if n < 10 else f"other {n % 4}")
        memory.remember("user:1", "r1", "rare common")
        memory.remember("user:1", "r2", "rare and unusual common")
        session = client.session_stores.create("chats").add(actor_id="user:1")
        session.append_items([{"role": "user", "content": "common filler" if n < 10 else
                               f"other {n % 4}"} for n in range(30)])
        session.append_items([{"role": "user", "content": "rare common"},
                              {"role": "user", "content": "rare and unusual common"}])
        query = "rare unusual common filler"
        exact = memory.search(query, limit=40)
        assert [h.fact.key for h in exact[:2]] == ["r2", "r1"]
        assert len(exact) == 12
        items = client.session_stores.search_items(query, limit=40)
        assert [h.item.seq for h in items[:2]] == [32, 31]
        assert len(items) == 12
        # read one term's postings at a time: the rarest first, the others only when the
        # first did not give enough hits; score one candidate at a time
        monkeypatch.setattr(search_rules, "CANDIDATE_POSTINGS", 1)
        monkeypatch.setattr(search_rules, "RESCORED", 1)
        assert memory.search(query, limit=2) == exact[:2]
        assert memory.search(query, limit=40) == exact
        assert memory.search(query, subject="user:1", limit=5) == exact[:5]
        assert client.session_stores.search_items(query, limit=2) == items[:2]
        assert client.session_stores.search_items(query, limit=40) == items
        assert client.session_stores.search_items(
            query, session_id=session.session_id, limit=5) == items[:5]


def test_counts_are_kept_under_row_level_security(admin: Any, owned_schema: tuple[str, str],
                                                  make_role: Callable[..., str]) -> None:
    """The application role, which row-level security binds, keeps the counts of its
    tenant through writes and the delete triggers, and sees no other tenant's."""
    schema, owner = owned_schema
    app = make_role("app", "LOGIN")
    assert roles._cli(roles._url(owner, schema), "migrate", "--app-role", app).exit_code == 0
    for tenant, word, other in (("tenant-a", "apple", "banana"),
                                ("tenant-b", "banana", "apple")):
        with ownstate.connect(roles._url(app, schema), tenant=tenant,
                              migrate=False) as client:
            memory = client.memory_stores.create("notes")
            memory.remember_many([{"subject": f"user:{n}", "key": "k", "value": f"{word} {n}"}
                                  for n in range(3)])
            session = client.session_stores.create("chats").add(actor_id="user:1")
            session.append_items([{"role": "user", "content": f"{word} pie"}] * 2)
            memory.erase_subject("user:0")
            assert [h.fact.subject for h in memory.search(word)] == ["user:1", "user:2"]
            assert memory.search(other) == []
            assert len(client.session_stores.search_items(f"{word} pie")) == 2
            session.delete(force=True)
            assert client.session_stores.search_items(word) == []
    _consistent(f"{POSTGRES_URL}?schema={schema}")


def _log_rows(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(POSTGRES_URL) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            f"SELECT tenant, kind FROM {_schema(url)}.search_term_log ORDER BY tenant, kind")]


def _queue_rows(url: str) -> list[tuple[str, int, int]]:
    with psycopg.connect(POSTGRES_URL) as conn:
        return [(r[0], r[1], r[2]) for r in conn.execute(
            f"SELECT tenant, first, last FROM {_schema(url)}.item_index_queue "
            "ORDER BY tenant, first")]


def test_items_stored_with_a_checkpoint_are_queued_then_indexed_by_a_search(
        make_url: Maker) -> None:
    """A step's messages put with its checkpoint are written unindexed and queued, as an
    append's are: no terms and no logged counts at the put; the next search indexes them
    and finds them, and empties the queue."""
    url = make_url("postgres")
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="user:1")
        scope = client.runs.open_run(session, "langgraph", "t").checkpoint_scope()
        _, items = client.checkpoints.put_with_items(
            scope, "c1", [{"role": "user", "content": "refund my parcel"},
                          {"role": "assistant", "content": "the refund is on its way"}],
            first_seq=1, type_tag="json", payload=b"{}")
        with psycopg.connect(POSTGRES_URL) as conn:
            ids = conn.execute(f"SELECT min(id), max(id), count(terms) FROM {_schema(url)}"
                               ".items").fetchone()
        assert ids is not None
        assert ids[2] == 0  # no terms written by the put
        assert _queue_rows(url) == [("default", ids[0], ids[1])]
        assert _log_rows(url) == []
        hits = client.session_stores.search_items("refund")
        assert sorted(h.item.item_id for h in hits) == sorted(i.item_id for i in items)
        assert _queue_rows(url) == []
    _consistent(url)


def test_writes_log_their_term_counts_and_searches_fold_them(make_url: Maker) -> None:
    """A write adds one row to the log, not a row of ``search_terms`` per lexeme (an
    append's items are counted when a search indexes them); a search folds the log of
    its tenant and kind first, and ranks with every count."""
    url = make_url("postgres")
    with ownstate.connect(url) as client, ownstate.connect(url, tenant="acme") as other:
        session = client.session_stores.create("chats").add(actor_id="user:1")
        for n in range(3):
            session.append_items([{"role": "user", "content": f"refund {n} {m}"}
                                  for m in range(4)])
        client.memory_stores.create("notes").remember("user:1", "k", "refund one")
        other.session_stores.create("chats").add(actor_id="user:1").append_items(
            [{"role": "user", "content": "refund elsewhere"}])
        with psycopg.connect(POSTGRES_URL) as conn:
            assert conn.execute(f"SELECT count(*) FROM {_schema(url)}.search_terms "
                                "WHERE tenant = 'default' AND kind = 'item'").fetchone() == (0,)
        assert _log_rows(url) == [("default", "fact")]  # the items wait for a search
        assert [r[0] for r in _queue_rows(url)] == ["acme"] + ["default"] * 3
        session.pop_item()  # an item still queued: nothing counted, nothing subtracted
        _consistent(url)
        client.session_stores.search_items("refund")  # indexes, counts and folds them
        assert _log_rows(url) == [("default", "fact")]
        assert [r[0] for r in _queue_rows(url)] == ["acme"]
        session.fork().delete()  # the fork logs its copies' counts; the delete subtracts
        assert _log_rows(url) == [("default", "fact"), ("default", "item")]
        _consistent(url)
        hits = client.session_stores.search_items("refund 2", limit=20)
        assert _log_rows(url) == [("default", "fact")]
        _consistent(url)
        collection = sorted((i.seq, terms(item_text(i.data))) for i in session.list_items_after())
        want = rank(query_terms("refund 2"), collection, lambda _: True)
        assert [(h.item.seq, h.score) for h in hits] == want
        assert len(hits) == 5  # "refund" is in every item: only "2" counts
        assert [h.fact.key for h in client.memory_stores.get("notes").search("refund")] == ["k"]
        assert _log_rows(url) == []
        _consistent(url)


def test_a_write_folds_a_long_log_itself(make_url: Maker,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url = make_url("postgres")
    monkeypatch.setattr(pg_search, "FOLD_ENTRIES", 5)
    with ownstate.connect(url) as client:
        memory = client.memory_stores.create("notes")
        memory.remember("user:1", "a1", "alpha")  # two entries: a1, alpha
        memory.remember("user:1", "a2", "beta")
        assert len(_log_rows(url)) == 2  # two entries logged: fewer than five
        memory.remember("user:1", "a3", "gamma delta")
        assert len(_log_rows(url)) == 3  # four found: still fewer
        memory.remember("user:1", "a4", "iota")
        assert len(_log_rows(url)) == 1  # seven found and folded; its own row is left
        memory.remember_many([{"subject": "user:1", "key": f"k{n}", "value": "one two"}
                              for n in range(3)])  # five entries: k0, k1, k2, one, two
        memory.remember("user:1", "k8", "three")  # seven found: folded
        assert _log_rows(url) == [("default", "fact")]
        memory.remember("user:1", "k9", "four")
        assert _log_rows(url) == [("default", "fact"), ("default", "fact")]
        _consistent(url)


def test_concurrent_writers_and_searches_keep_exact_counts(make_url: Maker,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Writers that fold and searches that fold, at once on several connections, count
    every document once: no fold is lost or applied twice, and none deadlocks."""
    url = make_url("postgres")
    monkeypatch.setattr(pg_search, "FOLD_ENTRIES", 20)
    with ownstate.connect(url) as client:
        store = client.session_stores.create("chats")
        client.memory_stores.create("notes")
        sessions = [store.add(actor_id=f"user:{n}") for n in range(3)]

    async def writer(n: int) -> None:
        async with await ownstate.connect_async(url) as c:
            s = await (await c.session_stores.get("chats")).get(sessions[n].session_id)
            for m in range(15):
                await s.append_items([{"role": "user", "content": f"refund {m} w{n} x{m % 4}"}
                                      for _ in range(2)])
                if m % 5 == 0:
                    await s.pop_item()

    async def searcher() -> None:
        async with await ownstate.connect_async(url) as c:
            notes = await c.memory_stores.get("notes")
            for m in range(15):
                await c.session_stores.search_items(f"refund {m}")
                await notes.remember("user:1", f"k{m % 5}", f"refund {m}")
                await notes.search("refund")

    async def main() -> None:
        await asyncio.gather(*(writer(n) for n in range(3)), searcher(), searcher())

    asyncio.run(main())
    _consistent(url)
    with ownstate.connect(url) as client:
        hits = client.session_stores.search_items("refund", limit=200)
        assert len(hits) == 3 * (30 - 3)
        assert len(client.memory_stores.get("notes").search("refund", limit=20)) == 5
    assert _log_rows(url) == []


def _item_terms(url: str) -> list[tuple[int, bool]]:
    """Each item's seq and whether it has its terms yet, in id order."""
    with psycopg.connect(POSTGRES_URL) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            f"SELECT seq, terms_len IS NOT NULL FROM {_schema(url)}.items ORDER BY id")]


def test_an_append_queues_its_items_for_the_next_search(make_url: Maker) -> None:
    """An append stores its items without terms and queues their ids; a fork queues its
    copies of items still queued; the next search indexes them all, once, and ranks as
    if each append had indexed its own."""
    url = make_url("postgres")
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="user:1")
        session.append_items([{"role": "user", "content": f"refund {n}"} for n in range(3)])
        session.append_items([{"role": "user", "content": "refund 1 again"}],
                             idempotency_key="k")
        assert [(r[1], r[2]) for r in _queue_rows(url)] == [(1, 3), (4, 4)]
        assert _item_terms(url) == [(1, False), (2, False), (3, False), (4, False)]
        child = session.fork(up_to_item_id=session.list_items_after(limit=2)[1].item_id)
        assert len(_queue_rows(url)) == 3  # the copies' ids
        plain = client.session_stores.create("plain", index_items=False)
        plain.add(actor_id="user:1").append_items([{"role": "user", "content": "refund"}])
        assert len(_queue_rows(url)) == 3  # a store that does not index queues nothing
        _consistent(url)
        hits = client.session_stores.search_items("refund 1", limit=20)
        assert _queue_rows(url) == []
        assert [t for _, t in _item_terms(url)] == [True] * (len(_item_terms(url)) - 1) + [
            False]  # the store that does not index its items comes last
        _consistent(url)
        collection = sorted([(("a", i.seq), terms(item_text(i.data)))
                             for i in session.list_items_after()]
                            + [(("b", i.seq), terms(item_text(i.data)))
                               for i in child.list_items_after()])
        want = rank(query_terms("refund 1"), collection, lambda _: True)
        assert sorted(round(h.score, 9) for h in hits) == sorted(round(s, 9) for _, s in want)
        assert len(hits) == len(want) >= 3
        with psycopg.connect(POSTGRES_URL) as conn:
            assert conn.execute(
                f"SELECT sum(docs), sum(length) FROM {_schema(url)}.search_stats "
                "WHERE kind = 'item'").fetchone() == (len(collection),
                                                       sum(len(t) for _, t in collection))
        assert client.session_stores.search_items("refund 1", limit=20) == hits


def test_a_queued_item_deleted_before_the_search_is_never_counted(make_url: Maker) -> None:
    url = make_url("postgres")
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="user:1")
        session.append_items([{"role": "user", "content": f"refund {n}"} for n in range(3)])
        other = client.session_stores.get("chats").add(actor_id="user:2")
        other.append_items([{"role": "user", "content": "refund 9"}])
        session.pop_item()
        other.clear()
        _consistent(url)
        assert [h.item.seq for h in client.session_stores.search_items("refund")] == [1, 2]
        _consistent(url)
        with psycopg.connect(POSTGRES_URL) as conn:
            assert conn.execute(f"SELECT sum(docs) FROM {_schema(url)}.search_stats "
                                "WHERE kind = 'item'").fetchone() == (2,)
        session.delete()  # indexed now: subtracted
        _consistent(url)
        assert client.session_stores.search_items("refund") == []


def test_an_append_that_finds_a_long_queue_indexes_it(make_url: Maker,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url = make_url("postgres")
    monkeypatch.setattr(pg_items_search, "PENDING_LIMIT", 6)
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="user:1")
        session.append_items([{"role": "user", "content": f"refund {n}"} for n in range(2)])
        session.append_items([{"role": "user", "content": f"refund {n}"} for n in range(3)])
        assert len(_queue_rows(url)) == 2  # five ids: fewer than six
        assert not any(t for _, t in _item_terms(url))
        session.append_items([{"role": "user", "content": "refund again"}])
        assert _queue_rows(url) == []  # six: indexed by the append, after it
        assert all(t for _, t in _item_terms(url))
        _consistent(url)
        assert len(client.session_stores.search_items("refund")) == 6


def test_concurrent_searches_index_the_queue_once(make_url: Maker) -> None:
    """Searches that find the same items queued, at once, index and count them once: the
    later ones wait for the first and find the queue gone."""
    url = make_url("postgres")
    with ownstate.connect(url) as client:
        session = client.session_stores.create("chats").add(actor_id="user:1")
        for n in range(10):
            session.append_items([{"role": "user", "content": f"refund {n} {m}"}
                                  for m in range(5)])
    schema = _schema(url)

    async def search(c: Any) -> int:
        return len(await c.session_stores.search_items("refund", limit=100))

    async def main() -> list[int]:
        clients = [await ownstate.connect_async(url) for _ in range(4)]
        try:
            # the queue's rows held by another transaction, so every search waits on them
            async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as lock:
                await lock.execute(f"SELECT 1 FROM {schema}.item_index_queue FOR UPDATE")
                searches = [asyncio.ensure_future(search(c)) for c in clients]
                await asyncio.sleep(0.5)
                assert not any(s.done() for s in searches)
                await lock.commit()
                return list(await asyncio.gather(*searches))
        finally:
            for c in clients:
                await c.close()

    assert asyncio.run(main()) == [50] * 4
    assert _queue_rows(url) == []
    _consistent(url)
    with psycopg.connect(POSTGRES_URL) as conn:
        assert conn.execute(f"SELECT sum(docs) FROM {schema}.search_stats "
                            "WHERE kind = 'item'").fetchone() == (50,)


def test_migrating_a_database_of_indexed_items_keeps_them(make_url: Maker) -> None:
    """A database from before the queue (migration 11): its items keep their terms and
    counts, and appends after the migration are queued and found."""
    url = make_url("postgres")
    _fill(url)
    with ownstate.connect(url) as client:
        client.session_stores.search_items("refund")  # nothing left queued
        before = [(h.item.item_id, h.score) for h in
                  client.session_stores.search_items("refund 1 abc")]
    schema = _schema(url)
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {schema}.item_index_queue")
        conn.execute(f"DELETE FROM {schema}.ownstate_schema WHERE version >= 11")
    with ownstate.connect(url) as client:
        client.migrate()
        found, expected_version = client.check()
        assert found == expected_version
        assert [(h.item.item_id, h.score) for h in
                client.session_stores.search_items("refund 1 abc")] == before
        _consistent(url)
        client.session_stores.get("chats").add(actor_id="user:9").append_items(
            [{"role": "user", "content": "zebra"}])
        assert len(_queue_rows(url)) == 1
        assert len(client.session_stores.search_items("zebra")) == 1
    _consistent(url)
