"""The main job on the embedded default: start the mesh with simulated engines, send a small
batch of stage calls through the gateway, print a summary, stop the mesh."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from dataclasses import dataclass

import grpc

from services.common.pb import common_pb2, gateway_pb2
from services.gateway.client import GatewayClient
from services.launcher import Mesh, MeshSpec

SYSTEM = ("You are the router of a customer-support agent. Read the request and name the one "
          "handler that should answer it: billing, shipping, returns or technical. ")
QUESTIONS = [
    "My card was charged twice for order 1182.", "Where is my parcel? It left Leipzig Monday.",
    "The blender I bought arrived cracked.", "The app crashes when I open my order history.",
    "Can I change the delivery address of an order in transit?",
    "I was refunded only half of what I paid.", "How do I return a gift without a receipt?",
    "The firmware update failed halfway and the device will not boot.",
]


@dataclass(slots=True)
class Outcome:
    """One call's result as the demo reports it."""

    ok: bool
    wall_s: float
    engine_id: str = ""
    engine_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    error: str = ""


def demand(i: int, model: str) -> common_pb2.StageDemand:
    """The i-th demo demand: a shared system prefix and one of a few questions (repeats hit)."""
    return common_pb2.StageDemand(
        workflow_type="routing", workflow_id=f"demo-{i}", stage_id="router", model=model,
        prompt=SYSTEM + QUESTIONS[i % len(QUESTIONS)],
        sampling=common_pb2.SamplingParams(max_tokens=48, temperature=0.0))


async def _one(client: GatewayClient, i: int, model: str, gate: asyncio.Semaphore) -> Outcome:
    async with gate:
        start = time.perf_counter()
        try:
            r = await client.call(gateway_pb2.CallRequest(demand=demand(i, model)), timeout_s=120)
        except grpc.aio.AioRpcError as err:
            return Outcome(False, time.perf_counter() - start,
                           error=f"{err.code().name}: {err.details()}")
        return Outcome(True, time.perf_counter() - start, r.engine_id, r.timings.total_s,
                       r.usage.prompt_tokens, r.usage.cached_prompt_tokens)


def summarize(spec: MeshSpec, outcomes: list[Outcome], wall_s: float) -> str:
    """Human-readable summary of a demo run."""
    ok = [o for o in outcomes if o.ok]
    lines = [f"dynbranch demo: {len(outcomes)} requests, {len(ok)} ok, "
             f"{len(outcomes) - len(ok)} failed, {wall_s:.2f} s wall",
             f"engines: {spec.engines} x sim preset {spec.preset} (SIMULATED engine, "
             f"time scale {spec.time_scale})"]
    if ok:
        walls = sorted(o.wall_s for o in ok)
        engine = [o.engine_s for o in ok]
        prompt, cached = sum(o.prompt_tokens for o in ok), sum(o.cached_tokens for o in ok)
        lines += [
            f"wall latency ms: mean {1000 * statistics.fmean(walls):.1f} "
            f"p50 {1000 * walls[len(walls) // 2]:.1f} max {1000 * walls[-1]:.1f}",
            f"simulated engine s per request: mean {statistics.fmean(engine):.3f} "
            f"max {max(engine):.3f}",
            f"prefix cache: {cached}/{prompt} prompt tokens cached ({cached / max(prompt, 1):.0%})",
            "per engine: " + ", ".join(f"{k} {v}" for k, v in
                                       sorted(Counter(o.engine_id for o in ok).items()))]
    lines += [f"error: {o.error}" for o in outcomes if not o.ok][:5]
    return "\n".join(lines)


async def run_demo(spec: MeshSpec, requests: int = 32, concurrency: int = 8) -> int:
    """Start the mesh, send ``requests`` calls ``concurrency`` at a time, print, stop."""
    mesh = Mesh()
    try:
        print(f"starting mesh: gateway, csl, admission, delivery, {spec.engines} sim engine(s) "
              f"(logs in {mesh.run_dir})", flush=True)
        await mesh.start(spec)
        gate = asyncio.Semaphore(max(concurrency, 1))
        start = time.perf_counter()
        async with GatewayClient(mesh.address("gateway")) as client:
            outcomes = await asyncio.gather(*(_one(client, i, spec.model, gate)
                                              for i in range(requests)))
        print(summarize(spec, list(outcomes), time.perf_counter() - start))
        return 0 if all(o.ok for o in outcomes) else 1
    finally:
        await mesh.stop()


__all__ = ["run_demo", "summarize"]
