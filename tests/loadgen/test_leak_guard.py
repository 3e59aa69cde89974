"""The leak guard: shuffling candidate lists must not change the predictors' coverage."""

from __future__ import annotations

import random

import pytest

from loadgen.arms.leak_guard import (
    WORKLOAD_NAMES,
    Decision,
    GuardResult,
    coverage,
    decisions,
    guard,
    predictor,
)
from services.corpus.loaders import default_data_dir

needs_data = pytest.mark.skipif(not default_data_dir().exists(),
                                reason=f"shared data sets absent at {default_data_dir()}")


@needs_data
@pytest.mark.parametrize("name", WORKLOAD_NAMES)
@pytest.mark.parametrize("shuffle_seed", [1, 2])
def test_shuffling_candidates_changes_coverage_only_within_noise(name: str,
                                                                 shuffle_seed: int) -> None:
    result = guard(name, seed=0, shuffle_seed=shuffle_seed)
    assert result.given.n > 50 and result.shuffled.n == result.given.n
    assert result.within_noise(z=2.0, eps=0.01), (result.delta, result.noise())


@needs_data
@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_train_and_test_decisions_come_from_disjoint_instances(name: str) -> None:
    train, test = decisions(name, "train"), decisions(name, "test")
    assert train and test
    result = guard(name)
    assert result.fitted["train"] == len(train) and result.fitted["test"] == len(test)


def test_a_list_that_leaks_through_its_order_is_caught() -> None:
    rng = random.Random(0)
    leaky = [Decision("routing/router", (t, *others), t)
             for t, others in ((f"f{i}", (f"g{i}", f"h{i}", f"k{i}")) for i in range(200))]
    pred_given, pred_shuf = predictor("routing"), predictor("routing")
    given = coverage(pred_given, leaky)
    shuffled = coverage(pred_shuf, [d.shuffled(rng) for d in leaky])
    assert not GuardResult("leaky", given, shuffled).within_noise()
