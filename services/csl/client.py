"""Typed async client of the csl service, with a deadline on every call.

Lookup, Put, PutShadow, Discard, Stats, Versions, AdoptVersions, Changes and BeginRenewal are
retried on UNAVAILABLE by the channel's declared policy
(``services.common.runtime.clients.IDEMPOTENT``); Promote, Claim, WriteRecords and GrantServing
are not. On the gateway's hot path stores and lookups ride long-lived streams instead
(``PutPipe``, ``LookupPipe``): a message each way, not a call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Self

import grpc

from services.common.pb import common_pb2, csl_pb2, csl_pb2_grpc
from services.common.runtime.clients import StreamCall, open_channel
from services.common.runtime.deadlines import Deadlines
from services.common.runtime.records import stamp
from services.common.runtime.streams import (
    MAX_EXCHANGE_BYTES,
    MAX_MESSAGE_BYTES,
    MuxStream,
    StreamRenewal,
    rpc_error,
    sized_batches,
)
from services.common.values.reads import (
    Claimed,
    ReadSet,
    RecordKey,
    RecordRead,
    Served,
    Shadow,
    WriteOutcome,
)
from services.common.values.reuse_name import ReuseName
from services.csl.convert import (
    PUT_BATCH_MAX,
    name_to_proto,
    read_set_into,
    shadow_to_proto,
    versions_to_proto,
)

log = logging.getLogger(__name__)

#: The hot path: a lookup that takes longer than this is better treated as a miss.
LOOKUP_DEADLINE_S = 0.5
DEADLINE_S = 5.0


class CslClient:
    """Calls one csl service; owns its channel (``close`` it)."""

    def __init__(self, target: str, channel: grpc.aio.Channel | None = None,
                 producer: str = "client") -> None:
        self.target = target
        self.producer = producer
        self.channel = channel or open_channel(target)
        self.stub = csl_pb2_grpc.SubgraphLibraryStub(self.channel)
        self._sequence = 0

    async def lookup(self, name: ReuseName, timeout_s: float = LOOKUP_DEADLINE_S
                     ) -> Served | None:
        """A fresh confirmed entry's result, or None."""
        reply: csl_pb2.LookupResponse = await self.stub.Lookup(
            csl_pb2.LookupRequest(name=name_to_proto(name)), timeout=timeout_s)
        return Served(reply.result, reply.cost_s) if reply.hit else None

    def put_request(self, name: ReuseName, result: bytes, read_set: ReadSet,
                    cost_s: float = 0.0) -> csl_pb2.PutRequest:
        """The wire form of a store (its header carries a fresh sequence number); built in
        place, as a gateway miss's store does not pay for sub-messages copied in."""
        request = csl_pb2.PutRequest(result=result, cost_s=cost_s)
        self._stamp(request.header, name.digest)
        request.name.tenant, request.name.digest = name.tenant, name.digest
        read_set_into(request.read_set, read_set)
        return request

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float = 0.0,
                  timeout_s: float = DEADLINE_S) -> bool:
        """Store a canonical result; False when the library refused it."""
        request = self.put_request(name, result, read_set, cost_s)
        reply: csl_pb2.PutResponse = await self.stub.Put(request, timeout=timeout_s)
        return reply.stored

    async def put_shadow(self, shadow: Shadow, ttl_s: float = 0.0,
                         timeout_s: float = DEADLINE_S) -> bool:
        """Store a fill's result as a shadow; False when refused."""
        record = shadow_to_proto(shadow)
        self._stamp(record.header, shadow.name.digest)
        request = csl_pb2.PutShadowRequest(shadow=record, ttl_s=ttl_s)
        reply: csl_pb2.PutShadowResponse = await self.stub.PutShadow(request, timeout=timeout_s)
        return reply.stored

    async def promote(self, name: ReuseName, branch_id: str, timeout_s: float = DEADLINE_S
                      ) -> Served | None:
        """Promote the branch's shadow under ``name``; its result, once, or None."""
        reply: csl_pb2.PromoteResponse = await self.stub.Promote(
            csl_pb2.PromoteRequest(name=name_to_proto(name), branch_id=branch_id),
            timeout=timeout_s)
        return Served(reply.result, reply.cost_s) if reply.promoted else None

    async def discard(self, branch_id: str, keep_candidate: str = "",
                      timeout_s: float = DEADLINE_S) -> int:
        """Settle a branch; the number of shadows dropped."""
        reply: csl_pb2.DiscardResponse = await self.stub.Discard(
            csl_pb2.DiscardRequest(branch_id=branch_id, keep_candidate=keep_candidate),
            timeout=timeout_s)
        return reply.discarded

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            timeout_s: float = DEADLINE_S, floors: Sequence[int] = (),
                            version: int = 0) -> WriteOutcome:
        """Bump record versions and invalidate their dependents; each new version is above the
        record's entry in ``floors`` (the writer's own current version; missing ones 0).
        ``version`` > 0: exactly that version for every record, or ``refused`` when it is not
        above the library's write sequence."""
        padded = list(floors) + [0] * (len(record_ids) - len(floors))
        request = csl_pb2.WriteRecordsRequest(
            header=self._header(self.producer), tenant=tenant, version=version,
            writes=[csl_pb2.RecordWrite(record_id=r, floor=f)
                    for r, f in zip(record_ids, padded, strict=True)])
        reply: csl_pb2.WriteRecordsResponse = await self.stub.WriteRecords(
            request, timeout=timeout_s)
        return WriteOutcome(tuple(RecordRead(v.record_id, v.version) for v in reply.versions),
                            reply.invalidated, reply.prior_write_seq, reply.refused)

    async def claim(self, name: ReuseName, scope: str, wait_s: float,
                    timeout_s: float) -> Claimed | None:
        """Promote the one shadow under ``name`` whose fill is held in ``scope``, whatever its
        branch, waiting up to ``wait_s`` for a running fill's shadow; None on a miss."""
        reply: csl_pb2.ClaimResponse = await self.stub.Claim(
            csl_pb2.ClaimRequest(name=name_to_proto(name), wait_s=wait_s, scope=scope),
            timeout=timeout_s)
        if not reply.promoted:
            return None
        return Claimed(reply.result, reply.cost_s, reply.branch_id, reply.candidate)

    def hold_fill(self, name: ReuseName, branch_id: str, candidate: str, scope: str,
                  timeout_s: float) -> StreamCall[csl_pb2.HoldFillEvent]:
        """Open the placeholder stream of a running fill step (iterate it for its events;
        cancel it to drop the placeholder)."""
        call: StreamCall[csl_pb2.HoldFillEvent] = self.stub.HoldFill(
            csl_pb2.HoldFillRequest(name=name_to_proto(name), branch_id=branch_id,
                                    candidate=candidate, scope=scope),
            timeout=timeout_s)
        return call

    async def settle_scope(self, scope: str, template_id: str, stage_id: str,
                           keep_branch: str, keep_candidate: str,
                           timeout_s: float = DEADLINE_S) -> int:
        """Tell every fill held in ``scope`` that the stage was demanded; holders told."""
        reply: csl_pb2.SettleScopeResponse = await self.stub.SettleScope(
            csl_pb2.SettleScopeRequest(scope=scope, template_id=template_id, stage_id=stage_id,
                                       keep_branch=keep_branch, keep_candidate=keep_candidate),
            timeout=timeout_s)
        return reply.told

    async def versions_since(self, since_seq: int, timeout_s: float = DEADLINE_S,
                             limit: int = 0) -> tuple[list[tuple[RecordKey, int]], bool, int]:
        """One page of records above ``since_seq``: ``(versions, more, write_seq)``."""
        reply: csl_pb2.VersionsResponse = await self.stub.Versions(
            csl_pb2.VersionsRequest(since_seq=since_seq, limit=limit), timeout=timeout_s)
        return ([((v.tenant, v.record_id), v.version) for v in reply.versions], reply.more,
                reply.write_seq)

    async def adopt_versions(self, versions: Sequence[tuple[RecordKey, int]],
                             timeout_s: float = DEADLINE_S) -> int:
        """Raise records to other shards' versions; entries invalidated."""
        request = csl_pb2.AdoptVersionsRequest(header=self._header(self.producer),
                                               versions=versions_to_proto(versions))
        reply: csl_pb2.AdoptVersionsResponse = await self.stub.AdoptVersions(
            request, timeout=timeout_s)
        return reply.invalidated

    async def changes(self, after: int, timeout_s: float = DEADLINE_S, limit: int = 0
                      ) -> csl_pb2.ChangesResponse:
        """One page of records changed after stamp ``after`` (versions, next stamp, more,
        incarnation, established)."""
        reply: csl_pb2.ChangesResponse = await self.stub.Changes(
            csl_pb2.ChangesRequest(after=after, limit=limit), timeout=timeout_s)
        return reply

    async def begin_renewal(self, timeout_s: float = DEADLINE_S
                            ) -> csl_pb2.BeginRenewalResponse:
        """Begin a serving-lease renewal (incarnation, token, serving_lease_s, established)."""
        reply: csl_pb2.BeginRenewalResponse = await self.stub.BeginRenewal(
            csl_pb2.BeginRenewalRequest(renewer=self.producer), timeout=timeout_s)
        return reply

    async def grant_serving(self, incarnation: str, token: int, peers: int,
                            timeout_s: float = DEADLINE_S) -> float:
        """Grant a renewal begun with ``begin_renewal``; seconds of serving left."""
        reply: csl_pb2.GrantServingResponse = await self.stub.GrantServing(
            csl_pb2.GrantServingRequest(incarnation=incarnation, token=token, peers=peers),
            timeout=timeout_s)
        return reply.serving_left_s

    async def stats(self, timeout_s: float = DEADLINE_S) -> csl_pb2.StatsResponse:
        """Counters and sizes."""
        reply: csl_pb2.StatsResponse = await self.stub.Stats(
            csl_pb2.StatsRequest(), timeout=timeout_s)
        return reply

    async def close(self) -> None:
        """Close the channel; idempotent."""
        await self.channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _header(self, record_id: str) -> common_pb2.RecordHeader:
        header = common_pb2.RecordHeader()
        self._stamp(header, record_id)
        return header

    def _stamp(self, header: common_pb2.RecordHeader, record_id: str) -> None:
        """Fill ``header`` in place with the next sequence number."""
        self._sequence += 1
        stamp(header, record_id, self._sequence, self.producer)


class PutPipe:
    """Stores over one long-lived ``PutBatches`` stream: the stores that queued while the last
    batch was written go as one message (one transaction on the csl, one message of acks back)
    instead of a call each, which is what keeps a miss's background store cheap for the gateway
    (DESIGN.md §6). A csl without PutBatches gets a ``PutStream``, a message per store.

    Acks resolve their stores by sequence number. A broken stream fails every store in flight
    (a lost store is a missed reuse, never a wrong answer) and the next store opens a new one.
    """

    def __init__(self, client: CslClient, stream_timeout_s: float = 3600.0,
                 max_queued: int = 4096) -> None:
        self.client = client
        self.stream_timeout_s = stream_timeout_s
        #: Stores waiting for the stream at most; past it a store is refused at once (False:
        #: a missed reuse), so a stalled stream cannot grow the queue without bound.
        self.max_queued = max_queued
        #: ``(store, serialized bytes)`` waiting for the stream.
        self._queue: asyncio.Queue[tuple[csl_pb2.PutRequest, int]] = asyncio.Queue(
            maxsize=max_queued)
        self._waiting: dict[int, asyncio.Future[bool]] = {}
        #: The deadlines of the stores waiting for their acks (one timer for all).
        self._deadlines = Deadlines()
        self._task: asyncio.Task[None] | None = None
        #: False once the csl answered UNIMPLEMENTED to PutBatches: a store per message.
        self.batched = True
        self._retiring: set[asyncio.Task[None]] = set()

    async def put(self, request: csl_pb2.PutRequest, timeout_s: float = DEADLINE_S) -> bool:
        """Send one store and wait for its ack; False when refused, lost or late."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="csl-put-stream")
        if self._queue.full():
            log.info("csl put refused: %d stores queued (max_queued)", self.max_queued)
            return False
        size = request.ByteSize()
        if size > MAX_EXCHANGE_BYTES:  # as one message it would fail the stream's other stores
            log.info("csl put refused: larger than a message may be (%d bytes)",
                     MAX_MESSAGE_BYTES)
            return False
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[request.header.sequence] = future
        self._queue.put_nowait((request, size))
        # The future is this store's alone: its deadline fails it (no shield, no task cancel).
        deadline = self._deadlines.expire_future(future, timeout_s)
        try:
            return await future
        except TimeoutError:
            return False
        finally:
            self._deadlines.cancel(deadline)
            self._waiting.pop(request.header.sequence, None)

    async def _run(self) -> None:
        batched = self.batched
        stub = self.client.stub
        call = (stub.PutBatches if batched else stub.PutStream)(timeout=self.stream_timeout_s)
        reader = asyncio.create_task(self._read(call, batched))
        try:
            while True:
                first = await self._queue.get()
                if not batched:
                    await call.write(first[0])
                    continue
                puts = [first]  # and whatever queued while the last batch was written
                while len(puts) < PUT_BATCH_MAX and not self._queue.empty():
                    puts.append(self._queue.get_nowait())
                for part in sized_batches(puts):
                    await call.write(csl_pb2.PutBatch(puts=part))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as err:
            log.info("csl put stream ended: %s", err)
        finally:
            reader.cancel()
            call.cancel()
            if self._task is asyncio.current_task():  # not already replaced by a new stream
                self._task = None
                self._fail_all()

    async def _read(self, call: Any, batched: bool) -> None:
        try:
            async for message in call:
                for ack in message.acks if batched else (message,):
                    future = self._waiting.get(ack.sequence)
                    if future is not None and not future.done():
                        future.set_result(ack.stored)
        except grpc.aio.AioRpcError as err:
            if batched and err.code() == grpc.StatusCode.UNIMPLEMENTED:
                # A csl from before PutBatches: the stores in flight are missed reuses, and the
                # next stream is a PutStream.
                self.batched = False
            log.info("csl put stream lost: %s", err.code().name)
        # The stream is over: its stores fail now, and the next store opens a new stream at
        # once (this one's writer is still being cancelled).
        self._fail_all()
        if self._task is not None:
            self._task.cancel()
            self._retiring.add(self._task)  # owned until it ends (``close`` awaits it)
            self._task.add_done_callback(self._retiring.discard)
            self._task = None

    def _fail_all(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
        for future in self._waiting.values():
            if not future.done():
                future.set_result(False)

    async def close(self) -> None:
        """Stop the stream; stores in flight resolve False."""
        tasks = [*self._retiring, *([self._task] if self._task is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._fail_all()


class _LookupStream(MuxStream[int, csl_pb2.StreamLookupResult]):
    """One open LookupStream call: probes keyed by their sequence number, sent in batches."""

    ended_details = "the library ended the stream"
    closed_details = "the library client was closed"

    def __init__(self, client: CslClient, timeout_s: float) -> None:
        super().__init__(client.stub.LookupStream(timeout=timeout_s), "csl-lookup")
        self._sequence = 0

    def message(self, queued: list[Any]) -> csl_pb2.LookupBatch:
        return csl_pb2.LookupBatch(lookups=queued)

    def results(self, response: csl_pb2.LookupResults
                ) -> Iterable[tuple[int, csl_pb2.StreamLookupResult]]:
        return ((result.sequence, result) for result in response.results)

    async def lookup(self, name: ReuseName, timeout_s: float) -> Served | None:
        """One probe on this stream: the entry, None on a miss; raises the stream's error."""
        self._sequence += 1
        sequence = self._sequence
        future = self.submit(sequence, csl_pb2.StreamLookup(sequence=sequence,
                                                             name=name_to_proto(name)))
        deadline = self._deadlines.expire_future(future, timeout_s)
        try:
            result = await future
        except TimeoutError:  # its deadline (the stream fails a future with gRPC's errors)
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        finally:
            self._deadlines.cancel(deadline)
            self.settle(sequence)
        if result.error:
            raise rpc_error(grpc.StatusCode.INVALID_ARGUMENT, result.error)
        return Served(result.result, result.cost_s) if result.hit else None


class LookupPipe:
    """Lookups over renewed ``LookupStream`` streams: a message each way per probe instead of a
    call, which is what keeps a library hit cheap for the gateway (the unary ``Lookup`` costs
    the csl about twice a stream message's CPU, and the gateway about a third more, measured on
    loopback). ``close`` it.

    Each probe keeps its own deadline; what queued while a batch was being written goes out as
    the next batch. A stream that fails fails only the probes it carried, each with the stream's
    status, as their own ``Lookup`` calls would have failed (a failed lookup is a miss to its
    caller), and the next probe opens a new stream. A stream older than ``max_age_s`` takes no
    new probes and half-closes once its last one is answered (renewed before its deadline). A
    csl without the stream (UNIMPLEMENTED) is asked with ``Lookup`` calls from then on; a probe
    whose write raced that refusal may fail CANCELLED first (a miss), and the next one asks.
    """

    def __init__(self, client: CslClient, *, max_age_s: float = 300.0,
                 stream_timeout_s: float = 3600.0) -> None:
        self.client = client
        self.stream_timeout_s = stream_timeout_s
        #: False once the csl answered UNIMPLEMENTED (an older csl): ``Lookup`` calls instead.
        self.supported = True
        self._streams = StreamRenewal(lambda: _LookupStream(client, self.stream_timeout_s),
                                      max_age_s)

    async def lookup(self, name: ReuseName, timeout_s: float = LOOKUP_DEADLINE_S
                     ) -> Served | None:
        """A fresh confirmed entry's result, or None; raises ``grpc.aio.AioRpcError`` with the
        status its own ``Lookup`` call would have ended with."""
        if not self.supported:
            return await self.client.lookup(name, timeout_s)
        stream = self._streams.stream()
        try:
            return await stream.lookup(name, timeout_s)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED or err is not stream.error:
                raise
            self.supported = False  # the csl never saw this probe: ask it the old way
        return await self.client.lookup(name, timeout_s)

    async def close(self) -> None:
        """Cancel every stream (their probes fail CANCELLED) and wait; idempotent."""
        await self._streams.close()


__all__ = ["DEADLINE_S", "LOOKUP_DEADLINE_S", "CslClient", "LookupPipe", "PutPipe"]
