"""The report's progress moves per arm and seed inside a cell, and shows an ETA."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.progress import Progress, TaskID, TimeRemainingColumn

from loadgen.arms.specs import ALL_ARMS, QUICK_ARMS
from loadgen.bench.arms import TRAINING_UNIT, planned_units, run
from loadgen.report import c3
from loadgen.report import runner as report
from loadgen.report.matrix import MATRICES, REPLAY_RATES
from loadgen.report.progress import ReportProgress


class Recording(Progress):
    """A progress bar that keeps every position and description it was given."""

    def __init__(self) -> None:
        super().__init__(console=Console(file=io.StringIO()))
        self.positions: list[float] = []
        self.descriptions: list[str] = []

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self.positions.append(self.tasks[0].completed)

    def update(self, task_id: TaskID, **fields: Any) -> None:
        super().update(task_id, **fields)
        if "description" in fields:
            self.descriptions.append(fields["description"])


def test_the_bar_moves_per_arm_and_seed_within_a_cell(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    # one real cell, small: HCI (the data profile only), 2 workflows x 2 seeds, the quick arms
    monkeypatch.setitem(MATRICES, "tiny", {"quick": True, "seeds": 2, "loads": ("idle",),
                                           "workflows": 2})
    monkeypatch.setattr(report, "WORKLOADS", ("hci",))
    monkeypatch.setattr(report, "_timeline", lambda out, failures: [])
    bar = Recording()
    monkeypatch.setattr(report, "progress_bar", lambda: bar)
    report.run_matrix("tiny", tmp_path)
    total = report.planned_total("tiny")
    assert total == 2 * len(QUICK_ARMS) + 1  # seeds x arms, and the timeline
    # every unit moved the bar by one: no jump at a cell's end, ending at the total
    assert sorted(set(bar.positions)) == list(range(1, total + 1))
    inside = [p for p in bar.positions if p <= 2 * len(QUICK_ARMS)]
    assert len(set(inside)) > 2
    assert "hci idle (data): seed 1, c2" in bar.descriptions


def test_a_bench_arms_run_reports_the_units_it_planned() -> None:
    seen: list[tuple[str, bool]] = []
    options: dict[str, Any] = {"workflows": 2, "seeds": 2, "arms": ("floor", "c1")}
    run(True, "hci", progress=lambda unit, done: seen.append((unit, done)), **options)
    done = [unit for unit, finished in seen if finished]
    assert len(done) == planned_units(True, "hci", **options) == 4
    assert [u for u, finished in seen if not finished] == done  # each unit starts, then ends
    assert set(done) == {"seed 0, floor", "seed 0, c1", "seed 1, floor", "seed 1, c1"}


def test_a_warm_arm_adds_its_training_as_a_unit() -> None:
    assert planned_units(True, "hci", seeds=3, arms=("floor", "full_warm")) == 3 * 2 + 1
    assert TRAINING_UNIT == "training on the train split"


def test_the_full_report_shows_an_eta_over_every_seed_and_arm() -> None:
    assert any(isinstance(c, TimeRemainingColumn) for c in report.progress_bar().columns)
    full = MATRICES["full"]
    cells = report.cells("full")
    serial = [c for c in cells if c[1] in full["once"]]
    warm = any(a == "full_warm" for a in ALL_ARMS)
    matrix = ((len(cells) - len(serial)) * (full["seeds"] * len(ALL_ARMS) + warm)
              + len(serial) * (len(ALL_ARMS) + warm))
    sweep = len(c3.SWEEP_WORKLOADS) * len(c3.SWEEP_RATES) * (
        c3.SWEEP_SEEDS * (len(c3.SWEEP_ARMS) + 1)  # the floor is added
        + ("full_warm" in c3.SWEEP_ARMS))  # and the warm arm's training, once per cell
    replay = len(REPLAY_RATES) * 2 * 2  # floor and full, two seeds
    # the timeline, the phased trace and the LADS bench are a unit each
    assert report.planned_total("full") == matrix + 1 + sweep + 1 + replay + 1


def test_where_stderr_is_no_terminal_the_progress_is_written_as_plain_lines() -> None:
    out = io.StringIO()
    bar = Progress(console=Console(file=out, force_terminal=False))
    track = ReportProgress(bar, "C3", 3, plain_every_s=0.0)
    with bar:
        with track.cell("routing 0.8/s", 2) as hook:
            hook("seed 0, full", False)
            hook("seed 0, full", True)
        with track.step("the phased trace"):
            pass
    lines = [line for line in out.getvalue().splitlines() if line.startswith("C3: ")]
    assert lines[0].startswith("C3: 1/3 units (33%), 0:00:0")
    assert "routing 0.8/s: seed 0" in lines[0]
    assert lines[-1].startswith("C3: 3/3 units (100%)") and "ETA" in lines[-1]
    terminal = io.StringIO()
    drawn = Progress(console=Console(file=terminal, force_terminal=True))
    assert not ReportProgress(drawn, "C3", 1).plain  # a terminal gets the redrawn bar only
