"""Classifying a real engine's divergences from the floor: the engine's own
variation and near ties pass, anything else fails (no engine here: a stated gap function)."""

from __future__ import annotations

from loadgen.arms.divergence import EPSILON, classify, first_difference, summary
from loadgen.arms.recording import CallRecord
from loadgen.workloads.base import StageRecord, WorkflowResult


def _result(wid: str, texts: list[str], path: list[str] | None = None) -> WorkflowResult:
    stages = tuple(StageRecord(s, "a", t, "engine", 1.0)
                   for s, t in zip(path or ["router", "handler"], texts, strict=True))
    return WorkflowResult(wid, wid, stages, 2.0, 2.0)


def _calls(*prompts: str) -> list[CallRecord]:
    return [CallRecord("s", "", (), "n", 1.0, prompt=p) for p in prompts]


def test_first_difference_is_where_the_texts_part() -> None:
    assert first_difference("abcd", "abxd") == 2
    assert first_difference("abc", "abcdef") == 3 and first_difference("", "x") == 0


def test_engine_variation_and_near_ties_pass_and_a_clear_split_fails() -> None:
    floor = [_result("stable", ["r", "the answer"]), _result("tie", ["r", "the answer"]),
             _result("clear", ["r", "the answer"]), _result("unstable", ["r", "the answer"])]
    rerun = [_result("stable", ["r", "the answer"]), _result("tie", ["r", "the answer"]),
             _result("clear", ["r", "the answer"]), _result("unstable", ["r", "the anvil"])]
    arm = [_result("stable", ["r", "the answer"]), _result("tie", ["r", "the ansxxx"]),
           _result("clear", ["r", "tho answer"]), _result("unstable", ["r", "the an..."])]
    prompts = {w: _calls("p-router", f"p-handler-{w}") for w in ("tie", "clear", "unstable")}
    asked = []

    def gap(prompt: str, text: str, at: int) -> float:
        asked.append((prompt, text, at))
        return EPSILON / 2 if prompt == "p-handler-tie" else 0.3

    found = {d.workflow_id: d for d in classify(arm, floor, rerun, prompts, gap)}
    assert set(found) == {"tie", "clear", "unstable"}  # the identical workflow is no divergence
    assert found["tie"].kind == "near_tie" and found["tie"].allowed
    assert (found["tie"].call, found["tie"].at_char) == (1, 7)
    assert found["clear"].kind == "divergent" and not found["clear"].allowed
    assert found["clear"].gap == 0.3
    assert found["unstable"].kind == "floor_unstable" and found["unstable"].allowed
    assert ("p-handler-unstable", "the answer", 6) not in asked  # no probe needed there
    assert summary(list(found.values()))["allowed"] is False


def test_a_different_path_or_a_failure_is_never_allowed() -> None:
    floor = [_result("w", ["r", "h"]), _result("x", ["r", "h"])]
    arm = [_result("w", ["r", "h"], ["router", "executor"]),
           WorkflowResult("x", "x", (), 0.0, 0.0, error="boom")]
    found = classify(arm, floor, floor, {}, lambda *_: 0.0)
    assert [(d.workflow_id, d.kind) for d in found] == [("w", "divergent"), ("x", "divergent")]
