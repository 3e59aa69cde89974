"""The lease channel's server: the plugin's ``dynbranch_*`` utilities for a client outside vLLM.

An agent beside an unmodified ``vllm serve`` (dynbranch's ``openai`` backend) has no
``AsyncLLM`` of its own to call the engine core's utilities with. This server gives it one: a
ZMQ ROUTER on a local endpoint (``ipc://``, or ``tcp://`` on loopback) whose every request is
forwarded with ``call(op, *args)`` (in vLLM: ``AsyncLLM.engine_core.call_utility_async``, see
``frontend``) and answered when that call returns. Each request runs in its own task, so a
``dynbranch_wait_allocated`` that answers only at the request's first allocation never holds up
the calls behind it; tasks start in arrival order, so an ``acquire`` and the ``release`` a client
queues behind it reach the engine core in that order.

Wire format (``PROTOCOL`` 1), one msgpack frame each way after the ROUTER's identity frame:
request ``[1, call_id, op, args]``, reply ``[call_id, ok, value]`` where ``value`` is the result
or, when ``ok`` is false, the error message. Only the operations in ``OPS`` are served: the
channel is no general door into the engine core. Deadlines are the client's; a client that
vanishes leaves answers for nobody (ROUTER drops them) and its waits are answered None by the
engine core after ``engine_core._MAX_WAIT_S``.

Nothing here imports vLLM (the tests run it over a fake ``call``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from dynbranch_vllm_plugin.request_ids import SERVER_FORMS

#: Under ``vllm.``: vLLM configures only its own logger (package ``__init__``).
logger = logging.getLogger(f"vllm.{__name__}")

PROTOCOL = 1
#: The utilities a client may call over the channel (everything the lease provider, the remote
#: backend and its tests need, and the priority move of an adopted fill; nothing that drops
#: every lease or reaches the model).
OPS = frozenset({
    "dynbranch_info", "dynbranch_resident", "dynbranch_lookup", "dynbranch_load",
    "dynbranch_acquire", "dynbranch_release", "dynbranch_bind", "dynbranch_handoffs",
    "dynbranch_lease_refs", "dynbranch_pool_state", "dynbranch_wait_allocated",
    "dynbranch_forget", "dynbranch_block_refs", "dynbranch_lease", "dynbranch_lease_stats",
    "dynbranch_sweep", "dynbranch_set_priority",
})
#: Requests in progress at most (a wait counts until its request is allocated); more are refused.
MAX_INFLIGHT = 4096
_LOOPBACK = ("tcp://127.0.0.1:", "tcp://localhost:", "tcp://[::1]:")

Call = Callable[..., Awaitable[Any]]


def check_endpoint(endpoint: str) -> str:
    """``endpoint`` if it is local (``ipc://PATH`` or loopback ``tcp://``); ValueError if not."""
    if endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"):
        return endpoint
    if endpoint.startswith(_LOOPBACK):
        return endpoint
    raise ValueError(f"lease channel endpoint {endpoint!r}: must be ipc://PATH or tcp:// on "
                     f"loopback (127.0.0.1, localhost, [::1]): the channel adds and drops "
                     f"references on the engine's KV blocks")


def codec() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """msgpack ``(encode, decode)``: msgspec's where it is installed (vLLM ships it), else
    msgpack's (the two write the same bytes)."""
    try:
        from msgspec import msgpack as fast

        return fast.encode, fast.decode
    except ImportError:
        import msgpack

        return msgpack.packb, lambda data: msgpack.unpackb(data, raw=False)


class ChannelServer:
    """A ZMQ ROUTER serving ``OPS`` through ``call``; ``start`` on a running loop, ``close``
    (synchronous, idempotent) from anywhere."""

    def __init__(self, endpoint: str, call: Call, *,
                 info: Callable[[], dict[str, Any]] | None = None,
                 max_inflight: int = MAX_INFLIGHT) -> None:
        self.endpoint = check_endpoint(endpoint)
        self._call, self._info, self._max_inflight = call, info, max_inflight
        self._encode, self._decode = codec()
        self._ctx: Any = None
        self._sock: Any = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._bound = False
        self.served = 0

    def start(self) -> None:
        """Bind now (a bind error raises) and serve on the running event loop."""
        import zmq
        import zmq.asyncio

        loop = asyncio.get_running_loop()
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            self._sock.bind(self.endpoint)
        except BaseException:
            self.close()
            raise
        self._bound = True
        self._task = loop.create_task(self._serve(), name="dynbranch-lease-channel")

    async def _serve(self) -> None:
        while True:
            frames = await self._sock.recv_multipart()
            if len(frames) != 2:
                logger.warning("lease channel: dropped a message of %d frames", len(frames))
                continue
            identity, payload = frames
            task = asyncio.get_running_loop().create_task(self._answer(identity, payload))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, identity: bytes, payload: bytes) -> None:
        try:
            request = self._decode(payload)
            version, call_id, op, args = request
        except Exception:  # noqa: BLE001 - not ours: nobody to answer
            logger.warning("lease channel: dropped an undecodable request")
            return
        try:
            value, ok = await self._run(version, op, args), True
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            value, ok = f"{type(exc).__name__}: {exc}", False
        self.served += 1
        with contextlib.suppress(Exception):  # the socket closed meanwhile
            await self._sock.send_multipart([identity, self._encode([call_id, ok, value])])

    async def _run(self, version: Any, op: Any, args: Any) -> Any:
        if version != PROTOCOL:
            raise ValueError(f"protocol {version!r}; this server speaks {PROTOCOL}")
        if op not in OPS or not isinstance(args, list):
            raise ValueError(f"unknown operation {op!r}")
        if len(self._tasks) > self._max_inflight:
            raise RuntimeError(f"lease channel busy ({self._max_inflight} calls in progress)")
        result = await self._call(op, *args)
        if op == "dynbranch_info":
            result = {**result, "channel_protocol": PROTOCOL, "server_pid": os.getpid(),
                      "request_id_forms": list(SERVER_FORMS), **(self._info or dict)()}
        return result

    def close(self) -> None:
        """Stop serving, drop the calls in progress, close the socket (removes an ipc file)."""
        for task in [t for t in (self._task, *self._tasks) if t is not None]:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                task.cancel()
        self._task, self._tasks = None, set()
        sock, self._sock = self._sock, None
        ctx, self._ctx = self._ctx, None
        if sock is not None:
            sock.close(linger=0)
            if self._bound and self.endpoint.startswith("ipc://"):  # libzmq leaves the file
                with contextlib.suppress(OSError):
                    os.unlink(self.endpoint[len("ipc://"):])
            self._bound = False
        if ctx is not None:
            ctx.term()


__all__ = ["MAX_INFLIGHT", "OPS", "PROTOCOL", "ChannelServer", "check_endpoint", "codec"]
