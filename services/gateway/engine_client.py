"""The gateway's clients of its engine agents: load streams kept current, routed generations.

Routing must not cost a hop (DESIGN.md §3 hop budget): each engine's load view arrives on a
WatchLoad stream owned by this pool, so ``pick_engine`` is a local decision.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from services.common.errors import (AlreadyExists, DeadlineExceeded, InvalidArgument,
                                    PayloadTooLarge, Unavailable)
from services.common.pb import common_pb2, engine_pb2
from services.engine_agent.backend import LoadReport
from services.engine_agent.client import EngineAgentClient
from services.gateway.router import EngineState, pick_engine

log = logging.getLogger(__name__)
_FIELD_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
                 grpc.StatusCode.RESOURCE_EXHAUSTED: PayloadTooLarge}


@dataclass(slots=True)
class Generation:
    """A finished generation as the gateway returns it."""

    engine_id: str
    finished: engine_pb2.Finished


def _load_from_view(view: common_pb2.LoadView) -> LoadReport:
    return LoadReport(running=view.running, waiting=view.waiting, max_running=view.max_running,
                      kv_blocks_used=view.kv_blocks_used, kv_blocks_total=view.kv_blocks_total,
                      fill_running=view.fill_running, fill_kv_blocks=view.fill_kv_blocks,
                      block_size=view.block_size)


def _map_rpc_error(err: grpc.aio.AioRpcError, engine_id: str) -> Exception:
    code = err.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"engine {engine_id} did not finish before the deadline")
    if code in _FIELD_ERRORS:
        # The engine validated a field the gateway passed through; keep its message.
        field, _, message = (err.details() or "").partition(": ")
        return _FIELD_ERRORS[code](f"demand.{field}" if message else "demand", message or field)
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return AlreadyExists(err.details() or "duplicate request id")
    return Unavailable(f"engine {engine_id} failed: {code.name}")


class EnginePool:
    """Engine agents of one gateway; ``start`` connects, ``close`` stops every owned task."""

    def __init__(self, targets: list[str]) -> None:
        self.clients = {t: EngineAgentClient(t) for t in targets}
        self.states: dict[str, EngineState] = {}
        self._watchers: list[asyncio.Task[None]] = []

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
        last_seq = -1
        while True:
            try:
                async for view in client.watch_load():
                    if view.header.sequence <= last_seq and last_seq >= 0:
                        continue  # duplicate or out of order: keep the newer view
                    last_seq = view.header.sequence
                    state.load, state.healthy = _load_from_view(view), True
                last_seq = -1  # stream renewed: the agent restarts its sequence per stream
            except grpc.aio.AioRpcError as err:
                if state.healthy:
                    log.warning("engine %s load stream lost: %s", state.engine_id, err.code().name)
                state.healthy, last_seq = False, -1
                await asyncio.sleep(0.2)

    def models(self) -> set[str]:
        """Models served by at least one engine."""
        return {s.model for s in self.states.values()}

    def pick(self, model: str) -> EngineState:
        """Least-loaded healthy engine for ``model``."""
        return pick_engine(self.states.values(), model)

    async def generate(self, request: engine_pb2.GenerateRequest, timeout_s: float,
                       metadata: tuple[tuple[str, str], ...] = ()) -> Generation:
        """Run a generation on the least-loaded engine and return its Finished event."""
        state = self.pick(request.model)
        state.outstanding += 1
        try:
            call = self.clients[state.target].generate(request, timeout_s=timeout_s,
                                                       metadata=metadata)
            async for event in call:
                if event.HasField("finished"):
                    return Generation(state.engine_id, event.finished)
        except grpc.aio.AioRpcError as err:
            raise _map_rpc_error(err, state.engine_id) from None
        finally:
            state.outstanding -= 1
        raise Unavailable(f"engine {state.engine_id} ended the stream without finishing")

    async def close(self) -> None:
        """Cancel the load streams and close every channel; idempotent."""
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers = []
        await asyncio.gather(*(c.close() for c in self.clients.values()))


__all__ = ["EnginePool", "Generation"]
