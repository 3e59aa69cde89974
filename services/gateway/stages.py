"""The canonical demand path: one stage demand from the core down to an answer (DESIGN.md §3).

``StageService.run`` is the gateway's hot path, top to bottom: derive the reuse name
(``execution``); call speculation once (``ports.SpeculationPort``, C2), which may promote a
matching shadow, adopting its fill while it still runs (``speculation.adoption``); probe the
library (C1); after a miss, claim another replica's fill if speculation said one may hold it;
otherwise execute (``execution``) within what is left of the demand's deadline and store the
result with its read-set; tell speculation the answer. Nothing here calls up into
the core: a served result refused as stale is counted (``refused_stale``), and the core acts on
the count. Stores run in owned background tasks so an answer never waits for
them; a demand for a name whose store is still in flight awaits that store first.

Single-flight (with C1 on): a demand whose exact reuse name is executing canonically on this
gateway right now, for the same tenant, waits for that execution's answer instead of running
again, within its own deadline; when that execution fails, is cancelled or cannot be stored,
the demand runs itself (or joins one that started meanwhile). The key is the tenant and the
name, so a shared stage's name never carries a result across tenants here, and a stage without
a name (non-deterministic sampling) never joins. Across gateway replicas nothing is joined: a
repeat that reaches another replica runs again (the fill placeholders of ``HoldFill`` are
scoped to one workflow's branches, and holding one per canonical execution would add a stream
message to every miss).

May import: ``services.common``, the gateway's ``values``, ``ports``, ``templates``,
``execution`` and ``speculation``; nothing above it (``core``, the edges).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from opentelemetry.trace import Tracer

from services.common.values import clock
from services.common.values.errors import DeadlineExceeded
from services.common.values.generation import Priority
from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName
from services.common.values.tracing import maybe_span
from services.gateway.config import GatewaySettings
from services.gateway.execution import Executor, StageRun
from services.gateway.ports import LibraryPort, Speculation, SpeculationPort
from services.gateway.templates import Stage
from services.gateway.values import (
    ZERO_TIMINGS,
    Answer,
    AnswerSource,
    Demand,
    StoredResult,
    TextStream,
    charge_wait,
    end_wait_account,
    start_wait_account,
)

log = logging.getLogger(__name__)
#: Stores in flight at most, by default (``GatewaySettings.max_pending_stores``).
MAX_PENDING_STORES: int = GatewaySettings.model_fields["max_pending_stores"].default


class StageService:
    """Runs stage demands for the gateway: speculation, library, execution, store."""

    def __init__(self, *, executor: Executor, library: LibraryPort,
                 speculation: SpeculationPort | None, tracer: Tracer,
                 max_pending_stores: int = MAX_PENDING_STORES) -> None:
        self.executor = executor
        self.library = library
        self.features = executor.features
        #: Early fill (C2), when on.
        self.speculation = speculation if self.features.c2 else None
        self.tracer = tracer
        self._stores: dict[ReuseName, asyncio.Task[bool]] = {}
        #: Stores in flight at most; past it a result is answered but not stored (counted in
        #: ``stores_dropped``): a store only saves later work, so it is the thing to shed.
        self.max_pending_stores = max_pending_stores
        self.stores_dropped = 0
        #: Served results refused because a corpus record they read moved on since (the core
        #: reconciles the csl with the corpus when this moves).
        self.refused_stale = 0
        #: Canonical executions running now, by tenant and reuse name; each resolves to its
        #: run when storable, else None (single-flight, module docstring). The executor's, so
        #: that fills see them too.
        self._executing = executor.executing
        #: Demands answered by an identical demand's execution instead of their own.
        self.joined = 0

    async def run(self, d: Demand, timeout_s: float,
                  stream: TextStream | None = None) -> Answer:
        """Answer one demand: promoted fill, library hit, or execution.

        ``stream`` receives the text as an engine decodes it (this demand's execution, or the
        fill it adopted); an answer served from a finished shadow or the library arrives whole
        in the returned ``Answer`` only.
        """
        start = clock.now()
        d = self.executor.resolved(d)  # a no-op for a demand resolved where it came in
        waited, token = start_wait_account()
        try:
            answer, spec = await self._run(d, timeout_s, stream, start)
        finally:
            end_wait_account(token)
        if waited[0]:
            answer = dataclasses.replace(answer, waited_s=waited[0])
        if spec is not None:
            spec.answered(answer.text)
        return answer

    async def _run(self, d: Demand, timeout_s: float, stream: TextStream | None,
                   start: float) -> tuple[Answer, Speculation | None]:
        stage = d.stage
        name = self.executor.demand_name(d, stage)
        served, source, spec = await self._reuse(d, name, timeout_s, stream)
        stored = await self._current(served, name) if served is not None else None
        if stored is not None:
            return self._answer_served(d, stored, source, name, start), spec
        remaining = timeout_s - (clock.now() - start)  # the demand's own deadline, not anew
        if remaining <= 0:
            raise DeadlineExceeded("the deadline passed before the demand could run")
        run, joined = await self._execute(d, stage, name, remaining, stream)
        if joined:
            return self._answer_served(d, run.stored, AnswerSource.JOINED, name, start), spec
        if name is not None and self.features.c1 and run.storable:
            self._store(name, run)
        return self._answer_run(d, run, name, start), spec

    async def _reuse(self, d: Demand, name: ReuseName | None, timeout_s: float,
                     stream: TextStream | None
                     ) -> tuple[Served | None, AnswerSource, Speculation | None]:
        """Speculation (once), then the library, then another replica's fill."""
        spec = None
        if self.speculation is not None and d.stage is not None:
            spec = await self.speculation.speculate(d, name, timeout_s, stream)
            if spec.served is not None:
                return spec.served, AnswerSource.PROMOTED_FILL, spec
        if name is None:
            return None, AnswerSource.ENGINE, spec
        if self.features.c1:
            served = await self._lookup(name)
            if served is not None:
                return served, AnswerSource.LIBRARY, spec
        if spec is not None:  # another replica's fill, after a library miss
            served = await spec.claim_elsewhere(timeout_s)
            if served is not None:
                return served, AnswerSource.PROMOTED_FILL, spec
        return None, AnswerSource.ENGINE, spec

    async def _execute(self, d: Demand, stage: Stage | None, name: ReuseName | None,
                       timeout_s: float, on_delta: Callable[[str], None] | None
                       ) -> tuple[StageRun, bool]:
        """Execute ``d`` canonically, or wait for the identical execution running now; the run
        and whether it was another demand's (single-flight, module docstring)."""
        key = (d.tenant, name) if name is not None and self.features.c1 else None
        if key is None:
            return await self.executor.execute(d, stage, Priority.CANONICAL, d.request_id,
                                               timeout_s, on_delta), False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (running := self._executing.get(key)) is not None:
            waiting = loop.time()
            try:
                run = await self.executor.identical_run(running, deadline - loop.time())
            except TimeoutError:
                raise DeadlineExceeded("the deadline passed while waiting for an identical "
                                       "demand's execution") from None
            finally:
                charge_wait(loop.time() - waiting)
            if run is not None:
                self.joined += 1
                return run, True
            # that execution failed, was cancelled or read a record written since: run this
            # demand (or join an identical one that started meanwhile)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise DeadlineExceeded("the deadline passed while waiting for an identical "
                                   "demand's execution")
        done: asyncio.Future[StageRun | None] = loop.create_future()
        self._executing[key] = done
        run = None
        try:
            run = await self.executor.execute(d, stage, Priority.CANONICAL, d.request_id,
                                              remaining, on_delta)
            return run, False
        finally:
            if self._executing.get(key) is done:
                del self._executing[key]
            done.set_result(run if run is not None and run.storable else None)

    async def _lookup(self, name: ReuseName) -> Served | None:
        pending = self._stores.get(name)
        if pending is not None:
            await asyncio.shield(pending)
        with maybe_span(self.tracer, "csl.lookup", attributes={
                "dynbranch.reuse_name": str(name)}) as span:
            served = await self.library.lookup(name)
            span.set_attribute("dynbranch.hit", served is not None)
        return served

    # -- storage ------------------------------------------------------------------------------

    def _store(self, name: ReuseName, run: StageRun) -> None:
        if name in self._stores:
            return
        if len(self._stores) >= self.max_pending_stores:
            self.stores_dropped += 1
            log.warning("library store dropped: %d stores in flight (max_pending_stores)",
                        len(self._stores), extra={"reuse_name": str(name)})
            return
        task = asyncio.create_task(self._put(name, run), name=f"csl-put:{name.digest[:12]}")
        self._stores[name] = task
        task.add_done_callback(lambda _t: self._stores.pop(name, None))

    async def _put(self, name: ReuseName, run: StageRun) -> bool:
        with maybe_span(self.tracer, "csl.put", attributes={
                "dynbranch.reuse_name": str(name)}):
            stored = await self.library.put(name, run.stored.encode(), run.read_set, run.cost_s)
        if stored and self.speculation is not None:
            self.speculation.confirmed(name)  # adopters of an identical fill: served now
        return stored

    async def close(self) -> None:
        """Wait for in-flight stores (bounded by their own deadlines)."""
        await asyncio.gather(*list(self._stores.values()), return_exceptions=True)

    # -- answers --------------------------------------------------------------------------------

    async def _current(self, served: Served, name: ReuseName | None) -> StoredResult | None:
        """The served result, unless a gateway record it read has moved on since (then a miss:
        the library disagrees with the corpus, e.g. a csl restored from an older store), or
        its reads cannot be checked now (a miss too, not counted as stale)."""
        stored = StoredResult.decode(served.result)
        if not stored.reads:
            return stored
        current = await self.executor.reads_current(stored.reads)
        if current is False:
            self.refused_stale += 1
            log.warning("refused a served result whose corpus reads are no longer current",
                        extra={"reuse_name": str(name or "")})
        return stored if current else None

    def _answer_served(self, d: Demand, stored: StoredResult, source: AnswerSource,
                       name: ReuseName | None, start: float) -> Answer:
        return Answer(d.request_id, stored.text, stored.finish_reason, stored.usage, ZERO_TIMINGS,
                      source, "", clock.now() - start, str(name or ""),
                      tool_calls=stored.tool_calls, stop_string=stored.stop_string)

    def _answer_run(self, d: Demand, run: StageRun, name: ReuseName | None,
                    start: float) -> Answer:
        s = run.stored
        return Answer(d.request_id, s.text, s.finish_reason, s.usage, run.timings,
                      AnswerSource.ENGINE, run.engine_id, clock.now() - start, str(name or ""),
                      tool_calls=s.tool_calls, stop_string=s.stop_string)


__all__ = ["StageService"]
