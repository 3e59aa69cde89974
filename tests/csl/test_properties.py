"""Stateful property test: random put / put-shadow / promote / discard / write / expire / restart
sequences against a small in-memory reference model.

After every step every name of the pool is looked up and must answer exactly what the model
says: a fresh confirmed entry's result, or a miss. That pins down: no stale hit (freshness, §5.3),
no shadow leak (§5.2), no lost confirmed entry (also across restarts), and promotion only on the
exact name with a fresh read-set. The model's validity is defined lazily from its own version
table, so a write's `invalidated` count also checks the cascade is exact (Proposition A.5).
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
from tests.csl.factories import FakeClock, library, name, shadow

TENANTS = ("a", "b")
NAMES = [name(i, t) for t in TENANTS for i in range(3)] + [name(i, "a", shared=True)
                                                          for i in range(2)]
RECORDS = ("r1", "r2", "r3")
BRANCHES = ("b1", "b2")
CANDIDATES = ("h1", "h2")
TTL = 10.0


@dataclass
class MEntry:
    """A model entry (confirmed or shadow)."""

    inc: int
    result: bytes
    cost_s: float
    tenant: str
    reads: tuple[RecordRead, ...]
    complete: bool
    producers: tuple[int, ...]
    stored_seq: int
    candidate: str = ""
    expires_at: float = 0.0


class LibraryMachine(RuleBasedStateMachine):
    """Drives a real SubgraphLibrary and the reference model side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="csl-prop-"))
        self.clock = FakeClock()
        self.lib = library(self.dir / "csl", self.clock)
        self.versions: dict[tuple[str, str], int] = {}
        self.seq = 0
        self.last: dict[str, int] = {}  # namespace -> latest write
        self.confirmed: dict[ReuseName, MEntry] = {}
        self.shadows: dict[tuple[ReuseName, str], MEntry] = {}
        self.settled: dict[str, tuple[str, float]] = {}
        self.next_inc = 0

    def teardown(self) -> None:
        self.lib.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model --------------------------------------------------------------------------

    def effective(self, tenant: str, rid: str) -> int:
        shared = self.versions.get(("", rid), 0)
        return max(shared, self.versions.get((tenant, rid), 0)) if tenant else shared

    def fresh(self, e: MEntry) -> bool:
        quiet = all(self.last.get(ns, 0) <= e.stored_seq for ns in {"", e.tenant})
        return (all(self.effective(e.tenant, r.record_id) == r.version for r in e.reads)
                and (e.complete or quiet))

    def live(self, n: ReuseName) -> MEntry | None:
        e = self.confirmed.get(n)
        if e is not None and self.fresh(e) and all(self.live_inc(p) for p in e.producers):
            return e
        return None

    def live_inc(self, inc: int) -> bool:
        return any(e.inc == inc and self.live(n) is e for n, e in self.confirmed.items())

    def live_names(self) -> set[ReuseName]:
        return {n for n in self.confirmed if self.live(n) is not None}

    def resolve(self, producers: tuple[ReuseName, ...],
                branch: str | None) -> tuple[int, ...] | None:
        out = []
        for p in producers:
            e = self.live(p)
            held = self.shadows.get((p, branch)) if branch and e is None else None
            if e is None and held is None:
                return None
            out.append(e.inc if e is not None else held.inc)  # type: ignore[union-attr]
        return tuple(out)

    def new_inc(self) -> int:
        self.next_inc += 1
        return self.next_inc

    # -- drawing inputs ---------------------------------------------------------------------

    def draw_read_set(self, data: st.DataObject, n: ReuseName, branch: str | None = None,
                      valid: bool = False) -> ReadSet:
        """Provenance for ``n``: always fresh with usable producers when ``valid``, else
        mostly so, sometimes stale, future-dated, incomplete or naming a missing producer."""
        reads = []
        for rid in data.draw(st.lists(st.sampled_from(RECORDS), max_size=2, unique=True)):
            current = self.effective(n.tenant, rid)
            wrong = [] if valid else [max(current - 1, 0), 0, current + 1]
            reads.append(RecordRead(rid, data.draw(st.sampled_from([current] * 3 + wrong))))
        allowed = [p for p in NAMES if p.tenant in ("", n.tenant) and p != n]
        usable = [p for p in allowed if self.live(p) is not None or (p, branch) in self.shadows]
        pool = usable if valid or (usable and data.draw(st.booleans())) else allowed
        producers = data.draw(st.lists(st.sampled_from(pool), max_size=2, unique=True)) \
            if pool else []
        complete = data.draw(st.sampled_from([True, True, True, False]))
        return ReadSet(tuple(reads), complete, tuple(producers))

    # -- rules ------------------------------------------------------------------------------

    @rule(n=st.sampled_from(NAMES), data=st.data(), cost=st.sampled_from([0.0, 0.5, 2.0]),
          valid=st.booleans())
    def put(self, n: ReuseName, data: st.DataObject, cost: float, valid: bool) -> None:
        rs = self.draw_read_set(data, n, valid=valid)
        result = f"canonical {n.digest[:6]} {self.seq}".encode()
        stored = self.lib.put(n, result, rs, cost)
        if self.live(n) is not None:
            assert stored
            return
        producers = self.resolve(rs.producers, None)
        ok = producers is not None and all(
            self.effective(n.tenant, r.record_id) == r.version for r in rs.reads)
        assert stored == ok
        if ok:
            self.confirmed[n] = MEntry(self.new_inc(), result, cost, n.tenant, rs.reads,
                                       rs.complete, producers or (), self.seq)

    @rule(n=st.sampled_from(NAMES), branch=st.sampled_from(BRANCHES),
          candidate=st.sampled_from(CANDIDATES), data=st.data(), valid=st.booleans())
    def put_shadow(self, n: ReuseName, branch: str, candidate: str, data: st.DataObject,
                   valid: bool) -> None:
        rs = self.draw_read_set(data, n, branch, valid)
        result = f"fill {n.digest[:6]} {branch} {self.seq}".encode()
        stored = self.lib.put_shadow(shadow(n, branch, candidate, result, rs, cost_s=1.0),
                                     ttl_s=TTL)
        if (n, branch) in self.shadows:
            assert stored
            return
        keep = self.settled.get(branch)
        producers = self.resolve(rs.producers, branch)
        ok = ((keep is None or (keep[0] != "" and keep[0] == candidate))
              and producers is not None
              and all(self.effective(n.tenant, r.record_id) == r.version for r in rs.reads))
        assert stored == ok
        if ok:
            self.shadows[(n, branch)] = MEntry(
                self.new_inc(), result, 1.0, n.tenant, rs.reads, rs.complete, producers or (),
                self.seq, candidate, self.clock.now + TTL)

    @rule(data=st.data())
    def promote_a_held_shadow(self, data: st.DataObject) -> None:
        if self.shadows:
            n, branch = data.draw(st.sampled_from(sorted(self.shadows, key=str)))
            self.promote(n, branch)

    @rule(n=st.sampled_from(NAMES), branch=st.sampled_from(BRANCHES))
    def promote(self, n: ReuseName, branch: str) -> None:
        got = self.lib.promote(n, branch)
        s = self.shadows.get((n, branch))
        if s is None:
            assert got is None
            return
        alive = s.expires_at > self.clock.now and self.fresh(s)
        if alive and all(self.live_inc(p) for p in s.producers):
            assert got == Served(s.result, s.cost_s)
            del self.shadows[(n, branch)]
            if self.live(n) is None:
                self.confirmed[n] = s
            return
        assert got is None
        held = {e.inc for e in self.shadows.values()}
        if not (alive and all(self.live_inc(p) or p in held for p in s.producers)):
            del self.shadows[(n, branch)]

    @rule(branch=st.sampled_from(BRANCHES), keep=st.sampled_from(("",) + CANDIDATES))
    def discard(self, branch: str, keep: str) -> None:
        dropped = self.lib.discard(branch, keep)
        self.settled[branch] = (keep, self.clock.now + self.lib.options.shadow_ttl_s)
        losers = [k for k, s in self.shadows.items()
                  if k[1] == branch and (keep == "" or s.candidate != keep)]
        for k in losers:
            del self.shadows[k]
        assert dropped == len(losers)

    @rule(tenant=st.sampled_from(("",) + TENANTS),
          rids=st.lists(st.sampled_from(RECORDS), min_size=1, max_size=2))
    def write(self, tenant: str, rids: list[str]) -> None:
        before = self.live_names()
        out = self.lib.write_records(tenant, rids)
        for rid in rids:
            self.seq += 1
            self.versions[(tenant, rid)] = self.last[tenant] = self.seq
        assert [(v.record_id, v.version) for v in out.versions] == [
            (rid, self.seq - len(rids) + 1 + i) for i, rid in enumerate(rids)]
        assert out.invalidated == len(before - self.live_names())

    @rule(dt=st.sampled_from([1.0, 6.0, 30.0]))
    def expire(self, dt: float) -> None:
        self.clock.advance(dt)
        dropped = self.lib.expire()
        gone = [k for k, s in self.shadows.items() if s.expires_at <= self.clock.now]
        for k in gone:
            del self.shadows[k]
        self.settled = {b: v for b, v in self.settled.items() if v[1] > self.clock.now}
        assert dropped == len(gone)

    @rule()
    def restart(self) -> None:
        self.lib.close()
        self.lib = library(self.dir / "csl", self.clock)
        self.shadows.clear()
        self.settled.clear()

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def every_lookup_matches_the_model(self) -> None:
        for n in NAMES:
            e = self.live(n)
            assert self.lib.lookup(n) == (None if e is None else Served(e.result, e.cost_s)), n

    @invariant()
    def sizes_match_and_disk_holds_exactly_the_live_entries(self) -> None:
        stats = self.lib.stats()
        assert stats.entries == len(self.live_names())
        assert stats.shadows == len(self.shadows)
        assert sorted(self.lib._store.eids()) == sorted(self.lib._confirmed.entries)


LibraryMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLibraryProperties = LibraryMachine.TestCase
