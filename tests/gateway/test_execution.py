"""Running one stage (``execution.Executor``): a generation accounts its engine seconds by
priority and teaches the decode pace."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest

from loadgen.meshes.virtual import run_virtual
from services.common.values.generation import Priority
from services.gateway.execution import Executor, StageRun
from services.gateway.pace import DecodePace
from services.gateway.ports import EnginePort
from services.gateway.templates.model import StageKind
from services.gateway.templates.registry import load_builtin
from services.gateway.tools.base import ToolResult
from services.gateway.values import Demand
from tests.gateway.local_ports import MODEL, local_core, routing_demand

INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


async def test_running_a_stage_accounts_its_engine_seconds_by_priority() -> None:
    async with local_core(c2=False, engines=1) as core:
        ex = core.stages.executor
        d = core.stages.naming.resolved(routing_demand("acme", "wf", "router", INPUTS))
        assert ex.pace.engine_s_per_token(MODEL) is None  # nothing learned yet
        run = await ex.execute(d, d.stage, Priority.CANONICAL, d.request_id, 30.0)
        assert run.stored.text and run.storable
        assert ex.engine_s[Priority.CANONICAL] > 0 and Priority.FILL not in ex.engine_s
        assert ex.pace.engine_s_per_token(MODEL) is not None


class _SlowTool:
    """A builtin tool that takes ``seconds`` of the run's clock and reads nothing."""

    name, read_only, identity = "retrieve", True, "slow-tool/1"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def run(self, args: bytes | str | Mapping[str, Any]) -> ToolResult:
        await asyncio.sleep(self.seconds)
        return ToolResult("found", ())

    async def confirm(self, result: ToolResult) -> bool:
        return True

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool:
        return True


def test_a_tool_stage_is_timed_on_the_runs_clock() -> None:
    """On a virtual clock a tool's time is simulated seconds, as every other duration the
    gateway decides by (a wall-clock timer read ~0 here, and a varying few ms in a mesh)."""
    stage = load_builtin("react").stage("retrieve")
    assert stage.kind is StageKind.TOOL
    ex = Executor(engines=cast(EnginePort, None), tools={"retrieve": _SlowTool(2.5)},
                  pace=DecodePace())
    d = Demand(tenant="acme", request_id="r", model="", prompt='{"query": "x"}', sampling=None,
               stage=stage)

    async def main() -> StageRun:
        return await ex.execute(d, stage, Priority.CANONICAL, "r", 30.0)

    run = run_virtual(main)
    assert run.stored.text == "found" and run.confirmed
    assert run.cost_s == run.timings.total_s == pytest.approx(2.5, abs=1e-6)
