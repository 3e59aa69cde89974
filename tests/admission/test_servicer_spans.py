"""The admission service's spans: each call in a workflow's trace records its decision (Action 0's
verdict, Action 1's price and every candidate's p̃, G, C and admission, the outcome a report
applied); a call outside any trace records none."""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from services.admission.core import ControllerSettings, PricedController
from services.admission.load_view import EngineLoad, LoadTracker
from services.admission.servicer import AdmissionServicer
from services.common.pb import admission_pb2
from services.common.runtime.records import make_header
from services.common.values.tracing import within, workflow_context

MODEL = "m"


def _servicer() -> tuple[AdmissionServicer, InMemorySpanExporter]:
    tracker = LoadTracker(window_s=8.0)
    now = time.time()  # the servicer decides at the wall clock
    tracker.observe(EngineLoad("e0", MODEL, 1, now, 4, 0, max_running=48, kv_blocks_used=100,
                               kv_blocks_total=4096, fill_running=0, fill_kv_blocks=0), now)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = PricedController(tracker, settings=ControllerSettings(audit_rate=0.0, n0=0))
    return AdmissionServicer(policy, CollectorRegistry(), provider.get_tracer("t")), exporter


async def _branch(servicer: AdmissionServicer, branch: str) -> Any:
    await servicer.OpenBranch(admission_pb2.OpenBranchRequest(
        header=make_header(branch, 0, "gateway"), coordinate="r/router",
        branch_class="acme/r/router", model=MODEL), None)  # type: ignore[arg-type]
    admitted = await servicer.AdmitFills(admission_pb2.AdmitFillsRequest(
        header=make_header(branch, 1, "gateway"), coordinate="r/router", model=MODEL,
        candidates=[admission_pb2.Candidate(candidate="h1", rank=0, probability=0.6,
                                            est_exec_s=2.0, est_gain_s=2.0),
                    admission_pb2.Candidate(candidate="h2", rank=1, probability=0.05,
                                            est_exec_s=2.0, est_gain_s=0.01)]),
        None)  # type: ignore[arg-type]
    await servicer.ReportOutcome(admission_pb2.ReportOutcomeRequest(
        header=make_header(branch, 3, "gateway"), coordinate="r/router", selected="h1",
        saved_s=1.5, fill_cost_s=2.0, consumed_producers=[f"fill/{branch}/h1/0"]),
        None)  # type: ignore[arg-type]
    return admitted


async def test_each_call_in_a_trace_records_its_decision() -> None:
    servicer, exporter = _servicer()
    with within(workflow_context("acme/wf-1")):
        reply = await _branch(servicer, "b1")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"admission.open_branch", "admission.admit_fills",
                          "admission.report_outcome"}
    assert len({s.context.trace_id for s in spans.values()}) == 1
    gate = spans["admission.open_branch"].attributes
    assert gate["dynbranch.open"] is True and gate["dynbranch.branch_id"] == "b1"
    assert gate["dynbranch.gate"] == "priced" and gate["dynbranch.policy"] == "priced"
    assert gate["dynbranch.score_ms"] > 0 and "U0=" in gate["dynbranch.reason"]
    fill = spans["admission.admit_fills"]
    assert list(fill.attributes["dynbranch.admitted"]) == list(reply.admitted) == ["h1"]
    assert fill.attributes["dynbranch.load_price_ms_per_s"] == reply.load_price
    events = {e.attributes["dynbranch.candidate"]: e.attributes for e in fill.events}
    assert [e.name for e in fill.events] == ["candidate", "candidate"]
    assert events["h1"]["dynbranch.admitted"] and not events["h2"]["dynbranch.admitted"]
    for name in ("h1", "h2"):
        assert {"dynbranch.p_tilde", "dynbranch.gain_ms", "dynbranch.cost_ms",
                "dynbranch.rank", "dynbranch.probability"} <= set(events[name])
    assert events["h1"]["dynbranch.p_tilde"] > events["h2"]["dynbranch.p_tilde"]
    assert events["h2"]["dynbranch.gain_ms"] < events["h2"]["dynbranch.cost_ms"]
    report = spans["admission.report_outcome"].attributes
    assert report["dynbranch.selected"] == "h1" and report["dynbranch.final"] is True
    assert report["dynbranch.known"] is True


async def test_a_call_outside_any_trace_records_no_span() -> None:
    servicer, exporter = _servicer()
    reply = await _branch(servicer, "b2")
    assert list(reply.admitted) == ["h1"]
    assert exporter.get_finished_spans() == ()
