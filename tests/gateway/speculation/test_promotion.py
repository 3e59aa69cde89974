"""Which fills a demand may be served from (dynbranch §3.3).

A settled exclusive branch's losers match nothing from the pick on, so a workflow whose next
branch fills a candidate the previous branch lost promotes that fill instead of counting the
loser and refusing both as ambiguous; a demand matching promotable steps of more than one fill
still promotes none. Unit (in-process core), through the SDK (real gRPC), and under hypothesis
interleavings of settlements and demands against the manager's own matching.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.trace import NoOpTracer

from services.common.pb import gateway_pb2
from services.common.values.errors import DeadlineExceeded
from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.gateway.speculation.branches import BranchManager
from services.gateway.speculation.promotion import Promotions
from services.gateway.speculation.state import Branch, BranchSettings, Fill, FillStep
from services.gateway.templates import Semantics, TemplateRegistry, load_builtin
from services.gateway.values import AnswerSource, Demand
from tests.gateway.local_ports import bare_manager, local_core, routing_demand
from tests.gateway.mesh import mesh

ROUTING = load_builtin("routing")
FUNCTIONS = ["get_weather", "book_flight", "convert_currency"]
INPUTS = {"functions": json.dumps([{"name": f} for f in FUNCTIONS]),
          "query": "Book me a flight from Oslo to Rome on Friday."}


def _demand(workflow: str, stage: str, choice: str | None = None,
            outputs: dict[str, str] | None = None) -> Demand:
    return routing_demand("acme", workflow, stage, INPUTS, choice=choice, outputs=outputs)


async def _filled(branches: BranchManager, count: int) -> list[Branch]:
    """The workflow's branches once ``count`` are open and each has its fills started."""
    for _ in range(500):
        found = list(branches.branches.values())
        if len(found) >= count and all(b.ready.is_set() for b in found):
            return found
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} branches never opened and filled")


def _by_rank(branch: Branch) -> list[str]:
    return [f.candidate for f in sorted(branch.fills.values(), key=lambda f: f.rank)]


async def test_second_branch_promotes_the_candidate_the_first_branch_lost() -> None:
    async with local_core(time_scale=0.0005) as core:
        assert core.branches is not None
        await core.stages.run(_demand("wf", "router"), 30)
        (first,) = await _filled(core.branches, 1)
        winner, loser = _by_rank(first)[:2]
        handler = await core.stages.run(_demand("wf", "handler", winner), 30)
        assert handler.source is AnswerSource.PROMOTED_FILL
        await core.stages.run(_demand("wf", "executor", winner, {"handler": handler.text}), 30)
        # The next turn at the same point: the winner is not predicted again, so the first
        # branch's loser is now this branch's first candidate (the candidate sets overlap).
        await core.stages.run(_demand("wf", "router"), 30)
        second = next(b for b in await _filled(core.branches, 2) if b is not first)
        assert loser in second.fills, (loser, _by_rank(second))
        assert (first.visit, second.visit) == (0, 1)  # admission learns selection per visit
        again = await core.stages.run(_demand("wf", "handler", loser), 30)
        assert again.source is AnswerSource.PROMOTED_FILL
        counters = core.branches.counters
        assert counters["ambiguous"] == 0 and counters["promotion_refused_ambiguous"] == 0
        assert second.fills[loser].steps[0].claimed and second.outcome == "promoted"
        assert not any(s.claimed for s in first.fills[loser].steps)
        assert counters["winners_admitted"] == 2 and counters["winners_promoted"] == 2


async def test_through_the_sdk_the_second_branch_promotes_the_overlapping_candidate() -> None:
    async with mesh(time_scale=0.02) as m:
        m.client.use_builtin("routing")

        async def call(stage: str, choice: str | None = None,
                       outputs: dict[str, str] | None = None) -> gateway_pb2.CallResponse:
            return await m.client.call_stage("routing", stage, workflow_id="wf-sdk",
                                             inputs=INPUTS, outputs=outputs, candidate=choice,
                                             offered=FUNCTIONS if choice is None else ())

        await call("router")
        (first,) = await _filled(m.branches, 1)
        winner, loser = _by_rank(first)[:2]
        handler = await call("handler", winner)
        assert handler.source == gateway_pb2.RESULT_SOURCE_PROMOTED_FILL
        await call("executor", winner, {"handler": handler.text})
        await call("router")
        second = next(b for b in await _filled(m.branches, 2) if b is not first)
        assert loser in second.fills
        again = await call("handler", loser)
        assert again.source == gateway_pb2.RESULT_SOURCE_PROMOTED_FILL
        assert m.branches.counters["ambiguous"] == 0


async def test_a_demand_matching_two_live_fills_still_promotes_none() -> None:
    """The rule itself stays: two branches, both open, each with a fill under the name."""
    manager, library = _manager()
    name = _name(0)
    _register(manager, [_branch("b0", Semantics.EXCLUSIVE, {"a": [(name, "ok")]}),
                        _branch("b1", Semantics.EXCLUSIVE, {"a": [(name, "ok")]})])
    assert await _demand_named(manager, name) is None
    assert library.promoted == [] and manager.counters["ambiguous"] == 1
    assert manager.counters.get("promotion_refused_ambiguous") == 1
    await manager.close()


# -- hypothesis: settlements and demands interleaved against the manager ---------------------

class _Library:
    """Enough of ``LibraryPort`` for the manager's matching: promotions are recorded."""

    def __init__(self) -> None:
        self.promoted: list[tuple[ReuseName, str]] = []

    def available(self) -> bool:
        return True

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        self.promoted.append((name, branch_id))
        return Served(b"shadow", 1.0)

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        return 0


def _manager() -> tuple[BranchManager, _Library]:
    library = _Library()
    registry = TemplateRegistry()
    registry.register(ROUTING)
    manager = bare_manager(None, library, registry,  # type: ignore[arg-type]
                           BranchSettings(fill_wait_s=0.001))
    return manager, library


def _register(manager: BranchManager, branches: list[Branch]) -> None:
    for branch in branches:
        manager.branches[branch.id] = branch
        manager._by_workflow.setdefault((branch.tenant, branch.workflow_id), []).append(branch)


async def _demand_named(manager: BranchManager, name: ReuseName) -> Served | None:
    """A demand of the workflow under ``name`` for a stage that neither starts a subgraph nor
    decides (so it settles and opens nothing): only matching decides what it gets."""
    d = Demand(tenant="acme", request_id=uuid.uuid4().hex, model="m", prompt="p",
               sampling=None, workflow_id="wf", template_id="routing", stage_id="executor")
    return await manager.handle(d, ROUTING.stage("executor"), name, 0.01)


def _name(i: int) -> ReuseName:
    return reuse_name("acme", StageFingerprint("routing", "handler", 1, "m"), f"in-{i}".encode())


def _branch(branch_id: str, semantics: Semantics, fills: dict[str, list[tuple[ReuseName, str]]]
            ) -> Branch:
    """A branch with its fills' steps already "ok" (shadow stored), "failed" (ended without
    one) or "running" (its fill's task still runs)."""
    point = dataclasses.replace(ROUTING.decisions[0], semantics=semantics)
    branch = Branch(id=branch_id, tenant="acme", workflow_id="wf", template=ROUTING,
                    point=point, inputs={}, outputs={}, model="m")
    for rank, (candidate, steps) in enumerate(fills.items()):
        fill = Fill(candidate, rank)
        for name, state in steps:
            step = FillStep("handler", name)
            if state != "running":
                step.ok = state == "ok"
                step.done.set()
            fill.steps.append(step)
        if any(not step.done.is_set() for step in fill.steps):
            fill.task = asyncio.create_task(asyncio.sleep(3600))
        branch.fills[candidate] = fill
    branch.ready.set()
    return branch


CANDIDATES = ["a", "b", "c"]
STEP = st.tuples(st.integers(0, 2), st.sampled_from(["ok", "ok", "failed", "running"]))
BRANCH = st.tuples(st.sampled_from([Semantics.EXCLUSIVE, Semantics.EXCLUSIVE,
                                    Semantics.INDEPENDENT]),
                   st.dictionaries(st.sampled_from(CANDIDATES),
                                   st.lists(STEP, min_size=1, max_size=2), min_size=1))
OPS = st.lists(st.one_of(st.tuples(st.just("settle"), st.integers(0, 3),
                                   st.sampled_from([*CANDIDATES, ""])),
                         st.tuples(st.just("demand"), st.integers(0, 2))), max_size=12)


class _Model:
    """The test's own account of which steps may answer a demand: open steps (not promoted,
    not failed, not in a fill aborted before the step ended) of live fills (a settled exclusive
    branch keeps only its winner's fill; anything else keeps all of them)."""

    def __init__(self, branches: list[Branch]) -> None:
        self.branches = branches
        self.settled: dict[str, str] = {}
        self.aborted: set[int] = set()
        self.claimed: set[int] = set()

    def live(self, branch: Branch) -> list[Fill]:
        if branch.id in self.settled and branch.point.semantics is Semantics.EXCLUSIVE:
            return [f for c, f in branch.fills.items() if c == self.settled[branch.id]]
        return list(branch.fills.values())

    def settle(self, branch: Branch, winner: str) -> None:
        self.settled[branch.id] = winner
        for candidate, fill in branch.fills.items():  # losers still running are aborted
            if candidate != winner and fill.task is not None:
                self.aborted.add(id(fill))

    def open_steps(self, name: ReuseName) -> list[tuple[Fill, FillStep]]:
        return [(f, s) for b in self.branches for f in self.live(b) for s in f.steps
                if s.name == name and id(s) not in self.claimed
                and (s.ok or (not s.done.is_set() and id(f) not in self.aborted))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(BRANCH, min_size=1, max_size=4), OPS)
def test_no_settled_loser_is_ever_matched_and_a_unique_live_fill_is_promoted(specs, ops) -> None:  # noqa: ANN001
    async def scenario() -> None:
        manager, library = _manager()
        names = [_name(i) for i in range(3)]
        branches = [_branch(f"b{i}", sem, {c: [(names[n], s) for n, s in steps]
                                           for c, steps in fills.items()})
                    for i, (sem, fills) in enumerate(specs)]
        _register(manager, branches)
        model = _Model(branches)
        for op, arg, *rest in ops:
            if op == "settle":
                if arg < len(branches) and branches[arg].id not in model.settled:
                    model.settle(branches[arg], rest[0])
                    manager._resolve(branches[arg], rest[0])
                continue
            name = names[arg]
            expected = model.open_steps(name)
            before = len(library.promoted)
            timed_out = False
            try:
                served = await _demand_named(manager, name)
            except DeadlineExceeded:  # it adopted a fill still running (no engine: no news)
                served, timed_out = None, True
            promoted = library.promoted[before:]
            for _, branch_id in promoted:  # never a settled exclusive branch's loser
                branch = next(b for b in branches if b.id == branch_id)
                assert any(s.name == name for f in model.live(branch) for s in f.steps), \
                    (branch_id, model.settled)
            if len(expected) == 1:
                fill, step = expected[0]
                if step.ok:
                    assert served is not None and promoted, "a unique live fill was refused"
                    model.claimed.add(id(step))
                else:  # still running: adopted until the demand's deadline, then given back
                    assert served is None and timed_out and not fill.aborted
            else:
                assert served is None and not promoted and not timed_out
        await manager.close()

    asyncio.run(scenario())


# -- feedback: what admission is told, and when ----------------------------------------------

async def test_the_selection_is_named_even_when_no_fill_ran_for_it() -> None:
    """Admission updates selection for every predicted candidate (dynbranch Algorithm 1, line
    22): a demand for a predicted candidate that was not admitted still names it."""
    async with local_core(time_scale=0.0005, top_k=1) as core:
        assert core.branches is not None
        await core.stages.run(_demand("wf", "router"), 30)
        (branch,) = await _filled(core.branches, 1)
        unfilled = next(c for c in branch.predicted if c not in branch.fills)
        await core.stages.run(_demand("wf", "handler", unfilled), 30)
        assert branch.resolved and branch.winner == "" and branch.selected == unfilled
        for _ in range(200):  # nothing can change the outcome: the final report goes out now
            if branch.reported and core.admission.reports:
                break
            await asyncio.sleep(0.005)
        assert branch.reported
        reported = [r for r in core.admission.reports if r[0] == branch.id]
        assert reported and reported[-1][1] == unfilled


async def test_the_final_report_goes_out_once_the_winner_is_promoted() -> None:
    async with local_core(time_scale=0.0005) as core:
        assert core.branches is not None
        await core.stages.run(_demand("wf", "router"), 30)
        (branch,) = await _filled(core.branches, 1)
        winner = _by_rank(branch)[0]
        handler = await core.stages.run(_demand("wf", "handler", winner), 30)
        assert handler.source is AnswerSource.PROMOTED_FILL and not branch.retired
        await core.stages.run(_demand("wf", "executor", winner, {"handler": handler.text}), 30)
        for _ in range(200):  # the losers' aborts end, the chain is promoted: final
            if len([r for r in core.admission.reports if r[0] == branch.id]) == 2:
                break
            await asyncio.sleep(0.005)
        assert branch.reported and not branch.retired  # inside the run, not at expiry
        provisional, final = [r for r in core.admission.reports if r[0] == branch.id]
        assert final[1] == winner and final[2] > 0


# -- the order of wake-ups is the order of arrival ---------------------------------------------

async def test_a_confirmed_name_wakes_its_adopting_demands_in_the_order_they_began() -> None:
    """Demands adopting one running step are woken in the order they began waiting when another
    demand confirms its name, never in the hash order of their events: the order decides which
    demand reaches the engines first at that instant, so the same run gave two results."""
    woken: list[int] = []

    class _Adopter:
        async def wait(self, step: object, deadline: float, stream: object,
                       elsewhere: asyncio.Event) -> str | None:
            await elsewhere.wait()
            woken.append(step.order)  # type: ignore[attr-defined]
            return "confirmed"

    promotions = Promotions(None, BranchSettings(), NoOpTracer(),  # type: ignore[arg-type]
                            adopter=_Adopter())  # type: ignore[arg-type]
    name = reuse_name("acme", StageFingerprint("routing", "handler", 1, "m"), b"input")
    branch = SimpleNamespace(waited=lambda _s: None)
    waits = []
    for order in range(40):
        step = SimpleNamespace(name=name, done=asyncio.Event(), order=order)
        waits.append(asyncio.create_task(promotions._adopt(
            branch, step, 60.0, None)))  # type: ignore[arg-type]
        await asyncio.sleep(0)
    promotions.confirmed(name)
    assert await asyncio.gather(*waits) == ["confirmed"] * 40
    assert woken == list(range(40))
