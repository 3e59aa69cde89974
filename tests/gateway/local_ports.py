"""In-process ports for gateway core tests: engines over SimBackends, the library over LMDB.

They let property tests drive the real StageService and BranchManager through thousands of
interleavings in seconds, without sockets.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from opentelemetry.sdk.trace import TracerProvider

from services.admission.client import StaticAdmission
from services.common.generation import GenerationRequest, Priority
from services.common.reads import Claimed, HoldEvent, HoldNotice, ReadSet, Served, Shadow
from services.common.reuse_name import ReuseName, name_key
from services.csl.async_library import AsyncSubgraphLibrary
from services.csl.library import LibraryOptions, SubgraphLibrary
from services.engine_agent.backend import Finished
from services.engine_agent.backends.sim import SimBackend
from services.gateway.adapters.router import EngineState, Router
from services.gateway.execution import Executor, Features
from services.gateway.ports import Execution
from services.gateway.speculation.branches import BranchManager, BranchSettings
from services.gateway.speculation.predictors import default_predictor
from services.gateway.stages import StageService
from services.gateway.templates import TemplateRegistry, builtin_names, load_builtin

MODEL = "qwen3-32b"


class LocalEngines:
    """``EnginePort`` over in-process sim backends, routed like the real pool."""

    def __init__(self, backends: Sequence[SimBackend]) -> None:
        self.backends = {b.engine_id: b for b in backends}
        self.router = Router()

    def _states(self) -> list[EngineState]:
        return [EngineState(eid, eid, b.info.model, b.info.max_model_len, b.load())
                for eid, b in self.backends.items()]

    async def generate(self, request: GenerationRequest, timeout_s: float, prefix_key: str = "",
                       on_delta: Callable[[str], None] | None = None) -> Execution:
        state = self.router.pick(self._states(), request.model,
                                 fill=request.priority is Priority.FILL, affinity_key=prefix_key)
        async for event in self.backends[state.engine_id].generate(request):
            if isinstance(event, Finished):
                return Execution(event.text, event.reason, event.usage, event.timings,
                                 state.engine_id)
        raise AssertionError("stream ended without Finished")

    def models(self) -> set[str]:
        return {b.info.model for b in self.backends.values()}

    def max_model_len(self, model: str) -> int:
        return min(b.info.max_model_len for b in self.backends.values())


class LocalLibrary:
    """``LibraryPort`` over an in-process library."""

    def __init__(self, library: AsyncSubgraphLibrary) -> None:
        self.library = library

    def available(self) -> bool:
        return True

    async def lookup(self, name: ReuseName) -> Served | None:
        return self.library.lookup(name)

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float) -> bool:
        return await self.library.put(name, result, read_set, cost_s)

    async def put_shadow(self, shadow: Shadow, ttl_s: float) -> bool:
        return await self.library.put_shadow(shadow, ttl_s)

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        return await self.library.promote(name, branch_id)

    async def claim(self, name: ReuseName, scope: str, wait_s: float) -> Claimed | None:
        return await self.library.claim(name, scope, wait_s)

    async def hold(self, name: ReuseName, branch_id: str, candidate: str, scope: str,
                   timeout_s: float) -> AsyncGenerator[HoldNotice, None]:
        hold = self.library.holds.open(name_key(name), branch_id, candidate, scope)
        try:  # as the servicer's HoldFill stream
            yield HoldNotice(HoldEvent.HELD)
            while True:
                yield await hold.events.get()
        finally:
            self.library.holds.close(hold)

    async def settle_scope(self, scope: str, template_id: str, stage_id: str,
                           keep_branch: str = "", keep_candidate: str = "") -> int:
        return self.library.holds.settle_scope(scope, template_id, stage_id, keep_branch,
                                               keep_candidate)

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        return await self.library.discard(branch_id, keep_candidate)

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> tuple[int, ...]:
        outcome = await self.library.write_records(tenant, record_ids, floors)
        return tuple(v.version for v in outcome.versions)

    async def write_seq(self) -> int:
        return self.library.library.stats().write_seq


@dataclass
class Core:
    """A gateway core wired in-process."""

    stages: StageService
    branches: BranchManager | None
    engines: LocalEngines
    admission: StaticAdmission


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
        executor = Executor(registry=registry, engines=local_engines, tools={},
                            features=Features(c1=c1, c2=c2))
        admission = StaticAdmission(top_k=top_k)
        branches = None
        if c2:
            branches = BranchManager(executor, LocalLibrary(lib), admission, default_predictor(3),
                                     BranchSettings(fill_wait_s=fill_wait_s), tracer)
            stack.push_async_callback(branches.close)
        stages = StageService(executor=executor, library=LocalLibrary(lib), branches=branches,
                              tracer=tracer)
        stack.push_async_callback(stages.close)
        yield Core(stages, branches, local_engines, admission)
