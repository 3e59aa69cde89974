"""Arms harness pieces without a mesh: arm table and order, value equivalence, the
whole-request cache, the capped decision window; and one short ``bench arms`` run in the
regime where fills outlast their window."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

from loadgen.arms.equivalence import compare_outputs
from loadgen.arms.recording import CACHE_SOURCE, WholeRequestCacheClient
from loadgen.arms.specs import ARM_SPECS, QUICK_ARMS, resolve, rotated
from loadgen.workloads import get_workload
from loadgen.workloads.base import SimClock, StageRecord, Trace, WorkflowResult
from loadgen.workloads.profiles import WINDOW_MAX_TOKENS, profile_options


def _result(wid: str, path: list[tuple[str, str, str]], error: str = "") -> WorkflowResult:
    stages = tuple(StageRecord(stage, cand, text, "engine", 1.0) for stage, cand, text in path)
    return WorkflowResult(wid, wid, stages, 3.0, 3.0, error)


PATH = [("router", "", "r"), ("handler", "a", "h"), ("executor", "a", "e")]


def test_admission_baselines_are_the_full_arm_with_another_policy() -> None:
    full = ARM_SPECS["full"]
    assert full.admission == "priced" and (full.c1, full.c2) == (True, True)
    for name in ("fixed", "fixed1", "fixed3", "always", "threshold", "load_threshold"):
        assert replace(ARM_SPECS[name], name="full", admission="priced", settings=(),
                       mechanism=True) == full
    assert dict(ARM_SPECS["fixed1"].settings) == {"top_k": 1}
    assert replace(ARM_SPECS["full_warm"], name="full", warm=False, mechanism=True) == full
    assert ARM_SPECS["whole_request"].whole_request_cache
    assert "whole_request" in QUICK_ARMS


def test_arm_order_rotates_per_seed_and_floor_is_always_present() -> None:
    arms = resolve(["c1", "c2"])
    assert [a.name for a in arms] == ["floor", "c1", "c2"]
    firsts = {rotated(arms, seed)[0].name for seed in range(3)}
    assert firsts == {"floor", "c1", "c2"}
    with pytest.raises(ValueError, match="unknown arm"):
        resolve(["nope"])


def test_outputs_equal_floor_when_answers_match() -> None:
    assert compare_outputs([_result("w", PATH)], [_result("w", PATH)]) == []


def test_comparison_catches_a_corrupted_stored_answer() -> None:
    corrupted = [*PATH[:2], ("executor", "a", "e-corrupted")]
    [found] = compare_outputs([_result("w", corrupted)], [_result("w", PATH)])
    assert (found.workflow_id, found.reason) == ("w", "text")


def test_comparison_catches_a_diverged_path() -> None:
    diverged = [PATH[0], ("handler", "b", "h"), ("executor", "b", "e")]
    [found] = compare_outputs([_result("w", diverged)], [_result("w", PATH)])
    assert found.reason == "path"


def test_comparison_counts_failed_and_missing_workflows() -> None:
    reasons = [m.reason for m in compare_outputs(
        [_result("w", PATH, error="boom"), _result("x", PATH)], [_result("w", PATH)])]
    assert reasons == ["failed", "missing"]


class _Gateway:
    """Stands in for the SDK client: renders deterministically, counts calls and keeps the
    decode cap each call carried."""

    def __init__(self) -> None:
        self.calls = 0

        self.caps: list[tuple[str, object]] = []

    def render(self, template: str, stage: str, *, inputs: dict, outputs: dict | None,
               candidate: str | None, max_tokens: int | None = None) -> SimpleNamespace:
        return SimpleNamespace(stage_version="1", model="m", sampling=max_tokens,
                               text=f"{stage}|{sorted(inputs.items())}|{candidate}")

    async def call_stage(self, template: str, stage: str, **kwargs: object) -> SimpleNamespace:
        self.calls += 1
        self.caps.append((stage, kwargs.get("max_tokens")))
        return SimpleNamespace(text=f"answer-{self.calls}", source=1)


def test_whole_request_cache_hits_only_identical_requests() -> None:
    gateway = _Gateway()
    cache = WholeRequestCacheClient(gateway)

    async def go() -> list:
        return [await cache.call_stage("t", "s", workflow_id=w, inputs={"q": q})
                for w, q in (("1", "a"), ("2", "a"), ("3", "b"))]

    first, again, other = asyncio.run(go())
    assert again.text == first.text and again.source == CACHE_SOURCE
    assert other.text != first.text and gateway.calls == 2 and cache.hits == 1


def test_the_window_profile_caps_the_deciding_stage_only() -> None:
    routing = get_workload("routing", **profile_options("window", "routing"))
    assert routing.stage_max_tokens == {"router": WINDOW_MAX_TOKENS}
    gateway = _Gateway()
    trace = Trace(gateway, "routing", "w", SimClock(1.0), max_tokens=routing.stage_max_tokens)
    instance = routing.instances(1, random.Random(0))[0]
    asyncio.run(routing.run(trace, instance))
    # the handler and executor render as their fills do: nothing caps them
    assert gateway.caps == [("router", WINDOW_MAX_TOKENS), ("handler", None), ("executor", None)]
    assert profile_options("window", "hci") == {}  # a user's think time is HCI's window
    with pytest.raises(ValueError, match="deciding stage"):
        get_workload("hci", decision_max_tokens=WINDOW_MAX_TOKENS)


def test_under_the_window_profile_fills_outlast_their_window_and_are_adopted() -> None:
    from loadgen.bench.arms import run

    result = run(True, "routing", profile="window", workflows=4, arms=("full",))
    assert result["ok"] and result["outputs_equal_floor"]
    assert result["decision_window"] == {"decision_stage": "router",
                                         "decision_max_tokens": WINDOW_MAX_TOKENS}
    adoption = result["arms"]["full"]["adoption"]
    remaining = adoption["remaining_s"]
    assert remaining["n"] > 0 and remaining["share_positive"] > 0 and remaining["max_s"] > 0
    assert adoption["adoptions"] > 0 and adoption["adoptions_served"] > 0
    assert set(adoption["wait_timeout"]) == {"stalled", "sooner", "deadline", "fill_failed"}
    assert result["arms"]["floor"]["adoption"]["adoptions"] == 0


def test_a_demand_that_waited_on_its_fill_and_ran_anew_counts_under_its_reason() -> None:
    from loadgen.arms.runner import ArmResult
    from loadgen.arms.summary import summarize

    def flow(wid: str, handler: StageRecord) -> WorkflowResult:
        return WorkflowResult(wid, wid, (StageRecord("router", "", "r", "engine", 1.0),
                                         handler), 2.0, 2.0)

    engine = StageRecord("handler", "a", "h", "engine", 1.0)
    waited = {s: replace(engine, source=s, waited_s=0.5)
              for s in ("engine", "library", "promoted_fill")}
    full = ArmResult("full", "d", [flow("1", waited["engine"]), flow("2", waited["engine"]),
                                   flow("3", waited["library"]),
                                   flow("4", waited["promoted_fill"])],
                     {"adoptions": 4, "adoptions_served": 1, "promotion_refused_stalled": 1},
                     remaining_s=[0.0, 0.5])
    floor = ArmResult("floor", "d", [flow(w, engine) for w in "1234"], remaining_s=[])
    adoption = summarize({"floor": floor, "full": full})["full"]["adoption"]
    # two ran anew after a wait: one the gateway gave up on (stalled), one whose fill failed
    assert adoption["wait_timeout"] == {"stalled": 1, "sooner": 0, "deadline": 0,
                                        "fill_failed": 1}
    assert adoption["library_after_wait"] == 1
    assert adoption["remaining_s"] == {"n": 2, "share_positive": 0.5, "p50_s": 0.0,
                                       "p90_s": None, "max_s": 0.5}


def test_filled_workflows_slower_than_the_floor_are_counted() -> None:
    from loadgen.arms.runner import ArmResult
    from loadgen.arms.summary import summarize

    def flow(wid: str, source: str, latency: float) -> WorkflowResult:
        stage = StageRecord("handler", "a", "h", source, latency)
        return WorkflowResult(wid, wid, (stage,), latency, latency)

    floor = ArmResult("floor", "d", [flow(w, "engine", 2.0) for w in "123"], remaining_s=[])
    full = ArmResult("full", "d", [flow("1", "promoted_fill", 1.0),
                                   flow("2", "promoted_fill", 2.5),
                                   flow("3", "engine", 3.0)], remaining_s=[])  # 3: no fill
    assert summarize({"floor": floor, "full": full})["full"]["filled_slower_than_floor"] == {
        "workflows": 2, "slower": 1, "worst_s": 0.5}


def test_warm_training_never_asks_the_train_split_for_more_than_it_holds() -> None:
    """A warm arm learns from as many train-split schedules as the split has fresh requests
    for: ReAct's 67 questions hold one schedule of 48, not four that ask each of them about
    three times; Routing's 246 hold four at 48 workflows and two at 96; at least one always."""
    from loadgen.arms.load_levels import most_workflows
    from loadgen.bench.arms import TRAIN_SCHEDULES, training_schedules

    react = most_workflows(get_workload("react", split="train"))
    assert react is not None and training_schedules(TRAIN_SCHEDULES[False], 48, react) == 1
    assert training_schedules(4, 48, 246) == 4 and training_schedules(4, 96, 246) == 2
    assert training_schedules(4, 246, 246) == 1 and training_schedules(4, 300, 246) == 1
    assert training_schedules(4, 48, None) == 4
