"""Run one schedule under several experiment arms, each on a fresh mesh (DESIGN.md §6).

Arms are combinations of the gateway's mechanisms: ``floor`` (no reuse, no fill: the no-reuse
floor of dynbranch §5.1), ``c1`` (exact subgraph reuse only), ``c2`` (early fill only) and ``full``.
Every arm replays the *same* schedule (instances, workflow ids, arrival times) against its own
mesh: a fresh csl store, fresh engines (empty KV caches) and a fresh gateway, so arms share no
cache. Three meshes (``loadgen.meshes``), one code path (``MeshConfig.clock``):

- ``virtual`` (the default): ``loadgen.meshes.virtual``, every service's core in one process on a
  virtual clock; latency counts simulated engine time, waits and ``hop_s`` per cross-service
  call, never the mesh's own CPU. Deterministic: the same command gives the same ratios.
- ``live``: ``loadgen.meshes.live``, the csl, each engine agent, admission and the gateway are
  separate ``grpc.aio`` servers on loopback ports in this process, spoken to over real gRPC,
  paced in wall time at ``time_scale`` (the cross-check; every duration the services use is
  scaled into it).
- ``processes``: the same services each as its own process (``loadgen.meshes.processes``, as
  ``dynbranch up`` starts them), in wall time at ``time_scale``; counters from the gateway's
  Prometheus endpoint (no engine-second figures).

In-process keeps start-up short and gives direct access to the gateway's fill counters
(``BranchManager.counters``). Admission is the arm's policy (``ArmSpec.admission``) or the
gateway's in-process fixed policy (top-K fills).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.arms.equivalence import compare_outputs
from loadgen.arms.recording import CallRecord, RecordingTrace, WholeRequestCacheClient
from loadgen.arms.specs import ARM_SPECS, ARMS, ArmSpec, spec_of
from loadgen.arms.stats import quantile
from loadgen.meshes.clocks import CLOCKS, default_clock
from loadgen.meshes.config import (
    COUNTERS,
    MeshConfig,
    admission_settings,
    core_counters,
    gateway_settings,
    with_admission,
)
from loadgen.meshes.engine_load import EngineLoadSampler
from loadgen.meshes.live import in_process_mesh
from loadgen.meshes.processes import gateway_counters, process_mesh
from loadgen.meshes.virtual import run_virtual, virtual_mesh
from loadgen.workloads.base import STALL_S, SimClock, WorkflowResult, Workload
from loadgen.workloads.schedule import Schedule, ScheduledWorkflow
from services.gateway import DynbranchClient

log = logging.getLogger(__name__)



@dataclass(slots=True)
class ArmResult:
    """What one arm did with the schedule."""

    arm: str
    schedule_digest: str
    results: list[WorkflowResult]
    counters: dict[str, int] = field(default_factory=dict)
    #: Per workflow id, its calls as the oracle bound reads them (``loadgen.arms.recording``).
    calls: dict[str, tuple[CallRecord, ...]] = field(default_factory=dict)
    #: Calls the whole-request cache answered (whole_request arm only).
    cache_hits: int = 0
    #: The admission policy's own account of its decisions (``Policy.account``; {} without one).
    admission: dict[str, Any] = field(default_factory=dict)
    #: Per fill step promoted over the schedule, how long it still ran when its demand arrived
    #: (simulated s, 0 when it had ended: ``Promotions.remaining_s``); None where the gateway
    #: runs in another process.
    remaining_s: list[float] | None = None
    #: Request names the warm-up called on this mesh before the schedule (the oracle bound
    #: counts them as already reusable).
    warmup_names: frozenset[str] = frozenset()
    #: What the engines felt over the schedule (``engine_load.EngineLoadSampler``; the virtual
    #: mesh and real engines on the live mesh, {} elsewhere).
    engine_load: dict[str, Any] = field(default_factory=dict)
    #: The admission policy's Action 0 answers over the schedule, as (seconds since the
    #: schedule started, opened, the branch's mean break-even p* or None): ``Policy.decisions``
    #: where the policy keeps them (virtual mesh).
    decisions: list[tuple[float, bool, float | None]] = field(default_factory=list)


# -- running a schedule -----------------------------------------------------------------------

async def _run_workflow(client: Any, workload: Workload, arrival: ScheduledWorkflow,
                        clock: SimClock, started: float, fail_stalls: bool
                        ) -> tuple[WorkflowResult, tuple[CallRecord, ...]]:
    trace = RecordingTrace(client, workload.template, arrival.workflow_id, clock,
                           max_tokens=workload.stage_max_tokens)
    error = ""
    try:
        await workload.run(trace, arrival.instance)
    except Exception as exc:  # noqa: BLE001 - a failed workflow is recorded, then fails the run
        error = f"{type(exc).__name__}: {exc}"
        log.warning("workflow %s failed: %s", arrival.workflow_id, error)
    latency = clock.sim_since(started)
    stages = tuple(trace.stages)
    stalled = [st for st in stages if st.stalled]
    if stalled and fail_stalls and not error:  # a stall fails its workflow: never averaged in
        worst = max(stalled, key=lambda st: st.outside_s)
        error = (f"stall: {len(stalled)} call(s) over {STALL_S} s outside the engine "
                 f"(worst {worst.stage}: {worst.outside_s:.3f} s)")
        log.warning("workflow %s: %s", arrival.workflow_id, error)
    result = WorkflowResult(arrival.workflow_id, getattr(arrival.instance, "key", ""), stages,
                            latency, workload.measured(stages, latency), error)
    return result, tuple(trace.calls)


async def _run_all(client: Any, workload: Workload, schedule: Schedule, clock: SimClock,
                   fail_stalls: bool) -> list[tuple[WorkflowResult, tuple[CallRecord, ...]]]:
    if schedule.serial:
        return [await _run_workflow(client, workload, a, clock, clock.wall(), fail_stalls)
                for a in schedule.arrivals]
    start, tasks = clock.wall(), []
    for a in schedule.arrivals:
        due = start + clock.to_wall(a.at_s)
        await asyncio.sleep(max(0.0, due - clock.wall()))
        tasks.append(asyncio.create_task(_run_workflow(client, workload, a, clock, due,
                                                       fail_stalls)))
    return list(await asyncio.gather(*tasks))


async def run_schedule(target: str | DynbranchClient, workload: Workload, schedule: Schedule,
                       clock: SimClock, *, whole_request_cache: bool = False,
                       calls: dict[str, tuple[CallRecord, ...]] | None = None,
                       cache_hits: list[int] | None = None,
                       fail_stalls: bool = False) -> list[WorkflowResult]:
    """Run every arrival of ``schedule`` against the gateway at ``target`` (an address, or a
    client such as the virtual mesh's); results in order.

    Open loop: each workflow starts at its arrival time and its latency counts from then.
    Serial: one after another. ``calls`` (when given) receives each workflow's call records;
    ``whole_request_cache`` puts an exact whole-request cache in front of the gateway;
    ``fail_stalls`` fails every workflow with a stalled call (each result counts its stalls).
    """
    owned = isinstance(target, str)
    sdk = DynbranchClient(target) if isinstance(target, str) else target
    try:
        sdk.use_builtin(workload.template)
        client: Any = WholeRequestCacheClient(sdk) if whole_request_cache else sdk
        done = await _run_all(client, workload, schedule, clock, fail_stalls)
    finally:
        if owned:
            await sdk.close()
    if calls is not None:
        calls.update((r.workflow_id, c) for r, c in done)
    if cache_hits is not None and whole_request_cache:
        cache_hits.append(client.hits)
    return [r for r, _ in done]


async def run_arm(arm: str | ArmSpec, workload: Workload, schedule: Schedule,
                  config: MeshConfig, warmup: Schedule | None = None) -> ArmResult:
    """Run ``schedule`` under ``arm`` on a fresh mesh of ``config.clock``, after ``warmup`` (run
    on the same mesh, serially, not measured)."""
    if config.clock not in CLOCKS:
        raise ValueError(f"clock must be one of {tuple(CLOCKS)}, got {config.clock!r}")
    clock = CLOCKS[config.clock]
    if not clock.real_engines and (config.real is not None or config.draft_model):
        raise ValueError(f"the {config.clock} mesh runs simulated engines only: use "
                         f"clock={default_clock(real=True)!r} for a real engine or a draft "
                         "model")
    spec = spec_of(arm)
    config = with_admission(config, spec)
    if clock.virtual:
        # its own stdlib loop under a virtual clock, on a worker thread (this loop runs on)
        return await asyncio.to_thread(run_virtual, lambda: _virtual_arm(
            spec, workload, schedule, config, warmup))
    if clock.processes:
        return await _process_arm(spec, workload, schedule, config, warmup)
    return await _live_arm(spec, workload, schedule, config, warmup)


def _remaining(core: Any, clock: SimClock) -> Callable[[], list[float]]:
    """The gateway core's record of how long matched fill steps still ran, in simulated s
    (``Promotions.remaining_s``, kept in the run's clock; a bench's schedule stays far below
    its bound, so what a schedule added is its tail)."""
    branches = getattr(core, "branches", None)
    if branches is None:
        return list
    return lambda: [clock.to_sim(s) for s in branches.promotions.remaining_s]


async def _measure(spec: ArmSpec, workload: Workload, schedule: Schedule, config: MeshConfig,
                   warmup: Schedule | None, clock: SimClock, target: str | DynbranchClient,
                   counters: Callable[[], Awaitable[dict[str, int]]],
                   account: Callable[[], dict[str, Any]] = dict,
                   remaining: Callable[[], list[float]] | None = None,
                   sampler: EngineLoadSampler | None = None,
                   policy: Any = None) -> ArmResult:
    """What every mesh does with an arm once it runs: the warm-up, then the schedule, the
    gateway's counters, fills' remaining times, the engines' load and the policy's timed
    decisions over the schedule alone, and the admission policy's account."""
    warm_calls: dict[str, tuple[CallRecord, ...]] = {}
    if warmup is not None and warmup.arrivals:
        await run_schedule(target, workload, warmup, clock, calls=warm_calls)
    before = await counters()
    kept = len(remaining()) if remaining is not None else 0
    calls: dict[str, tuple[CallRecord, ...]] = {}
    hits: list[int] = []
    started = clock.wall()
    if sampler is not None:
        sampler.start()
    results = await run_schedule(target, workload, schedule, clock, calls=calls,
                                 whole_request_cache=spec.whole_request_cache,
                                 cache_hits=hits, fail_stalls=config.fail_stalls)
    load = await sampler.stop() if sampler is not None else {}
    after = await counters()
    timed = getattr(policy, "decisions", None)
    decisions = [(round(clock.to_sim(at - started), 6), opened, even)
                 for at, opened, even in (timed() if timed is not None else ())
                 if at >= started]
    return ArmResult(spec.name, schedule.digest(), results,
                     {k: v - before.get(k, 0) for k, v in after.items()}, calls, sum(hits),
                     account(), remaining()[kept:] if remaining is not None else None,
                     frozenset(c.name for calls in warm_calls.values() for c in calls),
                     load, decisions)


#: Gateway settings the process mesh passes on (``_gateway_settings`` computes them); the
#: corpus is the mesh's corpus service there, as in ``dynbranch up``.
_PROCESS_GATEWAY_KEYS = ("c1", "c2", "top_k", "fill_wait_s", "branch_ttl_s", "shadow_ttl_s",
                         "fill_timeout_s", "overlap_weight")


async def _process_arm(spec: ArmSpec, workload: Workload, schedule: Schedule,
                       config: MeshConfig, warmup: Schedule | None) -> ArmResult:
    with tempfile.TemporaryDirectory(prefix=f"dynbranch-parm-{spec.name}-") as tmp:
        settings = gateway_settings(config, spec, ["process"], "process",
                                    workload.corpus_source, Path(tmp))
        gateway = {k: v for k in _PROCESS_GATEWAY_KEYS if (v := getattr(settings, k)) != ""}
        admission = None
        if config.admission:
            a = admission_settings(config, [])
            admission = {**dict(config.admission_settings), "policy": a.policy,
                         "window_s": a.window_s, "max_age_s": a.max_age_s,
                         "load_interval_s": a.load_interval_s}
        async with process_mesh(engines=config.engines, model=config.model,
                                preset=config.preset, time_scale=config.time_scale,
                                gateway=gateway, admission=admission,
                                corpus_source=workload.corpus_source,
                                data_dir=config.data_dir or "") as mesh:
            target = mesh.child("gateway")

            async def counters() -> dict[str, int]:
                return await asyncio.to_thread(gateway_counters, target.metrics_port or 0,
                                               COUNTERS)

            return await _measure(spec, workload, schedule, config, warmup,
                                  SimClock(config.time_scale), target.address, counters)


async def _virtual_arm(spec: ArmSpec, workload: Workload, schedule: Schedule,
                       config: MeshConfig, warmup: Schedule | None) -> ArmResult:
    with tempfile.TemporaryDirectory(prefix=f"dynbranch-varm-{spec.name}-") as tmp:
        folder = Path(tmp)
        settings = gateway_settings(config, spec, ["in-process"], "in-process",
                                    workload.corpus_source, folder)
        admission = admission_settings(config, []) if config.admission else None
        async with virtual_mesh(settings, folder, engines=config.engines, model=config.model,
                                preset=config.preset, admission=admission,
                                hop_s=config.hop_s,
                                state_out=Path(config.state_out) if config.state_out
                                else None, output_len_range=config.output_len_range) as mesh:
            async def counters() -> dict[str, int]:
                return core_counters(mesh.core)

            clock = SimClock(1.0, now=asyncio.get_running_loop().time)
            policy = mesh.policy
            return await _measure(spec, workload, schedule, config, warmup, clock,
                                  mesh.client, counters,
                                  policy.account if policy is not None else dict,
                                  _remaining(mesh.core, clock),
                                  EngineLoadSampler(mesh.backends), policy)


async def _live_arm(spec: ArmSpec, workload: Workload, schedule: Schedule,
                    config: MeshConfig, warmup: Schedule | None) -> ArmResult:
    async with in_process_mesh(config, spec, workload.corpus_source) as mesh:
        async def counters() -> dict[str, int]:
            return mesh.counters()

        policy = mesh.admission.policy if mesh.admission is not None else None
        clock = SimClock(config.time_scale)
        return await _measure(spec, workload, schedule, config, warmup, clock, mesh.address,
                              counters, policy.account if policy is not None else dict,
                              _remaining(mesh.gateway.core, clock),
                              # a real engine's load; a live sim's busy time is simulated
                              # seconds against this loop's wall clock, so it is not sampled
                              EngineLoadSampler(mesh.backends) if config.real is not None
                              else None)


#: Seed of the train-split schedule a warm arm's controller learns from (disjoint from every
#: measured seed and warm-up).
TRAIN_SEED = 2_000_003


async def train_warm(train: Workload, schedules: Sequence[Schedule], config: MeshConfig,
                     folder: Path) -> tuple[MeshConfig, dict[str, Any]]:
    """Run priced admission over ``schedules`` (requests of the *train* split ``train``) in
    turn, each on a fresh mesh that starts from what the one before learned (a restart:
    ``PricedController.restore``), the first cold, and keep what the last learned in ``folder``:
    ``config`` for the warm arms, which start from that state, and what trained it. No measured
    workflow is among them, and nothing learned on a measured seed is ever kept.

    Several schedules as long as a measured seed's, not one long one: the predictor learns
    online, so how often its runners-up are selected depends on how much it has seen (Routing's
    train split, rank-1 candidates alone at their rank: selected 9% in the first 48 workflows
    of a schedule, 13% in the first 96, over 15 seeds), and one schedule's requests, replayed,
    weigh in it several times (issue 37: a warm controller trained on one schedule of 96 rated
    them at 0.55 where a measured seed selected 0.04); as many as the train split has fresh
    requests for (``bench.arms.training_schedules``), not the same requests again."""
    if not schedules:
        raise ValueError("train_warm needs at least one schedule")
    path = folder / "learned-state.json"
    failed, warm = 0, ""
    for i, schedule in enumerate(schedules):
        out = folder / f"learned-state-{i}.json"
        spec = ARM_SPECS["full_warm" if warm else "full"]
        result = await run_arm(spec, train, schedule,
                               dataclasses.replace(config, warm_state=warm, state_out=str(out)))
        failed += sum(1 for r in result.results if r.error)
        warm = str(out)
    Path(warm).replace(path)
    return dataclasses.replace(config, warm_state=str(path)), {
        "workflows": sum(len(s.arrivals) for s in schedules), "schedules": len(schedules),
        "split": "train", "seeds": [s.seed for s in schedules], "failed": failed,
        "schedule_digests": [s.digest() for s in schedules]}


async def run_arms(workload: Workload, schedule: Schedule, config: MeshConfig,
                   arms: Iterable[str | ArmSpec] = tuple(ARMS),
                   warmup: Schedule | None = None) -> dict[str, ArmResult]:
    """Run the same schedule under each arm in turn (one arm's mesh at a time)."""
    out: dict[str, ArmResult] = {}
    for arm in arms:
        result = await run_arm(arm, workload, schedule, config, warmup)
        out[result.arm] = result
    return out


# -- comparing arms ---------------------------------------------------------------------------

def mismatches(arm: ArmResult, floor: ArmResult) -> list[str]:
    """Workflow ids whose outputs differ from the floor's (or that failed in either arm)."""
    return [m.workflow_id for m in compare_outputs(arm.results, floor.results)]


__all__ = ["ArmResult", "TRAIN_SEED", "mismatches", "quantile", "run_arm", "run_arms",
           "run_schedule", "train_warm"]
