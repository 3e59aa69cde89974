"""The help texts and arguments `dynbranch report` and its parser share, formatted from the
constants the report runs (``loadgen.report.matrix``, ``loadgen.report.c3``): no heavy imports,
as the CLI builds its parser from them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from loadgen.report import c3
from loadgen.report.matrix import C3_IDLE_ONLY, C3_LEVELS, MATRICES, REPLAY_RATES

DESCRIPTION = ("Run the experiment matrix (workloads × arms × loads × seeds) on the simulated "
               "engine; write JSON, plots and a Markdown summary, print the summary table and "
               "where the report is.")
DEFAULT_OUT = ".dynbranch/report"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _listed(names: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _cell(spec: dict[str, Any]) -> str:
    """'48 workflows x 5 seeds per cell'."""
    return f"{spec['workflows']} workflows x {_count(spec['seeds'], 'seed')} per cell"


def _rates(rates: Sequence[float]) -> str:
    return f"{min(rates):g}-{max(rates):g}/s"


_QUICK, _FULL = MATRICES["quick"], MATRICES["full"]
_SWEPT = _listed(c3.SWEEP_WORKLOADS)
FULL_HELP = (f"{_cell(_FULL)} (more at high rates) at {_listed(_FULL['loads'])} load"
             + "".join(f", a {once} loop (1 seed)" for once in _FULL.get("once", ()))
             + f", every arm, every recurrence profile; the C3 study ({_SWEPT} across λ "
             f"{_rates(c3.SWEEP_RATES)}, {c3.SWEEP_SEEDS} seeds, the phased trace, issue 37's "
             f"checks), the replay-rate sweep ({_listed([f'{r:g}' for r in REPLAY_RATES])}), and "
             f"the LADS bench in full (default: the quick matrix, {_cell(_QUICK)} at "
             f"{_listed(_QUICK['loads'])})")
ONLY_HELP = (f"c3: only the C3 study: {_SWEPT} across λ {_rates(c3.SWEEP_RATES)} and at every "
             f"load level ({_listed(C3_LEVELS)}), {_listed(C3_IDLE_ONLY)} at idle, the phased "
             "trace, and issue 37's acceptance checks")
OUT_HELP = f"report folder (default {DEFAULT_OUT})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--full``, ``--only`` and ``--out`` (``--data-dir`` is the CLI's, shared with bench)."""
    parser.add_argument("--full", action="store_true", help=FULL_HELP)
    parser.add_argument("--only", choices=["c3"], help=ONLY_HELP)
    parser.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)


__all__ = ["DEFAULT_OUT", "DESCRIPTION", "FULL_HELP", "ONLY_HELP", "OUT_HELP", "add_arguments"]
