"""``dynbranch report``: run a matrix of workloads × loads × seeds through the arms, write the
report (JSON, PNG plots, a Markdown summary) and print where it is.

The quick matrix (the default) is the four workloads at low load with one seed; ``--full`` is
three seeds at low and high load (open-loop Poisson) plus one closed serial loop per workload.
Every cell is one ``dynbranch bench arms`` run (all of its arms on one schedule); a failed
cell is listed in the report and left out of the plots.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import time
from pathlib import Path
from typing import Any

from rich.progress import Progress

from loadgen.report_plots import (
    arm_order,
    figure8,
    figure9,
    figure10,
    figure14,
)
from loadgen.report_summary import PAPER, summary_markdown

WORKLOADS = ("routing", "react", "subagent", "hci")
#: Loads: the paper's low-load rates (per workload, in the bench) and its "at load" 0.8/s, both
#: open-loop Poisson; ``serial`` is the closed loop of one (Table 2's setting).
LOADS: dict[str, tuple[str, float | None]] = {
    "low": ("poisson", None), "high": ("poisson", 0.8), "serial": ("serial", None)}
MATRICES: dict[str, dict[str, Any]] = {
    "quick": {"seeds": (0,), "loads": ("low",)},
    "full": {"seeds": (0, 1, 2), "loads": ("low", "high"),
             #: the closed loop once per workload (seed 0): Table 2's setting, C2 beside C1
             "once": ("serial",)}}
#: Per-cell options of the full matrix: every arm, on the quick mode's schedule size and time
#: scale so that the matrix stays near 30 minutes on 2 cores (the bench's own full mode runs 48
#: workflows on 4 engines at a finer time scale).
FULL_CELL: dict[str, Any] = {"workflows": 12, "engines": 2}


def cells(matrix: str) -> list[tuple[str, str, int]]:
    """(workload, load, seed) of every run in a matrix."""
    spec = MATRICES[matrix]
    return ([(w, load, seed) for w in WORKLOADS for load in spec["loads"]
             for seed in spec["seeds"]]
            + [(w, load, 0) for w in WORKLOADS for load in spec.get("once", ())])


def run_cell(workload: str, load: str, seed: int, quick: bool) -> dict[str, Any]:
    """One ``bench arms`` run, its own table captured (the report prints the summary)."""
    from loadgen.arm_set import ALL_ARMS
    from loadgen.bench.arms import run

    options = {} if quick else {**FULL_CELL, "arms": ALL_ARMS}
    with contextlib.redirect_stdout(io.StringIO()):
        arrival, rate = LOADS[load]
        return run(True, workload, seed=seed, arrival=arrival, rate=rate, **options)


def run_matrix(matrix: str, out: Path) -> dict[str, Any]:
    """Run every cell with a progress bar; write report.json, the plots and summary.md."""
    todo = cells(matrix)
    results, failures = [], []
    started = time.monotonic()
    with Progress() as progress:
        task = progress.add_task(f"report ({matrix})", total=len(todo))
        for workload, load, seed in todo:
            progress.update(task, description=f"{workload} {load} seed {seed}")
            try:
                result = run_cell(workload, load, seed, quick=matrix == "quick")
            except Exception as exc:  # a failed cell is reported, never averaged in
                failures.append({"workload": workload, "load": load, "seed": seed,
                                 "error": f"{type(exc).__name__}: {exc}"})
            else:
                result["load"] = load
                results.append(result)
            progress.advance(task)
        progress.update(task, description="timeline of one Routing workflow")
        extra = _timeline(out, failures)
        sweeps: dict[str, Any] = {}
        if matrix == "full":
            by_rate, sweep = run_sweeps(progress, failures)
            sweeps = {"routing_by_lambda": by_rate, f"{SWEEP_WORKLOAD}_by_replay_rate": sweep}
            label = _label(results)
            if by_rate:
                extra.append(figure14(by_rate, out / "fig14_decomposition.png",
                                      f"Routing latency across λ ({label})"))
            if sweep:
                extra.append(figure10(sweep, out / "fig10_replay_rate.png",
                                      f"{SWEEP_WORKLOAD}: speedup vs exact-replay rate "
                                      f"({label})"))
    return write_report(matrix, results, failures, out, time.monotonic() - started, extra,
                        sweeps)


def _timeline(out: Path, failures: list[dict[str, Any]]) -> list[Path]:
    """The Gantt of one Routing workflow under floor and full (a failure is reported)."""
    from loadgen.timeline import routing_timeline

    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    try:
        return [asyncio.run(routing_timeline(out / "timeline_routing.png"))]
    except Exception as exc:
        failures.append({"workload": "routing", "load": "timeline", "seed": 0,
                         "error": f"{type(exc).__name__}: {exc}"})
        return []


#: The full matrix's sweeps: Figure 14 (Routing across λ) and Figure 10 (exact-replay rate).
LAMBDAS = (0.12, 0.3, 0.5, 0.8)
REPLAY_RATES = (0.22, 0.5, 0.77)
SWEEP_WORKLOAD = "react"


def run_sweeps(progress: Progress, failures: list[dict[str, Any]]
               ) -> tuple[list[tuple[float, dict[str, Any]]], list[tuple[float, dict[str, Any]]]]:
    """Routing under floor/c1/full at each λ, and ReAct under floor/full at each replay rate."""
    from loadgen.bench.arms import run

    by_rate, sweep = [], []
    task = progress.add_task("sweeps", total=len(LAMBDAS) + len(REPLAY_RATES))
    for lam in LAMBDAS:
        progress.update(task, description=f"routing at λ={lam}")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                by_rate.append((lam, run(True, "routing", rate=lam, arms=("floor", "c1", "full"),
                                         **FULL_CELL)))
            except Exception as exc:
                failures.append({"workload": "routing", "load": f"λ={lam}", "seed": 0,
                                 "error": f"{type(exc).__name__}: {exc}"})
        progress.advance(task)
    for replay in REPLAY_RATES:
        progress.update(task, description=f"{SWEEP_WORKLOAD} at replay rate {replay}")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                sweep.append((replay, run(True, SWEEP_WORKLOAD, arms=("floor", "full"),
                                          replay_rate=replay, **FULL_CELL)))
            except Exception as exc:
                failures.append({"workload": SWEEP_WORKLOAD, "load": f"replay={replay}",
                                 "seed": 0, "error": f"{type(exc).__name__}: {exc}"})
        progress.advance(task)
    return by_rate, sweep


def write_report(matrix: str, results: list[dict[str, Any]], failures: list[dict[str, Any]],
                 out: Path, wall_s: float, extra: list[Path] | None = None,
                 sweeps: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the JSON, the plots and the Markdown summary under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    ok = [r for r in results if "arms" in r]
    label = _label(ok)
    plots = []
    if ok:
        plots.append(figure8(ok, out / "fig8_latency_vs_floor.png",
                             f"Mean latency / floor, 95% CI ({label})"))
        plots.append(figure9(ok, out / "fig9_fanout_cost.png",
                             f"Fan-out and speculative engine-seconds vs latency ({label})"))
    plots += extra or []
    summary = summary_markdown(ok, matrix=matrix, plots=plots) + _coverage_section(ok)
    if failures:
        summary += "\n## Failed cells (left out)\n\n" + "\n".join(
            f"- {f['workload']} {f['load']} seed {f['seed']}: {f['error']}" for f in failures)
    (out / "summary.md").write_text(summary)
    report = {"matrix": matrix, "wall_s": round(wall_s, 1), "results": results,
              "failures": failures, "plots": [p.name for p in plots],
              "sweeps": {name: [{"x": x, "result": r} for x, r in points]
                         for name, points in (sweeps or {}).items()}}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def _coverage_section(results: list[dict[str, Any]]) -> str:
    """Each workload's predictor coverage on the test split, as given and shuffled, beside
    the paper's (from the ``leak_guard`` each bench run reports)."""
    rows = {}
    for r in results:
        guard = r.get("leak_guard")
        if isinstance(guard, dict) and "given_top123" in guard:
            rows[r["workload"]] = guard
    if not rows:
        return ""
    lines = ["", "## Predictors (test split; fitted on the train split)", "",
             "| workload | decisions | top-1/2/3 as given | top-1/2/3 shuffled | within noise "
             "| paper |", "|---|---|---|---|---|---|"]
    for name, g in sorted(rows.items()):
        lines.append(f"| {name} | {g['n']} | {_triple(g['given_top123'])} | "
                     f"{_triple(g['shuffled_top123'])} | {'yes' if g['within_noise'] else 'NO'} "
                     f"| {PAPER['coverage'].get(name, '—')} |")
    return "\n".join(lines) + "\n"


def _triple(xs: list[float]) -> str:
    return "/".join(f"{x:.2f}" for x in xs)


def _label(results: list[dict[str, Any]]) -> str:
    if not results:
        return "no results"
    r = results[0]
    kind = "SIMULATED" if r.get("simulated", True) else "real"
    return f"{r.get('engines')} × {r.get('preset')}, {kind} engine"


def print_summary(report: dict[str, Any], out: Path) -> None:
    """The summary table on stdout, then where the report is."""
    print(f"{'workload':<9} {'load':<5} {'seed':>4}  " + "  ".join(
        f"{a:>7}" for a in arm_order(report["results"])))
    for r in report["results"]:
        if "arms" not in r:
            continue
        ratios = "  ".join(f"{r['arms'][a]['ratio_to_floor']:>7.3f}" if a in r["arms"]
                           else f"{'-':>7}" for a in arm_order(report["results"]))
        print(f"{r['workload']:<9} {r['load']:<5} {r.get('seed', 0):>4}  {ratios}")
    print(f"(mean latency / floor; {_label([r for r in report['results'] if 'arms' in r])}; "
          f"{len(report['failures'])} failed cells; {report['wall_s']} s)")
    print(f"report: {out / 'summary.md'} (plots and report.json beside it)")


def main(argv: list[str] | None = None) -> int:
    """``dynbranch report [--full] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="dynbranch report", description=(
        "Run the experiment matrix (workloads × arms × loads × seeds) on the simulated engine "
        "and write the report: JSON, plots and a Markdown summary."))
    parser.add_argument("--full", action="store_true",
                        help="3 seeds at low and high load, a serial loop, every arm and the λ and "
                             "replay-rate sweeps (default: the quick matrix)")
    parser.add_argument("--out", default=".dynbranch/report", help="report folder")
    args = parser.parse_args(argv)
    out = Path(args.out)
    report = run_matrix("full" if args.full else "quick", out)
    print_summary(report, out)
    return 1 if report["failures"] else 0


__all__ = ["cells", "main", "run_matrix", "write_report"]
