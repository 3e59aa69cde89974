"""Stateful property test under a tiny byte budget: eviction never causes a stale hit.

Any lookup may miss (the entry may have been evicted, or lost an evicted producer), but every
hit must be the deterministic result of its name and fresh by the reference rules: reads at the
current effective versions, complete provenance or no write since, and every producer still the
live incarnation it consumed. Sizes, disk contents and index references must stay consistent.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from services.common.values.reads import ReadSet, RecordRead, Served
from services.common.values.reuse_name import ReuseName
from tests.csl.factories import FakeClock, library, name

NAMES = [name(i, "a") for i in range(8)]
RECORDS = ("r1", "r2", "r3")
BUDGET = 4000


def result_of(n: ReuseName) -> bytes:
    return n.digest.encode() * (4 + NAMES.index(n) * 2)  # 256 B .. 1.1 KB, deterministic


def cost_of(n: ReuseName) -> float:
    return (0.001, 1.0, 100.0)[NAMES.index(n) % 3]  # so producers are evicted before consumers


@dataclass
class Stored:
    inc: int
    reads: tuple[RecordRead, ...]
    complete: bool
    producers: tuple[int, ...]
    stored_seq: int


class EvictingMachine(RuleBasedStateMachine):
    """A library whose budget holds only a few entries, against its accepted provenance."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="csl-evict-"))
        self.lib = library(self.dir / "csl", FakeClock(), budget_bytes=BUDGET)
        self.versions: dict[str, int] = {}
        self.seq = 0
        self.stored: dict[ReuseName, Stored] = {}
        self.incs = 0

    def teardown(self) -> None:
        self.lib.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def valid(self, n: ReuseName) -> bool:
        s = self.stored.get(n)
        return s is not None and self.fresh(s) and all(
            any(o.inc == p and self.valid(m) for m, o in self.stored.items()) for p in s.producers)

    def fresh(self, s: Stored) -> bool:
        return (all(self.versions.get(r.record_id, 0) == r.version for r in s.reads)
                and (s.complete or s.stored_seq == self.seq))

    @rule(n=st.sampled_from(NAMES), data=st.data())
    def put(self, n: ReuseName, data: st.DataObject) -> None:
        if self.lib.lookup(n) is not None:
            return
        rids = data.draw(st.lists(st.sampled_from(RECORDS), max_size=2, unique=True))
        reads = tuple(RecordRead(r, self.versions.get(r, 0)) for r in rids)
        producers = tuple(data.draw(st.lists(st.sampled_from([p for p in NAMES if p != n]),
                                             max_size=2, unique=True)))
        complete = data.draw(st.sampled_from([True, True, False]))
        incs = tuple(self.stored[p].inc if p in self.stored else -1 for p in producers)
        if self.lib.put(n, result_of(n), ReadSet(reads, complete, producers), cost_of(n)):
            assert all(self.valid(p) for p in producers)  # accepted only with live producers
            self.incs += 1
            self.stored[n] = Stored(self.incs, reads, complete, incs, self.seq)

    @rule(rids=st.lists(st.sampled_from(RECORDS), min_size=1, max_size=2))
    def write(self, rids: list[str]) -> None:
        self.lib.write_records("a", rids)
        for rid in rids:
            self.seq += 1
            self.versions[rid] = self.seq

    @rule()
    def restart(self) -> None:
        self.lib.close()
        self.lib = library(self.dir / "csl", FakeClock(), budget_bytes=BUDGET)

    @invariant()
    def every_hit_is_fresh_and_exact(self) -> None:
        for n in NAMES:
            got = self.lib.lookup(n)
            if got is not None:
                assert got == Served(result_of(n), cost_of(n)) and self.valid(n), n

    @invariant()
    def sizes_disk_and_index_stay_consistent(self) -> None:
        lib = self.lib
        assert lib.stats().bytes <= BUDGET
        assert sorted(lib._store.eids()) == sorted(lib._confirmed.entries)
        refs = sum(len(m.rkeys) + len(m.producers) + m.incomplete
                   for m in lib._confirmed.entries.values())
        assert lib._confirmed.index.references() == refs


EvictingMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEvictionProperties = EvictingMachine.TestCase
