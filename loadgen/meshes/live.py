"""The live mesh: a fresh csl, the engine agents (simulated, or a real engine), admission when the
arm has a policy, and the gateway, each a ``grpc.aio`` server on a loopback port in this process,
spoken to over real gRPC and paced in wall time at the run's time scale (the ``live`` clock; the
cross-check of the virtual one, and the only one for a real engine or a draft model).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.arms.specs import ArmSpec, spec_of
from loadgen.meshes.clocks import default_clock
from loadgen.meshes.config import (
    MeshConfig,
    admission_settings,
    core_counters,
    engine_settings,
    gateway_settings,
    with_admission,
)
from loadgen.meshes.real_engines import engine_state, real_backend
from services.admission import build_runtime as build_admission
from services.common.runtime.server import freeze_startup_heap
from services.csl import CslSettings
from services.csl import build_runtime as build_csl
from services.engine_agent import EngineAgentSettings, make_backend
from services.engine_agent import build_runtime as build_engine
from services.gateway import build_runtime as build_gateway


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
        return core_counters(self.gateway.core)


@contextlib.asynccontextmanager
async def in_process_mesh(config: MeshConfig, arm: str | ArmSpec, corpus_source: str = "",
                          span_exporter: Any = None) -> AsyncIterator[InProcessMesh]:
    """A fresh csl, ``config.engines`` engine agents and a gateway configured for ``arm``.

    A name from ``ARMS`` keeps ``config.admission``; an ``ArmSpec`` with an admission policy
    replaces it (the admission baselines are the full arm with another policy)."""
    arm = spec_of(arm)
    config = with_admission(dataclasses.replace(config, clock=default_clock(real=True)), arm)
    with tempfile.TemporaryDirectory(prefix=f"dynbranch-arm-{arm.name}-") as tmp:
        folder = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            csl = await build_csl(CslSettings(data_dir=str(folder / "csl"), metrics_port=-1,
                                              grace_s=0.2, sync=False, log_level="WARNING"))
            await _started(stack, csl)
            backends = [await _backend(config, i, folder, stack) for i in range(config.engines)]
            engines = await asyncio.gather(*(build_engine(engine_settings(config, i), backend=b)
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
                admission = await build_admission(admission_settings(
                    config, [e.address for e in engines]))
                await _started(stack, admission)
            gateway = await build_gateway(gateway_settings(
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
        return make_backend(engine_settings(config, i))
    return await real_backend(config.real, config.model, i, folder, stack)


async def _started(stack: contextlib.AsyncExitStack, runtime: Any) -> None:
    """Start ``runtime`` and shut it down when ``stack`` unwinds (last started, first stopped)."""
    await runtime.start()
    stack.push_async_callback(runtime.shutdown)


__all__ = ["InProcessMesh", "in_process_mesh"]
