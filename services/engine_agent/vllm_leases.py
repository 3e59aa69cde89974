"""Prefix lookup, prefix leases and the first-allocation signal: ``VllmBackend``'s plugin calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from services.common.errors import FailedPrecondition, InvalidArgument
from services.engine_agent.backend import Allocated, PrefixLookup

if TYPE_CHECKING:
    from services.engine_agent.vllm_backend import VllmBackend


class VllmLeases:
    """The ``dynbranch_*`` block-pool utilities one ``VllmBackend`` calls, and its lease grants.

    It reads the backend's engine, plugin flag and utility call rather than copying them: both
    change when the backend starts and closes.
    """

    def __init__(self, backend: VllmBackend) -> None:
        self._backend = backend
        self._grants: dict[str, dict[str, Any]] = {}

    async def lookup_prefix(self, prompt: str) -> PrefixLookup:
        """Resident prefix as the scheduler would reuse it (whole blocks, before the last token)."""
        b = self._backend
        ids = b.tokenize(prompt)
        if not b._plugin:
            return PrefixLookup(len(ids), 0, b.info.block_size)
        view = await b._utility("dynbranch_lookup", ids)
        return PrefixLookup(view["prompt_tokens"], view["resident_tokens"], view["block_size"])

    async def lease_prefix(self, prompt_or_token_ids: str | Sequence[int], lease_id: str,
                           ttl_s: float) -> int:
        """Add one reference to each resident block of the prefix; blocks leased (0: none)."""
        b = self._backend
        if not b._plugin:
            raise FailedPrecondition("prefix leases need the dynbranch vLLM plugin")
        if not lease_id:
            raise InvalidArgument("lease_id", "must not be empty")
        if ttl_s <= 0:
            raise InvalidArgument("ttl_s", "must be positive")
        grant = await b._utility("dynbranch_lease", lease_id, b._tokens(prompt_or_token_ids),
                                 float(ttl_s))
        if grant["blocks"]:
            self._grants[lease_id] = grant
        return int(grant["blocks"])

    async def release_lease(self, lease_id: str) -> int:
        """Drop exactly the references the lease added; blocks released (0: unknown/expired)."""
        self._grants.pop(lease_id, None)
        b = self._backend
        if not b._plugin or b._llm is None:
            return 0
        return int(await b._utility("dynbranch_release", lease_id))

    async def lease_stats(self) -> dict[str, int]:
        """Live leases and blocks, and lifetime grants, releases and expiries (engine side)."""
        if not self._backend._plugin:
            return {"leases": 0, "blocks": 0, "granted": 0, "released": 0, "expired": 0}
        return dict(await self._backend._utility("dynbranch_lease_stats"))

    def leased_block_ids(self, lease_id: str) -> list[int]:
        """Engine block ids a lease holds (as granted)."""
        return list(self._grants.get(lease_id, {}).get("block_ids", ()))

    async def block_refs(self, block_ids: Sequence[int]) -> list[int]:
        """Reference counts of engine blocks (diagnostics and tests)."""
        return list(await self._backend._utility("dynbranch_block_refs", list(block_ids)))

    def clear(self) -> None:
        """Forget every grant (the engine released them all at shutdown)."""
        self._grants.clear()

    # ---- the exact first-allocation signal --------------------------------------------------

    def wait_allocated(self, engine_id: str) -> asyncio.Future[Any] | None:
        """The engine's allocation record for a request, as a future; None without the plugin."""
        if not self._backend._plugin:
            return None
        return asyncio.ensure_future(
            self._backend._utility("dynbranch_wait_allocated", engine_id))

    async def forget(self, engine_id: str) -> None:
        """Drop the engine's pending allocation wait for a request that ended before it."""
        await self._backend._utility("dynbranch_forget", engine_id)


def allocated_event(alloc: asyncio.Future[Any], wall0: float) -> Allocated | None:
    """``Allocated`` from a settled allocation record; None when it failed or never came."""
    if not alloc.done() or alloc.cancelled() or alloc.exception() is not None:
        return None
    record = alloc.result()
    if not record:
        return None  # finished or aborted before it was scheduled
    return Allocated(int(record["cached_tokens"]), max(float(record["t"]) - wall0, 0.0))


async def settle(fut: asyncio.Future[Any] | None, timeout: float) -> bool:
    """Wait briefly for a future; True when it is done."""
    if fut is None:
        return False
    with contextlib.suppress(asyncio.TimeoutError, Exception):
        await asyncio.wait_for(asyncio.shield(fut), timeout)
    return fut.done()


__all__ = ["VllmLeases", "allocated_event", "settle"]
