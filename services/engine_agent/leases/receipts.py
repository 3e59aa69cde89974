"""Complete receipt of a returned tool result on the engine (``papers/lads.txt`` §3.6): the
continuation runs once per result key, whoever asks for it.

The first receipt of a key starts its continuation in a task this object owns; a second one for
the same key and payload (a sender that restarted, a harness that resubmitted) waits for that
same task, so a continuation never runs twice and its answer is never lost while it is
remembered. A failed continuation is retried, never replayed as its error. Protocol-free; the
gRPC edge is ``services.engine_agent.servicer``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass

from services.common.values.errors import FailedPrecondition
from services.common.values.generation import GenerationRequest
from services.common.values.leases import ResultKey
from services.engine_agent.backend import Allocated, EngineBackend, Finished
from services.engine_agent.leases.provider import LeaseProvider

#: Finished continuations remembered for idempotent resubmission.
MAX_REMEMBERED = 4096


@dataclass(frozen=True, slots=True)
class Continued:
    """A continuation's end, the lease binding and receipt-to-allocation seconds."""

    finished: Finished
    bound: bool
    receipt_to_allocation_s: float


class Receipts:
    """The continuations of received results, by key; ``close`` cancels the running ones."""

    def __init__(self, backend: EngineBackend, provider: LeaseProvider,
                 max_remembered: int = MAX_REMEMBERED) -> None:
        self.backend, self.provider, self.max_remembered = backend, provider, max_remembered
        self._held: OrderedDict[ResultKey, tuple[str, asyncio.Task[Continued]]] = OrderedDict()

    def registered(self, key: ResultKey, payload_digest: str) -> bool:
        """Whether ``key``'s continuation with this payload is already here (and not failed)."""
        held = self._held.get(key)
        return held is not None and held[0] == payload_digest and not _failed(held[1])

    async def receive(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                      request: GenerationRequest) -> Continued:
        """The continuation of ``key``: started now, or the one already running or finished;
        ``FailedPrecondition`` when ``key`` was received with another payload."""
        held = self._held.get(key)
        if held is not None and _failed(held[1]):
            held = None  # a failed continuation is retried, never replayed as its error
        if held is None:
            task = asyncio.get_running_loop().create_task(
                self._continue(key, payload_digest, prefix_digest, request))
            held = (payload_digest, task)
            self._remember(key, held)
        elif held[0] != payload_digest:
            raise FailedPrecondition(f"result {key} was received with another payload")
        return await asyncio.shield(held[1])

    async def _continue(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                        request: GenerationRequest) -> Continued:
        received = time.monotonic()
        bound = await self.provider.receipt(key, payload_digest, prefix_digest,
                                            request.request_id)
        alloc_s = float("nan")
        async for event in self.backend.generate(request):
            if isinstance(event, Allocated):
                alloc_s = time.monotonic() - received
                await self.provider.allocated(key)
            elif isinstance(event, Finished):
                return Continued(event, bound, alloc_s)
        raise FailedPrecondition(f"continuation of {key} ended without finishing")

    def _remember(self, key: ResultKey, held: tuple[str, asyncio.Task[Continued]]) -> None:
        self._held[key] = held
        for old_key in list(self._held):  # oldest first; a running one is never forgotten
            if len(self._held) <= self.max_remembered:
                break
            if self._held[old_key][1].done():
                del self._held[old_key]

    def remembered(self) -> list[ResultKey]:
        """The keys remembered, oldest first."""
        return list(self._held)

    async def close(self) -> None:
        """Cancel running continuations (shutdown); the provider closes separately."""
        tasks = [task for _, task in self._held.values() if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _failed(task: asyncio.Task[Continued]) -> bool:
    """Whether a remembered continuation ended in an error (it is retried, never replayed)."""
    return task.done() and (task.cancelled() or task.exception() is not None)


__all__ = ["MAX_REMEMBERED", "Continued", "Receipts"]
