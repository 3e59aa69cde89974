"""Fills running on this engine, watchable by request id: what lets a canonical demand adopt
the fill still running for it instead of starting the stage over (dynbranch §3.3, §5.2).

Every fill generation (priority FILL) passes through ``RunningFills.generate``, which records
its progress (text, output tokens, allocation) as the backend streams it and fans it out to
its adopters. ``adopt`` raises the fill to canonical priority where the backend can
(``backend.PriorityPort``: sim, vLLM embedded or over the plugin's lease channel; not SGLang),
yields a snapshot of what the fill has produced so far, then what each later event adds, then
its end. When the last adopter leaves before the end (its demand was cancelled or gave up),
the fill goes back to fill priority: it is a fill again, and its shadow may still serve a later
demand. Canonical generations pass straight through: the canonical path pays nothing for this.

Any backend can be teed this way, since the agent reads every backend's event stream; only
the priority raise depends on the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from services.common.values.errors import AlreadyExists, NotFound, quoted
from services.common.values.generation import GenerationRequest, Priority, Progress
from services.engine_agent.backend import (
    Allocated,
    EngineBackend,
    Finished,
    GenerationEvent,
    PriorityPort,
    TokenDelta,
)

log = logging.getLogger(__name__)


class _Adopter:
    """One adopter's queue of progress events, and whether it reads the text."""

    __slots__ = ("queue", "text")

    def __init__(self, text: bool) -> None:
        self.queue: asyncio.Queue[Progress] = asyncio.Queue()
        self.text = text


class _Fill:
    """What one running fill has produced so far, and who watches it."""

    __slots__ = ("adopters", "allocated", "done", "raised", "text", "tokens")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.tokens = 0
        self.allocated = False
        self.done = False
        self.raised = False
        self.adopters: list[_Adopter] = []

    def observe(self, event: GenerationEvent) -> None:
        """Record one backend event and pass it on to every adopter."""
        text = ""
        if isinstance(event, TokenDelta):
            self.text.append(event.text)
            self.tokens += event.tokens
            self.allocated = True
            text = event.text
        elif isinstance(event, Allocated):
            self.allocated = True
        elif isinstance(event, Finished):
            self.done = True
        else:
            return  # Queued: nothing an adopter acts on
        for adopter in self.adopters:
            adopter.queue.put_nowait(Progress(text if adopter.text else "", self.tokens,
                                              self.allocated, finished=self.done))

    def end(self) -> None:
        """The generation ended (finished, failed or aborted): tell adopters still waiting."""
        if not self.done:
            self.done = True
            for adopter in self.adopters:
                adopter.queue.put_nowait(Progress("", self.tokens, self.allocated,
                                                  finished=True))

    def snapshot(self, adopter: _Adopter) -> Progress:
        """Everything so far, as the first event of a new adoption."""
        return Progress("".join(self.text) if adopter.text else "", self.tokens,
                        self.allocated, raised=self.raised, finished=self.done)


def _merged(events: list[Progress]) -> Progress:
    """Events queued while the adopter was busy, as one (the text joined, the rest latest)."""
    if len(events) == 1:
        return events[0]
    last = events[-1]
    return Progress("".join(e.text for e in events), last.tokens, last.allocated,
                    finished=last.finished)


class RunningFills:
    """The fills this engine runs now, by request id; adopters watch and raise them."""

    def __init__(self, backend: EngineBackend) -> None:
        self.backend = backend
        self._fills: dict[str, _Fill] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """The backend's events of ``request``; a fill's are recorded for its adopters."""
        if request.priority is not Priority.FILL:
            return self.backend.generate(request)
        if request.request_id in self._fills:
            raise AlreadyExists(f"request {quoted(request.request_id)} is already running")
        fill = _Fill()
        self._fills[request.request_id] = fill
        return self._tracked(request.request_id, fill, self.backend.generate(request))

    async def _tracked(self, request_id: str, fill: _Fill,
                       events: AsyncIterator[GenerationEvent]) -> AsyncIterator[GenerationEvent]:
        try:
            async with contextlib.aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    fill.observe(event)
                    yield event
        finally:
            if self._fills.get(request_id) is fill:
                del self._fills[request_id]
            fill.end()

    def running(self, request_id: str) -> bool:
        """Whether a fill of that id runs here now."""
        return request_id in self._fills

    async def adopt(self, request_id: str, text: bool = False) -> AsyncIterator[Progress]:
        """Adopt a running fill: raise it to canonical priority (where the backend can), then
        yield its progress (module docstring). ``NotFound`` when no such fill runs here."""
        fill = self._fills.get(request_id)
        if fill is None:
            raise NotFound(f"request_id: no fill {quoted(request_id)} is running on this engine "
                           "(it finished, failed or never ran here)")
        adopter = _Adopter(text)
        fill.adopters.append(adopter)
        try:
            if not fill.raised and not fill.done and isinstance(self.backend, PriorityPort):
                fill.raised = await self.backend.set_priority(request_id, Priority.CANONICAL)
            first = fill.snapshot(adopter)  # everything so far: what is queued is in it
            while not adopter.queue.empty():
                adopter.queue.get_nowait()
            yield first
            while not first.finished:
                batch = [await adopter.queue.get()]
                while not adopter.queue.empty():
                    batch.append(adopter.queue.get_nowait())
                first = _merged(batch)
                yield first
        finally:
            fill.adopters.remove(adopter)
            if not fill.adopters and fill.raised and not fill.done:
                fill.raised = False  # nobody waits for it now: a fill again
                self._spawn(self._lower(request_id))

    async def _lower(self, request_id: str) -> None:
        assert isinstance(self.backend, PriorityPort)
        await self.backend.set_priority(request_id, Priority.FILL)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name="fill-priority")
        self._tasks.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("lowering an abandoned fill's priority failed", exc_info=task.exception())

    async def close(self) -> None:
        """Wait for priority changes still under way; idempotent."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


__all__ = ["RunningFills"]
