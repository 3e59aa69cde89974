"""DESIGN.md §5 invariants at the gateway, under interleavings (hypothesis) and failures.

1 value equivalence: every workflow returns what the no-reuse floor returns;
2 non-interference: a shadow is never observable before a matching demand of its own workflow
  and tenant promotes it;
6 a lost library or admission service is a miss or a fallback, never a wrong answer.
(3 freshness: tests/gateway/test_freshness.py and tests/csl; 4 losers: speculation/test_branches.py;
5 lease accounting lands with LADS delivery.)
"""

from __future__ import annotations

import asyncio
import json

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.pb import gateway_pb2
from services.gateway.templates import load_builtin
from services.gateway.values import AnswerSource, Demand
from tests.gateway.local_ports import MODEL, Core, local_core, routing_demand
from tests.gateway.mesh import mesh

ROUTING = load_builtin("routing")
FUNCTIONS = ["get_weather", "book_flight", "convert_currency"]
QUERIES = ["Book a flight to Rome.", "Weather in Oslo?", "100 EUR in NOK?"]


def _inputs(query: int) -> dict[str, str]:
    return {"functions": json.dumps([{"name": f} for f in FUNCTIONS]), "query": QUERIES[query]}


def _demand(tenant: str, workflow: str, stage: str, inputs: dict[str, str], *,
            choice: str | None = None, outputs: dict[str, str] | None = None) -> Demand:
    return routing_demand(tenant, workflow, stage, inputs, choice=choice, outputs=outputs)


async def _workflow(core: Core, tenant: str, workflow: str, query: int, choice: str,
                    pause_s: float) -> tuple[list[str], list[AnswerSource]]:
    inputs = _inputs(query)
    router = await core.stages.run(_demand(tenant, workflow, "router", inputs), 30)
    await asyncio.sleep(pause_s)
    handler = await core.stages.run(_demand(tenant, workflow, "handler", inputs, choice=choice),
                                    30)
    executor = await core.stages.run(_demand(tenant, workflow, "executor", inputs, choice=choice,
                                             outputs={"handler": handler.text}), 30)
    return ([router.text, handler.text, executor.text],
            [router.source, handler.source, executor.source])


WORKFLOWS = st.lists(st.tuples(st.sampled_from(["acme", "globex"]), st.integers(0, 2),
                               st.sampled_from(FUNCTIONS), st.sampled_from([0, 0.001, 0.004])),
                     min_size=1, max_size=6)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(WORKFLOWS)
def test_any_interleaving_returns_exactly_the_floor(workflows) -> None:  # noqa: ANN001
    async def run(c1: bool, c2: bool, concurrent: bool) -> list[list[str]]:
        async with local_core(c1=c1, c2=c2, time_scale=0.0005 if concurrent else 0.0) as core:
            calls = [_workflow(core, t, f"wf-{i}", q, c, p)
                     for i, (t, q, c, p) in enumerate(workflows)]
            if concurrent:
                results = await asyncio.gather(*calls)
            else:
                results = [await call for call in calls]
            return [texts for texts, _ in results]

    floor = asyncio.run(run(False, False, concurrent=False))
    assert asyncio.run(run(True, True, concurrent=True)) == floor
    assert asyncio.run(run(False, True, concurrent=True)) == floor


async def test_shadow_is_invisible_to_other_workflows_and_tenants() -> None:
    async with local_core(time_scale=0.001) as core:
        inputs = _inputs(0)
        await core.stages.run(_demand("acme", "wf-1", "router", inputs), 30)
        (branch,) = core.branches.branches.values()
        await asyncio.wait_for(branch.ready.wait(), 5)
        fill = branch.fills["get_weather"]
        await asyncio.wait_for(fill.steps[0].done.wait(), 5)
        assert fill.steps[0].ok  # the shadow exists
        for tenant, workflow in (("acme", "wf-2"), ("globex", "wf-1")):
            other = await core.stages.run(_demand(tenant, workflow, "handler", inputs,
                                                  choice="get_weather"), 30)
            assert other.source is AnswerSource.ENGINE
        own = await core.stages.run(_demand("acme", "wf-1", "handler", inputs,
                                            choice="get_weather"), 30)
        assert own.source is AnswerSource.PROMOTED_FILL and own.text == other.text


async def test_lost_library_degrades_to_engine_execution() -> None:
    async with mesh() as m:
        m.client.use_builtin("routing")
        await m.csl.shutdown()
        answer = await m.client.call_stage("routing", "router", workflow_id="w",
                                           inputs=_inputs(0), offered=FUNCTIONS)
        again = await m.client.call_stage("routing", "router", workflow_id="w2",
                                          inputs=_inputs(0), offered=FUNCTIONS)
        assert answer.source == again.source == gateway_pb2.RESULT_SOURCE_ENGINE
        assert answer.text == again.text


async def test_a_library_known_down_is_skipped_no_fill_runs_and_it_is_probed_again() -> None:
    """Fault matrix finding: with the csl down, fills still ran, their shadows could not be
    stored, and each demand waited ``fill_wait_s`` for them before running canonically (1.2-1.5x
    the floor's latency). A library known down now costs nothing: no fills, no lookups."""
    async with mesh() as m:
        m.client.use_builtin("routing")
        library = m.gateway.core.library
        await m.csl.shutdown()
        await m.client.call_stage("routing", "router", workflow_id="w", inputs=_inputs(0),
                                  offered=FUNCTIONS)
        deadline = asyncio.get_running_loop().time() + 5
        while library.available() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)  # the name feed's reconnect sees it down
        assert not library.available()
        # the first call may have run fills before the feed saw the csl go: count from here
        opened, issued = (m.branches.counters[k] for k in ("skipped_library_down",
                                                           "fills_issued"))
        await m.client.call_stage("routing", "router", workflow_id="w2", inputs=_inputs(1),
                                  offered=FUNCTIONS)
        handler = await m.client.call_stage("routing", "handler", workflow_id="w2",
                                            inputs=_inputs(1), candidate="get_weather")
        assert handler.source == gateway_pb2.RESULT_SOURCE_ENGINE and handler.text
        assert m.branches.counters["skipped_library_down"] == opened + 1
        assert m.branches.counters["fills_issued"] == issued  # nothing was run to wait for
        library._down_until = 0.0  # the back-off ends: the next call probes the library
        assert library.available()


async def test_lost_admission_service_means_no_fills_but_every_answer() -> None:
    async with mesh(admission="127.0.0.1:1") as m:
        m.client.use_builtin("routing")
        await m.client.call_stage("routing", "router", workflow_id="w", inputs=_inputs(0),
                                  offered=FUNCTIONS)
        handler = await m.client.call_stage("routing", "handler", workflow_id="w",
                                            inputs=_inputs(0), candidate="get_weather")
        assert handler.source == gateway_pb2.RESULT_SOURCE_ENGINE
        assert m.branches.counters["fills_issued"] == 0


async def test_unauthenticated_call_is_refused_before_any_work() -> None:
    async with mesh(auth=True, api_keys={"k1": "acme"}) as m:
        m.client.use_builtin("routing")
        try:
            await m.client.call("hello", MODEL, max_tokens=4)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        else:
            raise AssertionError("call without a key was served")


async def test_branch_records_are_bounded_and_retire_oldest_first() -> None:
    from services.gateway.speculation.state import BranchSettings

    async with local_core(time_scale=0.0) as core:
        core.branches.settings = BranchSettings(max_branches=3)
        for i in range(5):
            await core.stages.run(_demand("acme", f"wf-{i}", "router", _inputs(0)), 30)
        assert [b.workflow_id for b in core.branches.branches.values()] == ["wf-2", "wf-3", "wf-4"]
        assert len(core.branches._by_request) <= 3  # noqa: SLF001 - nothing leaks
