"""Executing one stage, and naming it: the bottom of the gateway's demand path.

A stage runs either as a generation on an engine agent (through ``EnginePort``) or as a builtin
tool in-process; a tool result is confirmed against its read-set before it may be stored. The
reuse name of a stage (tenant, fingerprint, rendered input) is derived here too, since only
deterministic stages (greedy, seeded, or read-only tools) are ever named (DESIGN.md §5.1).

``Executor`` is the narrow interface the speculation layer (branches, fills) and the canonical
path (``stages.StageService``) both build on. May import: ``services.common``, the gateway's
``values``, ``ports``, ``templates`` and ``tools``; nothing above it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from services.common.values import clock
from services.common.values.errors import DynbranchError, InvalidArgument, NotFound, quoted
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    Priority,
    Sampling,
    Timings,
    Usage,
)
from services.common.values.reads import ReadSet, RecordRead
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.gateway.ports import EnginePort, Execution
from services.gateway.templates import Stage, StageKind, TemplateRegistry
from services.gateway.tools.base import Tool, ToolResult
from services.gateway.values import Demand, StoredResult

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


class DecodePace:
    """Per model, how long a generation takes per output token (wall seconds, EWMA) and how
    many engine seconds one wall second is (1 on a real engine; 1 / time_scale on the sim):
    what projects a decision's remaining resolution window."""

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self._per_token: dict[str, float] = {}
        self._engine_per_wall: dict[str, float] = {}
        self._tokens_per_byte: dict[str, float] = {}

    def observe(self, model: str, wall_s: float, engine_s: float, tokens: int) -> None:
        """Learn from one finished generation."""
        if tokens <= 0 or wall_s <= 0:
            return
        for table, value in ((self._per_token, wall_s / tokens),
                             (self._engine_per_wall, engine_s / wall_s if engine_s > 0 else 1.0)):
            old = table.get(model)
            table[model] = value if old is None else old + self.alpha * (value - old)

    def observe_prompt(self, model: str, prompt_bytes: int, prompt_tokens: int) -> None:
        """Learn how many tokens a prompt byte is on ``model``'s tokenizer."""
        if prompt_bytes > 0 and prompt_tokens > 0:
            value, old = prompt_tokens / prompt_bytes, self._tokens_per_byte.get(model)
            self._tokens_per_byte[model] = (value if old is None
                                            else old + self.alpha * (value - old))

    def prompt_tokens(self, model: str, text: str) -> int:
        """Projected prompt tokens of ``text`` on ``model`` (4 bytes a token until learned)."""
        return math.ceil(len(text.encode()) * self._tokens_per_byte.get(model, 0.25))

    def engine_per_wall(self, model: str) -> float:
        """Engine seconds per wall second on ``model`` (1 until learned; 1 / time_scale on a
        compressed sim)."""
        return self._engine_per_wall.get(model, 1.0)

    def engine_s_per_token(self, model: str) -> float | None:
        """Engine seconds one output token takes on ``model`` (None before any generation)."""
        per_token = self._per_token.get(model)
        if per_token is None:
            return None
        return per_token * self._engine_per_wall[model]  # both are learned together

    def window_s(self, model: str, max_tokens: int, elapsed_wall_s: float) -> float:
        """Remaining resolution window of a decision decoding up to ``max_tokens``, in engine
        seconds: 0 when nothing is known yet; negative once it has closed."""
        per_token = self._per_token.get(model)
        if per_token is None:
            return 0.0
        remaining_wall = max_tokens * per_token - elapsed_wall_s
        return remaining_wall * self._engine_per_wall[model] if remaining_wall > 0 else -1.0


class Executor:
    """Names and runs stages: on an engine (llm) or in-process (builtin tools)."""

    def __init__(self, *, registry: TemplateRegistry, engines: EnginePort,
                 tools: Mapping[str, Tool], features: Features) -> None:
        self.registry = registry
        self.engines = engines
        self.tools = dict(tools)
        self.features = features
        self.pace = DecodePace()
        #: Engine seconds spent per priority (prefill + decode of every generation, queueing
        #: excluded), cumulative: the cost side of early fill that the benchmarks report.
        self.engine_s: dict[Priority, float] = {}
        #: Canonical executions running now on this gateway, by tenant and reuse name; each
        #: resolves to its run when storable, else None. The demand path (``stages``) keeps it
        #: for single-flight, and a fill step whose name is running canonically waits for that
        #: run instead of computing it again (``speculation.fills``).
        self.executing: dict[tuple[str, ReuseName], asyncio.Future[StageRun | None]] = {}

    # -- names -------------------------------------------------------------------------------

    def resolved(self, d: Demand) -> Demand:
        """``d`` with the template stage it names (``NotFound`` for an unknown one); ``d``
        itself when untagged or already resolved, so a demand is resolved once."""
        if not d.tagged or d.stage is not None:
            return d
        return dataclasses.replace(d, stage=self.registry.get(d.template_id).stage(d.stage_id))

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
        data = d.prompt.encode()
        if d.chat is not None:  # tools, tool choice and response format change the output too
            data += b"\x00" + d.chat.name_bytes()
        return self.name_for(d.tenant, fp, data, stage, d.sampling)

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
        return StageRun(stored, tool_read_set(result), elapsed, timings, "", confirmed)

    @staticmethod
    async def _run_and_confirm(tool: Tool, args: str) -> tuple[ToolResult, float, bool]:
        """Run a tool, timed, then let it confirm its output against its read-set (tools without
        ``confirm`` are trusted); a broken store, or a confirmation that cannot be had, is
        logged and the result never stored."""
        start = time.perf_counter()
        result = await tool.run(args.encode())
        elapsed = time.perf_counter() - start
        confirm = getattr(tool, "confirm", None)
        if confirm is None:
            return result, elapsed, True
        try:
            return result, elapsed, bool(await confirm(result))
        except DynbranchError as exc:
            log.error("tool %s: result not stored: %s", tool.name, exc)
            return result, elapsed, False

    async def identical_run(self, running: asyncio.Future[StageRun | None], timeout_s: float
                            ) -> StageRun | None:
        """The run of an identical canonical execution under way (``executing``), once it ends:
        None when it failed, was cancelled, could not be stored or read a record written since.
        ``TimeoutError`` after ``timeout_s``; the execution itself is never cancelled."""
        run = await asyncio.wait_for(asyncio.shield(running), timeout_s)
        return run if run is not None and await self.reads_current(run.stored.reads) else None

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool | None:
        """Whether every read of a stored result is still at its version in the tool that owns
        the record (a record no builtin tool owns cannot be checked here and passes: the
        library's version table guards it); None when a tool could not say (its corpus
        unreachable): not current, but not known stale either."""
        for tool in self.tools.values():
            check = getattr(tool, "reads_current", None)
            if check is None:
                continue
            try:
                if not await check(reads):
                    return False
            except DynbranchError as exc:
                log.warning("tool %s: could not check a result's reads: %s", tool.name, exc)
                return None
        return True


__all__ = ["DecodePace", "Executor", "Features", "StageRun", "tool_read_set"]
