"""The main job on the embedded default: start the mesh with simulated engines, run a small batch
of Routing workflows (router → handler → executor) through the gateway, print a summary.

Each workflow's router offers three handlers; while the router decodes, the gateway fills the
two most likely handlers early (C2) and the harness's choice promotes one of them; workflows that
repeat a request are answered from the subgraph library (C1). The simulated router's text is
pseudo-text, so the demo takes the choice from its own script, as the benchmarks take it from
their data sets.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from services.common.pb import gateway_pb2
from services.gateway import DynbranchClient
from services.launcher import MeshSpec, ProcessMesh

FUNCTIONS = ["refund_payment", "track_parcel", "open_return", "reset_device"]
REQUESTS = [
    ("My card was charged twice for order 1182.", "refund_payment"),
    ("Where is my parcel? It left Leipzig on Monday.", "track_parcel"),
    ("The blender I bought arrived cracked.", "open_return"),
    ("The firmware update failed and the device will not boot.", "reset_device"),
    ("I was refunded only half of what I paid.", "refund_payment"),
    ("Can I change the delivery address of an order in transit?", "track_parcel"),
]
SOURCE_NAMES = {gateway_pb2.RESULT_SOURCE_ENGINE: "engine",
                gateway_pb2.RESULT_SOURCE_LIBRARY: "library (C1)",
                gateway_pb2.RESULT_SOURCE_PROMOTED_FILL: "promoted fill (C2)",
                gateway_pb2.RESULT_SOURCE_JOINED: "joined (single-flight)"}


@dataclass(slots=True)
class DemoOutcome:
    """One workflow's result as the demo reports it."""

    ok: bool
    wall_s: float
    sources: list[str] = field(default_factory=list)
    engine_s: float = 0.0
    error: str = ""


async def _workflow(db: DynbranchClient, i: int, gate: asyncio.Semaphore) -> DemoOutcome:
    query, choice = REQUESTS[i % len(REQUESTS)]
    inputs = {"functions": json.dumps([{"name": f} for f in FUNCTIONS]), "query": query}
    wf = f"demo-{i}"
    async with gate:
        start = time.perf_counter()
        try:
            router = await db.call_stage("routing", "router", workflow_id=wf, inputs=inputs,
                                         offered=FUNCTIONS)
            handler = await db.call_stage("routing", "handler", workflow_id=wf, inputs=inputs,
                                          candidate=choice)
            executor = await db.call_stage("routing", "executor", workflow_id=wf, inputs=inputs,
                                           outputs={"handler": handler.text}, candidate=choice)
        except grpc.aio.AioRpcError as err:
            return DemoOutcome(False, time.perf_counter() - start,
                           error=f"{err.code().name}: {err.details()}")
    replies = (router, handler, executor)
    return DemoOutcome(True, time.perf_counter() - start, [SOURCE_NAMES[r.source] for r in replies],
                   sum(r.timings.total_s for r in replies))


def simulated_s(spec: MeshSpec, outcome: DemoOutcome) -> float:
    """A workflow's latency in simulated seconds: wall / time scale, or (time scale 0: engines
    do not wait) the engines' reported stage times, summed along the serial chain."""
    if spec.time_scale > 0:
        return outcome.wall_s / spec.time_scale
    return outcome.engine_s


def summarize(spec: MeshSpec, outcomes: list[DemoOutcome], wall_s: float) -> str:
    """Human-readable summary of a demo run."""
    ok = [o for o in outcomes if o.ok]
    scale = (f"time scale {spec.time_scale}: 1 wall s = {1 / spec.time_scale:.0f} simulated s"
             if spec.time_scale > 0 else
             "time scale 0: no waiting; simulated s from the engines' reported timings")
    lines = [f"dynbranch demo: {len(outcomes)} routing workflows, {len(ok)} ok, "
             f"{len(outcomes) - len(ok)} failed, {wall_s:.2f} s wall",
             f"engines: {spec.engines} x sim preset {spec.preset} (SIMULATED engine, {scale})"]
    if ok:
        sim = sorted(simulated_s(spec, o) for o in ok)
        lines += [
            f"workflow latency, simulated s: mean {statistics.fmean(sim):.2f} "
            f"p50 {sim[len(sim) // 2]:.2f} max {sim[-1]:.2f}",
            f"engine s per workflow: mean {statistics.fmean(o.engine_s for o in ok):.2f}",
            "stage answers: " + ", ".join(f"{k} {v}" for k, v in
                                          Counter(s for o in ok for s in o.sources).most_common())]
    lines += [f"error: {o.error}" for o in outcomes if not o.ok][:5]
    return "\n".join(lines)


async def run_demo(spec: MeshSpec, requests: int = 12, concurrency: int = 4) -> int:
    """Start the mesh, run ``requests`` workflows ``concurrency`` at a time, print, stop."""
    mesh = ProcessMesh()
    try:
        print(f"starting mesh: gateway, csl, admission, delivery, {spec.engines} sim engine(s) "
              f"(logs in {mesh.run_dir}, removed after a clean stop)", flush=True)
        await mesh.start(spec)
        gate = asyncio.Semaphore(max(concurrency, 1))
        start = time.perf_counter()
        async with DynbranchClient(mesh.address("gateway")) as db:
            db.use_builtin("routing")
            outcomes = await asyncio.gather(*(_workflow(db, i, gate) for i in range(requests)))
        print(summarize(spec, list(outcomes), time.perf_counter() - start))
        return 0 if all(o.ok for o in outcomes) else 1
    finally:
        await mesh.stop()


__all__ = ["run_demo", "simulated_s", "summarize"]
