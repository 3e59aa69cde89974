"""Branch and fill state (``speculation.state``): which fills stay live after a resolution,
exact and unambiguous matching, which steps can still serve a demand, and workflow scopes."""

from __future__ import annotations

import asyncio

from services.gateway.speculation.state import Branch, Fill, FillStep, producer_id, scope_of
from services.gateway.templates import Semantics, load_builtin
from tests.csl.factories import name


def branch() -> Branch:
    template = load_builtin("routing")
    point = template.decisions[0]
    return Branch(id="b1", tenant="acme", workflow_id="wf", template=template, point=point,
                  inputs={}, outputs={}, model="m")


def fill(candidate: str, *names: int) -> Fill:
    return Fill(candidate, 0, steps=[FillStep("handler", name(n)) for n in names])


def test_an_exclusive_branch_keeps_only_its_winners_fill_once_resolved() -> None:
    b = branch()
    assert b.exclusive and b.point.semantics is Semantics.EXCLUSIVE
    b.fills = {"x": fill("x", 1), "y": fill("y", 2)}
    assert len(b.live_fills()) == 2
    b.resolved, b.winner = True, "y"
    assert [f.candidate for f in b.live_fills()] == ["y"]
    assert b.match(name(1)) is None and b.match(name(2)) is not None
    assert b.first_stages() == {"handler"}


def test_an_ambiguous_match_is_a_miss_never_a_guess() -> None:
    b = branch()
    b.fills = {"x": fill("x", 7), "y": fill("y", 7)}
    assert len(b.matches(name(7))) == 2 and b.match(name(7)) is None


async def test_only_open_steps_can_still_serve_a_demand() -> None:
    b = branch()
    stored, failed, running = fill("x", 1), fill("y", 1), fill("z", 1)
    stored.steps[0].ok = True
    failed.steps[0].done = asyncio.Event()
    failed.steps[0].done.set()  # ended without a shadow
    running.aborted = True  # cut short before it stored one
    b.fills = {"x": stored, "y": failed, "z": running}
    assert [f.candidate for f, _ in b.promotable(name(1))] == ["x"]
    stored.steps[0].claimed = True
    assert b.promotable(name(1)) == []


def test_scopes_and_producers_name_their_workflow_and_step() -> None:
    assert scope_of("acme", "wf") != scope_of("other", "wf") != scope_of("acme", "wf2")
    assert producer_id("b1", "h1", 0) == "fill/b1/h1/0"


def test_a_step_its_workflow_passed_is_not_open_and_a_fill_passed_everywhere_is_outrun() -> None:
    """Once an exclusive branch resolved, the workflow's demand at a stage passes the winner's
    step there (served by it or not): a stored shadow nobody will ask for is not open, so the
    final report need not wait for retirement. Demands before the resolution pass nothing; an
    independent branch's fills run beside demands at their stages, so none passes them."""
    b = branch()  # routing: handler, executor
    f = Fill("x", 0, steps=[FillStep("handler", name(1))])
    f.steps[0].ok = True  # a stored shadow
    b.fills = {"x": f}
    b.passed_by("handler")  # before the branch resolved: counts for nothing
    assert b.step_open(f, f.steps[0]) and not b.outrun(f)
    b.resolved, b.winner = True, "x"
    b.passed_by("handler")
    assert not b.step_open(f, f.steps[0]) and b.promotable(name(1)) == []
    assert not b.outrun(f)  # its executor step may still serve the next demand
    b.passed_by("executor")
    assert b.outrun(f)
    offer = load_builtin("hci")
    side = Branch(id="b2", tenant="acme", workflow_id="wf", template=offer,
                  point=offer.decisions[0], inputs={}, outputs={}, model="m")
    g = Fill("y", 0, steps=[FillStep("fulfil", name(2))])
    g.steps[0].ok = True
    side.fills, side.resolved, side.winner = {"y": g}, True, "y"
    side.passed_by("fulfil")
    assert side.step_open(g, g.steps[0]) and not side.outrun(g)
