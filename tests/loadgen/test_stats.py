"""Paired bootstrap CIs and sample-size-aware quantiles."""

from __future__ import annotations

import pytest

from loadgen.arms.stats import (
    min_samples,
    paired_bootstrap_ci,
    paired_difference_ci,
    ratio_of_means,
    supported_quantiles,
)


def test_bootstrap_ci_brackets_the_ratio_and_is_seeded() -> None:
    floor = [10.0 + i % 5 for i in range(40)]
    arm = [0.6 * v + (i % 3) * 0.1 for i, v in enumerate(floor)]
    ratio = ratio_of_means(arm, floor)
    low, high = paired_bootstrap_ci(arm, floor, seed=3)
    assert low <= ratio <= high and high - low < 0.1
    assert paired_bootstrap_ci(arm, floor, seed=3) == (low, high)


def test_bootstrap_ci_of_identical_arms_is_one() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert paired_bootstrap_ci(values, values) == (1.0, 1.0)


def test_bootstrap_ci_refuses_unpaired_and_tiny_samples() -> None:
    with pytest.raises(ValueError, match="paired"):
        paired_bootstrap_ci([1.0, 2.0], [1.0])
    assert paired_bootstrap_ci([1.0], [2.0]) is None


def test_quantiles_withheld_below_their_sample_size() -> None:
    assert (min_samples(0.5), min_samples(0.95), min_samples(0.99)) == (2, 20, 100)
    small, note = supported_quantiles([float(v) for v in range(12)])
    assert small["p50"] == 5.0 and small["p95"] is None and small["p99"] is None
    assert "p99 needs >= 100" in note
    big, note = supported_quantiles([float(v) for v in range(1, 101)])
    assert big == {"p50": 50.0, "p95": 95.0, "p99": 99.0} and note == ""


def _seeded_cells() -> tuple[list[float], list[float], list[int]]:
    """Three seeds of 20 workflows whose ratio differs by seed (0.5, 0.7, 0.9), barely within."""
    floor, arm, seeds = [], [], []
    for s, ratio in enumerate((0.5, 0.7, 0.9)):
        for i in range(20):
            floor.append(10.0 + i % 4)
            arm.append(ratio * floor[-1] + 0.01 * (i % 3))
            seeds.append(s)
    return arm, floor, seeds


def test_the_cluster_bootstrap_carries_the_spread_between_seeds() -> None:
    arm, floor, seeds = _seeded_cells()
    flat = paired_bootstrap_ci(arm, floor, seed=1)
    clustered = paired_bootstrap_ci(arm, floor, seed=1, clusters=seeds)
    assert flat is not None and clustered is not None
    # per workflow, the 60 look independent and the CI is narrow; by seed, only 3 clusters vary
    assert clustered[1] - clustered[0] > 3 * (flat[1] - flat[0])
    assert clustered[0] < 0.65 and clustered[1] > 0.75
    same = paired_difference_ci(arm, floor, floor, seed=1, clusters=seeds)
    wide = same[2] - same[1]
    assert wide > 3 * ((d := paired_difference_ci(arm, floor, floor, seed=1))[2] - d[1])


def test_one_seed_keeps_the_per_workflow_bootstrap() -> None:
    arm, floor, _ = _seeded_cells()
    assert paired_bootstrap_ci(arm, floor, seed=2, clusters=[7] * 60) == \
        paired_bootstrap_ci(arm, floor, seed=2)
    with pytest.raises(ValueError, match="clusters"):
        paired_bootstrap_ci(arm, floor, clusters=[0, 1])
