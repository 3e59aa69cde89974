"""Run one schedule under several experiment arms, each on a fresh mesh (DESIGN.md §6).

Arms are combinations of the gateway's mechanisms: ``floor`` (no reuse, no fill: the no-reuse
floor of dynbranch §5.1), ``c1`` (exact subgraph reuse only), ``c2`` (early fill only) and ``full``.
Every arm replays the *same* schedule (instances, workflow ids, arrival times) against its own
mesh: a fresh csl store, fresh engine agents (empty KV caches) and a fresh gateway, so arms share
no cache. The mesh runs in this process: the csl, each engine agent and the gateway are separate
``grpc.aio`` servers on loopback ports, spoken to over real gRPC; in-process keeps start-up short
and gives direct access to the gateway's fill counters (``BranchManager.counters``), which the
gateway does not export. Admission is the gateway's in-process fixed policy (top-K fills).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.workloads.base import SimClock, Trace, WorkflowResult, Workload
from loadgen.workloads.schedule import Arrival, Schedule
from services.admission.config import AdmissionSettings
from services.admission.server import build_runtime as build_admission
from services.csl.config import CslSettings
from services.csl.server import build_runtime as build_csl
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.server import build_runtime as build_engine
from services.gateway.config import GatewaySettings
from services.gateway.sdk import DynbranchClient
from services.gateway.server import build_runtime as build_gateway

log = logging.getLogger(__name__)

#: Arm name → (c1, c2).
ARMS: dict[str, tuple[bool, bool]] = {
    "floor": (False, False), "c1": (True, False), "c2": (False, True), "full": (True, True),
}
COUNTERS = ("opened", "fills_issued", "fills_consumed", "stages_promoted", "fills_discarded",
            "fills_aborted")


@dataclass(frozen=True, slots=True)
class MeshConfig:
    """The mesh every arm gets: simulated engines and gateway knobs."""

    engines: int = 2
    model: str = "qwen3-32b"
    preset: str = "qwen3-32b-h200"
    #: Wall seconds per simulated second of the engines (latency is reported in simulated s).
    time_scale: float = 0.05
    #: Fills per branch under the gateway's fixed admission policy.
    top_k: int = 2
    #: Longest a demand waits for a matching running fill, in simulated seconds.
    fill_wait_sim_s: float = 30.0
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
    draft_preset: str = "qwen3-0.6b-h200"


@dataclass(slots=True)
class ArmResult:
    """What one arm did with the schedule."""

    arm: str
    schedule_digest: str
    results: list[WorkflowResult]
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class InProcessMesh:
    """Addresses of a running in-process mesh and its gateway runtime."""

    gateway: Any
    address: str
    #: The in-process admission service's runtime (None: the gateway's fixed policy).
    admission: Any = None

    def counters(self) -> dict[str, int]:
        """The gateway's branch counters (zeros when early fill is off)."""
        branches = getattr(self.gateway.core, "branches", None)
        found = dict(branches.counters) if branches is not None else {}
        return {name: int(found.get(name, 0)) for name in COUNTERS}


def _engine_settings(config: MeshConfig, i: int) -> EngineAgentSettings:
    return EngineAgentSettings(engine_id=f"engine-{i}", model=config.model, preset=config.preset,
                               time_scale=config.time_scale, metrics_port=-1, grace_s=0.2,
                               log_level="WARNING")


def _gateway_settings(config: MeshConfig, arm: str, engines: list[str], csl: str,
                      corpus_source: str, folder: Path, admission: str = "") -> GatewaySettings:
    c1, c2 = ARMS[arm]
    corpus = {"corpus_path": str(folder / "corpus"), "corpus_source": corpus_source,
              "data_dir": config.data_dir or ""} if corpus_source else {}
    draft = {"predictor": "draft", "draft_model": config.draft_model} \
        if config.draft_model else {}
    return GatewaySettings(engines=engines, csl=csl, c1=c1, c2=c2, top_k=config.top_k,
                           fill_wait_s=min(60.0, config.fill_wait_sim_s * config.time_scale),
                           branch_ttl_s=max(0.5, config.branch_ttl_sim_s * config.time_scale),
                           metrics_port=-1, grace_s=0.2, auth=False, log_level="WARNING",
                           admission=admission, **corpus, **draft)


@contextlib.asynccontextmanager
async def in_process_mesh(config: MeshConfig, arm: str, corpus_source: str = ""
                          ) -> AsyncIterator[InProcessMesh]:
    """A fresh csl, ``config.engines`` engine agents and a gateway configured for ``arm``."""
    if arm not in ARMS:
        raise KeyError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
    with tempfile.TemporaryDirectory(prefix=f"dynbranch-arm-{arm}-") as tmp:
        folder = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            csl = await build_csl(CslSettings(data_dir=str(folder / "csl"), metrics_port=-1,
                                              grace_s=0.2, sync=False, log_level="WARNING"))
            await _started(stack, csl)
            engines = await asyncio.gather(*(build_engine(_engine_settings(config, i))
                                             for i in range(config.engines)))
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
                admission = await build_admission(AdmissionSettings(
                    policy=config.admission, engines=[e.address for e in engines],
                    metrics_port=-1, grace_s=0.2, log_level="WARNING",
                    **dict(config.admission_settings)))
                await _started(stack, admission)
            gateway = await build_gateway(_gateway_settings(
                config, arm, targets, csl.address, corpus_source, folder,
                admission.address if admission is not None else ""))
            await _started(stack, gateway)
            yield InProcessMesh(gateway, gateway.address, admission)


async def _started(stack: contextlib.AsyncExitStack, runtime: Any) -> None:
    """Start ``runtime`` and shut it down when ``stack`` unwinds (last started, first stopped)."""
    await runtime.start()
    stack.push_async_callback(runtime.shutdown)


# -- running a schedule -----------------------------------------------------------------------

async def _run_workflow(client: DynbranchClient, workload: Workload, arrival: Arrival,
                        clock: SimClock, started: float) -> WorkflowResult:
    trace = Trace(client, workload.template, arrival.workflow_id, clock)
    error = ""
    try:
        await workload.run(trace, arrival.instance)
    except Exception as exc:  # noqa: BLE001 - a failed workflow is recorded, not fatal to a run
        error = f"{type(exc).__name__}: {exc}"
        log.warning("workflow %s failed: %s", arrival.workflow_id, error)
    latency = clock.sim_since(started)
    stages = tuple(trace.stages)
    return WorkflowResult(arrival.workflow_id, getattr(arrival.instance, "key", ""), stages,
                          latency, workload.measured(stages, latency), error)


async def run_schedule(target: str, workload: Workload, schedule: Schedule,
                       clock: SimClock) -> list[WorkflowResult]:
    """Run every arrival of ``schedule`` against the gateway at ``target``; results in order.

    Open loop: each workflow starts at its arrival time and its latency counts from then.
    Serial: one after another.
    """
    async with DynbranchClient(target) as client:
        client.use_builtin(workload.template)
        if schedule.serial:
            return [await _run_workflow(client, workload, a, clock, clock.wall())
                    for a in schedule.arrivals]
        start, tasks = clock.wall(), []
        for a in schedule.arrivals:
            due = start + clock.to_wall(a.at_s)
            await asyncio.sleep(max(0.0, due - clock.wall()))
            tasks.append(asyncio.create_task(_run_workflow(client, workload, a, clock, due)))
        return list(await asyncio.gather(*tasks))


async def run_arm(arm: str, workload: Workload, schedule: Schedule,
                  config: MeshConfig) -> ArmResult:
    """Run ``schedule`` under ``arm`` on a fresh in-process mesh."""
    async with in_process_mesh(config, arm, workload.corpus_source) as mesh:
        results = await run_schedule(mesh.address, workload, schedule,
                                     SimClock(config.time_scale))
        counters = mesh.counters()
    return ArmResult(arm, schedule.digest(), results, counters)


async def run_arms(workload: Workload, schedule: Schedule, config: MeshConfig,
                   arms: Iterable[str] = tuple(ARMS)) -> dict[str, ArmResult]:
    """Run the same schedule under each arm in turn (one arm's mesh at a time)."""
    return {arm: await run_arm(arm, workload, schedule, config) for arm in arms}


# -- comparing arms ---------------------------------------------------------------------------

def mismatches(arm: ArmResult, floor: ArmResult) -> list[str]:
    """Workflow ids whose outputs differ from the floor's (or that failed in either arm)."""
    base = {r.workflow_id: r for r in floor.results}
    bad = []
    for r in arm.results:
        other = base.get(r.workflow_id)
        if other is None or r.error or other.error or r.outputs() != other.outputs():
            bad.append(r.workflow_id)
    return bad


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def summarize(arms: dict[str, ArmResult]) -> dict[str, dict[str, Any]]:
    """Per arm: mean and p99 of the reported latency, ratio to the floor, fills per request."""
    floor = arms.get("floor")
    floor_mean = _mean([r.measured_s for r in floor.results]) if floor else 0.0
    out: dict[str, dict[str, Any]] = {}
    for name, arm in arms.items():
        n = max(len(arm.results), 1)
        mean = _mean([r.measured_s for r in arm.results])
        sources: dict[str, int] = {}
        for r in arm.results:
            for source, count in r.sources().items():
                sources[source] = sources.get(source, 0) + count
        out[name] = {
            "mean_s": round(mean, 3),
            "p99_s": round(quantile([r.measured_s for r in arm.results], 0.99), 3),
            "ratio_to_floor": round(mean / floor_mean, 3) if floor_mean > 0 else None,
            **{k: round(arm.counters.get(k, 0) / n, 3)
               for k in ("fills_issued", "fills_consumed", "stages_promoted", "fills_discarded")},
            "branches_opened": arm.counters.get("opened", 0),
            "sources": dict(sorted(sources.items())),
            "errors": sum(1 for r in arm.results if r.error),
            "outputs_equal_floor": not mismatches(arm, floor) if floor else None,
        }
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


__all__ = [
    "ARMS", "COUNTERS", "ArmResult", "InProcessMesh", "MeshConfig", "in_process_mesh",
    "mismatches", "quantile", "run_arm", "run_arms", "run_schedule", "summarize",
]
