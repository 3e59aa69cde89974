"""``dynbranch bench lads``: every delivery policy, the TTL baselines, KV offloading and the
no-eviction bound on the same LADS workloads, side by side.

For each sim preset (the LADS paper's Qwen2.5-7B / RTX PRO 5000 shape, and ``qwen3-32b-h200``)
and each workload (the controlled cohort-8 burst, five input seeds; the Web-derived burst
replay, three seeds), every arm replays the same inputs in virtual time with the production
sender, lease provider and sim engine (``loadgen.arms.lads_replay``). The arms:

* the delivery policies (``services.delivery.POLICIES``): ``fifo``, ``size_first``,
  ``cache_first``, ``tail_aware``, the TTL baselines ``ttl_simple`` (today's simplified rule)
  and ``ttl_continuum`` (Continuum as published: τ* pins and program-level FCFS;
  ``services/engine_agent/leases/continuum.py`` says what we followed), ``lads_no_turnover``
  and ``lads``;
* the TTL sweep: Continuum's mechanism with one fixed TTL from ``TTL_SWEEP`` (0.25–60 s, pinned
  without a budget, FIFO delivery); ``ttl_best`` is the sweep's best TTL in hindsight, chosen per
  workload and preset on the mean over seeds: an upper reference for any fixed-TTL policy;
* KV offloading: ``fifo_offload`` and ``lads_offload``, FIFO and LADS in front of a CPU tier of
  ``OFFLOAD_GIB`` reloaded over the preset's host link (``services/engine_agent/sim/offload.py``);
* ``lads_program_fcfs``: LADS on an engine whose queue runs Continuum's program-level FCFS,
  the queue order the TTL arms get (LADS itself registers continuations in plain FIFO);
* ``lads_unbudgeted``: LADS leases with no budget and no headroom (every resident history is
  leased at readiness; revocation still frees what waiting work lacks): what protection alone
  reaches in this pool, a reference for LADS' budget rule, not a policy;
* ``no_eviction_bound``: FIFO with a KV pool that holds every history (the same engine
  otherwise); ``bound_share`` of an arm is (FIFO − arm) / (FIFO − bound) per matched seed.

Per arm it reports mean and P95 (nearest rank: the largest of 16) complete-workflow latency, the
stage intervals of LADS §2.1, protection block-seconds, grants / expiries / handoffs /
promotions, pins, recomputed prompt tokens, CPU-tier loads, engine busy seconds and controller
CPU, and each arm against FIFO as the paper computes it: the per-seed ratio averaged equally
over matched seeds, with a 95% t-interval. A failed run is listed and left out of every average.
Runs are independent and deterministic (virtual time), so they spread over the machine's cores.
``--quick`` runs the cohort-8 burst on the paper's engine shape only, one seed, four TTLs of the
sweep. The sim is a model of an engine.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from loadgen.arms.lads_replay import EngineVariant, RunResult, run_policy
from loadgen.workloads.lads import LadsWorkload, cohort_workload, web_burst_workload
from services.delivery import POLICIES as DELIVERY_POLICIES
from services.engine_agent import get_preset, scaled_headroom

#: Delivery policies that are arms on their own (``ttl_fixed`` is the sweep's).
POLICIES = tuple(p for p in DELIVERY_POLICIES if p != "ttl_fixed")
PAPER_PRESET = "qwen2.5-7b-rtxpro5000"
PRESETS = (PAPER_PRESET, "qwen3-32b-h200")
QUICK_PRESETS = (PAPER_PRESET,)
SEEDS = {"cohort": (1, 2, 3, 4, 5), "web_burst": (1, 2, 3)}
QUICK_SEEDS = {"cohort": (1,)}  # --quick: the cohort-8 burst only, one seed
BUILDERS = {"cohort": cohort_workload, "web_burst": web_burst_workload}
#: Fixed TTLs of the sweep, seconds (nine values from 0.25 s to 60 s); ``--quick`` runs four.
TTL_SWEEP = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
QUICK_TTL_SWEEP = (0.5, 4.0, 15.0, 60.0)
#: Host memory of the KV offloading arms (``--kv-offloading-size``), GiB.
OFFLOAD_GIB = 64.0
#: Arms derived from the others (not run): the sweep's best.
DERIVED = ("ttl_best",)
#: t quantiles (two-sided 95%) by degrees of freedom, for the seed intervals.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


@dataclass(frozen=True, slots=True)
class Arm:
    """One column of the comparison: a delivery policy on an engine set up some way."""

    name: str
    policy: str
    setup: EngineVariant = field(default_factory=EngineVariant)
    ttl_s: float | None = None  # the sweep's TTL


def sweep_name(ttl_s: float) -> str:
    """The sweep arm of one TTL, e.g. ``ttl_fixed_0.25s``."""
    return f"ttl_fixed_{ttl_s:g}s"


def unbounded_blocks(workload: LadsWorkload, preset: str) -> int:
    """A pool that holds every history of ``workload`` at once, plus the preset's own pool (room
    for every running sequence): with it nothing is ever evicted."""
    spec = get_preset(preset)
    tokens = sum(wf.prompt_tokens(len(wf.calls) - 1, workload.output_tokens)
                 + workload.output_tokens for wf in workload.workflows)
    return spec.kv_blocks + math.ceil(tokens / spec.block_size) * 2


def working_set(workload: LadsWorkload) -> list[int]:
    """Tokens of every workflow's history at each turn, summed (what one round reuses)."""
    turns = min(len(wf.calls) for wf in workload.workflows)
    return [sum(wf.prompt_tokens(t, workload.output_tokens) for wf in workload.workflows)
            for t in range(turns)]


def arms(workload: LadsWorkload, preset: str, *, sweep: Sequence[float] = TTL_SWEEP) -> list[Arm]:
    """Every arm of one workload and preset (module docstring)."""
    out = [Arm(policy, policy) for policy in POLICIES]
    out += [Arm(sweep_name(t), "ttl_fixed", EngineVariant(lease=(("ttl_s", t),)), t)
            for t in sweep]
    out += [Arm("fifo_offload", "fifo", EngineVariant(offload_gib=OFFLOAD_GIB)),
            Arm("lads_offload", "lads", EngineVariant(offload_gib=OFFLOAD_GIB)),
            Arm("lads_program_fcfs", "lads", EngineVariant(queue_policy="program")),
            Arm("lads_unbudgeted", "lads",
                EngineVariant(lease=(("unbudgeted", True), ("headroom_blocks", 0)))),
            Arm("no_eviction_bound", "fifo",
                EngineVariant(kv_blocks=unbounded_blocks(workload, preset)))]
    return out


@functools.lru_cache(maxsize=8)
def _workload(name: str, seed: int) -> LadsWorkload:
    return BUILDERS[name](seed)


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
    prompt = sum(s.prompt_tokens for s in stages)
    cached = sum(s.cached_tokens for s in stages)
    return {
        "mean_s": statistics.fmean(lat), "p95_s": lat[math.ceil(0.95 * len(lat)) - 1],
        "sender_wait_s": _mean([s.s - s.r for s in stages]),
        "queue_transfer_s": _mean([s.c - s.s for s in stages]),
        "receipt_to_allocation_s": _mean([s.n - s.c for s in stages]),
        "resumed_inference_s": _mean([s.f - s.n for s in stages]),
        "cached_tokens": float(cached), "recomputed_tokens": float(prompt - cached),
        **{k: float(v) for k, v in result.stats.items() if isinstance(v, (int, float))
           and not isinstance(v, bool)},
    }


def _one(task: tuple[str, int, str, Arm]) -> dict[str, Any]:
    """One run (in a worker process): its figures, its outputs' digest, or its error."""
    workload, seed, preset, arm = task
    result = run_policy(_workload(workload, seed), arm.policy, preset, arm.setup)
    if result.failed:
        return {"error": result.error}
    outputs = hashlib.blake2b(repr(sorted(result.outputs.items())).encode(),
                              digest_size=16).hexdigest()
    return {"stats": _run_stats(result), "outputs": outputs,
            "released": bool(result.stats.get("all_references_released")),
            "over_target": int(result.stats.get("grants_over_target", 0))}


def _workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _compare(workload: str, preset: str, seeds: Sequence[int], pool: ProcessPoolExecutor,
             sweep: Sequence[float]) -> dict[str, Any]:
    """Every arm on every seed of one workload and preset."""
    by_arm = {a.name: a for a in arms(_workload(workload, seeds[0]), preset, sweep=sweep)}
    tasks = [(workload, seed, preset, arm) for seed in seeds
             for arm in arms(_workload(workload, seed), preset, sweep=sweep)]
    runs: dict[str, dict[int, dict[str, float]]] = {name: {} for name in by_arm}
    failures, released, equal, over = [], True, True, 0
    outputs: dict[int, str] = {}
    for (_, seed, _, arm), done in zip(tasks, pool.map(_one, tasks), strict=True):
        if "error" in done:
            failures.append({"arm": arm.name, "seed": seed, "error": done["error"]})
            continue
        runs[arm.name][seed] = done["stats"]
        released &= done["released"]
        over += done["over_target"]
        equal &= outputs.setdefault(seed, done["outputs"]) == done["outputs"]
    summaries = _summaries(runs)
    best = _best_ttl(summaries, by_arm)
    if best is not None:
        summaries["ttl_best"] = {**summaries[best], "ttl_s": by_arm[best].ttl_s, "of": best}
    return {"workload": workload, "preset": preset, "seeds": list(seeds),
            "headroom_blocks": scaled_headroom(get_preset(preset).kv_blocks),
            "pool_tokens": get_preset(preset).kv_tokens,
            "working_set_tokens": [working_set(_workload(workload, s)) for s in seeds],
            "offload_gib": OFFLOAD_GIB, "ttl_sweep": list(sweep),
            "policies": summaries, "failures": failures,
            "all_references_released": released, "grants_over_target": over,
            "outputs_equal": equal}


def _best_ttl(summaries: dict[str, dict[str, Any]], by_arm: dict[str, Arm]) -> str | None:
    swept = [n for n, a in by_arm.items() if a.ttl_s is not None and n in summaries
             and summaries[n]["runs"]]
    return min(swept, key=lambda n: summaries[n]["ratio_to_fifo"]) if swept else None


def _summaries(runs: dict[str, dict[int, dict[str, float]]]) -> dict[str, Any]:
    fifo, bound = runs["fifo"], runs.get("no_eviction_bound", {})
    out: dict[str, Any] = {}
    for arm, by_seed in runs.items():
        matched = [s for s in by_seed if s in fifo]
        ratios = [by_seed[s]["mean_s"] / fifo[s]["mean_s"] for s in matched]
        shares = [(fifo[s]["mean_s"] - by_seed[s]["mean_s"])
                  / (fifo[s]["mean_s"] - bound[s]["mean_s"])
                  for s in matched if s in bound and fifo[s]["mean_s"] > bound[s]["mean_s"]]
        keys = sorted({k for run in by_seed.values() for k in run})
        summary: dict[str, Any] = {k: round(_mean([run[k] for run in by_seed.values()]), 4)
                                   for k in keys}
        summary.update({
            "mean_ci95": _ci([run["mean_s"] for run in by_seed.values()]),
            "ratio_to_fifo": round(_mean(ratios), 4), "ratio_ci95": _ci(ratios),
            "reduction_vs_fifo_pct": round(_mean([100 * (1 - r) for r in ratios]), 2),
            "p95_ratio_to_fifo": round(_mean([by_seed[s]["p95_s"] / fifo[s]["p95_s"]
                                              for s in matched]), 4),
            "bound_share": round(_mean(shares), 4), "bound_share_ci95": _ci(shares),
            "runs": len(by_seed)})
        out[arm] = summary
    return out


_COLUMNS = ("  {:<19}{:>8}{:>8}{:>7}{:>7}{:>7}{:>7}{:>8}{:>7}{:>10}{:>11}{:>7}{:>5}{:>6}{:>6}"
            "{:>7}")


def _print(block: dict[str, Any]) -> None:
    print(f"\n{block['workload']} on {block['preset']} (SIMULATED engine), seeds "
          f"{block['seeds']}, H = {block['headroom_blocks']} blocks, pool "
          f"{block['pool_tokens']:,} tokens, CPU tier {block['offload_gib']:g} GiB")
    print(_COLUMNS.format("arm", "mean s", "p95 s", "×FIFO", "share", "wait", "xfer", "r→alloc",
                          "infer", "recomp kt", "prot blk·s", "grants", "exp", "hand",
                          "promo", "cpu s"))
    for name, p in block["policies"].items():
        label = f"{name} ({p['ttl_s']:g}s)" if name == "ttl_best" else name
        share = "" if math.isnan(p["bound_share"]) else f"{p['bound_share']:.2f}"
        print(_COLUMNS.format(
            label, f"{p['mean_s']:.2f}", f"{p['p95_s']:.2f}", f"{p['ratio_to_fifo']:.3f}", share,
            f"{p['sender_wait_s']:.2f}", f"{p['queue_transfer_s']:.2f}",
            f"{p['receipt_to_allocation_s']:.2f}", f"{p['resumed_inference_s']:.2f}",
            f"{p['recomputed_tokens'] / 1000:.0f}", f"{p['protection_block_s']:.0f}",
            f"{p['grants']:.1f}", f"{p['expiries']:.1f}", f"{p['handoffs']:.1f}",
            f"{p['promotions']:.1f}", f"{p['controller_cpu_s']:.3f}"))
    _print_ttl(block)
    p = block["policies"]
    recomputed = [(name, p[name]["recomputed_tokens"]) for name in
                  ("fifo", "lads", "lads_program_fcfs", "lads_unbudgeted", "no_eviction_bound")
                  if name in p]
    print(f"  KV capacity: the 16 histories hold {_kilo(block['working_set_tokens'][0][1])}–"
          f"{_kilo(block['working_set_tokens'][0][-1])} tokens from the first continuation to "
          f"the last (seed {block['seeds'][0]}) against a {_kilo(block['pool_tokens'])}-token "
          f"pool; prompt tokens recomputed per run: "
          + ", ".join(f"{name} {_kilo(tokens)}" for name, tokens in recomputed))
    if block["failures"]:
        print(f"  FAILED runs (left out): {block['failures']}")
    print(f"  all references released: {block['all_references_released']}; grants over the "
          f"target: {block['grants_over_target']}; outputs equal across arms: "
          f"{block['outputs_equal']}")


def _kilo(tokens: float) -> str:
    return f"{tokens / 1000:,.0f}k"


def _print_ttl(block: dict[str, Any]) -> None:
    """Why each TTL variant helps or fails: pins, their TTL, which survived to their arrival."""
    print(f"  {'TTL arm':<19}{'×FIFO':>7}{'pins':>6}{'mean τ s':>9}{'held at arrival':>16}"
          f"{'expired':>8}{'released for memory':>20}{'preempt':>8}{'prot blk·s':>11}")
    for name, p in block["policies"].items():
        if not name.startswith("ttl_") or name == "ttl_best":
            continue
        pins = p.get("grants", 0.0)
        tau = p.get("pinned_ttl_s", 0.0) / pins if pins and p.get("pin_decisions") else math.nan
        print(f"  {name:<19}{p['ratio_to_fifo']:>7.3f}{pins:>6.1f}"
              f"{'' if math.isnan(tau) else f'{tau:.2f}':>9}{p.get('pins_reused', 0):>16.1f}"
              f"{p['expiries']:>8.1f}{p['revocations']:>20.1f}{p.get('preemptions', 0):>8.1f}"
              f"{p['protection_block_s']:>11.0f}")


def _verdict(block: dict[str, Any]) -> dict[str, Any]:
    """The goal on one block, for ``lads`` and ``lads_program_fcfs``: at most 0.50 of FIFO,
    below every TTL variant (the best in hindsight included), and at least 85% of the
    no-eviction bound's saving."""
    p = block["policies"]
    ttl = [n for n in p if n.startswith("ttl_")]
    out: dict[str, Any] = {}
    for arm in ("lads", "lads_program_fcfs"):
        if arm not in p:
            continue
        a = p[arm]
        out[arm] = {"ratio": a["ratio_to_fifo"], "bound_share": a["bound_share"],
                    "at_most_half": a["ratio_to_fifo"] <= 0.50,
                    "below_every_ttl": all(a["ratio_to_fifo"] < p[n]["ratio_to_fifo"]
                                           for n in ttl),
                    "bound_share_at_least_85pct": a["bound_share"] >= 0.85}
    return out


def run(quick: bool) -> dict[str, Any]:
    """Run every arm on both workloads and presets; print tables; return the JSON figures."""
    t0 = time.monotonic()
    seeds = QUICK_SEEDS if quick else SEEDS
    sweep = QUICK_TTL_SWEEP if quick else TTL_SWEEP
    with ProcessPoolExecutor(_workers()) as pool:
        blocks = [_compare(workload, preset, seeds[workload], pool, sweep)
                  for preset in (QUICK_PRESETS if quick else PRESETS)
                  for workload in ("cohort", "web_burst") if workload in seeds]
    for block in blocks:
        _print(block)
        block["verdict"] = _verdict(block)
    print("\nLADS vs FIFO, mean complete-workflow latency (paper: -44.6% cohort-8, -42.4% Web "
          "burst); share of the no-eviction bound's saving:")
    for b in blocks:
        best = b["policies"].get("ttl_best", {})
        print(f"  {b['workload']}/{b['preset']}: best TTL in hindsight "
              f"{best.get('ttl_s', math.nan):g} s at {best.get('ratio_to_fifo', math.nan):.3f}")
        for arm, v in b["verdict"].items():
            a = b["policies"][arm]
            print(f"    {arm}: {a['ratio_to_fifo']:.3f} of FIFO ({-a['reduction_vs_fifo_pct']:+.1f}"
                  f"%), {a['bound_share']:.0%} of the bound's saving; ≤ 0.50: "
                  f"{v['at_most_half']}, below every TTL: {v['below_every_ttl']}, ≥ 85% of the "
                  f"bound's saving: {v['bound_share_at_least_85pct']}")
    print(f"wall {time.monotonic() - t0:.1f} s ({_workers()} processes)")
    primary = blocks[0]
    return {"workload": primary["workload"], "preset": primary["preset"],
            "policies": primary["policies"], "verdict": primary["verdict"],
            "all_references_released": all(b["all_references_released"] for b in blocks),
            "outputs_equal": all(b["outputs_equal"] for b in blocks),
            "simulated": True, "quick": quick, "results": blocks}


__all__ = ["OFFLOAD_GIB", "POLICIES", "PRESETS", "QUICK_TTL_SWEEP", "TTL_SWEEP", "Arm", "arms",
           "run", "sweep_name", "unbounded_blocks", "working_set"]
