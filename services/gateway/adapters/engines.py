"""The gateway's clients of its engine agents: load streams kept current, routed generations.

Routing must not cost a hop (DESIGN.md §3 hop budget): each engine's load view arrives on a
WatchLoad stream owned by this pool, so ``pick_engine`` is a local decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import cast

import grpc

from services.common.pb import common_pb2, engine_pb2
from services.common.runtime.convert import chat_to_proto, sampling_into, tool_calls_from_proto
from services.common.runtime.grpc_errors import error_from_rpc
from services.common.runtime.records import published_s
from services.common.values.errors import NotFound, Unavailable, quoted
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    LoadReport,
    Priority,
    Progress,
    Timings,
    Usage,
)
from services.common.values.record_guard import SequenceGuard
from services.common.values.tracing import outgoing_metadata
from services.engine_agent.client import EngineAgentClient
from services.gateway.adapters.router import EngineState, Router, rooms
from services.gateway.ports import Execution, Room

log = logging.getLogger(__name__)
#: A load view older than this on arrival is refused (DESIGN.md §3), as admission's default.
LOAD_MAX_AGE_S = 5.0
#: Receives streamed text as it arrives.
DeltaSink = Callable[[str], None]


def _load_from_view(view: common_pb2.LoadView) -> LoadReport:
    return LoadReport(running=view.running, waiting=view.waiting, max_running=view.max_running,
                      kv_blocks_used=view.kv_blocks_used, kv_blocks_total=view.kv_blocks_total,
                      fill_running=view.fill_running, fill_kv_blocks=view.fill_kv_blocks,
                      block_size=view.block_size)


def _execution(engine_id: str, fin: engine_pb2.Finished) -> Execution:
    u, t = fin.usage, fin.timings
    return Execution(fin.text, FinishReason(fin.reason or FinishReason.ERROR),
                     Usage(u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens),
                     Timings(t.queue_s, t.prefill_s, t.decode_s, t.total_s), engine_id,
                     tool_calls_from_proto(fin.tool_calls), fin.stop_string)


class EnginePool:
    """Engine agents of one gateway; ``start`` connects, ``close`` stops every owned task."""

    def __init__(self, targets: list[str]) -> None:
        self.clients = {t: EngineAgentClient(t) for t in targets}
        self.states: dict[str, EngineState] = {}
        self.router = Router()
        self._watchers: list[asyncio.Task[None]] = []
        #: The engine of every fill running through this pool, by request id (adoption).
        self._fills: dict[str, EngineState] = {}
        #: Load views refused by the record rule (stale, future-dated, duplicate, out of order).
        self.refused_views = 0

    async def start(self, timeout_s: float) -> None:
        """Fetch every engine's info (waiting up to ``timeout_s``) and start the load streams."""
        await asyncio.gather(*(self._connect(t, timeout_s) for t in self.clients))
        self._watchers = [asyncio.create_task(self._watch(t), name=f"watch-load:{t}")
                          for t in self.clients]

    async def _connect(self, target: str, timeout_s: float) -> None:
        client = self.clients[target]
        await asyncio.wait_for(client.channel.channel_ready(), timeout_s)
        info = await client.info(timeout_s=timeout_s)
        self.states[target] = EngineState(
            engine_id=info.engine_id, target=target, model=info.model,
            max_model_len=info.max_model_len,
            load=LoadReport(0, 0, info.max_running, 0, info.kv_blocks_total,
                            block_size=info.block_size))

    async def _watch(self, target: str) -> None:
        state, client = self.states[target], self.clients[target]
        guard = SequenceGuard(LOAD_MAX_AGE_S)
        while True:
            try:
                async for view in client.watch_load():
                    if not guard.accept(view.header.sequence, published_s(view.header)):
                        self.refused_views += 1
                        continue  # stale, future-dated, duplicate or out of order: keep the last
                    state.load, state.healthy = _load_from_view(view), True
                guard.reset()  # stream renewed: the agent restarts its sequence per stream
            except grpc.aio.AioRpcError as err:
                if state.healthy:
                    log.warning("engine %s load stream lost: %s", state.engine_id, err.code().name)
                state.healthy = False
                guard.reset()
                await asyncio.sleep(0.2)

    def models(self) -> set[str]:
        """Models served by at least one engine."""
        return {s.model for s in self.states.values()}

    def max_model_len(self, model: str) -> int:
        """The smallest context limit over the engines serving ``model`` (0 if none)."""
        return min((s.max_model_len for s in self.states.values() if s.model == model), default=0)

    def pick(self, model: str, *, fill: bool = False, affinity_key: str = "") -> EngineState:
        """The engine for one generation (see ``Router``)."""
        return self.router.pick(self.states.values(), model, fill=fill, affinity_key=affinity_key)

    async def locate_history(self, affinity_key: str, model: str, history: str,
                             timeout_s: float = 0.5) -> str:
        """The engine holding a workflow's history: the one that ran its last canonical call
        here, else (another replica ran it, or this one restarted) the healthy engine whose
        prefix cache holds the longest part of ``history``, asked of every engine serving
        ``model``; ties and failures go to the least loaded. Never a wrong answer: a worse
        guess only costs the continuation a prefill."""
        held = self.router.affine(affinity_key)
        if held is not None and any(s.engine_id == held and s.healthy
                                    for s in self.states.values()):
            return held
        serving = [s for s in self.states.values() if s.model == model]
        if not serving:
            return ""  # delivery names the unknown model
        healthy = [s for s in serving if s.healthy]
        if not healthy:
            raise Unavailable(f"no healthy engine agent serves model {quoted(model)}")
        if len(healthy) == 1:
            return healthy[0].engine_id

        async def resident(state: EngineState) -> int:
            try:
                reply = await self.clients[state.target].lookup_prefix(history, timeout_s)
            except grpc.aio.AioRpcError:
                return -1
            return int(reply.resident_tokens)

        found = (await asyncio.gather(*(resident(s) for s in healthy)) if history
                 else [0] * len(healthy))
        best = max(zip(found, healthy, strict=True),
                   key=lambda fs: (fs[0], -fs[1].canonical_score()))[1]
        return best.engine_id

    async def generate(self, request: GenerationRequest, timeout_s: float,
                       prefix_key: str = "", on_delta: DeltaSink | None = None) -> Execution:
        """Run a generation on a routed engine; cancelling this call aborts it on the engine.

        With ``on_delta`` the engine streams token deltas and each one is passed on as it arrives.
        """
        fill = request.priority is Priority.FILL
        state = self.pick(request.model, fill=fill, affinity_key=prefix_key)
        state.outstanding += 1
        state.outstanding_fills += fill
        if fill:
            self._fills[request.request_id] = state
        try:
            return await self._run(state, request, timeout_s, on_delta)
        finally:
            state.outstanding -= 1
            state.outstanding_fills -= fill
            if fill and self._fills.get(request.request_id) is state:
                del self._fills[request.request_id]

    async def adopt(self, request_id: str, text: bool, timeout_s: float
                    ) -> AsyncIterator[Progress]:
        """See ``ports.EnginePort.adopt``."""
        state = self._fills.get(request_id)
        if state is None:
            raise NotFound(f"request_id: no fill {quoted(request_id)} runs through this gateway")
        call = self.clients[state.target].adopt(request_id, text, timeout_s)
        try:
            async for e in call:
                yield Progress(e.text, e.tokens, e.allocated, e.raised, e.finished)
        except grpc.aio.AioRpcError as err:
            raise error_from_rpc(err, f"engine {state.engine_id}", "Adopt") from None
        finally:
            call.cancel()

    def room(self, request_id: str) -> Room | None:
        """See ``ports.EnginePort.room``."""
        state = self._fills.get(request_id)
        return Room(*rooms(self.states.values(), state)) if state is not None else None

    async def _run(self, state: EngineState, request: GenerationRequest, timeout_s: float,
                   on_delta: DeltaSink | None) -> Execution:
        proto = engine_pb2.GenerateRequest(
            request_id=request.request_id, model=request.model, prompt=request.prompt,
            priority=cast(common_pb2.PriorityClass, int(request.priority)),
            final_only=on_delta is None)
        sampling_into(proto.sampling, request.sampling)
        if request.chat is not None:
            proto.chat.CopyFrom(chat_to_proto(request.chat))
        client = self.clients[state.target]
        finished: engine_pb2.Finished | None = None
        try:
            if on_delta is None:  # the answer only: one message each way on a shared stream
                finished = await client.answer(proto, timeout_s, dict(outgoing_metadata()))
            else:
                async for event in client.generate(proto, timeout_s=timeout_s):  # traced: channel
                    if event.HasField("finished"):
                        finished = event.finished
                        break
                    if event.HasField("delta"):
                        on_delta(event.delta.text)
        except grpc.aio.AioRpcError as err:
            # the engine validated a field the gateway passed through: keep its message
            raise error_from_rpc(err, f"engine {state.engine_id}", "Generate",
                                 field_prefix="demand.") from None
        if finished is None:
            raise Unavailable(f"engine {state.engine_id} ended the stream without finishing")
        return _execution(state.engine_id, finished)

    async def close(self) -> None:
        """Cancel the load streams and close every channel; idempotent."""
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers = []
        await asyncio.gather(*(c.close() for c in self.clients.values()))


__all__ = ["LOAD_MAX_AGE_S", "EnginePool"]
