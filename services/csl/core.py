"""The Completed-Subgraph Library: exact, fresh, tenant-scoped reuse (dynbranch §3.2–§3.3).

A confirmed entry maps a reuse name to a result recorded by one canonical execution (or one
promoted fill), with the provenance that keeps it fresh. Its metadata lives in memory, where its
*presence* means "fresh": every write removes, before it returns, exactly the entries it
invalidates (Proposition A.5), so a lookup is one dict probe plus one LMDB ``get``.

Concurrency. Mutations (put, put_shadow, promote, discard, write_records, expire) take one lock,
so they are atomic with respect to each other: a promotion checks the shadow's read-set and
installs the entry without a write slipping in between, and a write's bump-and-cascade is never
interleaved with a put or a promotion. Lookups take no lock; they synchronize with invalidation
through a sequence counter (``_epoch``) that is odd while a write is invalidating: a lookup that
starts during an invalidation, or sees the counter change before it returns, reports a miss
(§3.2: "concurrent or uncertain cases fall back to a miss"). A lookup reads the LMDB row keyed by
the incarnation id the index holds; ids are never reused, so it never returns the bytes of
another incarnation stored under the same name. In the service, ``AsyncSubgraphLibrary`` runs
mutations on one worker thread and lookups on the event loop.

Layout. This module holds the lock, the epoch, the shadows and the versions; the confirmed
entries themselves (indexes, eviction within the byte budget, their LMDB rows) are a
``ConfirmedSet`` (``confirmed_set.py``), which the library drives under its lock.

Durability. Confirmed entries and record versions are committed to LMDB before a call returns;
shadows live in memory only. On start-up every stored entry is re-checked against the stored
versions, its producers and the write sequence, so whatever a crash left behind, a stale entry
is dropped rather than served.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Self

from services.common.values.errors import (
    DynbranchError,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
from services.common.values.reads import (
    Claimed,
    ReadSet,
    RecordKey,
    RecordRead,
    Served,
    Shadow,
    WriteOutcome,
    check_cost,
    check_record_key,
)
from services.common.values.reuse_name import ReuseName, name_key, validate_tenant
from services.csl.confirmed_set import ConfirmedSet, NameListener, read_keys
from services.csl.entries import LibraryStats
from services.csl.options import LibraryOptions, MiB
from services.csl.shadows import HeldShadow, ShadowStore
from services.csl.store import Store
from services.csl.versions import VersionTable

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__  # builds a Served without NamedTuple.__new__'s argument handling


class SubgraphLibrary:
    """Confirmed entries on LMDB, shadows in memory, versions, reverse index and eviction."""

    def __init__(self, path: str | Path, options: LibraryOptions | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options = options or LibraryOptions()
        self._clock = clock
        self._mutex = threading.RLock()
        self._epoch = 0
        self._closed = False
        self._store = Store(path, options.store_options())
        self._begin = self._store.env.begin
        self._db = self._store.entries_db
        self._confirmed = ConfirmedSet(self._store, options.budget_bytes)
        self._shadows = ShadowStore(options.shadow_budget_bytes)
        self._hits = self._misses = self._promotions = self._discarded = self._expired = 0
        try:
            self._load()
        except BaseException:
            self._store.close()
            raise

    # -- watching the confirmed names ----------------------------------------------------------

    def watch_names(self, listener: NameListener) -> list[bytes]:
        """Call ``listener(added, removed)`` (name keys) on every change of the confirmed set,
        from the mutating thread; returns the current set, consistent with the first call."""
        with self._mutex:
            self._confirmed.listeners.append(listener)
            return list(self._confirmed.names)

    def unwatch_names(self, listener: NameListener) -> None:
        """Stop calling ``listener``."""
        with self._mutex:
            if listener in self._confirmed.listeners:
                self._confirmed.listeners.remove(listener)

    # -- serving path -----------------------------------------------------------------------

    def lookup(self, name: ReuseName) -> Served | None:
        """Serve a fresh confirmed entry under exactly this name, or None (a miss)."""
        epoch = self._epoch
        key = name_key(name)
        meta = self._confirmed.names.get(key)
        if meta is None or epoch & 1:
            self._misses += 1
            return None
        txn = self._begin(db=self._db)
        value = txn.get(meta.lkey)
        txn.abort()
        if value is None or self._epoch != epoch:
            self._misses += 1
            return None
        meta.freq += 1  # EvictionPolicy.touch, inlined: this is the hot path
        meta.prio = self._confirmed.policy.clock + meta.freq * meta.value
        self._hits += 1
        return _new_tuple(Served, (value[meta.result_offset:], meta.cost_s))

    # -- confirmed entries ------------------------------------------------------------------

    def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float = 0.0) -> bool:
        """Store a canonical execution's result; False when its provenance is already stale,
        a producer is not a live entry, or it is larger than the whole budget."""
        check_cost(cost_s, "cost_s")
        key = name_key(name)
        with self._mutex:
            self._check_open()
            if key in self._confirmed.names:
                return True  # idempotent: same name, same inputs, same (deterministic) result
            producers = self._resolve(name.tenant, read_set, branch_id=None)
            if producers is None:
                return False
            return self._confirmed.store_entry(key, name.tenant, self._confirmed.new_eid(),
                                               result, read_set, producers, cost_s,
                                               self._versions.seq)

    def put_many(self, items: Sequence[tuple[ReuseName, bytes, ReadSet, float]]
                 ) -> list[bool | DynbranchError]:
        """``put`` for several results in one LMDB transaction (one fsync instead of one per
        result: what a burst of stores on one stream costs). Each result is judged in order as
        ``put`` alone would judge it, its refusal error in its place. Entries join the memory
        index before the commit, where a lookup meanwhile misses (its LMDB read finds nothing);
        a failed commit takes them out again, every one refused."""
        out: list[bool | DynbranchError] = []
        puts: list[tuple[bytes, bytes]] = []
        deletes: list[bytes] = []
        installed: list[tuple[int, int]] = []  # (index in ``out``, incarnation id)
        with self._mutex:
            self._check_open()
            for name, result, read_set, cost_s in items:
                try:
                    check_cost(cost_s, "cost_s")
                    key = name_key(name)
                    if key in self._confirmed.names:
                        out.append(True)
                        continue
                    producers = self._resolve(name.tenant, read_set, branch_id=None)
                except DynbranchError as exc:
                    out.append(exc)
                    continue
                install = producers is not None and self._confirmed.prepare(
                    key, name.tenant, self._confirmed.new_eid(), result, read_set, producers,
                    cost_s, self._versions.seq, puts, deletes)
                if install:
                    install()
                    installed.append((len(out), self._confirmed.names[key].eid))
                out.append(bool(install))
            if not puts and not deletes:
                return out
            full = self._confirmed.commit_batch(puts, deletes, [e for _, e in installed])
            if full is not None:  # the store is full: every entry of this batch is refused
                for i, _ in installed:
                    out[i] = full
        return out

    def write_records(self, tenant: str, record_ids: Sequence[str],
                      floors: Sequence[int] = (), version: int = 0) -> WriteOutcome:
        """Bump the versions of written records and invalidate every entry that depended on
        them (Proposition A.5); durable before it returns. Each new version is above the
        record's ``floors`` entry (the writer's own current version; see ``VersionTable.bump``).
        ``version`` > 0: every record gets exactly that version, which the writer chose (so
        that the shards of a library number one write alike), only if it is above the write
        sequence; otherwise nothing changes and the outcome says ``refused``."""
        if not record_ids:
            raise InvalidArgument("writes", "at least one record")
        if len(floors) > len(record_ids) or any(not 0 <= f < 2**63 for f in floors):
            raise InvalidArgument("writes.floor", "one non-negative floor per record at most")
        validate_tenant(tenant)
        for rid in record_ids:
            check_record_key(tenant, rid)  # a valid id the store can key
        if not 0 <= version < 2**63:
            raise InvalidArgument("version", "must be in [0, 2^63)")
        with self._mutex:
            self._check_open()
            prior = self._versions.seq
            if version and version <= prior:
                return WriteOutcome((), 0, prior, refused=True)
            bumps, invalidated = self._apply_versions(
                (lambda: self._versions.bump(tenant, record_ids, floors)) if not version else
                (lambda: [((tenant, r), version) for r in dict.fromkeys(record_ids)
                          if self._versions.adopt((tenant, r), version)]))
            if version:
                bumps = [((tenant, r), version) for r in record_ids]
        return WriteOutcome(tuple(RecordRead(k[1], v) for k, v in bumps), invalidated, prior)

    def adopt_versions(self, versions: Sequence[tuple[RecordKey, int]]) -> int:
        """Raise records to versions another shard handed out (a catch-up after this shard
        missed writes), invalidating their readers exactly as the writes would have; versions
        never move down. Returns entries invalidated; durable before it returns."""
        for (tenant, rid), version in versions:
            validate_tenant(tenant)
            RecordRead(rid, version)  # validates the id and the version
            check_record_key(tenant, rid)
        with self._mutex:
            self._check_open()
            if all(v <= self._versions.version(k) for k, v in versions):
                return 0  # nothing to raise (a renewal's usual page): lookups never miss for it
            return self._apply_versions(
                lambda: [(k, v) for k, v in versions if self._versions.adopt(k, v)])[1]

    def versions_since(self, seq: int, limit: int = 1024) -> list[tuple[RecordKey, int]]:
        """Records written (or adopted) above ``seq``, in version order, about ``limit``."""
        with self._mutex:
            return self._versions.since(seq, limit)

    def changed_since(self, after: int, limit: int = 1024
                      ) -> tuple[list[tuple[RecordKey, int]], int, bool]:
        """Records changed after change stamp ``after`` (``VersionTable.changed_since``)."""
        with self._mutex:
            return self._versions.changed_since(after, limit)

    def _apply_versions(self, change: Callable[[], list[tuple[RecordKey, int]]]
                        ) -> tuple[list[tuple[RecordKey, int]], int]:
        """Run a version change and its cascade as one invalidation (caller holds the lock)."""
        self._epoch += 1  # odd: lookups miss until the cascade is complete
        try:
            bumps = change()
            invalidated = self._confirmed.invalidate(bumps, self._versions.seq)
        finally:
            self._epoch += 1
        self._confirmed.compact()
        return bumps, invalidated

    def record_version(self, tenant: str, record_id: str) -> int:
        """The version a stage of ``tenant`` observes for ``record_id`` now."""
        return self._versions.effective(tenant, record_id)

    # -- shadows ----------------------------------------------------------------------------

    def put_shadow(self, shadow: Shadow, ttl_s: float = 0.0) -> bool:
        """Hold a fill's result invisibly; False when stale, its branch is settled against it,
        a producer is missing, or the shadow bound is full."""
        check_cost(ttl_s, "ttl_s")
        key = name_key(shadow.name)
        with self._mutex:
            self._check_open()
            if self._shadows.get(key, shadow.branch_id) is not None:
                return True  # idempotent per name and branch
            if not self._shadows.accepts(shadow.branch_id, shadow.candidate):
                return False
            producers = self._resolve(shadow.name.tenant, shadow.read_set, shadow.branch_id)
            if producers is None:
                return False
            return self._shadows.add(self._hold(key, shadow, producers, ttl_s))

    def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        """Atomically turn the branch's shadow under exactly this name into a confirmed entry and
        return its result, once; None when there is none or its read-set is no longer fresh."""
        key = name_key(name)
        with self._mutex:
            self._check_open()
            held = self._shadows.get(key, branch_id)
            if held is None:
                return None
            if not self._promotable(held):
                if not self._may_become_promotable(held):
                    self._shadows.take(key, branch_id)  # stale or orphaned for good
                return None
            self._shadows.take(key, branch_id)
            self._confirm(held)
            self._promotions += 1
            return Served(held.shadow.result, held.shadow.cost_s)

    def claim(self, name: ReuseName, among: Collection[str]) -> Claimed | None:
        """Promote the one shadow under exactly this name whose branch is ``among`` the given
        ones (a demand on a gateway that did not open the branch); None when there is none,
        when several match (ambiguous: a miss, §3.3), or when it cannot be promoted."""
        with self._mutex:
            self._check_open()
            branches = [b for b in self._shadows.branches_of(name_key(name)) if b in among]
            if len(branches) != 1:
                return None
            held = self._shadows.get(name_key(name), branches[0])
            served = self.promote(name, branches[0])
        if served is None or held is None:
            return None
        return Claimed(served.result, served.cost_s, branches[0], held.shadow.candidate)

    def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        """Settle a branch: drop its shadows except ``keep_candidate``'s; refuse late losers."""
        if not branch_id:
            raise InvalidArgument("branch_id", "required")
        with self._mutex:
            until = self._clock() + self.options.shadow_ttl_s
            dropped = self._shadows.settle(branch_id, keep_candidate, until)
            self._discarded += dropped
            return dropped

    def expire(self, now: float | None = None) -> int:
        """Drop shadows (and settlement records) past their TTL; return shadows dropped."""
        with self._mutex:
            dropped = self._shadows.expire(self._clock() if now is None else now)
            self._shadows.compact()
            self._expired += dropped
            return dropped

    # -- introspection and life cycle -------------------------------------------------------

    def stats(self) -> LibraryStats:
        """Sizes and cumulative counters."""
        return LibraryStats(
            entries=len(self._confirmed.entries), shadows=len(self._shadows),
            bytes=self._confirmed.bytes,
            budget_bytes=self.options.budget_bytes, shadow_bytes=self._shadows.bytes,
            hits=self._hits, misses=self._misses, promotions=self._promotions,
            invalidations=self._confirmed.invalidations, evictions=self._confirmed.evictions,
            shadows_discarded=self._discarded, shadows_expired=self._expired,
            write_seq=self._versions.seq,
        )

    @property
    def path(self) -> Path:
        """Directory of the LMDB environment."""
        return self._store.path

    def close(self) -> None:
        """Close the LMDB environment; shadows are dropped. Safe to call twice."""
        with self._mutex:
            if not self._closed:
                self._closed = True
                self._confirmed.names.clear()  # lookups miss from now on
                self._store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("csl library is closed")

    def _resolve(self, tenant: str, read_set: ReadSet,
                 branch_id: str | None) -> tuple[int, ...] | None:
        """Producer incarnations of a fresh read-set, or None when it cannot be stored now."""
        # Incomplete provenance is guarded against later writes only: a write that lands between
        # the execution and this call cannot be seen without knowing what it read.
        if not self._versions.is_fresh(tenant, read_set.reads):
            return None
        out = []
        for producer in read_set.producers:
            if producer.tenant not in ("", tenant):
                raise InvalidArgument("read_set.producers", "names another tenant's entry")
            pkey = name_key(producer)
            meta = self._confirmed.names.get(pkey)
            held = self._shadows.get(pkey, branch_id) if branch_id and meta is None else None
            if meta is None and held is None:
                return None
            out.append(meta.eid if meta is not None else held.sid)  # type: ignore[union-attr]
        return tuple(out)

    def _hold(self, key: bytes, shadow: Shadow, producers: tuple[int, ...],
              ttl_s: float) -> HeldShadow:
        ttl = ttl_s or self.options.shadow_ttl_s
        rkeys = read_keys(shadow.name.tenant, shadow.read_set.reads)
        size = len(key) + len(shadow.result) + 64 * (len(rkeys) + len(producers) + 4)
        return HeldShadow(self._confirmed.new_eid(), key, shadow, rkeys, producers,
                          self._versions.seq, self._clock() + ttl, size)

    def _promotable(self, held: HeldShadow) -> bool:
        rs = held.shadow.read_set
        return (held.expires_at > self._clock()
                and self._versions.is_valid(held.shadow.name.tenant, rs.reads, rs.complete,
                                            held.stored_seq)
                and all(p in self._confirmed.entries for p in held.producers))

    def _may_become_promotable(self, held: HeldShadow) -> bool:
        """True when only a producer that is still a shadow of the branch stands in the way:
        versions and the write sequence only grow and ids are never reused, so every other
        failure is permanent."""
        rs = held.shadow.read_set
        return (held.expires_at > self._clock()
                and self._versions.is_valid(held.shadow.name.tenant, rs.reads, rs.complete,
                                            held.stored_seq)
                and all(p in self._confirmed.entries or self._shadows.holds(p)
                        for p in held.producers))

    def _confirm(self, held: HeldShadow) -> None:
        """Store a promoted shadow as a confirmed entry under its own incarnation id."""
        if held.key in self._confirmed.names:
            return  # a canonical put got there first; it holds the same result
        sh = held.shadow
        try:
            self._confirmed.store_entry(held.key, sh.name.tenant, held.sid, sh.result,
                                        sh.read_set, held.producers, sh.cost_s, held.stored_seq)
        except ResourceExhausted:
            log.warning("promoted shadow not stored: csl store full",
                        extra={"reuse_name": str(sh.name)})

    def _load(self) -> None:
        loaded = self._store.load()
        self._versions = VersionTable(loaded.versions, loaded.seq)
        dropped = self._confirmed.load(loaded.entries, self._versions)
        log.info("csl store loaded", extra={"path": str(self.path), "dropped": dropped,
                                            "entries": len(self._confirmed.entries)})


__all__ = ["LibraryOptions", "MiB", "SubgraphLibrary"]
