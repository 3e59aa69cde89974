"""The phased trace of dynbranch §5.5 (Fig. 15) on Routing: a low-load phase (A), a burst (B), a
reuse-heavy phase at the burst's rate (C) and a recovery (D).

B and C arrive at the same rate; in C most arrivals are exact repeats of earlier requests, so C1
absorbs more of the work and each fill costs less of it. Every arm replays the same phased
schedule per seed on a fresh mesh of four simulated engines on the virtual clock: the floor, C1
alone, top 1, top 2, every candidate (``always``), the paper's static rule (``load_threshold``)
and priced admission, cold (``full``) and warm (``full_warm``: from what it learned over the same
phased pattern on the train split, ``PRICED_ARMS``). Per phase: each arm's mean latency; for priced,
the share of branches whose candidate generation Action 0 opened and the break-even threshold
p* = C / (G + C) (its candidate-set mean, phase median: the paper's Fig. 15a); for the static
rule, its share opened. Over the complete trace: each arm's mean and full/floor with CIs
clustered by seed, and each priced arm against static, always and the fixed fan-outs (the
paper: 5.7% and 5.5% below static and always).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.arms.runner import TRAIN_SEED, ArmResult, run_arm, train_warm
from loadgen.arms.specs import ARM_SPECS, PRICED_ARMS, rotated
from loadgen.arms.stats import paired_bootstrap_ci, paired_difference_ci, ratio_of_means
from loadgen.arms.summary import completed_everywhere
from loadgen.meshes.config import MeshConfig
from loadgen.workloads import get_workload
from loadgen.workloads.schedule import Schedule, ScheduledWorkflow

ARMS = ("floor", "c1", "fixed1", "fixed", "always", "load_threshold", "full", "full_warm")
ENGINES = 4
#: The two priced arms (``PRICED_ARMS``): ``full`` starts each seed's trace cold; ``full_warm``
#: starts from what priced admission learned running the same phased pattern, cold, on
#: Routing's *train* split (seed ``TRAIN_SEED``; no measured request is among them): a
#: controller that has lived through such a day before, as a deployed one keeps its state
#: (``state_path``).
#: The arms priced admission is compared with.
RIVALS = ("load_threshold", "always", "fixed", "fixed1", "c1")

@dataclass(frozen=True, slots=True)
class Phase:
    """One phase: its name, Poisson rate (workflows per simulated s), arrivals, and the share of
    them that exactly repeat an earlier request of the trace."""

    name: str
    rate: float
    workflows: int
    repeats: float = 0.0


#: The paper's four phases (rates on four 32B/H200 engines: 0.8/s leaves them near idle, 8/s
#: stretches the decode step; ``load_levels``), full and quick.
PHASES = {False: (Phase("A low", 0.8, 24), Phase("B burst", 8.0, 96),
                  Phase("C reuse", 8.0, 96, repeats=0.7), Phase("D recovery", 0.8, 24)),
          True: (Phase("A low", 0.8, 6), Phase("B burst", 8.0, 32),
                 Phase("C reuse", 8.0, 32, repeats=0.7), Phase("D recovery", 0.8, 6))}
SEEDS = {False: 5, True: 1}


def phased_schedule(phases: Sequence[Phase], seed: int, split: str = "test"
                    ) -> tuple[Schedule, list[tuple[str, float, float]]]:
    """The trace's arrivals (requests of ``split``) and each phase's (name, start, end) in
    simulated seconds."""
    workload = get_workload("routing", split=split)
    rng = random.Random(seed)
    fresh = sum(p.workflows - round(p.workflows * p.repeats) for p in phases)
    instances = iter(workload.instances(fresh, rng))
    arrivals: list[ScheduledWorkflow] = []
    bounds: list[tuple[str, float, float]] = []
    t = 0.0
    for phase in phases:
        start = t
        repeats = set(rng.sample(range(phase.workflows), round(phase.workflows * phase.repeats)))
        for i in range(phase.workflows):
            wid = f"routing-phased-{seed}-{len(arrivals):04d}"
            originals = [a for a in arrivals if not a.replay_of]
            if i in repeats and originals:
                original = rng.choice(originals)
                arrivals.append(ScheduledWorkflow(wid, round(t, 6), original.instance,
                                        original.workflow_id))
            else:
                arrivals.append(ScheduledWorkflow(wid, round(t, 6), next(instances)))
            t += rng.expovariate(phase.rate)
        bounds.append((phase.name, start, t))
    return Schedule("routing", seed, "poisson-phased", 0.0, tuple(arrivals)), bounds


def _phase_of(at: float, bounds: Sequence[tuple[str, float, float]]) -> str:
    for name, start, end in bounds:
        if start <= at < end:
            return name
    return bounds[-1][0]


def _decisions(arm: ArmResult, bounds: Sequence[tuple[str, float, float]]
               ) -> dict[str, dict[str, Any]]:
    """Per phase: Action 0's answers, the share opened, and the median break-even p*."""
    out: dict[str, dict[str, Any]] = {}
    for name, _, _ in bounds:
        answers = [(o, e) for at, o, e in arm.decisions if _phase_of(at, bounds) == name]
        even = [e for _, e in answers if e is not None]
        out[name] = {"answers": len(answers), "opened": sum(o for o, _ in answers),
                     "break_even": even}
    return out


async def _train(quick: bool, folder: Path) -> tuple[MeshConfig, dict[str, Any]]:
    """The state ``full_warm`` starts from: ``train_warm`` over the phased pattern on the train
    split; and what trained it."""
    schedule, _ = phased_schedule(PHASES[quick], TRAIN_SEED, split="train")
    config, training = await train_warm(get_workload("routing", split="train"), [schedule],
                                        MeshConfig(engines=ENGINES), folder)
    return config, {**training, "pattern": "the phased trace"}


async def _seed(seed: int, quick: bool, config: MeshConfig
                ) -> tuple[list[tuple[str, float, float]], dict[str, ArmResult], Schedule]:
    schedule, bounds = phased_schedule(PHASES[quick], seed)
    workload = get_workload("routing")
    results = {spec.name: await run_arm(spec, workload, schedule, config)  # no arm always first
               for spec in rotated([ARM_SPECS[name] for name in ARMS], seed)}
    return bounds, results, schedule


async def run_phased(quick: bool, seeds: int | None = None, first_seed: int = 0
                     ) -> dict[str, Any]:
    """Run the trace under every arm for each seed; the per-phase and whole-trace figures."""
    n = seeds or SEEDS[quick]
    with tempfile.TemporaryDirectory(prefix="dynbranch-phased-") as tmp:
        config, training = await _train(quick, Path(tmp))
        seed_ids = list(range(first_seed, first_seed + n))
        per_seed = [await _seed(s, quick, config) for s in seed_ids]
    latencies: dict[str, dict[str, list[float]]] = {a: {} for a in ARMS}
    decisions: dict[str, dict[str, dict[str, Any]]] = {}
    paired: dict[str, list[float]] = {a: [] for a in ARMS}
    clusters: list[int] = []
    failed = {a: 0 for a in ARMS}
    for seed, (bounds, results, schedule) in enumerate(per_seed):
        at = {a.workflow_id: a.at_s for a in schedule.arrivals}
        ids = set(completed_everywhere(results))
        for name, arm in results.items():
            failed[name] += sum(1 for r in arm.results if r.error)
            for r in arm.results:
                if r.workflow_id in ids:
                    phase = _phase_of(at[r.workflow_id], bounds)
                    latencies[name].setdefault(phase, []).append(r.measured_s)
            by_id = {r.workflow_id: r.measured_s for r in arm.results}
            paired[name] += [by_id[i] for i in sorted(ids)]
            if arm.decisions:
                mine = decisions.setdefault(name, {})
                for phase, d in _decisions(arm, bounds).items():
                    into = mine.setdefault(phase, {"answers": 0, "opened": 0, "break_even": []})
                    into["answers"] += d["answers"]
                    into["opened"] += d["opened"]
                    into["break_even"] += d["break_even"]
        clusters += [seed] * len(ids)
    base = paired["floor"]
    phases = [p.name for p in PHASES[quick]]
    arms: dict[str, Any] = {}
    for name in ARMS:
        ci = paired_bootstrap_ci(paired[name], base, clusters=clusters)
        arms[name] = {
            "mean_s": round(statistics.fmean(paired[name]), 3) if paired[name] else None,
            "ratio_to_floor": _round(ratio_of_means(paired[name], base)),
            "ratio_ci95": [round(x, 3) for x in ci] if ci else None,
            "failed": failed[name],
            "phases": {p: round(statistics.fmean(v), 3) if (v := latencies[name].get(p))
                       else None for p in phases}}
        if name in decisions:
            arms[name]["decisions"] = {
                p: {"answers": d["answers"],
                    "opened_share": round(d["opened"] / d["answers"], 3) if d["answers"]
                    else None,
                    "break_even_median": round(statistics.median(d["break_even"]), 3)
                    if d["break_even"] else None}
                for p, d in decisions[name].items()}
    versus: dict[str, dict[str, Any]] = {}
    for priced in PRICED_ARMS:
        mine = versus[priced] = {}
        for other in RIVALS:
            d = paired_difference_ci(paired[priced], paired[other], base, clusters=clusters)
            if d is not None and arms[other]["mean_s"]:
                mine[other] = {"diff": round(d[0], 4), "low": round(d[1], 4),
                               "high": round(d[2], 4),
                               "relative": round(arms[priced]["mean_s"] / arms[other]["mean_s"]
                                                 - 1, 4)}
    # the lowest mean with each priced arm beside the rivals (not beside the other priced arm)
    lowest = {priced: min((a for a in ARMS if a not in PRICED_ARMS or a == priced
                           if arms[a]["mean_s"] is not None), key=lambda a: arms[a]["mean_s"])
              for priced in PRICED_ARMS}
    return {"phases": [{"name": p.name, "rate": p.rate, "workflows": p.workflows,
                        "repeats": p.repeats} for p in PHASES[quick]],
            "seeds": seed_ids, "engines": ENGINES, "arms": arms,
            "warm_training": training, "priced_vs": versus["full"], "lowest_mean": lowest["full"],
            "priced_vs_by_arm": versus, "lowest_by_arm": lowest,
            "ok": not any(failed.values()), "simulated": True, "clock": "virtual"}


def _round(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


def run(quick: bool, seeds: int | None = None, first_seed: int = 0) -> dict[str, Any]:
    """``run_phased`` on a fresh event loop."""
    return asyncio.run(run_phased(quick, seeds, first_seed))


def table(result: dict[str, Any]) -> list[str]:
    """Markdown: per arm the mean latency per phase and over the trace, and full/floor; then
    Action 0's share opened and the break-even threshold per phase."""
    phases = [p["name"] for p in result["phases"]]
    lines = ["| arm | " + " | ".join(phases) + " | trace mean | full/floor [95% CI] |",
             "|---|" + "---|" * (len(phases) + 2)]
    for name, a in result["arms"].items():
        ci = a["ratio_ci95"]
        lines.append(f"| {name} | " + " | ".join(
            "—" if a["phases"][p] is None else f"{a['phases'][p]:.2f}" for p in phases)
            + f" | {a['mean_s']:.3f} | {a['ratio_to_floor']:.3f}"
            + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + " |")
    for name, a in result["arms"].items():
        if "decisions" not in a:
            continue
        d = a["decisions"]
        lines.append(f"| {name}: share opened | " + " | ".join(
            "—" if d.get(p, {}).get("opened_share") is None else f"{d[p]['opened_share']:.0%}"
            for p in phases) + " | | |")
        if any(d.get(p, {}).get("break_even_median") is not None for p in phases):
            lines.append(f"| {name}: break-even p* | " + " | ".join(
                "—" if d.get(p, {}).get("break_even_median") is None
                else f"{d[p]['break_even_median']:.3f}" for p in phases) + " | | |")
    return lines


__all__ = ["ARMS", "PHASES", "Phase", "phased_schedule", "run", "run_phased", "table"]
