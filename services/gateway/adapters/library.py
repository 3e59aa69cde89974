"""The gateway's library port over the csl service: failures degrade to a miss or a refusal.

Correctness never depends on the library being reachable (DESIGN.md §5.6): a lookup that fails
or times out is a miss, a store that fails is dropped, a promotion that fails lets the demand run
normally.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Sequence

import grpc

from services.common.pb import csl_pb2
from services.common.runtime.grpc_errors import error_from_rpc
from services.common.values import clock
from services.common.values.errors import Unavailable
from services.common.values.reads import Claimed, HoldEvent, HoldNotice, ReadSet, Served, Shadow
from services.common.values.reuse_name import ReuseName
from services.common.values.throttled_log import ThrottledLog
from services.csl.client import CslClient, LookupPipe, PutPipe
from services.gateway.adapters.name_mirror import NameMirror
from services.gateway.ports import AppliedWrite

log = logging.getLogger(__name__)
#: The per-call degradation warning, once per 10 s per operation and status.
_throttled = ThrottledLog(log)
#: After a transport failure the library counts as down this long: calls skip it (a miss, a
#: dropped store, no fills) instead of each waiting out its own deadline; then one probes it.
DOWN_BACKOFF_S = 2.0
#: Consecutive deadline failures that count as down (a black-holed library answers nothing;
#: one slow answer from a busy library does not).
DOWN_AFTER_TIMEOUTS = 3
_HOLD_EVENTS = {csl_pb2.HOLD_EVENT_KIND_HELD: HoldEvent.HELD,
                csl_pb2.HOLD_EVENT_KIND_PROMOTED: HoldEvent.PROMOTED,
                csl_pb2.HOLD_EVENT_KIND_SETTLED: HoldEvent.SETTLED}
#: Statuses of a write the csl refused for what it is (a bad field, an oversize write) or
#: could not hold (a full store): mapped as the csl meant them, not as a csl that is down.
_REFUSED = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED})


class RemoteLibrary:
    """``LibraryPort`` over one csl service."""

    def __init__(self, target: str, lookup_deadline_s: float = 0.25,
                 deadline_s: float = 2.0) -> None:
        self.client = CslClient(target, producer="gateway")
        self.pipe = PutPipe(self.client)
        #: Lookups ride one long-lived stream: a message each way per probe, not a call.
        self.lookups = LookupPipe(self.client)
        self.lookup_deadline_s = lookup_deadline_s
        self.deadline_s = deadline_s
        self.errors = 0
        self._down_until = 0.0
        self._timeouts = 0
        self.mirror = NameMirror()
        self._watch: asyncio.Task[None] | None = None
        #: Times the name feed was lost and resubscribed (what a csl restart looks like): the
        #: core then checks that the library still knows the corpus's versions
        #: (``LibraryPort.resyncs``).
        self.resyncs = 0
        #: Called at each such resubscription (the sharded library counts them).
        self.on_resync: Callable[[], None] | None = None

    def start(self) -> None:
        """Start following the library's confirmed names (the mirror that saves miss hops)."""
        if self._watch is None:
            self._watch = asyncio.create_task(self._follow(), name="csl-watch-names")

    async def _follow(self) -> None:
        while True:
            try:
                async for batch in self.client.stub.WatchNames(csl_pb2.WatchNamesRequest(),
                                                               timeout=3600):
                    self.answered()  # back without waiting out the back-off
                    if not self.mirror.apply(batch.header.sequence, batch.added, batch.removed,
                                             batch.synced):
                        break  # a gap: resubscribe for a fresh snapshot
            except grpc.aio.AioRpcError as err:
                self._transport_failed(err.code())
                if self.mirror.synced:
                    log.warning("csl name feed lost (%s): probing every name until it is back",
                                err.code().name)
            self.mirror.reset()
            self.resyncs += 1
            if self.on_resync is not None:
                self.on_resync()
            await asyncio.sleep(0.5)

    def available(self) -> bool:
        """See ``LibraryPort.available``."""
        return clock.now() >= self._down_until

    def answered(self) -> None:
        """The library just answered its name feed, or an audit made around this port: it is
        up."""
        self._down_until = 0.0
        self._timeouts = 0

    def _transport_failed(self, code: grpc.StatusCode) -> None:
        """Count a failed call toward ``available``: down at once when unreachable, after
        ``DOWN_AFTER_TIMEOUTS`` deadlines in a row when it answers nothing."""
        self._timeouts = self._timeouts + 1 if code is grpc.StatusCode.DEADLINE_EXCEEDED else 0
        if code is grpc.StatusCode.UNAVAILABLE or self._timeouts >= DOWN_AFTER_TIMEOUTS:
            self._down_until = clock.now() + DOWN_BACKOFF_S

    def _failed(self, op: str, err: grpc.aio.AioRpcError) -> None:
        self.errors += 1
        self._transport_failed(err.code())
        _throttled.warning(f"{op}:{err.code().name}", "csl %s failed (%s): degrading", op,
                           err.code().name, extra={"op": op, "code": err.code().name})

    async def lookup(self, name: ReuseName) -> Served | None:
        """A fresh confirmed entry, or None (also on any failure)."""
        if not self.mirror.may_hold(name) or not self.available():
            return None
        try:
            served = await self.lookups.lookup(name, self.lookup_deadline_s)
        except grpc.aio.AioRpcError as err:
            self._failed("lookup", err)
            return None
        self._timeouts = 0
        return served

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float) -> bool:
        """Store a canonical result; False when refused or unreachable."""
        if not self.available():
            return False
        try:
            request = self.client.put_request(name, result, read_set, cost_s)
            stored = await self.pipe.put(request, self.deadline_s)
        except grpc.aio.AioRpcError as err:
            self._failed("put", err)
            return False
        if stored:
            self.mirror.add(name)
        return stored

    async def put_shadow(self, shadow: Shadow, ttl_s: float) -> bool:
        """Store a shadow; False when refused or unreachable."""
        try:
            stored = await self.client.put_shadow(shadow, ttl_s, self.deadline_s)
        except grpc.aio.AioRpcError as err:
            self._failed("put_shadow", err)
            return False
        self._timeouts = 0
        return stored

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        """Promote a shadow; None when it cannot (or the library is unreachable)."""
        try:
            served = await self.client.promote(name, branch_id, self.deadline_s)
        except grpc.aio.AioRpcError as err:
            self._failed("promote", err)
            return None
        self._timeouts = 0
        if served is not None:
            self.mirror.add(name)
        return served

    async def claim(self, name: ReuseName, scope: str, wait_s: float) -> Claimed | None:
        """Promote the one shadow under ``name`` held in ``scope`` whatever its branch (another
        replica's fill), waiting up to ``wait_s`` for a running one; None on a miss or any
        failure."""
        try:
            return await self.client.claim(name, scope, wait_s, wait_s + self.lookup_deadline_s)
        except grpc.aio.AioRpcError as err:
            self._failed("claim", err)
            return None

    async def hold(self, name: ReuseName, branch_id: str, candidate: str, scope: str,
                   timeout_s: float) -> AsyncGenerator[HoldNotice, None]:
        """Hold a running fill step's placeholder until the stream ends or the caller stops
        iterating (or is cancelled): yields what happens to the step. A lost library ends the
        stream early (the placeholder is gone: other replicas then simply miss)."""
        call = self.client.hold_fill(name, branch_id, candidate, scope, timeout_s)
        try:
            async for event in call:
                kind = _HOLD_EVENTS.get(event.kind)
                if kind is not None:
                    yield HoldNotice(kind, event.template_id, event.stage_id, event.keep_branch,
                                     event.keep_candidate)
        except grpc.aio.AioRpcError as err:
            if err.code() not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
                self._failed("hold", err)
        finally:
            call.cancel()

    async def settle_scope(self, scope: str, template_id: str, stage_id: str,
                           keep_branch: str = "", keep_candidate: str = "") -> int:
        """Tell the fills held in a workflow that a first stage was demanded here; the
        holders told (0 on failure: their branches then retire at their TTL)."""
        try:
            return await self.client.settle_scope(scope, template_id, stage_id, keep_branch,
                                                  keep_candidate, self.deadline_s)
        except grpc.aio.AioRpcError as err:
            self._failed("settle_scope", err)
            return 0

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        """Drop a branch's shadows; 0 on failure (their TTL removes them)."""
        try:
            return await self.client.discard(branch_id, keep_candidate, self.deadline_s)
        except grpc.aio.AioRpcError as err:
            self._failed("discard", err)
            return 0

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> tuple[int, ...]:
        """Bump versions (each above its floor); failures propagate (a write must not be
        silently lost)."""
        try:
            outcome = await self.client.write_records(tenant, record_ids, self.deadline_s,
                                                      floors)
        except grpc.aio.AioRpcError as err:
            self._failed("write_records", err)
            if err.code() in _REFUSED:  # the write itself is at fault: a retry meets the same
                raise error_from_rpc(err, "csl", "WriteRecords") from None
            raise Unavailable(f"csl write failed ({err.code().name}); nothing was written, "
                              "retry") from None
        if [v.record_id for v in outcome.versions] != list(record_ids):
            raise Unavailable("csl answered a write with versions of other records")
        return tuple(v.version for v in outcome.versions)

    async def apply_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> AppliedWrite:
        """``write_records``: one library acknowledges a write as it applies it."""
        return AppliedWrite(await self.write_records(tenant, record_ids, floors))

    async def write_seq(self) -> int:
        """The library's write sequence (the last version it handed out); failures propagate."""
        try:
            return (await self.client.stats(self.deadline_s)).write_seq
        except grpc.aio.AioRpcError as err:
            self._failed("stats", err)
            raise Unavailable(f"csl unreachable ({err.code().name}); retry") from None

    async def close(self) -> None:
        """Stop following names and close the channel."""
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
            self._watch = None
        await self.pipe.close()
        await self.lookups.close()
        await self.client.close()


__all__ = ["RemoteLibrary"]
