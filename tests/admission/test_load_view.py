"""The engines' load as admission sees it (``load_view.LoadTracker``): the record rule per
engine, freshness of what is priced, and a restarted stream."""

from __future__ import annotations

from services.admission.load_view import MAX_AGE_S, EngineLoad, LoadTracker


def report(seq: int, at: float, running: int = 4, engine: str = "e0") -> EngineLoad:
    return EngineLoad(engine, "m", seq, at, running, 0, 16, 100, 1000, 0, 0)


def test_stale_future_duplicate_and_out_of_order_reports_are_refused() -> None:
    tracker = LoadTracker()
    assert tracker.observe(report(1, 100.0), now=100.0)
    assert not tracker.observe(report(1, 100.1), now=100.1)              # duplicate
    assert not tracker.observe(report(2, 99.0), now=100.1)               # out of order
    assert not tracker.observe(report(3, 100.0 - MAX_AGE_S - 1), 100.1)  # stale
    assert not tracker.observe(report(4, 130.0), now=100.1)              # from the future
    assert tracker.rejected == 4
    assert [r.sequence for r in tracker.reports("m", 100.2)] == [1]


def test_an_old_report_is_not_priced_and_a_forgotten_stream_restarts() -> None:
    tracker = LoadTracker()
    tracker.observe(report(7, 10.0), now=10.0)
    assert tracker.reports("m", 10.0 + MAX_AGE_S + 0.1) == []
    tracker.forget("e0")
    assert tracker.observe(report(0, 20.0), now=20.0)  # a new stream starts its sequence again
    assert [r.sequence for r in tracker.reports("m", 20.0)] == [0]
