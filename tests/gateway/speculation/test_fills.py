"""Running one fill (``speculation.fills.FillRunner``): a candidate's step is named exactly as the
canonical demand for it would be, runs at fill priority and stores a shadow under that name, and
every step's event ends set."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.trace import NoOpTracer

from services.common.values.generation import Priority
from services.gateway.reuse.freshness import Freshness
from services.gateway.speculation.fills import FillRunner
from services.gateway.speculation.state import Branch, BranchSettings, Fill
from services.gateway.values import AnswerSource
from tests.gateway.local_ports import Core, local_core, routing_demand

INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


def _runner(core: Core) -> FillRunner:
    """A fill runner over the core's executor, library and reuse parts (as its manager's)."""
    stages = core.stages
    return FillRunner(stages.executor, core.library, BranchSettings(), NoOpTracer(),
                      naming=stages.naming, freshness=Freshness({}),
                      single_flight=stages.single_flight)


async def test_a_fill_step_is_named_as_its_canonical_demand_and_stored_as_a_shadow() -> None:
    async with local_core(c2=True, engines=1) as core:
        ex, naming = core.stages.executor, core.stages.naming
        template = naming.registry.get("routing")
        branch = Branch(id="b1", tenant="acme", workflow_id="wf", template=template,
                        point=template.decisions[0], inputs=dict(INPUTS),
                        outputs={"router": "get_weather"}, model="qwen3-32b")
        runner = _runner(core)
        canonical = naming.resolved(routing_demand("acme", "wf", "handler", INPUTS,
                                               choice="get_weather",
                                               outputs={"router": "get_weather"}))
        found = runner.named(branch, "get_weather", "handler", dict(branch.outputs))
        assert found is not None and found[1] == naming.demand_name(canonical)
        fill = Fill("get_weather", 0)
        await runner.run(branch, fill)
        assert fill.steps and all(s.done.is_set() for s in fill.steps)
        first = fill.steps[0]
        assert first.ok and first.name == found[1] and first.producer == "fill/b1/get_weather/0"
        assert ex.engine_s.get(Priority.FILL, 0) > 0 and fill.cost_s > 0
        assert await core.library.promote(first.name, "b1") is not None


async def test_a_fill_step_running_canonically_takes_that_run_and_costs_no_engine_work() -> None:
    """An exact repeat's fill while its original runs: the step waits for the canonical
    execution of its name (single-flight), takes its text, stores no shadow and spends nothing;
    it is closed to promotion meanwhile (its demand joins the execution itself)."""
    async with local_core(c2=True, engines=1, time_scale=0.05) as core:
        ex, naming = core.stages.executor, core.stages.naming
        template = naming.registry.get("routing")
        branch = Branch(id="b2", tenant="acme", workflow_id="wf2", template=template,
                        point=template.decisions[0], inputs=dict(INPUTS),
                        outputs={"router": "get_weather"}, model="qwen3-32b")
        runner = _runner(core)
        canonical = naming.resolved(routing_demand("acme", "wf1", "handler", INPUTS,
                                               choice="get_weather",
                                               outputs={"router": "get_weather"}))
        original = asyncio.create_task(core.stages.run(canonical, 30))
        name = naming.demand_name(canonical)
        assert name is not None
        while core.stages.single_flight.running("acme", name) is None:  # the original runs
            await asyncio.sleep(0)
        fill = Fill("get_weather", 0)
        running = asyncio.create_task(runner.run(branch, fill))
        while not fill.steps:
            await asyncio.sleep(0)
        first = fill.steps[0]
        await asyncio.sleep(0.01)
        assert not first.done.is_set() and first.confirmed and not first.open(fill)
        answer = await original
        await running
        assert first.ok and first.confirmed and not first.producer and first.cost_s == 0
        assert runner.joined >= 1
        # only the chain's later steps ran (on the canonical run's text)
        assert fill.cost_s == sum(s.cost_s for s in fill.steps[1:])
        assert ex.engine_s.get(Priority.FILL, 0) == pytest.approx(fill.cost_s)
        assert await core.library.promote(name, "b2") is None  # no shadow of its own
        assert answer.source is AnswerSource.ENGINE
