"""One workflow is one trace, across the mesh's processes: the demo's Routing workflows run
through gateway, admission, csl, delivery and two sim engines, each process exporting over OTLP
to a receiver run here. A workflow with a promoted fill is exactly one trace holding gateway,
admission, csl and engine spans; no span starts a trace unless it is a root by design
(``values.tracing.ROOTS``); every span about a branch is in the trace of the workflow that opened
it, even when another workflow's call retires it."""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from collections.abc import Iterator

import pytest

from services.common.pb import gateway_pb2
from services.common.values.tracing import ROOTS
from services.gateway.sdk import DynbranchClient
from services.launcher import MeshSpec, ProcessMesh
from tests.e2e.otlp_receiver import ReceivedSpan, Receiver, start_receiver

FUNCTIONS = ["refund_payment", "track_parcel", "open_return", "reset_device"]
QUERIES = [("My card was charged twice for order 1182.", "refund_payment"),
           ("Where is my parcel? It left Leipzig on Monday.", "track_parcel"),
           ("The blender I bought arrived cracked.", "open_return"),
           ("The firmware update failed and the device will not boot.", "reset_device")]
ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: Seconds a branch lives: the abandoned workflow's branch expires before the last workflow.
BRANCH_TTL_S = 1.5


def _inputs(i: int) -> tuple[dict[str, str], str]:
    query, choice = QUERIES[i % len(QUERIES)]
    return {"functions": json.dumps([{"name": f} for f in FUNCTIONS]), "query": query}, choice


async def _routing(db: DynbranchClient, wf: str, i: int) -> list[int]:
    """The demo's workflow: router, handler, executor; the answer sources."""
    inputs, choice = _inputs(i)
    router = await db.call_stage("routing", "router", workflow_id=wf, inputs=inputs,
                                 offered=FUNCTIONS)
    handler = await db.call_stage("routing", "handler", workflow_id=wf, inputs=inputs,
                                  candidate=choice)
    executor = await db.call_stage("routing", "executor", workflow_id=wf, inputs=inputs,
                                   outputs={"handler": handler.text}, candidate=choice)
    return [router.source, handler.source, executor.source]


async def _run() -> dict[str, list[int]]:
    """The mesh as processes; 8 demo workflows, 4 at a time, then one abandoned after its
    router (its branch open) and, once that branch expired, one more."""
    mesh = ProcessMesh()
    spec = MeshSpec(engines=2, time_scale=0.02, log_level="WARNING",
                    gateway_settings=[f"branch_ttl_s={BRANCH_TTL_S}"])
    sources: dict[str, list[int]] = {}
    try:
        await mesh.start(spec)
        async with DynbranchClient(mesh.address("gateway")) as db:
            db.use_builtin("routing")
            gate = asyncio.Semaphore(4)

            async def one(i: int) -> None:
                async with gate:
                    sources[f"wf-{i}"] = await _routing(db, f"wf-{i}", i)

            await asyncio.gather(*(one(i) for i in range(8)))
            inputs, _ = _inputs(1)
            await db.call_stage("routing", "router", workflow_id="abandoned", inputs=inputs,
                                offered=FUNCTIONS)
            sources["abandoned"] = []
            await asyncio.sleep(BRANCH_TTL_S + 0.3)
            sources["last"] = await _routing(db, "last", 2)  # retires the abandoned branch
    finally:
        await mesh.stop()  # each service flushes its spans as it stops
    return sources


def _service(span: ReceivedSpan) -> str:
    return span.service.split("-")[0]  # engine-0 and engine-1 export as engine_agent


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[Receiver, dict[str, list[int]]]]:
    """One traced run for the module's tests (the children read the endpoint at spawn)."""
    before = os.environ.get(ENDPOINT)
    try:
        yield asyncio.run(_with_endpoint())
    finally:
        if before is None:
            os.environ.pop(ENDPOINT, None)
        else:
            os.environ[ENDPOINT] = before


async def _with_endpoint() -> tuple[Receiver, dict[str, list[int]]]:
    server, receiver, address = await start_receiver()
    os.environ[ENDPOINT] = f"http://{address}"
    try:
        sources = await _run()
        await asyncio.sleep(0.2)
    finally:
        await server.stop(0)
    return receiver, sources


def test_each_workflow_is_one_trace_across_the_services(
        traced: tuple[Receiver, dict[str, list[int]]]) -> None:
    receiver, sources = traced
    traces = receiver.traces()
    by_workflow: dict[str, set[str]] = defaultdict(set)
    for s in receiver.spans:
        if s.name == "gateway.call":
            by_workflow[str(s.attributes["dynbranch.workflow_id"])].add(s.trace_id)
    # one trace per workflow, a trace per workflow, and no other trace
    assert set(by_workflow) == set(sources)
    assert all(len(ids) == 1 for ids in by_workflow.values())
    assert len(traces) == len(sources) == len({next(iter(v)) for v in by_workflow.values()})

    promoted = [wf for wf, src in sources.items()
                if gateway_pb2.RESULT_SOURCE_PROMOTED_FILL in src]
    assert promoted, f"no workflow had a promoted fill: {sources}"
    for wf in promoted:
        spans = traces[next(iter(by_workflow[wf]))]
        names = {(_service(s), s.name) for s in spans}
        assert {"gateway", "admission", "csl", "engine_agent"} <= {svc for svc, _ in names}
        assert {("csl", "csl.promote"), ("admission", "admission.open_branch"),
                ("admission", "admission.admit_fills"), ("admission", "admission.report_outcome"),
                ("engine_agent", "engine.generate"), ("gateway", "branch.promote")} <= names
        by_id = {s.span_id: s for s in spans}
        parent = {s.name: by_id[s.parent_id].name for s in spans if s.parent_id in by_id}
        assert parent["csl.promote"] == "branch.promote"
        assert parent["admission.open_branch"] == "branch.generation_gate"
        assert parent["admission.admit_fills"] == "branch.fill_gate"
        admit = next(s for s in spans if s.name == "admission.admit_fills")
        assert admit.attributes["dynbranch.admitted"]
        events = [attrs for name, attrs in admit.events if name == "candidate"]
        assert events and all({"dynbranch.p_tilde", "dynbranch.gain_ms", "dynbranch.cost_ms",
                               "dynbranch.admitted"} <= set(e) for e in events)


def test_no_span_starts_a_trace_unless_it_is_a_root_by_design(
        traced: tuple[Receiver, dict[str, list[int]]]) -> None:
    receiver, _ = traced
    roots = receiver.roots()
    assert roots and {s.name for s in roots} <= set(ROOTS)
    assert {_service(s) for s in roots} == {"gateway"}
    assert {_service(s) for s in receiver.spans} == {"gateway", "admission", "csl",
                                                      "engine_agent"}


def test_a_branch_stays_in_its_workflows_trace_when_another_workflow_retires_it(
        traced: tuple[Receiver, dict[str, list[int]]]) -> None:
    receiver, _ = traced
    opened = {str(s.attributes["dynbranch.branch_id"]): s.trace_id
              for s in receiver.spans if s.name == "branch.open"}
    about_a_branch = [s for s in receiver.spans if "dynbranch.branch_id" in s.attributes]
    assert {s.service for s in about_a_branch} >= {"gateway", "admission", "csl"}
    misplaced = [(s.service, s.name) for s in about_a_branch
                 if opened.get(str(s.attributes["dynbranch.branch_id"])) != s.trace_id]
    assert misplaced == []
    workflow_of = {s.trace_id: s.attributes["dynbranch.workflow_id"]
                   for s in receiver.spans if s.name == "gateway.call"}
    abandoned = [b for b, trace in opened.items() if workflow_of[trace] == "abandoned"]
    assert len(abandoned) == 1
    reports = [s for s in receiver.spans if s.name == "admission.report_outcome"
               and s.attributes["dynbranch.branch_id"] == abandoned[0]]
    # reported once, at its retirement during the last workflow's call, in its own trace
    assert [r.attributes["dynbranch.final"] for r in reports] == [True]
    assert reports[0].trace_id == opened[abandoned[0]]
