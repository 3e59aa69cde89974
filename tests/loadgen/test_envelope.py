"""The envelope of the fixed fan-outs (K = 0, 1, 2, 3, all) and each arm's regret against it."""

from __future__ import annotations

from loadgen.arms.envelope import best_fixed_k, envelope_regret, worst_regret
from loadgen.arms.runner import ArmResult
from loadgen.arms.summary import summarize
from loadgen.workloads.base import StageRecord, WorkflowResult


def _ratios(**ratios: float | None) -> dict[str, dict[str, float | None]]:
    return {name: {"ratio_to_floor": r} for name, r in ratios.items()}


def test_the_envelope_takes_c1_as_k_0_and_always_as_every_candidate() -> None:
    # issue 37 at 16/s: fixed1 0.805 was named while C1 alone (K = 0) was 0.791
    saturated = _ratios(full=0.774, c1=0.791, fixed1=0.805, fixed=1.141, always=1.432)
    assert best_fixed_k(saturated) == {"arm": "c1", "k": 0, "ratio_to_floor": 0.791}
    idle = _ratios(full=0.497, c1=0.755, fixed1=0.538, fixed=0.499, always=0.495)
    assert best_fixed_k(idle) == {"arm": "always", "k": "all", "ratio_to_floor": 0.495}
    assert best_fixed_k(_ratios(full=0.5, fixed=None)) is None  # no fixed K ran


def _arm(name: str, latencies: list[float]) -> ArmResult:
    return ArmResult(name, "d", [WorkflowResult(
        f"w{i}", f"w{i}", (StageRecord("s", "", "t", "engine", s),), s, s)
        for i, s in enumerate(latencies)], remaining_s=[])


def test_every_arm_is_judged_against_the_best_fixed_k_with_a_paired_ci() -> None:
    floor = [10.0, 12.0, 8.0, 11.0, 9.0, 10.0]
    arms = {"floor": _arm("floor", floor),
            "c1": _arm("c1", [0.8 * v for v in floor]),
            "fixed1": _arm("fixed1", [0.9 * v for v in floor]),
            "full": _arm("full", [0.75 * v + 0.01 * i for i, v in enumerate(floor)])}
    summary = summarize(arms)
    assert best_fixed_k(summary)["arm"] == "c1"
    full = summary["full"]["envelope_regret"]
    assert full["high"] < 0 and abs(full["diff"] - (-0.05 + 0.15 / 60)) < 1e-3  # below it
    assert summary["fixed1"]["envelope_regret"]["low"] > 0  # a fixed K above the envelope
    assert summary["c1"]["envelope_regret"] == {"diff": 0.0, "low": 0.0, "high": 0.0}
    assert "envelope_regret" not in summary["floor"] and "hindsight_share" not in summary["full"]


def test_envelope_regret_is_none_for_fewer_than_two_pairs() -> None:
    assert envelope_regret([1.0], [1.0], [2.0]) is None


def test_the_worst_case_over_a_sweep_is_each_arms_largest_regret() -> None:
    def cell(best: str, **diffs: float) -> dict:
        return {"best_fixed_k": {"arm": best},
                "arms": {"floor": {}, **{a: {"envelope_regret": {"diff": d, "low": d - 0.01,
                                                                 "high": d + 0.01}}
                                         for a, d in diffs.items()}}}
    sweep = [(0.8, cell("fixed", full=0.004, fixed1=0.03, fixed=0.0)),
             (8.0, cell("fixed1", full=0.026, fixed1=0.0, fixed=0.22))]
    worst = worst_regret(sweep)
    assert worst["full"] == {"x": 8.0, "against": "fixed1", "diff": 0.026, "low": 0.016,
                             "high": 0.036}
    assert (worst["fixed1"]["x"], worst["fixed"]["x"]) == (0.8, 8.0) and "floor" not in worst
