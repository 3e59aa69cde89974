"""The progress of ``dynbranch report``: one bar over every unit the report runs, where a unit is
one (seed, arm) of a ``bench arms`` cell (and a warm arm's training), or one other step (the
timeline, the phased trace, the LADS bench). The bar's total is counted before the first cell
(``bench.arms.planned_units``), so it moves per arm and seed and its time remaining is an ETA.

The bar is drawn on stderr: a cell's own table is captured from stdout (the report prints the
summary), and a bar drawn there would be captured with it and freeze until the cell ends.
"""

from __future__ import annotations

import contextlib
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


class ReportProgress:
    """One task over the report's units; ``cell`` hands a ``bench arms`` run its hook."""

    def __init__(self, progress: Progress, title: str, total: int) -> None:
        self.progress = progress
        self.task: TaskID = progress.add_task(title, total=total)

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
                self.progress.advance(self.task)

        self.progress.update(self.task, description=name)
        try:
            yield hook
        finally:
            self.progress.advance(self.task, units - done)

    def step(self, name: str) -> contextlib.AbstractContextManager[UnitProgress]:
        """A step of one unit (not a ``bench arms`` cell)."""
        return self.cell(name, 1)


__all__ = ["ReportProgress", "progress_bar"]
