"""`dynbranch report --help` says what the report runs: its texts are formatted from the
constants the runs take."""

from __future__ import annotations

import subprocess
import sys

from loadgen.report import c3
from loadgen.report.arguments import FULL_HELP, ONLY_HELP
from loadgen.report.matrix import C3_IDLE_ONLY, C3_LEVELS, MATRICES, REPLAY_RATES, cell_options


def help_text(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "services.cli", "report", *args, "--help"],
                         capture_output=True, text=True, timeout=60, check=True)
    return " ".join(out.stdout.split())  # argparse wraps lines


def test_report_help_states_the_matrices_the_report_runs() -> None:
    text = help_text()
    full, quick = MATRICES["full"], MATRICES["quick"]
    assert f"{full['workflows']} workflows x {full['seeds']} seeds per cell" in text
    assert f"{quick['workflows']} workflows x {quick['seeds']} seed per cell" in text
    assert f"λ {min(c3.SWEEP_RATES):g}-{max(c3.SWEEP_RATES):g}/s" in text
    assert f"{c3.SWEEP_SEEDS} seeds" in text
    assert all(f"{r:g}" in text for r in REPLAY_RATES)
    assert all(level in text for level in (*full["loads"], *C3_LEVELS, *C3_IDLE_ONLY))
    assert " ".join(FULL_HELP.split()) in text and " ".join(ONLY_HELP.split()) in text


def test_the_cells_run_what_the_help_says() -> None:
    for matrix, spec in MATRICES.items():
        options = cell_options(spec["loads"][0], "data", matrix)
        assert (options["workflows"], options["seeds"]) == (spec["workflows"], spec["seeds"])
    assert cell_options("serial", "data", "full")["seeds"] == 1  # "a serial loop (1 seed)"
    assert "a serial loop (1 seed)" in FULL_HELP


def test_report_main_and_the_cli_share_the_arguments() -> None:
    out = subprocess.run([sys.executable, "-c", "from loadgen.report.runner import main; "
                          "main(['--help'])"], capture_output=True, text=True, timeout=60)
    assert " ".join(FULL_HELP.split()) in " ".join(out.stdout.split())
