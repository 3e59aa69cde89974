"""Naming and running one stage (``execution.Executor``): a demand's stage is resolved once, a
name exists only with C1 or C2 on and only for deterministic sampling, equal demands share a
name and tenants never do, and running a stage accounts its engine seconds by priority."""

from __future__ import annotations

import dataclasses
import json

import pytest

from services.common.values.errors import NotFound
from services.common.values.generation import Priority, Sampling
from services.gateway.values import Demand
from tests.gateway.local_ports import local_core, routing_demand

INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


def router(tenant: str = "acme") -> Demand:
    return routing_demand(tenant, "wf", "router", INPUTS)


async def test_a_demand_is_resolved_once_and_an_unknown_stage_is_not_found() -> None:
    async with local_core(c2=False, engines=1) as core:
        ex = core.stages.executor
        d = ex.resolved(router())
        assert d.stage is ex.registry.get("routing").stage("router")
        assert ex.resolved(d) is d
        untagged = dataclasses.replace(d, template_id="", stage_id="", stage=None)
        assert ex.resolved(untagged) is untagged
        with pytest.raises(NotFound):
            ex.resolved(dataclasses.replace(d, stage_id="nope", stage=None))


async def test_names_are_equal_for_equal_demands_and_never_shared_across_tenants() -> None:
    async with local_core(c2=False, engines=1) as core:
        ex = core.stages.executor
        a, b = ex.resolved(router()), ex.resolved(router())
        assert ex.demand_name(a, a.stage) == ex.demand_name(b, b.stage) is not None
        other = ex.resolved(router("other-tenant"))
        assert ex.demand_name(other, other.stage) != ex.demand_name(a, a.stage)
        sampled = dataclasses.replace(a, sampling=Sampling(max_tokens=8, temperature=0.7))
        assert ex.demand_name(sampled, sampled.stage) is None  # not reproducible: no name
    async with local_core(c1=False, c2=False, engines=1) as floor:
        d = floor.stages.executor.resolved(router())
        assert floor.stages.executor.demand_name(d, d.stage) is None


async def test_running_a_stage_accounts_its_engine_seconds_by_priority() -> None:
    async with local_core(c2=False, engines=1) as core:
        ex = core.stages.executor
        d = ex.resolved(router())
        run = await ex.execute(d, d.stage, Priority.CANONICAL, d.request_id, 30.0)
        assert run.stored.text and run.storable
        assert ex.engine_s[Priority.CANONICAL] > 0 and Priority.FILL not in ex.engine_s
