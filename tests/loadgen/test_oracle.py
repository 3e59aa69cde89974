"""The oracle bound: the earliest finish of the floor's own trace under reuse and overlap,
per seed."""

from __future__ import annotations

from dataclasses import replace

from loadgen.arms.oracle import oracle_bound, oracle_share
from loadgen.arms.recording import CallRecord
from loadgen.arms.runner import ArmResult
from loadgen.bench.arms import _bound
from loadgen.workloads.base import StageRecord, WorkflowResult


def _call(stage: str, cand: str = "", offered: tuple[str, ...] = (), name: str = "",
          latency: float = 1.0, wait: float = 0.0, post_click: bool = False,
          user_window: bool = False) -> CallRecord:
    return CallRecord(stage, cand, offered, name or f"{stage}-{cand}", latency, wait, post_click,
                      user_window)


def _flow(at: float, *calls: CallRecord) -> list[CallRecord]:
    """``calls`` back to back from ``at``, each after its user's wait (as the floor ran them)."""
    out, t = [], at
    for call in calls:
        t += call.wait_s
        out.append(replace(call, start_s=t))
        t += call.latency_s
    return out


def test_oracle_bound_sums_reuse_and_overlap() -> None:
    first = _flow(0.0, _call("router", offered=("a", "b"), name="r1", latency=4.0),
                  _call("handler", "a", name="h-a", latency=2.0),
                  _call("executor", "a", name="e-a", latency=3.0))
    # Same handler and executor requests recur (C1), the router differs; selection c uncovered.
    second = _flow(20.0, _call("router", offered=("a", "b"), name="r2", latency=4.0),
                   _call("handler", "a", name="h-a", latency=2.0),
                   _call("executor", "a", name="e-a", latency=3.0))
    third = _flow(40.0, _call("router", offered=("a", "b"), name="r3", latency=4.0),
                  _call("handler", "c", name="h-c", latency=2.0))
    bound = oracle_bound([first, second, third])
    assert bound.reuse_s == 5.0 and bound.hits == 2 and bound.joins == 0
    # first: min(4, 2 + 3) = 4; second: subgraph all C1 hits, 0; third: not covered.
    assert bound.overlap_s == 4.0 and (bound.branches, bound.covered) == (3, 2)
    assert oracle_share(4.5, bound) == 0.5


def test_oracle_bound_uses_think_time_and_post_click_calls() -> None:
    turn = _flow(0.0, _call("offer", offered=("x", "y"), latency=1.0, user_window=True),
                 _call("fulfil", "x", wait=5.0, latency=3.0, post_click=True))
    bound = oracle_bound([turn], post_click_only=True)
    assert bound.overlap_s == 3.0 and bound.reuse_s == 0.0


def test_a_user_wait_branch_window_is_the_think_time_after_the_offer_only() -> None:
    # The offer decodes for 4 s, the user thinks 1 s: fills read the offer's text, so only the
    # 1 s of think time can hide the 3 s fulfil (the offer's decode cannot).
    turn = _flow(0.0, _call("offer", offered=("x", "y"), latency=4.0, user_window=True),
                 _call("fulfil", "x", wait=1.0, latency=3.0, post_click=True))
    assert oracle_bound([turn], post_click_only=True).overlap_s == 1.0


def test_a_model_decided_branch_window_is_the_decision_decode() -> None:
    # The router decodes for 1.5 s; the handler (2 s) and executor (3 s) can hide 1.5 s of it.
    flow = _flow(0.0, _call("router", offered=("a", "b"), latency=1.5),
                 _call("handler", "a", latency=2.0), _call("executor", "a", latency=3.0))
    assert oracle_bound([flow]).overlap_s == 1.5


def test_oracle_bound_counts_open_vocabulary_branches_as_covered() -> None:
    hop = _flow(0.0, _call("think", latency=2.0), _call("retrieve", "Paris", latency=5.0))
    assert oracle_bound([hop]).overlap_s == 2.0


def test_a_repeat_arriving_while_its_original_runs_saves_only_what_a_join_takes() -> None:
    # The original runs 0..10 s; a repeat at 4 s can join it and end at 10 s: 4 s saved, not 10.
    original = _flow(0.0, _call("retrieve", name="x", latency=10.0))
    early = oracle_bound([original, _flow(4.0, _call("retrieve", name="x", latency=10.0))])
    assert (early.reuse_s, early.hits, early.joins) == (4.0, 0, 1)
    late = oracle_bound([original, _flow(12.0, _call("retrieve", name="x", latency=10.0))])
    assert (late.reuse_s, late.hits, late.joins) == (10.0, 1, 0)


def test_a_fill_that_ends_an_original_sooner_makes_its_repeat_a_hit_within_the_bound() -> None:
    # On the floor the handler runs 4..10 s, so the repeat at 7 s could only join it; filled from
    # the router's start it ends at 6 s, and the repeat is free (C2 moves the C1 hit earlier).
    filled = _flow(0.0, _call("router", offered=("a",), latency=4.0),
                   _call("handler", "a", name="h", latency=6.0))
    repeat = _flow(7.0, _call("summarize", name="h", latency=6.0))
    bound = oracle_bound([filled, repeat])
    assert (bound.hits, bound.joins, bound.reuse_s, bound.overlap_s) == (1, 0, 6.0, 4.0)


def test_what_the_warm_up_left_on_the_mesh_is_reusable_from_the_start() -> None:
    flow = _flow(0.0, _call("retrieve", name="seen", latency=3.0))
    assert oracle_bound([flow]).hits == 0
    assert oracle_bound([flow], prior={"seen"}).reuse_s == 3.0


def _floor(wid: str, calls: list[CallRecord]) -> ArmResult:
    stages = tuple(StageRecord(c.stage, c.candidate, "t", "engine", c.latency_s) for c in calls)
    total = sum(c.latency_s for c in calls)
    return ArmResult("floor", "d", [WorkflowResult(wid, wid, stages, total, total)],
                     calls={wid: tuple(calls)})


def test_a_call_repeated_in_another_seed_is_no_hit() -> None:
    # Each seed runs on a fresh mesh: seed 1's retrieval cannot reuse seed 0's.
    seeds = [_floor(f"w-{s}", _flow(10.0 * s, _call("retrieve", name="same", latency=3.0)))
             for s in (0, 1)]
    bound, per_seed = _bound(seeds, {"w-0", "w-1"}, post_click=False)
    assert bound.reuse_s == 0.0 and bound.hits == 0 and len(per_seed) == 2
    merged = oracle_bound([s.calls[r.workflow_id] for s in seeds for r in s.results])
    assert merged.hits == 1  # what the merged bound used to count
