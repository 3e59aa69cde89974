"""The fixed admission policy and its service."""

from __future__ import annotations

import grpc
import pytest

from services.admission.config import AdmissionSettings
from services.admission.policy import FixedPolicy
from services.admission.server import build_runtime
from services.common.candidates import RankedCandidate
from services.common.clients import open_channel
from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.records import make_header


def test_fixed_policy_admits_the_top_k_by_rank() -> None:
    cands = [RankedCandidate("c", 2), RankedCandidate("a", 0), RankedCandidate("b", 1)]
    assert FixedPolicy(top_k=2).admit(cands).admitted == ("a", "b")
    assert FixedPolicy(top_k=0).admit(cands).admitted == ()
    assert FixedPolicy(top_k=9).admit(cands).admitted == ("a", "b", "c")


def test_fixed_policy_can_keep_every_branch_closed() -> None:
    assert FixedPolicy(open_branches=False).open_branch("routing/router")[0] is False


async def test_service_answers_open_admit_and_deduplicates_outcomes() -> None:
    runtime = await build_runtime(AdmissionSettings(metrics_port=-1, top_k=1))
    await runtime.start()
    async with open_channel(runtime.address) as ch:
        stub = admission_pb2_grpc.AdmissionStub(ch)
        header = make_header("b1", 0, "test")
        opened = await stub.OpenBranch(admission_pb2.OpenBranchRequest(
            header=header, coordinate="routing/router"), timeout=2)
        assert opened.open
        admitted = await stub.AdmitFills(admission_pb2.AdmitFillsRequest(
            header=header, coordinate="routing/router", candidates=[
                admission_pb2.Candidate(candidate="x", rank=1, probability=0.2),
                admission_pb2.Candidate(candidate="y", rank=0, probability=0.7)]), timeout=2)
        assert list(admitted.admitted) == ["y"]
        report = admission_pb2.ReportOutcomeRequest(header=header, coordinate="routing/router",
                                                    selected="y")
        assert (await stub.ReportOutcome(report, timeout=2)).applied
        assert not (await stub.ReportOutcome(report, timeout=2)).applied
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.AdmitFills(admission_pb2.AdmitFillsRequest(
                header=header, coordinate="r/s",
                candidates=[admission_pb2.Candidate(candidate="x", probability=3)]), timeout=2)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "candidates[0].probability" in info.value.details()
    await runtime.shutdown()
