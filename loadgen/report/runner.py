"""``dynbranch report``: run a matrix of workloads × loads × recurrence profiles through the
arms, write the report (JSON, PNG plots, a Markdown summary) and print where it is.

Every cell is one ``dynbranch bench arms`` run on the virtual mesh (simulated engine time plus a
modelled cost per hop; the mesh's own CPU is in no latency, so the same command gives the same
ratios): all of its arms on the same schedules, its seeds merged into one paired sample. Loads are
the levels the engines feel (``loadgen.arms.load_levels``): ``idle`` (the workload's low-load rate),
``busy`` and ``saturated`` (the rates at which the floor's mean latency is 1.7x and 2.3x its idle
value, calibrated once per workload and cached), plus the serial closed loop. The quick matrix
(the default) is the four workloads at idle on both recurrence profiles (``data``: as the data
sets give it; ``paper``: the paper's, where it differs: Routing and ReAct), with the workflows
and seeds per cell of ``matrix.MATRICES`` (``--help`` formats them). ``--full`` is more
workflows and seeds per cell (more at high rates), every arm, at idle, busy and saturated plus
one serial closed loop per workload, on both profiles; the C3 study
(``loadgen.report.c3``: Routing and ReAct across λ 0.8–16/s under C1 alone, top 1, top 2, every
candidate, the static rule and priced admission, with CIs, the envelope, fills and the decision
record; the phased trace, ``loadgen.report.phased``; and issue 37's acceptance checks); the
replay-rate sweep; and ``dynbranch bench lads`` in full (every delivery policy, the TTL baselines
and sweep, KV offloading and the no-eviction bound: ``fig_lads.png`` and a table). ``--only c3``
runs the C3 study alone: its sweeps, Routing and ReAct at every load level, Sub-Agent and HCI at
idle, and the phased trace. A failed cell is listed in the report and left out of the plots.
The data set files the cells read are checked first (``loadgen.data_needs``; ``--data-dir`` or
``DYNBRANCH_DATA_DIR`` names their folder): one absent ends the run before any cell, with one line
naming it and no report. The progress bar moves per arm and seed (``loadgen.report.progress``);
``summary.md`` and ``report.json`` record the commit, the date and every cell's clock, profile,
seeds and workflows. ``summary.md`` ends with "On a real engine": the latest workflow-level
fidelity run and GPU check, read from their results files (``loadgen.report.real_engine``), never
run by the report.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.arms.envelope import regret_text, worst_regret
from loadgen.bench.arms import planned_units
from loadgen.data_needs import prepare, report_files
from loadgen.report import c3
from loadgen.report.arguments import DESCRIPTION, add_arguments
from loadgen.report.matrix import (
    C3_IDLE_ONLY,
    C3_LEVELS,
    FULL_CELL,
    LOADS,
    MATRICES,
    REPLAY_CELL,
    REPLAY_RATES,
    SWEEP_WORKLOAD,
    cell_options,
)
from loadgen.report.numbers import fixed, percent
from loadgen.report.phased import table as phased_table
from loadgen.report.plots import (
    LADS_ARMS,
    arm_order,
    engine_label,
    figure8,
    figure9,
    figure10,
    figure14,
    figure_lads,
    figure_sweep,
)
from loadgen.report.progress import ReportProgress, progress_bar
from loadgen.report.provenance import commit, utc_now
from loadgen.report.real_engine import section as real_engine_section
from loadgen.report.summary import (
    PAPER,
    cell_record,
    clock_name,
    envelope_section,
    head,
    seed_ids,
    seeds_text,
    summary_markdown,
)
from loadgen.workloads import WORKLOADS as WORKLOAD_CLASSES
from loadgen.workloads.profiles import DEFAULT_PROFILE, PROFILES, RECURRENCE_PROFILES
from services.corpus.loaders import DATA_DIR_ENV, DataUnavailable

WORKLOADS = tuple(WORKLOAD_CLASSES)


def profiles_of(workload: str) -> tuple[str, ...]:
    """The recurrence profiles a workload runs under: ``data``, and ``paper`` where it sets a
    knob (the ``window`` profile runs through ``bench arms --profile window``)."""
    return tuple(p for p in RECURRENCE_PROFILES
                 if p == DEFAULT_PROFILE or workload in PROFILES[p].options)


def cells(matrix: str) -> list[tuple[str, str, str]]:
    """(workload, load, profile) of every run in a matrix."""
    spec = MATRICES[matrix]
    loads = (*spec["loads"], *spec.get("once", ()))
    return [(w, load, profile) for w in WORKLOADS for load in loads for profile in profiles_of(w)]


def run_cell(workload: str, load: str, profile: str, matrix: str,
             progress: Callable[[str, bool], None] | None = None) -> dict[str, Any]:
    """One ``bench arms`` run, its own table captured (the report prints the summary),
    ``progress`` told of each of its units (``cell_units`` counts them)."""
    from loadgen.bench.arms import run

    with contextlib.redirect_stdout(io.StringIO()):
        return run(MATRICES[matrix]["quick"], workload, progress=progress,
                   **cell_options(load, profile, matrix))


def cell_units(workload: str, load: str, profile: str, matrix: str) -> int:
    """The units (seed × arm, and a warm arm's training) of one matrix cell."""
    return planned_units(MATRICES[matrix]["quick"], workload,
                         **cell_options(load, profile, matrix))


def planned_total(matrix: str) -> int:
    """Every unit ``run_matrix`` reports: its cells', the timeline, and with ``full`` the C3
    study's, the replay sweep's and the LADS bench."""
    total = sum(cell_units(*cell, matrix) for cell in cells(matrix)) + 1
    if not MATRICES[matrix]["quick"]:
        total += c3_units(c3_cells(levels=False)) + replay_units() + 1
    return total


def run_matrix(matrix: str, out: Path) -> dict[str, Any]:
    """Run every cell with a progress bar; write report.json, the plots and summary.md."""
    results: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    started, date = time.monotonic(), utc_now()
    with progress_bar() as bar:
        track = ReportProgress(bar, f"report ({matrix})", planned_total(matrix))
        for workload, load, profile in cells(matrix):
            with track.cell(f"{workload} {load} ({profile})",
                            cell_units(workload, load, profile, matrix)) as hook:
                result = _attempt(failures, workload, load,
                                  lambda w=workload, lo=load, p=profile, h=hook:
                                  run_cell(w, lo, p, matrix, h), profile)
            if result is not None:
                result["load"] = load
                results.append(result)
        with track.step("timeline of one Routing workflow"):
            extra = _timeline(out, failures)
        sweeps: dict[str, Any] = {}
        c3: dict[str, Any] | None = None
        if not MATRICES[matrix]["quick"]:
            c3 = run_c3(track, failures, c3_cells(levels=False))
            c3.update(c3_from_matrix(results))
            sweep = run_replay_sweep(track, failures)
            sweeps = {f"{SWEEP_WORKLOAD}_by_replay_rate": sweep}
            label = _label(results)
            extra += c3_figures(c3, out, label)
            if sweep:
                extra.append(figure10(sweep, out / "fig10_replay_rate.png",
                                      f"{SWEEP_WORKLOAD}: speedup vs exact-replay rate "
                                      f"({label})"))
            with track.step("LADS: every delivery policy and baseline"):
                lads = run_lads(failures)
            if lads is not None:
                sweeps["lads"] = lads
                extra.append(figure_lads(lads["results"], out / "fig_lads.png",
                                         "LADS delivery vs FIFO, Size-first, Cache-first, "
                                         "Tail-aware, the TTL baselines, KV offloading and the "
                                         "no-eviction bound (SIMULATED engines, virtual time)"))
    return write_report(matrix, results, failures, out, time.monotonic() - started, extra,
                        sweeps, c3, date=date)


def run_c3_only(out: Path) -> dict[str, Any]:
    """``--only c3``: the C3 study alone (``run_c3`` with every level), then the report."""
    failures: list[dict[str, Any]] = []
    started, date = time.monotonic(), utc_now()
    todo = c3_cells(levels=True)
    with progress_bar() as bar:
        c3 = run_c3(ReportProgress(bar, "C3", c3_units(todo)), failures, todo)
    extra = c3_figures(c3, out, _label([r for cells in c3["sweeps"].values()
                                        for _, r in cells]))
    return write_report("c3", [], failures, out, time.monotonic() - started, extra, {}, c3,
                        date=date)


def _timeline(out: Path, failures: list[dict[str, Any]]) -> list[Path]:
    """The Gantt of one Routing workflow under floor and full (a failure is reported)."""
    from loadgen.report.timeline import routing_timeline

    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    try:
        return [asyncio.run(routing_timeline(out / "timeline_routing.png"))]
    except Exception as exc:
        failures.append({"workload": "routing", "load": "timeline", "profile": DEFAULT_PROFILE,
                         "error": f"{type(exc).__name__}: {exc}"})
        return []


#: The sweeps' titles in the summary.
SWEEP_TITLES = {f"{SWEEP_WORKLOAD}_by_replay_rate": "ReAct across the exact-replay rate",
                **{f"{w}_by_lambda": f"{w.capitalize()} across λ (workflows/s)"
                   for w in c3.SWEEP_WORKLOADS}}


def _attempt(failures: list[dict[str, Any]], workload: str, load: str,
             fn: Callable[[], dict[str, Any]], profile: str = DEFAULT_PROFILE
             ) -> dict[str, Any] | None:
    """``fn()`` (one cell), or None with the failure listed; a cell with failed or stalled
    workflows is returned and listed too (they are left out of every mean)."""
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - a failed cell is reported, never averaged in
        failures.append({"workload": workload, "load": load, "profile": profile,
                         "error": f"{type(exc).__name__}: {exc}"})
        return None
    if not result.get("ok", True):
        failures.append({"workload": workload, "load": load, "profile": profile,
                         "error": f"{result.get('failed', 0)} failed workflow(s), left out of "
                                  f"every mean (stalls: "
                                  f"{sum(result.get('stalls', {}).values())})"})
    return result


#: One cell of the C3 study: workload, label, and ``c3.run_cell``'s rate or load level.
C3Cell = tuple[str, str, dict[str, Any]]


def c3_cells(*, levels: bool) -> list[C3Cell]:
    """The C3 study's cells: Routing and ReAct across λ, and with ``levels`` at every load
    level and Sub-Agent and HCI at idle."""
    todo = [(w, f"{x:g}/s", dict(rate=x)) for w in c3.SWEEP_WORKLOADS for x in c3.SWEEP_RATES]
    if levels:
        todo += [(w, level, dict(load=level)) for w in c3.SWEEP_WORKLOADS for level in C3_LEVELS]
        todo += [(w, "idle", dict(load="idle")) for w in C3_IDLE_ONLY]
    return todo


def c3_units(todo: list[C3Cell]) -> int:
    """The units of the C3 study's cells, and one for the phased trace."""
    return sum(planned_units(False, w, **c3.cell_options(**how)) for w, _, how in todo) + 1


def run_c3(track: ReportProgress, failures: list[dict[str, Any]], todo: list[C3Cell]
           ) -> dict[str, Any]:
    """The C3 study (``loadgen.report.c3``) on ``todo`` (``c3_cells``), then the phased trace
    (``loadgen.report.phased``)."""
    from loadgen.report import phased

    found: dict[str, Any] = {"sweeps": {}, "levels": {}, "idle": {}}
    for workload, label, how in todo:
        with track.cell(f"C3: {workload} at {label}",
                        planned_units(False, workload, **c3.cell_options(**how))) as hook:
            result = _attempt(failures, workload, label,
                              lambda w=workload, h=how, p=hook: c3.run_cell(w, **h, progress=p))
        if result is not None:
            if "rate" in how:
                found["sweeps"].setdefault(workload, []).append((how["rate"], result))
            elif workload in C3_IDLE_ONLY:
                found["idle"][workload] = result
            else:
                found["levels"].setdefault(workload, {})[label] = result
    with track.step("C3: the phased trace"):
        found["phased"] = _attempt(failures, "routing", "phased", lambda: phased.run(False))
    return found


def c3_from_matrix(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The full matrix's data-profile cells by load level, as the C3 acceptance reads them."""
    levels: dict[str, dict[str, Any]] = {}
    idle: dict[str, Any] = {}
    for r in results:
        if ("arms" not in r or r.get("profile", DEFAULT_PROFILE) != DEFAULT_PROFILE
                or r.get("load") == "serial"):
            continue
        if r["workload"] in c3.SWEEP_WORKLOADS:
            levels.setdefault(r["workload"], {})[r["load"]] = r
        elif r.get("load") == "idle":
            idle[r["workload"]] = r
    return {"levels": levels, "idle": idle}


def c3_figures(found: dict[str, Any], out: Path, label: str) -> list[Path]:
    """Fig. 14's shape per swept workload: full/floor against λ per arm with CIs and the
    envelope, fills issued per workflow beside it; Routing's latency decomposition."""
    paths = []
    for workload, cells in found.get("sweeps", {}).items():
        if cells:
            paths.append(figure_sweep(cells, out / f"fig14_{workload}_sweep.png",
                                      f"{workload}: full/floor across λ ({label})"))
    routing = found.get("sweeps", {}).get("routing")
    if routing:
        paths.append(figure14(routing, out / "fig14_decomposition.png",
                              f"Routing latency across λ ({label})"))
    return paths


def replay_units() -> int:
    """The replay-rate sweep's units."""
    return sum(planned_units(True, SWEEP_WORKLOAD, replay_rate=r, **REPLAY_CELL)
               for r in REPLAY_RATES)


def run_replay_sweep(track: ReportProgress, failures: list[dict[str, Any]]
                     ) -> list[tuple[float, dict[str, Any]]]:
    """ReAct under floor/full at each exact-replay rate (Figure 10)."""
    from loadgen.bench.arms import run

    sweep = []
    for replay in REPLAY_RATES:
        units = planned_units(True, SWEEP_WORKLOAD, replay_rate=replay, **REPLAY_CELL)
        with (track.cell(f"{SWEEP_WORKLOAD} at replay rate {replay}", units) as hook,
              contextlib.redirect_stdout(io.StringIO())):
            try:
                sweep.append((replay, run(True, SWEEP_WORKLOAD, replay_rate=replay,
                                          progress=hook, **REPLAY_CELL)))
            except Exception as exc:
                failures.append({"workload": SWEEP_WORKLOAD, "load": f"replay={replay}",
                                 "profile": DEFAULT_PROFILE,
                                 "error": f"{type(exc).__name__}: {exc}"})
    return sweep


def run_lads(failures: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``bench lads`` in full (its table captured); None, with the failure listed, if it fails."""
    from loadgen.bench.lads import run

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return run(False)
    except Exception as exc:
        failures.append({"workload": "lads", "load": "bursts", "profile": DEFAULT_PROFILE,
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
        cells = [f"{p[a]['ratio_to_fifo']:.3f} / {percent(p[a]['bound_share'])}" if a in p
                 else "—"
                 for a in arms]
        lines.append(f"| {block['workload']} / {block['preset']} ({len(block['seeds'])} seeds) "
                     f"| {p['fifo']['mean_s']:.1f} s | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(matrix: str, results: list[dict[str, Any]], failures: list[dict[str, Any]],
                 out: Path, wall_s: float, extra: list[Path] | None = None,
                 sweeps: dict[str, Any] | None = None,
                 c3_found: dict[str, Any] | None = None, *,
                 date: str | None = None) -> dict[str, Any]:
    """Write the JSON, the plots and the Markdown summary under ``out``; both record where the
    numbers came from (``run_record``; ``date``: when the run started, else now)."""
    out.mkdir(parents=True, exist_ok=True)
    ok = [r for r in results if "arms" in r]
    run = run_record(matrix, ok, sweeps, c3_found, failures, wall_s, date)
    label = _label(ok)
    plots = []
    if ok:
        shown = [_plotted(r) for r in ok]  # a paper-profile cell is its own group
        plots.append(figure8(shown, out / "fig8_latency_vs_floor.png",
                             f"Mean latency / floor, 95% CI ({label})"))
        plots.append(figure9(shown, out / "fig9_fanout_cost.png",
                             f"Fan-out and speculative engine-seconds vs latency ({label})"))
    plots += extra or []
    if ok:
        summary = (summary_markdown(ok, matrix=matrix, plots=plots, run=run)
                   + _coverage_section(ok))
    else:  # the C3 study alone (or nothing completed): its cells name engine, clock and seeds
        lines = head(matrix, run)
        if run["cells"]:
            lines += ["Every ratio is an arm's mean over the floor's on the same schedules, "
                      "paired by workflow, with 95% CIs from a two-stage bootstrap over seeds, "
                      "then workflows.", ""]
        if plots:
            lines += ["## Plots", "", *(f"![{p.stem}]({p.name})" for p in plots)]
        summary = "\n".join(lines) + "\n"
    points = {name: [(x, r) for x, r in found if "arms" in r]
              for name, found in (sweeps or {}).items() if name != "lads"}
    worst = {name: worst_regret(found) for name, found in points.items()}
    for name, found in points.items():
        if found and any(a.get("envelope_regret") for _, r in found for a in r["arms"].values()):
            summary += "\n".join(envelope_section(SWEEP_TITLES.get(name, name), found,
                                                   worst[name])) + "\n"
    study = None
    if c3_found is not None:
        study, text = c3_report(c3_found)
        summary += text
        worst.update({f"{w}_by_lambda": worst_regret(cells)
                      for w, cells in c3_found.get("sweeps", {}).items() if cells})
    if sweeps and sweeps.get("lads"):
        summary += lads_section(sweeps["lads"])
    summary += "\n" + "\n".join(real_engine_section())  # read from results files, never run
    if failures:
        summary += "\n## Failed cells (left out)\n\n" + "\n".join(
            f"- {f['workload']} {f['load']} ({f.get('profile', 'data')}): {f['error']}"
            for f in failures)
    (out / "summary.md").write_text(summary)
    report = {"matrix": matrix, "run": run, "wall_s": round(wall_s, 1), "results": results,
              "failures": failures, "plots": [p.name for p in plots],
              "sweeps": {name: [{"x": x, "result": r} for x, r in points]
                         for name, points in (sweeps or {}).items() if name != "lads"},
              "lads": (sweeps or {}).get("lads"), "c3": study,
              "worst_envelope_regret": {name: w for name, w in worst.items() if w}}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def run_record(matrix: str, results: list[dict[str, Any]], sweeps: dict[str, Any] | None,
               c3_found: dict[str, Any] | None, failures: list[dict[str, Any]], wall_s: float,
               date: str | None = None) -> dict[str, Any]:
    """Where the report's numbers came from: the commit, the date (UTC), and per ``bench arms``
    cell its clock, profile, seeds (count and ids) and workflows (``cell_record``)."""
    labelled = [(f"{r.get('load', 'idle')}", r) for r in results]
    for name, points in (sweeps or {}).items():
        if name != "lads":
            labelled += [(f"{SWEEP_TITLES.get(name, name)}: {x:g}", r) for x, r in points]
    for w, points in (c3_found or {}).get("sweeps", {}).items():
        labelled += [(f"C3 {w} λ {x:g}/s", r) for x, r in points]
    for w, by in (c3_found or {}).get("levels", {}).items():
        labelled += [(f"C3 {w} {level}", r) for level, r in by.items()]
    labelled += [(f"C3 {w} idle", r) for w, r in (c3_found or {}).get("idle", {}).items()]
    seen: set[int] = set()  # the full matrix's cells are the C3 study's levels too
    cells = []
    for label, r in labelled:
        if "arms" in r and id(r) not in seen:
            seen.add(id(r))
            cells.append(cell_record(label, r))
    return {"commit": commit(), "date": date or utc_now(), "matrix": matrix,
            "wall_s": round(wall_s, 1), "failures": len(failures), "cells": cells}


def c3_report(found: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The C3 study's JSON (its cells, decision records and acceptance) and its summary text."""
    sweeps = found.get("sweeps", {})
    levels = found.get("levels", {})
    records = [(f"{w} {x:g}/s", r["decision_record"]) for w, cells in sweeps.items()
               for x, r in cells]
    records += [(f"{w} {c3.level_label(level, r)}", r["decision_record"])
                for w, by in levels.items() for level, r in by.items()]
    checks = [check for arm in c3.PRICED for check in c3.acceptance(
        sweeps, levels, found.get("idle", {}), found.get("phased"), priced=arm)]
    lines: list[str] = []
    for w, cells in sweeps.items():
        lines += c3.sweep_section(SWEEP_TITLES.get(f"{w}_by_lambda", w), cells)
    for w, by in levels.items():
        lines += c3.sweep_section(f"{w.capitalize()} at each load level",
                                  [(r.get("rate_per_s") or 0.0, r) for r in by.values()],
                                  labels=[c3.level_label(lv, r) for lv, r in by.items()])
    if records:
        for arm in c3.PRICED:
            lines += c3.decision_section(records, arm)
    phased = found.get("phased")
    if phased:
        lines += ["", f"## The phased trace (§5.5, Fig. 15; Routing, {phased['engines']} engines, "
                  f"{len(phased['seeds'])} seeds)", "",
                  "Mean latency (simulated s) per phase and over the trace: " + ", ".join(
                      f"{p['name']} {p['rate']:g}/s × {p['workflows']}"
                      + (f" ({p['repeats']:.0%} exact repeats)" if p["repeats"] else "")
                      for p in phased["phases"]) + "; then Action 0's share of branches opened "
                  "and the break-even threshold (candidate-set mean, phase median).", "",
                  *phased_table(phased)]
    lines += c3.acceptance_section(checks)
    study = {"sweeps": {w: [{"x": x, "result": r} for x, r in cells]
                        for w, cells in sweeps.items()},
             "levels": levels,
             "decision_records": dict(records), "phased": phased, "acceptance": checks}
    if found.get("idle"):
        study["idle"] = found["idle"]
    return study, "\n".join(lines) + "\n"


def _plotted(result: dict[str, Any]) -> dict[str, Any]:
    """The result as the plots group it: ``react·paper`` beside ``react``."""
    if result.get("profile", DEFAULT_PROFILE) == DEFAULT_PROFILE:
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
    """'2 × qwen3-32b-h200, SIMULATED engine, virtual clock, 0.5 ms per hop': the first
    cell's."""
    if not results:
        return "no results"
    return f"{engine_label(results[0])}, {clock_name(results[0])}"


def print_summary(report: dict[str, Any], out: Path) -> None:
    """The summary table on stdout, then where the report is."""
    arms = arm_order(report["results"])
    print(f"{'workload':<9} {'load':<9} {'profile':<7} {'seeds (count, ids)':<18}  "
          + "  ".join(f"{a:>7}" for a in arms) + f"  {'oracle':>7}  stalls")
    for r in report["results"]:
        if "arms" not in r:
            continue
        ratios = "  ".join(f"{r['arms'][a]['ratio_to_floor']:>7.3f}" if a in r["arms"]
                           else f"{'-':>7}" for a in arms)
        oracle = r.get("oracle", {}).get("full_over_floor")
        print(f"{r['workload']:<9} {r['load']:<9} {r.get('profile', 'data'):<7} "
              f"{seeds_text(seed_ids(r)):<18}  {ratios}  "
              f"{'-' if oracle is None else fixed(oracle, 3):>7}  "
              f"{sum(r.get('stalls', {}).values())}")
    run = report["run"]
    print(f"(mean latency / floor; oracle: the oracle bound's full/floor; "
          f"{_label([r for r in report['results'] if 'arms' in r])}; "
          f"{len(report['failures'])} failed cells; {report['wall_s']} s; commit "
          f"{run['commit']}, started {run['date']})")
    for name, worst in report.get("worst_envelope_regret", {}).items():
        print(f"worst envelope regret over {SWEEP_TITLES.get(name, name)}: " + "; ".join(
            f"{arm} {regret_text(w)} at {w['x']:g}" for arm, w in worst.items()))
    for check in (report.get("c3") or {}).get("acceptance", ()):
        print(f"C3 {'met' if check['ok'] else 'NOT MET'}: {check['check']} — {check['detail']}")
    print(f"report: {out / 'summary.md'} (plots and report.json beside it)")


def main(argv: list[str] | None = None) -> int:
    """``dynbranch report [--full] [--only c3] [--out DIR] [--data-dir DIR]``."""
    parser = argparse.ArgumentParser(prog="dynbranch report", description=DESCRIPTION)
    add_arguments(parser)
    parser.add_argument("--data-dir", metavar="DIR", help=(
        f"folder of the shared data sets (default: ${DATA_DIR_ENV}, else ../shared/data "
        "beside the repository); checked before the first cell"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        prepare(report_files(args.full), args.data_dir)
    except DataUnavailable as exc:  # one line naming what is absent; no report is written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.only == "c3":
        report = run_c3_only(out)
    else:
        report = run_matrix("full" if args.full else "quick", out)
    print_summary(report, out)
    return 1 if report["failures"] else 0


__all__ = ["C3_IDLE_ONLY", "C3_LEVELS", "FULL_CELL", "LOADS", "MATRICES", "REPLAY_RATES",
           "SWEEP_WORKLOAD", "cell_units", "cells", "main", "planned_total", "run_cell",
           "run_matrix", "run_record", "write_report"]
