"""Run one schedule under several experiment arms, each on a fresh mesh (DESIGN.md §6).

Arms are combinations of the gateway's mechanisms: ``floor`` (no reuse, no fill: the no-reuse
floor of dynbranch §5.1), ``c1`` (exact subgraph reuse only), ``c2`` (early fill only) and ``full``.
Every arm replays the *same* schedule (instances, workflow ids, arrival times) against its own
mesh: a fresh csl store, fresh engines (empty KV caches) and a fresh gateway, so arms share no
cache. Two meshes, one code path (``MeshConfig.clock``):

- ``virtual`` (the default): ``loadgen.virtual_mesh``, every service's core in one process on a
  virtual clock; latency counts simulated engine time, waits and ``hop_s`` per cross-service
  call, never the mesh's own CPU. Deterministic: the same command gives the same ratios.
- ``live``: the csl, each engine agent, admission and the gateway are separate ``grpc.aio``
  servers on loopback ports in this process, spoken to over real gRPC, paced in wall time at
  ``time_scale`` (the cross-check; every duration the services use is scaled into it).
- ``processes``: the same services each as its own process (``loadgen.process_mesh``, as
  ``dynbranch up`` starts them), in wall time at ``time_scale``; counters from the gateway's
  Prometheus endpoint (no engine-second figures).

In-process keeps start-up short and gives direct access to the gateway's fill counters
(``BranchManager.counters``). Admission is the arm's policy (``ArmSpec.admission``) or the
gateway's in-process fixed policy (top-K fills).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.arm_set import ARM_SPECS, ArmSpec
from loadgen.engine_load import EngineLoadSampler
from loadgen.equivalence import compare_outputs
from loadgen.process_mesh import gateway_counters, process_mesh
from loadgen.real_engines import RealEngine, engine_state, real_backend
from loadgen.recording import CallRecord, RecordingTrace, WholeRequestCacheClient
from loadgen.stats import quantile
from loadgen.virtual_mesh import DEFAULT_HOP_S, run_virtual, virtual_mesh
from loadgen.workloads.base import STALL_S, SimClock, WorkflowResult, Workload
from loadgen.workloads.schedule import Arrival, Schedule
from services.admission import AdmissionSettings
from services.admission import build_runtime as build_admission
from services.common.runtime.server import freeze_startup_heap
from services.common.values.generation import Priority
from services.csl import CslSettings
from services.csl import build_runtime as build_csl
from services.engine_agent import EngineAgentSettings, make_backend
from services.engine_agent import build_runtime as build_engine
from services.gateway import PROMOTION_COUNTERS, DynbranchClient, GatewaySettings
from services.gateway import build_runtime as build_gateway

log = logging.getLogger(__name__)

#: Mechanism arm name → (c1, c2) (``ArmSpec.mechanism``).
ARMS: dict[str, tuple[bool, bool]] = {n: (s.c1, s.c2) for n, s in ARM_SPECS.items() if s.mechanism}
#: The meshes an arm can run on (module docstring).
CLOCKS = ("virtual", "live", "processes")
#: Smallest time scale of the live mesh: below it the mesh's own CPU time, multiplied by
#: ``1 / time_scale``, moves the ratios more than the effects they measure.
LIVE_MIN_TIME_SCALE = 0.5
COUNTERS = ("opened", "fills_issued", "fills_consumed", "stages_promoted", "fills_discarded",
            "fills_aborted", "canonical_engine_ms", "fill_engine_ms", "ambiguous", "joined",
            *PROMOTION_COUNTERS)


@dataclass(frozen=True, slots=True)
class MeshConfig:
    """The mesh every arm gets: simulated engines and gateway knobs."""

    engines: int = 2
    model: str = "qwen3-32b"
    preset: str = "qwen3-32b-h200"
    #: Wall seconds per simulated second of the live mesh's engines (latency is reported in
    #: simulated s); the virtual mesh ignores it (its clock is simulated seconds).
    time_scale: float = 0.05
    #: "virtual" (one process on a virtual clock) or "live" (gRPC servers in wall time).
    clock: str = "virtual"
    #: The virtual mesh's modelled cost of one cross-service call, simulated seconds.
    hop_s: float = DEFAULT_HOP_S
    #: A stalled call fails its workflow (``STALL_S``); off only where timing is not what a run
    #: measures (e.g. value equivalence on a live mesh at a fine time scale).
    fail_stalls: bool = True
    #: Fills per branch under the gateway's fixed admission policy.
    top_k: int = 2
    #: The gateway's ``fill_wait_s`` in simulated seconds, at its default: the longest a demand
    #: waits for its branch to be opened (admission's answer) and for a fill another gateway
    #: replica runs. A fill running on this gateway is adopted, with no such cap (``adoption``).
    fill_wait_sim_s: float = 1.0
    #: Life of a branch record in simulated seconds (its final admission report is sent then).
    branch_ttl_sim_s: float = 120.0
    data_dir: str | None = None
    #: Admission policy of an in-process admission service following the engines' load
    #: ("priced", "fixed", "always", ...); "" keeps the gateway's in-process fixed policy.
    admission: str = ""
    #: Admission service settings besides the policy and the engines (``AdmissionSettings``).
    admission_settings: tuple[tuple[str, Any], ...] = ()
    #: A draft model served by one more engine agent, and the gateway's drafted predictor on it
    #: ("" keeps the lexical predictors).
    draft_model: str = ""
    #: The lexical predictor's word-overlap weight (``bench arms`` passes the train-fitted one).
    overlap_weight: float = 2.0
    draft_preset: str = "qwen3-0.6b-h200"
    #: A real engine under every agent ("vllm" embedded, "sglang" server beside it) on this
    #: model folder; None keeps the simulated engines (``loadgen.real_engines``).
    real: RealEngine | None = None
    #: The learned admission state a warm arm (``ArmSpec.warm``) starts from (virtual clock).
    warm_state: str = ""
    #: Where the virtual mesh saves its priced controller's learned state at the end ("": not).
    state_out: str = ""


@dataclass(slots=True)
class ArmResult:
    """What one arm did with the schedule."""

    arm: str
    schedule_digest: str
    results: list[WorkflowResult]
    counters: dict[str, int] = field(default_factory=dict)
    #: Per workflow id, its calls as the oracle bound reads them (``loadgen.recording``).
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
    #: What the engines felt over the schedule (``engine_load.EngineLoadSampler``; virtual mesh
    #: only, {} elsewhere).
    engine_load: dict[str, Any] = field(default_factory=dict)
    #: The admission policy's Action 0 answers over the schedule, as (seconds since the
    #: schedule started, opened, the branch's mean break-even p* or None): ``Policy.decisions``
    #: where the policy keeps them (virtual mesh).
    decisions: list[tuple[float, bool, float | None]] = field(default_factory=list)


@dataclass(slots=True)
class InProcessMesh:
    """Addresses of a running in-process mesh and its gateway runtime."""

    gateway: Any
    address: str
    #: The in-process admission service's runtime (None: the gateway's fixed policy).
    admission: Any = None
    #: Each engine agent's backend (to check what it still holds at the end of a run).
    backends: list[Any] = field(default_factory=list)

    async def engine_states(self) -> list[dict[str, int]]:
        """Per engine: requests still running or waiting, leases and leased blocks held."""
        return [await engine_state(b) for b in self.backends]

    def counters(self) -> dict[str, int]:
        """The gateway's branch counters (zeros when early fill is off)."""
        return _counters(self.gateway.core)


def _counters(core: Any) -> dict[str, int]:
    """A gateway core's branch counters, engine milliseconds per priority and joined demands."""
    branches = getattr(core, "branches", None)
    found = dict(branches.counters) if branches is not None else {}
    spent = core.stages.executor.engine_s  # engine seconds per priority
    found["canonical_engine_ms"] = round(1000 * spent.get(Priority.CANONICAL, 0.0))
    found["fill_engine_ms"] = round(1000 * spent.get(Priority.FILL, 0.0))
    found["joined"] = core.stages.single_flight.joined
    return {name: int(found.get(name, 0)) for name in COUNTERS}


def _engine_settings(config: MeshConfig, i: int) -> EngineAgentSettings:
    return EngineAgentSettings(engine_id=f"engine-{i}", model=config.model, preset=config.preset,
                               time_scale=config.time_scale, metrics_port=-1, grace_s=0.2,
                               log_level="WARNING")


def _scale(config: MeshConfig) -> float:
    """Clock seconds per simulated second: a wall-time mesh's time scale, 1 on the virtual one."""
    return 1.0 if config.clock == "virtual" else config.time_scale


def with_admission(config: MeshConfig, spec: ArmSpec) -> MeshConfig:
    """``config`` with the arm's admission policy and settings (the admission baselines are the
    full arm with another policy or setting); unchanged for an arm without one."""
    if not spec.admission:
        return config
    settings = {**dict(config.admission_settings), **dict(spec.settings)}
    if spec.warm:
        if not config.warm_state or config.clock != "virtual":
            raise ValueError(f"arm {spec.name} starts from learned state: it needs the virtual "
                             "clock and MeshConfig.warm_state (bench arms trains it)")
        settings["state_path"] = config.warm_state
    return dataclasses.replace(config, admission=spec.admission,
                               admission_settings=tuple(settings.items()))


def _admission_settings(config: MeshConfig, engines: list[str]) -> AdmissionSettings:
    """The arm's admission service; its durations (H, the record age limit) are simulated
    seconds scaled into the run's clock, unless the config sets them itself."""
    given = dict(config.admission_settings)
    scale = _scale(config)
    defaults = AdmissionSettings.model_fields
    given.setdefault("window_s", defaults["window_s"].default * scale)
    # the load streams keep their wall interval; a report is never too old before three of them
    interval = given.setdefault("load_interval_s", defaults["load_interval_s"].default)
    given.setdefault("max_age_s", max(defaults["max_age_s"].default * scale, 3 * interval))
    return AdmissionSettings(policy=config.admission, engines=engines, metrics_port=-1,
                             grace_s=0.2, log_level="WARNING", **given)


def _gateway_settings(config: MeshConfig, arm: ArmSpec, engines: list[str], csl: str,
                      corpus_source: str, folder: Path, admission: str = "") -> GatewaySettings:
    c1, c2 = arm.c1, arm.c2
    scale = _scale(config)
    corpus = {"corpus_path": str(folder / "corpus"), "corpus_source": corpus_source,
              "data_dir": config.data_dir or ""} if corpus_source else {}
    draft = {"predictor": "draft", "draft_model": config.draft_model} \
        if config.draft_model else {}
    return GatewaySettings(engines=engines, csl=csl, c1=c1, c2=c2, top_k=config.top_k,
                           fill_wait_s=min(60.0, config.fill_wait_sim_s * scale),
                           branch_ttl_s=max(0.5, config.branch_ttl_sim_s * scale),
                           shadow_ttl_s=max(0.5, 60.0 * scale),
                           fill_timeout_s=max(1.0, 120.0 * scale),
                           metrics_port=-1, grace_s=0.2, auth=False, log_level="WARNING",
                           admission=admission, overlap_weight=config.overlap_weight,
                           **corpus, **draft)


@contextlib.asynccontextmanager
async def in_process_mesh(config: MeshConfig, arm: str | ArmSpec, corpus_source: str = "",
                          span_exporter: Any = None) -> AsyncIterator[InProcessMesh]:
    """A fresh csl, ``config.engines`` engine agents and a gateway configured for ``arm``.

    A name from ``ARMS`` keeps ``config.admission``; an ``ArmSpec`` with an admission policy
    replaces it (the admission baselines are the full arm with another policy)."""
    arm = _spec(arm)
    config = with_admission(dataclasses.replace(config, clock="live"), arm)  # wall time
    with tempfile.TemporaryDirectory(prefix=f"dynbranch-arm-{arm.name}-") as tmp:
        folder = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            csl = await build_csl(CslSettings(data_dir=str(folder / "csl"), metrics_port=-1,
                                              grace_s=0.2, sync=False, log_level="WARNING"))
            await _started(stack, csl)
            backends = [await _backend(config, i, folder, stack) for i in range(config.engines)]
            engines = await asyncio.gather(*(build_engine(_engine_settings(config, i), backend=b)
                                             for i, b in enumerate(backends)))
            for engine in engines:
                await _started(stack, engine)
            targets = [e.address for e in engines]
            if config.draft_model:
                drafter = await build_engine(EngineAgentSettings(
                    engine_id="draft-0", model=config.draft_model, preset=config.draft_preset,
                    time_scale=config.time_scale, metrics_port=-1, grace_s=0.2,
                    log_level="WARNING"))
                await _started(stack, drafter)
                targets.append(drafter.address)
            admission = None
            if config.admission:
                admission = await build_admission(_admission_settings(
                    config, [e.address for e in engines]))
                await _started(stack, admission)
            gateway = await build_gateway(_gateway_settings(
                config, arm, targets, csl.address, corpus_source, folder,
                admission.address if admission is not None else ""),
                span_exporter=span_exporter)
            await _started(stack, gateway)
            freeze_startup_heap()  # as each service process does once it serves
            stack.callback(gc.unfreeze)
            yield InProcessMesh(gateway, gateway.address, admission, backends)


async def _backend(config: MeshConfig, i: int, folder: Path,
                   stack: contextlib.AsyncExitStack) -> Any:
    """The engine agent's backend (unstarted): the settings' sim, or a real engine."""
    if config.real is None:
        return make_backend(_engine_settings(config, i))
    return await real_backend(config.real, config.model, i, folder, stack)


def _spec(arm: str | ArmSpec) -> ArmSpec:
    if isinstance(arm, ArmSpec):
        return arm
    if arm in ARMS:
        return ArmSpec(arm, *ARMS[arm])
    if arm in ARM_SPECS:
        return ARM_SPECS[arm]
    raise KeyError(f"unknown arm {arm!r}; known: {', '.join(ARM_SPECS)}")


async def _started(stack: contextlib.AsyncExitStack, runtime: Any) -> None:
    """Start ``runtime`` and shut it down when ``stack`` unwinds (last started, first stopped)."""
    await runtime.start()
    stack.push_async_callback(runtime.shutdown)


# -- running a schedule -----------------------------------------------------------------------

async def _run_workflow(client: Any, workload: Workload, arrival: Arrival, clock: SimClock,
                        started: float, fail_stalls: bool
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
        raise ValueError(f"clock must be one of {CLOCKS}, got {config.clock!r}")
    if config.clock != "live" and (config.real is not None or config.draft_model):
        raise ValueError(f"the {config.clock} mesh runs simulated engines only: use "
                         "clock='live' for a real engine or a draft model")
    spec = _spec(arm)
    config = with_admission(config, spec)
    if config.clock == "virtual":
        # its own stdlib loop under a virtual clock, on a worker thread (this loop runs on)
        return await asyncio.to_thread(run_virtual, lambda: _virtual_arm(
            spec, workload, schedule, config, warmup))
    if config.clock == "processes":
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
        settings = _gateway_settings(config, spec, ["process"], "process",
                                     workload.corpus_source, Path(tmp))
        gateway = {k: v for k in _PROCESS_GATEWAY_KEYS if (v := getattr(settings, k)) != ""}
        admission = None
        if config.admission:
            a = _admission_settings(config, [])
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
        settings = _gateway_settings(config, spec, ["in-process"], "in-process",
                                     workload.corpus_source, folder)
        admission = _admission_settings(config, []) if config.admission else None
        async with virtual_mesh(settings, folder, engines=config.engines, model=config.model,
                                preset=config.preset, admission=admission,
                                hop_s=config.hop_s,
                                state_out=Path(config.state_out) if config.state_out
                                else None) as mesh:
            async def counters() -> dict[str, int]:
                return _counters(mesh.core)

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
                              _remaining(mesh.gateway.core, clock))


#: Seed of the train-split schedule a warm arm's controller learns from (disjoint from every
#: measured seed and warm-up).
TRAIN_SEED = 2_000_003


async def train_warm(train: Workload, schedule: Schedule, config: MeshConfig, folder: Path
                     ) -> tuple[MeshConfig, dict[str, Any]]:
    """Run priced admission cold over ``schedule`` (requests of the *train* split ``train``)
    and keep what its controller learned in ``folder``: ``config`` for the warm arms, which
    start from that state, and what trained it. No measured workflow is among them, and
    nothing learned on a measured seed is ever kept."""
    path = folder / "learned-state.json"
    result = await run_arm(ARM_SPECS["full"], train, schedule,
                           dataclasses.replace(config, state_out=str(path)))
    return dataclasses.replace(config, warm_state=str(path)), {
        "workflows": len(schedule.arrivals), "split": "train", "seed": schedule.seed,
        "failed": sum(1 for r in result.results if r.error),
        "schedule_digest": schedule.digest()}


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


__all__ = [
    "ARMS", "CLOCKS", "COUNTERS", "LIVE_MIN_TIME_SCALE", "ArmResult", "InProcessMesh",
    "TRAIN_SEED", "MeshConfig", "in_process_mesh", "mismatches", "quantile", "run_arm",
    "run_arms", "run_schedule", "train_warm", "with_admission",
]
