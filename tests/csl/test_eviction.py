"""Byte budget and eviction by recency, frequency and cost per byte."""

from __future__ import annotations

from pathlib import Path

from services.common.values.reads import ReadSet
from services.csl.entries import EntryMeta
from services.csl.eviction import EvictionPolicy
from tests.csl.factories import FakeClock, library, name, reads


def meta(eid: int, size: int = 100, cost_s: float = 1.0) -> EntryMeta:
    return EntryMeta(eid, b"k%d" % eid, b"", 0, (), (), False, size, cost_s)


def test_policy_evicts_the_lowest_cost_per_byte_first() -> None:
    policy, entries = EvictionPolicy(), {}
    for m in (meta(1, cost_s=5.0), meta(2, cost_s=0.1), meta(3, size=1000, cost_s=0.5)):
        entries[m.eid] = m
        policy.admit(m)
    assert [policy.pop_victim(entries).eid for _ in range(2)] == [3, 2]  # type: ignore[union-attr]


def test_policy_keeps_a_frequently_hit_entry() -> None:
    policy, entries = EvictionPolicy(), {1: meta(1), 2: meta(2)}
    for m in entries.values():
        policy.admit(m)
    for _ in range(5):
        policy.touch(entries[1])
    assert policy.pop_victim(entries).eid == 2  # type: ignore[union-attr]


def test_policy_ages_out_entries_not_touched_since_the_clock_moved() -> None:
    policy, entries = EvictionPolicy(), {}
    for eid in range(1, 5):
        entries[eid] = meta(eid)
        policy.admit(entries[eid])
    entries.pop(policy.pop_victim(entries).eid)  # type: ignore[union-attr]
    policy.touch(entries[4])  # recency: touched after the clock rose
    victims = [policy.pop_victim(entries).eid for _ in range(2)]  # type: ignore[union-attr]
    assert 4 not in victims


def test_policy_heap_stays_linear_in_live_entries() -> None:
    policy, entries = EvictionPolicy(), {}
    for eid in range(1000):
        entries[eid] = meta(eid)
        policy.admit(entries[eid])
    for eid in range(990):
        del entries[eid]
    policy.compact(entries)
    assert len(policy) <= 2 * len(entries) + 64


def test_library_stays_within_its_byte_budget(tmp_path: Path) -> None:
    with library(tmp_path / "c", FakeClock(), budget_bytes=20_000) as lib:
        for i in range(100):
            assert lib.put(name(i), b"x" * 900, ReadSet.pure(), cost_s=1.0)
        stats = lib.stats()
        assert stats.bytes <= 20_000 and stats.evictions > 0
        assert stats.entries + stats.evictions == 100
        assert len(lib._store.eids()) == stats.entries


def test_library_evicts_cheap_entries_before_expensive_ones(tmp_path: Path) -> None:
    with library(tmp_path / "c", FakeClock(), budget_bytes=10_000) as lib:
        lib.put(name("costly"), b"x" * 900, ReadSet.pure(), cost_s=100.0)
        for i in range(30):
            lib.put(name(i), b"x" * 900, ReadSet.pure(), cost_s=0.01)
        assert lib.lookup(name("costly")) is not None


def test_library_refuses_an_entry_larger_than_the_budget(tmp_path: Path) -> None:
    with library(tmp_path / "c", FakeClock(), budget_bytes=1000) as lib:
        assert not lib.put(name(1), b"x" * 2000, ReadSet.pure())


def test_evicting_a_producer_evicts_its_dependents_and_their_references(tmp_path: Path) -> None:
    with library(tmp_path / "c", FakeClock(), budget_bytes=5_000) as lib:
        lib.put(name(1), b"p" * 1000, reads(("doc", 0)), cost_s=0.0001)
        lib.put(name(2), b"d" * 100, reads(("other", 0), producers=(name(1),)), cost_s=100.0)
        for i in range(10, 20):
            lib.put(name(i), b"x" * 1000, ReadSet.pure(), cost_s=10.0)
        assert lib.lookup(name(1)) is None and lib.lookup(name(2)) is None
        assert lib._confirmed.index.references() == 0
        assert lib.write_records("acme", ["doc", "other"]).invalidated == 0
