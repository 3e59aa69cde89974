"""Delivery policies: base orders, LADS turnover promotions, Tail-aware release control."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.values.leases import LeaseState
from services.delivery.frames import Frame, Inventory
from services.delivery.link import PacedLink
from services.delivery.policies import (
    POLICIES,
    CacheFirstPolicy,
    Choice,
    DecisionView,
    DeliveryPolicy,
    FifoPolicy,
    LadsPolicy,
    SizeFirstPolicy,
    TailAwarePolicy,
    make_policy,
)
from services.delivery.records import RecordBook
from tests.delivery import ENGINE, FRAMING, RATE, FakeClock, budget, frame, key, lease

PRESSURE = {"capacity": 100, "protected": 80}


def book_with(*records: object, clock: FakeClock | None = None) -> RecordBook:
    """A lease book that has accepted ``records`` (budgets first) at time 0."""
    book = RecordBook(ENGINE, clock=clock or FakeClock(0.0))
    for rec in records:
        accepted = book.observe_budget(rec) if hasattr(rec, "generation") \
            else book.observe_lease(rec)
        assert accepted, rec
    return book


def view(frames: list[Frame], book: RecordBook | None = None, now: float = 0.0,
         link: PacedLink | None = None) -> DecisionView:
    inv = Inventory()
    for f in frames:
        inv.add(f)
    return DecisionView(now, inv.frames(), link or PacedLink(RATE, FRAMING),
                        book or RecordBook(ENGINE, clock=FakeClock()))


def drain(policy: DeliveryPolicy, frames: list[Frame], book: RecordBook) -> list[Choice]:
    """Commit every frame in the order ``policy`` chooses; the committed choices."""
    left = list(frames)
    out: list[Choice] = []
    while left:
        choice = policy.choose(view(left, book))
        assert choice is not None
        policy.on_commit(choice)
        left.remove(choice.frame)
        out.append(choice)
    return out


def keys(choices: list[Choice]) -> list[int]:
    return [int(c.frame.key.workflow_id[2:]) for c in choices]


def test_fifo_takes_the_earliest_ready_frame() -> None:
    frames = [frame(1, ready_at=0.3), frame(2, ready_at=0.1, size=10), frame(3, ready_at=0.2)]
    assert keys(drain(FifoPolicy(), frames, book_with())) == [2, 3, 1]


def test_size_first_takes_the_smallest_frame_ties_in_fifo_order() -> None:
    frames = [frame(1, size=500, ready_at=0.2), frame(2, size=900),
              frame(3, size=500, ready_at=0.1), frame(4, size=100, ready_at=0.5)]
    assert keys(drain(SizeFirstPolicy(), frames, book_with())) == [4, 3, 1, 2]


def test_cache_first_takes_resident_histories_first_then_smaller_then_fifo() -> None:
    frames = [frame(1, size=100), frame(2, size=900, resident=4, ready_at=0.1),
              frame(3, size=500, resident=2, ready_at=0.3), frame(4, size=500, resident=1,
                                                                ready_at=0.2)]
    assert keys(drain(CacheFirstPolicy(), frames, book_with())) == [4, 3, 2, 1]


def test_cache_first_counts_an_active_lease_as_resident() -> None:
    leased, plain = frame(1, size=900), frame(2, size=100)
    book = book_with(budget(1), lease(leased))
    assert CacheFirstPolicy().choose(view([leased, plain], book)).frame is leased


def test_the_policy_table_names_every_policy_and_its_lease_mode() -> None:
    modes = {name: make_policy(name).leases for name in POLICIES}
    assert modes == {"fifo": "none", "size_first": "none", "cache_first": "none",
                     "lads": "lads", "lads_no_turnover": "lads", "tail_aware": "none",
                     "ttl_simple": "ttl", "ttl_continuum": "continuum", "ttl_fixed": "fixed_ttl"}
    queues = {name for name in POLICIES if make_policy(name).engine_queue == "program"}
    assert queues == {"ttl_continuum", "ttl_fixed"}  # Continuum's program-level FCFS
    with pytest.raises(ValueError, match="policy"):
        make_policy("nope")


# -- LADS -------------------------------------------------------------------------------------

def owners() -> tuple[list[Frame], list[object]]:
    """Two small resident frames without quota and two resident owners of exclusive quota."""
    a, d = frame(1, size=1000, resident=3), frame(2, size=1500, resident=3, ready_at=0.1)
    b, c = frame(3, size=3000, resident=3), frame(4, size=3000, resident=3, ready_at=0.2)
    records = [lease(a, exclusive=0), lease(d, exclusive=0), lease(b, exclusive=40),
               lease(c, exclusive=30)]
    return [a, d, b, c], records


def test_lads_promotes_the_owner_returning_most_quota_per_second_under_pressure() -> None:
    frames, leases = owners()
    choice = LadsPolicy().choose(view(frames, book_with(budget(1, **PRESSURE), *leases)))
    assert choice == Choice(frames[2], promoted=True)


def test_lads_never_departs_twice_in_a_row() -> None:
    frames, leases = owners()
    committed = drain(LadsPolicy(), frames, book_with(budget(1, **PRESSURE), *leases))
    assert [(k, c.promoted) for k, c in zip(keys(committed), committed, strict=True)] == \
        [(3, True), (1, False), (4, True), (2, False)]


def test_a_preview_that_is_not_committed_changes_nothing() -> None:
    frames, leases = owners()
    policy, book = LadsPolicy(), book_with(budget(1, **PRESSURE), *leases)
    first = policy.choose(view(frames, book))
    assert policy.choose(view(frames, book)) == first


def test_lads_ranks_by_quota_per_second_of_handoff_delay() -> None:
    a = frame(1, size=50, resident=1)
    big, small = frame(2, size=3000, resident=1), frame(3, size=100, resident=1, ready_at=0.1)
    book = book_with(budget(1, **PRESSURE), lease(a, exclusive=0), lease(big, exclusive=40),
                     lease(small, exclusive=30))
    # ρ = E / T̂: 40 / 1.007 s for the big owner, 30 / 0.282 s for the small one.
    assert LadsPolicy().choose(view([a, big, small], book)).frame is small


def test_lads_breaks_score_ties_by_fifo_position() -> None:
    a = frame(1, size=50, resident=1)
    early, late = frame(2, resident=1, ready_at=0.1), frame(3, resident=1, ready_at=0.2)
    book = book_with(budget(1, **PRESSURE), lease(a, exclusive=0), lease(late, exclusive=5),
                     lease(early, exclusive=5))
    assert LadsPolicy().choose(view([a, early, late], book)).frame is early


def test_lads_without_pressure_is_cache_first() -> None:
    frames, leases = owners()
    book = book_with(budget(1, capacity=100, protected=74), *leases)
    assert LadsPolicy().choose(view(frames, book)) == Choice(frames[0])


def test_a_fresh_denial_of_a_held_frame_is_pressure() -> None:
    frames, leases = owners()
    waiting = frame(9, size=5000)
    book = book_with(budget(1, protected=10, denied=(waiting.key,)), *leases)
    assert LadsPolicy().choose(view([*frames, waiting], book)).promoted
    assert not LadsPolicy().choose(view(frames, book)).promoted  # denial of a frame not held


def test_a_deadline_before_the_estimated_handoff_excludes_the_owner() -> None:
    frames, _ = owners()
    a, d, b, c = frames
    book = book_with(budget(1, **PRESSURE), lease(a, exclusive=0), lease(d, exclusive=0),
                     lease(b, exclusive=40, deadline=1.0), lease(c, exclusive=30, deadline=1.0))
    assert LadsPolicy().choose(view(frames, book)) == Choice(a)  # T̂ = 1.007 s > 1.0 s


def test_the_engine_queue_delay_counts_toward_the_deadline() -> None:
    frames, _ = owners()
    a, d, b, c = frames
    book = book_with(budget(1, **PRESSURE, waiting=16, max_running=8, kappa_s=1.0),
                     lease(a, exclusive=0), lease(d, exclusive=0), lease(b, exclusive=40,
                                                                        deadline=2.5),
                     lease(c, exclusive=30, deadline=3.5))
    # Engine delay κ·(w + max(0, a+1-m))/m = 2 s: only the owner with deadline 3.5 s is eligible.
    assert LadsPolicy().choose(view(frames, book)).frame is c


def test_owners_without_exclusive_quota_are_not_promoted() -> None:
    frames, _ = owners()
    book = book_with(budget(1, **PRESSURE), *(lease(f, exclusive=0) for f in frames))
    assert not LadsPolicy().choose(view(frames, book)).promoted


def test_a_lease_that_is_not_active_is_not_eligible() -> None:
    frames, _ = owners()
    book = book_with(budget(1, **PRESSURE),
                     *(lease(f, exclusive=9, state=LeaseState.REVOKED) for f in frames))
    assert not LadsPolicy().choose(view(frames, book)).promoted


def test_turnover_off_keeps_leases_but_never_promotes() -> None:
    frames, leases = owners()
    policy = make_policy("lads_no_turnover")
    assert policy.leases == "lads"
    assert not policy.choose(view(frames, book_with(budget(1, **PRESSURE), *leases))).promoted


def test_lads_falls_back_to_cache_first_once_the_budget_is_stale() -> None:
    frames, leases = owners()
    book = book_with(budget(1, **PRESSURE), *leases)
    assert LadsPolicy().choose(view(frames, book, now=1.5)) == Choice(frames[0])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Frame], RecordBook]:
    """A random inventory with random (valid or corrupt) lease records and budget pressure."""
    n = draw(st.integers(1, 7))
    frames = [frame(i, size=draw(st.integers(0, 6000)), resident=draw(st.integers(0, 2)),
                    ready_at=draw(st.sampled_from([0.0, 0.1, 0.2]))) for i in range(n)]
    book = RecordBook(ENGINE, clock=FakeClock(0.0))
    denied = tuple(f.key for f in frames if draw(st.booleans())) + (key(99),)
    book.observe_budget(budget(1, protected=draw(st.integers(0, 100)), denied=denied,
                               waiting=draw(st.integers(0, 20)), kappa_s=0.5))
    for f in frames:
        if draw(st.booleans()):
            book.observe_lease(lease(f, exclusive=draw(st.integers(0, 50)),
                                     deadline=draw(st.floats(0.0, 10.0)),
                                     state=draw(st.sampled_from(list(LeaseState))),
                                     payload_digest=draw(st.sampled_from(
                                         [f.payload_digest, "corrupt"]))))
    return frames, book


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_no_two_consecutive_committed_promotions(scenario: tuple[list[Frame], RecordBook]) -> None:
    frames, book = scenario
    committed = drain(LadsPolicy(), frames, book)
    pairs = zip(committed, committed[1:], strict=False)
    assert not any(a.promoted and b.promoted for a, b in pairs)


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.booleans())
def test_lads_without_valid_evidence_is_cache_first(scenario: tuple[list[Frame], RecordBook],
                                                    corrupt: bool) -> None:
    frames, _ = scenario
    records = [lease(f, payload_digest="x") for f in frames] if corrupt else []
    book = book_with(budget(1, **PRESSURE), *records)
    lads = drain(LadsPolicy(), frames, book)
    assert lads == drain(CacheFirstPolicy(), frames, book)
    assert not any(c.promoted for c in lads)


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_lads_with_a_stale_budget_is_cache_first(scenario: tuple[list[Frame], RecordBook]) -> None:
    frames, book = scenario
    later = view(frames, book, now=2.0)
    assert LadsPolicy().choose(later) == CacheFirstPolicy().choose(later)


# -- Tail-aware release -----------------------------------------------------------------------

def test_tail_aware_takes_the_least_work_first() -> None:
    frames = [frame(1, prompt=3000), frame(2, prompt=1000, ready_at=0.1), frame(3, prompt=2000)]
    assert keys(drain(TailAwarePolicy(), frames, book_with())) == [2, 3, 1]


def test_tail_aware_weights_the_causal_expected_output_of_each_tool() -> None:
    policy = TailAwarePolicy()
    for i, (tool, out) in enumerate([("search", 100), ("read", 10)], start=10):
        done = frame(i, tool=tool)
        policy.on_commit(Choice(done))
        policy.on_complete(done.key, out)
    search, read = frame(1, prompt=1000, tool="search"), frame(2, prompt=1100, tool="read")
    assert policy.work(search) == 1000 + 4 * 100 and policy.work(read) == 1100 + 4 * 10
    assert policy.choose(view([search, read], book_with())).frame is read
    assert policy.expected_output("other") == 55.0  # mean over all tools


def test_tail_aware_holds_while_the_ledger_fills_the_engine_and_requests_wait() -> None:
    policy = TailAwarePolicy()
    frames = [frame(i) for i in range(3)]
    book = book_with(budget(1, waiting=1, max_running=2))
    for i in range(2):
        choice = policy.choose(view(frames[i:], book))
        assert choice == Choice(frames[i])
        policy.on_commit(choice)
    assert policy.ledger == 2
    assert policy.choose(view(frames[2:], book)) is None
    policy.on_complete(frames[0].key, 12)
    assert policy.choose(view(frames[2:], book)) == Choice(frames[2])


@pytest.mark.parametrize("records", [[], [budget(1, waiting=0, max_running=1)]])
def test_tail_aware_never_holds_without_waiting_requests_or_a_budget(records: list) -> None:
    policy = TailAwarePolicy()
    policy.on_commit(Choice(frame(9)))
    assert policy.choose(view([frame(1)], book_with(*records))) is not None
