"""Executing one stage: the bottom of the gateway's demand path.

A stage runs either as a generation on an engine agent (through ``EnginePort``) or as a builtin
tool in-process; a tool result is confirmed against its read-set (``Tool.confirm``) before it may
be stored. Each generation teaches the decode pace (``pace.DecodePace``, handed in) and adds its
engine seconds to the counters by priority.

``Executor`` is what the canonical path (``stages.StageService``) and the fill runner
(``speculation.fills``) both run stages through. May import: ``services.common``, the gateway's
``values``, ``ports``, ``pace``, ``templates`` and ``tools``; nothing above it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from services.common.values import clock
from services.common.values.errors import DynbranchError, InvalidArgument, NotFound, quoted
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    Priority,
    Timings,
    Usage,
)
from services.common.values.reads import ReadSet
from services.gateway.pace import DecodePace
from services.gateway.ports import EnginePort, Execution
from services.gateway.templates import Stage, StageKind
from services.gateway.tools.base import Tool, ToolResult
from services.gateway.values import Demand, StoredResult

log = logging.getLogger(__name__)


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


class Executor:
    """Runs stages: on an engine (llm) or in-process (builtin tools)."""

    def __init__(self, *, engines: EnginePort, tools: Mapping[str, Tool],
                 pace: DecodePace) -> None:
        self.engines = engines
        self.tools = dict(tools)
        #: Learns from every generation run here (speculation reads it).
        self.pace = pace
        #: Engine seconds spent per priority (prefill + decode of every generation, queueing
        #: excluded), cumulative: the cost side of early fill that the benchmarks report.
        self.engine_s: dict[Priority, float] = {}

    # -- execution ----------------------------------------------------------------------------

    async def execute(self, d: Demand, stage: Stage | None, priority: Priority, request_id: str,
                      timeout_s: float, on_delta: Callable[[str], None] | None = None
                      ) -> StageRun:
        """Execute a stage: a builtin tool in-process, or a generation on an engine."""
        if stage is not None and stage.kind is StageKind.TOOL:
            return await self._run_tool(stage, d.prompt)
        if d.sampling is None:
            raise InvalidArgument("demand.sampling", "required for llm stages")
        request = GenerationRequest(request_id=request_id, model=d.model, prompt=d.prompt,
                                    sampling=d.sampling, priority=priority, chat=d.chat)
        key = f"{d.tenant}/{d.workflow_id}" if d.workflow_id else ""
        started = clock.now()
        ex: Execution = await self.engines.generate(request, timeout_s, prefix_key=key,
                                                    on_delta=on_delta)
        self.pace.observe(d.model, clock.now() - started, ex.timings.total_s,
                          ex.usage.completion_tokens)
        self.pace.observe_prompt(d.model, len(d.prompt.encode()), ex.usage.prompt_tokens)
        self.engine_s[priority] = (self.engine_s.get(priority, 0.0) + ex.timings.prefill_s
                                   + ex.timings.decode_s)
        stored = StoredResult(ex.text, ex.finish_reason, ex.usage, tool_calls=ex.tool_calls,
                              stop_string=ex.stop_string)
        return StageRun(stored, ReadSet.pure(), ex.timings.total_s, ex.timings, ex.engine_id)

    async def _run_tool(self, stage: Stage, args: str) -> StageRun:
        tool = self.tools.get(stage.tool)
        if tool is None:
            raise NotFound(f"demand.stage_id: tool {quoted(stage.tool)} is not built into the "
                           "gateway; the harness runs it")
        result, elapsed, confirmed = await self._run_and_confirm(tool, args)
        stored = StoredResult(result.output, FinishReason.STOP, Usage(0, 0, 0),
                              tuple((r.record_id, r.version) for r in result.reads))
        timings = Timings(0.0, 0.0, 0.0, elapsed)
        return StageRun(stored, result.read_set(), elapsed, timings, "", confirmed)

    @staticmethod
    async def _run_and_confirm(tool: Tool, args: str) -> tuple[ToolResult, float, bool]:
        """Run a tool, timed on the run's clock (simulated seconds on a virtual one), then let
        it confirm its output against its read-set; a broken store, or a confirmation that
        cannot be had, is logged and the result never stored."""
        start = clock.now()
        result = await tool.run(args.encode())
        elapsed = clock.now() - start
        try:
            return result, elapsed, bool(await tool.confirm(result))
        except DynbranchError as exc:
            log.error("tool %s: result not stored: %s", tool.name, exc)
            return result, elapsed, False


__all__ = ["Executor", "StageRun"]
