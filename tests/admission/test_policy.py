"""The fixed admission policy and its service."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.admission.config import AdmissionSettings
from services.admission.fixed_rule import TopKRule
from services.admission.server import build_runtime
from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.runtime.clients import open_channel
from services.common.runtime.records import make_header
from services.common.values.candidates import RankedCandidate


def test_fixed_policy_admits_the_top_k_by_rank() -> None:
    cands = [RankedCandidate("c", 2), RankedCandidate("a", 0), RankedCandidate("b", 1)]
    assert TopKRule(top_k=2).admit(cands).admitted == ("a", "b")
    assert TopKRule(top_k=0).admit(cands).admitted == ()
    assert TopKRule(top_k=9).admit(cands).admitted == ("a", "b", "c")


def test_fixed_policy_can_keep_every_branch_closed() -> None:
    assert TopKRule(open_branches=False).open_branch("routing/router")[0] is False


async def test_service_answers_open_admit_and_deduplicates_outcomes() -> None:
    runtime = await build_runtime(AdmissionSettings(metrics_port=-1, policy="fixed", top_k=1))
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


async def test_priced_service_follows_engine_load_and_prices_candidates() -> None:
    from tests.factories import MODEL, engine_agent

    async with engine_agent(engine_id="e0") as agent:
        runtime = await build_runtime(AdmissionSettings(metrics_port=-1, engines=[agent.address],
                                                        load_interval_s=0.05, n0=1))
        await runtime.start()
        try:
            async with open_channel(runtime.address) as ch:
                stub = admission_pb2_grpc.AdmissionStub(ch)
                opened = await stub.OpenBranch(admission_pb2.OpenBranchRequest(
                    header=make_header("b0", 0, "test"), coordinate="routing/router",
                    model=MODEL), timeout=2)
                assert opened.open and "cold trial" in opened.reason
                admitted: list[str] = []
                for i in range(100):  # until the first load views arrive: no slots known yet
                    header = make_header(f"b{i}", 0, "test")
                    reply = await stub.AdmitFills(admission_pb2.AdmitFillsRequest(
                        header=header, coordinate="routing/router", model=MODEL, candidates=[
                            admission_pb2.Candidate(candidate="y", rank=0, probability=0.7,
                                                    est_exec_s=2.0, est_gain_s=2.0)]), timeout=2)
                    admitted = list(reply.admitted)
                    if admitted:
                        break
                    await asyncio.sleep(0.05)
                assert admitted == ["y"]  # an idle engine: headroom
                assert reply.load_price == 0.0  # no canonical demand: no slot price
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.ReportOutcome(admission_pb2.ReportOutcomeRequest(
                        header=make_header("b1", 1, "test"), coordinate="routing/router",
                        selected="y", saved_s=float("nan")), timeout=2)
                assert "saved_s" in info.value.details()
        finally:
            await runtime.shutdown()
