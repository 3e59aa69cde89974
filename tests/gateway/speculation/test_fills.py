"""Running one fill (``speculation.fills.FillRunner``): a candidate's step is named exactly as the
canonical demand for it would be, runs at fill priority and stores a shadow under that name, and
every step's event ends set."""

from __future__ import annotations

import json

from opentelemetry.trace import NoOpTracer

from services.common.values.generation import Priority
from services.gateway.speculation.fills import FillRunner
from services.gateway.speculation.state import Branch, BranchSettings, Fill
from tests.gateway.local_ports import local_core, routing_demand

INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


async def test_a_fill_step_is_named_as_its_canonical_demand_and_stored_as_a_shadow() -> None:
    async with local_core(c2=True, engines=1) as core:
        ex = core.stages.executor
        template = ex.registry.get("routing")
        branch = Branch(id="b1", tenant="acme", workflow_id="wf", template=template,
                        point=template.decisions[0], inputs=dict(INPUTS),
                        outputs={"router": "get_weather"}, model="qwen3-32b")
        runner = FillRunner(ex, core.stages.library, BranchSettings(), NoOpTracer())
        canonical = ex.resolved(routing_demand("acme", "wf", "handler", INPUTS,
                                               choice="get_weather",
                                               outputs={"router": "get_weather"}))
        found = runner.named(branch, "get_weather", "handler", dict(branch.outputs))
        assert found is not None and found[1] == ex.demand_name(canonical, canonical.stage)
        fill = Fill("get_weather", 0)
        await runner.run(branch, fill)
        assert fill.steps and all(s.done.is_set() for s in fill.steps)
        first = fill.steps[0]
        assert first.ok and first.name == found[1] and first.producer == "fill/b1/get_weather/0"
        assert ex.engine_s.get(Priority.FILL, 0) > 0 and fill.cost_s > 0
        assert await core.stages.library.promote(first.name, "b1") is not None
