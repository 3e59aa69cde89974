"""Rate-limited warnings: one line per key per interval, the next one saying how many were held
back; keys are bounded."""

from __future__ import annotations

import logging

import pytest

from services.common.values.throttled_log import MAX_KEYS, ThrottledLog


def test_a_repeating_warning_logs_once_per_interval_with_the_count_held_back(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = ThrottledLog(logging.getLogger("t.throttled"), interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t.throttled"):
        written = [log.warning("shard-a", "shard %s cut off", "a") for _ in range(500)]
        assert log.warning("shard-b", "shard %s cut off", "b")  # another key logs at once
        now[0] = 10.5
        assert log.warning("shard-a", "shard %s cut off", "a")
    assert written.count(True) == 1
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["shard a cut off", "shard b cut off",
                     "shard a cut off (499 more like it in the last 10 s)"]
    assert caplog.records[-1].suppressed == 499


def test_keys_are_bounded() -> None:
    log = ThrottledLog(logging.getLogger("t.bounded"), clock=lambda: 0.0)
    for i in range(MAX_KEYS + 50):
        log.warning(f"k{i}", "x")
    assert len(log._keys) == MAX_KEYS
