"""The oracle bound: reuse and overlap on the floor's own trace, per seed."""

from __future__ import annotations

from loadgen.arms import ArmResult
from loadgen.bench.arms import _bound
from loadgen.oracle import oracle_bound
from loadgen.recording import CallRecord
from loadgen.workloads.base import StageRecord, WorkflowResult


def _call(stage: str, cand: str = "", offered: tuple[str, ...] = (), name: str = "",
          latency: float = 1.0, start: float = 0.0) -> CallRecord:
    return CallRecord(stage, cand, offered, name or f"{stage}-{cand}", latency, start_s=start)


def _floor(wid: str, calls: list[CallRecord]) -> ArmResult:
    stages = tuple(StageRecord(c.stage, c.candidate, "t", "engine", c.latency_s) for c in calls)
    total = sum(c.latency_s for c in calls)
    return ArmResult("floor", "d", [WorkflowResult(wid, wid, stages, total, total)],
                     calls={wid: tuple(calls)})


def test_a_call_repeated_in_another_seed_is_no_hit() -> None:
    # Each seed runs on a fresh mesh: seed 1's retrieval cannot reuse seed 0's.
    seeds = [_floor(f"w-{s}", [_call("retrieve", name="same", latency=3.0)]) for s in (0, 1)]
    bound, per_seed = _bound(seeds, {"w-0", "w-1"}, post_click=False)
    assert bound.reuse_s == 0.0 and bound.hits == 0 and len(per_seed) == 2
    merged = oracle_bound([s.calls[r.workflow_id] for s in seeds for r in s.results])
    assert merged.hits == 1  # what the merged bound used to count
