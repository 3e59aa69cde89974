"""Corpus gRPC servicer: protos ↔ corpus values only (STYLE.md §2).

Bad input is refused naming the field (INVALID_ARGUMENT, RESOURCE_EXHAUSTED for oversized
requests); a removal of an absent document is NOT_FOUND; versions that do not match a ticket's
plan, a ticket that holds no turn, or a version not above the current one are
FAILED_PRECONDITION; a writer that waited out its deadline for the write turn is
DEADLINE_EXCEEDED. The wait for the turn is the caller's remaining deadline, at most
``MAX_TURN_WAIT_S``.
"""

from __future__ import annotations

import logging

import grpc
from opentelemetry.trace import Tracer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common.pb import common_pb2, corpus_pb2, corpus_pb2_grpc
from services.common.runtime.clients import deadline
from services.common.runtime.convert import require
from services.common.values.errors import InvalidArgument
from services.common.values.tracing import incoming_context, maybe_span
from services.corpus.convert import (
    MAX_QUERY_CHARS,
    doc_id_from_proto,
    document_to_proto,
    hits_from_proto,
    record_ids_from_proto,
    record_versions_from_proto,
    search_to_proto,
    ticket_from_proto,
    versions_to_proto,
    write_from_proto,
)
from services.corpus.service import TURN_WAIT_S, CorpusService

log = logging.getLogger(__name__)
#: Longest a writer waits for the write turn, whatever its deadline.
MAX_TURN_WAIT_S = 60.0
#: Titles per page by default and at most.
TITLES_PAGE, MAX_TITLES_PAGE = 1024, 4096

_COUNTERS = {
    "searches": "Searches answered",
    "writes": "Writes committed",
    "reconciles": "Reconciles with a csl that lost writes committed",
    "aborts": "Write tickets given back without writing",
    "lapses": "Write tickets that lapsed without a commit or abort",
    "waits": "Writers that queued for the write turn",
    "turn_timeouts": "Writers whose deadline passed while queued for the write turn",
}


class CorpusCollector(Collector):
    """Exports the corpus's counters and size at scrape time."""

    def __init__(self, service: CorpusService) -> None:
        self.service = service

    def collect(self):  # type: ignore[no-untyped-def]
        counters = self.service.counters
        for key, doc in _COUNTERS.items():
            yield CounterMetricFamily(f"dynbranch_corpus_{key}", doc, value=counters[key])
        yield CounterMetricFamily("dynbranch_corpus_index_rebuilds",
                                  "Searches answered after rebuilding the index from the store",
                                  value=self.service.corpus.rebuilds)
        yield GaugeMetricFamily("dynbranch_corpus_documents", "Documents held",
                                value=len(self.service.corpus))
        yield GaugeMetricFamily("dynbranch_corpus_write_seq",
                                "Highest record version the corpus holds",
                                value=self.service.corpus.write_seq)


class CorpusServicer(corpus_pb2_grpc.CorpusServicer):
    """Maps the Corpus service onto a ``CorpusService``."""

    def __init__(self, service: CorpusService, tracer: Tracer, *, max_k: int) -> None:
        self.service = service
        self.tracer = tracer
        self.max_k = max_k

    @property
    def _prefix(self) -> str:
        return f"corpus/{self.service.name}/"

    @property
    def _incarnation(self) -> str:
        return self.service.identity.rsplit("@", 1)[-1]

    async def Info(self, request: corpus_pb2.CorpusInfoRequest,
                   context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusInfoResponse:
        info = await self.service.info()
        return corpus_pb2.CorpusInfoResponse(name=info.name, incarnation=self._incarnation,
                                             documents=info.documents,
                                             write_seq=info.write_seq)

    async def Search(self, request: corpus_pb2.CorpusSearchRequest,
                     context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusSearchResponse:
        query = require(request.query, "query", MAX_QUERY_CHARS)
        if not 1 <= request.k <= self.max_k:
            raise InvalidArgument("k", f"must be in [1, {self.max_k}], got {request.k}")
        result = await self.service.search(query, request.k)
        return search_to_proto(result, self._incarnation)

    async def Confirm(self, request: corpus_pb2.CorpusConfirmRequest,
                      context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusConfirmResponse:
        hits = hits_from_proto(request.hits, self.max_k)
        current = await self.service.confirm(hits)
        return corpus_pb2.CorpusConfirmResponse(current=current, incarnation=self._incarnation)

    async def Get(self, request: corpus_pb2.CorpusGetRequest,
                  context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusGetResponse:
        found = await self.service.get(doc_id_from_proto(request.doc_id, "doc_id"))
        if found is None:
            return corpus_pb2.CorpusGetResponse(found=False)
        doc, version = found
        return corpus_pb2.CorpusGetResponse(found=True, document=document_to_proto(doc),
                                            version=version)

    async def VersionsOf(self, request: corpus_pb2.CorpusVersionsRequest,
                         context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusVersionsResponse:
        ids = record_ids_from_proto(request.record_ids, self._prefix)
        versions = await self.service.versions_of(ids)
        return corpus_pb2.CorpusVersionsResponse(versions=versions,
                                                 incarnation=self._incarnation)

    async def Titles(self, request: corpus_pb2.CorpusTitlesRequest,
                     context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusTitlesResponse:
        if request.limit > MAX_TITLES_PAGE:
            raise InvalidArgument("limit", f"at most {MAX_TITLES_PAGE}, got {request.limit}")
        page = await self.service.titles(request.after, request.limit or TITLES_PAGE)
        return corpus_pb2.CorpusTitlesResponse(
            titles=[corpus_pb2.CorpusTitle(doc_id=d, version=v, title=t)
                    for d, v, t in page.titles], more=page.more)

    async def BeginWrite(self, request: corpus_pb2.CorpusBeginWriteRequest,
                         context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusWriteTicket:
        upserts, removals = write_from_proto(request)
        with maybe_span(self.tracer, "corpus.begin_write",
                        context=incoming_context(context.invocation_metadata()),
                        attributes={"dynbranch.writes": len(upserts) + len(removals)}):
            plan = await self.service.begin_write(upserts, removals, self._wait(context))
        log.info("corpus write planned", extra={"writer": request.header.producer,
                                                "ticket": plan.ticket,
                                                "records": len(plan.record_ids)})
        return self._ticket(plan.ticket, plan.record_ids, plan.floors)

    async def BeginReconcile(self, request: corpus_pb2.CorpusBeginReconcileRequest,
                             context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusWriteTicket:
        plan = await self.service.begin_reconcile(request.write_seq, self._wait(context))
        if plan.record_ids:
            log.warning("csl write sequence %d is behind the corpus: %d records to move",
                        request.write_seq, len(plan.record_ids),
                        extra={"writer": request.header.producer, "ticket": plan.ticket})
        return self._ticket(plan.ticket, plan.record_ids, plan.floors)

    async def Commit(self, request: corpus_pb2.CorpusCommitRequest,
                     context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusCommitResponse:
        ticket = ticket_from_proto(request.ticket)
        versions = record_versions_from_proto(request.versions, self._prefix)
        with maybe_span(self.tracer, "corpus.commit",
                        context=incoming_context(context.invocation_metadata()),
                        attributes={"dynbranch.writes": len(versions)}):
            written = await self.service.commit(ticket, versions)
        return corpus_pb2.CorpusCommitResponse(written=versions_to_proto(written))

    async def Abort(self, request: corpus_pb2.CorpusAbortRequest,
                    context: grpc.aio.ServicerContext) -> corpus_pb2.CorpusAbortResponse:
        released = await self.service.abort(ticket_from_proto(request.ticket))
        return corpus_pb2.CorpusAbortResponse(released=released)

    def _ticket(self, ticket: str, record_ids: tuple[str, ...], floors: tuple[int, ...]
                ) -> corpus_pb2.CorpusWriteTicket:
        return corpus_pb2.CorpusWriteTicket(
            ticket=ticket, lease_s=self.service.lease_s if ticket else 0.0,
            floors=[common_pb2.RecordVersion(record_id=r, version=v)
                    for r, v in zip(record_ids, floors, strict=True)])

    @staticmethod
    def _wait(context: grpc.aio.ServicerContext) -> float:
        """How long a writer may wait for the turn: most of its remaining deadline (what is
        left plans the write and carries the ticket back: a ticket the writer never receives
        holds the turn until it lapses), capped."""
        remaining = deadline(context, TURN_WAIT_S, MAX_TURN_WAIT_S)
        return max(min(remaining * 0.8, remaining - 0.1), 0.0)


__all__ = ["CorpusCollector", "CorpusServicer"]
