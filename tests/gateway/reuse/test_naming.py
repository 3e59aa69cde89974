"""Naming a stage (``reuse.naming.Naming``): a demand's stage is resolved once, a name exists
only with C1 or C2 on and only for deterministic sampling, equal demands share a name and tenants
never do, and a tool stage's fingerprint names its tool's incarnation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from services.common.values.errors import NotFound
from services.common.values.generation import Sampling
from services.gateway.reuse.naming import Naming
from services.gateway.templates import Stage, StageKind, TemplateRegistry
from services.gateway.values import Demand, Features
from tests.gateway.local_ports import local_core, routing_demand

INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


def router(tenant: str = "acme") -> Demand:
    return routing_demand(tenant, "wf", "router", INPUTS)


async def test_a_demand_is_resolved_once_and_an_unknown_stage_is_not_found() -> None:
    async with local_core(c2=False, engines=1) as core:
        naming = core.stages.naming
        d = naming.resolved(router())
        assert d.stage is naming.registry.get("routing").stage("router")
        assert naming.resolved(d) is d
        untagged = dataclasses.replace(d, template_id="", stage_id="", stage=None)
        assert naming.resolved(untagged) is untagged
        with pytest.raises(NotFound):
            naming.resolved(dataclasses.replace(d, stage_id="nope", stage=None))


async def test_names_are_equal_for_equal_demands_and_never_shared_across_tenants() -> None:
    async with local_core(c2=False, engines=1) as core:
        naming = core.stages.naming
        a, b = naming.resolved(router()), naming.resolved(router())
        assert naming.demand_name(a) == naming.demand_name(b) is not None
        other = naming.resolved(router("other-tenant"))
        assert naming.demand_name(other) != naming.demand_name(a)
        sampled = dataclasses.replace(a, sampling=Sampling(max_tokens=8, temperature=0.7))
        assert naming.demand_name(sampled) is None  # not reproducible: no name
    async with local_core(c1=False, c2=False, engines=1) as floor:
        d = floor.stages.naming.resolved(router())
        assert floor.stages.naming.demand_name(d) is None


class _Tool:
    """A builtin tool whose corpus has an incarnation."""

    name, read_only, identity = "retrieve", True, "tool:retrieve/wiki@2"


def test_a_tool_stage_is_fingerprinted_by_its_tool_s_declared_identity() -> None:
    stage = Stage(id="search", kind=StageKind.TOOL, inputs=(), tool="retrieve")
    tools = {"retrieve": _Tool()}
    built = Naming(registry=TemplateRegistry(), tools=tools,  # type: ignore[arg-type]
                   features=Features())
    assert built.fingerprint("t", "search", 1, "", None, stage).model == "tool:retrieve/wiki@2"
    harness = Naming(registry=TemplateRegistry(), tools={}, features=Features())
    assert harness.fingerprint("t", "search", 1, "", None, stage).model == "tool:retrieve"
