"""Prefix lookup, prefix leases and the first-allocation signal: ``VllmBackend``'s plugin calls.

The leases see their backend only through the narrow ``LeaseEngine`` protocol, so this module
never imports ``backend`` (which builds its leases with itself as the engine): no import cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

from services.common.values.errors import FailedPrecondition, InvalidArgument
from services.engine_agent.backend import Allocated, BackendInfo, PrefixLookup


class LeaseEngine(Protocol):
    """What the leases need from the engine they lease from (``VllmBackend`` is one)."""

    @property
    def info(self) -> BackendInfo: ...

    @property
    def plugin_loaded(self) -> bool:
        """Whether the engine core has the ``dynbranch_*`` utilities."""

    @property
    def running(self) -> bool:
        """Whether the engine is started and not closed."""

    def tokenize(self, prompt: str) -> list[int]:
        """Token ids exactly as the engine is sent them."""

    async def call_utility(self, name: str, *args: Any) -> Any:
        """Run one ``dynbranch_*`` utility on the engine core."""


class VllmLeases:
    """The ``dynbranch_*`` block-pool utilities one ``VllmBackend`` calls, and its lease grants.

    It reads the backend's engine, plugin flag and utility call rather than copying them: both
    change when the backend starts and closes.
    """

    def __init__(self, backend: LeaseEngine) -> None:
        self._backend = backend
        self._grants: dict[str, dict[str, Any]] = {}

    async def lookup_prefix(self, prompt: str) -> PrefixLookup:
        """Resident prefix as the scheduler would reuse it (whole blocks, before the last token)."""
        b = self._backend
        ids = b.tokenize(prompt)
        if not b.plugin_loaded:
            return PrefixLookup(len(ids), 0, b.info.block_size)
        view = await b.call_utility("dynbranch_lookup", ids)
        return PrefixLookup(view["prompt_tokens"], view["resident_tokens"], view["block_size"])

    async def lease_prefix(self, prompt_or_token_ids: str | Sequence[int], lease_id: str,
                           ttl_s: float) -> int:
        """Add one reference to each resident block of the prefix; blocks leased (0: none)."""
        b = self._backend
        if not b.plugin_loaded:
            raise FailedPrecondition("prefix leases need the dynbranch vLLM plugin")
        if not lease_id:
            raise InvalidArgument("lease_id", "must not be empty")
        if ttl_s <= 0:
            raise InvalidArgument("ttl_s", "must be positive")
        grant = await b.call_utility("dynbranch_lease", lease_id,
                                     _token_ids(b, prompt_or_token_ids), float(ttl_s))
        if grant["blocks"]:
            self._grants[lease_id] = grant
        return int(grant["blocks"])

    async def release_lease(self, lease_id: str) -> int:
        """Drop exactly the references the lease added; blocks released (0: unknown/expired)."""
        self._grants.pop(lease_id, None)
        b = self._backend
        if not b.plugin_loaded or not b.running:
            return 0
        return int(await b.call_utility("dynbranch_release", lease_id))

    async def lease_stats(self) -> dict[str, int]:
        """Live leases and blocks, and lifetime grants, releases and expiries (engine side)."""
        if not self._backend.plugin_loaded:
            return {"leases": 0, "blocks": 0, "granted": 0, "released": 0, "expired": 0}
        return dict(await self._backend.call_utility("dynbranch_lease_stats"))

    def leased_block_ids(self, lease_id: str) -> list[int]:
        """Engine block ids a lease holds (as granted)."""
        return list(self._grants.get(lease_id, {}).get("block_ids", ()))

    async def block_refs(self, block_ids: Sequence[int]) -> list[int]:
        """Reference counts of engine blocks (diagnostics and tests)."""
        return list(await self._backend.call_utility("dynbranch_block_refs", list(block_ids)))

    def clear(self) -> None:
        """Forget every grant (the engine released them all at shutdown)."""
        self._grants.clear()

    # ---- the exact first-allocation signal --------------------------------------------------

    def wait_allocated(self, engine_id: str) -> asyncio.Future[Any] | None:
        """The engine's allocation record for a request, as a future; None without the plugin."""
        if not self._backend.plugin_loaded:
            return None
        return asyncio.ensure_future(
            self._backend.call_utility("dynbranch_wait_allocated", engine_id))

    async def forget(self, engine_id: str) -> None:
        """Drop the engine's pending allocation wait for a request that ended before it."""
        await self._backend.call_utility("dynbranch_forget", engine_id)


def _token_ids(engine: LeaseEngine, prompt_or_ids: str | Sequence[int]) -> list[int]:
    return engine.tokenize(prompt_or_ids) if isinstance(prompt_or_ids, str) else list(
        prompt_or_ids)


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


__all__ = ["LeaseEngine", "VllmLeases", "allocated_event", "settle"]
