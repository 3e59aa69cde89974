"""Many small exchanges on one long-lived bidirectional gRPC stream instead of a call each: the
client side that the engine agent's GenerateMux (``services.engine_agent.mux_client``) and the
library's LookupStream (``services.csl.client.LookupPipe``) share.

A ``MuxStream`` is one open call with one writer task and one reader task. Callers ``submit`` an
exchange under a key and wait for its future; the writer sends what queued while a write was
under way as one message (``message``), and the reader resolves each result a response carries
by its key (``results``). A stream that fails fails only the exchanges it carried, each with the
stream's status, as their own calls would have failed. ``StreamRenewal`` keeps the stream that takes
new exchanges: a broken one, or one older than ``max_age_s``, takes no more, half-closes once its
last exchange is answered, and the next exchange opens a new stream (renewed before the call's
own deadline).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

import grpc

from services.common.runtime.deadlines import Deadlines
from services.common.values.errors import quoted

Key = TypeVar("Key")
Result = TypeVar("Result")
#: Tells a stream's writer to half-close.
HALF_CLOSE = None
#: Bytes of exchanges one batched message carries at most: well under the 4 MiB a message may
#: have (``channel_options``, ``ServiceSettings.max_message_bytes``), so that exchanges that each
#: fit a call of their own never fail together as one message too large. One larger exchange
#: goes alone.
BATCH_BYTES = 1 << 20
#: The largest message a channel of this mesh sends or takes by default (a call's limit).
MAX_MESSAGE_BYTES = 4 << 20
#: The most one exchange may weigh to go in a message (room for the message's own framing).
MAX_EXCHANGE_BYTES = MAX_MESSAGE_BYTES - 1024
#: What a key (a cancel) counts for in a message.
KEY_BYTES = 16
Item = TypeVar("Item")


def byte_size(item: Any) -> int:
    """Serialized bytes of a protobuf message (computing it costs a serialization: do it once
    per item); ``KEY_BYTES`` for a key (a cancel)."""
    return item.ByteSize() if hasattr(item, "ByteSize") else KEY_BYTES


def sized_batches(sized: Sequence[tuple[Item, int]], limit: int = BATCH_BYTES
                  ) -> Iterator[list[Item]]:
    """The items of ``(item, serialized bytes)`` pairs in order, in runs of at most ``limit``
    bytes (one larger item alone): each run goes as one message."""
    batch: list[Item] = []
    total = 0
    for item, size in sized:
        if batch and total + size > limit:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += size
    if batch:
        yield batch


def byte_batches(items: Sequence[Item], limit: int = BATCH_BYTES) -> Iterator[list[Item]]:
    """``sized_batches`` of items whose sizes are not known yet (one item: never measured)."""
    if len(items) <= 1:
        yield list(items)
        return
    yield from sized_batches([(item, byte_size(item)) for item in items], limit)


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """An error shaped like the one a failed call raises (callers map both the same way)."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


#: grpc.StatusCode by its numeric value (a MuxError's code).
_CODES = {code.value[0]: code for code in grpc.StatusCode}


def mux_outcome(result: Any, field: str) -> Any:
    """The ``field`` of a multiplexed exchange's result (its answer), or raise the error it
    carries instead (a ``MuxError``), shaped like the error the exchange's own call raises."""
    if result.HasField("error"):
        raise rpc_error(_CODES.get(result.error.code, grpc.StatusCode.UNKNOWN),
                        result.error.message)
    return getattr(result, field)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class MuxStream(Generic[Key, Result]):
    """One open stream call, its writer and reader tasks and the exchanges it carries.

    Subclasses say how the queued items go out as one message and which keyed results a
    response carries; ``ended_details`` and ``closed_details`` name the peer in the errors."""

    ended_details = "the peer ended the stream"
    closed_details = "the client was closed"

    def __init__(self, call: Any, name: str) -> None:
        self.opened = time.monotonic()
        self.call = call
        self.pending: dict[Key, asyncio.Future[Result]] = {}
        #: The deadlines of the exchanges waiting (one timer for all).
        self._deadlines = Deadlines()
        self.error: grpc.aio.AioRpcError | None = None
        self.retired = False
        #: ``(item, serialized bytes)`` to send, or ``(HALF_CLOSE, 0)``.
        self._outbox: asyncio.Queue[tuple[Any, int]] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(), name=f"{name}-write")
        self._reader = asyncio.create_task(self._read(), name=f"{name}-read")
        #: The loop the stream runs on (its exchanges' futures are of it).
        self._loop = self._reader.get_loop()

    def message(self, queued: list[Any]) -> Any | None:
        """The one message that sends ``queued`` (never HALF_CLOSE), or None: nothing to send."""
        raise NotImplementedError

    def results(self, response: Any) -> Iterable[tuple[Key, Result]]:
        """Each result ``response`` carries, with the key of the exchange it answers."""
        raise NotImplementedError

    @property
    def broken(self) -> bool:
        """The stream failed or ended: it takes no more exchanges."""
        return self.error is not None or self._reader.done()

    @property
    def ended(self) -> bool:
        """Both tasks are done: nothing of this stream is left running."""
        return self._reader.done() and self._writer.done()

    def submit(self, key: Key, item: Any, size: int | None = None) -> asyncio.Future[Result]:
        """Send ``item`` (``size``: its serialized bytes, if the caller measured them) and
        return the future its result resolves; the caller awaits it and then calls
        ``settle(key)``. Raises the stream's error once it failed, ALREADY_EXISTS for a key
        still pending."""
        if self.error is not None:
            raise self.error
        if key in self.pending:
            raise rpc_error(grpc.StatusCode.ALREADY_EXISTS,
                            f"request {quoted(key)} is already running")
        future: asyncio.Future[Result] = self._loop.create_future()
        self.pending[key] = future
        self._outbox.put_nowait((item, byte_size(item) if size is None else size))
        return future

    async def exchange(self, key: Key, item: Any, cancel: Any, timeout_s: float,
                       size: int | None = None) -> Result:
        """Send ``item`` (of ``size`` bytes, if measured) and wait up to ``timeout_s`` for its
        result. A caller that stops waiting (its deadline passed, or its task was cancelled)
        sends ``cancel``, so the peer stops the exchange; past the deadline this raises
        DEADLINE_EXCEEDED, as a call would."""
        future = self.submit(key, item, size)
        deadline = self._deadlines.expire_future(future, timeout_s)
        try:
            return await future
        except TimeoutError:  # its deadline (the stream fails a future with gRPC's errors)
            self.send(cancel)
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except asyncio.CancelledError:
            self.send(cancel)
            raise
        finally:
            self._deadlines.cancel(deadline)
            self.settle(key)

    def send(self, item: Any) -> None:
        """Send ``item`` with no answer awaited (e.g. a cancel), unless the stream failed."""
        if self.error is None:
            self._outbox.put_nowait((item, KEY_BYTES))

    def settle(self, key: Key) -> None:
        """The exchange under ``key`` is over; a retired stream half-closes after its last."""
        del self.pending[key]
        if self.retired and not self.pending:
            self._outbox.put_nowait((HALF_CLOSE, 0))

    def retire(self) -> None:
        """Take no new exchanges; half-close once the last one is answered."""
        self.retired = True
        if not self.pending:
            self._outbox.put_nowait((HALF_CLOSE, 0))

    async def _write(self) -> None:
        # The only writer: one write at a time, and a caller's cancellation never interrupts one.
        # What queued during a write goes out as the next message.
        try:
            while True:
                queued = [await self._outbox.get()]
                while not self._outbox.empty():
                    queued.append(self._outbox.get_nowait())
                items = [q for q in queued if q[0] is not HALF_CLOSE]
                for part in sized_batches(items):
                    message = self.message(part)
                    if message is not None:
                        await self.call.write(message)
                if len(items) < len(queued):
                    break
            await self.call.done_writing()
        except grpc.aio.AioRpcError as err:
            self._fail(err)
        except asyncio.InvalidStateError:
            pass  # the call already ended; the reader reports how
        except asyncio.CancelledError:
            if _cancelling():
                raise

    async def _read(self) -> None:
        try:
            async for response in self.call:
                for key, result in self.results(response):
                    future = self.pending.get(key)
                    if future is not None and not future.done():
                        future.set_result(result)
            self._fail(rpc_error(grpc.StatusCode.UNAVAILABLE, self.ended_details))
        except grpc.aio.AioRpcError as err:
            self._fail(err)
        except asyncio.CancelledError:
            # The call was cancelled (gRPC raises this for a locally cancelled call), or this task.
            self._fail(rpc_error(grpc.StatusCode.CANCELLED, "the stream was cancelled"))
            if _cancelling():
                raise

    def _fail(self, err: grpc.aio.AioRpcError) -> None:
        if self.error is None:
            self.error = err
        for future in self.pending.values():
            if not future.done():
                future.set_exception(self.error)
        if asyncio.current_task() is not self._writer:
            self._writer.cancel()  # nothing more can be written on a failed call

    async def close(self) -> None:
        """Cancel the call and its tasks and wait for them; exchanges still waiting fail
        CANCELLED. Idempotent."""
        self.call.cancel()
        self._fail(rpc_error(grpc.StatusCode.CANCELLED, self.closed_details))
        self._reader.cancel()
        await asyncio.gather(self._writer, self._reader, return_exceptions=True)


class _Renewable(Protocol):
    opened: float

    @property
    def broken(self) -> bool: ...

    @property
    def ended(self) -> bool: ...

    def retire(self) -> None: ...

    async def close(self) -> None: ...


S = TypeVar("S", bound=_Renewable)


class StreamRenewal(Generic[S]):
    """The stream that takes new exchanges (opened by ``open`` when there is none, or when the
    current one is broken or older than ``max_age_s``) and the retired ones still draining."""

    def __init__(self, open_stream: Callable[[], S], max_age_s: float) -> None:
        self._open = open_stream
        self.max_age_s = max_age_s
        #: The stream taking new exchanges, if one was opened.
        self.current: S | None = None
        self._draining: list[S] = []

    def stream(self) -> S:
        """The stream to put the next exchange on."""
        stream = self.current
        if stream is not None and (stream.broken or
                                   time.monotonic() - stream.opened > self.max_age_s):
            stream.retire()
            self._draining.append(stream)
            stream = None
        self._draining = [s for s in self._draining if not s.ended]
        if stream is None:
            stream = self.current = self._open()
        return stream

    async def close(self) -> None:
        """Cancel every stream (their exchanges fail CANCELLED) and wait; idempotent."""
        streams = [*self._draining, *([self.current] if self.current else [])]
        self.current, self._draining = None, []
        await asyncio.gather(*(s.close() for s in streams))


class Multiplexed(Generic[Key, Result]):
    """A client's exchanges with one peer on renewed ``MuxStream``s, where a stream can take
    them: the caller makes a call of its own for the rest (``takes`` is False, or ``exchange``
    answered None because the peer has no such stream). ``close`` it."""

    def __init__(self, open_stream: Callable[[], MuxStream[Key, Result]], *,
                 max_age_s: float, stream_timeout_s: float) -> None:
        self.stream_timeout_s = stream_timeout_s
        #: False once the peer answered UNIMPLEMENTED (an older one): callers make calls.
        self.supported = True
        self._streams = StreamRenewal(open_stream, max_age_s)

    def takes(self, timeout_s: float, size: int = 0) -> bool:
        """Whether an exchange of ``size`` bytes waiting up to ``timeout_s`` can ride a stream:
        a stream lives ``stream_timeout_s`` and takes new exchanges for ``max_age_s`` of it, and
        an exchange too large for a message would fail the stream's others (as a call of its own
        it fails alone)."""
        return (self.supported and size <= MAX_EXCHANGE_BYTES
                and 0 < timeout_s <= self.stream_timeout_s - self._streams.max_age_s)

    async def exchange(self, key: Key, item: Any, cancel: Any, timeout_s: float,
                       size: int) -> Result | None:
        """``MuxStream.exchange`` on the current stream; None when the peer has no such
        stream (it never saw the exchange: the caller makes its call)."""
        stream = self._streams.stream()
        try:
            return await stream.exchange(key, item, cancel, timeout_s, size)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED or err is not stream.error:
                raise
            self.supported = False
            return None

    async def close(self) -> None:
        """Cancel every stream (their exchanges fail CANCELLED) and wait; idempotent."""
        await self._streams.close()


__all__ = ["BATCH_BYTES", "HALF_CLOSE", "KEY_BYTES", "MAX_EXCHANGE_BYTES", "MAX_MESSAGE_BYTES",
           "MuxStream", "Multiplexed", "StreamRenewal", "byte_batches", "byte_size",
           "mux_outcome", "rpc_error", "sized_batches"]
