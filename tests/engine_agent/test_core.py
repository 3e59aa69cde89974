"""The engine agent's composition root (``core.EngineAgent``): a backend with a lease port gets a
provider and receipts (H scaled to its pool when asked; when its leases are known only once it
started, then), one without answers the lease calls with a clear FailedPrecondition, and close
stops them all, once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from services.common.values.errors import FailedPrecondition
from services.engine_agent.backend import BackendInfo
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.core import EngineAgent
from services.engine_agent.leases.budget import scaled_headroom
from tests.engine_agent.sim_factories import make_backend, small_preset


async def test_a_backend_with_leases_gets_a_provider_and_receipts() -> None:
    backend = make_backend(small_preset(num_kv_blocks=600))
    agent = EngineAgent.from_settings(EngineAgentSettings(lease_headroom_blocks=-1), backend)
    await agent.start()
    provider, receipts = agent.leases()
    assert provider.settings.headroom_blocks == scaled_headroom(600) and receipts is not None
    await agent.close()
    await agent.close()  # idempotent


async def test_without_leases_the_lease_calls_are_refused_by_name() -> None:
    backend = make_backend(small_preset())
    agent = EngineAgent.from_settings(EngineAgentSettings(lease_mode="none"), backend)
    assert agent.provider is not None  # the sim has a lease port; mode none still budgets
    bare = EngineAgent("e0", backend)
    with pytest.raises(FailedPrecondition, match="has no lease provider"):
        bare.leases()
    await backend.close()


class LeasesAtStart:
    """A backend whose leases are known only once started (vLLM's plugin, a lease channel)."""

    def __init__(self, backend: Any) -> None:
        self._backend, self.started = backend, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    @property
    def info(self) -> BackendInfo:
        return replace(self._backend.info, leases_supported=self.started)

    async def start(self) -> None:
        await self._backend.start()
        self.started = True


async def test_a_backend_that_finds_its_leases_at_start_gets_its_provider_then() -> None:
    backend = LeasesAtStart(make_backend(small_preset()))
    agent = EngineAgent.from_settings(EngineAgentSettings(), backend)  # type: ignore[arg-type]
    assert agent.provider is None and agent.receipts is None
    await agent.start()
    provider, receipts = agent.leases()
    assert provider.port is backend and receipts.backend is backend
    await agent.close()


async def test_the_continuum_settings_reach_the_provider_and_the_sim_engine() -> None:
    from services.engine_agent.backends.sim import SimBackend

    settings = EngineAgentSettings(lease_mode="fixed_ttl", lease_ttl_s=15.0, queue_policy="program",
                                   kv_offload_gib=8, preset="qwen2.5-7b-rtxpro5000", time_scale=0)
    backend = SimBackend.from_settings(settings)
    agent = EngineAgent.from_settings(settings, backend)
    assert agent.provider is not None and agent.provider.settings.mode == "fixed_ttl"
    assert agent.provider.settings.ttl_s == 15.0
    assert backend.engine.scheduler.queue_policy == "program"
    assert backend.engine.tier is not None and backend.engine.tier.spec.capacity_blocks == (
        8 * (1 << 30) // (56 * 1024 * 16))  # Qwen2.5-7B: 56 KiB of KV a token
    with pytest.raises(ValueError, match="queue_policy"):
        EngineAgentSettings(queue_policy="lifo")  # type: ignore[arg-type]
    await backend.close()
