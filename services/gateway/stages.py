"""The canonical demand path: one stage demand from the core down to an answer (DESIGN.md §3).

``StageService.run`` is the gateway's hot path, one pass top to bottom:

1. name: the demand's reuse name (``reuse.naming``; none for a non-deterministic stage);
2. speculate: call speculation once (``ports.SpeculationPort``, C2), which may promote a
   matching shadow, adopting its fill while it still runs (``speculation.adoption``);
3. probe or claim: otherwise probe the library (C1, ``reuse.library_path``), and after a miss
   claim another replica's fill if speculation said one may hold it; whatever is served counts
   only while its reads are current (``reuse.freshness``);
4. join or run: otherwise join the identical canonical execution running now
   (``reuse.single_flight``) or execute (``execution``) within what is left of the demand's
   deadline, and store the result with its read-set in the background;
5. tell speculation the answer (and, once stored, the name).

Nothing here calls up into the core: a served result refused as stale is counted
(``LibraryPath.refused_stale``), and the core acts on the count.

May import: ``services.common``, the gateway's ``values``, ``ports``, ``templates``, ``reuse``,
``execution`` and ``speculation``'s port; nothing above it (``core``, the edges).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable

from services.common.values import clock
from services.common.values.errors import DeadlineExceeded
from services.common.values.generation import Priority
from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName
from services.gateway.execution import Executor, StageRun
from services.gateway.ports import Speculation, SpeculationPort
from services.gateway.reuse.library_path import LibraryPath
from services.gateway.reuse.naming import Naming
from services.gateway.reuse.single_flight import SingleFlight
from services.gateway.values import (
    Answer,
    AnswerSource,
    Demand,
    StoredResult,
    TextStream,
    end_wait_account,
    start_wait_account,
)

log = logging.getLogger(__name__)

#: What answers a demand: the result, whose it is, and the demand's own run when it executed.
Found = tuple[StoredResult, AnswerSource, StageRun | None]


class StageService:
    """Runs stage demands for the gateway: name, speculate, probe or claim, join or run."""

    def __init__(self, *, naming: Naming, executor: Executor, library: LibraryPath,
                 single_flight: SingleFlight, speculation: SpeculationPort | None) -> None:
        self.naming = naming
        self.executor = executor
        self.library = library
        self.single_flight = single_flight
        self.features = naming.features
        #: Early fill (C2), when on.
        self.speculation = speculation if self.features.c2 else None

    async def run(self, d: Demand, timeout_s: float,
                  stream: TextStream | None = None) -> Answer:
        """Answer one demand: promoted fill, library hit, joined or own execution.

        ``stream`` receives the text as an engine decodes it (this demand's execution, or the
        fill it adopted); an answer served from a finished shadow or the library arrives whole
        in the returned ``Answer`` only.
        """
        start = clock.now()
        d, name = self.naming.named(d)  # resolving is a no-op where the edge resolved it
        waited, token = start_wait_account()
        try:
            answer, spec = await self._run(d, name, timeout_s, stream, start)
        finally:
            end_wait_account(token)
        if waited[0]:
            answer = dataclasses.replace(answer, waited_s=waited[0])
        if spec is not None:
            spec.answered(answer.text)
        return answer

    async def _run(self, d: Demand, name: ReuseName | None, timeout_s: float,
                   stream: TextStream | None, start: float) -> tuple[Answer, Speculation | None]:
        spec = await self._speculate(d, name, timeout_s, stream)
        found = await self._probe_or_claim(name, spec, timeout_s)
        if found is None:
            remaining = timeout_s - (clock.now() - start)  # the demand's own deadline, not anew
            if remaining <= 0:
                raise DeadlineExceeded("the deadline passed before the demand could run")
            found = await self._execute(d, name, remaining, stream)
        stored, source, run = found
        return Answer.of(d.request_id, stored, source, clock.now() - start, str(name or ""),
                         run.timings if run is not None else None,
                         run.engine_id if run is not None else ""), spec

    async def _speculate(self, d: Demand, name: ReuseName | None, timeout_s: float,
                         stream: TextStream | None) -> Speculation | None:
        """Speculation, once per demand for a template stage (C2 on)."""
        if self.speculation is None or d.stage is None:
            return None
        return await self.speculation.speculate(d, name, timeout_s, stream)

    async def _probe_or_claim(self, name: ReuseName | None, spec: Speculation | None,
                              timeout_s: float) -> Found | None:
        """The promoted fill, else the library's entry, else another replica's fill; served
        only while its reads are current."""
        found = await self._served(name, spec, timeout_s)
        if found is None:
            return None
        stored = await self.library.current(found[0], name)
        return (stored, found[1], None) if stored is not None else None

    async def _served(self, name: ReuseName | None, spec: Speculation | None,
                      timeout_s: float) -> tuple[Served, AnswerSource] | None:
        if spec is not None and spec.served is not None:
            return spec.served, AnswerSource.PROMOTED_FILL
        if name is None:
            return None
        served = await self.library.probe(name) if self.features.c1 else None
        if served is not None:
            return served, AnswerSource.LIBRARY
        served = await spec.claim_elsewhere(timeout_s) if spec is not None else None
        return (served, AnswerSource.PROMOTED_FILL) if served is not None else None

    async def _execute(self, d: Demand, name: ReuseName | None, timeout_s: float,
                       stream: TextStream | None) -> Found:
        """Execute ``d`` canonically, or join the identical execution running now (C1 on);
        an own execution is stored in the background when it may be."""
        run, joined = await self._join_or_run(d, name, timeout_s, stream)
        if joined:
            return run.stored, AnswerSource.JOINED, None
        if name is not None and self.features.c1 and run.storable:
            self.library.store(name, run, self._confirmed)
        return run.stored, AnswerSource.ENGINE, run

    async def _join_or_run(self, d: Demand, name: ReuseName | None, timeout_s: float,
                           stream: TextStream | None) -> tuple[StageRun, bool]:
        """The run of ``d``, and whether it was another demand's."""
        def execute(remaining_s: float) -> Awaitable[StageRun]:
            return self.executor.execute(d, d.stage, Priority.CANONICAL, d.request_id,
                                         remaining_s, stream)

        if name is None or not self.features.c1:
            return await execute(timeout_s), False
        return await self.single_flight.join_or_run((d.tenant, name), execute, timeout_s)

    def _confirmed(self, name: ReuseName) -> None:
        """The library holds this demand's execution: adopters of an identical fill are
        served now."""
        if self.speculation is not None:
            self.speculation.confirmed(name)

    async def close(self) -> None:
        """Wait for in-flight stores (bounded by their own deadlines)."""
        await self.library.close()


__all__ = ["StageService"]
