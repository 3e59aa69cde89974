"""DESIGN.md §3's record rule (``SequenceGuard``): stale, future-dated, duplicate and
out-of-order records are refused, each for its reason, in any interleaving."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.common.values.record_guard import GUARD_FAULTS, SequenceGuard

NOW = 1000.0


def test_each_fault_is_named() -> None:
    guard = SequenceGuard(max_age_s=5.0, max_skew_s=1.0)
    assert guard.fault(1, NOW + 1.5, NOW) == "future"
    assert guard.fault(1, NOW - 5.5, NOW) == "stale"
    assert guard.accept(3, NOW - 1.0, NOW)
    assert guard.fault(3, NOW - 0.5, NOW) == "duplicate"
    assert guard.fault(2, NOW - 0.5, NOW) == "duplicate"
    assert guard.fault(4, NOW - 2.0, NOW) == "order"
    assert guard.fault(4, NOW - 0.5, NOW) is None
    assert set(GUARD_FAULTS) == {"future", "stale", "duplicate", "order"}


def test_a_refused_record_is_not_taken_and_reset_starts_a_new_stream() -> None:
    guard = SequenceGuard(max_age_s=5.0)
    assert guard.accept(7, NOW, NOW)
    assert not guard.accept(8, NOW + 10, NOW)  # future: refused and not taken
    assert guard.accept(8, NOW + 0.1, NOW + 0.1)
    guard.reset()
    assert guard.accept(0, NOW + 0.2, NOW + 0.2)


records = st.lists(st.tuples(st.integers(0, 20), st.floats(NOW - 10, NOW + 3)), max_size=40)


@given(records)
def test_what_is_accepted_is_fresh_and_in_order_in_any_interleaving(
        arrivals: list[tuple[int, float]]) -> None:
    guard = SequenceGuard(max_age_s=5.0, max_skew_s=1.0)
    taken = [(s, p) for s, p in arrivals if guard.accept(s, p, NOW)]
    assert all(NOW - 5.0 <= p <= NOW + 1.0 for _, p in taken)
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(taken, taken[1:], strict=False))
    # accept is fault-then-take: a record is refused exactly when the rule names a fault
    replay, again = SequenceGuard(max_age_s=5.0, max_skew_s=1.0), []
    for s, p in arrivals:
        if replay.fault(s, p, NOW) is None:
            replay.take(s, p)
            again.append((s, p))
    assert again == taken
