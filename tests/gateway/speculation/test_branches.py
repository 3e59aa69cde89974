"""Early fill (C2) end to end over real gRPC: promotion, losers, failures, errors, traces."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from services.common.pb import gateway_pb2
from services.engine_agent.client import EngineAgentClient
from tests.gateway.mesh import Mesh, mesh

PROMOTED = gateway_pb2.RESULT_SOURCE_PROMOTED_FILL
ENGINE = gateway_pb2.RESULT_SOURCE_ENGINE
LIBRARY = gateway_pb2.RESULT_SOURCE_LIBRARY
FUNCTIONS = ["get_weather", "book_flight", "convert_currency"]
INPUTS = {"functions": json.dumps([{"name": f} for f in FUNCTIONS]),
          "query": "Book me a flight from Oslo to Rome on Friday."}


async def _router(m: Mesh, workflow_id: str = "wf-1") -> gateway_pb2.CallResponse:
    m.client.use_builtin("routing")
    return await m.client.call_stage("routing", "router", workflow_id=workflow_id, inputs=INPUTS,
                                     offered=FUNCTIONS)


async def _stage(m: Mesh, stage: str, choice: str, outputs: dict[str, str] | None = None,
                 workflow_id: str = "wf-1") -> gateway_pb2.CallResponse:
    return await m.client.call_stage("routing", stage, workflow_id=workflow_id, inputs=INPUTS,
                                     outputs=outputs, candidate=choice)


async def _fills_running(m: Mesh) -> int:
    total = 0
    for engine in m.engines:
        client = EngineAgentClient(engine.address)
        async for view in client.watch_load(timeout_s=2):
            total += view.fill_running
            break
        await client.close()
    return total


async def _floor_texts(choice: str) -> list[str]:
    async with mesh(c1=False, c2=False) as floor:
        await _router(floor)
        handler = await _stage(floor, "handler", choice)
        executor = await _stage(floor, "executor", choice, {"handler": handler.text})
        return [handler.text, executor.text]


async def test_predicted_choice_is_promoted_stage_by_stage_and_equals_the_floor() -> None:
    async with mesh() as m:
        await _router(m)
        handler = await _stage(m, "handler", "book_flight")
        executor = await _stage(m, "executor", "book_flight", {"handler": handler.text})
        assert (handler.source, executor.source) == (PROMOTED, PROMOTED)
        assert handler.engine_id == "" and executor.engine_id == ""
        again = await _stage(m, "handler", "book_flight", workflow_id="wf-2")
        assert again.source == LIBRARY and again.text == handler.text
        counters = m.branches.counters
        assert counters["fills_issued"] == 2 and counters["fills_consumed"] == 1
        assert counters["stages_promoted"] == 2
    assert [handler.text, executor.text] == await _floor_texts("book_flight")


async def test_exclusive_losers_are_aborted_at_once() -> None:
    async with mesh(time_scale=0.05) as m:
        await _router(m)
        assert await _fills_running(m) >= 1
        (branch,) = m.branches.branches.values()
        loser = branch.fills["book_flight"]
        handler = await _stage(m, "handler", "get_weather")
        assert handler.source == PROMOTED
        await asyncio.sleep(0)
        assert loser.task.done() and m.branches.counters["fills_aborted"] == 1
        await asyncio.sleep(0.05)
        assert await _fills_running(m) <= 1  # only the winner's next step (executor) may run


async def test_unpredicted_choice_runs_normally_and_aborts_every_fill() -> None:
    async with mesh(time_scale=0.05) as m:
        await _router(m)
        handler = await _stage(m, "handler", "convert_currency")  # rank 2: not admitted (top 2)
        assert handler.source == ENGINE
        assert m.branches.counters["fills_consumed"] == 0
        await asyncio.sleep(0.05)
        assert await _fills_running(m) == 0
    assert handler.text == (await _floor_texts("convert_currency"))[0]


async def test_a_branch_whose_workflow_passed_its_winners_chain_reports_at_once() -> None:
    """The executor demand reads another handler output than the fill's: the winner's executor
    step can serve nobody now, so the fill is stopped (or its shadow left) and the branch's
    final report goes out now, not when the branch retires."""
    async with mesh(time_scale=0.05) as m:
        await _router(m)
        (branch,) = m.branches.branches.values()
        handler = await _stage(m, "handler", "book_flight")
        assert handler.source == PROMOTED and not branch.reported
        executor = await _stage(m, "executor", "book_flight", {"handler": handler.text + "!"})
        assert executor.source == ENGINE
        for _ in range(100):
            if branch.reported:
                break
            await asyncio.sleep(0.01)
        assert branch.reported and branch.id in m.branches.branches  # not retired


async def test_fill_whose_engine_dies_leaves_the_demand_to_run_normally() -> None:
    async with mesh(engines=2, time_scale=0.05, fill_wait_s=0.5) as m:
        await _router(m)
        pool = m.gateway.core.engines
        for _ in range(100):
            filling = [s for s in pool.states.values() if s.outstanding_fills]
            if filling:
                break
            await asyncio.sleep(0.01)
        victim = next(e for e in m.engines if e.address == filling[0].target)
        await victim.shutdown()
        handler = await _stage(m, "handler", "get_weather")
        assert handler.source in (ENGINE, PROMOTED)
    assert handler.text == (await _floor_texts("get_weather"))[0]


async def test_unknown_template_stage_or_coordinate_is_a_clear_error() -> None:
    async with mesh() as m:
        m.client.use_builtin("routing")
        stub = m.client.stub
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SettleBranch(gateway_pb2.SettleBranchRequest(
                workflow_id="w", coordinate="routing/nope", selected="x"), timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no decision point 'routing/nope'" in info.value.details()
        request = gateway_pb2.CallRequest()
        request.demand.CopyFrom((await _demand_for(m)).demand)
        request.demand.template_id = "nope"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Call(request, timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "template 'nope' is not registered" in info.value.details()


async def _demand_for(m: Mesh) -> gateway_pb2.CallRequest:
    rendered = m.client.render("routing", "router", inputs=INPUTS)
    request = gateway_pb2.CallRequest()
    request.demand.model, request.demand.prompt = rendered.model, rendered.text
    request.demand.template_id, request.demand.stage_id = "routing", "router"
    request.demand.sampling.max_tokens = 8
    return request


@pytest.mark.parametrize("text, needle", [
    ("id: t\nversion: 1\nmodel: m\nstages:\n  - id: a\n    kind: llm\n    prompt: hi\n"
     "    sampling: {max_tokens: 8, temperature: -1}\n",
     "template t: stages[0].sampling.temperature"),
    ("id: t\nversion: 1\nstages: []\nbogus: 1\n", "template t"),
    ("- not a mapping\n", "yaml: must be a mapping"),
    ("id: [\n", "yaml: not valid YAML"),
])
async def test_malformed_template_is_refused_naming_the_path(text: str, needle: str) -> None:
    async with mesh() as m:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await m.client.stub.RegisterTemplate(gateway_pb2.RegisterTemplateRequest(yaml=text),
                                                 timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert needle in info.value.details()


async def test_one_trace_per_workflow_covers_branch_fill_and_promotion() -> None:
    async with mesh() as m:
        await _router(m, "wf-t")
        await _stage(m, "handler", "book_flight", workflow_id="wf-t")
        await asyncio.sleep(0.05)
        spans = m.spans.get_finished_spans()
    names = {s.name for s in spans}
    assert {"gateway.call", "branch.open", "branch.generation_gate", "branch.fill_gate",
            "fill.run", "shadow.store", "branch.settle", "branch.promote"} <= names
    assert len({s.context.trace_id for s in spans}) == 1
    by_id = {s.context.span_id: s for s in spans}
    fill = next(s for s in spans if s.name == "fill.run")
    root = fill
    while root.parent is not None and root.parent.span_id in by_id:
        root = by_id[root.parent.span_id]
    assert root.name == "gateway.call" and root.attributes["dynbranch.stage_id"] == "router"
    for span in (fill, next(s for s in spans if s.name == "branch.promote")):
        assert {"dynbranch.branch_id", "dynbranch.coordinate", "dynbranch.candidate",
                "dynbranch.rank", "dynbranch.reuse_name"} <= set(span.attributes)


async def test_branch_counters_are_exported_to_prometheus() -> None:
    from prometheus_client import generate_latest

    async with mesh() as m:
        await _router(m)
        await _stage(m, "handler", "book_flight")
        text = generate_latest(m.gateway.registry).decode()
    assert "dynbranch_gateway_branch_fills_issued_total 2.0" in text
    assert "dynbranch_gateway_branch_stages_promoted_total 1.0" in text
    assert "dynbranch_gateway_name_mirror_synced" in text


class _SilentAdmission:
    """An admission port whose outcome reports never return (admission stopped answering)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def report(self, *args: object, **kwargs: object) -> None:
        await asyncio.Event().wait()


async def test_close_drains_outcome_reports_for_a_bounded_time_then_cancels_them() -> None:
    async with mesh() as m:
        m.branches.admission = _SilentAdmission(m.branches.admission)
        await _router(m)  # a branch left open: close retires it and reports its outcome
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await m.branches.close(drain_s=0.3) >= 1
        assert loop.time() - start < 2.0
