"""In-process ports for gateway core tests: engines over SimBackends, the library over LMDB.

The gateway's in-process adapters (``services.gateway.adapters.inproc``, what the virtual mesh
runs on) at no hop cost, on the test's own loop and clock. They let property tests drive the
real StageService and BranchManager through thousands of interleavings in seconds, without
sockets.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from opentelemetry.sdk.trace import TracerProvider

from services.admission.client import StaticAdmission
from services.csl.async_library import AsyncSubgraphLibrary
from services.csl.core import LibraryOptions, SubgraphLibrary
from services.engine_agent.backends.sim import SimBackend
from services.gateway.adapters.inproc import InprocEngines, InprocLibrary
from services.gateway.execution import Executor
from services.gateway.pace import DecodePace
from services.gateway.ports import AdmissionPort, EnginePort, LibraryPort
from services.gateway.reuse.freshness import Freshness
from services.gateway.reuse.library_path import LibraryPath
from services.gateway.reuse.naming import Naming
from services.gateway.reuse.single_flight import SingleFlight
from services.gateway.speculation.branches import BranchManager, BranchSettings
from services.gateway.speculation.predictors import default_predictor
from services.gateway.stages import StageService
from services.gateway.templates import TemplateRegistry, builtin_names, load_builtin
from services.gateway.templates.render import (
    render_candidate_stage,
    render_stage,
    resolve_stage_bindings,
)
from services.gateway.values import Demand, Features

MODEL = "qwen3-32b"
ROUTING_FUNCTIONS = ("get_weather", "book_flight", "convert_currency")


def routing_demand(tenant: str, workflow: str, stage: str, inputs: dict[str, str], *,
                   choice: str | None = None, outputs: dict[str, str] | None = None) -> Demand:
    """A demand for a stage of the built-in routing template, rendered as the SDK renders it
    (``choice``: the candidate of a stage after the router)."""
    template = load_builtin("routing")
    outputs = outputs or {}
    if choice is None:
        rendered = render_stage(template, stage, resolve_stage_bindings(
            template, stage, inputs=inputs, outputs=outputs))
    else:
        rendered = render_candidate_stage(template, "routing/router", choice, stage,
                                          inputs=inputs, outputs=outputs)
    return Demand(tenant=tenant, request_id=uuid.uuid4().hex, model=rendered.model,
                  prompt=rendered.text, sampling=rendered.sampling, workflow_type="routing",
                  workflow_id=workflow, template_id="routing", stage_id=stage,
                  stage_version=rendered.stage_version, inputs=tuple(sorted(inputs.items())),
                  outputs=tuple(sorted(outputs.items())), offered=ROUTING_FUNCTIONS)


def LocalEngines(backends: Sequence[SimBackend]) -> InprocEngines:  # noqa: N802
    """``EnginePort`` over in-process sim backends, routed like the real pool, no hop cost."""
    return InprocEngines(backends, hop_s=0.0)


def LocalLibrary(library: AsyncSubgraphLibrary) -> InprocLibrary:  # noqa: N802
    """``LibraryPort`` over an in-process library, no hop cost."""
    return InprocLibrary(library, hop_s=0.0)


def bare_manager(engines: EnginePort | None, library: LibraryPort,
                 registry: TemplateRegistry, settings: BranchSettings,
                 admission: AdmissionPort | None = None) -> BranchManager:
    """A branch manager over ``library`` with no tools, C1 and C2 on, whose executor is never
    asked to run a stage (a test opens its branches and fills by hand)."""
    features = Features()
    freshness = Freshness({})
    executor = Executor(engines=engines, tools={}, pace=DecodePace())  # type: ignore[arg-type]
    return BranchManager(executor, library, admission or StaticAdmission(),
                         default_predictor(3), settings, TracerProvider().get_tracer("t"),
                         registry=registry,
                         naming=Naming(registry=registry, tools={}, features=features),
                         freshness=freshness, single_flight=SingleFlight(freshness),
                         pace=executor.pace, features=features)


@dataclass
class Core:
    """A gateway core wired in-process."""

    stages: StageService
    branches: BranchManager | None
    engines: InprocEngines
    admission: StaticAdmission
    #: The library port under the stages' library path (what fills store shadows in).
    library: InprocLibrary


@asynccontextmanager
async def local_core(c1: bool = True, c2: bool = True, engines: int = 2,
                     time_scale: float = 0.0, top_k: int = 2,
                     fill_wait_s: float = 1.0) -> AsyncIterator[Core]:
    """StageService (+ BranchManager) over sim backends and an LMDB library in a temp dir."""
    async with AsyncExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        lib = AsyncSubgraphLibrary(SubgraphLibrary(tmp, LibraryOptions(sync=False)))
        stack.push_async_callback(lib.close)
        backends = [SimBackend("qwen3-32b-h200", time_scale=time_scale, engine_id=f"e{i}",
                               model=MODEL) for i in range(engines)]
        for backend in backends:
            await backend.start()
            stack.push_async_callback(backend.close)
        registry = TemplateRegistry()
        for name in builtin_names():
            registry.register(load_builtin(name))
        tracer = TracerProvider().get_tracer("test")
        local_engines = LocalEngines(backends)
        features = Features(c1=c1, c2=c2)
        naming = Naming(registry=registry, tools={}, features=features)
        freshness = Freshness({})
        single_flight = SingleFlight(freshness)
        pace = DecodePace()
        executor = Executor(engines=local_engines, tools={}, pace=pace)
        admission = StaticAdmission(top_k=top_k)
        branches = None
        if c2:
            branches = BranchManager(executor, LocalLibrary(lib), admission, default_predictor(3),
                                     BranchSettings(fill_wait_s=fill_wait_s), tracer,
                                     registry=registry, naming=naming, freshness=freshness,
                                     single_flight=single_flight, pace=pace, features=features)
            stack.push_async_callback(branches.close)
        library = LocalLibrary(lib)
        stages = StageService(naming=naming, executor=executor,
                              library=LibraryPath(library, freshness, tracer),
                              single_flight=single_flight, speculation=branches)
        stack.push_async_callback(stages.close)
        yield Core(stages, branches, local_engines, admission, library)
