"""``langgraph-store``: the items of LangGraph's PostgresStore or SqliteStore as memory facts.

``--from`` is a PostgreSQL URL or a SQLite file holding the ``store`` table, read
read-only through LangGraph's own ``AsyncPostgresStore``/``AsyncSqliteStore``. Each
namespace is one unit; ``--store`` names the ownstate memory store (``langgraph``, the
one :class:`~ownstate.adapters.langgraph.OwnstateStore` uses).

Each item becomes the fact :class:`~ownstate.adapters.langgraph.OwnstateStore` would hold
for it (namespace -> subject, key -> key, the item's value in the adapter's wrapper, with
its ``created_at``, the namespace recorded in the adapter's index), with
``source_type="import"`` and ``valid_from`` the item's ``updated_at``. An item whose
current fact already holds its value is skipped, so a re-run writes nothing twice and
picks up what changed in the source since.

It may touch the public API, the importer loop, :mod:`._sql`, ids and the error tree, and,
imported when used, the LangGraph adapter's store and LangGraph's own stores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ... import _ids
from ...api import AsyncClient, AsyncMemoryStore
from ...errors import InvalidInput, StoreNotFound
from ..base import DecodeError, Unit, Written, canonical_digest
from ._sql import DatabaseImporter

if TYPE_CHECKING:
    from langgraph.store.base import Item

    from ...adapters.langgraph import OwnstateStore

__all__ = ["IMPORTER", "LangGraphStoreImporter"]

_PAGE = 1000  # items read back per adapter search


@dataclass(frozen=True, slots=True)
class _Namespace:
    namespace: tuple[str, ...]
    items: list[Item]


def _aware(moment: datetime) -> datetime:
    """SqliteStore gives UTC times without a zone; PostgresStore gives zoned ones."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _view(items: list[Any]) -> list[Any]:
    return sorted([list(i.namespace), i.key, i.value, _ids.format_time(_aware(i.created_at))]
                  for i in items)


class LangGraphStoreImporter(DatabaseImporter[_Namespace]):
    """LangGraph store items (PostgresStore or SqliteStore) into OwnstateStore's facts."""

    name = "langgraph-store"
    default_store = "langgraph"
    count_sql = "SELECT count(DISTINCT prefix) AS n FROM store"

    async def open(self) -> None:
        await super().open()
        self._row_to_item: Callable[..., Item]
        if self._db.pool is not None:
            from langgraph.store.postgres.base import _row_to_item as postgres_row

            self._row_to_item = postgres_row
        else:
            from langgraph.store.sqlite.base import _row_to_item as sqlite_row

            self._row_to_item = sqlite_row

    async def units(self) -> AsyncIterator[Unit]:
        rows = await self._db.query("SELECT DISTINCT prefix FROM store ORDER BY prefix")
        for row in rows:
            namespace = tuple(row["prefix"].split("."))
            yield Unit("/".join(namespace), {"namespace": namespace}, row["prefix"])

    async def decode(self, unit: Unit) -> _Namespace:
        # The rows are read with SQL (the stores' own reads also refresh TTLs, which a
        # read-only source refuses) and decoded by the stores' own row decoder.
        namespace = tuple(unit.ids["namespace"])
        rows = await self._db.query("SELECT key, value, created_at, updated_at FROM store "
                                    "WHERE prefix = %s ORDER BY key", (unit.listed,))
        items: list[Item] = []
        for row in rows:
            try:
                items.append(self._row_to_item(namespace, row))
            except Exception as exc:  # the framework could not decode the row
                raise DecodeError(f"LangGraph cannot decode the item: {exc!r}",
                                  key=row["key"]) from exc
        return _Namespace(namespace, items)

    def _adapter(self, client: AsyncClient) -> OwnstateStore:
        from ...adapters.langgraph import OwnstateStore

        return self.adapter(client, lambda c: OwnstateStore(c, memory_store=self.store))

    async def _memory(self, client: AsyncClient, *, create: bool) -> AsyncMemoryStore | None:
        stores = client.memory_stores
        try:
            return await stores.get(self.store)
        except StoreNotFound:
            if not create:
                return None
            return await self._adapter(client)._memory_store()

    async def write(self, client: AsyncClient, unit: Unit, decoded: _Namespace, *,
                    dry_run: bool) -> Written:
        from ...adapters.langgraph.store import _INDEX_SUBJECT, _encode_text, _subject

        subject = _subject(decoded.namespace)
        if subject is None:
            raise InvalidInput(f"namespace {decoded.namespace} is too long to store as a "
                               "subject", field="namespace")
        memory = await self._memory(client, create=not dry_run)
        current: dict[str, Any] = {}
        indexed = False
        if memory is not None:
            current = {f.key: f.value for f in await memory.recall(subject)}
            indexed = bool(await memory.recall(_INDEX_SUBJECT, [subject]))
        facts: list[dict[str, Any]] = []
        if not indexed and decoded.items:
            facts.append({"subject": _INDEX_SUBJECT, "key": subject,
                          "value": list(decoded.namespace)})
        for item in decoded.items:
            key = _encode_text(item.key)
            if key is None:
                raise InvalidInput(f"key {item.key!r} is too long to store", field="key")
            wrapper = {"value": item.value,
                       "created_at": _ids.format_time(_aware(item.created_at))}
            stored = current.get(key)
            if isinstance(stored, dict) and stored.get("value") == item.value:
                continue
            facts.append({"subject": subject, "key": key, "value": wrapper,
                          "source_type": "import",
                          "valid_from": _aware(item.updated_at)})
        written = Written()
        written.counts["facts"] = sum(1 for f in facts if f["subject"] == subject)
        written.already = not facts
        if facts and not dry_run:
            assert memory is not None
            size = client.limits.max_batch_items
            for start in range(0, len(facts), size):
                await memory.remember_many(facts[start:start + size])
        return written

    async def digest(self, client: AsyncClient, unit: Unit, decoded: _Namespace
                     ) -> tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]:
        stored: list[Any] = []
        if await self._memory(client, create=False) is not None:
            adapter = self._adapter(client)
            offset = 0
            while True:
                page = await adapter.asearch(decoded.namespace, limit=_PAGE, offset=offset)
                offset += len(page)
                stored += [i for i in page if tuple(i.namespace) == decoded.namespace]
                if len(page) < _PAGE:
                    break
        return ((canonical_digest(_view(decoded.items)), +Counter(facts=len(decoded.items))),
                (canonical_digest(_view(stored)), +Counter(facts=len(stored))))


IMPORTER = LangGraphStoreImporter
