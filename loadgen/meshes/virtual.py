"""The experiment mesh on a virtual clock: simulated time that does not count the mesh's own CPU.

The live mesh (``loadgen.meshes.live``) runs every service as a ``grpc.aio`` server
and converts wall seconds to simulated seconds by the engines' time scale, so every millisecond of
Python, gRPC and machine noise is multiplied by ``1 / time_scale``. Here the same production code
runs in one process on a stdlib event loop whose clock is virtual (``aiotools.VirtualClock``, as the
LADS replay): the gateway core exactly as ``services.gateway.server.build_core`` wires it
(templates, C1, C2, the predictors, the retrieve tool over the LMDB corpus), the subgraph library
(``SubgraphLibrary`` behind ``AsyncSubgraphLibrary``), the admission policy
(``services.admission.policies.build_policy`` over a ``LoadTracker`` fed with the engines' load) and
the simulated engines (``SimBackend`` at time scale 1: one virtual second is one simulated second).
The client is the SDK itself, its stub swapped for an in-process one that converts requests with the
servicer's own functions.

Time passes only where the system would spend it: the engines' simulated steps, the harness's
arrivals and user waits, timers the services set (deadlines, fill waits, TTLs), and one modelled
cost per cross-service call, ``hop_s`` (a ``grpc.aio`` round trip on loopback as ``dynbranch
bench overhead`` measures it; ``DEFAULT_HOP_S``). Nothing may run on a thread: a thread's time
would be nobody's, and the loop's clock would jump past it to the next timer. So every thread
pool is replaced by ``InlineExecutor`` (the loop's default executor, the library's writer).

What this leaves out, and the live mesh keeps: transport failures and the engine pool's
``GenerateMux`` framing, CPU contention between services, and each service's own CPU time. Routing
is the same ``Router`` over the engines' load reports, read when a generation is routed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.trace import NoOpTracer

from services.admission import (
    AdmissionPolicy,
    AdmissionSettings,
    BranchOutcome,
    EngineLoad,
    LoadTracker,
    PricedController,
    build_policy,
    estimate_fields,
    proposal,
    state_store,
)
from services.common.pb import gateway_pb2
from services.common.values.candidates import FillEstimate, RankedCandidate
from services.common.values.generation import LoadReport
from services.csl import AsyncSubgraphLibrary, LibraryOptions, SubgraphLibrary
from services.engine_agent import SimBackend
from services.gateway import (
    LOCAL_TENANT,
    DynbranchClient,
    GatewayCore,
    GatewaySettings,
    InprocEngines,
    InprocLibrary,
    TemplateRegistry,
    answer_to_proto,
    build_core,
    demand_from_proto,
    hop,
)

log = logging.getLogger(__name__)

#: Modelled cost of one cross-service call, in simulated seconds: DESIGN.md §6's figure for one
#: ``grpc.aio`` round trip on loopback. ``dynbranch bench overhead --quick`` measured a bare
#: echo's p50 at 0.71 and 1.00 ms in two runs on this noisy 2-core machine; between 0.5 and 1.0
#: ms the matrix's full/floor ratios move by at most 0.001 (``--hop-ms``).
DEFAULT_HOP_S = 0.0005
#: Seconds between the engines' load reports to admission (``AdmissionSettings.load_interval_s``'s
#: default, the agents' stream interval).
LOAD_INTERVAL_S = 0.1


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """An executor that runs each submission at once on the caller's thread (no thread starts).

    On a virtual clock, work handed to a thread would take no virtual time yet let the clock
    jump to the next timer while it runs; run inline it takes none and lets nothing jump."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
               ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting caller
            future.set_exception(exc)
        return future


# -- admission ----------------------------------------------------------------------------------

class VirtualAdmission:
    """``AdmissionPort`` over an in-process admission policy, timed on the loop's clock."""

    def __init__(self, policy: AdmissionPolicy, hop_s: float) -> None:
        self.policy = policy
        self.hop_s = hop_s

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def open_branch(self, branch_id: str, coordinate: str, branch_class: str,
                          model: str) -> bool:
        await hop(self.hop_s)
        return self.policy.open_branch(branch_id, coordinate, branch_class, model,
                                       self._now()).open

    async def admit(self, branch_id: str, coordinate: str, candidates: Sequence[RankedCandidate],
                    model: str, window_s: float = 0.0,
                    estimates: Mapping[str, FillEstimate] | None = None,
                    visit: int = 0) -> list[str]:
        await hop(self.hop_s)
        proposals = [proposal(c.candidate, c.rank, c.probability,
                              estimate_fields(c.candidate, estimates, window_s))
                     for c in candidates]
        return list(self.policy.admit(branch_id, coordinate, proposals, model, self._now(),
                                      window_s=window_s, visit=visit).admitted)

    async def report(self, branch_id: str, coordinate: str, selected: str, saved_s: float,
                     fill_cost_s: float, setup_s: float, final: bool = True,
                     consumed: Sequence[str] = (), wait_s: float = 0.0) -> None:
        await hop(self.hop_s)
        self.policy.report(BranchOutcome(branch_id, selected, max(saved_s, 0.0),
                                   max(fill_cost_s, 0.0), max(setup_s, 0.0), final=final,
                                   consumed=tuple(consumed), wait_s=max(wait_s, 0.0)))


async def follow_load(tracker: LoadTracker, backends: Sequence[SimBackend],
                      interval_s: float = LOAD_INTERVAL_S) -> None:
    """Feed every engine's load report to admission's tracker every ``interval_s`` (as the
    agents' ``WatchLoad`` streams do), probing the tracker between them; runs until cancelled."""
    loop = asyncio.get_running_loop()
    for seq in itertools.count():
        now = loop.time()
        for b in backends:
            r: LoadReport = b.load()
            tracker.observe(EngineLoad(b.engine_id, b.info.model, seq, now, r.running,
                                       r.waiting, r.max_running, r.kv_blocks_used,
                                       r.kv_blocks_total, r.fill_running, r.fill_kv_blocks,
                                       r.block_size), now)
        tracker.probe(now)
        await asyncio.sleep(interval_s)


# -- the client ---------------------------------------------------------------------------------

class InProcessStub:
    """The parts of ``GatewayStub`` the SDK calls, answered by the core in-process: requests
    are converted by the servicer's own functions, one hop each way counted once."""

    def __init__(self, core: GatewayCore, hop_s: float, deadline_s: float) -> None:
        self.core, self.hop_s, self.deadline_s = core, hop_s, deadline_s

    async def Call(self, request: gateway_pb2.CallRequest, timeout: float | None = None,  # noqa: N802
                   metadata: Any = None) -> gateway_pb2.CallResponse:
        await hop(self.hop_s)
        demand = demand_from_proto(self.core, LOCAL_TENANT, request.demand)
        answer = await self.core.call(demand, min(timeout or self.deadline_s, self.deadline_s))
        return answer_to_proto(answer)

    async def SettleBranch(self, request: gateway_pb2.SettleBranchRequest,  # noqa: N802
                           timeout: float | None = None, metadata: Any = None
                           ) -> gateway_pb2.SettleBranchResponse:
        await hop(self.hop_s)
        settled = self.core.settle(LOCAL_TENANT, request.workflow_id, request.coordinate,
                                   request.selected)
        return gateway_pb2.SettleBranchResponse(settled=settled)


class InProcessClient(DynbranchClient):
    """The SDK over ``InProcessStub``: renders exactly as the gRPC client does."""

    def __init__(self, core: GatewayCore, hop_s: float, timeout_s: float = 600.0) -> None:
        # DynbranchClient.__init__ opens a channel; this client has none.
        self.stub = InProcessStub(core, hop_s, timeout_s)  # type: ignore[assignment]
        self.metadata = ()
        self.timeout_s = timeout_s
        self.templates = TemplateRegistry()

    async def close(self) -> None:
        """Nothing to close."""


# -- the mesh -----------------------------------------------------------------------------------

@dataclass(slots=True)
class _Owner:
    """What ``build_core`` needs of a runtime: close hooks and a tracer."""

    tracer: Any = field(default_factory=NoOpTracer)
    closers: list[Callable[[], Any]] = field(default_factory=list)

    def on_close(self, fn: Callable[[], Any]) -> None:
        self.closers.append(fn)

    async def close(self) -> None:
        for fn in reversed(self.closers):
            try:
                await fn()
            except Exception:  # noqa: BLE001 - close the rest; reported
                log.exception("virtual mesh: a close hook failed")


@dataclass(slots=True)
class VirtualMesh:
    """A running virtual mesh: the core, its client, the engines and the admission policy."""

    core: GatewayCore
    client: InProcessClient
    backends: list[SimBackend]
    policy: AdmissionPolicy | None
    hop_s: float


@contextlib.asynccontextmanager
async def virtual_mesh(settings: GatewaySettings, folder: Path, *, engines: int, model: str,
                       preset: str, admission: AdmissionSettings | None,
                       hop_s: float = DEFAULT_HOP_S,
                       state_out: Path | None = None,
                       output_len_range: tuple[int, int] | None = None
                       ) -> AsyncIterator[VirtualMesh]:
    """Start the mesh on the running loop, which must be a stdlib loop under ``VirtualClock``
    with ``InlineExecutor`` as its default executor (``run_virtual``). ``settings``' durations
    are simulated seconds; ``admission`` None keeps the gateway's in-process fixed policy. A
    priced policy starts from ``admission.state_path`` when that file exists (it is only read:
    a measured run never writes what it learned back) and saves what it learned to
    ``state_out`` at the end, when given. ``output_len_range`` (None: the sim's own) is where
    the engines' outputs end, in tokens, when no cap comes first."""
    loop = asyncio.get_running_loop()
    if not hasattr(loop, "_selector"):
        raise RuntimeError("the virtual mesh needs a stdlib event loop (run_virtual)")
    owner = _Owner()
    lengths = {"output_len_range": output_len_range} if output_len_range else {}
    backends = [SimBackend(preset, time_scale=1.0, engine_id=f"engine-{i}", model=model,
                           clock=loop.time, **lengths) for i in range(engines)]
    tasks: list[asyncio.Task[None]] = []
    try:
        for b in backends:
            await b.start()
            owner.on_close(b.close)
        lib = AsyncSubgraphLibrary(SubgraphLibrary(str(folder / "csl"), LibraryOptions(
            sync=False), clock=loop.time), executor=InlineExecutor())
        owner.on_close(lib.close)
        policy = None
        port: Any = None
        if admission is not None:
            tracker = LoadTracker(window_s=admission.window_s, fill_share=admission.fill_share,
                                  kv_budget_share=admission.kv_budget_share,
                                  max_age_s=admission.max_age_s)
            policy = build_policy(admission, tracker)
            if isinstance(policy, PricedController):
                if admission.state_path and (saved := state_store.load(admission.state_path)):
                    policy.restore(saved)
                if state_out is not None:
                    learned = policy
                    owner.on_close(lambda: _save(state_out, learned))
            port = VirtualAdmission(policy, hop_s)
            tasks.append(asyncio.create_task(follow_load(tracker, backends,
                                                         admission.load_interval_s),
                                             name="load"))
        pool = InprocEngines(backends, hop_s)
        core = await build_core(settings, owner, pool,  # type: ignore[arg-type]
                                library=InprocLibrary(lib, hop_s), admission=port)
        client = InProcessClient(core, hop_s)
        yield VirtualMesh(core, client, backends, policy, hop_s)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await owner.close()


async def _save(path: Path, policy: PricedController) -> None:
    state_store.save(path, policy.state())


def run_virtual(main: Callable[[], Any]) -> Any:
    """Run the coroutine ``main()`` on a fresh stdlib event loop under a virtual clock, with
    every executor inline; returns its result. Safe to call from a worker thread."""
    from aiotools import VirtualClock

    async def wrapped() -> Any:
        with VirtualClock().patch_loop():
            return await main()

    loop = asyncio.SelectorEventLoop()  # the virtual clock patches a stdlib loop, not uvloop
    loop.set_default_executor(InlineExecutor())
    try:
        return loop.run_until_complete(wrapped())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


__all__ = ["DEFAULT_HOP_S", "InProcessClient", "InlineExecutor", "VirtualAdmission",
           "VirtualMesh", "follow_load", "run_virtual",
           "virtual_mesh"]
