"""The engines' load as admission sees it (``load_view.LoadTracker``): the record rule per
engine, freshness of what is priced, and a restarted stream."""

from __future__ import annotations

import pytest

from services.admission.load_view import MAX_AGE_S, EngineLoad, LoadTracker
from tests.admission.test_core import MODEL, tracker_at
from tests.admission.test_core import report as core_report


def report(seq: int, at: float, running: int = 4, engine: str = "e0") -> EngineLoad:
    return EngineLoad(engine, "m", seq, at, running, 0, 16, 100, 1000, 0, 0)


def test_a_report_from_the_future_is_refused() -> None:
    tracker = LoadTracker()
    assert tracker.observe(report(1, 100.0), now=100.0)
    assert not tracker.observe(report(4, 130.0), now=100.1)
    assert tracker.rejected == 1
    assert [r.sequence for r in tracker.reports("m", 100.2)] == [1]


def test_an_old_report_is_not_priced_and_a_forgotten_stream_restarts() -> None:
    tracker = LoadTracker()
    tracker.observe(report(7, 10.0), now=10.0)
    assert tracker.reports("m", 10.0 + MAX_AGE_S + 0.1) == []
    tracker.forget("e0")
    assert tracker.observe(report(0, 20.0), now=20.0)  # a new stream starts its sequence again
    assert [r.sequence for r in tracker.reports("m", 20.0)] == [0]


def test_stale_and_out_of_order_reports_are_rejected() -> None:
    t = LoadTracker(max_age_s=5.0)
    assert t.observe(core_report(2, 10.0), now=10.0)
    assert not t.observe(core_report(2, 10.5), now=10.5)  # same sequence
    assert not t.observe(core_report(1, 11.0), now=11.0)  # older sequence
    assert not t.observe(core_report(3, 9.0), now=11.0)  # older sampling time
    assert not t.observe(core_report(4, 1.0), now=11.0)  # too old
    assert t.observe(core_report(5, 11.0), now=11.0) and t.rejected == 4


def test_rising_load_counts_at_once_and_falling_load_relaxes_over_the_window() -> None:
    t = LoadTracker(window_s=8.0)
    for i in range(8):  # a quiet stretch
        t.observe(core_report(i + 1, float(i), running=2), now=float(i))
    t.observe(core_report(9, 8.0, running=48, waiting=24), now=8.0)  # a burst: ρ = 1.5
    assert t.envelope(MODEL, 8.0) == pytest.approx(1.5)  # at once
    t.observe(core_report(10, 9.0, running=2), now=9.0)  # the burst ends
    snap_now, later, much_later = (t.envelope(MODEL, 9.0), t.envelope(MODEL, 16.5),
                                   t.envelope(MODEL, 17.5))
    quiet = 2 / 48
    assert snap_now > later > quiet and snap_now < 1.5  # relaxes, not instantly
    t.probe(17.5)
    assert much_later == pytest.approx(quiet, abs=1e-9)  # a full window later: back to quiet


def test_reservations_count_until_released() -> None:
    t = tracker_at(running=4)
    before = t.snapshot(MODEL, 100.0)
    t.reserve(MODEL, "b1/h1", 64)
    during = t.snapshot(MODEL, 100.0)
    assert during.fill_slots_free == before.fill_slots_free - 1
    assert during.kv_blocks_free == before.kv_blocks_free - 64
    t.release(MODEL, "b1/h1")
    assert t.snapshot(MODEL, 100.0) == before
