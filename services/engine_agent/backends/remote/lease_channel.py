"""The agent's end of the lease channel: the dynbranch vLLM plugin's utilities, called from
outside vLLM's processes (``plugins/vllm/dynbranch_vllm_plugin/channel.py`` is the server).

One ZMQ DEALER connected to the plugin's ROUTER in the vLLM API server. Calls go out as
``[1, call_id, op, args]`` and their answers ``[call_id, ok, value]`` come back in any order; one
reader task hands each to the call that waits for it, so any number of calls may be in flight
(a ``dynbranch_wait_allocated`` pending until its request is scheduled holds up nothing). Every
call has a deadline, sending included: past it the call raises ``DeadlineExceeded`` and a late
answer is dropped.
A refused or failed call raises ``Unavailable`` with the server's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from services.common.values.errors import DeadlineExceeded, FailedPrecondition, Unavailable

logger = logging.getLogger(__name__)

#: The wire protocol the plugin's channel speaks (``channel.PROTOCOL``).
PROTOCOL = 1
#: Default deadline of one call: it waits for at most the engine's current step.
CALL_DEADLINE_S = 5.0


class LeaseChannel:
    """Concurrent calls over one DEALER socket; ``open`` once, ``close`` idempotent."""

    def __init__(self, endpoint: str, *, deadline_s: float = CALL_DEADLINE_S) -> None:
        if not endpoint:
            raise FailedPrecondition("lease_channel: no endpoint")
        self.endpoint, self.deadline_s = endpoint, deadline_s
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self.closed = False

    async def open(self) -> None:
        """Connect (ZMQ connects lazily: a missing server shows as calls past their deadline)."""
        if self._sock is not None or self.closed:
            return
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        # Queue a call only on a live connection: with no server a send waits (and its deadline
        # ends it) instead of reaching a server that comes up later, long after its caller gave up.
        self._sock.setsockopt(zmq.IMMEDIATE, 1)
        self._sock.connect(self.endpoint)
        self._reader = asyncio.get_running_loop().create_task(self._read(),
                                                              name="lease-channel-reader")

    async def call(self, op: str, *args: Any, deadline_s: float | None = None) -> Any:
        """Run ``op(*args)`` on the engine core; its result (``Unavailable`` when it failed)."""
        if self._sock is None or self.closed:
            raise Unavailable(f"lease channel {self.endpoint} is not open")
        call_id = next(self._ids)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = answer
        limit = self.deadline_s if deadline_s is None else deadline_s
        frame = msgpack.packb([PROTOCOL, call_id, op, list(args)])
        try:
            ok, value = await asyncio.wait_for(self._send(frame, answer), limit)
        except TimeoutError as exc:
            raise DeadlineExceeded(f"lease channel {self.endpoint}: {op} got no answer in "
                                   f"{limit:g} s") from exc
        finally:
            self._pending.pop(call_id, None)
        if not ok:
            raise Unavailable(f"lease channel {self.endpoint}: {op} failed: {value}")
        return value

    async def _send(self, frame: bytes, answer: asyncio.Future[Any]) -> Any:
        assert self._sock is not None
        await self._sock.send(frame)
        return await answer

    async def _read(self) -> None:
        assert self._sock is not None
        while True:
            frame = await self._sock.recv()
            try:
                call_id, ok, value = msgpack.unpackb(frame, raw=False)
            except Exception:  # noqa: BLE001 - a malformed answer answers nobody
                logger.warning("lease channel %s: dropped a malformed answer", self.endpoint)
                continue
            answer = self._pending.get(call_id)
            if answer is not None and not answer.done():
                answer.set_result((bool(ok), value))

    async def close(self) -> None:
        """Fail the calls in flight, stop reading and close the socket; idempotent."""
        if self.closed:
            return
        self.closed = True
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(Unavailable(f"lease channel {self.endpoint} closed"))
        self._pending.clear()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._sock is not None:
            self._sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()
        self._sock = self._ctx = None


__all__ = ["CALL_DEADLINE_S", "PROTOCOL", "LeaseChannel"]
