"""The confirmed entries (``confirmed_set.ConfirmedSet``): a write drops every entry that read
the record and their dependents, eviction takes an evicted producer's dependents along, and
listeners hear every change."""

from __future__ import annotations

from pathlib import Path

from services.common.values.reads import ReadSet, RecordRead
from services.common.values.reuse_name import name_key
from services.csl.confirmed_set import ConfirmedSet
from services.csl.store import Store, StoreOptions
from tests.csl.factories import name


def make(tmp_path: Path, budget: int = 1 << 20) -> ConfirmedSet:
    return ConfirmedSet(Store(tmp_path, StoreOptions(sync=False)), budget)


def put(cs: ConfirmedSet, i: int, reads: tuple[RecordRead, ...], producers: tuple[int, ...] = (),
        size: int = 10) -> int:
    eid = cs.new_eid()
    assert cs.store_entry(name_key(name(i)), "acme", eid, b"x" * size,
                          ReadSet(reads, complete=True), producers, 1.0, stored_seq=0)
    return eid


def test_a_write_drops_the_readers_and_their_dependents(tmp_path: Path) -> None:
    cs = make(tmp_path)
    heard: list[tuple[list[bytes], list[bytes]]] = []
    cs.listeners.append(lambda added, removed: heard.append((added, removed)))
    reader = put(cs, 1, (RecordRead("doc", 1),))
    dependent = put(cs, 2, (), producers=(reader,))
    other = put(cs, 3, (RecordRead("other", 1),))
    assert cs.invalidate([(("", "doc"), 2)], seq=2) == 2
    assert set(cs.entries) == {other} and dependent not in cs.entries
    assert sorted(cs.store.eids()) == [other]
    assert len(heard) == 4 and sorted(heard[-1][1]) == sorted(
        [name_key(name(1)), name_key(name(2))])
    cs.store.close()


def test_eviction_takes_an_evicted_producers_dependents_along(tmp_path: Path) -> None:
    cs = make(tmp_path, budget=3 * 200)
    producer = put(cs, 1, (), size=100)
    put(cs, 2, (), producers=(producer,), size=100)
    deletes = cs.make_room(cs.budget_bytes)  # room for a whole budget: everything goes
    assert cs.entries == {} and cs.bytes == 0 and len(deletes) == 2 and cs.evictions == 2
    cs.store.close()
