"""C3 from idle to saturation (issue 37): the λ sweep of every fixed fan-out, the static rule and
priced admission on Routing and ReAct, the load levels, and what the report says about them.

The sweep (the paper's Fig. 14 shape, with the fixed fan-outs beside priced): per workload and
rate, one ``bench arms`` cell on four engines of the virtual mesh with ``SWEEP_SEEDS`` seeds, 48
workflows per seed and more at high rates (``load_levels.workflows_at``), under the floor, C1
alone (K = 0), top 1, top 2, every candidate, the paper's static rule and priced admission. Each
cell gives full/floor with its CI, the envelope (the best fixed K there) and each arm's regret
against it, fills issued and discarded per workflow, and the decision record
(``loadgen.report.decision_record``). ``acceptance`` checks issue 37's criteria on those cells.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loadgen.arms.envelope import regret_text, worst_regret
from loadgen.arms.specs import ARM_SPECS, PRICED_ARMS
from loadgen.report.decision_record import merge_accounts
from loadgen.report.numbers import percent, signed

SWEEP_WORKLOADS = ("routing", "react")
SWEEP_RATES = (0.8, 2.0, 4.0, 8.0, 16.0)
#: The arms of a sweep cell (the floor is always added): every fixed fan-out but top 3, the
#: paper's static rule, priced admission cold and warm (``PRICED``).
SWEEP_ARMS = ("c1", "fixed1", "fixed", "always", "load_threshold", "full", "full_warm")
#: Priced admission as the study judges it, and how its checks name it: ``full_warm`` starts
#: from what the controller learned on the workload's train split at the same rate (or over the
#: same phased pattern), as a deployed controller keeps its state (``state_path``): the steady
#: state; ``full`` starts each seed cold, so a cell of 48 workflows measures mostly its learning.
PRICED = {arm: "priced (warm)" if ARM_SPECS[arm].warm else "priced (cold start)"
          for arm in PRICED_ARMS}
SWEEP_SEEDS = 5
SWEEP_ENGINES = 4


def cell_options(rate: float | None = None, *, load: str | None = None,
                 seeds: int = SWEEP_SEEDS, arms: Sequence[str] = SWEEP_ARMS) -> dict[str, Any]:
    """The keyword arguments of ``bench arms``'s ``run`` (full mode) for one sweep cell."""
    return {"rate": rate, "load": load, "arms": tuple(arms), "seeds": seeds,
            "engines": SWEEP_ENGINES}


def run_cell(workload: str, rate: float | None = None, *, load: str | None = None,
             seeds: int = SWEEP_SEEDS, arms: Sequence[str] = SWEEP_ARMS,
             progress: Callable[[str, bool], None] | None = None) -> dict[str, Any]:
    """One sweep cell: ``bench arms`` (full mode, four engines, or at a load level the most of
    them the data set can load to it: ``load_levels.level_mesh``) at ``rate`` or a load level,
    its table captured (the report prints the summary), ``progress`` told of each unit."""
    from loadgen.bench.arms import run

    with contextlib.redirect_stdout(io.StringIO()):
        return run(False, workload, progress=progress,
                   **cell_options(rate, load=load, seeds=seeds, arms=arms))


# -- the report's tables -------------------------------------------------------------------------

def level_label(level: str, result: Mapping[str, Any]) -> str:
    """A load-level cell's label: its rate, the floor's calibrated stretch, and its engines
    where the data set could not load the study's to the level (``load_levels.level_mesh``)."""
    found = result.get("load_level") or {}
    parts = [f"{result.get('rate_per_s') or 0.0:.3g}/s"]
    if found.get("idle_floor_s") is not None:
        parts.append(f"floor {found['floor_ratio']:g}x")
    if found.get("engines") not in (None, found.get("engines_asked")):
        parts.append(f"{found['engines']} engine" + "s" * (found["engines"] != 1))
    return f"{level} ({', '.join(parts)})"


def _ratio(arm: Mapping[str, Any] | None) -> str:
    if not arm or arm.get("ratio_to_floor") is None:
        return "—"
    ci = arm.get("ratio_ci95")
    return f"{arm['ratio_to_floor']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def sweep_section(title: str, cells: Sequence[tuple[float, Mapping[str, Any]]],
                  labels: Sequence[str] | None = None) -> list[str]:
    """Markdown: full/floor [95% CI] per arm and cell (a rate, or ``labels``), the envelope,
    fills issued / discarded per workflow, each arm's envelope regret and its worst case."""
    if not cells:
        return []
    arms = [a for a in cells[0][1]["arms"] if a != "floor"]
    names = list(labels) if labels is not None else [f"{x:g}/s" for x, _ in cells]
    head = " | ".join(names)
    engines = {r.get("engines") for _, r in cells}
    short = [name.split(" (")[0] for name in names]  # a level's label less its figures
    lines = ["", f"## {title}: full/floor", "",
             (f"{engines.pop()} engines" if len(engines) == 1 else "engines " + ", ".join(
                 f"{r.get('engines')} at {name}" for name, (_, r) in zip(short, cells,
                                                                        strict=True)))
             + f", {len(cells[0][1].get('seeds', []))} seeds "
             "per cell; workflows per seed: " + ", ".join(
                 f"{r.get('workflows')} at {name}" for name, (_, r) in zip(short, cells,
                                                                          strict=True))
             + ". Floor mean latency (s): " + ", ".join(
                 f"{r['arms']['floor']['mean_s']:.1f}" for _, r in cells) + ".", "",
             f"| arm | {head} |", "|---|" + "---|" * len(cells)]
    for arm in arms:
        lines.append(f"| {arm} | " + " | ".join(_ratio(r["arms"].get(arm)) for _, r in cells)
                     + " |")
    lines.append("| envelope (best fixed K) | " + " | ".join(
        f"{b['arm']} {b['ratio_to_floor']:.3f}" if (b := r.get("best_fixed_k")) else "—"
        for _, r in cells) + " |")
    lines += ["", "Fills issued / discarded per workflow:", "", f"| arm | {head} |",
              "|---|" + "---|" * len(cells)]
    for arm in arms:
        lines.append(f"| {arm} | " + " | ".join(
            f"{a['fills_issued']:.2f} / {a['fills_discarded']:.2f}"
            if (a := r["arms"].get(arm)) else "—" for _, r in cells) + " |")
    worst = worst_regret(cells)
    at = dict(zip((x for x, _ in cells), names, strict=True))
    lines += ["", "Envelope regret (an arm's full/floor minus the best fixed K's there, paired "
              "95% CI clustered by seed) and its worst case over the sweep:", "",
              f"| arm | {head} | worst |", "|---|" + "---|" * (len(cells) + 1)]
    for arm in arms:
        w = worst.get(arm)
        lines.append(f"| {arm} | " + " | ".join(
            regret_text(r["arms"].get(arm, {}).get("envelope_regret")) or "—"
            for _, r in cells) + " | " + (f"{regret_text(w)} at {at[w['x']]}" if w else "—")
            + " |")
    return lines


def decision_section(rows: Sequence[tuple[str, Mapping[str, Any]]], arm: str = "full"
                     ) -> list[str]:
    """Markdown: the decision record of priced admission (``arm``) per cell
    (``decision_record``)."""
    lines = ["", f"## Why {PRICED.get(arm, arm)} did what it did (decision record)", "",
             "Per cell: Action 0's answers by rule (cold, cold_bounded, priced, audit, refused), "
             "Action 1's candidates left out by cause, candidates admitted per opened branch, the "
             "median price C against the measured marginal cost of a fill (top 2 against top 1, "
             "`marginal_fill_cost_s`), the median gain G and break-even p*, p̃ against the "
             "realised useful rate (selected and consumed) by rank over every settled branch "
             "(admitted candidates in brackets), whether p̃ is within 1.25x of it for ranks 0–2 "
             "on branches opened after 48 settled ones (their admitted candidates in brackets), "
             "as a point estimate and against the useful rate's 95% interval (a rank-2 "
             "candidate is useful a few times per cell, and its rate varies by more than 1.25x "
             "by chance; the last row pools every cell), and "
             "what the engines felt under priced (mean decode-step time, canonical sequences "
             "running, waiting, KV in use per engine).", "",
             "| cell | Action 0 | Action 1 left out | admitted / opened | C median ms | "
             "marginal fill cost ms | G median ms | p* median | p̃ / useful by rank 0, 1, 2 | "
             "within 1.25x after 48: point / 95% CI | step ms | running | waiting | KV |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, record in rows:
        full = record["arms"].get(arm, {})
        acc = full.get("account", {})
        load = full.get("engine_load", {})
        marginal = record.get("marginal_fill_cost_s")
        lines.append(
            f"| {label} | {_counts(acc.get('gate', {}))} | {_counts(acc.get('not_admitted', {}))}"
            f" | {_num(acc.get('admitted_per_opened'), 2)} | {_num(acc.get('cost_ms_median'), 0)}"
            f" | {_num(None if marginal is None else 1000 * marginal, 0)}"
            f" | {_num(acc.get('gain_ms_median'), 0)} | {_num(acc.get('break_even_median'), 3)}"
            f" | {_by_rank(acc)} | {_checks(acc)}"
            f" | {_num(load.get('step_ms'), 1)} | {_num(load.get('running'), 1)}"
            f" | {_num(load.get('waiting'), 1)} | {_pct(load.get('kv_used'))} |")
    accounts = [a for _, r in rows if (a := r["arms"].get(arm, {}).get("account"))]
    if len(accounts) > 1:
        pooled = merge_accounts(accounts)
        lines.append(f"| all cells | {_counts(pooled.get('gate', {}))} | — | "
                     f"{_num(pooled.get('admitted_per_opened'), 2)} | — | — | — | — | "
                     f"{_by_rank(pooled)} | {_checks(pooled)} | — | — | — | — |")
    return lines


def _by_rank(acc: Mapping[str, Any], key: str = "p_tilde_by_rank") -> str:
    """p̃ / useful (admitted) for ranks 0, 1, 2 of an account's ``key`` table."""
    ranks = acc.get(key, {})
    return ", ".join(f"{r['p_tilde']:.2f}/{r['useful']:.2f} ({r['admitted']})"
                     if r.get("p_tilde") is not None and r.get("useful") is not None else "—"
                     for k in ("0", "1", "2") if (r := ranks.get(k))) or "—"


def _checks(acc: Mapping[str, Any]) -> str:
    """The 1.25x checks after 48 settled branches: point / 95% CI (admitted candidates)."""
    strict = acc.get("p_tilde_by_rank_warm_strict", {})
    n = sum((strict.get(k) or {}).get("admitted") or 0 for k in ("0", "1", "2"))
    return (f"{_yes(acc.get('p_tilde_within_1_25x_warm_strict'))} / "
            f"{_yes(acc.get('p_tilde_consistent_1_25x_warm_strict'))} ({n})")


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "—"


def _num(x: float | None, digits: int) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _yes(x: bool | None) -> str:
    return {None: "—", True: "yes", False: "NO"}[x]


# -- acceptance (issue 37, item 5) ---------------------------------------------------------------

#: Most priced may trail the envelope at any load; least its worst-case regret must undercut
#: every fixed K's and the static rule's by.
WITHIN_ENVELOPE = 0.01
WORST_MARGIN = 0.02
COMPARED = ("c1", "fixed1", "fixed", "always", "load_threshold")


def _regret(result: Mapping[str, Any], arm: str) -> float | None:
    found = result.get("arms", {}).get(arm, {}).get("envelope_regret")
    return None if found is None else found["diff"]


def acceptance(sweeps: Mapping[str, Sequence[tuple[float, Mapping[str, Any]]]],
               levels: Mapping[str, Mapping[str, Mapping[str, Any]]],
               idle: Mapping[str, Mapping[str, Any]],
               phased: Mapping[str, Any] | None, priced: str = "full") -> list[dict[str, Any]]:
    """Issue 37's criteria for the ``priced`` arm on the cells that ran, each {check, ok,
    detail, arm}; a criterion whose cells did not run is reported as not met (ok False, "not
    run"). Checks of an arm other than ``full`` carry its name in brackets."""
    checks: list[dict[str, Any]] = []
    tag = "" if priced == "full" else f" [{priced}]"

    def add(check: str, ok: bool, detail: str) -> None:
        checks.append({"check": check + tag, "ok": bool(ok), "detail": detail, "arm": priced})

    for workload in SWEEP_WORKLOADS:
        cells = [(f"{x:g}/s", r) for x, r in sweeps.get(workload, ())] + [
            (level, r) for level, r in levels.get(workload, {}).items()]
        found = [(label, _regret(r, priced)) for label, r in cells]
        worst = max((d for _, d in found if d is not None), default=None)
        add(f"{workload}: priced − envelope <= +{WITHIN_ENVELOPE} at every load",
            worst is not None and worst <= WITHIN_ENVELOPE,
            "; ".join(f"{label} {signed(d)}" for label, d in found if d is not None) or "not run")
        cells_sweep = list(sweeps.get(workload, ()))
        if not cells_sweep:
            add(f"{workload}: worst-case regret {WORST_MARGIN} below every fixed K and static",
                False, "not run")
            continue
        worst_by = worst_regret(cells_sweep)
        mine = worst_by.get(priced)
        others = {a: w for a, w in worst_by.items() if a in COMPARED}
        margin_ok = mine is not None and all(mine["diff"] <= w["diff"] - WORST_MARGIN
                                             for w in others.values())
        # the paired CI at each rival's arg-max rate: priced minus that rival there
        ci_ok, parts = True, []
        for arm, w in others.items():
            cell = dict(cells_sweep)[w["x"]]
            d = cell["arms"].get(priced, {}).get("vs_baselines", {}).get(arm)
            excl = d is not None and d["high"] < 0
            ci_ok = ci_ok and (excl or w["diff"] <= 0)
            parts.append(f"{arm} worst {signed(w['diff'])} at {w['x']:g}/s"
                         + (f" (priced − {arm} there {signed(d['diff'])} [{signed(d['low'])}, "
                            f"{signed(d['high'])}])" if d else ""))
        add(f"{workload}: priced's worst-case regret at least {WORST_MARGIN} below every fixed K "
            "and the static rule's, CI at each one's arg-max excluding zero",
            margin_ok and ci_ok,
            (f"priced worst {signed(mine['diff'])} at {mine['x']:g}/s; " if mine else "")
            + "; ".join(parts))
        for level in ("busy", "saturated"):
            r = levels.get(workload, {}).get(level)
            if r is None or priced not in r.get("arms", {}):
                add(f"{workload} {level}: priced beats load_threshold, fewer fills than fixed",
                    False, "not run")
                continue
            d = r["arms"][priced].get("vs_baselines", {}).get("load_threshold")
            fills = (r["arms"][priced]["fills_issued"], r["arms"]["fixed"]["fills_issued"])
            add(f"{workload} {level}: priced beats load_threshold (CI excluding zero) and "
                "issues fewer fills than fixed",
                d is not None and d["high"] < 0 and fills[0] < fills[1],
                (f"priced − load_threshold {signed(d['diff'])} [{signed(d['low'])}, "
                 f"{signed(d['high'])}]" if d else "no comparison")
                + f"; fills/workflow {fills[0]:.2f} vs {fills[1]:.2f}")
    for workload in ("subagent", "hci"):
        r = idle.get(workload)
        d = _regret(r, priced) if r else None
        add(f"{workload} idle: priced within {WITHIN_ENVELOPE} of the envelope",
            d is not None and d <= WITHIN_ENVELOPE,
            "not run" if r is None else f"regret {signed(d)}" if d is not None else "no envelope")
    if phased is None:
        add("phased trace: priced lowest mean, below static and always", False, "not run")
    else:
        vs = phased.get("priced_vs_by_arm", {}).get(priced, {})
        lowest = phased.get("lowest_by_arm", {}).get(priced)
        add(f"phased trace ({len(phased['seeds'])} seeds): priced has the lowest mean latency, "
            "below static and always", lowest == priced
            and all(vs.get(a, {}).get("diff", 1) < 0 for a in ("load_threshold", "always")),
            f"lowest {lowest}; " + "; ".join(
                f"vs {a} {percent(v['relative'], 1, sign=True)} ({signed(v['diff'])} "
                f"[{signed(v['low'])}, {signed(v['high'])}] of the floor)" for a, v in vs.items()))
    return checks


def acceptance_section(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown: each criterion, met or not, with its figures."""
    if not checks:
        return []
    return ["", "## Issue 37 acceptance on this run", "", "| criterion | met | figures |",
            "|---|---|---|"] + [f"| {c['check']} | {'yes' if c['ok'] else 'NO'} | "
                               f"{c['detail']} |" for c in checks]


__all__ = ["PRICED", "SWEEP_ARMS", "SWEEP_ENGINES", "SWEEP_RATES", "SWEEP_SEEDS",
           "SWEEP_WORKLOADS", "acceptance", "acceptance_section", "cell_options",
           "decision_section", "level_label", "run_cell", "sweep_section"]
