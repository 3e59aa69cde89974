"""The gateway's library port over N csl shards.

Each shard is a whole csl service with its own LMDB environment. A reuse name lives on the shard
rendezvous hashing picks (``rendezvous.py``), so lookups, stores, shadows, promotions, claims and
fill placeholders for a name all go to one shard, one hop, as with a single library. Record
writes go to every shard (each keeps the full version table and invalidates its own readers);
settlements go to every shard (a branch's shadows are spread over them).

Failure turns into misses, never errors or stale hits (DESIGN.md §5.3, §5.6):

* A shard that does not answer is a miss for its names (each call has a deadline).
* Freshness under partitions is the shards' own (``shard_repair.py``): a shard serves only
  under a serving lease that renewals (this gateway's and every other's) grant after copying
  its peers' changes in, and a write is acknowledged once a quorum applied it and the others
  applied it too or their leases ran out (commit wait). A shard started without a lease
  (``serving_lease_s`` 0) is not used: it could serve a write it missed.
* A new mesh whose shards are partly down at start-up is founded from the quorum that answers
  (``shard_repair.found``, tried while fewer than a quorum serve); the others join later by the
  first-grant rule, once they answer (the channels reconnect on their own).
* Writes overlap: each takes its own version as it starts (above every version this gateway saw
  or took, so two of them never refuse each other), is handed back once a quorum applied it
  (``apply_records``: the gateway commits the corpus then and gives its write turn back), and
  settles on its own, once every shard applied it or the commit wait passed. During a one-shard
  fault each write waits about one commit wait, however many are in flight.
* A stage whose producer (a chained fill's previous step) lives on another shard is stored with
  that producer's read-set folded into its own, since a shard can only check producers it
  holds; a write to anything the chain read still invalidates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass

import grpc

from services.common.values.errors import Unavailable
from services.common.values.reads import Claimed, HoldNotice, ReadSet, Served, Shadow, WriteOutcome
from services.common.values.reuse_name import ReuseName, name_key
from services.common.values.throttled_log import ThrottledLog
from services.gateway.adapters.library import RemoteLibrary
from services.gateway.adapters.rendezvous import Rendezvous
from services.gateway.adapters.shard_repair import (
    Cursors,
    WriteTally,
    commit_wait_s,
    found,
    quorum,
    renew,
)
from services.gateway.ports import AppliedWrite

log = logging.getLogger(__name__)
#: The per-write shard warning, once per 10 s per shard and status.
_throttled = ThrottledLog(log)
#: Fan-outs of one write before it gives up on meeting newer writes of other gateways.
WRITE_ATTEMPTS = 5
#: The counters of a sharded library, and what each counts (the HELP of the gateway's
#: ``dynbranch_gateway_csl_shard_<key>`` metrics).
SHARD_COUNTERS: dict[str, str] = {
    "renewals": "Serving-lease renewals this gateway asked of csl shards",
    "renewals_granted": "Serving-lease renewals a shard granted after copying its peers in",
    "renewals_short": "Serving-lease renewals not granted: too few of the shard's peers reached",
    "renewals_failed": "Serving-lease renewals that failed (the shard did not answer, or is "
                       "not leased)",
    "renewal_invalidated": "Library entries shards invalidated while renewals copied their "
                           "peers' writes in",
    "unleased_misses": "Library calls answered as misses because their shard runs without a "
                       "serving lease",
    "commit_waits": "Record writes that waited for a shard past their quorum (until it "
                    "applied them or its lease ran out)",
    "commit_wait_ms": "Milliseconds record writes waited past their quorum, summed",
    "folded": "Stores whose producer lives on another shard, stored with that producer's "
              "reads folded in",
    "write_quorum_failures": "Record writes refused because fewer than a quorum of shards "
                             "applied them",
    "founding_grants": "Shards granted when a quorum founded a new mesh",
}


@dataclass(slots=True, eq=False)
class Shard:
    """One csl shard as this gateway sees it."""

    index: int
    target: str
    remote: RemoteLibrary
    #: Whether this gateway's latest renewal granted it a lease (a view for metrics: the shard
    #: itself decides whether it serves).
    serving: bool = False
    #: Its serving lease as it answered (0 before the first renewal).
    lease_s: float = 0.0
    #: Its incarnation as it answered ("" before the first renewal).
    incarnation: str = ""
    #: It answered that it is not a leased shard: unsafe to read, not used.
    unleased: bool = False


class _Attempt:
    """One fan-out of a write at one version: its call to every shard and their tally."""

    def __init__(self, shards: Sequence[Shard], tenant: str, record_ids: Sequence[str],
                 version: int, deadline_s: float, wait_s: float) -> None:
        self.record_ids, self.version = record_ids, version
        self.tally = WriteTally(len(shards), wait_s)
        self.calls = {asyncio.ensure_future(s.remote.client.write_records(
            tenant, record_ids, deadline_s, version=version)): s for s in shards}
        self.pending = set(self.calls)
        #: Shards that refused this version, and the highest write sequence they answered.
        self.refused = 0
        self.prior_seq = 0

    async def applied(self) -> bool:
        """Wait for a quorum: True once it applied the write; False when it cannot (too many
        refused it or failed: ``refused`` tells which), the calls still out dropped."""
        try:
            while self.pending and self.tally.quorum_at is None and not self.tally.lost():
                await self._answers(None)
        finally:
            if self.tally.quorum_at is None:
                await self.cancel()
        return self.tally.quorum_at is not None

    async def settled(self) -> None:
        """After the quorum: return once every shard applied it or the commit wait passed
        (the calls still out dropped: a renewal copies the write into those shards)."""
        loop = asyncio.get_running_loop()
        try:
            while self.pending:
                done_at = self.tally.done_at()
                assert done_at is not None, "settled() before the quorum"
                if done_at <= loop.time():
                    return
                await self._answers(done_at - loop.time())
            done_at = self.tally.done_at()  # every call ended, some shard did not apply it
            if done_at is not None and done_at > loop.time():
                await asyncio.sleep(done_at - loop.time())
        finally:
            await self.cancel()

    async def _answers(self, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        done, self.pending = await asyncio.wait(self.pending, timeout=timeout,
                                                return_when=asyncio.FIRST_COMPLETED)
        for call in done:
            outcome = _usable(self.calls[call], call, self.record_ids, self.version)
            if outcome is not None and not outcome.refused:
                self.tally.ack(loop.time())
                continue
            self.tally.fail()
            if outcome is not None:
                self.refused += 1
                self.prior_seq = max(self.prior_seq, outcome.prior_seq)

    async def cancel(self) -> None:
        """Drop the calls still out."""
        for call in self.pending:
            call.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)
        self.pending = set()


def _usable(shard: Shard, call: asyncio.Future[WriteOutcome], record_ids: Sequence[str],
            version: int) -> WriteOutcome | None:
    """A shard's usable answer to a write (maybe a refusal), or None."""
    err = call.exception()
    if isinstance(err, grpc.aio.AioRpcError):
        _throttled.warning(f"{shard.target}:{err.code().name}",
                           "csl shard %s did not apply a write (%s)", shard.target,
                           err.code().name, extra={"shard": shard.target})
        return None
    if err is not None:
        raise err
    outcome = call.result()
    if not outcome.refused and [(v.record_id, v.version) for v in outcome.versions] != [
            (r, version) for r in record_ids]:
        log.error("csl shard %s answered a write with other records or versions",
                  shard.target, extra={"shard": shard.target})
        return None
    return outcome


class ShardedLibrary:
    """``LibraryPort`` over several csl shards."""

    def __init__(self, targets: Sequence[str], lookup_deadline_s: float = 0.25,
                 deadline_s: float = 2.0, serving_lease_s: float = 1.0,
                 renew_interval_s: float = 0.25, provenance_names: int = 65_536) -> None:
        self.ring = Rendezvous(targets)
        self.shards = [Shard(i, t, RemoteLibrary(t, lookup_deadline_s, deadline_s))
                       for i, t in enumerate(targets)]
        self.deadline_s = deadline_s
        #: The longest serving lease a shard may hold (the shards' ``serving_lease_s``; a
        #: longer one a shard answers is used once seen).
        self.serving_lease_s = serving_lease_s
        self.renew_interval_s = renew_interval_s
        self.quorum = quorum(len(targets))
        self._provenance: OrderedDict[ReuseName, ReadSet] = OrderedDict()
        self._provenance_names = provenance_names
        self._cursors = Cursors()
        #: The highest write sequence any shard answered or a write of this gateway took: the
        #: next write's version is above it.
        self._seen = 0
        #: Writes applied by a quorum and not yet settled (their commit waits).
        self._settling: set[asyncio.Future[None]] = set()
        self._renew_task: asyncio.Task[None] | None = None
        #: Times a shard's name feed was lost and resubscribed (``LibraryPort.resyncs``).
        self.resyncs = 0
        self.counters = dict.fromkeys(SHARD_COUNTERS, 0)

    def available(self) -> bool:
        """See ``LibraryPort.available``: every shard (a fill's steps may land on any)."""
        return all(shard.remote.available() for shard in self.shards)

    def owner(self, name: ReuseName) -> Shard:
        """The shard that holds ``name``."""
        return self.shards[self.ring.owner(name_key(name))]

    def commit_wait_s(self) -> float:
        """How long a write a shard did not acknowledge waits (``shard_repair.commit_wait_s``)
        for the longest lease configured or answered."""
        return commit_wait_s(max([self.serving_lease_s, *(s.lease_s for s in self.shards)]))

    def start(self) -> None:
        """Follow every shard's names and start renewing their serving leases."""
        for shard in self.shards:
            shard.remote.on_resync = self._resynced
            shard.remote.start()
        if self._renew_task is None:
            self._renew_task = asyncio.create_task(self._renew_loop(), name="csl-shard-renew")

    def _resynced(self) -> None:
        self.resyncs += 1

    def _serving(self, name: ReuseName) -> Shard | None:
        shard = self.owner(name)
        if not shard.unleased:
            return shard
        self.counters["unleased_misses"] += 1
        return None

    # -- the port ------------------------------------------------------------------------------

    async def lookup(self, name: ReuseName) -> Served | None:
        """A fresh confirmed entry from the name's shard; None when absent or not trusted."""
        shard = self._serving(name)
        return await shard.remote.lookup(name) if shard is not None else None

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float) -> bool:
        """Store a canonical result on its shard; False when refused or not trusted."""
        shard, placed = self._serving(name), self._place(name, read_set)
        if shard is None or placed is None:
            return False
        return await shard.remote.put(name, result, placed, cost_s)

    async def put_shadow(self, shadow: Shadow, ttl_s: float) -> bool:
        """Store a shadow on its name's shard; False when refused or not trusted."""
        shard, placed = self._serving(shadow.name), self._place(shadow.name, shadow.read_set)
        if shard is None or placed is None:
            return False
        stored = await shard.remote.put_shadow(
            Shadow(shadow.name, shadow.branch_id, shadow.candidate, shadow.rank,
                   shadow.producer, shadow.result, placed, shadow.cost_s), ttl_s)
        if stored:
            self._remember(shadow.name, shadow.read_set)
        return stored

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        """Promote the branch's shadow on the name's shard; None when it cannot."""
        shard = self._serving(name)
        return await shard.remote.promote(name, branch_id) if shard is not None else None

    async def claim(self, name: ReuseName, scope: str, wait_s: float) -> Claimed | None:
        """Claim another replica's shadow on the name's shard; None on a miss."""
        shard = self._serving(name)
        return await shard.remote.claim(name, scope, wait_s) if shard is not None else None

    async def hold(self, name: ReuseName, branch_id: str, candidate: str, scope: str,
                   timeout_s: float) -> AsyncGenerator[HoldNotice, None]:
        """Hold a fill step's placeholder on the name's shard (nothing when not trusted)."""
        shard = self._serving(name)
        if shard is None:
            return
        events = shard.remote.hold(name, branch_id, candidate, scope, timeout_s)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def settle_scope(self, scope: str, template_id: str, stage_id: str,
                           keep_branch: str = "", keep_candidate: str = "") -> int:
        """Settle a workflow's held fills on every shard (they are spread over them)."""
        counts = await asyncio.gather(*(s.remote.settle_scope(
            scope, template_id, stage_id, keep_branch, keep_candidate) for s in self.shards))
        return sum(counts)

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        """Settle a branch on every shard (its shadows are spread over them)."""
        counts = await asyncio.gather(*(s.remote.discard(branch_id, keep_candidate)
                                        for s in self.shards))
        return sum(counts)

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> tuple[int, ...]:
        """``apply_records``, then its settlement: the write once acknowledged."""
        applied = await self.apply_records(tenant, record_ids, floors)
        await applied.settled()
        return applied.versions

    async def apply_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> AppliedWrite:
        """Write records on every shard under one version this gateway picks (above its
        ``floors`` and every write sequence seen or picked), so every shard numbers the write
        alike; retried above a shard's sequence when too many refuse it. Returns once a quorum
        applied it; it settles once the others did too or ``commit_wait_s`` passed (their
        leases ran out: ``shard_repair.py``). Raises ``Unavailable`` when fewer than a quorum
        can apply it (retry: a write only ever invalidates more).

        Writes of this gateway overlap: each takes its own version as it starts (so they do not
        refuse one another), and each waits out its own commit wait, not the ones before it."""
        for _ in range(WRITE_ATTEMPTS):
            version = self._seen = max([self._seen, *floors]) + 1
            attempt = _Attempt(self.shards, tenant, record_ids, version, self.deadline_s,
                               self.commit_wait_s())
            applied = await attempt.applied()
            self._seen = max(self._seen, attempt.prior_seq)
            if applied:
                settlement = asyncio.ensure_future(self._settle(attempt))
                self._settling.add(settlement)
                settlement.add_done_callback(self._settling.discard)
                return AppliedWrite((version,) * len(record_ids), settlement)
            if not attempt.refused:
                self.counters["write_quorum_failures"] += 1
                raise Unavailable(f"csl write failed on {attempt.tally.failed} of "
                                  f"{len(self.shards)} shards ({self.quorum} acknowledgements "
                                  "needed); retry")
        raise Unavailable(f"csl write kept meeting newer writes in {WRITE_ATTEMPTS} attempts; "
                          "retry")

    async def _settle(self, attempt: _Attempt) -> None:
        """Wait for the shards that did not answer yet, up to the commit wait; count it."""
        loop = asyncio.get_running_loop()
        await attempt.settled()
        tally = attempt.tally
        if tally.waited() and tally.quorum_at is not None:
            self.counters["commit_waits"] += 1
            self.counters["commit_wait_ms"] += round(1000 * (loop.time() - tally.quorum_at))

    async def write_seq(self) -> int:
        """The highest write sequence of the reachable shards (raises when none answers)."""
        async def one(shard: Shard) -> int | None:
            try:
                return (await shard.remote.client.stats(self.deadline_s)).write_seq
            except grpc.aio.AioRpcError:
                return None
        seqs = [q for q in await asyncio.gather(*(one(s) for s in self.shards)) if q is not None]
        if not seqs:
            raise Unavailable("no csl shard reachable; retry")
        return max(seqs)

    # -- provenance across shards --------------------------------------------------------------

    def _place(self, name: ReuseName, read_set: ReadSet) -> ReadSet | None:
        """``read_set`` as ``name``'s shard can check it: producers held elsewhere replaced by
        their own (transitive) reads; None when one of them is unknown here."""
        home = self.owner(name)
        if all(self.owner(p) is home for p in read_set.producers):
            return read_set
        reads, complete, kept = list(read_set.reads), read_set.complete, []
        for producer in read_set.producers:
            if self.owner(producer) is home:
                kept.append(producer)
                continue
            folded = self._provenance.get(producer)
            if folded is None:
                return None
            reads += folded.reads
            complete = complete and folded.complete
        self.counters["folded"] += 1
        return ReadSet(tuple(dict.fromkeys(reads)), complete, tuple(kept))

    def _remember(self, name: ReuseName, read_set: ReadSet) -> None:
        """Keep a stored shadow's transitive reads, for dependents stored on other shards (the
        gateway chains fills only: a canonical store names no producer)."""
        reads, complete = list(read_set.reads), read_set.complete
        for producer in read_set.producers:
            folded = self._provenance.get(producer)
            if folded is None:
                return  # unknown: its dependents on other shards are refused
            reads += folded.reads
            complete = complete and folded.complete
        self._provenance[name] = ReadSet(tuple(dict.fromkeys(reads)), complete)
        self._provenance.move_to_end(name)
        while len(self._provenance) > self._provenance_names:
            self._provenance.popitem(last=False)

    # -- serving leases -------------------------------------------------------------------------

    async def _renew_loop(self) -> None:
        while True:
            try:
                await self.renew_all()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad round
                log.exception("csl shard renewal round failed")
            await asyncio.sleep(self.renew_interval_s)

    async def renew_all(self) -> None:
        """Renew every shard's serving lease from its peers, all shards at once; while fewer
        than a quorum serve, try to found a new mesh from the shards that answer."""
        await asyncio.gather(*(self._renew(shard) for shard in self.shards))
        if sum(shard.serving for shard in self.shards) < self.quorum:
            await self._found()

    async def _found(self) -> None:
        granted = await found([s.remote.client for s in self.shards], self.deadline_s)
        if granted:
            self.counters["founding_grants"] += granted
            log.info("csl shards founded a new mesh: %d of %d new shards granted (the others "
                     "join once they answer)", granted, len(self.shards))

    async def _renew(self, shard: Shard) -> None:
        peers = [p.remote.client for p in self.shards if p is not shard]
        self.counters["renewals"] += 1
        try:
            renewal = await renew(shard.remote.client, peers, self._cursors, self.deadline_s)
        except grpc.aio.AioRpcError as err:
            self.counters["renewals_failed"] += 1
            shard.serving = False
            if err.code() is grpc.StatusCode.FAILED_PRECONDITION and "not a leased" in (
                    err.details() or ""):
                if not shard.unleased:
                    log.error("csl shard %s is not leased (start shards with serving_lease_s "
                              "> 0): its names miss", shard.target,
                              extra={"shard": shard.target})
                shard.unleased = True
            return
        shard.unleased = False
        if shard.incarnation and renewal.incarnation != shard.incarnation:
            self._cursors.forget(shard.incarnation)  # it restarted: that copy is gone
            log.info("csl shard %s restarted: copying every peer into it again", shard.target,
                     extra={"shard": shard.target})
        shard.incarnation = renewal.incarnation
        if renewal.lease_s > self.serving_lease_s and renewal.lease_s > shard.lease_s:
            log.warning("csl shard %s holds a %.3f s serving lease, above csl_serving_lease_s "
                        "%.3f s: writes it misses wait the longer one", shard.target,
                        renewal.lease_s, self.serving_lease_s, extra={"shard": shard.target})
        shard.lease_s = renewal.lease_s
        self.counters["renewal_invalidated"] += renewal.invalidated
        granted = renewal.serving_s is not None
        self.counters["renewals_granted" if granted else "renewals_short"] += 1
        if granted != shard.serving:
            log.log(logging.INFO if granted else logging.WARNING,
                    "csl shard %s %s (%d peers drained, %d entries invalidated)", shard.target,
                    "renewed: serving" if granted else "not renewed: too few peers reached",
                    renewal.drained, renewal.invalidated, extra={"shard": shard.target})
        shard.serving = granted

    async def close(self) -> None:
        """Stop renewing and settling writes, then every shard's feed and channel."""
        for settlement in list(self._settling):
            settlement.cancel()
        await asyncio.gather(*self._settling, return_exceptions=True)
        if self._renew_task is not None:
            self._renew_task.cancel()
            await asyncio.gather(self._renew_task, return_exceptions=True)
            self._renew_task = None
        await asyncio.gather(*(s.remote.close() for s in self.shards))


__all__ = ["SHARD_COUNTERS", "WRITE_ATTEMPTS", "Shard", "ShardedLibrary"]
