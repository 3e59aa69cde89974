"""csl entry point: ``python -m services.csl`` (or ``dynbranch serve csl``).

Start-up opens (or, in a new or empty directory, creates) the LMDB store; a missing, corrupt,
foreign or locked store stops start-up with exit status 2 and a message naming the path.
Shutdown follows the runtime's order, then lets queued mutations finish and closes LMDB.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.pb import csl_pb2, csl_pb2_grpc
from services.common.runtime.cli_args import Flag, service_main
from services.common.runtime.server import ServiceRuntime
from services.csl.async_library import AsyncSubgraphLibrary
from services.csl.config import CslSettings
from services.csl.core import SubgraphLibrary
from services.csl.errors import StoreError
from services.csl.servicer import LibraryCollector, SubgraphLibraryServicer
from services.csl.serving import ServingLease

log = logging.getLogger(__name__)
SERVICE_NAME = csl_pb2.DESCRIPTOR.services_by_name["SubgraphLibrary"].full_name


async def build_runtime(settings: CslSettings, *,
                        span_exporter: SpanExporter | None = None) -> ServiceRuntime:
    """A runtime serving the SubgraphLibrary service over an opened store (not yet listening)."""
    library = await asyncio.to_thread(SubgraphLibrary, settings.data_dir,
                                      settings.library_options())
    lease = ServingLease(settings.serving_lease_s)
    facade = AsyncSubgraphLibrary(library, lease=lease)
    runtime = ServiceRuntime("csl", settings, span_exporter=span_exporter)
    sweeper = asyncio.create_task(_sweep(facade, settings.expire_interval_s))

    async def close() -> None:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        await facade.close()

    runtime.on_close(close)
    runtime.registry.register(LibraryCollector(library, lease))
    if lease.leased:
        log.info("csl shard: serving only under a lease of %.3f s, renewed by the gateways",
                 lease.lease_s, extra={"incarnation": lease.incarnation})
    servicer = SubgraphLibraryServicer(facade, runtime.tracer,
                                       max_result_bytes=settings.max_result_bytes)
    runtime.add_service(csl_pb2_grpc.add_SubgraphLibraryServicer_to_server, servicer,
                        SERVICE_NAME)
    return runtime


async def _sweep(library: AsyncSubgraphLibrary, interval_s: float) -> None:
    """Drop expired shadows and settlement records every ``interval_s``."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await library.expire()
        except Exception:
            log.exception("csl: shadow expiry failed")


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, open the store, serve until SIGTERM."""
    return service_main(argv, service="csl", settings_cls=CslSettings,
                        description="Run the Completed-Subgraph Library service.",
                        build=build_runtime, fatal=(StoreError,),
                        flags=[Flag("--data-dir", "data_dir", "LMDB environment directory")])


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
