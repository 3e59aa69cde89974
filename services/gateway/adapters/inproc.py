"""The gateway's ports over engines and a library in this process: ``InprocEngines``
(``EnginePort`` over engine backends, routed by the gateway's ``Router``) and ``InprocLibrary``
(``LibraryPort`` over an ``AsyncSubgraphLibrary``), each call costing ``hop_s`` of the loop's
clock (0: none). The virtual mesh (``loadgen.meshes.virtual``) runs the real gateway core on them
at a modelled hop cost; the core's tests at none. They reach the engine agent and the csl only
through those services' public faces.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from services.common.values.errors import DeadlineExceeded, NotFound, Unavailable, quoted
from services.common.values.generation import GenerationRequest, Priority, Progress
from services.common.values.reads import Claimed, HoldEvent, HoldNotice, ReadSet, Served, Shadow
from services.common.values.reuse_name import ReuseName, name_key
from services.engine_agent import Finished, RunningFills, TokenDelta
from services.gateway.adapters.router import EngineState, Router, rooms
from services.gateway.ports import AppliedWrite, Execution, Room

if TYPE_CHECKING:
    from services.csl import AsyncSubgraphLibrary
    from services.engine_agent import EngineBackend

    class NamedBackend(EngineBackend, Protocol):
        """An engine backend that names its engine (``SimBackend``)."""

        engine_id: str


async def hop(hop_s: float) -> None:
    """One cross-service round trip's modelled cost."""
    if hop_s > 0:
        await asyncio.sleep(hop_s)


# -- engines ------------------------------------------------------------------------------------

class InprocEngines:
    """``EnginePort`` over engine backends in this process, routed by the gateway's ``Router``
    (what the virtual mesh and the core's tests run on)."""

    def __init__(self, backends: Sequence[NamedBackend], hop_s: float = 0.0) -> None:
        self.backends = {b.engine_id: b for b in backends}
        #: Every generation runs through its engine's running fills, as in an engine agent.
        self.fills = {eid: RunningFills(b) for eid, b in self.backends.items()}
        self.hop_s = hop_s
        self.router = Router()
        self.states = {eid: EngineState(eid, eid, b.info.model, b.info.max_model_len, b.load())
                       for eid, b in self.backends.items()}
        self._running: dict[str, EngineState] = {}  # fills by request id

    def _refresh(self) -> None:
        for eid, state in self.states.items():  # the load reports as of now
            state.load = self.backends[eid].load()

    async def generate(self, request: GenerationRequest, timeout_s: float, prefix_key: str = "",
                       on_delta: Callable[[str], None] | None = None) -> Execution:
        self._refresh()
        fill = request.priority is Priority.FILL
        state = self.router.pick(self.states.values(), request.model, fill=fill,
                                 affinity_key=prefix_key)
        state.outstanding += 1
        state.outstanding_fills += fill
        if fill:
            self._running[request.request_id] = state
        try:
            async with asyncio.timeout(timeout_s):
                await hop(self.hop_s)
                return await self._run(state.engine_id, request, on_delta)
        except TimeoutError:
            raise DeadlineExceeded(f"engine {state.engine_id} did not finish before the "
                                   "deadline") from None
        finally:
            state.outstanding -= 1
            state.outstanding_fills -= fill
            if fill and self._running.get(request.request_id) is state:
                del self._running[request.request_id]

    async def adopt(self, request_id: str, text: bool, timeout_s: float
                    ) -> AsyncIterator[Progress]:
        state = self._running.get(request_id)
        if state is None:
            raise NotFound(f"request_id: no fill {quoted(request_id)} runs through this gateway")
        await hop(self.hop_s)
        events = self.fills[state.engine_id].adopt(request_id, text)
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for progress in events:
                yield progress

    def room(self, request_id: str) -> Room | None:
        state = self._running.get(request_id)
        if state is None:
            return None
        self._refresh()
        return Room(*rooms(self.states.values(), state))

    async def _run(self, engine_id: str, request: GenerationRequest,
                   on_delta: Callable[[str], None] | None) -> Execution:
        events = self.fills[engine_id].generate(request)
        async with contextlib.aclosing(events):  # type: ignore[type-var]  # closing aborts
            async for event in events:
                if isinstance(event, TokenDelta) and on_delta is not None:
                    on_delta(event.text)
                elif isinstance(event, Finished):
                    return Execution(event.text, event.reason, event.usage, event.timings,
                                     engine_id, event.tool_calls, event.stop_string)
        raise Unavailable(f"engine {engine_id} ended the stream without finishing")

    def models(self) -> set[str]:
        return {b.info.model for b in self.backends.values()}

    def max_model_len(self, model: str) -> int:
        return min((b.info.max_model_len for b in self.backends.values()
                    if b.info.model == model), default=0)

    async def locate_history(self, affinity_key: str, model: str, history: str,
                             timeout_s: float = 0.5) -> str:
        raise NotImplementedError("in-process engines have no delivery service (DeliverResult)")


# -- library ------------------------------------------------------------------------------------

class InprocLibrary:
    """``LibraryPort`` over a library in this process; ``hop_s`` per call, as over the wire."""

    def __init__(self, library: AsyncSubgraphLibrary, hop_s: float = 0.0) -> None:
        self.library = library
        self.hop_s = hop_s
        self.resyncs = 0  # in-process: never lost

    def available(self) -> bool:
        return True

    async def lookup(self, name: ReuseName) -> Served | None:
        await hop(self.hop_s)
        return self.library.lookup(name)

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float) -> bool:
        await hop(self.hop_s)
        return await self.library.put(name, result, read_set, cost_s)

    async def put_shadow(self, shadow: Shadow, ttl_s: float) -> bool:
        await hop(self.hop_s)
        return await self.library.put_shadow(shadow, ttl_s)

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        await hop(self.hop_s)
        return await self.library.promote(name, branch_id)

    async def claim(self, name: ReuseName, scope: str, wait_s: float) -> Claimed | None:
        await hop(self.hop_s)
        return await self.library.claim(name, scope, wait_s)

    async def hold(self, name: ReuseName, branch_id: str, candidate: str, scope: str,
                   timeout_s: float) -> AsyncGenerator[HoldNotice, None]:
        await hop(self.hop_s)
        held = self.library.holds.open(name_key(name), branch_id, candidate, scope)
        try:  # as the servicer's HoldFill stream
            yield HoldNotice(HoldEvent.HELD)
            while True:
                yield await held.events.get()
        finally:
            self.library.holds.close(held)

    async def settle_scope(self, scope: str, template_id: str, stage_id: str,
                           keep_branch: str = "", keep_candidate: str = "") -> int:
        await hop(self.hop_s)
        return self.library.holds.settle_scope(scope, template_id, stage_id, keep_branch,
                                               keep_candidate)

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        await hop(self.hop_s)
        return await self.library.discard(branch_id, keep_candidate)

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> tuple[int, ...]:
        await hop(self.hop_s)
        outcome = await self.library.write_records(tenant, record_ids, floors)
        return tuple(v.version for v in outcome.versions)

    async def apply_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> AppliedWrite:
        return AppliedWrite(await self.write_records(tenant, record_ids, floors))

    async def write_seq(self) -> int:
        await hop(self.hop_s)
        return self.library.stats().write_seq


__all__ = ["InprocEngines", "InprocLibrary", "hop"]
