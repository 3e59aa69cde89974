"""The supervisor's restart policy: back-off doubling to its cap, a bounded number of restarts
per window, and a window that forgets old restarts."""

from __future__ import annotations

import pytest

from services.restart_policy import RestartBudget, RestartPolicy


def test_the_back_off_doubles_from_its_start_up_to_its_cap() -> None:
    policy = RestartPolicy(backoff_s=0.5, max_backoff_s=3.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_budget_refuses_the_restart_past_its_limit_in_the_window() -> None:
    budget = RestartBudget(RestartPolicy(backoff_s=0.5, max_restarts=3, window_s=60.0))
    assert [budget.take(t) for t in (0.0, 1.0, 2.0)] == [0.5, 1.0, 2.0]
    assert budget.take(3.0) is None and budget.recent == 3
    assert budget.take(59.9) is None  # the first restart is still in the window


def test_restarts_older_than_the_window_are_forgotten_and_the_back_off_starts_over() -> None:
    budget = RestartBudget(RestartPolicy(backoff_s=0.5, max_restarts=3, window_s=60.0))
    for t in (0.0, 1.0, 2.0):
        budget.take(t)
    assert budget.take(60.0) == 2.0 and budget.recent == 3  # only t=0 left the window
    assert budget.take(200.0) == 0.5 and budget.recent == 1  # a quiet window: back to the start


def test_the_defaults_are_half_a_second_doubling_to_ten_and_five_restarts_a_minute() -> None:
    policy = RestartPolicy()
    budget = RestartBudget(policy)
    assert [budget.take(float(t)) for t in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, None]
    assert (policy.max_backoff_s, policy.window_s) == (10.0, 60.0)


@pytest.mark.parametrize(("bad", "rule"), [
    ({"backoff_s": -1.0}, "backoff_s >= 0"),
    ({"backoff_s": 2.0, "max_backoff_s": 1.0}, "max_backoff_s >= backoff_s"),
    ({"max_restarts": 0}, "max_restarts >= 1"), ({"window_s": 0.0}, "window_s > 0"),
    ({"ready_timeout_s": 0.0}, "ready_timeout_s > 0")])
def test_a_policy_out_of_range_is_refused_naming_its_field(bad: dict[str, float],
                                                           rule: str) -> None:
    with pytest.raises(ValueError, match=f"RestartPolicy needs {rule}$"):
        RestartPolicy(**bad)
