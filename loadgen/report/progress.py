"""The progress of ``dynbranch report``: one bar over every unit the report runs, where a unit is
one (seed, arm) of a ``bench arms`` cell (and a warm arm's training), or one other step (the
timeline, the phased trace, the LADS bench). The bar's total is counted before the first cell
(``bench.arms.planned_units``), so it moves per arm and seed and its time remaining is an ETA.

The bar is drawn on stderr: a cell's own table is captured from stdout (the report prints the
summary), and a bar drawn there would be captured with it and freeze until the cell ends. Where
stderr is not a terminal (a log file, ``nohup``, CI), a bar is not redrawn at all, so the same
figures are written there as a plain line at most every ``PLAIN_EVERY_S`` seconds and at the end.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from loadgen.bench.arms import UnitProgress


def progress_bar(console: Console | None = None) -> Progress:
    """What the report draws: what runs now, the bar, units done of all, elapsed, ETA."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=console or Console(stderr=True))


#: Seconds between the plain progress lines written where stderr is not a terminal.
PLAIN_EVERY_S = 30.0


def _clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class ReportProgress:
    """One task over the report's units; ``cell`` hands a ``bench arms`` run its hook."""

    def __init__(self, progress: Progress, title: str, total: int,
                 plain_every_s: float = PLAIN_EVERY_S) -> None:
        self.progress = progress
        self.title = title
        self.task: TaskID = progress.add_task(title, total=total)
        #: Plain lines instead of a redrawn bar (the console is not a terminal).
        self.plain = not progress.console.is_terminal
        self.plain_every_s = plain_every_s
        self._said = -math.inf

    def _advance(self, units: int) -> None:
        self.progress.advance(self.task, units)
        if not self.plain or units <= 0:
            return
        task = self.progress.tasks[self.task]
        now = time.monotonic()
        if now - self._said < self.plain_every_s and not task.finished:
            return
        self._said = now
        total = task.total or 0
        share = f"{task.completed / total:.0%}" if total else "-"
        self.progress.console.print(
            f"{self.title}: {task.completed:.0f}/{total:.0f} units ({share}), "
            f"{_clock(task.elapsed)} elapsed, ETA {_clock(task.time_remaining)}; "
            f"{task.description}", markup=False, highlight=False)

    @contextlib.contextmanager
    def cell(self, name: str, units: int) -> Iterator[UnitProgress]:
        """Track one cell of ``units`` units; on exit its units not reported (a cell that
        failed part way) are passed, so the bar ends at its total."""
        done = 0

        def hook(unit: str, finished: bool) -> None:
            nonlocal done
            if not finished:
                self.progress.update(self.task, description=f"{name}: {unit}")
            elif done < units:
                done += 1
                self._advance(1)

        self.progress.update(self.task, description=name)
        try:
            yield hook
        finally:
            self._advance(units - done)

    def step(self, name: str) -> contextlib.AbstractContextManager[UnitProgress]:
        """A step of one unit (not a ``bench arms`` cell)."""
        return self.cell(name, 1)


__all__ = ["PLAIN_EVERY_S", "ReportProgress", "progress_bar"]
