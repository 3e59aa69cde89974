"""``bench load`` and ``bench soak``: their arithmetic, a small load run with zero errors, and
the soak's leak checks (1 minute: every check but the RSS slope, which is judged from 10
minutes; ``DYNBRANCH_SOAK_MINUTES=30`` in the slow suite's long run)."""

from __future__ import annotations

import os

import pytest

from loadgen.bench.load import Plan, knee, load_run
from loadgen.bench.soak import rss_slope, soak

SOAK_MINUTES = float(os.environ.get("DYNBRANCH_SOAK_MINUTES", "1"))


def test_knee_is_the_smallest_concurrency_within_ninety_percent_of_the_best() -> None:
    curve = [{"concurrency": c, "calls_per_s": v}
             for c, v in ((1, 50.0), (4, 80.0), (16, 95.0), (64, 100.0), (256, 97.0))]
    found = knee(curve)
    assert found["concurrency"] == 16 and found["best_calls_per_s"] == 100.0


def test_rss_slope_reads_the_second_half_in_mib_per_minute() -> None:
    rows = [{"t_s": 60.0 * i, "rss_mib": 100.0 + (0 if i < 3 else 2 * i)} for i in range(6)]
    assert rss_slope(rows) == pytest.approx(2.0)
    flat = [{"t_s": 10.0 * i, "rss_mib": 50.0} for i in range(6)]
    assert rss_slope(flat) == 0.0


@pytest.mark.slow
async def test_concurrent_workflows_through_one_gateway_have_zero_errors() -> None:
    result = await load_run(Plan(sweep=(1, 32), sweep_s=1.0, workflows=200, bursts=2))
    assert result["errors"] == 0, result["error_samples"]
    assert all(b["calls"] == 3 * 200 for b in result["bursts"])
    gateway = result["gateway"]
    assert gateway["fds_end"] <= gateway["fds_start"] + 8
    assert result["knee"]["concurrency"] in (1, 32)


@pytest.mark.slow
async def test_soak_leaks_nothing_and_serves_no_stale_hit() -> None:
    result = await soak(SOAK_MINUTES, runners=4, sample_s=2.0 if SOAK_MINUTES < 5 else 10.0)
    assert result["errors"] == 0, result["error_samples"]
    failed = [k for k, ok in result["checks"].items() if ok is False]
    assert not failed, (failed, result["start"], result["end"], result["rss_slope_mib_per_min"])
