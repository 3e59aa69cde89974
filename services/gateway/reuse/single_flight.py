"""Single-flight: an identical demand joins the canonical execution running now (C1 on).

A demand whose exact reuse name is executing canonically on this gateway right now, for the
same tenant, waits for that execution's answer instead of running again, within its own
deadline; when that execution fails, is cancelled, cannot be stored or read a record written
since, the demand runs itself (or joins one that started meanwhile). The key is the tenant and
the name, so a shared stage's name never carries a result across tenants here, and a stage
without a name (non-deterministic sampling) never joins. A fill step under a name running here
waits for that run too (``speculation.fills``). Across gateway replicas nothing is joined: a
repeat that reaches another replica runs again (the fill placeholders of ``HoldFill`` are
scoped to one workflow's branches, and holding one per canonical execution would add a stream
message to every miss).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from services.common.values.errors import DeadlineExceeded
from services.common.values.reuse_name import ReuseName
from services.gateway.execution import StageRun
from services.gateway.reuse.freshness import Freshness
from services.gateway.values import charge_wait

#: A canonical execution's key: the tenant and the reuse name.
Key = tuple[str, ReuseName]


class SingleFlight:
    """The canonical executions running now on this gateway, by tenant and reuse name; each
    resolves to its run when storable, else None."""

    def __init__(self, freshness: Freshness) -> None:
        self.freshness = freshness
        self._running: dict[Key, asyncio.Future[StageRun | None]] = {}
        #: Demands answered by an identical demand's execution instead of their own.
        self.joined = 0

    def running(self, tenant: str, name: ReuseName) -> asyncio.Future[StageRun | None] | None:
        """The canonical execution of ``name`` for ``tenant`` under way now, if any."""
        return self._running.get((tenant, name))

    async def identical_run(self, running: asyncio.Future[StageRun | None], timeout_s: float
                            ) -> StageRun | None:
        """The run of an identical canonical execution under way (``running``), once it ends:
        None when it failed, was cancelled, could not be stored or read a record written since.
        ``TimeoutError`` after ``timeout_s``; the execution itself is never cancelled."""
        run = await asyncio.wait_for(asyncio.shield(running), timeout_s)
        if run is None or not await self.freshness.reads_current(run.stored.reads):
            return None
        return run

    async def join_or_run(self, key: Key, run: Callable[[float], Awaitable[StageRun]],
                          timeout_s: float) -> tuple[StageRun, bool]:
        """Join the identical execution running now under ``key``, or ``run`` it (given what is
        left of ``timeout_s``) for others to join; the run and whether it was another's."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (running := self._running.get(key)) is not None:
            joined = await self._join(running, deadline)
            if joined is not None:
                self.joined += 1
                return joined, True
            # that execution failed, was cancelled or read a record written since: run this
            # demand (or join an identical one that started meanwhile)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise DeadlineExceeded("the deadline passed while waiting for an identical "
                                   "demand's execution")
        done: asyncio.Future[StageRun | None] = loop.create_future()
        self._running[key] = done
        result = None
        try:
            result = await run(remaining)
            return result, False
        finally:
            if self._running.get(key) is done:
                del self._running[key]
            done.set_result(result if result is not None and result.storable else None)

    async def _join(self, running: asyncio.Future[StageRun | None], deadline: float
                    ) -> StageRun | None:
        """Wait for ``running`` until ``deadline`` (the wait is charged to the demand)."""
        loop = asyncio.get_running_loop()
        waiting = loop.time()
        try:
            return await self.identical_run(running, deadline - waiting)
        except TimeoutError:
            raise DeadlineExceeded("the deadline passed while waiting for an identical "
                                   "demand's execution") from None
        finally:
            charge_wait(loop.time() - waiting)


__all__ = ["Key", "SingleFlight"]
