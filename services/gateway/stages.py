"""Every stage demand, in one place: exact reuse (C1), claims on fills (C2), execution, storage.

``StageService.run`` is the gateway's hot path (DESIGN.md §3 gateway): derive the reuse name;
let the branch manager promote a matching shadow or wait briefly for a matching fill; probe the
library; otherwise execute on an engine (llm) or in-process (tool) and store the result with its
read-set. Only deterministic stages (greedy, seeded, or read-only tools) are ever named, stored
or served (DESIGN.md §5.1). Stores run in owned background tasks so an answer never waits for
them; a demand for a name whose store is still in flight awaits that store first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.trace import Tracer

from services.common.errors import DynbranchError, InvalidArgument, NotFound
from services.common.generation import (
    FinishReason,
    GenerationRequest,
    Priority,
    Sampling,
    Timings,
    Usage,
)
from services.common.reads import ReadSet, RecordRead, Served
from services.common.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.gateway.demand import ZERO_TIMINGS, Answer, Demand, Source
from services.gateway.ports import EnginePort, Execution, LibraryPort
from services.gateway.results import StoredResult
from services.gateway.templates import Stage, StageKind, TemplateRegistry
from services.gateway.tools.base import Tool, ToolResult

if TYPE_CHECKING:
    from services.gateway.branches import BranchManager

from services.common.tracing import maybe_span

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Features:
    """Which mechanisms are on; the experiment arms are combinations of these."""

    c1: bool = True
    c2: bool = True


@dataclass(frozen=True, slots=True)
class StageRun:
    """A stage executed by the gateway: what to answer and what to store."""

    stored: StoredResult
    read_set: ReadSet
    cost_s: float
    timings: Timings
    engine_id: str
    #: False when the tool could not confirm that its output is exactly what its read-set
    #: names (a record rewritten meanwhile, or a broken store): such a result is never stored.
    confirmed: bool = True

    @property
    def complete(self) -> bool:
        """Whether the stage ran to a normal end."""
        return self.stored.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)

    @property
    def storable(self) -> bool:
        """Whether the result may be stored: complete and confirmed against its read-set."""
        return self.confirmed and self.complete


def tool_read_set(result: ToolResult) -> ReadSet:
    """A tool result's reads as a library read-set."""
    return ReadSet(tuple(RecordRead(r.record_id, r.version) for r in result.reads),
                   result.complete)


class StageService:
    """Runs stage demands for the gateway (canonical path) and stages of fills (C2)."""

    def __init__(self, *, registry: TemplateRegistry, library: LibraryPort, engines: EnginePort,
                 tools: Mapping[str, Tool], features: Features, tracer: Tracer) -> None:
        self.registry = registry
        self.library = library
        self.engines = engines
        self.tools = dict(tools)
        self.features = features
        self.tracer = tracer
        self.branches: BranchManager | None = None
        self._stores: dict[ReuseName, asyncio.Task[bool]] = {}

    # -- names -------------------------------------------------------------------------------

    def stage_of(self, d: Demand) -> Stage | None:
        """The template stage a tagged demand names (None for untagged demands)."""
        if not d.tagged:
            return None
        return self.registry.get(d.template_id).stage(d.stage_id)

    def fingerprint(self, template_id: str, stage_id: str, stage_version: int, model: str,
                    sampling: Sampling | None, stage: Stage | None) -> StageFingerprint:
        """The fingerprint of a stage; tool stages name their tool's incarnation as model."""
        if stage is not None and stage.kind is StageKind.TOOL:
            tool = self.tools.get(stage.tool)
            identity = getattr(tool, "identity", f"tool:{stage.tool}")
            return StageFingerprint(template_id, stage_id, stage_version, identity)
        assert sampling is not None
        return StageFingerprint(template_id, stage_id, stage_version, model,
                                temperature=sampling.temperature, top_p=sampling.top_p,
                                top_k=sampling.top_k, seed=sampling.seed,
                                max_tokens=sampling.max_tokens, stop=sampling.stop,
                                ignore_eos=sampling.ignore_eos)

    def name_for(self, tenant: str, fingerprint: StageFingerprint, data: bytes,
                 stage: Stage | None, sampling: Sampling | None) -> ReuseName | None:
        """The reuse name, or None when the stage may not be reused (non-deterministic)."""
        if stage is not None and stage.kind is StageKind.TOOL:
            if not stage.read_only:
                return None
        elif sampling is None or not sampling.deterministic:
            return None
        return reuse_name(tenant, fingerprint, data, shared=bool(stage and stage.shared))

    def demand_name(self, d: Demand, stage: Stage | None) -> ReuseName | None:
        """The reuse name of a canonical demand, when C1 or C2 is on."""
        if not (self.features.c1 or self.features.c2):
            return None
        fp = self.fingerprint(d.template_id, d.stage_id, d.stage_version, d.model, d.sampling,
                              stage)
        return self.name_for(d.tenant, fp, d.prompt.encode(), stage, d.sampling)

    # -- the canonical path -----------------------------------------------------------------------

    async def run(self, d: Demand, timeout_s: float,
                  on_delta: Callable[[str], None] | None = None) -> Answer:
        """Answer one demand: promoted fill, library hit, or execution.

        ``on_delta`` receives the text as an engine streams it; an answer served without engine
        work arrives whole in the returned ``Answer`` only.
        """
        start = time.perf_counter()
        stage = self.stage_of(d)
        name = self.demand_name(d, stage)
        served, source = await self._reuse(d, stage, name, timeout_s)
        if served is not None:
            answer = self._answer_served(d, served, source, name, start)
        else:
            run = await self.execute(d, stage, Priority.CANONICAL, d.request_id, timeout_s,
                                     on_delta)
            if name is not None and self.features.c1 and run.storable:
                self._store(name, run)
            answer = self._answer_run(d, run, name, start)
        if self.branches is not None and self.features.c2:
            self.branches.on_output(d, answer.text)
        return answer

    async def _reuse(self, d: Demand, stage: Stage | None, name: ReuseName | None,
                     timeout_s: float) -> tuple[Served | None, Source]:
        if self.branches is not None and self.features.c2 and stage is not None:
            served = await self.branches.handle(d, stage, name, timeout_s)
            if served is not None:
                return served, Source.PROMOTED_FILL
        if name is None:
            return None, Source.ENGINE
        if not self.features.c1:
            return None, Source.ENGINE
        pending = self._stores.get(name)
        if pending is not None:
            await asyncio.shield(pending)
        with maybe_span(self.tracer, "csl.lookup", attributes={
                "dynbranch.reuse_name": str(name)}) as span:
            served = await self.library.lookup(name)
            span.set_attribute("dynbranch.hit", served is not None)
        return served, Source.LIBRARY

    async def execute(self, d: Demand, stage: Stage | None, priority: Priority, request_id: str,
                      timeout_s: float, on_delta: Callable[[str], None] | None = None
                      ) -> StageRun:
        """Execute a stage: a builtin tool in-process, or a generation on an engine."""
        if stage is not None and stage.kind is StageKind.TOOL:
            return await self._run_tool(stage, d.prompt)
        if d.sampling is None:
            raise InvalidArgument("demand.sampling", "required for llm stages")
        request = GenerationRequest(request_id=request_id, model=d.model, prompt=d.prompt,
                                    sampling=d.sampling, priority=priority)
        key = f"{d.tenant}/{d.workflow_id}" if d.workflow_id else ""
        ex: Execution = await self.engines.generate(request, timeout_s, prefix_key=key,
                                                    on_delta=on_delta)
        stored = StoredResult(ex.text, ex.finish_reason, ex.usage)
        return StageRun(stored, ReadSet.pure(), ex.timings.total_s, ex.timings, ex.engine_id)

    async def _run_tool(self, stage: Stage, args: str) -> StageRun:
        tool = self.tools.get(stage.tool)
        if tool is None:
            raise NotFound(f"demand.stage_id: tool {stage.tool!r} is not built into the gateway; "
                           f"the harness runs it")
        start = time.perf_counter()
        result = await asyncio.to_thread(tool.run, args.encode())
        elapsed = time.perf_counter() - start
        stored = StoredResult(result.output, FinishReason.STOP, Usage(0, 0, 0))
        timings = Timings(0.0, 0.0, 0.0, elapsed)
        return StageRun(stored, tool_read_set(result), elapsed, timings, "",
                        await self._confirm(tool, result))

    @staticmethod
    async def _confirm(tool: Tool, result: ToolResult) -> bool:
        """Whether the tool confirms its output against its read-set (tools without a
        ``confirm`` are trusted); a broken store is logged and never stored."""
        confirm = getattr(tool, "confirm", None)
        if confirm is None:
            return True
        try:
            return bool(await asyncio.to_thread(confirm, result))
        except DynbranchError as exc:
            log.error("tool %s: result not stored: %s", tool.name, exc)
            return False

    # -- storage --------------------------------------------------------------------------------

    def _store(self, name: ReuseName, run: StageRun) -> None:
        if name in self._stores:
            return
        task = asyncio.create_task(self._put(name, run), name=f"csl-put:{name.digest[:12]}")
        self._stores[name] = task
        task.add_done_callback(lambda _t: self._stores.pop(name, None))

    async def _put(self, name: ReuseName, run: StageRun) -> bool:
        with maybe_span(self.tracer, "csl.put", attributes={
                "dynbranch.reuse_name": str(name)}):
            return await self.library.put(name, run.stored.encode(), run.read_set, run.cost_s)

    async def close(self) -> None:
        """Wait for in-flight stores (bounded by their own deadlines)."""
        await asyncio.gather(*list(self._stores.values()), return_exceptions=True)

    # -- answers --------------------------------------------------------------------------------

    def _answer_served(self, d: Demand, served: Served, source: Source, name: ReuseName | None,
                       start: float) -> Answer:
        stored = StoredResult.decode(served.result)
        return Answer(d.request_id, stored.text, stored.finish_reason, stored.usage, ZERO_TIMINGS,
                      source, "", time.perf_counter() - start, str(name or ""))

    def _answer_run(self, d: Demand, run: StageRun, name: ReuseName | None,
                    start: float) -> Answer:
        s = run.stored
        return Answer(d.request_id, s.text, s.finish_reason, s.usage, run.timings, Source.ENGINE,
                      run.engine_id, time.perf_counter() - start, str(name or ""))


__all__ = ["Features", "StageRun", "StageService", "tool_read_set"]
