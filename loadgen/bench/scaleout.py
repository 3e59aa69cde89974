"""Scale-out: promotion with one gateway and with two replicas behind one library, and with the
library sharded three ways, one shard killed mid-run.

Each configuration starts the mesh as processes on loopback (sim engines: a model of an engine,
not a real one), runs the same Routing workflows (router → handler → executor, the choice taken
from the script, every query distinct so exact reuse cannot stand in for early fill) and sends
each workflow's stages to the gateways in turn: with two replicas the router goes to one and the
handler to the other, so a promotion there is a fill opened on one replica and claimed on the
other. Reported per configuration: the share of handler and executor stages answered by a
promoted fill, errors, and whether every output equals the one-gateway run's.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from loadgen.demo import FUNCTIONS, REQUESTS
from services.common.pb import gateway_pb2
from services.gateway import DynbranchClient
from services.launcher import MeshSpec, ProcessMesh

PROMOTED = gateway_pb2.RESULT_SOURCE_PROMOTED_FILL
STAGES = ("router", "handler", "executor")


@dataclass(frozen=True, slots=True)
class Config:
    """One arm of the run."""

    label: str
    gateways: int
    csl_shards: int
    #: Kill this csl shard (SIGKILL) once half the workflows are done; "" keeps every shard.
    kill: str = ""


@dataclass(slots=True)
class Tally:
    """What one configuration's workflows returned."""

    texts: dict[int, list[str]] = field(default_factory=dict)
    promoted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    errors: list[str] = field(default_factory=list)


async def run_workflow(clients: list[DynbranchClient], i: int, tally: Tally) -> None:
    query, choice = REQUESTS[i % len(REQUESTS)]
    inputs = {"functions": json.dumps([{"name": f} for f in FUNCTIONS]),
              "query": f"{query} (case {i})"}
    wf, texts, outputs = f"scale-{i}", [], {}
    try:
        for k, stage in enumerate(STAGES):
            client = clients[(i + k) % len(clients)]  # stage by stage, replica by replica
            extra = ({"offered": FUNCTIONS} if stage == "router" else {"candidate": choice})
            reply = await client.call_stage("routing", stage, workflow_id=wf, inputs=inputs,
                                            outputs=dict(outputs), **extra)
            texts.append(reply.text)
            tally.promoted[stage] += reply.source == PROMOTED
            if stage == "handler":
                outputs["handler"] = reply.text
    except grpc.aio.AioRpcError as err:
        tally.errors.append(f"{wf}: {err.code().name}: {err.details()}")
        return
    tally.texts[i] = texts


async def run_config(config: Config, workflows: int, concurrency: int,
                     time_scale: float) -> Tally:
    """Start the mesh for ``config``, run the workflows, stop it."""
    mesh, tally = ProcessMesh(), Tally()
    spec = MeshSpec(engines=2, time_scale=time_scale, gateways=config.gateways,
                    csl_shards=config.csl_shards, log_level="WARNING")
    try:
        await mesh.start(spec)
        names = ["gateway", *(f"gateway-{i}" for i in range(1, config.gateways))]
        clients = [DynbranchClient(mesh.address(n)) for n in names]
        for client in clients:
            client.use_builtin("routing")
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with gate:
                await run_workflow(clients, i, tally)
            if config.kill and i == workflows // 2:
                await mesh.kill(config.kill)

        await asyncio.gather(*(one(i) for i in range(workflows)))
        for client in clients:
            await client.close()
    finally:
        await mesh.stop()
    return tally


def _summary(config: Config, tally: Tally, floor: Tally | None, workflows: int
             ) -> dict[str, Any]:
    done = len(tally.texts)
    equal = floor is None or all(floor.texts.get(i) == t for i, t in tally.texts.items())
    return {"label": config.label, "gateways": config.gateways, "csl_shards": config.csl_shards,
            "killed": config.kill, "workflows": workflows, "completed": done,
            "errors": len(tally.errors), "first_errors": tally.errors[:3],
            "handler_promotion_rate": tally.promoted["handler"] / max(done, 1),
            "executor_promotion_rate": tally.promoted["executor"] / max(done, 1),
            "outputs_equal_to_one_gateway": equal}


async def _run(quick: bool) -> dict[str, Any]:
    workflows = 16 if quick else 48
    configs = [Config("1 gateway, 1 csl", 1, 1), Config("2 gateways, 1 csl", 2, 1),
               Config("2 gateways, 3 csl shards", 2, 3),
               Config("2 gateways, 3 csl shards, csl-1 killed mid-run", 2, 3, kill="csl-1")]
    results, floor = [], None
    for config in configs:
        start = time.perf_counter()
        tally = await run_config(config, workflows, concurrency=4, time_scale=0.02)
        summary = _summary(config, tally, floor, workflows)
        summary["wall_s"] = round(time.perf_counter() - start, 1)
        floor = floor or tally
        results.append(summary)
        print(f"{config.label:<48} handler promoted {summary['handler_promotion_rate']:.0%} "
              f"executor promoted {summary['executor_promotion_rate']:.0%} errors "
              f"{summary['errors']} outputs equal {summary['outputs_equal_to_one_gateway']} "
              f"({summary['wall_s']} s)", flush=True)
    ok = all(r["errors"] == 0 and r["outputs_equal_to_one_gateway"] for r in results)
    return {"benchmark": "scaleout", "engine": "sim (a model of an engine)", "ok": ok,
            "configs": results}


def run(quick: bool = False, **_: Any) -> dict[str, Any]:
    """Run every configuration; ``ok`` when no workflow failed and outputs all agree."""
    return asyncio.run(_run(quick))


__all__ = ["Config", "Tally", "run", "run_config", "run_workflow"]
