"""The engine agent's composition root, protocol-free: one engine backend, the LADS lease
provider over it when the backend has a ``LeasePort`` (``papers/lads.txt`` §3.4–3.7), the
once-only continuations of returned results (``leases.receipts``), and the fills running now,
which canonical demands may adopt (``running``). The servicer maps the
EngineAgent RPCs onto this object; the server builds it from the settings."""

from __future__ import annotations

from services.common.values.errors import FailedPrecondition
from services.engine_agent.backend import EngineBackend
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.leases.budget import scaled_headroom
from services.engine_agent.leases.port import LeasePort
from services.engine_agent.leases.provider import LeaseProvider, LeaseSettings
from services.engine_agent.leases.receipts import Receipts
from services.engine_agent.running import RunningFills


class EngineAgent:
    """One engine: its backend, its running fills, and its lease provider and receipts when it
    has leases."""

    def __init__(self, engine_id: str, backend: EngineBackend,
                 provider: LeaseProvider | None = None,
                 settings: EngineAgentSettings | None = None) -> None:
        self.engine_id, self.backend, self.provider = engine_id, backend, provider
        self.receipts = Receipts(backend, provider) if provider is not None else None
        #: Every generation goes through it: fills are recorded so that demands may adopt them.
        self.fills = RunningFills(backend)
        self._settings = settings

    @classmethod
    def from_settings(cls, settings: EngineAgentSettings, backend: EngineBackend) -> EngineAgent:
        """The agent over ``backend``, with a lease provider when the backend has a
        ``LeasePort`` (H scaled to its pool when ``lease_headroom_blocks`` is -1); a real
        engine's leases are known once it started (``start``)."""
        return cls(settings.engine_id, backend, lease_provider(settings, backend), settings)

    def leases(self) -> tuple[LeaseProvider, Receipts]:
        """The lease provider and receipts; ``FailedPrecondition`` when the backend has none."""
        if self.provider is None or self.receipts is None:
            raise FailedPrecondition(f"backend {self.backend.info.backend!r} has no lease provider")
        return self.provider, self.receipts

    async def start(self) -> None:
        """Start the backend, then the provider's evaluation (the provider is made now when the
        started backend found leases: vLLM's plugin, a server's lease channel)."""
        await self.backend.start()
        if self.provider is None and self._settings is not None:
            self.provider = lease_provider(self._settings, self.backend)
            if self.provider is not None:
                self.receipts = Receipts(self.backend, self.provider)
        if self.provider is not None:
            await self.provider.start()

    async def close(self) -> None:
        """Cancel running continuations, stop the provider (releasing every lease), close the
        backend; idempotent."""
        if self.receipts is not None:
            await self.receipts.close()
        if self.provider is not None:
            await self.provider.close()
        await self.backend.close()
        await self.fills.close()


def lease_provider(settings: EngineAgentSettings, backend: EngineBackend) -> LeaseProvider | None:
    """The LADS lease provider over the backend's block pool; None when it has no LeasePort."""
    if not isinstance(backend, LeasePort) or not backend.info.leases_supported:
        return None
    headroom = settings.lease_headroom_blocks
    if headroom < 0:
        headroom = scaled_headroom(backend.info.kv_blocks_total)
    lease_settings = LeaseSettings(mode=settings.lease_mode, lifetime_s=settings.lease_lifetime_s,
                                   headroom_blocks=headroom, interval_s=settings.lease_interval_s,
                                   ttl_s=settings.lease_ttl_s)
    return LeaseProvider(backend, engine_id=settings.engine_id,
                         tokenize=backend.tokenize,  # type: ignore[attr-defined]
                         settings=lease_settings)


__all__ = ["EngineAgent", "lease_provider"]
