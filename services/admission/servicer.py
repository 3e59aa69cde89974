"""Admission gRPC servicer: protos ↔ the policy core. Each call the gateway makes in a workflow's
trace gets a span here with the decision: Action 0's verdict, reason and score; Action 1's price
and, per candidate (one ``candidate`` event each), the predictor's probability, p̃, the gain G
and the cost C it was priced at and whether it was admitted; the outcome a report applied."""

from __future__ import annotations

import math
import time
from collections import OrderedDict

import grpc
from opentelemetry.trace import NoOpTracer, Span, Tracer
from prometheus_client import CollectorRegistry, Counter

from services.admission.core import Admission, AdmissionPolicy, BranchOutcome, finite, proposal
from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.runtime.convert import require
from services.common.values.errors import InvalidArgument
from services.common.values.tracing import call_span

MAX_CANDIDATES = 256
#: BranchOutcome keys remembered to answer duplicates (applied=false).
MAX_REMEMBERED_REPORTS = 100_000


class AdmissionServicer(admission_pb2_grpc.AdmissionServicer):
    """Answers OpenBranch, AdmitFills and ReportOutcome with the configured policy."""

    def __init__(self, policy: AdmissionPolicy, registry: CollectorRegistry,
                 tracer: Tracer | None = None) -> None:
        self.policy = policy
        self.tracer = tracer or NoOpTracer()
        self.opened = Counter("dynbranch_admission_branches_total", "OpenBranch decisions, by "
                              "whether the branch may open (true) or not (false)", ["open"],
                              registry=registry)
        self.admitted = Counter("dynbranch_admission_fills_admitted_total", "Candidate fills "
                                "AdmitFills admitted", registry=registry)
        self.outcomes = Counter("dynbranch_admission_outcomes_total", "Branch outcomes reported "
                                "(a repeated report is not counted), by whether the branch "
                                "selected a candidate", ["selected_filled"], registry=registry)
        self._reported: OrderedDict[str, None] = OrderedDict()  # bounded, oldest first

    async def OpenBranch(self, request: admission_pb2.OpenBranchRequest,
                         context: grpc.aio.ServicerContext) -> admission_pb2.OpenBranchResponse:
        branch = require(request.header.id, "header.id")
        with call_span(self.tracer, "admission.open_branch") as span:
            decision = self.policy.open_branch(branch, require(request.coordinate, "coordinate"),
                                               request.branch_class, request.model, time.time())
            if span.is_recording():
                span.set_attributes({
                    "dynbranch.branch_id": branch, "dynbranch.coordinate": request.coordinate,
                    "dynbranch.branch_class": request.branch_class,
                    "dynbranch.policy": self.policy.name, "dynbranch.open": decision.open,
                    "dynbranch.gate": decision.kind, "dynbranch.reason": decision.reason,
                    "dynbranch.score_ms": decision.score})
        self.opened.labels(str(decision.open).lower()).inc()
        return admission_pb2.OpenBranchResponse(open=decision.open, reason=decision.reason)

    async def AdmitFills(self, request: admission_pb2.AdmitFillsRequest,
                         context: grpc.aio.ServicerContext) -> admission_pb2.AdmitFillsResponse:
        branch = require(request.header.id, "header.id")
        coordinate = require(request.coordinate, "coordinate")
        if len(request.candidates) > MAX_CANDIDATES:
            raise InvalidArgument("candidates", f"at most {MAX_CANDIDATES}")
        for i, c in enumerate(request.candidates):
            require(c.candidate, f"candidates[{i}].candidate")
            if not 0.0 <= c.probability <= 1.0:
                raise InvalidArgument(f"candidates[{i}].probability", "must be in [0, 1]")
            finite(c.est_exec_s, f"candidates[{i}].est_exec_s")
            finite(c.est_gain_s, f"candidates[{i}].est_gain_s")
        if not math.isfinite(request.window_s):
            raise InvalidArgument("window_s", "must be finite")
        with call_span(self.tracer, "admission.admit_fills") as span:
            decision = self.policy.admit(branch, coordinate, [
                proposal(c.candidate, c.rank, c.probability, {
                    "est_exec_s": c.est_exec_s, "est_gain_s": c.est_gain_s,
                    "est_prompt_tokens": c.est_prompt_tokens,
                    "est_peak_tokens": c.est_peak_tokens, "stages": c.stages})
                for c in request.candidates], request.model, time.time(),
                window_s=request.window_s, visit=request.visit)
            if span.is_recording():
                self._record_admission(span, request, decision)
        self.admitted.inc(len(decision.admitted))
        return admission_pb2.AdmitFillsResponse(admitted=list(decision.admitted),
                                                load_price=decision.load_price)

    async def ReportOutcome(self, request: admission_pb2.ReportOutcomeRequest,
                            context: grpc.aio.ServicerContext
                            ) -> admission_pb2.ReportOutcomeResponse:
        branch = require(request.header.id, "header.id")
        key = f"{branch}/{request.header.sequence}"
        if key in self._reported:
            return admission_pb2.ReportOutcomeResponse(applied=False)
        self._reported[key] = None
        while len(self._reported) > MAX_REMEMBERED_REPORTS:  # bounded: forget the oldest
            self._reported.popitem(last=False)
        self.outcomes.labels(str(bool(request.selected)).lower()).inc()
        outcome = BranchOutcome(branch, request.selected, finite(request.saved_s, "saved_s"),
                                finite(request.fill_cost_s, "fill_cost_s"),
                                finite(request.setup_s, "setup_s"),
                                final=request.header.sequence != 2,
                                consumed=tuple(request.consumed_producers),
                                wait_s=finite(request.wait_s, "wait_s"))
        with call_span(self.tracer, "admission.report_outcome") as span:
            known = self.policy.report(outcome)
            if span.is_recording():
                span.set_attributes({
                    "dynbranch.branch_id": branch, "dynbranch.selected": outcome.selected,
                    "dynbranch.final": outcome.final, "dynbranch.saved_s": outcome.saved_s,
                    "dynbranch.fill_cost_s": outcome.fill_cost_s,
                    "dynbranch.consumed": list(outcome.consumed),
                    "dynbranch.known": known})
        return admission_pb2.ReportOutcomeResponse(applied=True)

    def _record_admission(self, span: Span, request: admission_pb2.AdmitFillsRequest,
                          decision: Admission) -> None:
        """Action 1's decision on its span: the price, what was admitted, and one event per
        candidate with what it was priced at."""
        span.set_attributes({
            "dynbranch.branch_id": request.header.id, "dynbranch.coordinate": request.coordinate,
            "dynbranch.policy": self.policy.name, "dynbranch.window_s": request.window_s,
            "dynbranch.candidates": len(request.candidates),
            "dynbranch.admitted": list(decision.admitted),
            "dynbranch.load_price_ms_per_s": decision.load_price,
            "dynbranch.reason": decision.reason})
        priced = dict(decision.priced)
        admitted = set(decision.admitted)
        for c in request.candidates:
            attrs: dict[str, str | int | float | bool] = {
                "dynbranch.candidate": c.candidate, "dynbranch.rank": c.rank,
                "dynbranch.probability": c.probability,
                "dynbranch.admitted": c.candidate in admitted}
            entry = priced.get(c.candidate)
            if entry is not None:
                attrs |= {"dynbranch.p_tilde": entry.p, "dynbranch.gain_ms": entry.gain_ms,
                          "dynbranch.cost_ms": entry.cost_ms}
            span.add_event("candidate", attrs)


__all__ = ["AdmissionServicer"]
