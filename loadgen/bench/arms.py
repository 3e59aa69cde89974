"""``dynbranch bench arms``: one workload's schedules under the floor, C1, C2, full and baselines.

Side by side in one run (DESIGN.md §6): per seed, the same workflow instances with the same arrivals
(open-loop Poisson at the paper's low-load rate, dynbranch Fig. 8, or a serial closed loop) run
under each arm on a fresh mesh of simulated engines, after a short unmeasured warm-up on that mesh,
in an arm order rotated per seed. The mesh is the virtual one by default (one process on a virtual
clock: latency is simulated engine time, waits and a modelled cost per hop, never the mesh's own
CPU; ``loadgen.meshes.virtual``), or in wall time at ``--time-scale`` ≥ 0.5 as the cross-check:
``--clock processes`` (a process per service) or ``--clock live`` (gRPC servers in one process; real
engines always run live). A call that spends more than ``STALL_S`` outside the engine is a stall:
its workflow fails, and stalls are counted per arm. Workflows pair by id across arms. Per arm it
reports the mean latency in simulated seconds (HCI: the user turn after the click), the ratio to the
floor with a paired-bootstrap 95% CI (over seeds, then workflows, when several seeds ran:
``loadgen.arms.stats``), quantiles the sample supports, the gateway's fill counters per workflow,
how long promoted fills still ran when their demands arrived and what those demands did (adopted and
served, or why not: ``loadgen.arms.summary``), whether every workflow's outputs equal the floor's
(from the floor's own mesh), the share of the oracle bound it realizes (``loadgen.arms.oracle``) and
its envelope regret: its ratio minus the best fixed fan-out's among the arms that ran (C1 alone, top
1, 2, 3, every candidate; ``loadgen.arms.envelope``). ``--profile window`` caps the deciding stage's
decode so that fills outlast their windows (``loadgen.workloads.profiles``). A failed workflow fails
the run: it is counted per arm and left out of every mean.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.arms.envelope import best_fixed_k, regret_text
from loadgen.arms.leak_guard import check
from loadgen.arms.load_levels import (
    Calibration,
    cache_path,
    level_mesh,
    most_workflows,
    reached,
    workflows_at,
)
from loadgen.arms.oracle import OracleBound, oracle_bound, summed
from loadgen.arms.runner import TRAIN_SEED, ArmResult, run_arm, train_warm
from loadgen.arms.specs import ALL_ARMS, QUICK_ARMS, ArmSpec, resolve, rotated
from loadgen.arms.summary import completed_everywhere, marginal_fill_cost_s, summarize
from loadgen.meshes.clocks import CLOCKS, clock_of, default_clock, virtual
from loadgen.meshes.config import LIVE_MIN_TIME_SCALE, MeshConfig
from loadgen.meshes.real_engines import ENGINES, RealEngine
from loadgen.meshes.virtual import DEFAULT_HOP_S
from loadgen.report.decision_record import decision_record
from loadgen.workloads import WORKLOADS, build_schedule, get_workload
from loadgen.workloads.base import Workload
from loadgen.workloads.profiles import DEFAULT_PROFILE, knobs, profile_options, window_knobs
from loadgen.workloads.schedule import Schedule, open_loop
from services.engine_agent import tiny_model_path

PRESET = "qwen3-32b-h200"
#: Low-load arrival rates per simulated second (dynbranch Fig. 8: 0.12 req/s, HCI 0.3).
RATES = {name: w.low_rate for name, w in WORKLOADS.items()}
#: (workflows, engines, live time scale, warm-up workflows, arms) per mode; quick finishes in
#: under a minute on 2 cores on the virtual mesh.
MODES = {True: (24, 2, 0.5, 1, QUICK_ARMS), False: (48, 4, 0.5, 3, ALL_ARMS)}
#: The same on a real engine (``--engine vllm|sglang``, tiny model, wall time: time scale 1):
#: one engine on 2 cores, fewer workflows, and the floor beside the full arm by default.
REAL_MODES = {True: (6, 1, 1.0, 1, ("floor", "full")), False: (12, 1, 1.0, 1, QUICK_ARMS)}
WARMUP_SEED_OFFSET = 1_000_003
#: Told of each unit of a run, the warm arms' training (if any) and then each (seed, arm), when it
#: starts (``done`` False) and when it ends (``done`` True): how a caller shows progress.
UnitProgress = Callable[[str, bool], None]
TRAINING_UNIT = "training on the train split"
#: Train-split schedules a warm arm's controller learns from in turn, per mode (quick: True),
#: each as long as a measured seed's (``runner.train_warm``), at most what the split holds
#: (``training_schedules``).
TRAIN_SCHEDULES = {True: 2, False: 4}


def training_schedules(count: int, n: int, most: int | None) -> int:
    """How many train-split schedules of ``n`` workflows a warm arm learns from: ``count``, but
    no more than the split has fresh instances for (``most``: ``most_workflows``; None: no
    bound), and at least one. Schedules beyond that ask the same requests again, and a request
    asked in every schedule weighs in the restored state as often: ReAct's train split holds
    67 questions, and four schedules of 48 asked each of them about three times (issue 37: 5
    of the 67 pick their second entity at the predictor's rank 2, 1 of the test split's 133;
    four schedules or one moved the warm rank-2 ratio only from 1.96x to 1.91x, the split's
    own difference stays)."""
    return count if most is None else max(1, min(count, most // max(n, 1)))


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """What ``bench arms`` runs; None takes the mode's default."""

    workload: str = "routing"
    seed: int = 0
    seeds: int = 1
    arrival: str = "poisson"
    rate: float | None = None
    workflows: int | None = None
    preset: str = PRESET
    engines: int | None = None
    arms: tuple[str, ...] | None = None
    #: Exact-replay rate of the schedule (dynbranch Fig. 10); None keeps the workload's own.
    replay_rate: float | None = None
    #: "sim", or a real engine on the tiny model: "vllm" (embedded) or "sglang" (a server).
    engine: str = "sim"
    #: "virtual" (default for the sim) or "live" (real engines always run live).
    clock: str | None = None
    #: The live mesh's wall seconds per simulated second (>= LIVE_MIN_TIME_SCALE).
    time_scale: float | None = None
    #: Recurrence profile of the schedules (``loadgen.workloads.profiles``).
    profile: str = DEFAULT_PROFILE
    #: The virtual mesh's cost of one cross-service call, in milliseconds.
    hop_ms: float | None = None
    #: A load level (``loadgen.arms.load_levels.LEVELS``) instead of ``rate``: resolved to its
    #: calibrated rate before the run.
    load: str | None = None
    #: The virtual mesh's engines end outputs in this token range unless a cap comes first
    #: (``MeshConfig.output_len_range``; None: the sim's own).
    output_len_range: tuple[int, int] | None = None
    #: The real engine itself, when ``engine`` names one and the default (the tiny model, an
    #: engine per mesh) will not do: a shared engine, another model folder.
    real: RealEngine | None = None


def _warmup(workload: Workload, schedule: Schedule, count: int, seed: int) -> Schedule:
    """``count`` serial workflows from another seed, none an instance of ``schedule``."""
    if count <= 0:
        return dataclasses.replace(schedule, arrivals=())
    measured = {repr(a.instance) for a in schedule.arrivals}
    pool = build_schedule(workload, count + 4, seed=seed + WARMUP_SEED_OFFSET, arrival="serial",
                          replay=0.0)
    fresh = [dataclasses.replace(a, workflow_id=f"warmup-{a.workflow_id}")
             for a in pool.arrivals if repr(a.instance) not in measured][:count]
    return dataclasses.replace(pool, arrivals=tuple(fresh))


def _merge(parts: list[ArmResult]) -> ArmResult:
    counters: dict[str, int] = {}
    calls: dict[str, Any] = {}
    for part in parts:
        calls.update(part.calls)
        for k, v in part.counters.items():
            counters[k] = counters.get(k, 0) + v
    digest = ",".join(p.schedule_digest for p in parts)
    accounts = [p.admission for p in parts if p.admission]
    account = accounts[0] if len(accounts) == 1 else ({"per_seed": accounts} if accounts else {})
    remaining = None if any(p.remaining_s is None for p in parts) else [
        s for p in parts for s in p.remaining_s or ()]
    return ArmResult(parts[0].arm, digest, [r for p in parts for r in p.results], counters,
                     calls, sum(p.cache_hits for p in parts), account, remaining,
                     engine_load=merge_engine_load([p.engine_load for p in parts]),
                     decisions=[d for p in parts for d in p.decisions])


def merge_engine_load(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Seeds' engine loads as one: means of the per-seed means, the highest peak, samples
    summed ({} when no seed sampled)."""
    loads = [x for x in loads if x]
    if not loads:
        return {}
    if len(loads) == 1:
        return loads[0]
    out: dict[str, Any] = {"engines": loads[0]["engines"],
                           "samples": sum(x["samples"] for x in loads)}
    for key in ("step_ms", "busy_share", "running", "fills_running", "waiting", "kv_used",
                "fill_kv_used"):
        found = [x[key] for x in loads if x.get(key) is not None]
        out[key] = round(sum(found) / len(found), 3) if found else None
    peaks = [x["kv_used_peak"] for x in loads if x.get("kv_used_peak") is not None]
    out["kv_used_peak"] = max(peaks) if peaks else None
    return out


def _bound(floors: list[ArmResult], ids: set[str], post_click: bool
           ) -> tuple[OracleBound, list[OracleBound]]:
    """The oracle bound of each seed's floor (each seed ran on a fresh mesh), and their sum."""
    per_seed = [oracle_bound([floor.calls.get(r.workflow_id, ()) for r in floor.results
                              if r.workflow_id in ids], post_click_only=post_click,
                             prior=floor.warmup_names)
                for floor in floors]
    return summed(per_seed), per_seed


def _silent(unit: str, done: bool) -> None:
    """No progress shown."""


async def _seed(opts: Options, workload: Workload, arms: tuple[ArmSpec, ...], seed: int,
                config: MeshConfig, n: int, warm: int, rate: float,
                progress: UnitProgress = _silent) -> tuple[Schedule, dict[str, ArmResult]]:
    schedule = build_schedule(workload, n, seed=seed, arrival=opts.arrival, rate=rate,
                              replay_rate=opts.replay_rate)
    warmup = _warmup(workload, schedule, warm, seed)
    results = {}
    for spec in rotated(arms, seed):
        unit = f"seed {seed}, {spec.name}"
        progress(unit, False)
        results[spec.name] = await run_arm(spec, workload, schedule, config, warmup)
        progress(unit, True)
    return schedule, {s.name: results[s.name] for s in arms}


#: How the CIs resample, by whether more than one seed ran (``loadgen.arms.stats``).
CI_RESAMPLING = {False: "workflows (one seed)",
                 True: "two-stage cluster bootstrap: seeds, then workflows within each"}
async def _train(opts: Options, config: MeshConfig, n: int, count: int, rate: float,
                 folder: Path) -> tuple[MeshConfig, dict[str, Any]]:
    """``train_warm`` over ``count`` schedules of ``n`` workflows of the workload's *train*
    split (at most what it yields for one schedule, and as many schedules as it has fresh
    requests for: ``training_schedules``), at the same rate, arrivals and profile, each of its
    own seed."""
    train = get_workload(opts.workload, split="train",
                         **profile_options(opts.profile, opts.workload))
    most = most_workflows(train)
    n = n if most is None else min(n, most)
    schedules = [build_schedule(train, n, seed=TRAIN_SEED + i, arrival=opts.arrival, rate=rate,
                                replay_rate=opts.replay_rate)
                 for i in range(training_schedules(count, n, most))]
    return await train_warm(train, schedules, config, folder)


def _leak_guard(workload: Workload) -> dict[str, Any]:
    """The leak guard's report (coverage as given and shuffled, and what was fitted on the
    train split); an error in it is reported, never fails the bench."""
    try:
        return check(workload)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON
        return {"error": f"{type(exc).__name__}: {exc}"}


def _real(opts: Options) -> RealEngine | None:
    if opts.engine == "sim":
        return None
    if opts.real is not None:
        if opts.real.engine != opts.engine:
            raise ValueError(f"engine {opts.engine!r} but a real {opts.real.engine!r} given")
        return opts.real
    if opts.engine not in ENGINES:
        raise ValueError(f"unknown engine {opts.engine!r}; known: {', '.join(ENGINES)}")
    return RealEngine(opts.engine, tiny_model_path(opts.engine))


def _clock(opts: Options, real: RealEngine | None, default_scale: float) -> tuple[str, float]:
    """The mesh's clock and live time scale, refusing a live scale that would let the mesh's own
    CPU time move the ratios (and a virtual clock under a real engine)."""
    clock = opts.clock or default_clock(real=real is not None)
    found = clock_of(clock)
    if real is not None:
        if not found.real_engines:
            raise ValueError(f"a real engine runs in wall time: --clock {default_clock(True)}")
        return clock, 1.0
    scale = opts.time_scale if opts.time_scale is not None else default_scale
    if not found.virtual and scale < LIVE_MIN_TIME_SCALE:
        raise ValueError(f"--time-scale {scale}: the live mesh needs >= {LIVE_MIN_TIME_SCALE} "
                         "(below it the mesh's own CPU is inflated into the latencies)")
    return clock, scale


def _arm_specs(quick: bool, opts: Options, clock: str) -> tuple[ArmSpec, ...]:
    """The arms a run runs: ``opts.arms`` or the mode's, less the warm ones off the virtual
    clock (a warm arm starts from state trained on it)."""
    default_arms = (MODES if opts.engine == "sim" else REAL_MODES)[quick][4]
    arms = resolve(opts.arms or default_arms)
    if not virtual(clock) and any(a.warm for a in arms):
        if opts.arms:
            raise ValueError("a warm arm starts from state trained on the virtual clock: "
                             f"not with --clock {clock}")
        arms = tuple(a for a in arms if not a.warm)  # the default set, less what cannot run
    return arms


def _units(arms: tuple[ArmSpec, ...], seeds: int) -> int:
    """Units of a run: one per seed and arm, and the training when a warm arm runs."""
    return max(1, seeds) * len(arms) + any(a.warm for a in arms)


def planned_units(quick: bool, workload: str | None = None, *, seed: int = 0,
                  arrival: str = "poisson", rate: float | None = None, **options: Any) -> int:
    """How many units ``run`` with the same arguments reports to its ``progress`` (it runs
    nothing: what a caller's progress bar counts to)."""
    opts = Options(workload=workload or "routing", seed=seed, arrival=arrival, rate=rate,
                   **options)
    clock = opts.clock or default_clock(real=opts.engine != "sim")
    return _units(_arm_specs(quick, opts, clock), opts.seeds)


async def measure(quick: bool, opts: Options, progress: UnitProgress = _silent
                  ) -> dict[str, Any]:
    """The run ``run`` prints, on the running loop (what a caller that keeps a real engine
    across runs, ``real_engines.shared_engines``, awaits); no load level is resolved."""
    real = _real(opts)
    n, engines, default_scale, warm, _ = (MODES if real is None else REAL_MODES)[quick]
    clock, time_scale = _clock(opts, real, default_scale)
    rate = opts.rate if opts.rate is not None else RATES.get(opts.workload, 0.12)
    workload = get_workload(opts.workload, **profile_options(opts.profile, opts.workload))
    if not opts.workflows and open_loop(opts.arrival):
        # high rates: enough arrivals for the load to build, as many as the data set yields
        n = workflows_at(rate, n, most_workflows(workload))
    n = opts.workflows or n
    guard = _leak_guard(workload)  # fits on the train split; the gateway runs what it fitted
    weight = guard.get("fitted", {}).get("overlap_weight", MeshConfig().overlap_weight)
    hop_s = opts.hop_ms / 1000 if opts.hop_ms is not None else DEFAULT_HOP_S
    config = MeshConfig(engines=opts.engines or engines, preset=opts.preset,
                        time_scale=time_scale, overlap_weight=weight, real=real, clock=clock,
                        hop_s=hop_s, output_len_range=opts.output_len_range)
    arms = _arm_specs(quick, opts, clock)
    seeds = list(range(opts.seed, opts.seed + max(1, opts.seeds)))
    with tempfile.TemporaryDirectory(prefix="dynbranch-train-") as tmp:
        training = None
        if any(a.warm for a in arms):
            progress(TRAINING_UNIT, False)
            config, training = await _train(opts, config, n, TRAIN_SCHEDULES[quick], rate,
                                            Path(tmp))
            progress(TRAINING_UNIT, True)
        per_seed = [await _seed(opts, workload, arms, s, config, n, warm, rate, progress)
                    for s in seeds]
    merged = {a.name: _merge([r[a.name] for _, r in per_seed]) for a in arms}
    ids = set(completed_everywhere(merged))
    bound, seed_bounds = _bound([r["floor"] for _, r in per_seed], ids,
                                workload.post_click_latency)
    seed_of = {a.workflow_id: s for (schedule, _), s in zip(per_seed, seeds, strict=True)
               for a in schedule.arrivals}
    summary = summarize(merged, seed=opts.seed, bound=bound, seed_of=seed_of)
    failed = sum(a["failed"] for a in summary.values())
    floor_s = sum(r.measured_s for r in merged["floor"].results if r.workflow_id in ids)
    return {
        "workload": opts.workload, "preset": opts.preset, "simulated": real is None,
        "engine": real.label if real is not None else f"sim {opts.preset}",
        "model": real.model_path if real is not None else config.model,
        "clock": clock, "hop_s": config.hop_s if virtual(clock) else None,
        "profile": opts.profile, "recurrence": knobs(workload),
        "decision_window": window_knobs(workload),
        "engines": config.engines,
        "time_scale": config.time_scale if not virtual(clock) else None, "workflows": n,
        "warmup_workflows": warm, "arrival": opts.arrival,
        "rate_per_s": rate if open_loop(opts.arrival) else None,
        "seed": opts.seed, "seeds": seeds, "ci_resampling": CI_RESAMPLING[len(seeds) > 1],
        "arm_order": {s: [a.name for a in rotated(arms, s)] for s in seeds},
        "top_k": config.top_k, "schedule_digest": ",".join(s.digest() for s, _ in per_seed),
        "latency": "post_click" if workload.post_click_latency else "end_to_end",
        "split": getattr(workload, "split", "all"), "leak_guard": guard,
        "overlap_weight": config.overlap_weight,
        "oracle": {**bound.as_json(), "full_over_floor": round(
            (floor_s - bound.total_s) / floor_s, 3) if floor_s > 0 else None,
            "per_seed_bound_s": [round(b.total_s, 3) for b in seed_bounds]},
        "stalls": {name: a["stalls"] for name, a in summary.items()},
        "marginal_fill_cost_s": marginal_fill_cost_s(merged, sorted(ids)),
        "warm_training": training,
        "best_fixed_k": best_fixed_k(summary),
        "arms": summary, "failed": failed, "ok": failed == 0,
        "decision_record": decision_record({"arms": summary, "rate_per_s": rate,
                                            "marginal_fill_cost_s": marginal_fill_cost_s(
                                                merged, sorted(ids))}),
        "outputs_equal_floor": all(a["outputs_equal_floor"] is not False
                                   for a in summary.values()),
    }


def resolve_load(quick: bool, opts: Options) -> tuple[Options, dict[str, Any] | None]:
    """``opts`` with its load level (if any) turned into the calibrated rate, on the engines
    that reach it (``load_levels.level_mesh``: fewer than asked where the data set cannot load
    them to the level), and what the calibration found; a level with --rate or a serial loop, or
    on a real engine, is a ``ValueError``."""
    if opts.load is None:
        return opts, None
    if opts.rate is not None:
        raise ValueError("give a load level or a rate, not both")
    if not open_loop(opts.arrival) or opts.engine != "sim":
        raise ValueError("a load level is a Poisson rate on the simulated engine")
    engines = opts.engines or MODES[quick][1]
    cal = Calibration(opts.workload, opts.preset, engines, opts.profile,
                      opts.hop_ms if opts.hop_ms is not None else DEFAULT_HOP_S * 1000)
    rate, cal, record = level_mesh(cal, opts.load)
    found = record["levels"][opts.load]
    return dataclasses.replace(opts, rate=rate, engines=cal.engines), {
        "level": opts.load, "rate_per_s": rate, "floor_ratio": found["floor_ratio"],
        "target": found["target"], "reached": reached(found), "engines": cal.engines,
        "engines_asked": engines, "idle_floor_s": record["idle_floor_s"],
        "calibration_seed": record["seed"], "cache": str(cache_path())}


def run(quick: bool, workload: str | None = None, *, seed: int = 0, arrival: str = "poisson",
        rate: float | None = None, progress: UnitProgress | None = None,
        **options: Any) -> dict[str, Any]:
    """Run the benchmark, print a readable table, return the JSON figures. ``progress`` is told
    of each unit (``UnitProgress``; ``planned_units`` counts them beforehand).

    A missing data set raises ``DataUnavailable`` naming the file (never a silent skip).
    """
    opts = Options(workload=workload or "routing", seed=seed, arrival=arrival, rate=rate,
                   **options)
    # Aborted fills end engine streams mid-span; OpenTelemetry logs each as an error it recovers
    # from ("Failed to detach context"). Keep the table readable.
    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    opts, load = resolve_load(quick, opts)
    result = asyncio.run(measure(quick, opts, progress or _silent))
    result["load_level"] = load
    _print(result)
    return result


def _fmt(value: float | None, width: int) -> str:
    return f"{value:>{width}.3f}" if value is not None else f"{'-':>{width}}"


def _window(result: dict[str, Any]) -> str:
    w = result["decision_window"]
    if w["decision_max_tokens"] is None:
        return "decision window: the template's"
    return f"decision window: {w['decision_stage']} capped at {w['decision_max_tokens']} tokens"


def _print_adoption(result: dict[str, Any]) -> None:
    """Per arm with fills: how long promoted fill steps still ran when their demands arrived,
    the adoptions, and the demands that found their fill running but did not get it."""
    rows = [(n, a["adoption"]) for n, a in result["arms"].items()
            if a["branches_opened"] or a["adoption"]["adoptions"]]
    if not rows:
        return
    print(f"  fills still running at their demand (simulated s); {_window(result)}")
    print(f"  {'arm':<15} {'steps':>5} {'>0':>6} {'p50_s':>7} {'p90_s':>7} {'max_s':>7} "
          f"{'adopted':>7} {'served':>6}  not served: stalled sooner deadline fill_failed "
          f"library")
    for name, a in rows:
        r = a["remaining_s"] or {}
        gave = a["wait_timeout"]
        print(f"  {name:<15} {r.get('n', '-'):>5} {_fmt(r.get('share_positive'), 6)} "
              f"{_fmt(r.get('p50_s'), 7)} {_fmt(r.get('p90_s'), 7)} {_fmt(r.get('max_s'), 7)} "
              f"{a['adoptions']:>7} {a['adoptions_served']:>6}  {gave['stalled']:>19} "
              f"{gave['sooner']:>6} {gave['deadline']:>8} {gave['fill_failed']:>11} "
              f"{a['library_after_wait']:>7}")


def _print_load(result: dict[str, Any]) -> None:
    """Per arm, what the engines felt over the schedule (virtual mesh only)."""
    rows = [(n, a["engine_load"]) for n, a in result["decision_record"]["arms"].items()
            if a.get("engine_load")]
    if not rows:
        return
    print(f"  engines over the schedule: {'arm':<15} {'step_ms':>8} {'running':>8} "
          f"{'fills':>6} {'waiting':>8} {'KV':>6}")
    for name, load in rows:
        print(f"  {'':<26} {name:<15} {_fmt(load['step_ms'], 8)} {_fmt(load['running'], 8)} "
              f"{_fmt(load['fills_running'], 6)} {_fmt(load['waiting'], 8)} "
              f"{_fmt(load['kv_used'], 6)}")


def _print(result: dict[str, Any]) -> None:
    load = (f"open-loop Poisson {result['rate_per_s']}/s" if open_loop(result["arrival"])
            else "serial closed loop")
    level = result.get("load_level")
    if level and level["idle_floor_s"] is None:
        load += f" (load {level['level']}: the workload's low-load rate)"
    elif level:
        load += (f" (load {level['level']}: the floor at {level['floor_ratio']}x its idle "
                 f"{level['idle_floor_s']} s in calibration"
                 + ("" if level["reached"] else f", short of {level['target']}x at the highest "
                    "rate tried")
                 + ("" if level["engines"] == level["engines_asked"] else
                    f"; on {level['engines']} of the {level['engines_asked']} engines asked: the "
                    "data set cannot load more to this level") + ")")
    if result["simulated"] and virtual(result["clock"]):
        engine = (f"{result['engines']} x {result['preset']} {CLOCKS[result['clock']].where}, "
                  f"{result['hop_s'] * 1000:g} ms per hop (SIMULATED engine; latency in "
                  f"simulated s, ")
    elif result["simulated"]:
        where = CLOCKS[result["clock"]].where
        engine = (f"{result['engines']} x {result['preset']} {where} at time scale "
                  f"{result['time_scale']} (SIMULATED engine; latency in simulated s, ")
    else:
        engine = (f"{result['engines']} x REAL {result['engine']} (random-weight tiny model; "
                  f"latency in wall s, ")
    print(f"arms: {result['workload']}, {result['workflows']} workflows x seeds "
          f"{result['seeds']}, {load}, {engine}"
          f"{result['latency'].replace('_', ' ')}); profile {result['profile']}; oracle bound "
          f"{result['oracle']['bound_s']} s (oracle full/floor "
          f"{result['oracle']['full_over_floor']}); CIs resample {result['ci_resampling']}")
    best = result["best_fixed_k"]
    print(f"  envelope: {best['arm']} (K {best['k']}, {best['ratio_to_floor']:.3f}); regret: "
          "an arm's ratio minus the envelope's [paired 95% CI]" if best else
          "  envelope: no fixed K ran (c1, fixed1, fixed, fixed3, always)")
    print(f"  {'arm':<15} {'mean_s':>8} {'ratio':>7} {'ci95':>15} {'oracle':>7} "
          f"{'regret [ci95]':>25} {'issued/wf':>11} {'consumed/wf':>13} {'stalls':>6}  "
          f"outputs = floor")
    for name, arm in result["arms"].items():
        ci = arm["ratio_ci95"]
        ci_text = f"[{ci[0]:.3f},{ci[1]:.3f}]" if ci else "-"
        same = {None: "(ref)", True: "yes", False: "NO"}[arm["outputs_equal_floor"]]
        regret = regret_text(arm.get("envelope_regret")) or "-"
        print(f"  {name:<15} {_fmt(arm['mean_s'], 8)} {_fmt(arm['ratio_to_floor'], 7)} "
              f"{ci_text:>15} {_fmt(arm['oracle_share'], 7)} {regret:>25} "
              f"{arm['fills_issued']:>11.3f} {arm['fills_consumed']:>13.3f} {arm['stalls']:>6}  "
              f"{same}" + (f"  ({arm['failed']} FAILED)" if arm["failed"] else ""))
    _print_adoption(result)
    _print_load(result)
    note = next((a["quantile_note"] for a in result["arms"].values() if a["quantile_note"]), "")
    if note:
        print(f"  quantiles withheld: {note}")
    if not result["ok"]:
        print(f"  RUN FAILED: {result['failed']} failed workflow(s), left out of every mean")


__all__ = ["MODES", "RATES", "REAL_MODES", "TRAINING_UNIT", "TRAIN_SCHEDULES", "Options",
           "UnitProgress", "measure", "planned_units", "run", "training_schedules"]
