"""Prefix leases on a remote ``vllm serve``: the dynbranch plugin's utilities over its lease
channel (``lease_channel``), for the ``openai`` backend.

At start the backend shakes hands (``dynbranch_info``, short deadline). An answer turns leases
on: the backend's ``LeasePort`` is ``VllmLeasePort`` over this object (the same mechanism and
value mapping as the embedded engine's, another transport), and its ``Allocated`` events become
exact (``wait_allocated``, merged into the stream by ``with_allocation``). No answer, or a
server without the plugin, leaves them off with one WARNING naming the endpoint: the delivery
path falls back to Cache-first, and nothing fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from services.common.values.errors import DeadlineExceeded, DynbranchError
from services.engine_agent.backends.remote.lease_channel import (
    CALL_DEADLINE_S,
    PROTOCOL,
    LeaseChannel,
)
from services.engine_agent.backends.vllm.lease_port import VllmLeasePort
from services.engine_agent.backends.vllm.leases import allocated_event, settle

logger = logging.getLogger(__name__)

#: How long the start-up handshake waits for the channel (a server without it never answers).
HANDSHAKE_DEADLINE_S = 3.0
#: How long the first token may wait for the exact allocation signal before the proxy is used.
ALLOC_GRACE_S = 1.0
FALLBACK = "prefix leases are off and delivery falls back to Cache-first"


class RemoteLeases:
    """The plugin's utilities at ``endpoint``: a ``PluginEngine`` for ``VllmLeasePort``."""

    def __init__(self, endpoint: str, *, deadline_s: float = CALL_DEADLINE_S,
                 handshake_s: float = HANDSHAKE_DEADLINE_S, wait_s: float = 600.0) -> None:
        self.endpoint = endpoint
        self.channel = LeaseChannel(endpoint, deadline_s=deadline_s)
        self.port = VllmLeasePort(self, deadline_s=deadline_s)
        self.facts: dict[str, Any] = {}
        self._handshake_s, self._wait_s = handshake_s, wait_s
        self._up = False

    async def open(self) -> bool:
        """Connect and shake hands; False (one WARNING, nothing raised) when nobody answers."""
        await self.channel.open()
        try:
            facts = await self.channel.call("dynbranch_info", deadline_s=self._handshake_s)
            problem = _refusal(facts)
        except DeadlineExceeded:
            problem = (f"no answer in {self._handshake_s:g} s (no vLLM server with the dynbranch "
                       f"plugin and DYNBRANCH_LEASE_CHANNEL there)")
        except DynbranchError as exc:
            problem = str(exc).removeprefix(f"lease channel {self.endpoint}: ")
        if problem:
            logger.warning("lease channel %s: %s; %s", self.endpoint, problem, FALLBACK)
            await self.channel.close()
            return False
        self.facts, self._up = facts, True
        logger.info("lease channel %s: leases on (%d blocks of %d tokens, vLLM server pid %s)",
                    self.endpoint, facts["num_blocks"], facts["block_size"],
                    facts.get("server_pid"))
        return True

    # ---- PluginEngine ------------------------------------------------------------------------

    @property
    def plugin_loaded(self) -> bool:
        """Whether the handshake succeeded (the server has the plugin and its channel)."""
        return self._up

    @property
    def running(self) -> bool:
        """Whether the channel is up and not closed."""
        return self._up and not self.channel.closed

    @property
    def lease_block_size(self) -> int:
        """Tokens per KV block, as the engine core said."""
        return int(self.facts.get("block_size", 0))

    async def call_utility(self, name: str, *args: Any) -> Any:
        """Run one ``dynbranch_*`` utility on the server's engine core."""
        return await self.channel.call(name, *args)

    # ---- the exact first-allocation signal ---------------------------------------------------

    def wait_allocated(self, request_id: str) -> asyncio.Task[Any] | None:
        """The allocation record of our request ``request_id`` as a task (None: leases off).

        It is asked before the HTTP request goes out, so the plugin waits for a request it has
        not seen yet; it answers right after the step that first schedules it.
        """
        if not self.running:
            return None
        return asyncio.get_running_loop().create_task(self.channel.call(
            "dynbranch_wait_allocated", request_id, True, deadline_s=self._wait_s))

    async def forget(self, request_id: str, alloc: asyncio.Task[Any] | None) -> None:
        """End a wait that is still pending (its request ended first): here and on the server."""
        if alloc is None or alloc.done():
            return
        alloc.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await alloc
        if self.running:
            with contextlib.suppress(DynbranchError):
                await self.channel.call("dynbranch_forget", request_id)

    async def close(self) -> None:
        """Close the channel (leases held on the server expire there); idempotent."""
        self._up = False
        await self.channel.close()


def _refusal(facts: Any) -> str:
    """Why a handshake answer cannot be used ("" when it can)."""
    if not isinstance(facts, dict) or facts.get("channel_protocol") != PROTOCOL:
        return f"answered an unknown protocol ({facts!r:.200})"
    if not facts.get("enable_caching"):
        return "the server runs without prefix caching (--enable-prefix-caching)"
    return ""


async def with_allocation(chunks: AsyncIterator[Any], alloc: asyncio.Task[Any] | None,
                          wall0: float) -> AsyncGenerator[Any, None]:
    """``chunks``, with the exact ``Allocated`` event put in where it arrives.

    The record normally comes before the first chunk (the engine schedules before its forward
    pass); a chunk that comes first waits ``ALLOC_GRACE_S`` for it, after which the caller's
    first-token proxy stands in. ``wall0`` is the ``time.time()`` the request was sent at.
    """
    nxt: asyncio.Future[Any] | None = None
    try:
        while True:
            nxt = nxt or asyncio.ensure_future(anext(chunks))
            if alloc is not None:
                await asyncio.wait({nxt, alloc}, return_when=asyncio.FIRST_COMPLETED)
                if nxt.done() and not alloc.done():
                    await settle(alloc, ALLOC_GRACE_S)
                if alloc.done() or nxt.done():
                    event = allocated_event(alloc, wall0) if alloc.done() else None
                    alloc = None  # answered, failed, or too late: the proxy covers the rest
                    if event is not None:
                        yield event
                if not nxt.done():
                    continue
            try:
                chunk = await nxt
            except StopAsyncIteration:
                return
            nxt = None
            yield chunk
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await nxt


__all__ = ["ALLOC_GRACE_S", "FALLBACK", "HANDSHAKE_DEADLINE_S", "RemoteLeases", "with_allocation"]
