"""SubgraphLibrary gRPC servicer: protos ↔ library values only (STYLE.md §2).

Record headers on Put, PutShadow and WriteRecords are accepted for logs and audits but do not
gate anything: the library's guard is the version table, which is exact, not the clock. A
write is always applied, even a duplicate or an out-of-order one: skipping it could leave a stale
reader in place, while applying it twice only invalidates again (the safe direction).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator

import grpc
from opentelemetry.trace import Tracer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common.pb import common_pb2, csl_pb2, csl_pb2_grpc
from services.common.runtime.convert import require
from services.common.runtime.records import make_header
from services.common.runtime.streams import byte_batches
from services.common.values.errors import (
    DynbranchError,
    InvalidArgument,
    PayloadTooLarge,
    ResourceExhausted,
)
from services.common.values.reads import HoldEvent, ReadSet, check_cost
from services.common.values.reuse_name import ReuseName, name_key
from services.common.values.tracing import call_span
from services.csl.async_library import AsyncSubgraphLibrary
from services.csl.convert import (
    MAX_ID_CHARS,
    PUT_BATCH_MAX,
    floors_from_proto,
    name_from_proto,
    read_set_from_proto,
    record_ids_from_proto,
    result_from_proto,
    shadow_from_proto,
    versions_from_proto,
    versions_to_proto,
)
from services.csl.core import SubgraphLibrary
from services.csl.name_feed import FeedOverflow, NameBatch, name_feed
from services.csl.serving import ServingLease

log = logging.getLogger(__name__)
_MISS = csl_pb2.LookupResponse(hit=False)
#: Longest a Claim waits for a running fill's shadow.
MAX_CLAIM_WAIT_S = 60.0
#: Records per Versions page at most.
MAX_VERSIONS_PAGE = 4096
_HOLD_KINDS = {HoldEvent.PROMOTED: csl_pb2.HOLD_EVENT_KIND_PROMOTED,
               HoldEvent.SETTLED: csl_pb2.HOLD_EVENT_KIND_SETTLED}

_COUNTERS = {
    "hits": "Lookups served from a fresh confirmed entry",
    "misses": "Lookups that found no fresh confirmed entry",
    "promotions": "Shadows promoted to confirmed entries",
    "invalidations": "Entries removed by record writes (direct readers and lost producers)",
    "evictions": "Entries removed to stay within the byte budget",
    "shadows_discarded": "Shadows discarded when their branch settled",
    "shadows_expired": "Shadows dropped unclaimed after their TTL",
}
_GAUGES = {
    "entries": "Confirmed entries held",
    "shadows": "Shadows held",
    "bytes": "Bytes of confirmed entries",
    "budget_bytes": "Byte budget of confirmed entries",
    "shadow_bytes": "Bytes of shadows held in memory",
}


_LEASE_COUNTERS = {
    "begun": "Serving-lease renewals a gateway began on this shard (the lease counts from "
             "there)",
    "granted": "Serving-lease renewals that extended this shard's lease, after the gateway "
               "copied its peers' writes in",
    "refused": "Serving-lease grants refused (another incarnation, unknown token, too late)",
    "lapses": "Times the serving lease ran out before a renewal was granted",
    "unserved": "Lookups, promotions and claims answered as misses while not serving",
}


class LibraryCollector(Collector):
    """Exports the library's own counters at scrape time, so the hit path pays nothing."""

    def __init__(self, library: SubgraphLibrary, lease: ServingLease | None = None) -> None:
        self.library = library
        self.lease = lease or ServingLease(0.0)

    def collect(self):  # type: ignore[no-untyped-def]
        stats = self.library.stats()
        for key, doc in _COUNTERS.items():
            yield CounterMetricFamily(f"dynbranch_csl_{key}", doc, value=getattr(stats, key))
        for key, doc in _GAUGES.items():
            yield GaugeMetricFamily(f"dynbranch_csl_{key}", doc, value=getattr(stats, key))
        for key, doc in _LEASE_COUNTERS.items():
            yield CounterMetricFamily(f"dynbranch_csl_lease_{key}", doc,
                                      value=getattr(self.lease.counters, key))
        yield GaugeMetricFamily("dynbranch_csl_serving_left_seconds",
                                "Seconds of serving lease left (0: not serving; -1: not leased)",
                                value=self.lease.left_s())


class SubgraphLibraryServicer(csl_pb2_grpc.SubgraphLibraryServicer):
    """Maps the SubgraphLibrary service onto an ``AsyncSubgraphLibrary``."""

    def __init__(self, library: AsyncSubgraphLibrary, tracer: Tracer, *,
                 max_result_bytes: int) -> None:
        self.library = library
        self.tracer = tracer
        self.max_result_bytes = max_result_bytes

    async def Lookup(self, request: csl_pb2.LookupRequest,
                     context: grpc.aio.ServicerContext) -> csl_pb2.LookupResponse:
        served = self.library.lookup(name_from_proto(request.name))
        if served is None:
            return _MISS
        return csl_pb2.LookupResponse(hit=True, result=served.result, cost_s=served.cost_s)

    async def LookupStream(self, request_iterator: AsyncIterator[csl_pb2.LookupBatch],
                           context: grpc.aio.ServicerContext
                           ) -> AsyncIterator[csl_pb2.LookupResults]:
        # Lookups run inline (no thread hop), so each batch is answered as it arrives (in more
        # than one message when its hits' results together are large).
        async for batch in request_iterator:
            for part in byte_batches([self._probe(p) for p in batch.lookups]):
                yield csl_pb2.LookupResults(results=part)

    def _probe(self, probe: csl_pb2.StreamLookup) -> csl_pb2.StreamLookupResult:
        """One streamed lookup; a malformed name is refused alone (the stream goes on)."""
        try:
            served = self.library.lookup(name_from_proto(probe.name))
        except DynbranchError as exc:
            return csl_pb2.StreamLookupResult(sequence=probe.sequence,
                                              error=exc.client_message())
        if served is None:
            return csl_pb2.StreamLookupResult(sequence=probe.sequence)
        return csl_pb2.StreamLookupResult(sequence=probe.sequence, hit=True,
                                          result=served.result, cost_s=served.cost_s)

    def _put_item(self, request: csl_pb2.PutRequest
                  ) -> tuple[ReuseName, bytes, ReadSet, float]:
        """A store request, validated: name, result, read-set and cost."""
        name = name_from_proto(request.name)
        result = result_from_proto(request.result, "result", self.max_result_bytes)
        check_cost(request.cost_s, "cost_s")
        return name, result, read_set_from_proto(request.read_set), request.cost_s

    async def Put(self, request: csl_pb2.PutRequest,
                  context: grpc.aio.ServicerContext) -> csl_pb2.PutResponse:
        stored = await self.library.put(*self._put_item(request))
        return csl_pb2.PutResponse(stored=stored)

    async def PutStream(self, request_iterator: AsyncIterator[csl_pb2.PutRequest],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[csl_pb2.PutAck]:
        # Stores that arrive while a batch is being committed wait and go together in the next
        # one: one transaction (one fsync) per batch, not per store. Acks keep arrival order.
        pending: asyncio.Queue[csl_pb2.PutRequest | BaseException | None] = asyncio.Queue(
            maxsize=PUT_BATCH_MAX)
        reader = asyncio.create_task(_read_into(request_iterator, pending), name="csl-put-read")
        try:
            while (first := await pending.get()) is not None:
                batch: list[csl_pb2.PutRequest | BaseException | None] = [first]
                while len(batch) < PUT_BATCH_MAX and not pending.empty():
                    batch.append(pending.get_nowait())
                ends = next((i for i, r in enumerate(batch) if not isinstance(
                    r, csl_pb2.PutRequest)), None)
                requests = batch if ends is None else batch[:ends]
                for ack in await self._put_batch(requests):  # type: ignore[arg-type]
                    yield ack
                if ends is not None:
                    if isinstance(batch[ends], BaseException):
                        raise batch[ends]  # type: ignore[misc]
                    return
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def PutBatches(self, request_iterator: AsyncIterator[csl_pb2.PutBatch],
                         context: grpc.aio.ServicerContext) -> AsyncIterator[csl_pb2.PutAcks]:
        # The caller batches: what queued while its last batch was written goes as one message,
        # stored in one transaction (one fsync) and answered by one message.
        async for batch in request_iterator:
            if len(batch.puts) > PUT_BATCH_MAX:
                raise PayloadTooLarge("puts", f"at most {PUT_BATCH_MAX} stores per batch, got "
                                      f"{len(batch.puts)}")
            yield csl_pb2.PutAcks(acks=await self._put_batch(list(batch.puts)))

    async def _put_batch(self, requests: list[csl_pb2.PutRequest]) -> list[csl_pb2.PutAck]:
        """Validate each store (a bad one is refused alone), then store the rest together."""
        errors: dict[int, str] = {}
        items = []
        for i, request in enumerate(requests):
            try:
                items.append(self._put_item(request))
            except DynbranchError as exc:  # one bad store must not end the stream
                errors[i] = exc.client_message()
        outcomes = iter(await self.library.put_many(items) if items else [])
        acks = []
        for i, request in enumerate(requests):
            outcome = errors[i] if i in errors else next(outcomes)
            if isinstance(outcome, DynbranchError):
                outcome = outcome.client_message()
            acks.append(csl_pb2.PutAck(sequence=request.header.sequence, stored=outcome is True,
                                       error=outcome if isinstance(outcome, str) else ""))
        return acks

    async def PutShadow(self, request: csl_pb2.PutShadowRequest,
                        context: grpc.aio.ServicerContext) -> csl_pb2.PutShadowResponse:
        shadow = shadow_from_proto(request.shadow, self.max_result_bytes)
        check_cost(request.ttl_s, "ttl_s")
        with call_span(self.tracer, "csl.put_shadow",
                       attributes={"dynbranch.branch_id": shadow.branch_id}) as span:
            stored = await self.library.put_shadow(shadow, request.ttl_s)
            span.set_attribute("dynbranch.stored", stored)
        return csl_pb2.PutShadowResponse(stored=stored)

    async def Promote(self, request: csl_pb2.PromoteRequest,
                      context: grpc.aio.ServicerContext) -> csl_pb2.PromoteResponse:
        name = name_from_proto(request.name)
        branch_id = require(request.branch_id, "branch_id", MAX_ID_CHARS)
        with call_span(self.tracer, "csl.promote",
                       attributes={"dynbranch.branch_id": branch_id}) as span:
            served = await self.library.promote(name, branch_id)
            span.set_attribute("dynbranch.promoted", served is not None)
        if served is None:
            return csl_pb2.PromoteResponse(promoted=False)
        return csl_pb2.PromoteResponse(promoted=True, result=served.result, cost_s=served.cost_s)

    async def Discard(self, request: csl_pb2.DiscardRequest,
                      context: grpc.aio.ServicerContext) -> csl_pb2.DiscardResponse:
        branch_id = require(request.branch_id, "branch_id", MAX_ID_CHARS)
        with call_span(self.tracer, "csl.discard",
                       attributes={"dynbranch.branch_id": branch_id}) as span:
            dropped = await self.library.discard(branch_id, request.keep_candidate)
            span.set_attribute("dynbranch.discarded", dropped)
        return csl_pb2.DiscardResponse(discarded=dropped)

    async def WriteRecords(self, request: csl_pb2.WriteRecordsRequest,
                           context: grpc.aio.ServicerContext) -> csl_pb2.WriteRecordsResponse:
        record_ids = record_ids_from_proto(request)
        with call_span(self.tracer, "csl.write_records",
                       attributes={"dynbranch.writes": len(record_ids)}) as span:
            outcome = await self.library.write_records(request.tenant, record_ids,
                                                       floors_from_proto(request),
                                                       request.version)
            span.set_attribute("dynbranch.invalidated", outcome.invalidated)
        log.info("records written", extra={"writer": request.header.producer or request.header.id,
                                           "sequence": request.header.sequence,
                                           "writes": len(record_ids),
                                           "invalidated": outcome.invalidated})
        return csl_pb2.WriteRecordsResponse(
            versions=[common_pb2.RecordVersion(record_id=v.record_id, version=v.version)
                      for v in outcome.versions],
            invalidated=outcome.invalidated, prior_write_seq=outcome.prior_seq,
            refused=outcome.refused)

    async def Claim(self, request: csl_pb2.ClaimRequest,
                    context: grpc.aio.ServicerContext) -> csl_pb2.ClaimResponse:
        name = name_from_proto(request.name)
        scope = require(request.scope, "scope", MAX_ID_CHARS)
        if not 0 <= request.wait_s <= MAX_CLAIM_WAIT_S:
            raise InvalidArgument("wait_s", f"must be in [0, {MAX_CLAIM_WAIT_S}]")
        remaining = context.time_remaining()
        wait_s = request.wait_s if remaining is None else min(request.wait_s, remaining)
        with call_span(self.tracer, "csl.claim", attributes={"dynbranch.scope": scope}) as span:
            claimed = await self.library.claim(name, scope, max(wait_s, 0.0))
            span.set_attribute("dynbranch.promoted", claimed is not None)
        if claimed is None:
            return csl_pb2.ClaimResponse(promoted=False)
        return csl_pb2.ClaimResponse(promoted=True, result=claimed.result, cost_s=claimed.cost_s,
                                     branch_id=claimed.branch_id, candidate=claimed.candidate)

    async def HoldFill(self, request: csl_pb2.HoldFillRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[csl_pb2.HoldFillEvent]:
        key = name_key(name_from_proto(request.name))
        branch_id = require(request.branch_id, "branch_id", MAX_ID_CHARS)
        scope = require(request.scope, "scope", MAX_ID_CHARS)
        hold = self.library.holds.open(key, branch_id, request.candidate, scope)
        try:
            yield csl_pb2.HoldFillEvent(header=make_header(branch_id, 0, "csl"),
                                        kind=csl_pb2.HOLD_EVENT_KIND_HELD)
            for seq in itertools.count(1):  # until the holder closes the stream
                n = await hold.events.get()
                yield csl_pb2.HoldFillEvent(
                    header=make_header(branch_id, seq, "csl"), kind=_HOLD_KINDS[n.kind],
                    template_id=n.template_id, stage_id=n.stage_id, keep_branch=n.keep_branch,
                    keep_candidate=n.keep_candidate)
        finally:
            self.library.holds.close(hold)

    async def SettleScope(self, request: csl_pb2.SettleScopeRequest,
                          context: grpc.aio.ServicerContext) -> csl_pb2.SettleScopeResponse:
        scope = require(request.scope, "scope", MAX_ID_CHARS)
        template_id = require(request.template_id, "template_id", MAX_ID_CHARS)
        stage_id = require(request.stage_id, "stage_id", MAX_ID_CHARS)
        with call_span(self.tracer, "csl.settle_scope",
                       attributes={"dynbranch.scope": scope}) as span:
            told = self.library.holds.settle_scope(scope, template_id, stage_id,
                                                   request.keep_branch, request.keep_candidate)
            span.set_attribute("dynbranch.told", told)
        return csl_pb2.SettleScopeResponse(told=told)

    async def Versions(self, request: csl_pb2.VersionsRequest,
                       context: grpc.aio.ServicerContext) -> csl_pb2.VersionsResponse:
        limit = min(request.limit or MAX_VERSIONS_PAGE, MAX_VERSIONS_PAGE)
        seq = self.library.stats().write_seq
        page = await self.library.versions_since(request.since_seq, limit)
        return csl_pb2.VersionsResponse(write_seq=seq, versions=versions_to_proto(page),
                                        more=len(page) >= limit)

    async def AdoptVersions(self, request: csl_pb2.AdoptVersionsRequest,
                            context: grpc.aio.ServicerContext
                            ) -> csl_pb2.AdoptVersionsResponse:
        versions = versions_from_proto(request.versions)
        invalidated = await self.library.adopt_versions(versions)
        if invalidated:
            log.info("versions adopted", extra={"adopter": request.header.producer,
                                                "records": len(versions),
                                                "invalidated": invalidated})
        return csl_pb2.AdoptVersionsResponse(invalidated=invalidated,
                                             write_seq=self.library.stats().write_seq)

    async def Changes(self, request: csl_pb2.ChangesRequest,
                      context: grpc.aio.ServicerContext) -> csl_pb2.ChangesResponse:
        limit = min(request.limit or MAX_VERSIONS_PAGE, MAX_VERSIONS_PAGE)
        page, cursor, more = await self.library.changed_since(request.after, limit)
        lease = self.library.lease
        return csl_pb2.ChangesResponse(incarnation=lease.incarnation,
                                       versions=versions_to_proto(page), next=cursor, more=more,
                                       established=lease.established)

    async def BeginRenewal(self, request: csl_pb2.BeginRenewalRequest,
                           context: grpc.aio.ServicerContext) -> csl_pb2.BeginRenewalResponse:
        lease = self.library.lease
        token = lease.begin()
        return csl_pb2.BeginRenewalResponse(incarnation=lease.incarnation, token=token,
                                            serving_lease_s=lease.lease_s,
                                            established=lease.established)

    async def GrantServing(self, request: csl_pb2.GrantServingRequest,
                           context: grpc.aio.ServicerContext) -> csl_pb2.GrantServingResponse:
        incarnation = require(request.incarnation, "incarnation", MAX_ID_CHARS)
        if request.token == 0:
            raise InvalidArgument("token", "required")
        lease = self.library.lease
        was_serving = lease.left_s() > 0
        left = lease.grant(incarnation, request.token)
        if not was_serving:
            log.info("serving lease granted: serving again", extra={
                "peers": request.peers, "serving_left_s": round(left, 3)})
        return csl_pb2.GrantServingResponse(serving_left_s=left)

    async def Stats(self, request: csl_pb2.StatsRequest,
                    context: grpc.aio.ServicerContext) -> csl_pb2.StatsResponse:
        s = self.library.stats()
        lease = self.library.lease
        return csl_pb2.StatsResponse(
            entries=s.entries, shadows=s.shadows, bytes=s.bytes, budget_bytes=s.budget_bytes,
            hits=s.hits, misses=s.misses, promotions=s.promotions,
            invalidations=s.invalidations, evictions=s.evictions, write_seq=s.write_seq,
            incarnation=lease.incarnation, serving_lease_s=lease.lease_s,
            serving_left_s=lease.left_s())

    async def WatchNames(self, request: csl_pb2.WatchNamesRequest,
                         context: grpc.aio.ServicerContext) -> AsyncIterator[csl_pb2.NameEvents]:
        store = str(self.library.library.path)
        try:
            async for seq, batch in _enumerate(name_feed(self.library.library)):
                yield csl_pb2.NameEvents(header=make_header(store, seq, "csl"),
                                         added=batch.added, removed=batch.removed,
                                         synced=batch.synced)
        except FeedOverflow as exc:
            raise ResourceExhausted(f"name feed: {exc}; resubscribe") from None


async def _enumerate(items: AsyncIterator[NameBatch]) -> AsyncIterator[tuple[int, NameBatch]]:
    seq = 0
    async for item in items:
        yield seq, item
        seq += 1


async def _read_into(requests: AsyncIterator[csl_pb2.PutRequest],
                     queue: asyncio.Queue[csl_pb2.PutRequest | BaseException | None]) -> None:
    """Read a request stream into ``queue``: None at its end, the exception if reading fails."""
    try:
        async for request in requests:
            await queue.put(request)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the handler is done with this stream
        await queue.put(exc)  # gRPC ended the call under the read: the handler must end too
        return
    except BaseException as exc:  # noqa: BLE001 - handed to the stream's handler to raise
        await queue.put(exc)
        return
    await queue.put(None)


__all__ = ["LibraryCollector", "SubgraphLibraryServicer"]
