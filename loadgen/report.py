"""``dynbranch report``: run a matrix of workloads × loads × recurrence profiles through the
arms, write the report (JSON, PNG plots, a Markdown summary) and print where it is.

Every cell is one ``dynbranch bench arms`` run on the virtual mesh (simulated engine time plus a
modelled cost per hop; the mesh's own CPU is in no latency, so the same command gives the same
ratios): all of its arms on the same schedules, its seeds merged into one paired sample. The
quick matrix (the default) is the four workloads at low load, 24 workflows, one seed, on both
recurrence profiles (``data``: as the data sets give it; ``paper``: the paper's, where it
differs: Routing and ReAct). ``--full`` is 48 workflows × 5 seeds per cell, every arm, at low and
high load (open-loop Poisson) plus one serial closed loop per workload, on both profiles, the
λ sweep (Routing under the floor, every fixed fan-out and priced admission: each arm's envelope
regret per λ and its worst case over the sweep, ``loadgen.envelope``), the replay-rate sweep,
and ``dynbranch bench lads`` in full (every delivery policy, the TTL baselines and sweep, KV
offloading and the no-eviction bound: ``fig_lads.png`` and a table). A failed cell is listed in
the report and left out of the plots.
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

from loadgen.envelope import regret_text, worst_regret
from loadgen.report_plots import (
    LADS_ARMS,
    arm_order,
    figure8,
    figure9,
    figure10,
    figure14,
    figure_lads,
)
from loadgen.report_summary import PAPER, envelope_section, summary_markdown
from loadgen.workloads import WORKLOADS as WORKLOAD_CLASSES
from loadgen.workloads.profiles import PROFILES, RECURRENCE_PROFILES

WORKLOADS = tuple(WORKLOAD_CLASSES)
#: Loads: the paper's low-load rates (per workload, in the bench) and its "at load" 0.8/s, both
#: open-loop Poisson; ``serial`` is the closed loop of one (Table 2's setting).
LOADS: dict[str, tuple[str, float | None]] = {
    "low": ("poisson", None), "high": ("poisson", 0.8), "serial": ("serial", None)}
MATRICES: dict[str, dict[str, Any]] = {
    "quick": {"seeds": 1, "loads": ("low",), "workflows": 24},
    "full": {"seeds": 5, "loads": ("low", "high"), "workflows": 48,
             #: the closed loop once per workload and profile: Table 2's setting, C2 beside C1
             "once": ("serial",)}}
#: Per-cell options of the full matrix: every arm, on the full mode's four engines.
FULL_CELL: dict[str, Any] = {"engines": 4}


def profiles_of(workload: str) -> tuple[str, ...]:
    """The recurrence profiles a workload runs under: ``data``, and ``paper`` where it sets a
    knob (the ``window`` profile runs through ``bench arms --profile window``)."""
    return tuple(p for p in RECURRENCE_PROFILES if p == "data" or workload in PROFILES[p])


def cells(matrix: str) -> list[tuple[str, str, str]]:
    """(workload, load, profile) of every run in a matrix."""
    spec = MATRICES[matrix]
    loads = (*spec["loads"], *spec.get("once", ()))
    return [(w, load, profile) for w in WORKLOADS for load in loads for profile in profiles_of(w)]


def run_cell(workload: str, load: str, profile: str, matrix: str) -> dict[str, Any]:
    """One ``bench arms`` run, its own table captured (the report prints the summary)."""
    from loadgen.arm_set import ALL_ARMS
    from loadgen.bench.arms import run

    spec = MATRICES[matrix]
    serial = load in spec.get("once", ())
    options: dict[str, Any] = {"workflows": spec["workflows"], "profile": profile,
                               "seeds": 1 if serial else spec["seeds"]}
    if matrix == "full":
        options.update(FULL_CELL, arms=ALL_ARMS)
    with contextlib.redirect_stdout(io.StringIO()):
        arrival, rate = LOADS[load]
        return run(matrix == "quick", workload, seed=0, arrival=arrival, rate=rate, **options)


def run_matrix(matrix: str, out: Path) -> dict[str, Any]:
    """Run every cell with a progress bar; write report.json, the plots and summary.md."""
    todo = cells(matrix)
    results, failures = [], []
    started = time.monotonic()
    with Progress() as progress:
        task = progress.add_task(f"report ({matrix})", total=len(todo))
        for workload, load, profile in todo:
            progress.update(task, description=f"{workload} {load} ({profile})")
            try:
                result = run_cell(workload, load, profile, matrix)
            except Exception as exc:  # a failed cell is reported, never averaged in
                failures.append({"workload": workload, "load": load, "profile": profile,
                                 "error": f"{type(exc).__name__}: {exc}"})
            else:
                result["load"] = load
                results.append(result)
                if not result.get("ok", True):  # failed or stalled workflows: listed too
                    failures.append({"workload": workload, "load": load, "profile": profile,
                                     "error": f"{result['failed']} failed workflow(s), left "
                                              f"out of every mean (stalls: "
                                              f"{sum(result.get('stalls', {}).values())})"})
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
            progress.update(task, description="LADS: every delivery policy and baseline")
            lads = run_lads(failures)
            if lads is not None:
                sweeps["lads"] = lads
                extra.append(figure_lads(lads["results"], out / "fig_lads.png",
                                         "LADS delivery vs FIFO, Size-first, Cache-first, "
                                         "Tail-aware, the TTL baselines, KV offloading and the "
                                         "no-eviction bound (SIMULATED engines, virtual time)"))
    return write_report(matrix, results, failures, out, time.monotonic() - started, extra,
                        sweeps)


def _timeline(out: Path, failures: list[dict[str, Any]]) -> list[Path]:
    """The Gantt of one Routing workflow under floor and full (a failure is reported)."""
    from loadgen.timeline import routing_timeline

    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    try:
        return [asyncio.run(routing_timeline(out / "timeline_routing.png"))]
    except Exception as exc:
        failures.append({"workload": "routing", "load": "timeline", "profile": "data",
                         "error": f"{type(exc).__name__}: {exc}"})
        return []


#: The full matrix's sweeps: Figure 14 (Routing across λ) and Figure 10 (exact-replay rate).
LAMBDAS = (0.12, 0.3, 0.5, 0.8)
#: The λ sweep's arms: the floor, every fixed fan-out but top 3 (their lower envelope is what
#: each arm's regret is measured against; ``loadgen.envelope``) and priced admission.
SWEEP_ARMS = ("floor", "c1", "fixed1", "fixed", "always", "full")
REPLAY_RATES = (0.22, 0.5, 0.77)
SWEEP_WORKLOAD = "react"
#: The sweeps' titles in the summary.
SWEEP_TITLES = {"routing_by_lambda": "Routing across λ (req/s)",
                f"{SWEEP_WORKLOAD}_by_replay_rate": "ReAct across the exact-replay rate"}


def run_sweeps(progress: Progress, failures: list[dict[str, Any]]
               ) -> tuple[list[tuple[float, dict[str, Any]]], list[tuple[float, dict[str, Any]]]]:
    """Routing under ``SWEEP_ARMS`` at each λ, and ReAct under floor/full at each replay rate."""
    from loadgen.bench.arms import run

    by_rate, sweep = [], []
    task = progress.add_task("sweeps", total=len(LAMBDAS) + len(REPLAY_RATES))
    for lam in LAMBDAS:
        progress.update(task, description=f"routing at λ={lam}")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                by_rate.append((lam, run(True, "routing", rate=lam, arms=SWEEP_ARMS,
                                         workflows=48, seeds=2, **FULL_CELL)))
            except Exception as exc:
                failures.append({"workload": "routing", "load": f"λ={lam}", "profile": "data",
                                 "error": f"{type(exc).__name__}: {exc}"})
        progress.advance(task)
    for replay in REPLAY_RATES:
        progress.update(task, description=f"{SWEEP_WORKLOAD} at replay rate {replay}")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                sweep.append((replay, run(True, SWEEP_WORKLOAD, arms=("floor", "full"),
                                          replay_rate=replay, workflows=48, seeds=2,
                                          **FULL_CELL)))
            except Exception as exc:
                failures.append({"workload": SWEEP_WORKLOAD, "load": f"replay={replay}",
                                 "profile": "data", "error": f"{type(exc).__name__}: {exc}"})
        progress.advance(task)
    return by_rate, sweep


def run_lads(failures: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``bench lads`` in full (its table captured); None, with the failure listed, if it fails."""
    from loadgen.bench.lads import run

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return run(False)
    except Exception as exc:
        failures.append({"workload": "lads", "load": "bursts", "profile": "data",
                         "error": f"{type(exc).__name__}: {exc}"})
        return None


def lads_section(lads: dict[str, Any]) -> str:
    """The LADS table of the summary: each arm's latency against FIFO and its share of the
    no-eviction bound's saving, per workload and preset."""
    arms = [a for a in LADS_ARMS if a != "fifo"]
    lines = ["", "## LADS delivery (`dynbranch bench lads`, SIMULATED engines, virtual time)", "",
             "Mean complete-workflow latency as a ratio to FIFO (per matched seed, mean over "
             "seeds) / share of the no-eviction bound's saving.", "",
             "| workload / preset | FIFO mean | " + " | ".join(arms) + " |",
             "|---|---|" + "---|" * len(arms)]
    for block in lads["results"]:
        p = block["policies"]
        cells = [f"{p[a]['ratio_to_fifo']:.3f} / {p[a]['bound_share']:.0%}" if a in p else "—"
                 for a in arms]
        lines.append(f"| {block['workload']} / {block['preset']} ({len(block['seeds'])} seeds) "
                     f"| {p['fifo']['mean_s']:.1f} s | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(matrix: str, results: list[dict[str, Any]], failures: list[dict[str, Any]],
                 out: Path, wall_s: float, extra: list[Path] | None = None,
                 sweeps: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the JSON, the plots and the Markdown summary under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    ok = [r for r in results if "arms" in r]
    label = _label(ok)
    plots = []
    if ok:
        shown = [_plotted(r) for r in ok]  # a paper-profile cell is its own group
        plots.append(figure8(shown, out / "fig8_latency_vs_floor.png",
                             f"Mean latency / floor, 95% CI ({label})"))
        plots.append(figure9(shown, out / "fig9_fanout_cost.png",
                             f"Fan-out and speculative engine-seconds vs latency ({label})"))
    plots += extra or []
    summary = summary_markdown(ok, matrix=matrix, plots=plots) + _coverage_section(ok)
    points = {name: [(x, r) for x, r in found if "arms" in r]
              for name, found in (sweeps or {}).items() if name != "lads"}
    worst = {name: worst_regret(found) for name, found in points.items()}
    for name, found in points.items():
        if found and any(a.get("envelope_regret") for _, r in found for a in r["arms"].values()):
            summary += "\n".join(envelope_section(SWEEP_TITLES.get(name, name), found,
                                                   worst[name])) + "\n"
    if sweeps and sweeps.get("lads"):
        summary += lads_section(sweeps["lads"])
    if failures:
        summary += "\n## Failed cells (left out)\n\n" + "\n".join(
            f"- {f['workload']} {f['load']} ({f.get('profile', 'data')}): {f['error']}"
            for f in failures)
    (out / "summary.md").write_text(summary)
    report = {"matrix": matrix, "wall_s": round(wall_s, 1), "results": results,
              "failures": failures, "plots": [p.name for p in plots],
              "sweeps": {name: [{"x": x, "result": r} for x, r in points]
                         for name, points in (sweeps or {}).items() if name != "lads"},
              "lads": (sweeps or {}).get("lads"),
              "worst_envelope_regret": {name: w for name, w in worst.items() if w}}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def _plotted(result: dict[str, Any]) -> dict[str, Any]:
    """The result as the plots group it: ``react·paper`` beside ``react``."""
    if result.get("profile", "data") == "data":
        return result
    return {**result, "workload": f"{result['workload']}·{result['profile']}"}


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
    clock = ("virtual clock" if r.get("clock") == "virtual"
             else f"live, time scale {r.get('time_scale')}")
    return f"{r.get('engines')} × {r.get('preset')}, {kind} engine, {clock}"


def print_summary(report: dict[str, Any], out: Path) -> None:
    """The summary table on stdout, then where the report is."""
    print(f"{'workload':<9} {'load':<6} {'profile':<7} {'seeds':>5}  " + "  ".join(
        f"{a:>7}" for a in arm_order(report["results"])) + f"  {'oracle':>7}  stalls")
    for r in report["results"]:
        if "arms" not in r:
            continue
        ratios = "  ".join(f"{r['arms'][a]['ratio_to_floor']:>7.3f}" if a in r["arms"]
                           else f"{'-':>7}" for a in arm_order(report["results"]))
        oracle = r.get("oracle", {}).get("full_over_floor")
        print(f"{r['workload']:<9} {r['load']:<6} {r.get('profile', 'data'):<7} "
              f"{len(r.get('seeds', [0])):>5}  {ratios}  "
              f"{oracle if oracle is not None else '-':>7}  "
              f"{sum(r.get('stalls', {}).values())}")
    print(f"(mean latency / floor; oracle: the oracle bound's full/floor; "
          f"{_label([r for r in report['results'] if 'arms' in r])}; "
          f"{len(report['failures'])} failed cells; {report['wall_s']} s)")
    for name, worst in report.get("worst_envelope_regret", {}).items():
        print(f"worst envelope regret over {SWEEP_TITLES.get(name, name)}: " + "; ".join(
            f"{arm} {regret_text(w)} at {w['x']:g}" for arm, w in worst.items()))
    print(f"report: {out / 'summary.md'} (plots and report.json beside it)")


def main(argv: list[str] | None = None) -> int:
    """``dynbranch report [--full] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="dynbranch report", description=(
        "Run the experiment matrix (workloads × arms × loads × seeds) on the simulated engine "
        "and write the report: JSON, plots and a Markdown summary."))
    parser.add_argument("--full", action="store_true",
                        help="48 workflows x 5 seeds per cell at low and high load, a serial "
                             "loop, every arm, both recurrence profiles, the λ and "
                             "replay-rate sweeps, and the LADS bench in full (default: the "
                             "quick matrix, 24 workflows)")
    parser.add_argument("--out", default=".dynbranch/report", help="report folder")
    args = parser.parse_args(argv)
    out = Path(args.out)
    report = run_matrix("full" if args.full else "quick", out)
    print_summary(report, out)
    return 1 if report["failures"] else 0


__all__ = ["cells", "main", "run_matrix", "write_report"]
