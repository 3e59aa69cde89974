"""``LeasePort`` over the dynbranch vLLM plugin's lease utilities, with deadlines.

The mechanism runs in vLLM's engine-core process (``plugins/vllm``, ``dynbranch_vllm_plugin``:
``dynbranch_resident``, ``_acquire``, ``_release``, ``_bind``, ``_handoffs``, ``_lease_refs``,
``_pool_state``), between engine steps; this object only calls it, maps values to
``lease_port``'s types, and bounds every call by a deadline. It holds no lease state, so nothing
here can disagree with the engine. Two transports carry the calls (``PluginEngine``): the
embedded ``VllmBackend`` calls the engine core with AsyncLLM's own utility calls; the ``openai``
backend reaches a ``vllm serve`` through the plugin's lease channel (``remote.leases``).

Requests are bound by our request id: vLLM renames it in the engine (AsyncLLM's
``{id}-xxxxxxxx``, the OpenAI server's ``cmpl-{id}-0``/``chatcmpl-{id}``) and the plugin matches
every form, so a lease may be bound before its request is submitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from services.common.values.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument
from services.engine_agent.leases.port import Handoff, PoolState, ResidentPrefix

logger = logging.getLogger(__name__)

#: Longest a lease utility may take: it waits for the engine's current step (well under 1 s).
CALL_DEADLINE_S = 5.0
#: Engine-side expiry of a lease whose release got lost (the provider releases much earlier).
SAFETY_TTL_S = 60.0


class PluginEngine(Protocol):
    """An engine whose core has the plugin's utilities, as this port calls them."""

    @property
    def plugin_loaded(self) -> bool:
        """Whether the engine core answers the ``dynbranch_*`` utilities."""

    @property
    def running(self) -> bool:
        """Whether the engine is started and not closed."""

    @property
    def lease_block_size(self) -> int:
        """Tokens per KV block of the engine's pool."""

    async def call_utility(self, name: str, *args: Any) -> Any:
        """Run one ``dynbranch_*`` utility on the engine core."""


class VllmLeasePort:
    """Exact extra references on a vLLM engine's prefix blocks (``LeasePort``)."""

    def __init__(self, engine: PluginEngine, *, deadline_s: float = CALL_DEADLINE_S,
                 safety_ttl_s: float = SAFETY_TTL_S) -> None:
        self._engine = engine
        self._deadline_s = deadline_s
        self._safety_ttl_s = safety_ttl_s

    @property
    def lease_block_size(self) -> int:
        """Tokens per KV block."""
        return self._engine.lease_block_size

    async def resident(self, token_ids: Sequence[int]) -> ResidentPrefix:
        """The resident reusable prefix of ``token_ids`` (no references added)."""
        view = await self._call("dynbranch_resident", [int(t) for t in token_ids])
        return ResidentPrefix(tuple(view["block_ids"]), str(view["digest"]),
                              frozenset(view["free"]))

    async def pool_state(self) -> PoolState:
        """Free blocks, queue lengths, the running limit, κ, and what waiting work lacks."""
        v = await self._call("dynbranch_pool_state")
        return PoolState(v["free_blocks"], v["total_blocks"], v["waiting"], v["running"],
                         v["max_running"], float(v["kappa_s"]), int(v.get("blocked_blocks", 0)))

    async def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        """Add one reference to each block iff all are still resident under ``digest``."""
        if not lease_id:
            raise InvalidArgument("lease_id", "must not be empty")
        try:
            return bool(await self._call("dynbranch_acquire", lease_id,
                                         [int(i) for i in block_ids], digest,
                                         self._safety_ttl_s))
        except DeadlineExceeded:
            # The acquire may still land; a release queued behind it undoes it in order.
            with contextlib.suppress(Exception):
                await self._call("dynbranch_release", lease_id)
            raise

    async def release(self, lease_id: str) -> int:
        """Drop exactly the lease's references; the number of blocks released (0: none held)."""
        if not self._engine.running:
            return 0  # the engine released every lease when it stopped
        return int(await self._call("dynbranch_release", lease_id))

    async def bind(self, lease_id: str, request_id: str) -> None:
        """Hand the lease to request ``request_id`` (our id) at its first allocation."""
        if not await self._call("dynbranch_bind", lease_id, request_id):
            logger.info("bind: lease %s is not held (released, expired or handed off)", lease_id)

    async def handoffs(self) -> list[Handoff]:
        """Handoffs since the last call, oldest first."""
        return [Handoff(h["lease_id"], h["request_id"], float(h["t"]), bool(h["owned"]),
                        bool(h.get("at_bind", False)))
                for h in await self._call("dynbranch_handoffs")]

    async def lease_refs(self) -> dict[str, int]:
        """Blocks each live lease references."""
        return {str(k): int(v) for k, v in (await self._call("dynbranch_lease_refs")).items()}

    async def _call(self, name: str, *args: Any) -> Any:
        if not self._engine.plugin_loaded:
            raise FailedPrecondition("prefix leases need the dynbranch vLLM plugin (plugins/vllm) "
                                     "in the engine; scripts/install_vllm.sh registers it here")
        try:
            return await asyncio.wait_for(self._engine.call_utility(name, *args),
                                          self._deadline_s)
        except TimeoutError as exc:
            raise DeadlineExceeded(f"engine utility {name} took over {self._deadline_s} s") from exc


__all__ = ["CALL_DEADLINE_S", "SAFETY_TTL_S", "PluginEngine", "VllmLeasePort"]
