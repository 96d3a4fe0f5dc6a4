"""``claude``: Claude Code / Claude Agent SDK transcripts (JSONL files) into ownstate.

``--from`` is a Claude config directory (``~/.claude``), its ``projects`` directory, or
one project directory in it. Each session is one unit: its main transcript
``<project>/<session id>.jsonl`` and its subagent transcripts
``<project>/<session id>/subagents/**/*.jsonl`` (with their ``.meta.json`` sidecars).

What is written is what the SDK's own ``import_session_to_store`` writes into
:class:`~ownstate.adapters.claude_agent_sdk.OwnstateSessionStore`, through that store:
the same keys (from the SDK's ``file_path_to_session_key``), the same entries (blank
lines skipped, an entry whose ``uuid`` came earlier skipped, a sidecar appended last as
an ``agent_metadata`` entry), so the SDK resumes an imported session as a mirrored one.

A transcript already stored is compared with the source entry by entry: the missing tail
is appended (an import cut short is finished), a transcript that has gone on since is
left alone, and one that differs from the source is reported, never overwritten.

It may touch the public API, the importer loop, the error tree, and, imported when used, the
Claude adapter (``ownstate.adapters.claude_agent_sdk``) and the Claude Agent SDK's session
helpers.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...api import AsyncClient
from ...errors import Conflict
from ..base import DecodeError, Importer, Unit, Written, canonical_digest

if TYPE_CHECKING:
    from claude_agent_sdk import SessionKey

    from ...adapters.claude_agent_sdk import OwnstateSessionStore

__all__ = ["IMPORTER", "ClaudeImporter"]


@dataclass(frozen=True, slots=True)
class _Transcript:
    key: SessionKey
    entries: list[dict[str, Any]]  # as the adapter keeps them (repeated uuids dropped)


def _projects_dir(root: Path) -> Path:
    if (root / "projects").is_dir():
        return root / "projects"
    if any(root.glob("*.jsonl")):
        return root.parent  # one project directory
    return root


def _sorted_jsonl(base: Path) -> Iterator[Path]:
    """``*.jsonl`` under ``base``, depth first, sorted per directory (the SDK's order)."""
    try:
        children = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return
    for child in children:
        if child.is_dir():
            yield from _sorted_jsonl(child)
        elif child.is_file() and child.name.endswith(".jsonl"):
            yield child


def _read_lines(path: Path, ids: dict[str, Any]) -> list[dict[str, Any]]:
    entries = []
    try:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                line = line.rstrip("\n")
                if not line:
                    continue
                try:
                    entry = json.loads(line)
                except ValueError as exc:
                    raise DecodeError(f"line {number} of {path} is not JSON: {exc}",
                                      **ids, line=number) from exc
                if not isinstance(entry, dict):
                    raise DecodeError(f"line {number} of {path} is not a JSON object",
                                      **ids, line=number)
                entries.append(entry)
    except (OSError, UnicodeDecodeError) as exc:
        raise DecodeError(f"cannot read {path}: {exc}", **ids) from exc
    return entries


def _unique(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    kept = []
    for entry in entries:
        uuid = entry.get("uuid")
        if isinstance(uuid, str):
            if uuid in seen:
                continue
            seen.add(uuid)
        kept.append(entry)
    return kept


class ClaudeImporter(Importer[list[_Transcript]]):
    """Claude Code / Agent SDK transcripts (JSONL files) into the Claude adapter's store."""

    name = "claude"
    default_store = "claude-agent-sdk"

    async def open(self) -> None:
        from ...adapters.claude_agent_sdk import OwnstateSessionStore  # noqa: F401

        root = Path(self.source).expanduser()
        if not root.is_dir():
            raise ValueError(f"{self.source} is not a directory")
        self._projects = _projects_dir(root)

    def _mains(self) -> list[Path]:
        return sorted(p for project in self._projects.iterdir() if project.is_dir()
                      for p in project.glob("*.jsonl") if p.is_file())

    async def count(self) -> int | None:
        return len(await asyncio.to_thread(self._mains))

    async def units(self) -> AsyncIterator[Unit]:
        for path in await asyncio.to_thread(self._mains):
            yield Unit(f"{path.parent.name}/{path.stem}",
                       {"project_key": path.parent.name, "session_id": path.stem,
                        "path": str(path)})

    async def decode(self, unit: Unit) -> list[_Transcript]:
        return await asyncio.to_thread(self._decode, unit)

    def _decode(self, unit: Unit) -> list[_Transcript]:
        from claude_agent_sdk._internal.session_store import file_path_to_session_key
        from claude_agent_sdk._internal.sessions import _read_agent_metadata_sidecar

        main = Path(unit.ids["path"])
        found = []
        for path in [main, *_sorted_jsonl(main.with_suffix("") / "subagents")]:
            key = file_path_to_session_key(str(path), str(self._projects))
            if key is None:
                continue
            ids = {**unit.ids, "subpath": key.get("subpath")}
            entries = _read_lines(path, ids)
            if "subpath" in key:
                try:
                    meta = _read_agent_metadata_sidecar(path)
                except OSError as exc:
                    raise DecodeError(f"cannot read the sidecar of {path}: {exc}",
                                      **ids) from exc
                if meta is not None:
                    entries.append({**meta, "type": "agent_metadata"})
            found.append(_Transcript(key, _unique(entries)))
        return found

    def _adapter(self, client: AsyncClient) -> OwnstateSessionStore:
        from ...adapters.claude_agent_sdk import OwnstateSessionStore

        return self.adapter(client, lambda c: OwnstateSessionStore(c, store=self.store))

    async def write(self, client: AsyncClient, unit: Unit, decoded: list[_Transcript], *,
                    dry_run: bool) -> Written:
        adapter = self._adapter(client)
        written = Written()
        for transcript in decoded:
            stored = await adapter.load(transcript.key) or []
            source = transcript.entries
            if stored == source[:len(stored)]:
                missing = source[len(stored):]
            elif source == stored[:len(source)]:
                missing = []  # it has gone on since: the source is in it
            else:
                raise Conflict(f"the stored transcript {transcript.key} differs from the "
                               "source; it was left as it is")
            if not missing:
                continue
            if not stored:
                written.counts["sessions"] += 1
            written.counts["items"] += len(missing)
            if not dry_run:
                await adapter.append(transcript.key, missing)  # type: ignore[arg-type]
        written.already = not written.counts
        return written

    async def digest(self, client: AsyncClient, unit: Unit, decoded: list[_Transcript]
                     ) -> tuple[tuple[str, Counter[str]], tuple[str, Counter[str]]]:
        adapter = self._adapter(client)
        source, stored = [], []
        source_counts, stored_counts = Counter[str](), Counter[str]()
        for transcript in decoded:
            entries = await adapter.load(transcript.key)
            source.append([dict(transcript.key), transcript.entries])
            stored.append([dict(transcript.key), entries or []])
            source_counts.update(sessions=1, items=len(transcript.entries))
            if entries is not None:
                stored_counts.update(sessions=1, items=len(entries))
        return ((canonical_digest(source), source_counts),
                (canonical_digest(stored), stored_counts))


IMPORTER = ClaudeImporter
