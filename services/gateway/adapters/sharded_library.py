"""The gateway's library port over N csl shards.

Each shard is a whole csl service with its own LMDB environment. A reuse name lives on the shard
rendezvous hashing picks (``rendezvous.py``), so lookups, stores, shadows, promotions, claims and
fill placeholders for a name all go to one shard, one hop, as with a single library. Record
writes go to every shard (each keeps the full version table and invalidates its own readers);
settlements go to every shard (a branch's shadows are spread over them).

Failure turns into misses, never errors or stale hits (DESIGN.md §5.3, §5.6):

* A shard that does not answer is a miss for its names (each call has a deadline).
* A write succeeds once a quorum (a majority) acknowledged it; it answers the highest version
  each record got. A shard that did not acknowledge, or answered a lower prior write sequence or
  lower versions than its peers (it missed writes), falls under suspicion, as does one whose
  name feed broke (a restart), that an audit cannot reach, or that the audit finds behind the
  others' write sequence. A suspect shard serves nothing and stores nothing until it has caught
  up from enough peers (``shard_repair.py``); then it is trusted again.
* A stage whose producer (a chained fill's previous step) lives on another shard is stored with
  that producer's read-set folded into its own, since a shard can only check producers it
  holds; a write to anything the chain read still invalidates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

import grpc

from services.common.values.errors import Unavailable
from services.common.values.reads import Claimed, HoldNotice, ReadSet, Served, Shadow, WriteOutcome
from services.common.values.reuse_name import ReuseName, name_key
from services.gateway.adapters.library import RemoteLibrary
from services.gateway.adapters.rendezvous import Rendezvous
from services.gateway.adapters.shard_repair import catch_up, quorum, vouchers

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Shard:
    """One csl shard as this gateway sees it."""

    index: int
    target: str
    remote: RemoteLibrary
    trusted: bool = True
    #: Bumped by every event that may have cost the shard a write: a repair that began before
    #: the latest one does not restore trust.
    suspicion: int = 0

    def suspect(self, why: str) -> None:
        """Stop serving from this shard until it has caught up."""
        if self.trusted:
            log.warning("csl shard %s under suspicion (%s): its names miss until it catches up",
                        self.target, why, extra={"shard": self.target, "why": why})
        self.trusted = False
        self.suspicion += 1


class ShardedLibrary:
    """``LibraryPort`` over several csl shards."""

    def __init__(self, targets: Sequence[str], lookup_deadline_s: float = 0.25,
                 deadline_s: float = 2.0, audit_interval_s: float = 1.0,
                 provenance_names: int = 65_536) -> None:
        self.ring = Rendezvous(targets)
        self.shards = [Shard(i, t, RemoteLibrary(t, lookup_deadline_s, deadline_s))
                       for i, t in enumerate(targets)]
        self.deadline_s = deadline_s
        self.audit_interval_s = audit_interval_s
        self.quorum = quorum(len(targets))
        self._provenance: OrderedDict[ReuseName, ReadSet] = OrderedDict()
        self._provenance_names = provenance_names
        self._last_top = 0
        self._wake = asyncio.Event()
        self._audit_task: asyncio.Task[None] | None = None
        #: Times a shard's name feed was lost and resubscribed (``LibraryPort.resyncs``).
        self.resyncs = 0
        self.counters = {"suspect_misses": 0, "repairs": 0, "repair_invalidated": 0,
                         "folded": 0, "write_quorum_failures": 0}

    def available(self) -> bool:
        """See ``LibraryPort.available``: every shard (a fill's steps may land on any)."""
        return all(shard.remote.available() for shard in self.shards)

    def owner(self, name: ReuseName) -> Shard:
        """The shard that holds ``name``."""
        return self.shards[self.ring.owner(name_key(name))]

    def start(self) -> None:
        """Follow every shard's names and start the audit loop."""
        for shard in self.shards:
            shard.remote.on_resync = self._resynced(shard)
            shard.remote.start()
        if self._audit_task is None:
            self._audit_task = asyncio.create_task(self._audit_loop(), name="csl-shard-audit")

    def _resynced(self, shard: Shard) -> Callable[[], None]:
        def resynced() -> None:
            shard.suspect("name feed lost")
            self._wake.set()
            self.resyncs += 1
        return resynced

    def _serving(self, name: ReuseName) -> Shard | None:
        shard = self.owner(name)
        if shard.trusted:
            return shard
        self.counters["suspect_misses"] += 1
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
        """Bump versions on every shard; the highest version each record got. Raises
        ``Unavailable`` when fewer than a quorum acknowledged (retry: a write only ever
        invalidates more)."""
        outcomes = await asyncio.gather(
            *(s.remote.client.write_records(tenant, record_ids, self.deadline_s, floors)
              for s in self.shards), return_exceptions=True)
        acked: list[tuple[Shard, WriteOutcome]] = []
        for shard, outcome in zip(self.shards, outcomes, strict=True):
            if isinstance(outcome, grpc.aio.AioRpcError):
                shard.suspect(f"write failed: {outcome.code().name}")
            elif isinstance(outcome, BaseException):
                raise outcome
            elif [v.record_id for v in outcome.versions] != list(record_ids):
                shard.suspect("answered a write with versions of other records")
            else:
                acked.append((shard, outcome))
        if len(acked) < self.quorum:
            self.counters["write_quorum_failures"] += 1
            self._wake.set()
            raise Unavailable(f"csl write reached {len(acked)} of {len(self.shards)} shards, "
                              f"{self.quorum} needed; retry")
        return self._agree(acked)

    def _agree(self, acked: list[tuple[Shard, WriteOutcome]]) -> tuple[int, ...]:
        """The highest version per record; a shard below its peers missed writes."""
        top = tuple(max(vs) for vs in zip(*([v.version for v in o.versions] for _, o in acked),
                                          strict=True))
        prior = max(o.prior_seq for _, o in acked)
        for shard, outcome in acked:
            if outcome.prior_seq < prior or any(
                    v.version < t for v, t in zip(outcome.versions, top, strict=True)):
                shard.suspect("behind its peers on a write")
                self._wake.set()
        return top

    async def write_seq(self) -> int:
        """The highest write sequence of the reachable shards (raises when none answers)."""
        seqs = [q for q in await self._seqs() if q is not None]
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

    # -- audit and repair ----------------------------------------------------------------------

    async def _audit_loop(self) -> None:
        while True:
            try:
                await self.audit()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad round
                log.exception("csl shard audit failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.audit_interval_s)
            except TimeoutError:
                pass
            self._wake.clear()

    async def audit(self) -> None:
        """Compare the shards' write sequences and repair every suspect shard that enough
        reachable peers can vouch for."""
        seqs = await self._seqs()
        reachable = [s for s, q in zip(self.shards, seqs, strict=True) if q is not None]
        for shard, seq in zip(self.shards, seqs, strict=True):
            if seq is None:
                shard.suspect("unreachable")
            elif seq < self._last_top:  # behind what its peers had a whole round ago
                shard.suspect(f"write sequence {seq} behind {self._last_top}")
        self._last_top = max([q for q in seqs if q is not None], default=self._last_top)
        for shard in reachable:
            if not shard.trusted:
                await self._repair(shard, [p for p in reachable if p is not shard])

    async def _repair(self, shard: Shard, peers: list[Shard]) -> None:
        if len(peers) < vouchers(len(self.shards)):
            return
        suspicion = shard.suspicion
        try:
            invalidated = await catch_up(shard.remote.client, [p.remote.client for p in peers],
                                         self.deadline_s)
        except grpc.aio.AioRpcError as err:
            log.warning("csl shard %s catch-up failed (%s); retrying", shard.target,
                        err.code().name)
            return
        self.counters["repairs"] += 1
        self.counters["repair_invalidated"] += invalidated
        shard.remote.answered()
        if shard.suspicion == suspicion:
            shard.trusted = True
            log.info("csl shard %s caught up from %d peers (%d entries invalidated): serving",
                     shard.target, len(peers), invalidated,
                     extra={"shard": shard.target, "invalidated": invalidated})

    async def _seqs(self) -> list[int | None]:
        async def one(shard: Shard) -> int | None:
            try:
                return (await shard.remote.client.stats(self.deadline_s)).write_seq
            except grpc.aio.AioRpcError:
                return None
        return list(await asyncio.gather(*(one(s) for s in self.shards)))

    async def close(self) -> None:
        """Stop the audit, then every shard's feed and channel."""
        if self._audit_task is not None:
            self._audit_task.cancel()
            await asyncio.gather(self._audit_task, return_exceptions=True)
            self._audit_task = None
        await asyncio.gather(*(s.remote.close() for s in self.shards))


__all__ = ["Shard", "ShardedLibrary"]
