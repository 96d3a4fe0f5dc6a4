"""Progress of an import: a rich progress bar on a terminal, plain lines otherwise.

rich is optional (the ``import`` extra) and imported only when a bar is drawn; without it,
or when the output is not a terminal (a log, a pipe, CI), a line with the count, the rate
and the time left is printed every ``every`` seconds and once at the end.

It may touch nothing of ownstate's but how a duration is spelt (``_duration``); rich
(``rich.console``, ``rich.progress``) only when a bar is drawn.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from .._duration import duration_text

__all__ = ["PlainProgress", "RichProgress", "for_stream"]


class PlainProgress:
    """``<label>: 1200/80000 units (150.2/s, ETA 8m40s), 2 failed`` now and then."""

    def __init__(self, label: str, stream: TextIO, *, every: float = 5.0,
                 unit: str = "units") -> None:
        self._label = label
        self._unit = unit
        self._stream = stream
        self._every = every
        self._total: int | None = None
        self._done = 0
        self._failed = 0
        self._began = self._shown = 0.0

    def start(self, total: int | None) -> None:
        self._total = total
        self._began = self._shown = time.monotonic()

    def advance(self, *, failed: bool = False, by: int = 1) -> None:
        self._done += by
        self._failed += failed
        if time.monotonic() - self._shown >= self._every:
            self._show()

    def finish(self) -> None:
        self._show()

    def _show(self) -> None:
        self._shown = now = time.monotonic()
        elapsed = max(now - self._began, 1e-9)
        rate = self._done / elapsed
        line = f"{self._label}: {self._done}"
        if self._total is not None:
            line += f"/{self._total}"
        line += f" {self._unit} ({rate:.1f}/s"
        if self._total is not None and rate > 0 and self._done < self._total:
            line += f", ETA {duration_text((self._total - self._done) / rate)}"
        line += f", {duration_text(elapsed)} elapsed)"
        if self._failed:
            line += f", {self._failed} failed"
        print(line, file=self._stream, flush=True)


class RichProgress:
    """A rich progress bar with the rate and the time left."""

    def __init__(self, label: str, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._failed = 0
        self._bar: Any = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TaskProgressColumn(), TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("{task.fields[failed]}"), console=Console(file=stream))
        self._label = label
        self._task: Any = None
        self._began = 0.0
        self._done = 0

    def start(self, total: int | None) -> None:
        self._bar.start()
        self._began = time.monotonic()
        self._task = self._bar.add_task(self._label, total=total, rate="", failed="")

    def advance(self, *, failed: bool = False, by: int = 1) -> None:
        self._done += by
        self._failed += failed
        rate = self._done / max(time.monotonic() - self._began, 1e-9)
        self._bar.update(self._task, advance=by, rate=f"{rate:.1f}/s",
                         failed=f"{self._failed} failed" if self._failed else "")

    def finish(self) -> None:
        self._bar.stop()


def for_stream(label: str, stream: TextIO | None = None, *,
               unit: str = "units") -> PlainProgress | RichProgress:
    """A bar when ``stream`` (stderr by default) is a terminal and rich is installed,
    plain lines otherwise (counting ``unit``)."""
    stream = stream or sys.stderr
    if stream.isatty():
        try:
            return RichProgress(label, stream)
        except ImportError:
            pass
    return PlainProgress(label, stream, unit=unit)
