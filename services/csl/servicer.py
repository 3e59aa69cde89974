"""SubgraphLibrary gRPC servicer: protos ↔ library values only (STYLE.md §2).

Record headers on Put, PutShadow and WriteRecords are accepted for logs and audits but do not
gate anything: the library's guard is the version table, which is exact, not the clock. A
write is always applied, even a duplicate or an out-of-order one: skipping it could leave a stale
reader in place, while applying it twice only invalidates again (the safe direction).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
from opentelemetry.trace import Tracer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common.convert import require
from services.common.errors import DynbranchError, ResourceExhausted
from services.common.pb import common_pb2, csl_pb2, csl_pb2_grpc
from services.common.reads import check_cost
from services.common.records import make_header
from services.common.tracing import incoming_context, maybe_span
from services.csl.async_library import AsyncSubgraphLibrary
from services.csl.convert import (
    MAX_ID_CHARS,
    floors_from_proto,
    name_from_proto,
    read_set_from_proto,
    record_ids_from_proto,
    result_from_proto,
    shadow_from_proto,
)
from services.csl.library import SubgraphLibrary
from services.csl.name_feed import FeedOverflow, NameBatch, name_feed

log = logging.getLogger(__name__)
_MISS = csl_pb2.LookupResponse(hit=False)

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


class LibraryCollector(Collector):
    """Exports the library's own counters at scrape time, so the hit path pays nothing."""

    def __init__(self, library: SubgraphLibrary) -> None:
        self.library = library

    def collect(self):  # type: ignore[no-untyped-def]
        stats = self.library.stats()
        for key, doc in _COUNTERS.items():
            yield CounterMetricFamily(f"dynbranch_csl_{key}", doc, value=getattr(stats, key))
        for key, doc in _GAUGES.items():
            yield GaugeMetricFamily(f"dynbranch_csl_{key}", doc, value=getattr(stats, key))


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

    async def Put(self, request: csl_pb2.PutRequest,
                  context: grpc.aio.ServicerContext) -> csl_pb2.PutResponse:
        name = name_from_proto(request.name)
        result = result_from_proto(request.result, "result", self.max_result_bytes)
        check_cost(request.cost_s, "cost_s")
        read_set = read_set_from_proto(request.read_set)
        stored = await self.library.put(name, result, read_set, request.cost_s)
        return csl_pb2.PutResponse(stored=stored)

    async def PutStream(self, request_iterator: AsyncIterator[csl_pb2.PutRequest],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[csl_pb2.PutAck]:
        async for request in request_iterator:
            try:
                stored, error = (await self.Put(request, context)).stored, ""
            except DynbranchError as exc:  # one bad store must not end the stream
                stored, error = False, exc.client_message()
            yield csl_pb2.PutAck(sequence=request.header.sequence, stored=stored, error=error)

    async def PutShadow(self, request: csl_pb2.PutShadowRequest,
                        context: grpc.aio.ServicerContext) -> csl_pb2.PutShadowResponse:
        shadow = shadow_from_proto(request.shadow, self.max_result_bytes)
        check_cost(request.ttl_s, "ttl_s")
        stored = await self.library.put_shadow(shadow, request.ttl_s)
        return csl_pb2.PutShadowResponse(stored=stored)

    async def Promote(self, request: csl_pb2.PromoteRequest,
                      context: grpc.aio.ServicerContext) -> csl_pb2.PromoteResponse:
        name = name_from_proto(request.name)
        branch_id = require(request.branch_id, "branch_id", MAX_ID_CHARS)
        with maybe_span(self.tracer,
                "csl.promote", context=incoming_context(context.invocation_metadata()),
                attributes={"dynbranch.branch_id": branch_id}) as span:
            served = await self.library.promote(name, branch_id)
            span.set_attribute("dynbranch.promoted", served is not None)
        if served is None:
            return csl_pb2.PromoteResponse(promoted=False)
        return csl_pb2.PromoteResponse(promoted=True, result=served.result, cost_s=served.cost_s)

    async def Discard(self, request: csl_pb2.DiscardRequest,
                      context: grpc.aio.ServicerContext) -> csl_pb2.DiscardResponse:
        branch_id = require(request.branch_id, "branch_id", MAX_ID_CHARS)
        dropped = await self.library.discard(branch_id, request.keep_candidate)
        return csl_pb2.DiscardResponse(discarded=dropped)

    async def WriteRecords(self, request: csl_pb2.WriteRecordsRequest,
                           context: grpc.aio.ServicerContext) -> csl_pb2.WriteRecordsResponse:
        record_ids = record_ids_from_proto(request)
        with maybe_span(self.tracer,
                "csl.write_records", context=incoming_context(context.invocation_metadata()),
                attributes={"dynbranch.writes": len(record_ids)}) as span:
            outcome = await self.library.write_records(request.tenant, record_ids,
                                                       floors_from_proto(request))
            span.set_attribute("dynbranch.invalidated", outcome.invalidated)
        log.info("records written", extra={"writer": request.header.producer or request.header.id,
                                           "sequence": request.header.sequence,
                                           "writes": len(record_ids),
                                           "invalidated": outcome.invalidated})
        return csl_pb2.WriteRecordsResponse(
            versions=[common_pb2.RecordVersion(record_id=v.record_id, version=v.version)
                      for v in outcome.versions],
            invalidated=outcome.invalidated)

    async def Stats(self, request: csl_pb2.StatsRequest,
                    context: grpc.aio.ServicerContext) -> csl_pb2.StatsResponse:
        s = self.library.stats()
        return csl_pb2.StatsResponse(
            entries=s.entries, shadows=s.shadows, bytes=s.bytes, budget_bytes=s.budget_bytes,
            hits=s.hits, misses=s.misses, promotions=s.promotions,
            invalidations=s.invalidations, evictions=s.evictions, write_seq=s.write_seq)

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


__all__ = ["LibraryCollector", "SubgraphLibraryServicer"]
