"""Delivery entry point: ``python -m services.delivery`` (or ``dynbranch serve delivery``)."""

from __future__ import annotations

import functools
import time
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.pb import delivery_pb2, delivery_pb2_grpc
from services.common.runtime.cli_args import Flag, service_main
from services.common.runtime.server import ServiceRuntime
from services.delivery.adapters.engines import EngineLink
from services.delivery.config import DeliverySettings
from services.delivery.core import DeliveryCore
from services.delivery.sender import Sender
from services.delivery.servicer import DeliveryCollector, DeliveryServicer

SERVICE_NAME = delivery_pb2.DESCRIPTOR.services_by_name["Delivery"].full_name
DESCRIPTION = ("Run the delivery service: the LADS sender, returning tool results over paced "
               "links to their engine agents.")


class DeliveryRuntime(ServiceRuntime):
    """The delivery service's runtime; ``core`` is the core it serves (in-process tests and
    benchmarks read the sender's timeline and counters through it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.core: DeliveryCore | None = None


async def build_runtime(settings: DeliverySettings, *,
                        span_exporter: SpanExporter | None = None) -> DeliveryRuntime:
    """A runtime serving the Delivery service over links to the configured engine agents."""
    runtime = DeliveryRuntime("delivery", settings, span_exporter=span_exporter)
    links = {engine_id: EngineLink(engine_id, target,
                                   receive_timeout_s=settings.receive_timeout_s)
             for engine_id, target in settings.engine_targets.items()}
    make_sender = functools.partial(
        Sender, settings.policy, link_bytes_per_s=settings.link_bytes_per_s,
        framing_bytes=settings.framing_bytes, window=settings.window,
        max_record_age_s=settings.max_record_age_s, clock=time.time)
    core = runtime.core = DeliveryCore(links, make_sender,
                                       max_pending=settings.max_pending_results)
    # Close hooks run last-registered first: the core (sender, then pending deliveries), then
    # the engine links its receipts were calling.
    for link in links.values():
        runtime.on_close(link.close)
    runtime.on_close(core.close)
    await core.start()
    runtime.registry.register(DeliveryCollector(core))
    servicer = DeliveryServicer(core, max_observation_bytes=settings.max_observation_bytes,
                                tracer=runtime.tracer)
    runtime.add_service(delivery_pb2_grpc.add_DeliveryServicer_to_server, servicer, SERVICE_NAME)
    return runtime


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    return service_main(argv, service="delivery", settings_cls=DeliverySettings,
                        description=DESCRIPTION, build=build_runtime, flags=[
                            Flag("--engine", "engines", "engine agent results return to "
                                 "(repeatable)", {"action": "append",
                                                  "metavar": "ENGINE_ID=HOST:PORT"}),
                            Flag("--policy", "policy", "delivery policy (default lads)")])


__all__ = ["SERVICE_NAME", "DeliveryRuntime", "build_runtime", "main"]
