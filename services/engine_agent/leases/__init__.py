"""LADS prefix leases on the engine side (``papers/lads.txt`` §3.4–3.7): the provider that runs
the budget loop (``provider``), the budget B(t) and headroom (``budget``), the provider's record
of pending results and live leases (``book``), the lease port a backend implements (``port``),
the versioned lease and budget records it publishes (``state``) and the once-only continuation of
each received result (``receipts``). Protocol-free; the gRPC edge is
``services.engine_agent.servicer``."""

from services.engine_agent.leases.budget import Budget, exclusive_blocks, scaled_headroom
from services.engine_agent.leases.port import Handoff, LeasePort, PoolState, ResidentPrefix
from services.engine_agent.leases.provider import LeaseProvider, LeaseSettings
from services.engine_agent.leases.receipts import Continued, Receipts

__all__ = ["Budget", "Continued", "Handoff", "LeasePort", "LeaseProvider", "LeaseSettings",
           "PoolState", "Receipts", "ResidentPrefix", "exclusive_blocks", "scaled_headroom"]
