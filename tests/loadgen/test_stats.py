"""Paired bootstrap CIs and sample-size-aware quantiles."""

from __future__ import annotations

import pytest

from loadgen.stats import min_samples, paired_bootstrap_ci, ratio_of_means, supported_quantiles


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
