"""The engine agent's composition root (``core.EngineAgent``): a backend with a lease port gets a
provider and receipts (H scaled to its pool when asked), one without answers the lease calls
with a clear FailedPrecondition, and close stops them all, once."""

from __future__ import annotations

import pytest

from services.common.values.errors import FailedPrecondition
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
