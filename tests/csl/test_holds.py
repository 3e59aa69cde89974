"""Fill placeholders across gateway replicas: a claim waits for a running fill's shadow, a
holder hears what became of its step, and nothing leaks across workflows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.values.errors import ResourceExhausted
from services.common.values.reads import HoldEvent
from services.common.values.reuse_name import name_key
from services.csl.async_library import AsyncSubgraphLibrary
from services.csl.holds import Hold, HoldRegistry
from tests.csl.factories import library, name, shadow


@pytest.fixture
async def alib(tmp_path: Path) -> AsyncIterator[AsyncSubgraphLibrary]:
    facade = AsyncSubgraphLibrary(library(tmp_path / "csl"))
    yield facade
    await facade.close()


async def test_claim_waits_for_the_running_fill_and_promotes_its_shadow(
        alib: AsyncSubgraphLibrary) -> None:
    hold = alib.holds.open(name_key(name(1)), "b1", "h1", "wf-1")
    waiter = asyncio.create_task(alib.claim(name(1), "wf-1", wait_s=5))
    await asyncio.sleep(0.05)
    assert not waiter.done()  # the fill still runs: the demand waits instead of executing
    assert await alib.put_shadow(shadow(name(1), branch="b1", candidate="h1", result=b"done"))
    claimed = await asyncio.wait_for(waiter, 2)
    assert claimed is not None and claimed.result == b"done"
    assert hold.events.get_nowait().kind is HoldEvent.PROMOTED  # the holder hears it


async def test_a_holder_that_gives_up_turns_waiters_into_misses_at_once(
        alib: AsyncSubgraphLibrary) -> None:
    hold = alib.holds.open(name_key(name(1)), "b1", "h1", "wf-1")
    waiter = asyncio.create_task(alib.claim(name(1), "wf-1", wait_s=30))
    await asyncio.sleep(0.05)
    alib.holds.close(hold)  # the fill failed, was aborted, or its gateway died
    assert await asyncio.wait_for(waiter, 1) is None
    assert len(alib.holds) == 0


async def test_claim_without_a_placeholder_misses_without_waiting(
        alib: AsyncSubgraphLibrary) -> None:
    assert await alib.put_shadow(shadow(name(1), branch="b1"))  # a shadow nobody holds
    assert await asyncio.wait_for(alib.claim(name(1), "wf-1", wait_s=30), 1) is None


async def test_claim_is_bounded_by_its_wait(alib: AsyncSubgraphLibrary) -> None:
    alib.holds.open(name_key(name(1)), "b1", "h1", "wf-1")
    assert await asyncio.wait_for(alib.claim(name(1), "wf-1", wait_s=0.05), 1) is None


async def test_another_workflow_never_claims_a_shadow(alib: AsyncSubgraphLibrary) -> None:
    alib.holds.open(name_key(name(1)), "b1", "h1", "wf-1")
    assert await alib.put_shadow(shadow(name(1), branch="b1"))
    assert await alib.claim(name(1), "wf-2", wait_s=0) is None
    assert alib.lookup(name(1)) is None  # still an invisible shadow
    assert await alib.claim(name(1), "wf-1", wait_s=0) is not None


async def test_settlement_tells_the_losers_holders_only(alib: AsyncSubgraphLibrary) -> None:
    winner = alib.holds.open(name_key(name(1)), "b1", "h1", "wf-1")
    loser = alib.holds.open(name_key(name(2)), "b1", "h2", "wf-1")
    await alib.discard("b1", keep_candidate="h1")
    assert loser.events.get_nowait().kind is HoldEvent.SETTLED
    assert winner.events.empty()


async def test_the_owner_promoting_its_own_shadow_tells_the_holder(
        alib: AsyncSubgraphLibrary) -> None:
    hold = alib.holds.open(name_key(name(1)), "b1", "h1", "wf-1")
    assert await alib.put_shadow(shadow(name(1), branch="b1"))
    assert await alib.promote(name(1), "b1") is not None
    assert hold.events.get_nowait().kind is HoldEvent.PROMOTED


async def test_a_scope_settlement_reaches_every_holder_of_the_workflow_only(
        alib: AsyncSubgraphLibrary) -> None:
    mine = [alib.holds.open(name_key(name(i)), "b1", f"h{i}", "wf-1") for i in range(2)]
    other = alib.holds.open(name_key(name(9)), "b7", "h1", "wf-2")
    assert alib.holds.settle_scope("wf-1", "routing", "handler", "b1", "h0") == 2
    notices = [h.events.get_nowait() for h in mine]
    assert {(n.kind, n.stage_id, n.keep_branch, n.keep_candidate) for n in notices} == {
        (HoldEvent.SETTLED, "handler", "b1", "h0")}
    assert other.events.empty()


def test_holds_are_bounded() -> None:
    holds = HoldRegistry(max_holds=1)
    holds.open(b"k1", "b1", "h1", "wf")
    with pytest.raises(ResourceExhausted):
        holds.open(b"k2", "b1", "h2", "wf")


async def test_a_settled_branch_tells_its_holders_in_the_order_they_opened() -> None:
    """Who hears first that a branch settled is the order its holds opened, not the hash order
    of their keys (or of the holds, for a scope): the first woken reaches the engines first."""
    holds = HoldRegistry()
    opened = [holds.open(name_key(name(i)), "b1", f"c{i}", "wf-1") for i in range(40)]
    woken: list[str] = []

    async def hear(hold: Hold) -> None:
        await hold.changed.wait()
        woken.append(hold.candidate)
    waits = [asyncio.create_task(hear(h)) for h in opened]
    await asyncio.sleep(0)
    assert holds.settled("b1", "") == 40
    await asyncio.gather(*waits)
    assert woken == [h.candidate for h in opened]
    told = [holds.open(name_key(name(i)), f"b{i}", f"c{i}", "wf-2") for i in range(40)]
    assert holds.settle_scope("wf-2", "routing", "handler", "b0", "c0") == 40
    assert [h.events.get_nowait().keep_branch for h in told] == ["b0"] * 40
