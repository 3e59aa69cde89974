"""Clients of the admission service: over gRPC (``RemoteAdmission``; failures mean no speculation)
and in-process under the fixed policy (``StaticAdmission``, no hop)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence

import grpc

from services.admission.fixed_rule import TopKRule
from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.runtime.clients import open_channel
from services.common.runtime.records import make_header
from services.common.values.candidates import FillEstimate, RankedCandidate

log = logging.getLogger(__name__)

#: Reports ``StaticAdmission`` keeps for inspection.
MAX_KEPT_REPORTS = 1024


class RemoteAdmission:
    """``AdmissionPort`` over one admission service; safe default on failure: do not fill."""

    def __init__(self, target: str, deadline_s: float = 0.25) -> None:
        self.channel = open_channel(target)
        self.stub = admission_pb2_grpc.AdmissionStub(self.channel)
        self.deadline_s = deadline_s

    async def open_branch(self, branch_id: str, coordinate: str, branch_class: str,
                          model: str) -> bool:
        """Action 0; False when admission is unreachable."""
        request = admission_pb2.OpenBranchRequest(header=make_header(branch_id, 0, "gateway"),
                                                  coordinate=coordinate,
                                                  branch_class=branch_class, model=model)
        try:
            reply: admission_pb2.OpenBranchResponse = await self.stub.OpenBranch(
                request, timeout=self.deadline_s)
            return reply.open
        except grpc.aio.AioRpcError as err:
            log.warning("admission OpenBranch failed (%s): not filling", err.code().name)
            return False

    async def admit(self, branch_id: str, coordinate: str, candidates: Sequence[RankedCandidate],
                    model: str, window_s: float = 0.0,
                    estimates: Mapping[str, FillEstimate] | None = None,
                    visit: int = 0) -> list[str]:
        """Action 1; [] when admission is unreachable."""
        request = admission_pb2.AdmitFillsRequest(
            header=make_header(branch_id, 1, "gateway"), coordinate=coordinate, model=model,
            window_s=window_s, visit=visit,
            candidates=[admission_pb2.Candidate(
                candidate=c.candidate, rank=c.rank, probability=min(max(c.probability, 0.0), 1.0),
                # each estimate field has the type its name gives it (estimate_fields)
                **estimate_fields(c.candidate, estimates, window_s))  # type: ignore[arg-type]
                for c in candidates])
        try:
            reply: admission_pb2.AdmitFillsResponse = await self.stub.AdmitFills(
                request, timeout=self.deadline_s)
            return list(reply.admitted)
        except grpc.aio.AioRpcError as err:
            log.warning("admission AdmitFills failed (%s): not filling", err.code().name)
            return []

    async def report(self, branch_id: str, coordinate: str, selected: str, saved_s: float,
                     fill_cost_s: float, setup_s: float, final: bool = True,
                     consumed: Sequence[str] = (), wait_s: float = 0.0) -> None:
        """Feedback (header sequence 2: provisional at resolution, 3: final); a lost report is
        logged, never retried by hand."""
        request = admission_pb2.ReportOutcomeRequest(
            header=make_header(branch_id, 3 if final else 2, "gateway"), coordinate=coordinate,
            selected=selected, saved_s=saved_s, fill_cost_s=fill_cost_s, setup_s=setup_s,
            consumed_producers=list(consumed), wait_s=wait_s)
        try:
            await self.stub.ReportOutcome(request, timeout=self.deadline_s * 4)
        except grpc.aio.AioRpcError as err:
            log.info("admission ReportOutcome failed (%s)", err.code().name)

    async def close(self) -> None:
        """Close the channel."""
        await self.channel.close()


def estimate_fields(candidate: str, estimates: Mapping[str, FillEstimate] | None,
                    window_s: float) -> dict[str, float | int]:
    """The ``Candidate`` estimate fields of a candidate: its projected subgraph time and what of
    it the resolution window can hide (all of it when the window is unknown), its prompt and
    peak tokens and its stage count (absent when unknown)."""
    est = (estimates or {}).get(candidate)
    if est is None:
        return {}
    out: dict[str, float | int] = {"stages": max(est.stages, 1)}
    if est.prompt_tokens > 0:
        out["est_prompt_tokens"] = est.prompt_tokens
    if est.peak_tokens > 0:
        out["est_peak_tokens"] = est.peak_tokens
    seconds = est.exec_s
    if seconds > 0:
        gain = min(seconds, window_s) if window_s > 0 else (0.0 if window_s < 0 else seconds)
        out |= {"est_exec_s": seconds, "est_gain_s": gain}
    return out


class StaticAdmission:
    """``AdmissionPort`` in-process: the admission service's fixed policy, without a hop."""

    def __init__(self, open_branches: bool = True, top_k: int = 2) -> None:
        self.policy = TopKRule(open_branches=open_branches, top_k=top_k)
        #: The latest reports, for inspection (bounded: the oldest are dropped).
        self.reports: deque[tuple[str, str, float]] = deque(maxlen=MAX_KEPT_REPORTS)

    async def open_branch(self, branch_id: str, coordinate: str, branch_class: str,
                          model: str) -> bool:
        """Action 0 under the fixed policy."""
        return self.policy.open_branch(coordinate)[0]

    async def admit(self, branch_id: str, coordinate: str, candidates: Sequence[RankedCandidate],
                    model: str, window_s: float = 0.0,
                    estimates: Mapping[str, FillEstimate] | None = None,
                    visit: int = 0) -> list[str]:
        """Action 1 under the fixed policy (it ignores the window and the visit)."""
        return list(self.policy.admit(list(candidates)).admitted)

    async def report(self, branch_id: str, coordinate: str, selected: str, saved_s: float,
                     fill_cost_s: float, setup_s: float, final: bool = True,
                     consumed: Sequence[str] = (), wait_s: float = 0.0) -> None:
        """Keep the report for inspection."""
        self.reports.append((branch_id, selected, saved_s))


__all__ = ["RemoteAdmission", "StaticAdmission", "estimate_fields"]
