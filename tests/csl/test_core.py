"""SubgraphLibrary: confirmed entries, shadows, promotion, settlement, freshness."""

from __future__ import annotations

import threading

import pytest

from services.common.values.errors import InvalidArgument, Unavailable
from services.common.values.reads import ReadSet, Served
from services.csl.core import SubgraphLibrary
from tests.csl.factories import FakeClock, name, reads, shadow


def test_lookup_misses_an_unknown_name(lib: SubgraphLibrary) -> None:
    assert lib.lookup(name(1)) is None
    assert lib.stats().misses == 1


def test_put_then_lookup_returns_the_recorded_result(lib: SubgraphLibrary) -> None:
    assert lib.put(name(1), b"answer", ReadSet.pure(), cost_s=2.5)
    assert lib.lookup(name(1)) == Served(b"answer", 2.5)
    assert lib.stats().hits == 1


def test_put_is_idempotent_per_name(lib: SubgraphLibrary) -> None:
    assert lib.put(name(1), b"answer", ReadSet.pure())
    assert lib.put(name(1), b"answer", ReadSet.pure())
    assert lib.stats().entries == 1


def test_put_refuses_a_read_set_already_stale(lib: SubgraphLibrary) -> None:
    lib.write_records("acme", ["doc"])
    assert not lib.put(name(1), b"old", reads(("doc", 0)))
    assert lib.lookup(name(1)) is None


def test_put_refuses_a_read_of_a_future_version(lib: SubgraphLibrary) -> None:
    assert not lib.put(name(1), b"x", reads(("doc", 7)))


def test_put_refuses_a_missing_producer(lib: SubgraphLibrary) -> None:
    assert not lib.put(name(2), b"x", reads(producers=(name(1),)))


def test_put_rejects_a_producer_of_another_tenant(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="other"), b"x", ReadSet.pure())
    with pytest.raises(InvalidArgument, match="producers"):
        lib.put(name(2), b"y", reads(producers=(name(1, tenant="other"),)))


def test_put_rejects_a_negative_cost(lib: SubgraphLibrary) -> None:
    with pytest.raises(InvalidArgument, match="cost_s"):
        lib.put(name(1), b"x", ReadSet.pure(), cost_s=-1.0)


def test_write_invalidates_direct_readers(lib: SubgraphLibrary) -> None:
    lib.put(name(1), b"x", reads(("doc", 0)))
    lib.put(name(2), b"y", reads(("other", 0)))
    out = lib.write_records("acme", ["doc"])
    assert out.invalidated == 1
    assert out.versions[0].record_id == "doc" and out.versions[0].version > 0
    assert lib.lookup(name(1)) is None
    assert lib.lookup(name(2)) is not None


def test_write_invalidates_entries_that_lose_a_producer(lib: SubgraphLibrary) -> None:
    lib.put(name(1), b"retrieved", reads(("doc", 0)))
    lib.put(name(2), b"summary", reads(producers=(name(1),)))
    lib.put(name(3), b"answer", reads(producers=(name(2),)))
    assert lib.write_records("acme", ["doc"]).invalidated == 3
    assert [lib.lookup(name(i)) for i in (1, 2, 3)] == [None, None, None]


def test_write_keeps_entries_whose_producers_stay_valid(lib: SubgraphLibrary) -> None:
    lib.put(name(1), b"a", reads(("doc", 0)))
    lib.put(name(2), b"b", reads(("other", 0)))
    lib.put(name(3), b"c", reads(producers=(name(2),)))
    assert lib.write_records("acme", ["doc"]).invalidated == 1
    assert lib.lookup(name(3)) is not None


def test_write_invalidates_incomplete_provenance_it_could_reach(lib: SubgraphLibrary) -> None:
    lib.put(name(1), b"x", reads(complete=False))
    lib.put(name(2, tenant="other"), b"y", reads(complete=False))
    assert lib.write_records("acme", ["unrelated"]).invalidated == 1
    assert lib.lookup(name(1)) is None and lib.lookup(name(2, tenant="other")) is not None
    assert lib.write_records("", ["shared/unrelated"]).invalidated == 1
    assert lib.lookup(name(2, tenant="other")) is None


def test_stored_entry_with_versions_read_after_a_write_is_fresh(lib: SubgraphLibrary) -> None:
    version = lib.write_records("acme", ["doc"]).versions[0].version
    assert lib.record_version("acme", "doc") == version
    assert lib.put(name(1), b"new", reads(("doc", version)))
    assert lib.lookup(name(1)) == Served(b"new", 0.0)


def test_write_with_no_records_is_rejected(lib: SubgraphLibrary) -> None:
    with pytest.raises(InvalidArgument, match="writes"):
        lib.write_records("acme", [])


def test_shadow_is_invisible_to_lookup(lib: SubgraphLibrary) -> None:
    assert lib.put_shadow(shadow(name(1)))
    assert lib.lookup(name(1)) is None
    assert lib.stats().shadows == 1


def test_promote_returns_the_result_once_and_confirms_it(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), result=b"fill result", cost_s=1.5))
    assert lib.promote(name(1), "b1") == Served(b"fill result", 1.5)
    assert lib.promote(name(1), "b1") is None
    assert lib.lookup(name(1)) == Served(b"fill result", 1.5)
    assert lib.stats().promotions == 1 and lib.stats().shadows == 0


def test_promote_refuses_another_name(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1)))
    assert lib.promote(name(2), "b1") is None
    assert lib.lookup(name(2)) is None


def test_promote_refuses_another_branch(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), branch="b1"))
    assert lib.promote(name(1), "b2") is None


def test_promote_refuses_stale_read_set(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), read_set=reads(("doc", 0))))
    lib.write_records("acme", ["doc"])
    assert lib.promote(name(1), "b1") is None
    assert lib.lookup(name(1)) is None


def test_promote_refuses_incomplete_provenance_after_a_reachable_write(
        lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), read_set=reads(complete=False)))
    lib.write_records("other", ["anything"])
    lib.put_shadow(shadow(name(2), read_set=reads(complete=False)))
    lib.write_records("acme", ["anything"])
    assert lib.promote(name(1), "b1") is None
    assert lib.promote(name(2), "b1") is None


def test_promote_refuses_after_the_ttl(lib: SubgraphLibrary, clock: FakeClock) -> None:
    lib.put_shadow(shadow(name(1)), ttl_s=5.0)
    clock.advance(6.0)
    assert lib.promote(name(1), "b1") is None


def test_promote_refuses_when_a_producer_was_invalidated(lib: SubgraphLibrary) -> None:
    lib.put(name(1), b"a", reads(("doc", 0)))
    lib.put_shadow(shadow(name(2), read_set=reads(producers=(name(1),))))
    lib.write_records("acme", ["doc"])
    v = lib.record_version("acme", "doc")
    lib.put(name(1), b"a2", reads(("doc", v)))  # same name, new incarnation
    assert lib.promote(name(2), "b1") is None


def test_multi_stage_fill_promotes_stage_by_stage(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), result=b"stage 1"))
    lib.put_shadow(shadow(name(2), result=b"stage 2", read_set=reads(producers=(name(1),))))
    assert lib.promote(name(2), "b1") is None  # its producer is not confirmed yet
    assert lib.promote(name(1), "b1") == Served(b"stage 1", 0.5)
    assert lib.promote(name(2), "b1") == Served(b"stage 2", 0.5)
    assert lib.lookup(name(2)) is not None


def test_promote_drops_a_shadow_whose_producer_shadow_is_gone(lib: SubgraphLibrary,
                                                               clock: FakeClock) -> None:
    lib.put_shadow(shadow(name(1)), ttl_s=5.0)
    lib.put_shadow(shadow(name(2), read_set=reads(producers=(name(1),))), ttl_s=50.0)
    clock.advance(10.0)
    assert lib.expire() == 1
    lib.put(name(1), b"canonical", ReadSet.pure())  # a different incarnation of the producer
    assert lib.promote(name(2), "b1") is None
    assert lib.stats().shadows == 0


def test_promote_when_a_canonical_put_came_first_keeps_one_entry(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), result=b"r"))
    lib.put(name(1), b"r", ReadSet.pure())
    assert lib.promote(name(1), "b1") == Served(b"r", 0.5)
    assert lib.stats().entries == 1


def test_put_shadow_is_idempotent_per_name_and_branch(lib: SubgraphLibrary) -> None:
    assert lib.put_shadow(shadow(name(1)))
    assert lib.put_shadow(shadow(name(1)))
    assert lib.put_shadow(shadow(name(1), branch="b2"))
    assert lib.stats().shadows == 2


def test_put_shadow_refuses_a_stale_read_set(lib: SubgraphLibrary) -> None:
    lib.write_records("acme", ["doc"])
    assert not lib.put_shadow(shadow(name(1), read_set=reads(("doc", 0))))


def test_put_shadow_refuses_beyond_the_shadow_budget(tmp_path, clock) -> None:  # type: ignore[no-untyped-def]
    from tests.csl.factories import library

    with library(tmp_path / "s", clock, shadow_budget_bytes=2000) as small:
        assert small.put_shadow(shadow(name(1), result=b"x" * 500))
        assert not small.put_shadow(shadow(name(2), result=b"x" * 2000))


def test_discard_drops_losers_and_keeps_the_winner(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), candidate="h1"))
    lib.put_shadow(shadow(name(2), candidate="h2"))
    lib.put_shadow(shadow(name(3), candidate="h3"))
    assert lib.discard("b1", keep_candidate="h1") == 2
    assert lib.promote(name(2), "b1") is None
    assert lib.promote(name(1), "b1") is not None


def test_discard_everything_then_late_fills_are_refused(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1), candidate="h1"))
    assert lib.discard("b1") == 1
    assert not lib.put_shadow(shadow(name(2), candidate="h2"))
    assert lib.discard("b1") == 0  # idempotent


def test_settled_branch_still_accepts_later_stages_of_the_winner(lib: SubgraphLibrary) -> None:
    lib.discard("b1", keep_candidate="h1")
    assert lib.put_shadow(shadow(name(1), candidate="h1"))
    assert not lib.put_shadow(shadow(name(2), candidate="h2"))


def test_expire_drops_unclaimed_shadows_after_their_ttl(lib: SubgraphLibrary,
                                                         clock: FakeClock) -> None:
    lib.put_shadow(shadow(name(1)), ttl_s=5.0)
    lib.put_shadow(shadow(name(2)), ttl_s=50.0)
    clock.advance(10.0)
    assert lib.expire() == 1
    assert lib.stats().shadows == 1
    clock.advance(100.0)
    assert lib.expire() == 1 and lib.stats().shadows_expired == 2


def test_expire_forgets_settlements_so_memory_stays_bounded(lib: SubgraphLibrary,
                                                            clock: FakeClock) -> None:
    lib.discard("b1")
    clock.advance(lib.options.shadow_ttl_s + 1)
    lib.expire()
    assert lib.put_shadow(shadow(name(1), branch="b1"))


def test_lookup_overlapping_an_invalidation_misses(lib: SubgraphLibrary) -> None:
    lib.put(name(1), b"x", ReadSet.pure())
    lib._epoch += 1  # what write_records does while its cascade runs
    try:
        assert lib.lookup(name(1)) is None
    finally:
        lib._epoch += 1
    assert lib.lookup(name(1)) is not None


def test_concurrent_lookups_never_see_an_entry_after_its_write_returned(
        lib: SubgraphLibrary) -> None:
    names = [name(i) for i in range(200)]
    for n in names:
        lib.put(n, b"v", reads(("doc", 0)))
    written = threading.Event()
    stale = []

    def reader() -> None:
        while not written.is_set():
            for n in names:
                lib.lookup(n)
        stale.extend(n for n in names if lib.lookup(n) is not None)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    lib.write_records("acme", ["doc"])
    written.set()
    for t in threads:
        t.join()
    assert stale == []


def test_stats_count_bytes_and_budget(lib: SubgraphLibrary) -> None:
    lib.put(name(1), b"x" * 1000, ReadSet.pure())
    stats = lib.stats()
    assert stats.entries == 1 and 1000 < stats.bytes < 1200
    assert stats.budget_bytes == lib.options.budget_bytes


def test_closed_library_refuses_mutations(lib: SubgraphLibrary) -> None:
    lib.close()
    lib.close()
    with pytest.raises(Unavailable):
        lib.put(name(1), b"x", ReadSet.pure())
    assert lib.lookup(name(1)) is None


def test_write_floors_keep_new_versions_above_the_writer_s_own(lib: SubgraphLibrary) -> None:
    first = lib.write_records("", ["a", "b"], [1743, 0]).versions
    assert [v.version for v in first] == [1744, 1745]  # past the floor, then the sequence
    assert lib.stats().write_seq == 1745
    assert lib.write_records("", ["a"], [10]).versions[0].version == 1746
    with pytest.raises(InvalidArgument, match="floor"):
        lib.write_records("", ["a"], [1, 2])
