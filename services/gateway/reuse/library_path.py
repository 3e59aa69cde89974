"""The canonical path's side of the library (C1): probe, a hit's freshness, background stores.

A probe for a name whose store is still in flight awaits that store first, so a repeat right
after its original finds it. A hit is served only while every record it read is current
(``freshness``): one refused because a record moved on since is counted (``refused_stale``) and
the core reconciles the library with the corpus on the count; one whose reads cannot be checked
now is a miss, not counted. Stores run in owned background tasks so an answer never waits for
them; past ``max_pending_stores`` in flight a result is answered but not stored (counted in
``stores_dropped``): a store only saves later work, so it is the thing to shed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from opentelemetry.trace import NoOpTracer, Tracer

from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName
from services.common.values.tracing import maybe_span
from services.gateway.config import GatewaySettings
from services.gateway.execution import StageRun
from services.gateway.ports import LibraryPort
from services.gateway.reuse.freshness import Freshness
from services.gateway.values import StoredResult

log = logging.getLogger(__name__)
#: Stores in flight at most, by default (``GatewaySettings.max_pending_stores``).
MAX_PENDING_STORES: int = GatewaySettings.model_fields["max_pending_stores"].default


class LibraryPath:
    """Probes the library for a name, checks a hit's reads, and stores executions."""

    def __init__(self, port: LibraryPort | None, freshness: Freshness, tracer: Tracer,
                 max_pending_stores: int = MAX_PENDING_STORES) -> None:
        #: The library; None when no csl is configured (every probe misses, nothing is stored).
        self.port = port
        self.freshness = freshness
        self.tracer = tracer
        #: Tracing off: probes and stores build no span attributes (no ``str`` of the name).
        self._untraced = isinstance(tracer, NoOpTracer)
        self._stores: dict[ReuseName, asyncio.Task[bool]] = {}
        #: Stores in flight at most (module docstring).
        self.max_pending_stores = max_pending_stores
        self.stores_dropped = 0
        #: Served results refused because a corpus record they read moved on since.
        self.refused_stale = 0

    async def probe(self, name: ReuseName) -> Served | None:
        """The library's entry under ``name`` (after a store of it still in flight)."""
        if self.port is None:
            return None
        pending = self._stores.get(name)
        if pending is not None:
            await asyncio.shield(pending)
        if self._untraced:
            return await self.port.lookup(name)
        with maybe_span(self.tracer, "csl.lookup", attributes={
                "dynbranch.reuse_name": str(name)}) as span:
            served = await self.port.lookup(name)
            span.set_attribute("dynbranch.hit", served is not None)
        return served

    async def current(self, served: Served, name: ReuseName | None) -> StoredResult | None:
        """The served result, unless a gateway record it read has moved on since (then a miss:
        the library disagrees with the corpus, e.g. a csl restored from an older store), or
        its reads cannot be checked now (a miss too, not counted as stale)."""
        stored = StoredResult.decode(served.result)
        if not stored.reads:
            return stored
        current = await self.freshness.reads_current(stored.reads)
        if current is False:
            self.refused_stale += 1
            log.warning("refused a served result whose corpus reads are no longer current",
                        extra={"reuse_name": str(name or "")})
        return stored if current else None

    def store(self, name: ReuseName, run: StageRun,
              stored: Callable[[ReuseName], None] | None = None) -> None:
        """Store ``run`` under ``name`` in the background (once per name in flight);
        ``stored`` is told the name once the library holds it."""
        if self.port is None or name in self._stores:
            return
        if len(self._stores) >= self.max_pending_stores:
            self.stores_dropped += 1
            log.warning("library store dropped: %d stores in flight (max_pending_stores)",
                        len(self._stores), extra={"reuse_name": str(name)})
            return
        task = asyncio.create_task(self._put(self.port, name, run, stored),
                                   name=f"csl-put:{name.digest[:12]}")
        self._stores[name] = task
        task.add_done_callback(lambda _t: self._stores.pop(name, None))

    async def _put(self, port: LibraryPort, name: ReuseName, run: StageRun,
                   stored: Callable[[ReuseName], None] | None) -> bool:
        if self._untraced:
            ok = await port.put(name, run.stored.encode(), run.read_set, run.cost_s)
        else:
            with maybe_span(self.tracer, "csl.put", attributes={
                    "dynbranch.reuse_name": str(name)}):
                ok = await port.put(name, run.stored.encode(), run.read_set, run.cost_s)
        if ok and stored is not None:
            stored(name)
        return ok

    async def close(self) -> None:
        """Wait for in-flight stores (bounded by their own deadlines)."""
        await asyncio.gather(*list(self._stores.values()), return_exceptions=True)


__all__ = ["MAX_PENDING_STORES", "LibraryPath"]
