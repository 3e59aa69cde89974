"""Typed async client of the corpus service: the gateway's ``CorpusPort`` over gRPC, with a
deadline on every call.

Info, Search, Confirm, Get, VersionsOf, Titles and Abort are retried on UNAVAILABLE by the
channel's declared policy (``services.common.runtime.clients.IDEMPOTENT``); BeginWrite,
BeginReconcile and Commit are not. A failed call raises the mesh's error for the status
(``error_from_rpc``): a corpus that is down or does not answer in time is ``Unavailable`` (the
retrieve stage fails, a served result whose reads cannot be checked is a miss), never an older
answer. Every answer carries the corpus's incarnation; a new one (the corpus was rebuilt under
this client) is adopted as the client's ``identity``, so the stages named after it fold in the
new corpus.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Self

import grpc

from services.common.pb import corpus_pb2, corpus_pb2_grpc
from services.common.runtime.clients import open_channel
from services.common.runtime.grpc_errors import error_from_rpc
from services.common.runtime.records import make_header
from services.common.values.errors import DynbranchError, Unavailable
from services.corpus.codec import (
    CorpusInfo,
    Document,
    Hit,
    RecordVersion,
    SearchResult,
    TitlePage,
    WritePlan,
)
from services.corpus.convert import (
    document_to_proto,
    hit_to_proto,
    search_from_proto,
    versions_from_proto,
    versions_to_proto,
)

log = logging.getLogger(__name__)
#: Deadline of a read (search, confirm, versions, titles) and of a write call (which may wait
#: for the corpus's write turn), in seconds.
READ_DEADLINE_S = 2.0
WRITE_DEADLINE_S = 10.0


class CorpusClient:
    """Calls one corpus service; owns its channel (``close`` it). ``connect`` first: it learns
    the corpus's name and identity."""

    def __init__(self, target: str, channel: grpc.aio.Channel | None = None, *,
                 producer: str = "gateway", read_deadline_s: float = READ_DEADLINE_S,
                 write_deadline_s: float = WRITE_DEADLINE_S) -> None:
        self.target = target
        self.producer = producer
        self.read_deadline_s = read_deadline_s
        self.write_deadline_s = write_deadline_s
        self.channel = channel or open_channel(target)
        self.stub = corpus_pb2_grpc.CorpusStub(self.channel)
        self._name = ""
        self._incarnation = ""
        self._sequence = 0

    # -- identity -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The corpus name (after ``connect``)."""
        return self._name

    @property
    def identity(self) -> str:
        """``name@incarnation`` of the corpus last heard from (after ``connect``)."""
        return f"{self._name}@{self._incarnation}"

    async def connect(self, timeout_s: float = 30.0) -> CorpusInfo:
        """Ask for the corpus's identity until it answers or ``timeout_s`` passes (a corpus
        service still starting); ``Unavailable`` naming the target then."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                return await self.info()
            except Unavailable:
                if time.monotonic() > end:
                    raise Unavailable(f"corpus service {self.target} did not answer within "
                                      f"{timeout_s:.0f} s") from None
                await asyncio.sleep(0.1)

    def _seen(self, incarnation: str) -> None:
        if incarnation and incarnation != self._incarnation:
            if self._incarnation:
                log.warning("corpus %s was rebuilt under this gateway (incarnation %s -> %s): "
                            "stages are named after the new one", self._name,
                            self._incarnation, incarnation)
            self._incarnation = incarnation

    # -- reads ----------------------------------------------------------------------------------

    async def info(self) -> CorpusInfo:
        """Name, identity, size and write sequence."""
        reply = await self._call("Info", corpus_pb2.CorpusInfoRequest(), self.read_deadline_s)
        self._name = reply.name
        self._seen(reply.incarnation)
        return CorpusInfo(reply.name, self.identity, reply.documents, reply.write_seq)

    async def search(self, query: str, k: int) -> SearchResult:
        """The ``k`` best documents and the exact read-set."""
        reply = await self._call("Search", corpus_pb2.CorpusSearchRequest(query=query, k=k),
                                 self.read_deadline_s)
        self._seen(reply.incarnation)
        return search_from_proto(reply)

    async def confirm(self, hits: Sequence[Hit]) -> bool:
        """Every hit still stored at its version with exactly its text."""
        reply = await self._call("Confirm", corpus_pb2.CorpusConfirmRequest(
            hits=[hit_to_proto(h) for h in hits]), self.read_deadline_s)
        self._seen(reply.incarnation)
        return bool(reply.current)

    async def get(self, doc_id: str) -> tuple[Document, int] | None:
        """A stored document and its version, or None."""
        reply = await self._call("Get", corpus_pb2.CorpusGetRequest(doc_id=doc_id),
                                 self.read_deadline_s)
        if not reply.found:
            return None
        d = reply.document
        return Document(d.doc_id, d.title, d.text), reply.version

    async def versions_of(self, record_ids: Sequence[str]) -> list[int]:
        """The current versions of ``record_ids``, in order."""
        reply = await self._call("VersionsOf", corpus_pb2.CorpusVersionsRequest(
            record_ids=list(record_ids)), self.read_deadline_s)
        self._seen(reply.incarnation)
        return list(reply.versions)

    async def titles(self, after: str = "", limit: int = 1024) -> TitlePage:
        """One page of ``(doc id, version, title)`` after ``after``, in id order."""
        reply = await self._call("Titles", corpus_pb2.CorpusTitlesRequest(after=after,
                                                                          limit=limit),
                                 self.read_deadline_s)
        return TitlePage(tuple((t.doc_id, t.version, t.title) for t in reply.titles),
                         reply.more)

    # -- writes ---------------------------------------------------------------------------------

    async def begin_write(self, upserts: Sequence[Document] = (),
                          removals: Sequence[str] = ()) -> WritePlan:
        """Take the write turn and plan the write (waits for the turn within the deadline)."""
        reply = await self._call("BeginWrite", corpus_pb2.CorpusBeginWriteRequest(
            header=self._header(), upserts=[document_to_proto(d) for d in upserts],
            removals=list(removals)), self.write_deadline_s)
        return _plan(reply)

    async def begin_reconcile(self, write_seq: int) -> WritePlan:
        """Take the write turn for the records above a csl's ``write_seq``."""
        reply = await self._call("BeginReconcile", corpus_pb2.CorpusBeginReconcileRequest(
            header=self._header(), write_seq=write_seq), self.write_deadline_s)
        return _plan(reply)

    async def commit(self, ticket: str, versions: Mapping[str, int]
                     ) -> tuple[RecordVersion, ...]:
        """Apply the ticket's write at the csl's versions; every bumped record."""
        reply = await self._call("Commit", corpus_pb2.CorpusCommitRequest(
            header=self._header(), ticket=ticket,
            versions=versions_to_proto(RecordVersion(r, v) for r, v in versions.items())),
            self.write_deadline_s)
        return versions_from_proto(reply.written)

    async def abort(self, ticket: str) -> bool:
        """Give the write turn back without writing."""
        reply = await self._call("Abort", corpus_pb2.CorpusAbortRequest(ticket=ticket),
                                 self.read_deadline_s)
        return bool(reply.released)

    # -- plumbing -------------------------------------------------------------------------------

    async def _call(self, method: str, request: Any, timeout_s: float) -> Any:
        try:
            return await getattr(self.stub, method)(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as err:
            error: DynbranchError = error_from_rpc(err, f"corpus {self.target}", method,
                                                   callers_deadline=False)
            raise error from None

    def _header(self) -> Any:
        self._sequence += 1
        return make_header(self.producer, self._sequence, self.producer)

    async def close(self) -> None:
        """Close the channel; idempotent."""
        await self.channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _plan(reply: corpus_pb2.CorpusWriteTicket) -> WritePlan:
    return WritePlan(reply.ticket, tuple(f.record_id for f in reply.floors),
                     tuple(f.version for f in reply.floors))


__all__ = ["READ_DEADLINE_S", "WRITE_DEADLINE_S", "CorpusClient"]
