"""Adoption: a canonical demand takes over the fill still running for it (dynbranch §3.3, §5.2:
"under load the binding constraint is how much execution a fill can still hide").

A demand whose exact reuse name matches exactly one promotable fill step that has not ended yet
*adopts* it (``promotion`` decides the match; this module decides how long to wait):

- The fill is raised to canonical priority on its engine where the backend can (sim; vLLM
  embedded, with the plugin and priority scheduling), and its engine agent streams its progress
  back (``EngineAgent.Adopt``, which tees the generation). A streamed demand gets the fill's
  text so far at once, then each piece as it is decoded.
- The demand waits for the fill, bounded only by its own deadline. It runs the stage anew (and
  aborts the fill: the canonical run replaces it) only when

  1. the fill fails or is aborted: its step ends without a shadow (``fill_failed``);
  2. the fill stalls: once it holds KV it adds no token for ``adopt_stall_s`` of the run's clock,
     a hung or thrashing engine (``stalled``);
  3. a fresh execution would start sooner: ``adopt_check_s`` after the adoption began, the fill
     is still queued (never allocated) while an engine could start a canonical generation of
     its model at once, as the load views say (``ports.Room``): another engine serving it, or
     its own engine when the fill could not be raised (a backend without priority changes
     keeps a queued fill behind canonical work) (``sooner``).

  There is no flat cap: a fill that keeps producing tokens is waited for to its end, however
  long the decision left it to run.
- Identical work elsewhere (C1 on): when another demand on this gateway confirms the same reuse
  name meanwhile (it promoted its own workflow's fill, or stored its execution), the demand
  stops waiting and is answered from the library at once (``confirmed``): a replay whose own
  fill has just started joins whichever identical work ends sooner. A demand that comes after
  such a confirmation, to a step planned before it, does not adopt the step at all
  (``promotion``). Its fill is given back, not aborted (the rest of its chain may still serve
  the workflow).
- A tool step (a builtin tool, in-process) has no engine progress to watch: it is waited for to
  its end, within the deadline.
- When the deadline passes first the demand fails with DEADLINE_EXCEEDED, as its own execution
  would have (``deadline``); when it is cancelled (its client went away) it stops waiting. Either
  way the fill is given back: lowered to fill priority, it runs on, and its shadow may serve a
  later demand (a retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from services.common.values import clock
from services.common.values.errors import DynbranchError, NotFound
from services.common.values.generation import Progress
from services.gateway.ports import EnginePort
from services.gateway.speculation.state import BranchSettings, FillStep
from services.gateway.values import AnswerSource, TextStream

log = logging.getLogger(__name__)

#: Why an adopting demand stopped waiting (``state.REFUSALS`` keys).
STALLED, SOONER, DEADLINE, CONFIRMED = "stalled", "sooner", "deadline", "confirmed"
#: The reasons after which the demand runs the stage anew in the fill's place (its fill is
#: aborted); after the others the fill is given back.
RUNS_ANEW = (STALLED, SOONER)
#: A deadline this close counts as passed: asyncio fires a timer due within the loop's clock
#: resolution at once, without time passing (``aiotools.VirtualClock`` sets that resolution to
#: 1 ms), so a shorter wait would return at once again and again: the adopter would spin.
_SLACK_S = 1e-3


class _Watch:
    """What the adopter knows of the fill, from its engine's progress stream."""

    __slots__ = ("allocated", "changed", "ended", "known", "moved_at", "raised", "tokens")

    def __init__(self, now: float) -> None:
        self.known = False  # the stream answered at least once
        self.ended = False  # the fill's generation ended (or the stream was lost)
        self.allocated = False
        self.raised = False
        self.tokens = 0
        self.moved_at = now  # the last progress (the adoption's start until the first)
        self.changed = asyncio.Event()

    def update(self, progress: Progress, now: float) -> None:
        if not self.known:
            self.known, self.raised = True, progress.raised
        if progress.tokens > self.tokens or (progress.allocated and not self.allocated):
            self.moved_at = now
        self.tokens = max(self.tokens, progress.tokens)
        self.allocated = self.allocated or progress.allocated
        self.ended = self.ended or progress.finished
        self.changed.set()


class Adopter:
    """Waits for adopted fill steps under the adoption rule (module docstring)."""

    def __init__(self, engines: EnginePort, settings: BranchSettings) -> None:
        self.engines = engines
        self.settings = settings

    async def wait(self, step: FillStep, deadline: float, stream: TextStream | None = None,
                   elsewhere: asyncio.Event | None = None) -> str | None:
        """Wait for the adopted ``step`` to end (None), or say why the demand stops waiting
        (``STALLED`` or ``SOONER``: it runs anew; ``CONFIRMED``: ``elsewhere`` was set, the
        name is confirmed in the library; ``DEADLINE``). A streamed demand's ``stream`` gets
        the fill's text as it is decoded."""
        start = clock.now()
        watch = _Watch(start)
        follower: asyncio.Task[None] | None = None
        ended = asyncio.ensure_future(step.done.wait())
        other = asyncio.ensure_future((elsewhere or asyncio.Event()).wait())
        try:
            while not step.done.is_set():
                now = clock.now()
                if now >= deadline - _SLACK_S:
                    return DEADLINE
                if follower is None and step.request_id:
                    follower = asyncio.create_task(
                        self._follow(step.request_id, watch, stream, deadline - now),
                        name=f"adopt:{step.request_id}")
                why = CONFIRMED if other.done() else self._verdict(step, watch, start, now)
                if why is not None:
                    return why
                watch.changed.clear()
                changed = asyncio.ensure_future(watch.changed.wait())
                try:
                    await asyncio.wait({ended, changed, other},
                                       timeout=min(self.settings.adopt_check_s, deadline - now),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
            return None
        finally:
            ended.cancel()
            other.cancel()
            if follower is not None:  # closing the stream gives the fill back (fill priority)
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follower

    def _verdict(self, step: FillStep, watch: _Watch, start: float, now: float) -> str | None:
        """Whether to stop waiting now: the stall and sooner rules (module docstring)."""
        if not watch.known or watch.ended:
            return None  # nothing seen yet, or the generation is over: its step ends soon
        if watch.allocated:
            return STALLED if now - watch.moved_at >= self.settings.adopt_stall_s else None
        if now - start < self.settings.adopt_check_s:
            return None
        room = self.engines.room(step.request_id)
        if room is not None and (room.elsewhere or (room.here and not watch.raised)):
            return SOONER
        return None

    async def _follow(self, request_id: str, watch: _Watch, stream: TextStream | None,
                      timeout_s: float) -> None:
        """Follow the fill's progress until it ends; a fill not on its engine yet (its start
        is still on the way) is asked for again each check interval."""
        while True:
            try:
                events = self.engines.adopt(request_id, stream is not None, timeout_s)
                async with contextlib.aclosing(events):  # type: ignore[type-var]
                    async for progress in events:
                        if stream is not None and not watch.known:
                            stream.source = AnswerSource.PROMOTED_FILL
                        if stream is not None and progress.text:
                            stream(progress.text)
                        watch.update(progress, clock.now())
                return
            except NotFound:
                if watch.known:
                    return  # it ran and is gone: its step is about to end
                await asyncio.sleep(self.settings.adopt_check_s)
            except DynbranchError as exc:  # its engine is unreachable: so is its own call
                log.info("adopting fill %s: no progress from its engine: %s", request_id, exc)
                watch.ended = True
                watch.changed.set()
                return


__all__ = ["CONFIRMED", "DEADLINE", "RUNS_ANEW", "SOONER", "STALLED", "Adopter"]
