"""Adoption under random interleavings (DESIGN.md §5.1, §5.2, §5.6), on a virtual clock.

Two tenants run the same workflow id with an exclusive branch each, filling the same two
candidates under the same reuse names (a shared stage: only the workflow's scope keeps tenants
apart). Hypothesis interleaves fill progress, fills ending with or without a shadow, handler
demands with their own deadlines, demand cancellations, explicit settlements and the passing of
time. Whatever the order: no shadow serves two demands, a served demand gets exactly the output
its own tenant's fill of its own candidate produced (the floor's output for its name: never a
loser's, never another tenant's), and no demand outlives its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loadgen.meshes.virtual import run_virtual
from services.common.values import clock
from services.common.values.errors import DeadlineExceeded, NotFound
from services.common.values.generation import Progress
from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.gateway.ports import Room
from services.gateway.speculation.branches import BranchManager
from services.gateway.speculation.state import Branch, BranchSettings, Fill, FillStep
from services.gateway.templates import TemplateRegistry, load_builtin
from services.gateway.values import Demand
from tests.gateway.local_ports import bare_manager

ROUTING = load_builtin("routing")
TENANTS = ("acme", "other")
CANDIDATES = ("get_weather", "book_flight")
#: One name per candidate, the same for both tenants (a stage shared across tenants).
NAMES = {c: reuse_name("", StageFingerprint("routing", "handler", 1, "m"), c.encode(),
                       shared=True) for c in CANDIDATES}


def floor_output(tenant: str, candidate: str) -> bytes:
    """What the canonical (floor) run of ``tenant``'s handler for ``candidate`` returns."""
    return f"{tenant}:{candidate}".encode()


@dataclass
class _Run:
    """One fill's generation as its engine sees it."""

    progress: list[Progress] = field(default_factory=list)
    ended: bool = False
    ok: bool = False
    moved: asyncio.Event = field(default_factory=asyncio.Event)
    end: asyncio.Event = field(default_factory=asyncio.Event)


class _World:
    """The engines (``adopt``/``room``) and the library (shadows by branch) of one example."""

    def __init__(self, room: Room) -> None:
        self.runs: dict[str, _Run] = {}
        self.rooms = room
        self.shadows: dict[tuple[ReuseName, str], bytes] = {}
        self.promoted: list[tuple[ReuseName, str]] = []

    async def adopt(self, request_id: str, text: bool, timeout_s: float
                    ) -> AsyncIterator[Progress]:
        run = self.runs.get(request_id)
        if run is None or run.ended:
            raise NotFound(f"request_id: no fill {request_id!r} runs")
        sent = len(run.progress)
        tokens = sent
        yield Progress("", tokens, tokens > 0, raised=True)
        while not run.ended:
            run.moved.clear()
            await run.moved.wait()
            while sent < len(run.progress):
                yield run.progress[sent]
                sent += 1
        yield Progress("", len(run.progress), bool(run.progress), finished=True)

    def room(self, request_id: str) -> Room | None:
        return self.rooms if request_id in self.runs else None

    # LibraryPort, the part the manager uses
    def available(self) -> bool:
        return True

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        result = self.shadows.pop((name, branch_id), None)  # a shadow is consumed once
        if result is None:
            return None
        self.promoted.append((name, branch_id))
        return Served(result, 1.0)

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        return 0


def _open_branch(manager: BranchManager, world: _World, tenant: str) -> None:
    branch = Branch(id=f"b-{tenant}", tenant=tenant, workflow_id="wf", template=ROUTING,
                    point=ROUTING.decisions[0], inputs={}, outputs={}, model="m")
    for rank, candidate in enumerate(CANDIDATES):
        fill = Fill(candidate, rank)
        rid = f"fill-{tenant}-{candidate}"
        step = FillStep("handler", NAMES[candidate], request_id=rid)
        fill.steps.append(step)
        run = world.runs[rid] = _Run()
        fill.task = asyncio.create_task(_fill(world, run, step, branch, candidate))
        branch.fills[candidate] = fill
    branch.ready.set()
    manager.branches[branch.id] = branch
    manager._by_workflow.setdefault((tenant, "wf"), []).append(branch)


async def _fill(world: _World, run: _Run, step: FillStep, branch: Branch,
                candidate: str) -> None:
    """A fill's task: runs until the script ends it; an abort cancels it (no shadow)."""
    try:
        await run.end.wait()
        if run.ok:
            world.shadows[(NAMES[candidate], branch.id)] = floor_output(branch.tenant,
                                                                        candidate)
            step.ok = True
    finally:
        run.ended = True
        run.moved.set()
        step.finish()


@dataclass
class _Call:
    tenant: str
    candidate: str
    timeout_s: float
    started: float
    task: asyncio.Task[Served | None]
    ended: float = -1.0


OPS = st.lists(st.one_of(
    st.tuples(st.just("progress"), st.integers(0, 3)),
    st.tuples(st.just("finish"), st.integers(0, 3)),
    st.tuples(st.just("fail"), st.integers(0, 3)),
    st.tuples(st.just("demand"), st.integers(0, 3), st.sampled_from([0.5, 2.0, 30.0])),
    st.tuples(st.just("cancel"), st.integers(0, 7)),
    st.tuples(st.just("settle"), st.integers(0, 1), st.sampled_from(["", *CANDIDATES])),
    st.tuples(st.just("tick"), st.sampled_from([0.001, 0.3, 1.5])),
), max_size=24)
ROOMS = st.sampled_from([Room(False, False), Room(True, False), Room(False, True)])


async def _scenario(ops: list[tuple], room: Room) -> None:  # type: ignore[type-arg]
    world = _World(room)
    registry = TemplateRegistry()
    registry.register(ROUTING)
    manager = bare_manager(world, world, registry,  # type: ignore[arg-type]
                           BranchSettings(adopt_stall_s=1.0, adopt_check_s=0.05))
    for tenant in TENANTS:
        _open_branch(manager, world, tenant)
    calls: list[_Call] = []

    def run_of(i: int) -> _Run:
        return world.runs[f"fill-{TENANTS[i // 2]}-{CANDIDATES[i % 2]}"]

    for op, *args in ops:
        if op == "progress":
            run = run_of(args[0])
            if not run.ended:
                run.progress.append(Progress("t", len(run.progress) + 1, True))
                run.moved.set()
        elif op in ("finish", "fail"):
            run = run_of(args[0])
            run.ok = op == "finish"
            run.end.set()
        elif op == "demand":
            tenant, candidate = TENANTS[args[0] // 2], CANDIDATES[args[0] % 2]
            d = Demand(tenant=tenant, request_id=f"d{len(calls)}", model="m", prompt="p",
                       sampling=None, workflow_id="wf", template_id="routing",
                       stage_id="handler")
            task = asyncio.create_task(manager.handle(d, ROUTING.stage("handler"),
                                                      NAMES[candidate], args[1]))
            call = _Call(tenant, candidate, args[1], clock.now(), task)
            task.add_done_callback(lambda _t, c=call: setattr(c, "ended", clock.now()))
            calls.append(call)
        elif op == "cancel":
            if args[0] < len(calls):
                calls[args[0]].task.cancel()
        elif op == "settle":
            manager.settle(TENANTS[args[0]], "wf", "routing/router", args[1])
        await asyncio.sleep(args[0] if op == "tick" else 0)
    await asyncio.sleep(60)  # past every deadline: every demand has ended
    for call in calls:
        assert call.task.done(), "a demand outlived its deadline"
        assert call.ended - call.started <= call.timeout_s + 1e-6, "waited past its deadline"
        if call.task.cancelled():
            continue
        try:
            served = call.task.result()
        except DeadlineExceeded:
            continue
        if served is not None:  # never a loser's, never another tenant's: the floor's
            assert served.result == floor_output(call.tenant, call.candidate)
    assert len(world.promoted) == len(set(world.promoted))
    served_count = sum(1 for c in calls if not c.task.cancelled()
                       and c.task.exception() is None and c.task.result() is not None)
    assert served_count == len(world.promoted), "a demand was served without a promotion"
    for run in world.runs.values():
        run.end.set()
    await manager.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, ROOMS)
# two demands adopt one fill; one's deadline falls within the loop's clock resolution (1 ms on
# the virtual clock) of a wake-up: its adopter used to spin there, the clock never moving
@example(ops=[("demand", 2, 30.0), ("tick", 0.001), ("progress", 0), ("progress", 1),
              ("demand", 3, 0.5), ("demand", 0, 2.0), ("demand", 2, 2.0)],
         room=Room(here=False, elsewhere=False))
def test_adoption_never_serves_twice_across_tenants_or_past_a_deadline(ops, room) -> None:  # noqa: ANN001
    run_virtual(lambda: _scenario(ops, room))
