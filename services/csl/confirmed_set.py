"""The library's confirmed entries in memory and on LMDB, within a byte budget (dynbranch §3.2).

``ConfirmedSet`` owns the name and incarnation indexes, the reverse index, the eviction policy
and the byte accounting, and writes entry rows through the ``Store``. Removing an entry always
takes its dependents along (through the reverse index), since their freshness can no longer be
checked through it. It takes no lock and never bumps the ``SubgraphLibrary`` epoch: the library
calls it under its lock, and brackets invalidations with the epoch itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from services.common.values.errors import ResourceExhausted
from services.common.values.reads import ReadSet, RecordKey, RecordRead
from services.csl import codec
from services.csl.entries import EntryMeta, record_keys, tenant_of_key
from services.csl.eviction import EvictionPolicy
from services.csl.reverse_index import ReverseIndex
from services.csl.store import Store
from services.csl.versions import VersionTable

#: Receives confirmed name keys added and removed, on the thread that changed them.
NameListener = Callable[[list[bytes], list[bytes]], None]


class ConfirmedSet:
    """Confirmed entries: indexes, eviction, byte budget and their LMDB rows (caller locks)."""

    def __init__(self, store: Store, budget_bytes: int) -> None:
        self.store = store
        self.budget_bytes = budget_bytes
        #: Called with name keys added and removed on every change (``watch_names``).
        self.listeners: list[NameListener] = []
        self.names: dict[bytes, EntryMeta] = {}
        self.entries: dict[int, EntryMeta] = {}
        self.index = ReverseIndex()
        self.policy = EvictionPolicy()
        self.bytes = 0
        self.invalidations = self.evictions = 0
        self._next_eid = 1

    def new_eid(self) -> int:
        """A fresh incarnation id (entries and shadows share the sequence)."""
        eid, self._next_eid = self._next_eid, self._next_eid + 1
        return eid

    def load(self, stored: Iterable[codec.StoredEntry], versions: VersionTable) -> int:
        """Install the stored entries that are still fresh and fit the budget, delete the rest
        from LMDB; returns how many were dropped."""
        stale: list[bytes] = []
        for se in stored:  # in id order, so producers come before their dependents
            self._next_eid = max(self._next_eid, se.eid + 1)
            tenant = tenant_of_key(se.key)
            if not (versions.is_valid(tenant, se.reads, se.complete, se.stored_seq)
                    and all(p in self.entries for p in se.producers)):
                stale.append(codec.eid_key(se.eid))
                continue
            self.install(se.key, se.eid, read_keys(tenant, se.reads), se.producers,
                         not se.complete, se.size, se.cost_s, se.result_offset)
        stale += self.make_room(0)
        if stale:
            self.store.commit(deletes=sorted(stale))
        return len(stale)

    def store_entry(self, key: bytes, tenant: str, eid: int, result: bytes,
                    read_set: ReadSet, producers: tuple[int, ...], cost_s: float,
                    stored_seq: int) -> bool:
        """Store one entry and commit it; False when it cannot be stored (see ``prepare``)."""
        puts: list[tuple[bytes, bytes]] = []
        deletes: list[bytes] = []
        install = self.prepare(key, tenant, eid, result, read_set, producers, cost_s,
                               stored_seq, puts, deletes)
        if install is None:
            if deletes:
                self.store.commit(deletes=deletes)
            return False
        try:
            self.store.commit(puts=puts, deletes=deletes)
        except ResourceExhausted:
            self.store.commit(deletes=deletes)  # the evictions already happened in memory
            raise
        install()
        return True

    def prepare(self, key: bytes, tenant: str, eid: int, result: bytes,
                read_set: ReadSet, producers: tuple[int, ...], cost_s: float,
                stored_seq: int, puts: list[tuple[bytes, bytes]],
                deletes: list[bytes]) -> Callable[[], None] | None:
        """Make room for an entry and add its LMDB put to ``puts`` (evictions to ``deletes``);
        returns what installs it in memory, or None when it cannot be stored (larger than the
        budget, a producer evicted to make room)."""
        value, offset = codec.encode_entry(key, cost_s, stored_seq, read_set.complete,
                                           read_set.reads, producers, result)
        size = 8 + len(value)
        if size > self.budget_bytes:
            return None
        deletes += self.make_room(size)
        if not all(p in self.entries for p in producers):  # evicted just now to make room
            return None
        puts.append((codec.eid_key(eid), value))
        return lambda: self.install(key, eid, read_keys(tenant, read_set.reads), producers,
                                    not read_set.complete, size, cost_s, offset)

    def commit_batch(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes],
                     installed: list[int]) -> ResourceExhausted | None:
        """Commit what several ``prepare`` calls collected, their entries ``installed`` already;
        when the store is full, take those entries out again and return the error."""
        if deletes:  # an entry of this batch evicted by a later one is never written
            gone = set(deletes)
            puts = [(k, v) for k, v in puts if k not in gone]
        try:
            self.store.commit(puts=puts, deletes=sorted(deletes))
        except ResourceExhausted as exc:
            self.store.commit(deletes=sorted(deletes))  # evictions happened in memory
            self.drop_many(self.index.closure([e for e in installed if e in self.entries]))
            return exc
        return None

    def install(self, key: bytes, eid: int, rkeys: tuple[RecordKey, ...],
                producers: tuple[int, ...],
                incomplete: bool, size: int, cost_s: float, offset: int) -> None:
        """Add an entry to the memory indexes and tell the listeners."""
        meta = EntryMeta(eid, key, codec.eid_key(eid), offset, rkeys, producers, incomplete,
                         size, cost_s)
        self.index.add(eid, rkeys, producers, tenant_of_key(key) if incomplete else None)
        self.policy.admit(meta)
        self.entries[eid] = meta
        self.names[key] = meta
        self.bytes += size
        if self.listeners:
            self._notify([key], [])

    def invalidate(self, bumps: list[tuple[RecordKey, int]], seq: int) -> int:
        """Drop every entry that read a bumped record and commit the drops with the versions
        (Proposition A.5); returns entries invalidated."""
        victims: list[int] = []
        for tenant in dict.fromkeys(k[0] for k, _ in bumps):
            keys = [k for k, _ in bumps if k[0] == tenant]
            victims += self.index.cascade(keys, writer=tenant)
        victims = list(dict.fromkeys(victims))  # incomplete readers of two namespaces
        lkeys = self.drop_many(victims)
        self.invalidations += len(victims)
        lkeys.sort()
        self.store.commit(deletes=lkeys, versions=bumps, seq=seq)
        return len(victims)

    def drop_many(self, closure: list[int]) -> list[bytes]:
        """Forget entries found by a cascade or closure; return their LMDB keys."""
        entries_pop, names = self.entries.pop, self.names
        metas = [entries_pop(eid) for eid in closure]
        for meta in metas:
            del names[meta.key]
        self.index.retire(metas)
        self.bytes -= sum([m.size for m in metas])
        if self.listeners:
            self._notify([], [m.key for m in metas])
        return [m.lkey for m in metas]

    def make_room(self, size: int) -> list[bytes]:
        """Evict until ``size`` more bytes fit; an evicted producer takes its dependents along,
        since their freshness can no longer be checked through it."""
        deletes: list[bytes] = []
        while self.bytes + size > self.budget_bytes:
            victim = self.policy.pop_victim(self.entries)
            if victim is None:
                break
            closure = self.index.closure([victim.eid])
            deletes += self.drop_many(closure)
            self.evictions += len(closure)
        if deletes:
            self.policy.compact(self.entries)
            deletes.sort()
        return deletes

    def compact(self) -> None:
        """Drop the eviction heap's items of removed entries once they pile up."""
        self.policy.compact(self.entries)

    def _notify(self, added: list[bytes], removed: list[bytes]) -> None:
        for listener in self.listeners:
            listener(added, removed)


def read_keys(tenant: str, reads: Iterable[RecordRead]) -> tuple[RecordKey, ...]:
    """Index keys a stage of ``tenant`` with these reads depends on, each once."""
    return tuple(dict.fromkeys(k for r in reads for k in record_keys(tenant, r.record_id)))


__all__ = ["ConfirmedSet", "NameListener", "read_keys"]
