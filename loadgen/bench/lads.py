"""``dynbranch bench lads``: every delivery policy on the same LADS workloads, side by side.

For each sim preset (the LADS paper's Qwen2.5-7B / RTX PRO 5000 shape, and ``qwen3-32b-h200``)
and each workload (the controlled cohort-8 burst, five input seeds; the Web-derived burst
replay, three seeds), every policy replays the same inputs in virtual time with the production
sender, lease provider and sim engine (``loadgen.lads_replay``). Per policy it reports mean and
P95 (nearest rank: the largest of 16) complete-workflow latency, the stage intervals of LADS
§2.1, protection block-seconds, grants / expiries / handoffs / promotions and controller CPU,
and each policy against FIFO as the paper computes it: the per-seed ratio (and the percentage
reduction 100·(T_fifo − T)/T_fifo) averaged equally over matched seeds, with a 95% t-interval.
A failed run is listed and left out of every average. The sim is a model of an engine.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

from loadgen.lads_replay import RunResult, run_policy
from loadgen.workloads.lads import LadsWorkload, cohort_workload, web_burst_workload
from services.delivery import POLICIES as DELIVERY_POLICIES
from services.engine_agent import get_preset, scaled_headroom

POLICIES = tuple(DELIVERY_POLICIES)
PAPER_PRESET = "qwen2.5-7b-rtxpro5000"
PRESETS = (PAPER_PRESET, "qwen3-32b-h200")
SEEDS = {"cohort": (1, 2, 3, 4, 5), "web_burst": (1, 2, 3)}
QUICK_SEEDS = {"cohort": (1,), "web_burst": (1,)}
BUILDERS = {"cohort": cohort_workload, "web_burst": web_burst_workload}
#: t quantiles (two-sided 95%) by degrees of freedom, for the seed intervals.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.fmean(xs) if xs else math.nan


def _ci(xs: Sequence[float]) -> list[float] | None:
    """95% t-interval of a mean over seeds (None with fewer than two)."""
    if len(xs) < 2:
        return None
    half = _T95.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    mean = statistics.fmean(xs)
    return [round(mean - half, 4), round(mean + half, 4)]


def _run_stats(result: RunResult) -> dict[str, float]:
    lat = sorted(result.latencies.values())
    stages = list(result.stages.values())
    return {
        "mean_s": statistics.fmean(lat), "p95_s": lat[math.ceil(0.95 * len(lat)) - 1],
        "sender_wait_s": _mean([s.s - s.r for s in stages]),
        "queue_transfer_s": _mean([s.c - s.s for s in stages]),
        "receipt_to_allocation_s": _mean([s.n - s.c for s in stages]),
        "resumed_inference_s": _mean([s.f - s.n for s in stages]),
        "cached_tokens": float(sum(s.cached_tokens for s in stages)),
        **{k: float(v) for k, v in result.stats.items() if isinstance(v, (int, float))
           and not isinstance(v, bool)},
    }


def _compare(workload: str, preset: str, seeds: Sequence[int]) -> dict[str, Any]:
    """Every policy on every seed of one workload and preset."""
    runs: dict[str, dict[int, RunResult]] = {p: {} for p in POLICIES}
    failures, released, equal = [], True, True
    for seed in seeds:
        wl: LadsWorkload = BUILDERS[workload](seed)
        outputs = None
        for policy in POLICIES:
            result = run_policy(wl, policy, preset)
            if result.failed:
                failures.append({"policy": policy, "seed": seed, "error": result.error})
                continue
            runs[policy][seed] = result
            released &= bool(result.stats.get("all_references_released"))
            outputs = outputs or result.outputs
            equal &= result.outputs == outputs
    return {"workload": workload, "preset": preset, "seeds": list(seeds),
            "headroom_blocks": scaled_headroom(get_preset(preset).kv_blocks),
            "policies": _summaries(runs), "failures": failures,
            "all_references_released": released, "outputs_equal": equal}


def _summaries(runs: dict[str, dict[int, RunResult]]) -> dict[str, Any]:
    stats = {p: {seed: _run_stats(r) for seed, r in by_seed.items()}
             for p, by_seed in runs.items()}
    fifo = stats["fifo"]
    out: dict[str, Any] = {}
    for policy, by_seed in stats.items():
        matched = [s for s in by_seed if s in fifo]
        ratios = [by_seed[s]["mean_s"] / fifo[s]["mean_s"] for s in matched]
        keys = sorted({k for run in by_seed.values() for k in run})
        summary = {k: round(_mean([run[k] for run in by_seed.values()]), 4) for k in keys}
        summary.update({
            "ratio_to_fifo": round(_mean(ratios), 4), "ratio_ci95": _ci(ratios),
            "reduction_vs_fifo_pct": round(_mean([100 * (1 - r) for r in ratios]), 2),
            "p95_ratio_to_fifo": round(_mean([by_seed[s]["p95_s"] / fifo[s]["p95_s"]
                                              for s in matched]), 4),
            "runs": len(by_seed)})
        out[policy] = summary
    return out


def _print(block: dict[str, Any]) -> None:
    print(f"\n{block['workload']} on {block['preset']} (SIMULATED engine), seeds "
          f"{block['seeds']}, H = {block['headroom_blocks']} blocks")
    print(f"  {'policy':<17}{'mean s':>8}{'p95 s':>8}{'×FIFO':>7}{'Δ%':>7}{'wait':>7}"
          f"{'xfer':>7}{'r→alloc':>8}{'infer':>7}{'prot blk·s':>12}{'grants':>7}"
          f"{'exp':>5}{'hand':>6}{'promo':>6}{'cpu s':>7}")
    for name, p in block["policies"].items():
        print(f"  {name:<17}{p['mean_s']:>8.2f}{p['p95_s']:>8.2f}{p['ratio_to_fifo']:>7.3f}"
              f"{p['reduction_vs_fifo_pct']:>7.1f}{p['sender_wait_s']:>7.2f}"
              f"{p['queue_transfer_s']:>7.2f}{p['receipt_to_allocation_s']:>8.2f}"
              f"{p['resumed_inference_s']:>7.2f}{p['protection_block_s']:>12.0f}"
              f"{p['grants']:>7.1f}{p['expiries']:>5.1f}{p['handoffs']:>6.1f}"
              f"{p['promotions']:>6.1f}{p['controller_cpu_s']:>7.3f}")
    if block["failures"]:
        print(f"  FAILED runs (left out): {block['failures']}")
    print(f"  all references released: {block['all_references_released']}; outputs equal "
          f"across policies: {block['outputs_equal']}")


def run(quick: bool) -> dict[str, Any]:
    """Run every policy on both workloads and presets; print tables; return the JSON figures."""
    t0 = time.monotonic()
    seeds = QUICK_SEEDS if quick else SEEDS
    blocks = [_compare(workload, preset, seeds[workload])
              for preset in PRESETS for workload in ("cohort", "web_burst")]
    for block in blocks:
        _print(block)
    primary = blocks[0]
    reductions = ", ".join(
        f"{b['workload']}/{b['preset']} {-b['policies']['lads']['reduction_vs_fifo_pct']:+.1f}%"
        for b in blocks)
    print("\nLADS vs FIFO, mean complete-workflow latency (paper: -44.6% cohort-8, -42.4% Web "
          f"burst): {reductions}")
    print(f"wall {time.monotonic() - t0:.1f} s")
    return {"workload": primary["workload"], "preset": primary["preset"],
            "policies": primary["policies"],
            "all_references_released": all(b["all_references_released"] for b in blocks),
            "outputs_equal": all(b["outputs_equal"] for b in blocks),
            "simulated": True, "quick": quick, "results": blocks}


__all__ = ["POLICIES", "PRESETS", "run"]
