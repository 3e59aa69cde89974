"""``dynbranch bench admission``: load-priced admission (C3) — decision latency, behaviour under a
load step against the baselines, and the exact-oracle replay (dynbranch §3.4, Figures 13 and 15,
Appendix B).

1. Decision latency of Action 0 and Action 1 (K = 3 candidates, context d = 6), in-process
   (p50/p99 in µs) and over gRPC to an admission service (p50/p99 in ms).
2. The Routing workload on one simulated engine under a load step, on the virtual clock: a
   low-rate phase, a high-rate phase, a low-rate phase. Each arm replays the same schedule on a
   fresh mesh whose admission service runs that arm's policy: ``full`` (the priced controller),
   ``fixed`` (open every branch, admit the top 2), ``fixed1`` (the top 1), ``load_threshold``
   (the paper's static control) and ``always`` (admit every candidate); the floor and C1-only
   run beside them. Per phase: mean workflow latency (simulated seconds); per arm: fills issued
   per request, its envelope regret (its full/floor minus the best fixed fan-out's over the
   step — C1 alone, top 1, top 2 or every candidate — with the paired CI, ``loadgen.arms.envelope``:
   a check against other arms' outcomes, not the gate's own estimates), and the policy's
   account of its decisions.
3. ReAct with the drafted predictor under priced admission (live mesh: the drafter runs on its
   own simulated engine).

The engines are simulated (SIMULATED in the output); seeds are fixed and printed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
import time
from dataclasses import replace
from typing import Any

from loadgen.arms.envelope import best_fixed_k, regret_text
from loadgen.arms.runner import run_arm, run_schedule
from loadgen.arms.specs import ARM_SPECS
from loadgen.arms.summary import completed_everywhere, summarize
from loadgen.meshes.config import MeshConfig
from loadgen.meshes.live import in_process_mesh
from loadgen.workloads import get_workload
from loadgen.workloads.base import SimClock
from loadgen.workloads.schedule import Schedule, ScheduledWorkflow

log = logging.getLogger(__name__)

#: The admission arms of the load step (``full`` is the priced controller).
ARMS = ("full", "fixed", "fixed1", "load_threshold", "always")
SEED = 11


def _quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def decision_latency(n: int) -> dict[str, float]:
    """Action 0 and Action 1 timings of the priced controller in-process, in µs."""
    from services.admission import (
        ControllerSettings,
        EngineLoad,
        LoadTracker,
        PricedController,
        Proposal,
    )

    tracker = LoadTracker()
    tracker.observe(EngineLoad("e0", "m", 1, 100.0, 20, 2, 48, 1000, 4096, 4, 256), 100.0)
    controller = PricedController(tracker, settings=ControllerSettings(n0=2, audit_rate=0.05))
    proposals = [Proposal(f"h{i}", i, 0.5 / (i + 1), 2.0, 2.0) for i in range(3)]
    a0, a1 = [], []
    for i in range(n):
        t0 = time.perf_counter()
        controller.open_branch(f"b{i}", "routing/router", "routing/router", "m", 100.0)
        t1 = time.perf_counter()
        controller.admit(f"b{i}", "routing/router", proposals, "m", 100.0)
        t2 = time.perf_counter()
        a0.append((t1 - t0) * 1e6)
        a1.append((t2 - t1) * 1e6)
        if i % 2:
            controller.report(_outcome(f"b{i}", "h0"))
    (p0, q0), (p1, q1) = _quantiles(a0), _quantiles(a1)
    return {"action0_p50_us": p0, "action0_p99_us": q0, "action1_p50_us": p1,
            "action1_p99_us": q1}


def _outcome(branch: str, selected: str) -> Any:
    from services.admission import BranchOutcome

    return BranchOutcome(branch, selected, saved_s=1.5, fill_cost_s=2.0, setup_s=0.01)


async def grpc_latency(n: int) -> dict[str, float]:
    """AdmitFills round trips to an in-process admission service (priced policy), in ms."""
    from services.admission import AdmissionSettings, build_runtime
    from services.common.pb import admission_pb2, admission_pb2_grpc
    from services.common.runtime.clients import open_channel
    from services.common.runtime.records import make_header

    runtime = await build_runtime(AdmissionSettings(metrics_port=-1, log_level="WARNING"))
    await runtime.start()
    try:
        async with open_channel(runtime.address) as channel:
            stub = admission_pb2_grpc.AdmissionStub(channel)
            candidates = [admission_pb2.Candidate(candidate=f"h{i}", rank=i, probability=0.3,
                                                  est_exec_s=2.0, est_gain_s=2.0)
                          for i in range(3)]
            samples = []
            for i in range(n):
                request = admission_pb2.AdmitFillsRequest(
                    header=make_header(f"b{i}", 1, "bench"), coordinate="routing/router",
                    model="m", candidates=candidates)
                t0 = time.perf_counter()
                await stub.AdmitFills(request, timeout=2)
                samples.append((time.perf_counter() - t0) * 1e3)
    finally:
        await runtime.shutdown()
    p50, p99 = _quantiles(samples)
    return {"grpc_decision_p50_ms": p50, "grpc_decision_p99_ms": p99}


def load_step_schedule(quick: bool) -> tuple[Schedule, list[tuple[str, float, float]]]:
    """Routing arrivals: low, high, low rate (simulated seconds); the phase boundaries."""
    workload = get_workload("routing")
    phases = [("A low", 0.15, 6 if quick else 12), ("B high", 3.0, 24 if quick else 48),
              ("C low", 0.15, 6 if quick else 12)]
    rng = random.Random(SEED)
    instances = iter(workload.instances(sum(n for _, _, n in phases), rng))
    arrivals, bounds, t = [], [], 0.0
    for name, rate, n in phases:
        start = t
        for _ in range(n):
            arrivals.append(ScheduledWorkflow(f"routing-{SEED}-{len(arrivals):04d}", round(t, 6),
                                    next(instances)))
            t += rng.expovariate(rate)
        bounds.append((name, start, t))
    return Schedule("routing", SEED, "poisson-step", 0.0, tuple(arrivals)), bounds


async def load_step(quick: bool) -> dict[str, Any]:
    """The load step on the virtual clock: the floor, C1-only and every admission arm on the
    same schedule, each on a fresh one-engine mesh. Per arm and phase: mean workflow latency;
    per arm: fills issued per request, its envelope regret (``loadgen.arms.envelope``) and the
    policy's own account of its decisions; and the envelope (the best fixed fan-out)."""
    schedule, bounds = load_step_schedule(quick)
    workload = get_workload("routing")
    config = MeshConfig(engines=1, clock="virtual")
    results = {name: await run_arm(ARM_SPECS[name], workload, schedule, config)
               for name in ("floor", "c1", *ARMS)}
    paired = set(completed_everywhere(results))
    summary = summarize(results, seed=SEED)
    at = {a.workflow_id: a.at_s for a in schedule.arrivals}
    out: dict[str, Any] = {}
    for name in ARMS:
        arm = results[name]
        phases = {}
        for phase, start, end in bounds:
            members = [r for r in arm.results if start <= at[r.workflow_id] < end]
            ok = [r.latency_s for r in members if not r.error]
            phases[phase] = {"requests": len(ok), "failed": len(members) - len(ok),
                             "mean_s": statistics.fmean(ok) if ok else float("nan")}
        out[name] = {"phases": phases,
                     "fills_per_request": arm.counters.get("fills_issued", 0)
                     / max(len(arm.results), 1),
                     "mean_s": statistics.fmean(r.latency_s for r in arm.results
                                                if r.workflow_id in paired),
                     "envelope_regret": summary[name].get("envelope_regret"),
                     "account": arm.admission}
    return {"arms": out, "best_fixed_k": best_fixed_k(summary)}


async def react_with_draft(quick: bool, config: MeshConfig) -> dict[str, Any]:
    """ReAct's entity branch with the drafted predictor under priced admission: what drafting
    costs per request, and how often Action 0 still opens once it has priced that cost."""
    from loadgen.workloads.schedule import build_schedule

    workload = get_workload("react")
    schedule = build_schedule(workload, 8 if quick else 24, seed=SEED, arrival="poisson",
                              rate=0.2, replay=0.0)
    cfg = replace(config, admission="priced", draft_model="qwen3-0.6b", admission_settings=(
        ("seed", SEED), ("window_s", 8.0 * config.time_scale)))
    clock = SimClock(cfg.time_scale)
    async with in_process_mesh(cfg, "full", workload.corpus_source) as mesh:
        results = await run_schedule(mesh.address, workload, schedule, clock)
        branches = mesh.gateway.core.branches
        predictor = branches.predictor
        counts = dict(mesh.admission.policy.gate_counts)
        counters = mesh.counters()
    ok = [r for r in results if not r.error]
    decisions = counts["opened"] + counts["refused"]
    return {"requests": len(ok), "failed": len(results) - len(ok),
            "drafts": predictor.drafts, "draft_timeouts": predictor.timeouts,
            "action0_open_share": counts["opened"] / decisions if decisions else float("nan"),
            "fills_per_request": counters["fills_issued"] / max(len(results), 1),
            "mean_s": statistics.fmean(r.latency_s for r in ok) if ok else float("nan")}


async def _run(quick: bool) -> dict[str, Any]:
    step = await load_step(quick)
    config = MeshConfig(engines=1, time_scale=0.02 if quick else 0.05)
    react = await react_with_draft(quick, config)
    return {**step, "react_draft": react, **await grpc_latency(200 if quick else 1000)}


def run(quick: bool) -> dict[str, Any]:
    """Measure and print; returns the JSON figures."""
    latency = decision_latency(2000 if quick else 20000)
    measured = asyncio.run(_run(quick))
    arms = measured["arms"]
    high = {name: a["phases"]["B high"]["mean_s"] for name, a in arms.items()}
    result = {**latency, "grpc_decision_p50_ms": measured["grpc_decision_p50_ms"],
              "grpc_decision_p99_ms": measured["grpc_decision_p99_ms"],
              "envelope_regret": {name: a["envelope_regret"] for name, a in arms.items()},
              "best_fixed_k": measured["best_fixed_k"],
              "fills_per_request": {name: round(a["fills_per_request"], 3)
                                    for name, a in arms.items()},
              "mean_s": {name: round(a["mean_s"], 3) for name, a in arms.items()},
              "fastest": min(arms, key=lambda n: arms[n]["mean_s"]),
              "fastest_in_high_phase": min(high, key=lambda n: high[n]),
              "phases": {name: a["phases"] for name, a in arms.items()},
              "accounts": {name: a["account"] for name, a in arms.items() if a["account"]},
              "react_draft": measured["react_draft"], "clock": "virtual",
              "seed": SEED, "simulated": True}
    print(f"admission (SIMULATED engines, seed {SEED}): Action 0 p50 "
          f"{result['action0_p50_us']:.1f} µs p99 {result['action0_p99_us']:.1f} µs; Action 1 "
          f"(K=3) p50 {result['action1_p50_us']:.1f} µs p99 {result['action1_p99_us']:.1f} µs; "
          f"over gRPC p50 {result['grpc_decision_p50_ms']:.2f} ms")
    print("load step on the virtual clock (Routing, one engine): mean latency per phase (s)")
    print(f"{'arm':<16}" + "".join(f"{p:>10}" for p in next(iter(result["phases"].values())))
          + f"{'fills/req':>11}  envelope regret [95% CI]")
    for name, phases in result["phases"].items():
        print(f"{name:<16}" + "".join(f"{p['mean_s']:>10.2f}" for p in phases.values())
              + f"{result['fills_per_request'][name]:>11.2f}  "
              + (regret_text(result["envelope_regret"][name]) or "-"))
    best = result["best_fixed_k"]
    if best:
        print(f"envelope: {best['arm']} (K {best['k']}), {best['ratio_to_floor']:.3f} of the "
              "floor")
    print(f"fastest over the step: {result['fastest']}; in the high phase: "
          f"{result['fastest_in_high_phase']}")
    rd = result["react_draft"]
    print(f"ReAct, drafted predictor (qwen3-0.6b sim), priced: {rd['drafts']} drafts "
          f"({rd['draft_timeouts']} past deadline), Action 0 opened "
          f"{100 * rd['action0_open_share']:.0f}% of branches, {rd['fills_per_request']:.2f} "
          f"fills/request, mean {rd['mean_s']:.2f} s over {rd['requests']} requests "
          f"({rd['failed']} failed)")
    return result


__all__ = ["decision_latency", "grpc_latency", "load_step", "load_step_schedule", "run"]
