"""Memory stores and facts: the async public API (``client.memory_stores``).

A memory store holds durable facts about subjects (``user:8814``, ``account:ACME``). A fact
is never overwritten: remembering a new value closes the current fact and records the new
one, forgetting closes it, and both keep it in the history. The time model (valid time and
record time) is described in ``docs/memory.md``.

It may touch the backend's memory-store and fact operations through its scope, and the
sessions and runs of the public API (``session``, ``runs``) for exporting and erasing a
subject.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from .. import _ids
from .. import limits as _validate
from ..backends.ports.facts import NewFact
from ..backends.ports.search import TextQuery, text_query
from ..errors import InvalidInput, LimitExceeded, NotFound
from ..limits import CONTROL_RE, MAX_NAME_CHARS, reserved_subject
from ..model import (
    JSON,
    SOURCE_TYPES,
    Distillation,
    Extractor,
    Fact,
    FactExplanation,
    FactHit,
    Item,
    Page,
    SessionRecord,
)
from . import _semantic
from . import access as _access
from . import distill as _distill
from ._paging import StoreListing, keyset_limit, keyset_page
from ._scope import Scope
from ._semantic import Mode
from .runs import AsyncRuns
from .session import AsyncSession

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "AsyncMemoryStore", "AsyncMemoryStores"]

#: What :meth:`AsyncMemoryStores.export_subject` writes in ``format`` and ``version``.
EXPORT_FORMAT = "ownstate.subject-export"
EXPORT_VERSION = 1

_MAX_REASON_CHARS = 1000
_FACT_FIELDS = {"subject", "key", "value", "confidence", "source", "source_type", "valid_from"}


def _fact_id() -> str:
    """``fct_`` and 32 hex digits: 13 of microseconds since the epoch, 19 random.

    Ids made later sort later (within a clock), so the index of fact ids grows at its end
    instead of at random places, which keeps large batches of writes cheap.
    """
    return f"fct_{time.time_ns() // 1000:013x}{secrets.token_hex(10)[:19]}"


def _name(value: object, field: str) -> str:
    """A subject or key: a non-blank string of at most 256 printable chars."""
    if (not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS
            or CONTROL_RE.search(value)):
        raise InvalidInput(
            f"{field} must be a non-blank string of at most {MAX_NAME_CHARS} printable chars",
            field=field)
    return value


def _moment(value: object, field: str) -> datetime:
    """A timezone-aware datetime, in UTC, within the years 1000-9999."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(f"{field} must be a timezone-aware datetime", field=field)
    try:
        moment = value.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidInput(f"{field} is out of range", field=field) from exc
    if not 1000 <= moment.year <= 9999:
        raise InvalidInput(f"{field} must fall within the years 1000-9999 (UTC)", field=field)
    return moment


def _confidence(value: object) -> float | None:
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not 0 <= value <= 1):
        raise InvalidInput("confidence must be None or a number from 0 to 1",
                           field="confidence")
    return float(value)


def _source(value: object) -> tuple[str | None, str, str] | None:
    if value is None:
        return None
    if isinstance(value, Item):
        return (None, value.session_id, value.item_id)
    if (isinstance(value, tuple) and len(value) == 3
            and all(isinstance(part, str) and part for part in value)):
        return (value[0], value[1], value[2])
    raise InvalidInput("source must be an Item or a (store, session_id, item_id) tuple",
                       field="source")


async def _visible(fetch: Callable[[int], Awaitable[list[FactHit]]], subject: str | None,
                   limit: int) -> list[FactHit]:
    """Up to ``limit`` of the hits ``fetch`` ranks, without those of ownstate's own
    subjects unless ``subject`` names one: asks for more while those fill the page."""
    if subject is not None:
        return await fetch(limit)
    want = limit
    while True:
        hits = await fetch(want)
        kept = [h for h in hits if not reserved_subject(h.fact.subject)]
        if len(kept) >= limit or len(hits) < want:
            return kept[:limit]
        want *= 4


def _jsonable(value: Any) -> JSON:
    if isinstance(value, datetime):
        return _ids.format_time(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _record_json(record: Fact | SessionRecord | Item) -> dict[str, JSON]:
    return {k: _jsonable(v) for k, v in asdict(record).items()}


class AsyncMemoryStore(_access.StoreHandle):
    """A named container of facts about subjects: ``client.memory_stores.get(name)``.

    Every method acts on what is stored now; the handle holds only the store's name.
    """

    _kind = "memory_store"

    def __repr__(self) -> str:
        return f"<AsyncMemoryStore {self.name}>"

    def _new_fact(self, subject: object, key: object, value: object, confidence: object,
                  source: object, source_type: object, valid_from: object) -> NewFact:
        limits = self._scope.limits
        text = _validate.encode_json(value, field="value")
        size = _validate.utf8_size(text, field="value")
        if size > limits.max_item_bytes:
            raise LimitExceeded.too_big("value", size, limits.max_item_bytes, field="value")
        if source_type not in SOURCE_TYPES:
            raise InvalidInput(f"source_type must be one of {list(SOURCE_TYPES)}",
                               field="source_type")
        return NewFact(
            fact_id=_fact_id(),
            subject=_name(subject, "subject"),
            key=_name(key, "key"),
            value_json=text,
            confidence=_confidence(confidence),
            source_type=str(source_type),
            source=_source(source),
            valid_from=_moment(valid_from, "valid_from") if valid_from is not None else None,
        )

    async def remember(
        self,
        subject: str,
        key: str,
        value: JSON,
        *,
        confidence: float | None = None,
        source: Item | tuple[str, str, str] | None = None,
        source_type: str = "agent",
        valid_from: datetime | None = None,
    ) -> Fact:
        """Record that ``key`` of ``subject`` is ``value`` and return the new fact.

        The current fact for (subject, key), if any, is closed and named in the new fact's
        ``supersedes``, in the same transaction. ``value`` is any JSON value.
        ``confidence`` is a number from 0 to 1. ``source`` is the conversation item the
        fact was learned from: an :class:`~ownstate.Item`, or ``(store, session_id,
        item_id)``; it must exist in this tenant. ``source_type`` is one of ``agent``,
        ``pipeline``, ``user``, ``import``. ``valid_from`` (timezone-aware) is when the
        value became true in the world, now by default; an earlier time than the current
        fact's corrects it from then on.

        Raises :class:`~ownstate.errors.InvalidInput` (bad subject, key, value, confidence,
        source, source_type or valid_from), :class:`~ownstate.errors.LimitExceeded` (value
        larger than ``Limits.max_item_bytes``), :class:`~ownstate.errors.ItemNotFound`
        (unknown source item), :class:`~ownstate.errors.StoreNotFound`,
        :class:`~ownstate.errors.EmbedderMismatch` (the client's embedder is not the model
        of the store's vectors).
        """
        new = self._new_fact(subject, key, value, confidence, source, source_type, valid_from)
        s = self._scope
        made = await _semantic.with_vectors(s, [new])
        (fact,) = await s.backend.remember(s.tenant, self.name, made, _ids.now())
        return fact

    async def remember_many(self, facts: Sequence[Mapping[str, JSON]]) -> list[Fact]:
        """Remember several facts at once, in order, all or none; returns the new facts.

        Each element is a mapping with ``subject``, ``key`` and ``value`` and optionally
        ``confidence``, ``source``, ``source_type`` and ``valid_from``, meaning what the
        arguments of :meth:`remember` mean. A later element for the same (subject, key)
        supersedes an earlier one.

        Raises :class:`~ownstate.errors.InvalidInput` (as :meth:`remember`, or an element
        that is not such a mapping; carries ``index``),
        :class:`~ownstate.errors.LimitExceeded` (more than ``Limits.max_batch_items``
        elements, or a value too large), :class:`~ownstate.errors.ItemNotFound`,
        :class:`~ownstate.errors.StoreNotFound`, :class:`~ownstate.errors.EmbedderMismatch`.
        """
        s = self._scope
        if isinstance(facts, (str, bytes, Mapping)) or not isinstance(facts, Sequence):
            raise InvalidInput("facts must be a list of mappings", field="facts")
        if len(facts) > s.limits.max_batch_items:
            raise LimitExceeded.too_many("facts per call", s.limits.max_batch_items,
                                         len(facts), field="facts")
        made: list[NewFact] = []
        for index, spec in enumerate(facts):
            if not isinstance(spec, Mapping) or not {"subject", "key", "value"} <= set(spec) \
                    or not set(spec) <= _FACT_FIELDS:
                raise InvalidInput(
                    f"fact {index} must be a mapping with subject, key and value, and "
                    f"optionally {sorted(_FACT_FIELDS - {'subject', 'key', 'value'})}",
                    field="facts", index=index)
            try:
                made.append(self._new_fact(
                    spec["subject"], spec["key"], spec["value"], spec.get("confidence"),
                    spec.get("source"), spec.get("source_type", "agent"),
                    spec.get("valid_from")))
            except InvalidInput as exc:
                exc.details["index"] = index
                raise
        if not made:
            return []
        made = await _semantic.with_vectors(s, made)
        return await s.backend.remember(s.tenant, self.name, made, _ids.now())

    async def recall(
        self,
        subject: str,
        keys: Sequence[str] | None = None,
        *,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
    ) -> list[Fact]:
        """What is true of ``subject``: per key, the fact in force, ordered by key.

        ``as_of`` is valid time: what was true in the world at that moment. ``known_at`` is
        record time: what we believed at that moment (before later corrections). Both
        default to now, which gives the current beliefs about the present; a fact whose
        ``valid_from`` lies in the future is not in force yet. ``keys`` limits the answer
        to those keys.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        who = _name(subject, "subject")
        wanted = None
        if keys is not None:
            wanted = _validate.name_list(keys, lambda k: _name(k, "keys"),
                                         s.limits.max_page_size, field="keys", what="keys")
        # Left out, both are now by the clock that records facts, which for a remote
        # client is the server's: a client whose clock lags still sees its own writes.
        valid_at = _moment(as_of, "as_of") if as_of is not None else None
        known = _moment(known_at, "known_at") if known_at is not None else None
        if wanted == []:
            await s.backend.get_memory_store(s.tenant, self.name)
            return []
        return await s.backend.recall(s.tenant, self.name, who, wanted, valid_at, known)

    async def history(self, subject: str, key: str) -> list[Fact]:
        """Every fact ever recorded for (subject, key), current or closed, oldest first.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        return await s.backend.history(s.tenant, self.name, _name(subject, "subject"),
                                       _name(key, "key"))

    async def subjects(self, *, page_size: int | None = None,
                       page_token: str | None = None) -> Page[str]:
        """One page of the subjects that have facts in this store, in subject order. A
        subject stays listed once its facts are forgotten (they are closed, not deleted);
        erasing it removes it. Subjects of ownstate's own (``ownstate:...``) are not
        listed.

        Raises :class:`~ownstate.errors.InvalidInput` (a bad page token),
        :class:`~ownstate.errors.LimitExceeded`, :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope

        async def fetch(size: int, after: str | None) -> tuple[list[str], str | None]:
            found = await self._visible_subjects(size + 1, after)
            more = len(found) > size
            del found[size:]
            return found, found[-1] if more else None

        subjects, token = await keyset_page(
            s.limits, f"memory_subjects\x00{s.tenant}\x00{self.name}", page_size,
            page_token, fetch, cursor=str)
        return Page(subjects, token)

    async def subjects_after(self, *, after: str | None = None,
                             limit: int | None = None) -> list[str]:
        """Up to ``limit`` subjects (``Limits.default_page_size`` by default) after
        ``after``, in subject order: the keyset listing behind :meth:`subjects`.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        if after is not None and not isinstance(after, str):
            raise InvalidInput("after must be a subject", field="after")
        return await self._visible_subjects(keyset_limit(limit, s.limits), after)

    async def _visible_subjects(self, limit: int, after: str | None) -> list[str]:
        """Up to ``limit`` subjects after ``after``, ownstate's own left out."""
        s = self._scope
        found: list[str] = []
        while len(found) < limit:
            batch = await s.backend.list_subjects(s.tenant, self.name, limit, after)
            found += [x for x in batch if not reserved_subject(x)]
            if len(batch) < limit:
                break
            after = batch[-1]
        return found[:limit]

    async def get(self, fact_id: str) -> Fact:
        """One fact by id, current or closed.

        Raises :class:`~ownstate.errors.FactNotFound`, :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        return await s.backend.get_fact(s.tenant, self.name, _name(fact_id, "fact_id"))

    async def explain(self, fact_id: str) -> FactExplanation:
        """Why a fact is what it is: the fact, the fact it superseded, the fact that
        superseded it, and the conversation item it was learned from (``None`` when it has
        no source item or that item has since been deleted).

        Raises :class:`~ownstate.errors.FactNotFound`, :class:`~ownstate.errors.InvalidInput`,
        :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        return await s.backend.explain(s.tenant, self.name, _name(fact_id, "fact_id"))

    async def forget(self, subject: str, key: str, reason: str | None = None) -> Fact | None:
        """Stop believing the current fact for (subject, key): close it, never delete it.

        :meth:`recall` no longer returns it from now on, and :meth:`history` keeps it with
        ``closed_reason`` ``"forgotten: <reason>"`` (or ``"forgotten"``). Returns the
        closed fact, or ``None`` when there was no current fact. A fact scheduled for the
        future is the current one, so forgetting it cancels the change and leaves the
        value that holds until then.

        Raises :class:`~ownstate.errors.InvalidInput`, :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        who, what = _name(subject, "subject"), _name(key, "key")
        if reason is not None and (not isinstance(reason, str)
                                   or len(reason) > _MAX_REASON_CHARS):
            raise InvalidInput(f"reason must be a string of at most {_MAX_REASON_CHARS} chars",
                               field="reason")
        closed_reason = f"forgotten: {reason}" if reason else "forgotten"
        return await s.backend.forget(s.tenant, self.name, who, what, closed_reason,
                                      _ids.now())

    async def search(self, query: str, *, subject: str | None = None, limit: int = 10,
                     as_of: datetime | None = None,
                     mode: Mode | None = None) -> list[FactHit]:
        """The facts that best match ``query``, best first: each a :class:`FactHit` with
        the fact and its score.

        ``mode`` chooses the ranking. ``lexical``: a fact is found by the words of its key
        and of its value (strings, object keys, numbers), compared without case or
        accents; text in scripts written without spaces (Chinese, Japanese, Thai) is
        found by any substring of two characters or more. A fact matches when it holds at
        least one query term, and ranks higher the more of the rarer terms it holds; the
        score is its BM25 relevance. ``semantic``: facts rank by the cosine similarity of
        their vectors to the query's (the score), so a paraphrase that shares no word
        with the fact is found. ``hybrid``: the reciprocal-rank fusion of the two
        rankings (the score is the fused one). ``docs/memory.md`` explains the ranking.
        The default is hybrid for a client with an embedder, else lexical. Equal scores
        are ordered by fact id (lexical), newest first (semantic), by the lexical ranking
        (hybrid). Only facts :meth:`recall` would return are found: those in force now,
        or at valid time ``as_of``. ``subject`` limits the search to one subject;
        subjects of ownstate's own (``ownstate:...``, such as distillation's watermarks)
        are found only when named there. A
        fact's provenance (``source_store``, ``source_session_id``, ``source_item_id``)
        names the item it came from.

        Raises :class:`~ownstate.errors.InvalidInput` (a query with no word, an unknown
        mode, a semantic or hybrid mode without an embedder),
        :class:`~ownstate.errors.LimitExceeded` (a query over 2,000 characters or 64
        distinct terms, or ``limit`` outside 1 to ``Limits.max_page_size``),
        :class:`~ownstate.errors.StoreNotFound`.
        """
        s = self._scope
        parsed = text_query(query)
        chosen = _semantic.choose_mode(s, mode)
        who = _name(subject, "subject") if subject is not None else None
        size = s.limits.page_size(limit, "limit")
        valid_at = _moment(as_of, "as_of") if as_of is not None else None

        async def lexical(n: int, terms: TextQuery = parsed) -> list[FactHit]:
            return await _visible(
                lambda m: s.backend.search(s.tenant, self.name, terms, who, valid_at, m),
                who, n)

        async def semantic(n: int) -> list[FactHit]:
            async def nearest(m: int) -> list[FactHit]:
                hits = await _semantic.nearest_facts(s, self.name, query, who, m, valid_at)
                return [FactHit(fact, score) for fact, score in hits]

            return await _visible(nearest, who, n)

        if _semantic.server_ranked(s):
            return await _visible(lambda m: s.backend.ranked_facts(
                s.tenant, self.name, parsed, who, valid_at, m, chosen), who, size)
        if chosen == "lexical":
            return await lexical(size)
        if chosen == "semantic":
            return await semantic(size)
        question = _semantic.content_terms(parsed)
        return await _semantic.fused(lambda n: lexical(n, question), semantic,
                                     lambda h: h.fact.fact_id,
                                     lambda h, score: FactHit(h.fact, score), size)

    async def reindex(self, *, batch_size: int = 256, replace: bool = False) -> int:
        """Give every current fact of the store that has none a vector from the client's
        embedder (facts written before the embedder was configured, or by a client
        without one); returns how many were embedded. Works in batches of ``batch_size``,
        each committed on its own, so an interrupted reindex resumes where it stopped.
        ``replace=True`` first drops every vector of the store, to switch models.

        Raises :class:`~ownstate.errors.InvalidInput` (no embedder; a bad batch_size),
        :class:`~ownstate.errors.EmbedderMismatch` (the store holds another model's
        vectors and ``replace`` is false), :class:`~ownstate.errors.StoreNotFound`.
        """
        return await _semantic.reindex_facts(self._scope, self.name, batch_size=batch_size,
                                             replace=replace)

    async def distill(
        self,
        session: AsyncSession,
        *,
        extractor: Extractor,
        subject: str | None = None,
        min_confidence: float = 0.5,
        batch_size: int = 100,
    ) -> Distillation:
        """Learn facts about ``subject`` (the session's ``actor_id`` by default) from the
        items of ``session`` not distilled into this store before, and remember the new ones.

        The items after the session's watermark are read in order, ``batch_size`` at a
        time, and handed to ``extractor`` (an :class:`~ownstate.Extractor`) with the
        subject's current facts. Of its candidates, those about another subject, citing an
        item outside the slice, or with an invalid key are rejected; those with confidence
        below ``min_confidence`` are skipped; of several for one key, the one citing the
        latest item wins; one equal to the current value writes nothing. The others are
        remembered (``source_type="pipeline"``, confidence as proposed) with the latest
        item they cite as their source, superseding the current value. Each slice's facts
        and the watermark's advance are written in one ``remember_many`` call: all or none.

        A pass that reads anything is a run of its own in the session (``framework
        "ownstate.distill"``), closed ``done``, or ``failed`` (``cancelled``) with the
        error; the run's effect ``"outcome"`` holds the counts and, on failure, the error's
        code and message. A slice that failed wrote nothing, and the next pass reads it
        again. With nothing new, nothing is written and no run is opened. See
        ``docs/memory.md`` for where the watermark lives. An ownstate error raised by a
        pass that opened a run carries its ``run_id``.

        Raises :class:`~ownstate.errors.ExtractorFailed` (the extractor's endpoint failed),
        :class:`~ownstate.errors.ActiveRunExists` (the session has another running or
        awaiting run), :class:`~ownstate.errors.InvalidInput` (bad session handle,
        extractor, subject, ``min_confidence`` outside 0 to 1, ``batch_size`` outside 1 to
        ``Limits.max_page_size``), :class:`~ownstate.errors.SessionNotFound`,
        :class:`~ownstate.errors.StoreNotFound`, and whatever the extractor raises.
        """
        s = self._scope
        return await _distill.distill(
            self, AsyncRuns(s), session, extractor=extractor, subject=subject,
            min_confidence=min_confidence, batch_size=batch_size,
            max_batch_size=s.limits.max_page_size)

    async def erase_subject(self, subject: str, *,
                            include_sessions: bool = False) -> dict[str, int]:
        """Hard-delete everything about ``subject`` in the whole tenant, not only in this
        store: the same as ``client.memory_stores.erase_subject``.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        return await AsyncMemoryStores(self._scope).erase_subject(
            subject, include_sessions=include_sessions)


class AsyncMemoryStores(StoreListing[AsyncMemoryStore]):
    """The tenant's memory stores: ``client.memory_stores``.

    Memory stores are separate from session stores: their names live apart, and deleting
    a session store or a session never touches a fact.
    """

    _listing = "memory_stores"

    async def create(self, name: str, *, owner: str | None = None) -> AsyncMemoryStore:
        """Create a memory store named with 3-55 chars of ``[a-z0-9_-]``, owned by
        ``owner`` (a principal) when one is given.

        Raises :class:`~ownstate.errors.AlreadyExists`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        valid = _validate.store_name(name)
        if owner is not None:
            owner = _access.principal_name(owner)
        record = await s.backend.create_memory_store(s.tenant, valid, _ids.now(), owner)
        return AsyncMemoryStore(s, record)

    async def get(self, name: str) -> AsyncMemoryStore:
        """The memory store with this name.

        Raises :class:`~ownstate.errors.StoreNotFound`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        record = await s.backend.get_memory_store(s.tenant, _validate.store_name(name))
        return AsyncMemoryStore(s, record)

    async def _named_after(self, limit: int, after: str | None) -> list[AsyncMemoryStore]:
        s = self._scope
        return [AsyncMemoryStore(s, r)
                for r in await s.backend.list_memory_stores(s.tenant, limit, after)]

    async def subject_facts(self, subject: str) -> list[Fact]:
        """Every fact about ``subject``, history included, in every memory store of the
        tenant, by store, key and record order.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        return await s.backend.subject_facts(s.tenant, _name(subject, "subject"))

    async def delete(self, name: str) -> int:
        """Delete a memory store and every fact in it, history included; returns how many
        facts went with it. Sessions are never touched.

        Raises :class:`~ownstate.errors.StoreNotFound`, :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        valid = _validate.store_name(name)
        return await s.backend.delete_memory_store(s.tenant, valid)

    async def erase_subject(self, subject: str, *,
                            include_sessions: bool = False) -> dict[str, int]:
        """Hard-delete every fact about ``subject``, history included, in every memory store
        of the tenant; with ``include_sessions=True`` also every session (in every session
        store) whose ``actor_id`` is ``subject``, with its items, runs, checkpoints and
        assets. This is the one operation that deletes facts outright (for privacy
        requests); it is atomic. Returns counts: ``{"facts": n, "sessions": m}``.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        if not isinstance(include_sessions, bool):
            raise InvalidInput("include_sessions must be True or False",
                               field="include_sessions")
        return await s.backend.erase_subject(s.tenant, _name(subject, "subject"),
                                             include_sessions)

    async def export_subject(self, subject: str) -> dict[str, JSON]:
        """Everything the tenant stores about ``subject``, as one JSON-serialisable document:
        every fact with its history in every memory store, and every session whose
        ``actor_id`` is ``subject`` with its items in order.

        The document carries ``format`` (``"ownstate.subject-export"``) and ``version``
        (``1``); times are UTC ISO 8601 text. It is read store by store, not as one
        snapshot: writes made while it runs may or may not appear.

        Raises :class:`~ownstate.errors.InvalidInput`.
        """
        s = self._scope
        who = _name(subject, "subject")
        exported_at = _ids.now()
        facts = await s.backend.subject_facts(s.tenant, who)
        sessions: list[dict[str, JSON]] = []
        page = s.limits.max_page_size
        store_after: str | None = None
        while True:
            stores = await s.backend.list_stores(s.tenant, page, store_after)
            for store in stores:
                sessions += await _export_sessions(s, store.name, who)
            if len(stores) < page:
                break
            store_after = stores[-1].name
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "tenant": s.tenant,
            "subject": who,
            "exported_at": _ids.format_time(exported_at),
            "facts": [_record_json(f) for f in facts],
            "sessions": sessions,
        }


async def _export_sessions(s: Scope, store: str, actor_id: str) -> list[dict[str, JSON]]:
    """The sessions of ``actor_id`` in one session store, each with its items in order."""
    page = s.limits.max_page_size
    found: list[dict[str, JSON]] = []
    cursor: list[Any] | None = None
    while True:
        try:
            records, cursor = await s.backend.list_sessions(
                s.tenant, store, actor_id=actor_id, metadata={}, order="create_time",
                descending=False, limit=page, after=cursor)
        except NotFound:  # the store was deleted meanwhile
            return found
        for record in records:
            entry = _record_json(record)
            del entry["tenant"]
            items: list[JSON] = []
            after_seq: int | None = None
            try:
                while True:
                    batch = await s.backend.list_items(
                        s.tenant, store, record.session_id, descending=False, limit=page,
                        after_seq=after_seq)
                    items += [_record_json(i) for i in batch]
                    if len(batch) < page:
                        break
                    after_seq = batch[-1].seq
            except NotFound:  # the session was deleted meanwhile
                continue
            entry["items"] = items
            found.append(entry)
        if cursor is None:
            return found
