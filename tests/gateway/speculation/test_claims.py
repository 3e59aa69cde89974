"""Claiming another replica's fill (``speculation.claims``): which stages a decision point runs
and starts, which demands may be held elsewhere, and the claim itself: counted, served, and a
first stage of a chain settles the workflow's scope keeping what it claimed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Coroutine
from typing import Any

from services.common.values.reads import Claimed, Served
from services.common.values.reuse_name import ReuseName
from services.gateway.speculation.claims import Claims, runs, starts
from services.gateway.speculation.state import Branch, BranchSettings, scope_of
from services.gateway.templates import Template, TemplateRegistry, load_builtin
from services.gateway.values import Demand
from tests.csl.factories import name
from tests.gateway.local_ports import routing_demand

ROUTING = load_builtin("routing")  # router decides; handler, executor follow
HCI = load_builtin("hci")  # offer decides; fulfil follows
COPY = dataclasses.replace(ROUTING, id="routing-copy")  # another template, the same stages
INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


class _Library:
    """Enough of ``LibraryPort`` for claims: a scripted claim, claims and settlements recorded."""

    def __init__(self, found: Claimed | None) -> None:
        self.found = found
        self.claims: list[tuple[ReuseName, str, float]] = []
        self.settled: list[tuple[str, str, str, str, str]] = []

    async def claim(self, name: ReuseName, scope: str, wait_s: float) -> Claimed | None:
        self.claims.append((name, scope, wait_s))
        return self.found

    async def settle_scope(self, scope: str, template_id: str, stage_id: str,
                           keep_branch: str = "", keep_candidate: str = "") -> int:
        self.settled.append((scope, template_id, stage_id, keep_branch, keep_candidate))
        return 1


def _claims(found: Claimed | None = None, fill_wait_s: float = 0.5
            ) -> tuple[Claims, _Library, list[tuple[Coroutine[Any, Any, None], str]]]:
    library = _Library(found)
    registry = TemplateRegistry()
    registry.register(ROUTING)
    registry.register(HCI)
    spawned: list[tuple[Coroutine[Any, Any, None], str]] = []
    claims = Claims(library, registry, BranchSettings(fill_wait_s=fill_wait_s),  # type: ignore[arg-type]
                    lambda coro, label: spawned.append((coro, label)))
    return claims, library, spawned


def _demand(stage: str) -> Demand:
    return routing_demand("acme", "wf", stage, INPUTS, choice="get_weather",
                          outputs={"handler": "{}"} if stage == "executor" else None)


def _branch(template: Template = ROUTING) -> Branch:
    return Branch(id="b1", tenant="acme", workflow_id="wf", template=template,
                  point=template.decisions[0], inputs={}, outputs={}, model="m")


def test_a_point_runs_every_stage_of_its_chains_and_starts_only_the_first() -> None:
    point = ROUTING.decisions[0]
    assert runs(point, "handler") and runs(point, "executor") and not runs(point, "router")
    assert starts(point, "handler")
    assert not starts(point, "executor") and not starts(point, "router")
    assert not runs(HCI.decisions[0], "handler") and starts(HCI.decisions[0], "fulfil")


def test_only_a_named_workflow_demand_at_a_chain_stage_with_no_branch_here_is_claimable() -> None:
    claims, _, _ = _claims()
    d, handler = _demand("handler"), ROUTING.stage("handler")
    assert claims.claimable(d, handler, name(1), [])
    assert claims.claimable(d, ROUTING.stage("executor"), name(1), [])
    assert claims.claimable(d, handler, name(1), [_branch(HCI), _branch(COPY)])  # not its own
    assert not claims.claimable(d, handler, None, [])
    assert not claims.claimable(dataclasses.replace(d, workflow_id=""), handler, name(1), [])
    assert not claims.claimable(d, ROUTING.stage("router"), name(1), [])  # no point runs it
    assert not claims.claimable(d, handler, name(1), [_branch()])  # its branch is here


async def test_a_claimed_first_stage_is_served_counted_and_settles_its_scope_keeping_it() -> None:
    claims, library, spawned = _claims(Claimed(b"text", 1.5, "b9", "get_weather"))
    served = await claims.claim_elsewhere(_demand("handler"), ROUTING.stage("handler"),
                                          name(1), timeout_s=10.0)
    assert served == Served(b"text", 1.5) and claims.claimed == 1
    assert library.claims == [(name(1), scope_of("acme", "wf"), 0.5)]
    ((settle, label),) = spawned
    assert label == "settle:wf"
    await settle
    assert library.settled == [(scope_of("acme", "wf"), "routing", "handler", "b9",
                                "get_weather")]


async def test_a_later_stage_settles_nothing_and_a_miss_keeps_no_candidate() -> None:
    claims, library, spawned = _claims(Claimed(b"text", 1.0, "b9", "get_weather"))
    assert await claims.claim_elsewhere(_demand("executor"), ROUTING.stage("executor"),
                                        name(2), timeout_s=0.2) == Served(b"text", 1.0)
    assert claims.claimed == 1 and spawned == []
    assert library.claims[-1][2] == 0.2  # the demand's own deadline is shorter: it bounds
    library.found = None
    assert await claims.claim_elsewhere(_demand("handler"), ROUTING.stage("handler"),
                                        name(3), timeout_s=10.0) is None
    assert claims.claimed == 1
    ((settle, _),) = spawned
    await settle
    assert library.settled == [(scope_of("acme", "wf"), "routing", "handler", "", "")]
