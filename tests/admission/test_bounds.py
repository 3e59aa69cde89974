"""Admission's load view keeps no key per model named only in requests."""

from __future__ import annotations

from services.admission.load_view import LoadTracker


def test_released_reservations_leave_no_model_key_behind() -> None:
    tracker = LoadTracker()
    for i in range(100):
        tracker.reserve(f"model-{i}", f"b{i}/c", 8)
        tracker.release(f"model-{i}", f"b{i}/c")
    tracker.release("never-reserved", "x")
    assert tracker._reserved == {}  # noqa: SLF001 - the table itself is the subject
