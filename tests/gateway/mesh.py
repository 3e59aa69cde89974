"""An in-process mesh for gateway tests: a csl, sim engine agents and a gateway on port 0."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.common.runtime.server import ServiceRuntime
from services.gateway.sdk import DynbranchClient
from tests.factories import csl_service, engine_agent, gateway

MODEL = "qwen3-32b"


@dataclass
class Mesh:
    """Handles on the running pieces."""

    csl: ServiceRuntime
    engines: list[ServiceRuntime]
    gateway: ServiceRuntime
    client: DynbranchClient
    spans: InMemorySpanExporter

    @property
    def branches(self) -> Any:
        """The gateway's branch manager."""
        return self.gateway.core.branches


@asynccontextmanager
async def mesh(engines: int = 1, time_scale: float = 0.02, **gateway_settings: Any
               ) -> AsyncIterator[Mesh]:
    """Start csl, ``engines`` sim engine agents (32B/H200 preset) and a gateway."""
    async with AsyncExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        csl = await stack.enter_async_context(csl_service(f"{tmp}/csl", grace_s=0.2,
                                                          sync=True))
        agents = [await stack.enter_async_context(engine_agent(
            engine_id=f"e{i}", model=MODEL, preset="qwen3-32b-h200", time_scale=time_scale))
            for i in range(engines)]
        spans = InMemorySpanExporter()
        settings = {"csl": csl.address, "fill_wait_s": 2.0, **gateway_settings}
        gw = await stack.enter_async_context(gateway([a.address for a in agents],
                                                     span_exporter=spans, **settings))
        client = DynbranchClient(gw.address)
        stack.push_async_callback(client.close)
        yield Mesh(csl, agents, gw, client, spans)
