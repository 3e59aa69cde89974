"""RecordBook: which lease and budget records the sender may act on (LADS "Record validity")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.values.leases import LEASE_TRANSITIONS, LeaseState
from services.delivery.records import RecordBook
from tests.delivery import ENGINE, FakeClock, budget, frame, key, lease


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(0.0)


@pytest.fixture
def book(clock: FakeClock) -> RecordBook:
    b = RecordBook(ENGINE, clock=clock)
    assert b.observe_budget(budget(1))
    return b


def test_accepts_an_in_order_sequence_of_lease_records(book: RecordBook) -> None:
    f = frame(1)
    assert book.observe_lease(lease(f, sequence=1))
    assert book.observe_lease(lease(f, sequence=2, state=LeaseState.REVOKED))
    assert book.observe_lease(lease(f, sequence=5, state=LeaseState.ACTIVE))
    assert book.lease(f.key).sequence == 5
    assert not book.rejected


def test_refuses_records_of_another_engine(book: RecordBook) -> None:
    assert not book.observe_budget(budget(2, engine="other"))
    assert not book.observe_lease(lease(frame(1), engine="other"))
    assert book.rejected["engine"] == 2


def test_refuses_records_older_than_max_age_on_arrival(book: RecordBook, clock: FakeClock) -> None:
    clock.t = 2.0
    assert not book.observe_budget(budget(2, at=0.9))
    assert not book.observe_lease(lease(frame(1), at=0.5))
    assert book.rejected["stale"] == 2
    assert book.observe_budget(budget(2, at=1.0))  # exactly max_age_s old is still fresh


def test_refuses_records_from_the_future(book: RecordBook) -> None:
    assert not book.observe_budget(budget(2, at=0.06))
    assert book.rejected["future"] == 1
    assert book.observe_budget(budget(2, at=0.04))  # within the skew tolerance


def test_refuses_repeated_or_older_versions(book: RecordBook) -> None:
    f = frame(1)
    assert not book.observe_budget(budget(1))
    assert book.observe_lease(lease(f, sequence=3))
    assert not book.observe_lease(lease(f, sequence=3))
    assert not book.observe_lease(lease(f, sequence=2))
    assert book.rejected["duplicate"] == 3


def test_refuses_a_transition_the_lease_state_machine_forbids(book: RecordBook) -> None:
    f = frame(1)
    assert book.observe_lease(lease(f, sequence=1, state=LeaseState.HANDED_OFF))
    assert not book.observe_lease(lease(f, sequence=2, state=LeaseState.ACTIVE))
    assert book.rejected["order"] == 1


def test_refuses_a_lease_of_another_budget_generation(book: RecordBook) -> None:
    assert not book.observe_lease(lease(frame(1), generation=2))
    assert book.rejected["generation"] == 1


def test_refuses_a_lease_before_any_budget(clock: FakeClock) -> None:
    fresh = RecordBook(ENGINE, clock=clock)
    assert not fresh.observe_lease(lease(frame(1)))
    assert fresh.rejected["generation"] == 1


def test_evidence_for_a_matching_fresh_lease(book: RecordBook) -> None:
    f = frame(1)
    book.observe_lease(lease(f, exclusive=7, blocks=9, deadline=8.0, granted_at=0.0))
    ev = book.evidence(f, 0.5)
    assert ev is not None
    assert (ev.state, ev.exclusive, ev.blocks, ev.deadline) == (LeaseState.ACTIVE, 7, 9, 8.0)


@pytest.mark.parametrize("field", ["payload", "prefix"])
def test_no_evidence_when_a_digest_differs(book: RecordBook, field: str) -> None:
    f = frame(1)
    other = frame(1, fill=99)
    wrong = {"payload_digest": other.payload_digest} if field == "payload" else {"prefix": "x"}
    book.observe_lease(lease(f, **wrong))
    assert book.evidence(f, 0.0) is None


def test_no_evidence_for_a_lease_of_an_older_generation(book: RecordBook,
                                                        clock: FakeClock) -> None:
    f = frame(1)
    book.observe_lease(lease(f, generation=1))
    clock.t = 0.1
    book.observe_budget(budget(2, at=0.1))
    assert book.evidence(f, 0.1) is None


def test_no_evidence_when_the_budget_is_stale(book: RecordBook) -> None:
    f = frame(1)
    book.observe_lease(lease(f))
    assert book.evidence(f, 1.0) is not None
    assert book.budget(1.01) is None
    assert book.evidence(f, 1.01) is None


def test_no_evidence_when_the_lease_record_is_stale(clock: FakeClock) -> None:
    book = RecordBook(ENGINE, clock=clock)
    f = frame(1)
    clock.t = 0.5
    book.observe_budget(budget(1, at=0.5))
    book.observe_lease(lease(f, at=0.0))
    assert book.evidence(f, 1.2) is None  # budget 0.7 s old, lease 1.2 s old


def test_denied_names_the_fresh_budgets_denials(clock: FakeClock) -> None:
    book = RecordBook(ENGINE, clock=clock)
    book.observe_budget(budget(1, denied=(key(3),)))
    assert book.denied(0.5) == {key(3)}
    assert book.denied(1.5) == frozenset()


def test_forget_drops_the_lease_of_a_committed_frame(book: RecordBook) -> None:
    f = frame(1)
    book.observe_lease(lease(f))
    book.forget(f.key)
    assert book.evidence(f, 0.0) is None


_STATES = st.sampled_from(list(LeaseState))


@given(st.lists(st.tuples(st.integers(0, 10), _STATES), max_size=30))
def test_accepted_records_only_move_forward(records: list[tuple[int, LeaseState]]) -> None:
    book = RecordBook(ENGINE, clock=FakeClock(0.0))
    book.observe_budget(budget(1))
    f = frame(1)
    accepted: list[tuple[int, LeaseState]] = []
    for seq, state in records:
        if book.observe_lease(lease(f, sequence=seq, state=state)):
            accepted.append((seq, state))
    for (s1, a), (s2, b) in zip(accepted, accepted[1:], strict=False):
        assert s2 > s1 and b in LEASE_TRANSITIONS[a]
    assert len(accepted) + sum(book.rejected.values()) == len(records)
