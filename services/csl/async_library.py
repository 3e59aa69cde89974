"""asyncio facade over ``SubgraphLibrary`` for the service's event loop.

Lookups run inline on the loop: a dict probe and one short LMDB read transaction (microseconds,
no lock). Every mutation runs on one dedicated worker thread, so LMDB write transactions and
fsyncs (a 100,000-entry cascade included) never block the loop, and mutations reach the library
in arrival order. Atomicity does not depend on that ordering: the library serializes mutations
under its own lock, and a lookup that overlaps an invalidation observes the library's odd
``_epoch`` and reports a miss (see ``core.py``). Hence:

* promote vs write: both hold the lock, so a promotion either sees the bumped version (and
  refuses) or completes before the write starts (and the write's cascade then removes the new
  entry if it read the written record);
* lookup vs write: a lookup that starts before the write takes the lock linearizes before it; one
  that overlaps the cascade misses; one that starts after it sees the entry gone;
* lookup vs promote/put: the entry becomes visible only after its LMDB commit, and a lookup
  checks the stored incarnation id, so it sees the old state or the new one, never a mix.

A shard serves (lookups, promotions, claims) only while its serving lease holds
(``serving.py``), checked before each read; otherwise the call is a miss.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from services.common.values.errors import DynbranchError, FailedPrecondition, Unavailable
from services.common.values.reads import Claimed, ReadSet, RecordKey, Served, Shadow, WriteOutcome
from services.common.values.reuse_name import ReuseName, name_key
from services.csl.core import SubgraphLibrary
from services.csl.entries import LibraryStats
from services.csl.holds import HoldRegistry
from services.csl.serving import ServingLease

T = TypeVar("T")


class AsyncSubgraphLibrary:
    """The library for one event loop: inline lookups, mutations on one worker thread."""

    def __init__(self, library: SubgraphLibrary, holds: HoldRegistry | None = None,
                 executor: ThreadPoolExecutor | None = None,
                 lease: ServingLease | None = None) -> None:
        self.library = library
        #: Whether this library may serve now (a shard's lease; always, for a single library).
        self.lease = lease or ServingLease(0.0)
        #: Placeholders of running fills (they live on the loop, beside the streams holding them).
        self.holds = holds or HoldRegistry()
        #: Where mutations run: one writer thread (``executor`` replaces it, e.g. the inline
        #: executor of a virtual-clock replay, where no thread may run beside the loop).
        self._worker = executor or ThreadPoolExecutor(max_workers=1,
                                                      thread_name_prefix="csl-writer")
        self._closed = False

    def lookup(self, name: ReuseName) -> Served | None:
        """Serve a fresh confirmed entry or miss (inline: no thread hop on the hot path)."""
        if not self._serving():
            return None
        return self.library.lookup(name)

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet,
                  cost_s: float = 0.0) -> bool:
        """See ``SubgraphLibrary.put``."""
        return await self._run(self.library.put, name, result, read_set, cost_s)

    async def put_many(self, items: Sequence[tuple[ReuseName, bytes, ReadSet, float]]
                       ) -> list[bool | DynbranchError]:
        """See ``SubgraphLibrary.put_many`` (one thread hop, one transaction)."""
        return await self._run(self.library.put_many, list(items))

    async def put_shadow(self, shadow: Shadow, ttl_s: float = 0.0) -> bool:
        """See ``SubgraphLibrary.put_shadow``; a stored shadow wakes demands waiting on its
        placeholder."""
        stored = await self._run(self.library.put_shadow, shadow, ttl_s)
        if stored:
            self.holds.landed(name_key(shadow.name), shadow.branch_id)
        return stored

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        """See ``SubgraphLibrary.promote``; the step's holder is told."""
        if not self._serving():
            return None
        served = await self._run(self.library.promote, name, branch_id)
        if served is not None:
            self.holds.promoted(name_key(name), branch_id)
        return served

    async def claim(self, name: ReuseName, scope: str, wait_s: float = 0.0) -> Claimed | None:
        """Promote the one shadow under ``name`` whose fill is held in ``scope``, whatever its
        branch (``SubgraphLibrary.claim``), waiting up to ``wait_s`` while that fill still
        runs; None on a miss."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wait_s
        key = name_key(name)
        while True:
            branches = self.holds.branches(key, scope)
            if branches and not self._serving():
                return None
            claimed = await self._run(self.library.claim, name, branches) if branches else None
            if claimed is not None:
                self.holds.promoted(key, claimed.branch_id)
                return claimed
            hold = self.holds.running(key, scope)
            if hold is None or loop.time() >= until:
                return None
            try:  # the shadow lands, or the holder gives up: look again either way
                await asyncio.wait_for(hold.changed.wait(), until - loop.time())
            except TimeoutError:
                return None

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        """See ``SubgraphLibrary.discard``; holders of the losing candidates are told."""
        dropped = await self._run(self.library.discard, branch_id, keep_candidate)
        self.holds.settled(branch_id, keep_candidate)
        return dropped

    async def adopt_versions(self, versions: Sequence[tuple[RecordKey, int]]) -> int:
        """See ``SubgraphLibrary.adopt_versions``."""
        return await self._run(self.library.adopt_versions, list(versions))

    async def versions_since(self, seq: int, limit: int) -> list[tuple[RecordKey, int]]:
        """See ``SubgraphLibrary.versions_since`` (a scan of the table: off the loop)."""
        return await self._run(self.library.versions_since, seq, limit)

    async def changed_since(self, after: int, limit: int
                            ) -> tuple[list[tuple[RecordKey, int]], int, bool]:
        """See ``SubgraphLibrary.changed_since``."""
        return await self._run(self.library.changed_since, after, limit)

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = (), version: int = 0) -> WriteOutcome:
        """See ``SubgraphLibrary.write_records``. A shard takes a write numbered by its writer
        only once a renewal granted its lease in this incarnation: before that it may have
        restarted on an older copy and could accept a version it already gave another write."""
        if version and self.lease.leased and not self.lease.established:
            raise FailedPrecondition("this shard has not caught up since it started (no "
                                     "serving-lease renewal granted yet); write to its peers")
        return await self._run(self.library.write_records, tenant, list(record_ids),
                               list(floors), version)

    async def expire(self) -> int:
        """See ``SubgraphLibrary.expire``."""
        return await self._run(self.library.expire)

    def stats(self) -> LibraryStats:
        """See ``SubgraphLibrary.stats``."""
        return self.library.stats()

    async def close(self) -> None:
        """Finish queued mutations, then close the library. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._worker.shutdown, True)
        self.library.close()

    def _serving(self) -> bool:
        if self.lease.serving():
            return True
        self.lease.refuse()
        return False

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise Unavailable("csl library is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, functools.partial(fn, *args))


__all__ = ["AsyncSubgraphLibrary"]
