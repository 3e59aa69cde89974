"""Adoption of a fill still running for its demand (``speculation.adoption``, dynbranch §3.3).

The demand waits for the fill to its end, bounded only by its own deadline, and runs the stage
anew only when the fill fails, stalls (no token for ``adopt_stall_s`` once allocated), or stays
queued while an engine could start the stage at once. Each rule is driven on a scripted engine
port; the whole path on simulated engines."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from services.common.values import clock
from services.common.values.errors import DeadlineExceeded, NotFound
from services.common.values.generation import Progress
from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.gateway.ports import Room
from services.gateway.speculation.adoption import Adopter
from services.gateway.speculation.branches import BranchManager
from services.gateway.speculation.state import Branch, BranchSettings, Fill, FillStep
from services.gateway.templates import TemplateRegistry, load_builtin
from services.gateway.values import AnswerSource, Demand, TextStream
from tests.gateway.local_ports import bare_manager, local_core, routing_demand

ROUTING = load_builtin("routing")
INPUTS = {"functions": json.dumps([{"name": f} for f in ("get_weather", "book_flight")]),
          "query": "What is the weather in Oslo?"}
FAST = BranchSettings(adopt_stall_s=0.2, adopt_check_s=0.01)


# -- a scripted engine port ---------------------------------------------------------------------

class _Engines:
    """``EnginePort.adopt``/``room`` played from a script: the adopt stream yields ``script``
    (then hangs), ``room`` answers ``rooms``; records whether the stream was given up."""

    def __init__(self, script: list[Progress], room: Room | None = None,
                 missing: int = 0) -> None:
        self.script = script
        self.rooms = room
        self.missing = missing  # NotFound this many times first (a start still on its way)
        self.opened = self.closed = 0

    async def adopt(self, request_id: str, text: bool, timeout_s: float
                    ) -> AsyncIterator[Progress]:
        if self.missing:
            self.missing -= 1
            raise NotFound(f"request_id: no fill {request_id!r} yet")
        self.opened += 1
        try:
            for progress in self.script:
                yield progress if text else dataclasses.replace(progress, text="")
                await asyncio.sleep(0)
            await asyncio.Event().wait()  # the fill runs on, silent
        finally:
            self.closed += 1

    def room(self, request_id: str) -> Room | None:
        return self.rooms


class _Library:
    def __init__(self) -> None:
        self.promoted: list[ReuseName] = []

    def available(self) -> bool:
        return True

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        self.promoted.append(name)
        return Served(b"shadow", 2.0)

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        return 0


NAME = reuse_name("acme", StageFingerprint("routing", "handler", 1, "m"), b"handler-input")


def _manager(engines: _Engines, settings: BranchSettings = FAST
             ) -> tuple[BranchManager, _Library, Branch, Fill, FillStep]:
    """A manager holding one open branch whose one fill's step runs (its task never ends
    unless aborted)."""
    library = _Library()
    registry = TemplateRegistry()
    registry.register(ROUTING)
    manager = bare_manager(engines, library, registry, settings)  # type: ignore[arg-type]
    branch = Branch(id="b0", tenant="acme", workflow_id="wf", template=ROUTING,
                    point=ROUTING.decisions[0], inputs={}, outputs={}, model="m")
    fill = Fill("get_weather", 0)
    step = FillStep("handler", NAME, request_id="fill-b0-0")
    fill.steps.append(step)

    async def runs() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            step.finish()  # an aborted fill's step ends without a shadow

    fill.task = asyncio.create_task(runs())
    branch.fills[fill.candidate] = fill
    branch.ready.set()
    manager.branches[branch.id] = branch
    manager._by_workflow[("acme", "wf")] = [branch]
    return manager, library, branch, fill, step


def _demand() -> Demand:
    """A demand under ``NAME`` for a stage that neither starts a subgraph nor decides."""
    return Demand(tenant="acme", request_id="d1", model="m", prompt="p", sampling=None,
                  workflow_id="wf", template_id="routing", stage_id="executor")


async def _serve(manager: BranchManager, timeout_s: float = 5.0,
                 stream: TextStream | None = None) -> Served | None:
    return await manager.handle(_demand(), ROUTING.stage("executor"), NAME, timeout_s, stream)


def _finish_after(step: FillStep, seconds: float) -> asyncio.Task[None]:
    async def later() -> None:
        await asyncio.sleep(seconds)
        step.ok = True
        step.finish()
    return asyncio.create_task(later())


# -- the rule -----------------------------------------------------------------------------------

async def test_a_fill_that_keeps_decoding_is_waited_for_past_any_flat_cap() -> None:
    """Tokens keep coming for longer than the old 1 s cap and than the stall bound: served."""
    engines = _Engines([Progress("", 0, False, raised=True)])
    manager, library, branch, fill, step = _manager(engines, BranchSettings(
        fill_wait_s=0.05, adopt_stall_s=0.3, adopt_check_s=0.01))

    async def decode() -> None:  # a token every 0.1 s for 1.2 s, then the shadow is stored
        for i in range(12):
            await asyncio.sleep(0.1)
            engines.script.append(Progress("x", i + 1, True))
        step.ok = True
        step.finish()

    engines.script = []  # streamed as the "decoder" appends: replace the stream by a live one

    async def live(request_id: str, text: bool, timeout_s: float) -> AsyncIterator[Progress]:
        engines.opened += 1
        sent = 0
        yield Progress("", 0, False, raised=True)
        while True:
            while sent < len(engines.script):
                yield engines.script[sent]
                sent += 1
            await asyncio.sleep(0.01)

    engines.adopt = live  # type: ignore[method-assign]
    task = asyncio.create_task(decode())
    started = clock.now()
    served = await _serve(manager)
    await task
    assert served is not None and library.promoted == [NAME]
    assert clock.now() - started >= 1.1
    assert manager.counters["adoptions"] == 1 and manager.counters["adoptions_served"] == 1
    assert branch.adopted_wait_s >= 1.1 and branch.wait_s == 0.0
    assert not fill.aborted
    await manager.close()


async def test_a_fill_that_stops_decoding_is_given_up_after_the_stall_bound() -> None:
    engines = _Engines([Progress("", 0, False, raised=True), Progress("a", 1, True)])
    manager, library, branch, fill, step = _manager(engines)
    started = clock.now()
    assert await _serve(manager) is None  # the demand runs anew
    assert 0.2 <= clock.now() - started < 1.0
    assert fill.aborted and library.promoted == []
    assert manager.counters["promotion_refused_stalled"] == 1
    assert branch.wait_s > 0 and engines.closed == 1
    await manager.close()


async def test_a_queued_fill_is_given_up_when_another_engine_could_start_now() -> None:
    engines = _Engines([Progress("", 0, False, raised=True)], Room(here=False, elsewhere=True))
    manager, library, _, fill, _ = _manager(engines)
    assert await _serve(manager) is None
    assert fill.aborted and manager.counters["promotion_refused_sooner"] == 1
    await manager.close()


async def test_an_unraised_queued_fill_is_given_up_when_its_own_engine_has_room() -> None:
    """A backend without priority changes keeps the fill behind canonical work: a canonical
    run there starts sooner."""
    engines = _Engines([Progress("", 0, False, raised=False)], Room(here=True, elsewhere=False))
    manager, _, _, fill, _ = _manager(engines)
    assert await _serve(manager) is None
    assert fill.aborted and manager.counters["promotion_refused_sooner"] == 1
    await manager.close()


async def test_a_raised_queued_fill_is_kept_when_only_its_own_engine_has_room() -> None:
    engines = _Engines([Progress("", 0, False, raised=True)], Room(here=True, elsewhere=False))
    manager, library, _, fill, step = _manager(engines)
    done = _finish_after(step, 0.3)  # it gets its slot: a fresh run would queue behind it
    assert await _serve(manager) is not None
    await done
    assert not fill.aborted and library.promoted == [NAME]
    assert manager.counters["promotion_refused_sooner"] == 0
    await manager.close()


async def test_the_deadline_ends_the_wait_and_gives_the_fill_back() -> None:
    engines = _Engines([Progress("", 0, False, raised=True)], Room(here=False, elsewhere=False))
    manager, _, branch, fill, step = _manager(engines)
    with pytest.raises(DeadlineExceeded):
        await _serve(manager, timeout_s=0.1)
    assert not fill.aborted and not step.done.is_set()  # still a fill: a retry may use it
    assert engines.closed == 1 and manager.counters["promotion_refused_deadline"] == 1
    assert branch.wait_s > 0
    await manager.close()


async def test_a_cancelled_demand_gives_the_fill_back() -> None:
    engines = _Engines([Progress("", 0, False, raised=True), Progress("a", 1, True)])
    manager, library, branch, fill, step = _manager(engines, BranchSettings(
        adopt_stall_s=60, adopt_check_s=0.01))
    demand = asyncio.create_task(_serve(manager))
    async with asyncio.timeout(5):
        while not engines.opened:
            await asyncio.sleep(0.005)
    demand.cancel()
    with pytest.raises(asyncio.CancelledError):
        await demand
    assert engines.closed == 1 and not fill.aborted and step.open(fill)
    done = _finish_after(step, 0.0)  # a later demand (the client's retry) is served by it
    await done
    assert await _serve(manager) is not None and library.promoted == [NAME]
    await manager.close()


async def test_a_fill_whose_start_is_still_on_its_way_is_asked_again() -> None:
    engines = _Engines([Progress("", 0, False, raised=True)], missing=3)
    manager, library, _, _, step = _manager(engines)
    done = _finish_after(step, 0.2)
    assert await _serve(manager) is not None and engines.opened == 1
    await done
    await manager.close()


async def test_a_failed_fill_sends_the_demand_anew() -> None:
    engines = _Engines([Progress("", 0, True, raised=True)])
    manager, library, _, fill, step = _manager(engines)

    async def fail() -> None:
        await asyncio.sleep(0.05)
        step.finish()  # ended without a shadow
    task = asyncio.create_task(fail())
    assert await _serve(manager) is None
    await task
    assert manager.counters["promotion_refused_fill_failed"] == 1 and library.promoted == []
    await manager.close()


async def test_identical_work_confirmed_elsewhere_ends_the_wait() -> None:
    """Another demand confirms the name (it promoted its own workflow's fill, or stored its
    execution): the adopter stops waiting and the library answers it; its fill is given back."""
    engines = _Engines([Progress("", 3, True, raised=True)])
    manager, library, branch, fill, step = _manager(engines, BranchSettings(
        adopt_stall_s=60, adopt_check_s=0.01))
    demand = asyncio.create_task(_serve(manager))
    async with asyncio.timeout(5):
        while not engines.opened:
            await asyncio.sleep(0.005)
    manager.confirmed(NAME)
    assert await demand is None and library.promoted == []
    assert manager.counters["promotion_refused_confirmed"] == 1
    assert not fill.aborted and engines.closed == 1 and step.open(fill)
    await manager.close()


# -- streaming ----------------------------------------------------------------------------------

async def test_a_streamed_demand_gets_the_text_so_far_then_the_rest() -> None:
    engines = _Engines([Progress("Hello", 1, True, raised=True), Progress(" wor", 2, True),
                        Progress("ld", 3, True)])
    manager, _, _, _, step = _manager(engines, BranchSettings(adopt_stall_s=60,
                                                              adopt_check_s=0.01))
    got: list[str] = []
    stream = TextStream(got.append)
    done = _finish_after(step, 0.1)
    assert await _serve(manager, stream=stream) is not None
    await done
    assert got == ["Hello", " wor", "ld"] and stream.source is AnswerSource.PROMOTED_FILL
    await manager.close()


async def test_a_stream_that_runs_anew_does_not_send_the_text_twice() -> None:
    engines = _Engines([Progress("Hello", 1, True, raised=True)])
    manager, _, _, _, _ = _manager(engines)
    got: list[str] = []
    stream = TextStream(got.append)
    assert await _serve(manager, stream=stream) is None  # stalled: runs anew
    assert stream.source is AnswerSource.ENGINE
    for piece in ("Hel", "lo", " world"):  # the run anew streams the same text from its start
        stream(piece)
    assert got == ["Hello", " world"]
    await manager.close()


# -- on simulated engines -----------------------------------------------------------------------

def _router(workflow: str, max_tokens: int) -> Demand:
    d = routing_demand("acme", workflow, "router", INPUTS)
    assert d.sampling is not None
    return dataclasses.replace(d, sampling=dataclasses.replace(d.sampling, max_tokens=max_tokens))


async def test_a_handler_demand_adopts_the_fill_a_short_router_left_running() -> None:
    """The router decodes 96 tokens; the handler's fill, started at the same time, decodes a
    few hundred: the handler demand adopts it and is served from it, sooner than running it."""
    async with local_core(time_scale=0.05, engines=1) as core:
        assert core.branches is not None
        await core.stages.run(_router("wf", 96), 30)
        handler = routing_demand("acme", "wf", "handler", INPUTS, choice="get_weather")
        started = clock.now()
        answer = await core.stages.run(handler, 30)
        adopted_s = clock.now() - started
        assert answer.source is AnswerSource.PROMOTED_FILL and answer.waited_s > 0
        counters = core.branches.counters
        assert counters["adoptions"] == 1 and counters["adoptions_served"] == 1
        assert core.branches.promotions.remaining_s[-1] > 0
        for key in ("stalled", "sooner", "deadline", "fill_failed"):
            assert counters[f"promotion_refused_{key}"] == 0, key
        # the floor: the same handler, run as a canonical demand on a mesh with no fill
        async with local_core(c2=False, time_scale=0.05, engines=1) as floor:
            started = clock.now()
            ran = await floor.stages.run(handler, 30)
            floor_s = clock.now() - started
        assert ran.text == answer.text and ran.source is AnswerSource.ENGINE
        print(f"adopted {adopted_s:.3f} s, floor {floor_s:.3f} s, "
              f"{ran.usage.completion_tokens} tokens")
        assert adopted_s < floor_s


async def test_a_replay_joins_the_identical_fill_that_ends_sooner() -> None:
    """A replay whose router the library answers opens its own branch; its handler adopts its
    own, just-started fill, and is answered from the library as soon as the original's
    handler is promoted (identical work elsewhere), not when its own fill would end."""
    async with local_core(time_scale=0.05, engines=2) as core:
        assert core.branches is not None
        await core.stages.run(_router("first", 96), 30)
        handler = routing_demand("acme", "first", "handler", INPUTS, choice="get_weather")
        first = asyncio.create_task(core.stages.run(handler, 30))
        replayed = await core.stages.run(_router("again", 96), 30)
        assert replayed.source is AnswerSource.LIBRARY
        again = dataclasses.replace(handler, workflow_id="again", request_id="again-handler")
        answer = await core.stages.run(again, 30)
        original = await first
        assert original.source is AnswerSource.PROMOTED_FILL
        assert answer.source is AnswerSource.LIBRARY and answer.text == original.text
        assert core.branches.counters["promotion_refused_confirmed"] >= 1


async def test_a_replay_arriving_after_its_identical_fill_was_promoted_gets_the_library() -> None:
    """The original's handler is promoted after the replay opened its branch but before the
    replay's handler arrives: that handler does not adopt its own fill (still running) but is
    answered from the library, at once."""
    async with local_core(time_scale=0.05, engines=2) as core:
        assert core.branches is not None
        await core.stages.run(_router("first", 96), 30)
        handler = routing_demand("acme", "first", "handler", INPUTS, choice="get_weather")
        first = asyncio.create_task(core.stages.run(handler, 30))
        assert (await core.stages.run(_router("again", 96), 30)).source is AnswerSource.LIBRARY
        original = await first
        assert original.source is AnswerSource.PROMOTED_FILL
        again = dataclasses.replace(handler, workflow_id="again", request_id="again-handler")
        answer = await core.stages.run(again, 30)
        assert answer.source is AnswerSource.LIBRARY and answer.text == original.text
        steps = [s for b in core.branches.branches.values() if b.workflow_id == "again"
                 for c, f in b.fills.items() if c == "get_weather" for s in f.steps]
        assert steps and not steps[0].done.is_set()  # answered before its own fill ended
        assert core.branches.counters["adoptions"] == 1  # the original's only: not adopted
        assert core.branches.counters["promotion_refused_confirmed"] >= 1


async def test_the_branch_return_counts_an_adopted_fills_saving_less_its_wait() -> None:
    """Eq. 4: a consumed fill saves its execution (G_s) less what its demand still waited; a
    wait that did not pay is W_b."""
    engines = _Engines([Progress("", 1, True, raised=True)])
    manager, _, branch, _, step = _manager(engines, BranchSettings(adopt_stall_s=60,
                                                                   adopt_check_s=0.01))
    done = _finish_after(step, 0.3)
    assert await _serve(manager) is not None  # the shadow's cost is 2.0 engine s
    await done
    assert 0.3 <= branch.adopted_wait_s < 1.0 and branch.wait_s == 0.0
    manager._report(branch, None, manager.pace.engine_per_wall(branch.model))
    await manager.close()
    admission = manager.admission
    (_, _, saved), = [r for r in admission.reports if r[0] == branch.id]  # type: ignore[attr-defined]
    assert saved == pytest.approx(2.0 - branch.adopted_wait_s)  # 1 engine s per wall s here


async def test_the_adopter_wakes_when_its_step_ends_or_the_name_is_confirmed() -> None:
    """Either event ends the wait at once, not at the next check (``adopt_check_s``)."""
    adopter = Adopter(SimpleNamespace(), BranchSettings(adopt_check_s=600, adopt_stall_s=600))
    step = FillStep("handler")  # a tool step: no engine progress to follow
    asyncio.get_running_loop().call_later(0.01, step.finish)
    assert await asyncio.wait_for(adopter.wait(step, clock.now() + 900), 5) is None
    elsewhere = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, elsewhere.set)
    running = FillStep("handler")
    why = await asyncio.wait_for(adopter.wait(running, clock.now() + 900, None, elsewhere), 5)
    assert why == "confirmed"
