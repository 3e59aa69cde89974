"""Admission gRPC servicer: protos ↔ the policy core."""

from __future__ import annotations

import grpc
from prometheus_client import CollectorRegistry, Counter

from services.admission.policy import FixedPolicy
from services.common.candidates import RankedCandidate
from services.common.convert import require
from services.common.errors import InvalidArgument
from services.common.pb import admission_pb2, admission_pb2_grpc

MAX_CANDIDATES = 256


class AdmissionServicer(admission_pb2_grpc.AdmissionServicer):
    """Answers OpenBranch and AdmitFills with a fixed policy; records outcomes."""

    def __init__(self, policy: FixedPolicy, registry: CollectorRegistry) -> None:
        self.policy = policy
        self.opened = Counter("dynbranch_admission_branches_total", "OpenBranch answers",
                              ["open"], registry=registry)
        self.admitted = Counter("dynbranch_admission_fills_admitted_total", "Fills admitted",
                                registry=registry)
        self.outcomes = Counter("dynbranch_admission_outcomes_total", "Outcomes reported",
                                ["selected_filled"], registry=registry)
        self._reported: set[str] = set()

    async def OpenBranch(self, request: admission_pb2.OpenBranchRequest,
                         context: grpc.aio.ServicerContext) -> admission_pb2.OpenBranchResponse:
        require(request.header.id, "header.id")
        is_open, reason = self.policy.open_branch(require(request.coordinate, "coordinate"))
        self.opened.labels(str(is_open).lower()).inc()
        return admission_pb2.OpenBranchResponse(open=is_open, reason=reason)

    async def AdmitFills(self, request: admission_pb2.AdmitFillsRequest,
                         context: grpc.aio.ServicerContext) -> admission_pb2.AdmitFillsResponse:
        require(request.header.id, "header.id")
        require(request.coordinate, "coordinate")
        if len(request.candidates) > MAX_CANDIDATES:
            raise InvalidArgument("candidates", f"at most {MAX_CANDIDATES}")
        for i, c in enumerate(request.candidates):
            require(c.candidate, f"candidates[{i}].candidate")
            if not 0.0 <= c.probability <= 1.0:
                raise InvalidArgument(f"candidates[{i}].probability", "must be in [0, 1]")
        decision = self.policy.admit([RankedCandidate(c.candidate, c.rank, c.probability)
                                      for c in request.candidates])
        self.admitted.inc(len(decision.admitted))
        return admission_pb2.AdmitFillsResponse(admitted=list(decision.admitted), load_price=0.0)

    async def ReportOutcome(self, request: admission_pb2.ReportOutcomeRequest,
                            context: grpc.aio.ServicerContext
                            ) -> admission_pb2.ReportOutcomeResponse:
        branch = require(request.header.id, "header.id")
        key = f"{branch}/{request.header.sequence}"
        if key in self._reported:
            return admission_pb2.ReportOutcomeResponse(applied=False)
        self._reported.add(key)
        if len(self._reported) > 100_000:  # bounded memory: forget the oldest half
            self._reported = set(list(self._reported)[50_000:])
        self.outcomes.labels(str(bool(request.selected)).lower()).inc()
        return admission_pb2.ReportOutcomeResponse(applied=True)


__all__ = ["AdmissionServicer"]
